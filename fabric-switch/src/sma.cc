// SPDX-License-Identifier: GPL-2.0-or-later
// The switch's subnet management agent: the SMP attributes of IBA 14.2.5
// that a switch answers, Get and Set.
#include <algorithm>
#include <chrono>
#include <cstring>

#include "switch.hh"

namespace pib::fabric {

using namespace pib::iba;

namespace {

constexpr size_t D = Mad::kSmpData;
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

bool Switch::sma(Mad mad, unsigned in, std::vector<Transmit> &out) {
    // Port 0's M_Key guards every attribute of the switch (IBA 14.2.4).
    const auto verdict = mkey_.check(mad, now());
    if (verdict == MkeyProtection::Verdict::kViolation) {
        dropped(in, "SMP with a bad M_Key, violations", mkey_.violations());
        trapToSm(out, badMkeyTrap(mad, lid_, kProducerSwitch, ++trapTid_));
        return false;
    }
    hideMkey_ = verdict == MkeyProtection::Verdict::kPassHideKey;
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
    mad.set8(D + 0, 1); // base version
    mad.set8(D + 1, 1); // class version
    mad.set8(D + 2, 2); // node type: switch
    mad.set8(D + 3, static_cast<uint8_t>(config_.ports));
    mad.set64(D + 4, config_.guid);  // system image GUID
    mad.set64(D + 12, config_.guid); // node GUID
    mad.set64(D + 20, config_.guid); // port GUID: a switch's is its node GUID
    mad.set16(D + 28, kPartitionCap);
    mad.set16(D + 30, kDeviceId);
    mad.set32(D + 32, 1); // revision
    mad.set32(D + 36, static_cast<uint32_t>(in) << 24 | kVendorId);
}

void Switch::switchInfo(Mad &mad) const {
    mad.set16(D + 0, kLftCap);
    mad.set16(D + 2, 0); // no random forwarding table
    mad.set16(D + 4, kMftCap);
    mad.set16(D + 6, linearFdbTop_);
    mad.set8(D + 8, defaultPort_);
    mad.set8(D + 9, 0xff);
    mad.set8(D + 10, 0xff);
    mad.set8(D + 11, static_cast<uint8_t>(lifeTime_ << 3 | portStateChange_ << 2));
    mad.set16(D + 12, 1); // LIDs per port
    mad.set16(D + 14, 0); // no partition enforcement
    mad.set8(D + 16, 0);  // no enforcement capabilities, base port 0
    mad.set16(D + 17, multicastFdbTop_);
}

uint16_t Switch::setSwitchInfo(Mad &mad) {
    linearFdbTop_ = std::min<uint16_t>(mad.get16(D + 6), kLftCap - 1);
    defaultPort_ = mad.get8(D + 8);
    const uint8_t b = mad.get8(D + 11);
    lifeTime_ = b >> 3;
    if (b & 0x04) // writing 1 clears PortStateChange
        portStateChange_ = false;
    multicastFdbTop_ = mad.get16(D + 17);
    return kStatusOk;
}

void Switch::portInfo(Mad &mad, unsigned n, unsigned in) const {
    const SwitchPort &p = ports_[n];
    std::memset(mad.bytes().data() + D, 0, Mad::kSmpDataSize);
    const bool mgmt = n == 0;

    mad.set64(D + 8, mgmt ? gidPrefix_ : 0);
    mad.set16(D + 16, mgmt ? lid_ : 0);
    mad.set16(D + 18, mgmt ? smLid_ : 0);
    mad.set32(D + 20, 0);                       // capability mask
    mad.set8(D + 28, static_cast<uint8_t>(in)); // LocalPortNum: where the SMP came in
    // Links run 4x QDR, as the HCAs' ports do.
    mad.set8(D + 29, iba::kLinkWidth1x4x); // link width enabled
    mad.set8(D + 30, iba::kLinkWidth1x4x); // supported
    mad.set8(D + 31, iba::kLinkWidth4x);   // active
    mad.set8(D + 32, static_cast<uint8_t>(iba::kLinkSpeedSdrDdrQdr << 4 | p.state));
    const uint8_t phys = mgmt ? kPhysLinkUp : (p.linkUp ? kPhysLinkUp : kPhysPolling);
    mad.set8(D + 33, static_cast<uint8_t>(phys << 4 | 2)); // link down default: polling
    mad.set8(D + 34, mgmt ? lmc_ : 0);
    if (mgmt)
        mkey_.writePortInfo(mad, D, hideMkey_);
    mad.set8(D + 35, iba::kLinkSpeedQdr << 4 | iba::kLinkSpeedSdrDdrQdr); // active | enabled
    mad.set8(D + 36, static_cast<uint8_t>(p.neighborMtu << 4));
    mad.set8(D + 37, 1 << 4); // VLCap: VL0
    mad.set8(D + 38, p.vlHighLimit);
    mad.set8(D + 39, 0);
    mad.set8(D + 40, 1);
    mad.set8(D + 41, 5); // MTUCap 4096
    mad.set8(D + 42, p.hoqLife);
    mad.set8(D + 43, static_cast<uint8_t>(p.operationalVls << 4));
    mad.set8(D + 50, mgmt ? 1 : 0); // GUIDCap
    mad.set8(D + 51, mgmt ? subnetTimeout_ : 0);
}

uint16_t Switch::setPortInfo(Mad &mad, unsigned n) {
    const uint8_t before = ports_[n].state;
    const uint16_t status = applyPortInfo(mad, n);
    if (ports_[n].state != before)
        event("port " + std::to_string(n) + ": the SM set it " + stateName(ports_[n].state) +
              " (was " + stateName(before) + ")");
    return status;
}

uint16_t Switch::applyPortInfo(Mad &mad, unsigned n) {
    SwitchPort &p = ports_[n];
    const uint8_t newState = mad.get8(D + 32) & 0xf;
    const uint8_t mtu = mad.get8(D + 36) >> 4;
    const uint8_t vls = mad.get8(D + 43) >> 4;
    // Validate everything before changing anything (IBA: a Set that fails
    // leaves the attribute as it was).
    if (mtu > 5 || vls > 1)
        return kStatusBadField;
    if (newState != kStateNop && n != 0) {
        const bool ok =
            newState == kStateDown ||
            (newState == kStateArmed && p.state == kStateInit && p.linkUp) ||
            (newState == kStateActive && (p.state == kStateArmed || p.state == kStateActive));
        if (!ok)
            return kStatusBadField;
    }
    if (n == 0) {
        mkey_.setFromPortInfo(mad, D);
        gidPrefix_ = mad.get64(D + 8);
        lid_ = mad.get16(D + 16);
        smLid_ = mad.get16(D + 18);
        lmc_ = mad.get8(D + 34) & 7;
        subnetTimeout_ = mad.get8(D + 51) & 0x1f;
        if (newState == kStateArmed || newState == kStateActive)
            p.state = newState;
    } else {
        if (mtu)
            p.neighborMtu = mtu;
        if (newState == kStateDown && p.linkUp) {
            // The link goes down at both ends and trains again (the server
            // closes the cable; its peer reconnects): the peer's port must
            // leave ACTIVE too, and the new link reaches the SM as any
            // other would, through PortStateChange and Trap 128.
            p.state = kStateDown;
            if (std::find(linkResets_.begin(), linkResets_.end(), n) == linkResets_.end())
                linkResets_.push_back(n);
        } else if (newState != kStateNop) {
            p.state = newState;
        }
    }
    if (vls)
        p.operationalVls = vls;
    p.hoqLife = mad.get8(D + 42) & 0x1f;
    p.vlHighLimit = mad.get8(D + 38);
    return kStatusOk;
}

uint16_t Switch::smaGet(Mad &mad, unsigned in) {
    const uint32_t mod = mad.attributeModifier();
    switch (mad.attributeId()) {
    case kAttrNodeInfo:
        nodeInfo(mad, in);
        return kStatusOk;
    case kAttrNodeDescription: {
        auto *data = mad.bytes().data() + D;
        std::memset(data, 0, Mad::kSmpDataSize);
        std::memcpy(data, config_.description.data(),
                    std::min(config_.description.size(), Mad::kSmpDataSize - 1));
        return kStatusOk;
    }
    case kAttrSwitchInfo:
        switchInfo(mad);
        return kStatusOk;
    case kAttrPortInfo:
        if (mod > config_.ports)
            return kStatusBadField;
        portInfo(mad, mod, in);
        return kStatusOk;
    case kAttrGuidInfo:
        if (mod != 0)
            return kStatusBadField;
        std::memset(mad.bytes().data() + D, 0, Mad::kSmpDataSize);
        mad.set64(D, config_.guid);
        return kStatusOk;
    case kAttrPkeyTable: {
        const unsigned port = mod >> 16, block = mod & 0xffff;
        if (port > config_.ports || block != 0)
            return kStatusBadField;
        for (unsigned i = 0; i < 32; ++i)
            mad.set16(D + 2 * i, ports_[port].pkeys[i]);
        return kStatusOk;
    }
    case kAttrSlToVlTable: {
        const unsigned out = mod & 0xff;
        if (out > config_.ports)
            return kStatusBadField;
        std::memcpy(mad.bytes().data() + D, ports_[out].slToVl.data(), 8);
        return kStatusOk;
    }
    case kAttrVlArbTable: {
        const unsigned port = mod & 0xffff, block = mod >> 16;
        if (port > config_.ports || block < 1 || block > 4)
            return kStatusBadField;
        const size_t half = block <= 2 ? 0 : 32; // low, then high priority
        std::memcpy(mad.bytes().data() + D, ports_[port].vlArb.data() + half, 32);
        return kStatusOk;
    }
    case kAttrLinearForwardingTable:
        if (mod >= kLftCap / 64)
            return kStatusBadField;
        std::memcpy(mad.bytes().data() + D, lft_.data() + mod * 64, 64);
        return kStatusOk;
    case kAttrMulticastForwardingTable: {
        const unsigned position = mod >> 28, block = mod & 0x1ff;
        if (block >= kMftCap / 32 || position > config_.ports / 16) // 16 ports per position
            return kStatusBadField;
        for (unsigned i = 0; i < 32; ++i)
            mad.set16(D + 2 * i, mft_[block * 32 + i][position]);
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
        if (mod > config_.ports)
            return kStatusBadField;
        status = setPortInfo(mad, mod);
        break;
    case kAttrPkeyTable: {
        const unsigned port = mod >> 16, block = mod & 0xffff;
        if (port > config_.ports || block != 0)
            return kStatusBadField;
        for (unsigned i = 0; i < 32; ++i)
            ports_[port].pkeys[i] = mad.get16(D + 2 * i);
        status = kStatusOk;
        break;
    }
    case kAttrSlToVlTable: {
        const unsigned out = mod & 0xff;
        if (out > config_.ports)
            return kStatusBadField;
        std::memcpy(ports_[out].slToVl.data(), mad.bytes().data() + D, 8);
        status = kStatusOk;
        break;
    }
    case kAttrVlArbTable: {
        const unsigned port = mod & 0xffff, block = mod >> 16;
        if (port > config_.ports || block < 1 || block > 4)
            return kStatusBadField;
        const size_t half = block <= 2 ? 0 : 32;
        std::memcpy(ports_[port].vlArb.data() + half, mad.bytes().data() + D, 32);
        status = kStatusOk;
        break;
    }
    case kAttrLinearForwardingTable:
        if (mod >= kLftCap / 64)
            return kStatusBadField;
        std::memcpy(lft_.data() + mod * 64, mad.bytes().data() + D, 64);
        status = kStatusOk;
        break;
    case kAttrMulticastForwardingTable: {
        const unsigned position = mod >> 28, block = mod & 0x1ff;
        if (block >= kMftCap / 32 || position > config_.ports / 16) // 16 ports per position
            return kStatusBadField;
        for (unsigned i = 0; i < 32; ++i)
            mft_[block * 32 + i][position] = mad.get16(D + 2 * i);
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
