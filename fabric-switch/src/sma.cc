// SPDX-License-Identifier: GPL-2.0-or-later
// The switch's subnet management agent: the SMP attributes of IBA 14.2.5
// that a switch answers, Get and Set.
#include <algorithm>
#include <chrono>

#include "smp.hh"
#include "switch.hh"

namespace pib::fabric {

using namespace pib::iba;

namespace {

constexpr uint32_t kVendorId = 0x000000; // none: an emulated switch
constexpr uint16_t kDeviceId = 0x1b1c;
constexpr uint16_t kPartitionCap = 32;

} // namespace

uint64_t Switch::now() const {
    return clock_ ? clock_()
                  : static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                              std::chrono::steady_clock::now().time_since_epoch())
                                              .count());
}

bool Switch::mkeyAdmits(const Mad &mad, unsigned in, std::vector<Transmit> &out) {
    // Port 0's M_Key guards every attribute of the switch (IBA 14.2.4).
    const auto verdict = mkey_.check(mad, now());
    if (verdict == MkeyProtection::Verdict::kViolation) {
        dropped(in, "SMP with a bad M_Key, violations", mkey_.violations());
        trapToSm(out, badMkeyTrap(mad, lid_, kProducerSwitch, ++trapTid_));
        return false;
    }
    hideMkey_ = verdict == MkeyProtection::Verdict::kPassHideKey;
    return true;
}

bool Switch::sma(Mad mad, unsigned in, std::vector<Transmit> &out) {
    if (!answerable(mad.method()))
        return false; // a response (or a repress) is not answered
    if (!mkeyAdmits(mad, in, out))
        return false;
    uint16_t status = kStatusOk;
    if (mad.baseVersion() != 1 || mad.classVersion() != 1)
        status = kStatusBadVersion;
    else if (mad.method() == kGet)
        status = smaGet(mad, in);
    else if (mad.method() == kSet)
        status = smaSet(mad, in);
    else
        status = kStatusBadMethod;
    mad.setMethod(kGetResp);
    mad.setStatus(status);
    hideMkey_ = false;
    return true;
}

void Switch::nodeInfo(Mad &mad, unsigned in) const {
    writeNodeInfo(mad, NodeInfo{.nodeType = kNodeTypeSwitch,
                                .numPorts = static_cast<uint8_t>(config_.ports),
                                .systemImageGuid = config_.guid,
                                .nodeGuid = config_.guid,
                                .portGuid = config_.guid, // a switch's port GUID is its node GUID
                                .partitionCap = kPartitionCap,
                                .deviceId = kDeviceId,
                                .revision = 1,
                                .localPortNum = static_cast<uint8_t>(in),
                                .vendorId = kVendorId});
}

void Switch::switchInfo(Mad &mad) const {
    writeSwitchInfo(mad, SwitchInfo{.linearFdbCap = kLftCap,
                                    .multicastFdbCap = kMftCap,
                                    .linearFdbTop = linearFdbTop_,
                                    .defaultPort = defaultPort_,
                                    .defaultMulticastPrimaryPort = 0xff,
                                    .defaultMulticastNotPrimaryPort = 0xff,
                                    .lifeTimeValue = lifeTime_,
                                    .portStateChange = portStateChange_,
                                    .lidsPerPort = 1,
                                    // Every external port has a P_Key
                                    // table of kPartitionCap entries and
                                    // filters by it, in and out.
                                    .partitionEnforcementCap = kPartitionCap,
                                    .enforcementBits = kEnforceInbound | kEnforceOutbound,
                                    .multicastFdbTop = multicastFdbTop_});
}

uint16_t Switch::setSwitchInfo(Mad &mad) {
    const SwitchInfo s = readSwitchInfo(mad);
    linearFdbTop_ = std::min<uint16_t>(s.linearFdbTop, kLftCap - 1);
    defaultPort_ = s.defaultPort;
    lifeTime_ = s.lifeTimeValue;
    if (s.portStateChange) // writing 1 clears PortStateChange
        portStateChange_ = false;
    multicastFdbTop_ = s.multicastFdbTop;
    return kStatusOk;
}

// Only port 0, the switch's management port, has a LID, an M_Key and the
// subnet's settings; the external ports have a link.
void Switch::portInfo(Mad &mad, unsigned n, unsigned in) const {
    const SwitchPort &p = ports_[n];
    const bool mgmt = n == 0;
    PortInfo info{
        .gidPrefix = mgmt ? gidPrefix_ : 0,
        .lid = mgmt ? lid_ : uint16_t{0},
        .masterSmLid = mgmt ? smLid_ : uint16_t{0},
        .capabilityMask = mgmt ? vlCapabilities(config_.vlCap) : 0,
        .localPortNum = static_cast<uint8_t>(in), // where the SMP came in
        // Links run 4x QDR, as the HCAs' ports do.
        .linkWidthEnabled = kLinkWidth1x4x,
        .linkWidthSupported = kLinkWidth1x4x,
        .linkWidthActive = kLinkWidth4x,
        .linkSpeedSupported = kLinkSpeedSdrDdrQdr,
        .portState = p.state,
        .portPhysicalState = mgmt || p.linkUp ? kPhysLinkUp : kPhysPolling,
        .linkDownDefaultState = kPhysPolling,
        .lmc = mgmt ? lmc_ : uint8_t{0},
        .linkSpeedActive = kLinkSpeedQdr,
        .linkSpeedEnabled = kLinkSpeedSdrDdrQdr,
        .neighborMtu = p.neighborMtu,
        .vlCap = config_.vlCap,
        .vlHighLimit = p.vlHighLimit,
        .vlArbitrationHighCap = VlArbTables::kEntries,
        .vlArbitrationLowCap = VlArbTables::kEntries,
        .mtuCap = 5, // 4096
        .hoqLife = p.hoqLife,
        .operationalVls = p.operationalVls,
        .partitionEnforcement = p.enforcement,
        .guidCap = uint8_t{mgmt},
        .subnetTimeout = mgmt ? subnetTimeout_ : uint8_t{0},
    };
    if (mgmt)
        mkey_.fillPortInfo(info, hideMkey_);
    writePortInfo(mad, info);
}

uint16_t Switch::setPortInfo(Mad &mad, unsigned n) {
    const uint8_t before = ports_[n].state;
    const uint16_t status = applyPortInfo(mad, n);
    if (ports_[n].state != before) {
        event("port " + std::to_string(n) + ": the SM set it " + stateName(ports_[n].state) +
              " (was " + stateName(before) + ")");
        if (n != 0)
            portStateLeft(n, before);
    }
    return status;
}

uint16_t Switch::applyPortInfo(Mad &mad, unsigned n) {
    SwitchPort &p = ports_[n];
    const PortInfo set = readPortInfo(mad);
    const uint8_t newState = set.portState;
    const uint8_t mtu = set.neighborMtu;
    const uint8_t vls = set.operationalVls;
    // Validate everything before changing anything (IBA: a Set that fails
    // leaves the attribute as it was).
    if (mtu > 5 || vls > config_.vlCap)
        return kStatusBadField;
    if (newState != kPortStateNop && n != 0) {
        const bool ok = newState == kPortStateDown ||
                        (newState == kPortStateArmed && p.state == kPortStateInit && p.linkUp) ||
                        (newState == kPortStateActive &&
                         (p.state == kPortStateArmed || p.state == kPortStateActive));
        if (!ok)
            return kStatusBadField;
    }
    if (n == 0) {
        mkey_.setFromPortInfo(set);
        gidPrefix_ = set.gidPrefix;
        lid_ = set.lid;
        smLid_ = set.masterSmLid;
        lmc_ = set.lmc;
        subnetTimeout_ = set.subnetTimeout;
        if (newState == kPortStateArmed || newState == kPortStateActive)
            p.state = newState;
    } else {
        if (mtu)
            p.neighborMtu = mtu;
        p.enforcement = set.partitionEnforcement & (kEnforceInbound | kEnforceOutbound);
        if (newState == kPortStateDown && p.linkUp) {
            // The link goes down at both ends and trains again (the server
            // closes the cable; its peer reconnects): the peer's port must
            // leave ACTIVE too, and the new link reaches the SM as any
            // other would, through PortStateChange and Trap 128.
            p.state = kPortStateDown;
            if (std::find(linkResets_.begin(), linkResets_.end(), n) == linkResets_.end())
                linkResets_.push_back(n);
        } else if (newState != kPortStateNop) {
            p.state = newState;
        }
    }
    if (vls)
        p.operationalVls = vls;
    p.hoqLife = set.hoqLife;
    p.vlHighLimit = set.vlHighLimit;
    return kStatusOk;
}

// SLtoVLMappingTable's modifier names the pair of ports: bits 15:8 the
// input, 7:0 the output (IBA 14.2.5.8). The optimized forms (bits 16 and
// 17) are not offered: SwitchInfo says so, and they are refused.
std::optional<size_t> Switch::slToVlPair(uint32_t mod) const {
    const unsigned in = mod >> 8 & 0xff, out = mod & 0xff;
    if (mod >> 16 || in > config_.ports || out > config_.ports)
        return std::nullopt;
    return size_t{in} * (config_.ports + 1) + out;
}

uint16_t Switch::smaGet(Mad &mad, unsigned in) {
    const uint32_t mod = mad.attributeModifier();
    switch (mad.attributeId()) {
    case kAttrNodeInfo:
        nodeInfo(mad, in);
        return kStatusOk;
    case kAttrNodeDescription: {
        const auto *text = reinterpret_cast<const uint8_t *>(config_.description.data());
        writeBytes(mad, {text, std::min(config_.description.size(), Mad::kSmpDataSize - 1)});
        return kStatusOk;
    }
    case kAttrSwitchInfo:
        switchInfo(mad);
        return kStatusOk;
    case kAttrPortInfo:
        if (portInfoPort(mod) > config_.ports)
            return kStatusBadField;
        portInfo(mad, portInfoPort(mod), in);
        return kStatusOk;
    case kAttrGuidInfo:
        if (mod != 0)
            return kStatusBadField;
        writeBlock64(mad, std::array{config_.guid});
        return kStatusOk;
    case kAttrPkeyTable: {
        const unsigned port = mod >> 16, block = mod & 0xffff;
        if (port > config_.ports || block != 0)
            return kStatusBadField;
        writeBlock16(mad, ports_[port].pkeys);
        return kStatusOk;
    }
    case kAttrSlToVlTable: {
        const auto pair = slToVlPair(mod);
        if (!pair)
            return kStatusBadField;
        writeBytes(mad, slToVl_.empty() ? SlToVlTable{} : slToVl_[*pair]);
        return kStatusOk;
    }
    case kAttrVlArbTable: {
        const unsigned port = mod & 0xffff, block = mod >> 16;
        if (port > config_.ports || !VlArbTables::validBlock(block))
            return kStatusBadField;
        ports_[port].vlArb.get(block, mad);
        return kStatusOk;
    }
    case kAttrLinearForwardingTable:
        if (mod >= kLftCap / 64)
            return kStatusBadField;
        writeBytes(mad, tables_.lftBlock(mod));
        return kStatusOk;
    case kAttrMulticastForwardingTable: {
        const unsigned position = mod >> 28, block = mod & 0x1ff;
        if (block >= kMftCap / 32 || position > config_.ports / 16) // 16 ports per position
            return kStatusBadField;
        std::array<uint16_t, kMftEntriesPerBlock> masks;
        for (unsigned i = 0; i < kMftEntriesPerBlock; ++i)
            masks[i] = tables_.masks(block * kMftEntriesPerBlock + i)[position];
        writeBlock16(mad, masks);
        return kStatusOk;
    }
    default:
        return kStatusBadAttribute;
    }
}

uint16_t Switch::smaSet(Mad &mad, unsigned in) {
    const uint32_t mod = mad.attributeModifier();
    uint16_t status;
    switch (mad.attributeId()) {
    case kAttrSwitchInfo:
        status = setSwitchInfo(mad);
        break;
    case kAttrPortInfo:
        if (portInfoPort(mod) > config_.ports)
            return kStatusBadField;
        status = setPortInfo(mad, portInfoPort(mod));
        break;
    case kAttrPkeyTable: {
        const unsigned port = mod >> 16, block = mod & 0xffff;
        if (port > config_.ports || block != 0)
            return kStatusBadField;
        readBlock16(mad, ports_[port].pkeys);
        status = kStatusOk;
        break;
    }
    case kAttrSlToVlTable: {
        const auto pair = slToVlPair(mod);
        if (!pair)
            return kStatusBadField;
        if (slToVl_.empty())
            slToVl_.assign(size_t{config_.ports + 1} * (config_.ports + 1), SlToVlTable{});
        readBytes(mad, slToVl_[*pair]);
        status = kStatusOk;
        break;
    }
    case kAttrVlArbTable: {
        const unsigned port = mod & 0xffff, block = mod >> 16;
        if (port > config_.ports || !VlArbTables::validBlock(block))
            return kStatusBadField;
        ports_[port].vlArb.set(block, mad);
        status = kStatusOk;
        break;
    }
    case kAttrLinearForwardingTable:
        if (mod >= kLftCap / 64)
            return kStatusBadField;
        {
            std::array<uint8_t, ForwardingTables::kLftBlock> entries;
            readBytes(mad, entries);
            tables_.setLftBlock(mod, entries);
            status = kStatusOk;
        }
        break;
    case kAttrMulticastForwardingTable: {
        const unsigned position = mod >> 28, block = mod & 0x1ff;
        if (block >= kMftCap / 32 || position > config_.ports / 16) // 16 ports per position
            return kStatusBadField;
        std::array<uint16_t, kMftEntriesPerBlock> masks;
        readBlock16(mad, masks);
        for (unsigned i = 0; i < kMftEntriesPerBlock; ++i)
            tables_.setMask(block * kMftEntriesPerBlock + i, position, masks[i]);
        status = kStatusOk;
        break;
    }
    default:
        return kStatusBadAttribute;
    }
    // A Set answers with the attribute's new value.
    if (status == kStatusOk)
        smaGet(mad, in);
    return status;
}

} // namespace pib::fabric
