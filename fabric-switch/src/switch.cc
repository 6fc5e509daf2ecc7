// SPDX-License-Identifier: GPL-2.0-or-later
// Packet handling: forwarding by the LFT and MFT, directed-route SMPs
// (IBA 14.2.2), and the replies of the switch's own agents.
#include "switch.hh"

namespace pib::fabric {

using namespace pib::iba;

namespace {

bool isMulticast(uint16_t lid) {
    return lid >= 0xc000 && lid < 0xffff;
}

} // namespace

Switch::Switch(SwitchConfig config)
    : config_(std::move(config)), ports_(config_.ports + 1), lft_(kLftCap, 0xff), mft_(kMftCap) {
    // Port 0 is the switch itself: always up, its state is the switch's.
    ports_[0].linkUp = true;
    ports_[0].state = kStateInit;
    ports_[0].pkeys[0] = 0xffff;
}

void Switch::dropped(unsigned port, const char *why, unsigned a, unsigned b) {
    if (dropLog_)
        dropLog_("port " + std::to_string(port) + ": dropped: " + why + " (" + std::to_string(a) +
                 ", " + std::to_string(b) + ")");
}

std::vector<Transmit> Switch::linkChanged(unsigned port, bool up) {
    if (port < 1 || port > config_.ports)
        return {};
    SwitchPort &p = ports_[port];
    if (p.linkUp == up)
        return {};
    p.linkUp = up;
    // A new link trains to INIT; a lost one goes DOWN. Either way the SM
    // learns of it through SwitchInfo.PortStateChange.
    p.state = up ? kStateInit : kStateDown;
    if (!up)
        ++p.counters.linkDowned;
    portStateChange_ = true;
    return trap128();
}

void Switch::transmit(std::vector<Transmit> &out, unsigned port, std::vector<uint8_t> bytes,
                      bool management) {
    SwitchPort &p = ports_[port];
    // Data needs an ACTIVE port; subnet management (VL15) only a live link.
    const bool open = p.linkUp && (management ? p.state >= kStateInit : p.state == kStateActive);
    if (!open) {
        if (management)
            ++p.counters.vl15Dropped;
        else
            ++p.counters.xmitDiscards;
        return;
    }
    ++p.counters.xmitPackets;
    p.counters.xmitData += bytes.size() / 4;
    out.push_back({port, std::move(bytes)});
}

std::vector<Transmit> Switch::receive(unsigned in, std::span<const uint8_t> bytes) {
    std::vector<Transmit> out;
    if (in < 1 || in > config_.ports || !ports_[in].linkUp)
        return out;
    SwitchPort &port = ports_[in];
    iba::ParseError error;
    auto packet = iba::parse(bytes, &error);
    if (!packet) {
        ++port.counters.rcvErrors;
        dropped(in, iba::toString(error));
        return out;
    }
    ++port.counters.rcvPackets;
    port.counters.rcvData += bytes.size() / 4;
    const bool smp = packet->bth.destQp == 0 && packet->payload.size() == kMadSize;
    if (smp && packet->payload[1] == kClassSmpDirected)
        return directedRoute(in, std::move(*packet));
    // Anything but subnet management needs a port the SM has made ACTIVE.
    if (!smp && port.state != kStateActive) {
        ++port.counters.rcvErrors;
        dropped(in, "data on a port that is not ACTIVE, state", port.state);
        return out;
    }
    if (packet->lrh.dlid == lid_ && lid_ != 0 && packet->bth.destQp <= 1)
        return toSwitch(in, std::move(*packet));
    return forward(in, *packet, bytes);
}

std::vector<Transmit> Switch::forward(unsigned in, const iba::Packet &packet,
                                      std::span<const uint8_t> bytes) {
    std::vector<Transmit> out;
    const uint16_t dlid = packet.lrh.dlid;
    const bool management = packet.bth.destQp == 0;
    std::vector<uint8_t> copy(bytes.begin(), bytes.end());
    if (isMulticast(dlid)) {
        const auto &masks = mft_[dlid - 0xc000];
        for (unsigned port = 1; port <= config_.ports; ++port)
            if (port != in && masks[port / 16] & (1u << (port % 16)))
                transmit(out, port, copy, management);
        return out;
    }
    const unsigned port = dlid < kLftCap ? lft_[dlid] : 0xff;
    if (port < 1 || port > config_.ports) {
        ++ports_[in].counters.xmitDiscards; // no route: counted at the ingress
        return out;
    }
    transmit(out, port, std::move(copy), management);
    return out;
}

// IBA 14.2.2: a DR SMP travels by the port numbers in its initial path,
// records the ports it came in by in its return path, and comes back that
// way. The hop pointer moves as the kernel's smi.c and every HCA expect.
std::vector<Transmit> Switch::directedRoute(unsigned in, iba::Packet packet) {
    std::vector<Transmit> out;
    Mad mad(packet.payload);
    const unsigned hops = mad.hopCount();
    unsigned hop = mad.hopPointer();
    auto send = [&](unsigned port) {
        if (port < 1 || port > config_.ports) {
            ++ports_[in].counters.vl15Dropped;
            dropped(in, "DR SMP to a port that does not exist", port, hop);
            return;
        }
        packet.lrh.vl = 15;
        transmit(out, port, iba::build(packet), true);
    };
    if (hops == 0 || hops > 63 || hop == 0) {
        ++ports_[in].counters.vl15Dropped;
        dropped(in, "DR SMP with hop pointer/count", hop, hops);
        return out;
    }
    if (!mad.returning()) {
        if (hop > hops) {
            ++ports_[in].counters.vl15Dropped;
            dropped(in, "outgoing DR SMP with hop pointer/count", hop, hops);
            return out;
        }
        mad.setReturnPath(hop, static_cast<uint8_t>(in));
        if (hop < hops) { // pass it on
            mad.setHopPointer(static_cast<uint8_t>(hop + 1));
            send(mad.initialPath(hop + 1));
            return out;
        }
        // The end of the path: this switch's SMA answers, if the SMP is
        // addressed to it (a permissive DrDLID; LID-routed tails are not
        // supported and are dropped).
        if (mad.drDlid() != iba::kPermissiveLid) {
            ++ports_[in].counters.vl15Dropped;
            dropped(in, "DR SMP with a LID-routed tail, DrDLID", mad.drDlid());
            return out;
        }
        sma(mad, in);
        mad.setReturning(true);
        // The responder stands at hop count + 1 and steps back.
        mad.setHopPointer(static_cast<uint8_t>(hops));
        send(mad.returnPath(hops));
        return out;
    }
    // Returning: step back along the recorded path.
    if (hop < 2 || hop > hops) {
        ++ports_[in].counters.vl15Dropped;
        dropped(in, "returning DR SMP with hop pointer/count", hop, hops);
        return out;
    }
    mad.setHopPointer(static_cast<uint8_t>(hop - 1));
    send(mad.returnPath(hop - 1));
    return out;
}

std::vector<Transmit> Switch::toSwitch(unsigned in, iba::Packet packet) {
    if (packet.payload.size() != kMadSize)
        return {};
    Mad mad(packet.payload);
    if (packet.bth.destQp == 0 && mad.mgmtClass() == kClassSmpLid && mad.method() == kTrapRepress)
        return {}; // the SM saw our trap; we send each only once, so nothing to stop
    if (packet.bth.destQp == 0 && mad.mgmtClass() == kClassSmpLid)
        sma(mad, in);
    else if (packet.bth.destQp == 1 && mad.mgmtClass() == kClassPerfMgt)
        pma(mad);
    else
        return {};
    return reply(packet, packet.payload, in);
}

// A GetResp to a LID-routed request, back to its sender.
std::vector<Transmit> Switch::reply(const iba::Packet &request, std::vector<uint8_t> mad,
                                    unsigned out) {
    iba::Packet p;
    p.lrh.vl = request.bth.destQp == 0 ? 15 : 0;
    p.lrh.sl = request.lrh.sl;
    p.lrh.dlid = request.lrh.slid;
    p.lrh.slid = lid_;
    p.bth.opcode = iba::kUdSendOnly;
    p.bth.pkey = request.bth.pkey;
    p.bth.destQp = request.deth ? request.deth->srcQp : 0;
    p.deth = iba::Deth{request.bth.destQp == 1 ? iba::kQp1Qkey : 0, request.bth.destQp};
    p.payload = std::move(mad);
    std::vector<Transmit> result;
    // Replies follow the LFT like any packet; with no route yet they go
    // back the way the request came.
    const unsigned port = p.lrh.dlid < kLftCap ? lft_[p.lrh.dlid] : 0xff;
    transmit(result, port >= 1 && port <= config_.ports ? port : out, iba::build(p),
             request.bth.destQp == 0);
    return result;
}

} // namespace pib::fabric
