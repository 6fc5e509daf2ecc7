// SPDX-License-Identifier: GPL-2.0-or-later
// Packet handling: forwarding by the LFT and MFT, directed-route SMPs
// (IBA 14.2.2), and the replies of the switch's own agents.
#include "switch.hh"

#include <algorithm>

#include "addressing.hh"

namespace pib::fabric {

using namespace pib::iba;

const char *stateName(uint8_t state) {
    static constexpr const char *kNames[] = {"NOP", "DOWN", "INIT", "ARMED", "ACTIVE"};
    return state < std::size(kNames) ? kNames[state] : "?";
}

Switch::Switch(SwitchConfig config) : config_(std::move(config)), ports_(config_.ports + 1) {
    // Port 0 is the switch itself: always up, its state is the switch's.
    ports_[0].linkUp = true;
    ports_[0].state = kPortStateInit;
    ports_[0].pkeys[0] = 0xffff;
}

void Switch::dropped(unsigned port, const char *why, unsigned a, unsigned b) {
    if (dropLog_)
        dropLog_("port " + std::to_string(port) + ": dropped: " + why + " (" + std::to_string(a) +
                 ", " + std::to_string(b) + ")");
}

std::vector<Transmit> Switch::linkChanged(unsigned port, bool up, uint8_t neighborVlCap) {
    if (port < 1 || port > config_.ports)
        return {};
    SwitchPort &p = ports_[port];
    if (p.linkUp == up)
        return {};
    p.linkUp = up;
    if (up)
        p.operationalVls = std::clamp(neighborVlCap, kVlsVl0, config_.vlCap);
    // A new link trains to INIT; a lost one goes DOWN. Either way the SM
    // learns of it through SwitchInfo.PortStateChange.
    const uint8_t before = p.state;
    p.state = up ? kPortStateInit : kPortStateDown;
    portStateLeft(port, before);
    if (!up)
        ++p.counters.linkDowned;
    portStateChange_ = true;
    return trap128();
}

bool pkeyAdmitted(std::span<const uint16_t> table, uint16_t pkey) {
    constexpr uint16_t kKeyBits = 0x7fff;
    if (!(pkey & kKeyBits))
        return false;
    return std::any_of(table.begin(), table.end(),
                       [&](uint16_t entry) { return (entry & kKeyBits) == (pkey & kKeyBits); });
}

void Switch::transmit(std::vector<Transmit> &out, unsigned port, std::vector<uint8_t> bytes,
                      bool management, uint16_t pkey) {
    if (admit(port, bytes, management, pkey))
        out.push_back({port, std::move(bytes)});
}

bool Switch::admit(unsigned port, std::span<const uint8_t> bytes, bool management, uint16_t pkey) {
    SwitchPort &p = ports_[port];
    // Data needs an ACTIVE port; subnet management (VL15) only a live link.
    const bool open =
        p.linkUp && (management ? p.state >= kPortStateInit : p.state == kPortStateActive);
    if (!open && !management && p.linkUp && p.state == kPortStateArmed &&
        p.held.size() < config_.heldWhileArmed) {
        p.held.push_back({{bytes.begin(), bytes.end()}, pkey});
        return false;
    }
    if (!open) {
        if (management)
            ++p.counters.vl15Dropped;
        else
            ++p.counters.xmitDiscards;
        return false;
    }
    // Outbound partition enforcement (IBA 10.9.2); subnet management is
    // exempt.
    if (!management && (p.enforcement & kEnforceOutbound) && !pkeyAdmitted(p.pkeys, pkey)) {
        ++p.counters.xmitConstraintErrors;
        dropped(port, "P_Key outside the egress port's partitions, P_Key", pkey);
        return false;
    }
    ++p.counters.xmitPackets;
    p.counters.xmitData += bytes.size() / 4;
    return true;
}

void Switch::discarded(unsigned port, size_t bytes) {
    if (port < 1 || port > config_.ports)
        return;
    PortCounters &c = ports_[port].counters;
    ++c.xmitDiscards;
    c.xmitPackets -= std::min<uint64_t>(c.xmitPackets, 1);
    c.xmitData -= std::min<uint64_t>(c.xmitData, bytes / 4);
}

void Switch::portStateLeft(unsigned port, uint8_t before) {
    SwitchPort &p = ports_[port];
    if (before != kPortStateArmed || p.state == kPortStateArmed || p.held.empty())
        return;
    std::vector<SwitchPort::Held> held = std::exchange(p.held, {});
    for (SwitchPort::Held &h : held)
        if (p.state == kPortStateActive)
            transmit(released_, port, std::move(h.packet), false, h.pkey);
        else
            ++p.counters.xmitDiscards;
}

std::vector<Transmit> Switch::receive(unsigned in, std::span<const uint8_t> bytes) {
    std::vector<Transmit> forwarded;
    std::vector<Transmit> built =
        receive(in, bytes, [&](unsigned port, std::span<const uint8_t> packet) {
            forwarded.push_back({port, {packet.begin(), packet.end()}});
        });
    forwarded.insert(forwarded.end(), std::make_move_iterator(built.begin()),
                     std::make_move_iterator(built.end()));
    return forwarded;
}

std::vector<Transmit> Switch::receive(unsigned in, std::span<const uint8_t> bytes,
                                      const Forwarder &send, bool vcrcGood) {
    std::vector<Transmit> out = receivePacket(in, bytes, send, vcrcGood);
    // What an SMP (or a data packet) just activated goes out with it.
    out.insert(out.end(), std::make_move_iterator(released_.begin()),
               std::make_move_iterator(released_.end()));
    released_.clear();
    return out;
}

std::vector<Transmit> Switch::receivePacket(unsigned in, std::span<const uint8_t> bytes,
                                            const Forwarder &send, bool vcrcGood) {
    std::vector<Transmit> out;
    if (in < 1 || in > config_.ports || !ports_[in].linkUp)
        return out;
    SwitchPort &port = ports_[in];
    iba::ParseError error;
    auto packet = vcrcGood ? iba::parseVcrcChecked(bytes, &error)
                           : iba::parse(bytes, &error, /*checkIcrc=*/false, /*copyPayload=*/false);
    if (!packet) {
        ++port.counters.rcvErrors;
        dropped(in, iba::toString(error));
        return out;
    }
    // What is forwarded goes as it came, its payload never copied; the
    // agents (QP0's SMA and QP1's PMA) read and answer a MAD of their own.
    if (packet->bth.destQp <= 1)
        packet->payload.assign(packet->view.begin(), packet->view.end());
    ++port.counters.rcvPackets;
    port.counters.rcvData += bytes.size() / 4;
    const bool smp = packet->bth.destQp == 0 && packet->payload.size() == kMadSize;
    if (smp && packet->payload[1] == kClassSmpDirected)
        return directedRoute(in, std::move(*packet), bytes, send);
    // IBA 7.2: an ARMED port goes ACTIVE with the first packet that is not
    // subnet management, which says that its neighbour is ACTIVE (the SM
    // activates one end of a link, the data it sends the other).
    if (!smp && port.state == kPortStateArmed) {
        port.state = kPortStateActive;
        portStateLeft(in, kPortStateArmed);
        event("port " + std::to_string(in) +
              ": ACTIVE on a data packet from its neighbour "
              "(was ARMED)");
    }
    // Anything but subnet management needs a port the SM has made ACTIVE.
    if (!smp && port.state != kPortStateActive) {
        ++port.counters.rcvErrors;
        dropped(in, "data on a port that is not ACTIVE, state", port.state);
        return out;
    }
    // A data packet on a VL its port does not run (IBA 7.6.6).
    if (packet->lrh.vl != kVl15 && packet->lrh.vl >= dataVls(port.operationalVls)) {
        ++port.counters.rcvErrors;
        dropped(in, "data on a VL beyond the port's OperationalVLs, VL", packet->lrh.vl);
        return out;
    }
    // Inbound partition enforcement (IBA 10.9.2); QP0's SMPs are exempt.
    if (packet->bth.destQp != 0 && (port.enforcement & kEnforceInbound) &&
        !pkeyAdmitted(port.pkeys, packet->bth.pkey)) {
        ++port.counters.rcvConstraintErrors;
        dropped(in, "P_Key outside the ingress port's partitions, P_Key", packet->bth.pkey);
        return out;
    }
    if (packet->lrh.dlid == lid_ && lid_ != 0 && packet->bth.destQp <= 1)
        return toSwitch(in, std::move(*packet));
    forward(in, *packet, bytes, send);
    return out;
}

uint8_t Switch::vlFor(unsigned in, unsigned out, uint8_t sl) const {
    const unsigned n = config_.ports + 1;
    if (slToVl_.empty() || in >= n || out >= n)
        return 0;
    return vlOfSl(slToVl_[in * n + out], sl);
}

bool Switch::onVl(unsigned in, unsigned out, const iba::Packet &packet,
                  std::span<const uint8_t> &bytes) {
    if (packet.lrh.vl == kVl15)
        return true; // subnet management stays on VL15, whatever the tables say
    const uint8_t vl = vlFor(in, out, packet.lrh.sl);
    if (vl >= dataVls(ports_[out].operationalVls)) { // VL15 too
        ++ports_[out].counters.xmitDiscards;
        dropped(out, "SL mapped to a VL the port does not run, SL and VL", packet.lrh.sl, vl);
        return false;
    }
    if (vl != packet.lrh.vl) {
        relabelled_.assign(bytes.begin(), bytes.end());
        iba::setVl(relabelled_, vl);
        bytes = relabelled_;
    }
    return true;
}

void Switch::forward(unsigned in, const iba::Packet &packet, std::span<const uint8_t> bytes,
                     const Forwarder &send) {
    const uint16_t dlid = packet.lrh.dlid;
    const bool management = packet.bth.destQp == 0;
    if (isMulticastLid(dlid)) {
        // The MFT holds the first kMftCap multicast LIDs; SwitchInfo says
        // so (MulticastFDBCap). Any LID above has no entry: no route.
        const unsigned index = dlid - unsigned{kMulticastLidFirst};
        if (index >= kMftCap) {
            ++ports_[in].counters.xmitDiscards;
            dropped(in, "multicast LID beyond the MFT, LID", dlid);
            return;
        }
        const ForwardingTables::Masks masks = tables_.masks(index);
        for (unsigned port = 1; port <= config_.ports; ++port) {
            std::span<const uint8_t> out = bytes;
            if (port != in && masks[port / 16] & (1u << (port % 16)) &&
                onVl(in, port, packet, out) && admit(port, out, management, packet.bth.pkey))
                send(port, out);
        }
        return;
    }
    const unsigned port = tables_.port(dlid);
    if (port < 1 || port > config_.ports) {
        ++ports_[in].counters.xmitDiscards; // no route: counted at the ingress
        return;
    }
    if (onVl(in, port, packet, bytes) && admit(port, bytes, management, packet.bth.pkey))
        send(port, bytes);
}

// IBA 14.2.2: a DR SMP travels by the port numbers in its initial path,
// records the ports it came in by in its return path, and comes back that
// way. The hop pointer moves as the kernel's smi.c and every HCA expect.
//
// The directed part may have LID-routed parts on either side. With a
// non-permissive DrSLID the SM sends the SMP by LID to the switch where
// the directed part begins (hop pointer 0), which sends the response back
// to DrSLID by LID. With a non-permissive DrDLID the switch where the
// directed part ends sends it on by LID to DrDLID (hop pointer hop count
// + 1), and the responder sends its answer by LID back to that switch.
// Inside the directed part the LRH carries permissive LIDs.
std::vector<Transmit> Switch::directedRoute(unsigned in, iba::Packet packet,
                                            std::span<const uint8_t> bytes, const Forwarder &send) {
    const uint16_t dlid = packet.lrh.dlid;
    const bool byLid = dlid != iba::kPermissiveLid;
    if (byLid && (lid_ == 0 || dlid != lid_)) {
        forward(in, packet, bytes, send); // a LID-routed part passing through
        return {};
    }
    std::vector<Transmit> out;
    Mad mad(packet.payload);
    const unsigned hops = mad.hopCount();
    const unsigned hop = mad.hopPointer();
    auto drop = [&](const char *why) {
        ++ports_[in].counters.vl15Dropped;
        dropped(in, why, hop, hops);
        return out;
    };
    if (hops > 63)
        return drop("DR SMP with hop pointer/count");
    if (mad.returning()) {
        // C14-13:1 by LID from the end of the directed part; C14-13:2 and
        // 13:3 along it.
        if (byLid ? hop != hops + 1 : hop < 1 || hop > hops)
            return drop("returning DR SMP with hop pointer/count");
        stepBack(out, in, packet, hop);
        return out;
    }
    if (byLid && hop == hops + 1) { // C14-9:4: the LID-routed tail ends here
        if (!sma(mad, in, out))
            return out;
        mad.setReturning(true);
        return reply(packet, packet.payload, in);
    }
    if (byLid ? hop != 0 : hop < 1 || hop > hops)
        return drop("outgoing DR SMP with hop pointer/count");
    if (hop > 0) // at hop 0 the SMP came by LID: nothing to record
        mad.setReturnPath(hop, static_cast<uint8_t>(in));
    if (hop < hops) { // C14-9:1 and 9:2: pass it on
        mad.setHopPointer(static_cast<uint8_t>(hop + 1));
        sendDirected(out, in, packet, mad.initialPath(hop + 1));
        return out;
    }
    // C14-9:3, the end of the directed part.
    mad.setHopPointer(static_cast<uint8_t>(hops + 1));
    if (mad.drDlid() != iba::kPermissiveLid) {
        sendByLid(out, in, packet, mad.drDlid());
        return out;
    }
    if (!sma(mad, in, out))
        return out;
    mad.setReturning(true);
    // The responder stands at hop count + 1 and steps back.
    stepBack(out, in, packet, hops + 1);
    return out;
}

// One step back along a returning DR SMP's path from hop pointer `hop`:
// out by the recorded return path, or, at the start of the directed part,
// by LID to DrSLID.
void Switch::stepBack(std::vector<Transmit> &out, unsigned in, iba::Packet &packet, unsigned hop) {
    Mad mad(packet.payload);
    mad.setHopPointer(static_cast<uint8_t>(hop - 1));
    if (hop - 1 >= 1) {
        sendDirected(out, in, packet, mad.returnPath(hop - 1));
        return;
    }
    if (mad.drSlid() == iba::kPermissiveLid) { // C14-13:3: for an SM here, and there is none
        ++ports_[in].counters.vl15Dropped;
        dropped(in, "returning DR SMP for an SM at this switch, hop", hop);
        return;
    }
    sendByLid(out, in, packet, mad.drSlid());
}

void Switch::sendDirected(std::vector<Transmit> &out, unsigned in, iba::Packet &packet,
                          unsigned port) {
    if (port < 1 || port > config_.ports) {
        ++ports_[in].counters.vl15Dropped;
        dropped(in, "DR SMP to a port that does not exist", port, Mad(packet.payload).hopPointer());
        return;
    }
    packet.lrh.vl = 15;
    packet.lrh.dlid = iba::kPermissiveLid;
    packet.lrh.slid = iba::kPermissiveLid;
    transmit(out, port, iba::build(packet), true, packet.bth.pkey);
}

// Hands a DR SMP over to LID routing, from this switch to `dlid`.
void Switch::sendByLid(std::vector<Transmit> &out, unsigned in, iba::Packet &packet,
                       uint16_t dlid) {
    const unsigned port = tables_.port(dlid);
    if (lid_ == 0 || port < 1 || port > config_.ports) {
        ++ports_[in].counters.vl15Dropped;
        dropped(in, "DR SMP to a LID with no route, LID", dlid, lid_);
        return;
    }
    packet.lrh.vl = 15;
    packet.lrh.dlid = dlid;
    packet.lrh.slid = lid_;
    transmit(out, port, iba::build(packet), true, packet.bth.pkey);
}

std::vector<Transmit> Switch::toSwitch(unsigned in, iba::Packet packet) {
    if (packet.payload.size() != kMadSize)
        return {};
    Mad mad(packet.payload);
    std::vector<Transmit> out;
    if (packet.bth.destQp == 0 && mad.mgmtClass() == kClassSmpLid && mad.method() == kTrapRepress) {
        // The SM saw our trap: it is not repeated any more. A valid key
        // in the repress still ends an M_Key lease; a bad one is a
        // violation, and represses nothing.
        if (mkeyAdmits(mad, in, out))
            trapRepressed(mad);
        hideMkey_ = false;
        return out;
    }
    if (packet.bth.destQp == 0 && mad.mgmtClass() == kClassSmpLid) {
        if (!sma(mad, in, out))
            return out;
    } else if (packet.bth.destQp == 1 && mad.mgmtClass() == kClassPerfMgt)
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
    const unsigned port = tables_.port(p.lrh.dlid);
    transmit(result, port >= 1 && port <= config_.ports ? port : out, iba::build(p),
             request.bth.destQp == 0, p.bth.pkey);
    return result;
}

} // namespace pib::fabric
