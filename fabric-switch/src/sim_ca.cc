// SPDX-License-Identifier: GPL-2.0-or-later
// A simulated CA's management: the end of a directed route (IBA 14.2.2,
// a CA never passes a DR SMP on), LID-routed SMPs and GMPs to its LID,
// and the SMA attributes of a CA (IBA 14.2.5).
#include "sim_ca.hh"

#include <algorithm>
#include <chrono>

#include "addressing.hh"
#include "smp.hh"

namespace pib::fabric {

using namespace pib::iba;

namespace {

// No vendor: an emulated device, and not one that opensm asks vendor
// attributes of (Mellanox's, 0x02c9, get extended PortInfo SMPs).
constexpr uint32_t kVendorId = 0x000000;
constexpr uint16_t kDeviceId = 0x1b1d;
constexpr uint16_t kPartitionCap = 32;

uint64_t steadyNs() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

} // namespace

SimulatedCa::SimulatedCa(CaConfig config) : config_(std::move(config)) {
    config_.ports = std::clamp(config_.ports, 1u, kMaxPorts);
    ports_.resize(config_.ports + 1);
    for (CaPort &p : ports_)
        p.pkeys[0] = 0xffff; // the default partition, until the SM sets the table
}

uint64_t SimulatedCa::now() const {
    return clock_ ? clock_() : steadyNs();
}

void SimulatedCa::linkChanged(unsigned port, bool up, uint8_t neighborVlCap) {
    if (port < 1 || port > config_.ports || ports_[port].linkUp == up)
        return;
    CaPort &p = ports_[port];
    p.linkUp = up;
    if (up)
        p.operationalVls = std::clamp(neighborVlCap, kVlsVl0, config_.vlCap);
    p.state = up ? kPortStateInit : kPortStateDown;
    if (!up)
        ++p.counters.linkDowned;
}

std::vector<Transmit> SimulatedCa::receive(unsigned in, std::span<const uint8_t> bytes) {
    if (in < 1 || in > config_.ports || !ports_[in].linkUp)
        return {};
    CaPort &port = ports_[in];
    iba::ParseError error;
    auto packet = iba::parse(bytes, &error, /*checkIcrc=*/false);
    if (!packet) {
        ++port.counters.rcvErrors;
        return {};
    }
    ++port.counters.rcvPackets;
    port.counters.rcvData += bytes.size() / 4;
    const bool mad = packet->bth.destQp <= 1 && packet->payload.size() == kMadSize;
    if (mad && packet->bth.destQp == 0 && packet->payload[1] == kClassSmpDirected)
        return directedRoute(in, *packet);
    if (mad)
        return lidRouted(in, *packet);
    ++dataDropped_;
    return {};
}

// A CA is always the end of a DR SMP's directed part (C14-9:3): it
// answers with the direction bit set and the hop pointer back at the hop
// count, out of the port it came in on (C14-13:1).
std::vector<Transmit> SimulatedCa::directedRoute(unsigned in, iba::Packet &packet) {
    Mad mad(packet.payload);
    const unsigned hops = mad.hopCount();
    if (packet.lrh.dlid != kPermissiveLid || mad.returning() || hops == 0 || hops > 63 ||
        mad.hopPointer() != hops || mad.drDlid() != kPermissiveLid) {
        ++ports_[in].counters.vl15Dropped;
        return {};
    }
    mad.setReturnPath(hops, static_cast<uint8_t>(in));
    if (!sma(in, mad))
        return {};
    mad.setReturning(true);
    return send(in, packet);
}

std::vector<Transmit> SimulatedCa::lidRouted(unsigned in, iba::Packet &packet) {
    CaPort &p = ports_[in];
    Mad mad(packet.payload);
    const uint16_t base = p.lid & ~((1u << p.lmc) - 1);
    const bool ours =
        p.lid != 0 && packet.lrh.dlid >= base && packet.lrh.dlid < base + (1u << p.lmc);
    const bool smp = packet.bth.destQp == 0 && mad.mgmtClass() == kClassSmpLid;
    const bool pma = packet.bth.destQp == 1 && mad.mgmtClass() == kClassPerfMgt;
    if (!ours || !packet.deth || !(smp || pma) || (mad.method() != kGet && mad.method() != kSet)) {
        ++dataDropped_;
        return {};
    }
    if (pma) {
        // QP1 takes only the partitions the port's table holds.
        if (!pkeyAdmitted(p.pkeys, packet.bth.pkey)) {
            ++p.counters.rcvConstraintErrors;
            return {};
        }
        answerPma(mad, [this](unsigned n) -> PortCounters * {
            return n >= 1 && n <= config_.ports ? &ports_[n].counters : nullptr;
        });
    } else if (!sma(in, mad)) {
        return {};
    }
    iba::Packet reply;
    reply.lrh.vl = smp ? 15 : 0;
    reply.lrh.sl = packet.lrh.sl;
    reply.lrh.dlid = packet.lrh.slid;
    reply.lrh.slid = p.lid;
    reply.bth.opcode = kUdSendOnly;
    reply.bth.pkey = packet.bth.pkey;
    reply.bth.destQp = packet.deth->srcQp;
    reply.deth = Deth{pma ? kQp1Qkey : 0, packet.bth.destQp};
    reply.payload = std::move(packet.payload);
    return send(in, reply);
}

std::vector<Transmit> SimulatedCa::send(unsigned port, iba::Packet &packet) {
    PortCounters &c = ports_[port].counters;
    std::vector<uint8_t> bytes = iba::build(packet);
    ++c.xmitPackets;
    c.xmitData += bytes.size() / 4;
    std::vector<Transmit> out;
    out.push_back({port, std::move(bytes)});
    return out;
}

bool SimulatedCa::sma(unsigned in, Mad &mad) {
    if (!answerable(mad.method()))
        return false; // a response (or a repress) is not answered
    // IBA 14.2.4: the receiving port's M_Key guards the SMP.
    const auto verdict = ports_[in].mkey.check(mad, now());
    if (verdict == MkeyProtection::Verdict::kViolation) {
        ++ports_[in].counters.vl15Dropped;
        return false;
    }
    uint16_t status;
    if (mad.baseVersion() != 1 || mad.classVersion() != 1)
        status = kStatusBadVersion;
    else if (mad.method() == kGet)
        status = smaGet(in, mad, verdict == MkeyProtection::Verdict::kPassHideKey);
    else if (mad.method() == kSet)
        status = smaSet(in, mad);
    else
        status = kStatusBadMethod;
    mad.setMethod(kGetResp);
    mad.setStatus(status);
    return true;
}

PortInfo SimulatedCa::portInfo(unsigned n, bool hideMkey) const {
    const CaPort &p = ports_[n];
    PortInfo info{
        .gidPrefix = p.gidPrefix,
        .lid = p.lid,
        .masterSmLid = p.smLid,
        .capabilityMask = vlCapabilities(config_.vlCap),
        .localPortNum = static_cast<uint8_t>(n),
        .linkWidthEnabled = kLinkWidth1x4x,
        .linkWidthSupported = kLinkWidth1x4x,
        .linkWidthActive = kLinkWidth4x,
        .linkSpeedSupported = kLinkSpeedSdrDdrQdr,
        .portState = p.state,
        .portPhysicalState = p.linkUp ? kPhysLinkUp : kPhysPolling,
        .linkDownDefaultState = kPhysPolling,
        .lmc = p.lmc,
        .linkSpeedActive = kLinkSpeedQdr,
        .linkSpeedEnabled = kLinkSpeedSdrDdrQdr,
        .neighborMtu = p.neighborMtu,
        .masterSmSl = p.smSl,
        .vlCap = config_.vlCap,
        .vlHighLimit = p.vlHighLimit,
        .vlArbitrationHighCap = VlArbTables::kEntries,
        .vlArbitrationLowCap = VlArbTables::kEntries,
        .mtuCap = 5,
        .hoqLife = p.hoqLife,
        .operationalVls = p.operationalVls,
        .guidCap = 1,
        .subnetTimeout = p.subnetTimeout,
    };
    p.mkey.fillPortInfo(info, hideMkey);
    return info;
}

uint16_t SimulatedCa::smaGet(unsigned in, Mad &mad, bool hideMkey) const {
    const uint32_t mod = mad.attributeModifier();
    // A CA's per-port attributes are the receiving port's; PortInfo may
    // name a port (0: the receiving one).
    const CaPort &p = ports_[in];
    switch (mad.attributeId()) {
    case kAttrNodeInfo:
        writeNodeInfo(mad, NodeInfo{.nodeType = kNodeTypeCa,
                                    .numPorts = static_cast<uint8_t>(config_.ports),
                                    .systemImageGuid = config_.guid,
                                    .nodeGuid = config_.guid,
                                    .portGuid = portGuid(in),
                                    .partitionCap = kPartitionCap,
                                    .deviceId = kDeviceId,
                                    .revision = 1,
                                    .localPortNum = static_cast<uint8_t>(in),
                                    .vendorId = kVendorId});
        return kStatusOk;
    case kAttrNodeDescription: {
        const auto *text = reinterpret_cast<const uint8_t *>(config_.description.data());
        writeBytes(mad, {text, std::min(config_.description.size(), Mad::kSmpDataSize - 1)});
        return kStatusOk;
    }
    case kAttrPortInfo: {
        const unsigned n = portInfoPort(mod);
        if (n > config_.ports)
            return kStatusBadField;
        writePortInfo(mad, portInfo(n ? n : in, hideMkey));
        return kStatusOk;
    }
    case kAttrGuidInfo:
        if (mod != 0)
            return kStatusBadField;
        writeBlock64(mad, std::array{portGuid(in)});
        return kStatusOk;
    case kAttrPkeyTable:
        if ((mod & 0xffff) != 0)
            return kStatusBadField;
        writeBlock16(mad, p.pkeys);
        return kStatusOk;
    case kAttrSlToVlTable:
        writeBytes(mad, p.slToVl);
        return kStatusOk;
    case kAttrVlArbTable: {
        const unsigned block = mod >> 16;
        if (!VlArbTables::validBlock(block))
            return kStatusBadField;
        p.vlArb.get(block, mad);
        return kStatusOk;
    }
    default:
        // SMInfo among them: there is no SM here.
        return kStatusBadAttribute;
    }
}

uint16_t SimulatedCa::smaSet(unsigned in, Mad &mad) {
    const uint32_t mod = mad.attributeModifier();
    CaPort &p = ports_[in];
    uint16_t status = kStatusOk;
    switch (mad.attributeId()) {
    case kAttrPortInfo: {
        const unsigned n = portInfoPort(mod);
        if (n > config_.ports)
            return kStatusBadField;
        status = setPortInfo(ports_[n ? n : in], mad);
        break;
    }
    case kAttrPkeyTable:
        if ((mod & 0xffff) != 0)
            return kStatusBadField;
        readBlock16(mad, p.pkeys);
        break;
    case kAttrSlToVlTable:
        readBytes(mad, p.slToVl);
        break;
    case kAttrVlArbTable: {
        const unsigned block = mod >> 16;
        if (!VlArbTables::validBlock(block))
            return kStatusBadField;
        p.vlArb.set(block, mad);
        break;
    }
    default:
        return kStatusBadAttribute;
    }
    // A Set answers with the attribute's new value.
    if (status == kStatusOk)
        smaGet(in, mad, false);
    return status;
}

uint16_t SimulatedCa::setPortInfo(CaPort &p, const Mad &mad) {
    const PortInfo set = readPortInfo(mad);
    const uint8_t next = set.portState;
    // Validate everything, then apply everything (a failed Set changes
    // nothing).
    if (set.neighborMtu > 5 || set.operationalVls > config_.vlCap ||
        set.lid >= kMulticastLidFirst || set.lmc > 7)
        return kStatusBadField;
    const bool stateOk =
        next == kPortStateNop || next == kPortStateDown ||
        (next == kPortStateArmed && p.state == kPortStateInit) ||
        (next == kPortStateActive && (p.state == kPortStateArmed || p.state == kPortStateActive));
    if (!stateOk)
        return kStatusBadField;
    p.mkey.setFromPortInfo(set);
    p.gidPrefix = set.gidPrefix;
    p.lid = set.lid;
    p.lmc = set.lmc;
    p.smLid = set.masterSmLid;
    p.smSl = set.masterSmSl;
    p.subnetTimeout = set.subnetTimeout;
    p.hoqLife = set.hoqLife;
    p.vlHighLimit = set.vlHighLimit;
    if (set.neighborMtu)
        p.neighborMtu = set.neighborMtu;
    if (set.operationalVls)
        p.operationalVls = set.operationalVls;
    if (next == kPortStateArmed || next == kPortStateActive)
        p.state = next;
    // DOWN on a simulated cable retrains at once: back to INIT.
    if (next == kPortStateDown && p.linkUp)
        p.state = kPortStateInit;
    return kStatusOk;
}

} // namespace pib::fabric
