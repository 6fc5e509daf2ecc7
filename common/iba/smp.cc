// SPDX-License-Identifier: GPL-2.0-or-later
#include "smp.hh"

#include <algorithm>
#include <cstring>

namespace pib::iba {

namespace {

constexpr size_t D = Mad::kSmpData;

// One byte of two 4-bit fields.
uint8_t nibbles(uint8_t high, uint8_t low) {
    return static_cast<uint8_t>((high & 0xf) << 4 | (low & 0xf));
}

void clearData(Mad &smp) {
    std::memset(smp.bytes().data() + D, 0, Mad::kSmpDataSize);
}

} // namespace

void writeNodeInfo(Mad &smp, const NodeInfo &n) {
    clearData(smp);
    smp.set8(D + 0, n.baseVersion);
    smp.set8(D + 1, n.classVersion);
    smp.set8(D + 2, n.nodeType);
    smp.set8(D + 3, n.numPorts);
    smp.set64(D + 4, n.systemImageGuid);
    smp.set64(D + 12, n.nodeGuid);
    smp.set64(D + 20, n.portGuid);
    smp.set16(D + 28, n.partitionCap);
    smp.set16(D + 30, n.deviceId);
    smp.set32(D + 32, n.revision);
    smp.set32(D + 36, static_cast<uint32_t>(n.localPortNum) << 24 | (n.vendorId & 0xffffff));
}

NodeInfo readNodeInfo(const Mad &smp) {
    NodeInfo n;
    n.baseVersion = smp.get8(D + 0);
    n.classVersion = smp.get8(D + 1);
    n.nodeType = smp.get8(D + 2);
    n.numPorts = smp.get8(D + 3);
    n.systemImageGuid = smp.get64(D + 4);
    n.nodeGuid = smp.get64(D + 12);
    n.portGuid = smp.get64(D + 20);
    n.partitionCap = smp.get16(D + 28);
    n.deviceId = smp.get16(D + 30);
    n.revision = smp.get32(D + 32);
    n.localPortNum = smp.get8(D + 36);
    n.vendorId = smp.get32(D + 36) & 0xffffff;
    return n;
}

void writeSwitchInfo(Mad &smp, const SwitchInfo &s) {
    clearData(smp);
    smp.set16(D + 0, s.linearFdbCap);
    smp.set16(D + 2, s.randomFdbCap);
    smp.set16(D + 4, s.multicastFdbCap);
    smp.set16(D + 6, s.linearFdbTop);
    smp.set8(D + 8, s.defaultPort);
    smp.set8(D + 9, s.defaultMulticastPrimaryPort);
    smp.set8(D + 10, s.defaultMulticastNotPrimaryPort);
    smp.set8(D + 11, static_cast<uint8_t>((s.lifeTimeValue & 0x1f) << 3 | s.portStateChange << 2 |
                                          (s.optimizedSlToVlMappingProgramming & 3)));
    smp.set16(D + 12, s.lidsPerPort);
    smp.set16(D + 14, s.partitionEnforcementCap);
    smp.set8(D + 16, static_cast<uint8_t>((s.enforcementBits & 0xf) << 4 | s.enhancedPort0 << 3));
    smp.set16(D + 17, s.multicastFdbTop);
}

SwitchInfo readSwitchInfo(const Mad &smp) {
    SwitchInfo s;
    s.linearFdbCap = smp.get16(D + 0);
    s.randomFdbCap = smp.get16(D + 2);
    s.multicastFdbCap = smp.get16(D + 4);
    s.linearFdbTop = smp.get16(D + 6);
    s.defaultPort = smp.get8(D + 8);
    s.defaultMulticastPrimaryPort = smp.get8(D + 9);
    s.defaultMulticastNotPrimaryPort = smp.get8(D + 10);
    const uint8_t b11 = smp.get8(D + 11);
    s.lifeTimeValue = b11 >> 3;
    s.portStateChange = b11 & 0x04;
    s.optimizedSlToVlMappingProgramming = b11 & 3;
    s.lidsPerPort = smp.get16(D + 12);
    s.partitionEnforcementCap = smp.get16(D + 14);
    s.enforcementBits = smp.get8(D + 16) >> 4;
    s.enhancedPort0 = smp.get8(D + 16) & 0x08;
    s.multicastFdbTop = smp.get16(D + 17);
    return s;
}

void writePortInfo(Mad &smp, const PortInfo &p) {
    clearData(smp);
    smp.set64(D + 0, p.mkey);
    smp.set64(D + 8, p.gidPrefix);
    smp.set16(D + 16, p.lid);
    smp.set16(D + 18, p.masterSmLid);
    smp.set32(D + 20, p.capabilityMask);
    smp.set16(D + 24, p.diagCode);
    smp.set16(D + 26, p.mkeyLeasePeriod);
    smp.set8(D + 28, p.localPortNum);
    smp.set8(D + 29, p.linkWidthEnabled);
    smp.set8(D + 30, p.linkWidthSupported);
    smp.set8(D + 31, p.linkWidthActive);
    smp.set8(D + 32, nibbles(p.linkSpeedSupported, p.portState));
    smp.set8(D + 33, nibbles(p.portPhysicalState, p.linkDownDefaultState));
    smp.set8(D + 34, static_cast<uint8_t>((p.mkeyProtectBits & 3) << 6 | (p.lmc & 7)));
    smp.set8(D + 35, nibbles(p.linkSpeedActive, p.linkSpeedEnabled));
    smp.set8(D + 36, nibbles(p.neighborMtu, p.masterSmSl));
    smp.set8(D + 37, nibbles(p.vlCap, p.initType));
    smp.set8(D + 38, p.vlHighLimit);
    smp.set8(D + 39, p.vlArbitrationHighCap);
    smp.set8(D + 40, p.vlArbitrationLowCap);
    smp.set8(D + 41, nibbles(p.initTypeReply, p.mtuCap));
    smp.set8(D + 42, static_cast<uint8_t>((p.vlStallCount & 7) << 5 | (p.hoqLife & 0x1f)));
    smp.set8(D + 43, nibbles(p.operationalVls, p.partitionEnforcement));
    smp.set16(D + 44, p.mkeyViolations);
    smp.set16(D + 46, p.pkeyViolations);
    smp.set16(D + 48, p.qkeyViolations);
    smp.set8(D + 50, p.guidCap);
    smp.set8(D + 51, static_cast<uint8_t>(p.clientReregister << 7 |
                                          (p.multicastPkeyTrapSuppression & 3) << 5 |
                                          (p.subnetTimeout & 0x1f)));
    smp.set8(D + 52, p.respTimeValue & 0x1f);
    smp.set8(D + 53, nibbles(p.localPhyErrors, p.overrunErrors));
    smp.set16(D + 54, p.maxCreditHint);
    smp.set32(D + 56, p.linkRoundTripLatency & 0xffffff);
    smp.set16(D + 60, p.capabilityMask2);
    smp.set8(D + 62, nibbles(p.linkSpeedExtActive, p.linkSpeedExtSupported));
    smp.set8(D + 63, p.linkSpeedExtEnabled & 0x1f);
}

PortInfo readPortInfo(const Mad &smp) {
    PortInfo p;
    p.mkey = smp.get64(D + 0);
    p.gidPrefix = smp.get64(D + 8);
    p.lid = smp.get16(D + 16);
    p.masterSmLid = smp.get16(D + 18);
    p.capabilityMask = smp.get32(D + 20);
    p.diagCode = smp.get16(D + 24);
    p.mkeyLeasePeriod = smp.get16(D + 26);
    p.localPortNum = smp.get8(D + 28);
    p.linkWidthEnabled = smp.get8(D + 29);
    p.linkWidthSupported = smp.get8(D + 30);
    p.linkWidthActive = smp.get8(D + 31);
    p.linkSpeedSupported = smp.get8(D + 32) >> 4;
    p.portState = smp.get8(D + 32) & 0xf;
    p.portPhysicalState = smp.get8(D + 33) >> 4;
    p.linkDownDefaultState = smp.get8(D + 33) & 0xf;
    p.mkeyProtectBits = smp.get8(D + 34) >> 6;
    p.lmc = smp.get8(D + 34) & 7;
    p.linkSpeedActive = smp.get8(D + 35) >> 4;
    p.linkSpeedEnabled = smp.get8(D + 35) & 0xf;
    p.neighborMtu = smp.get8(D + 36) >> 4;
    p.masterSmSl = smp.get8(D + 36) & 0xf;
    p.vlCap = smp.get8(D + 37) >> 4;
    p.initType = smp.get8(D + 37) & 0xf;
    p.vlHighLimit = smp.get8(D + 38);
    p.vlArbitrationHighCap = smp.get8(D + 39);
    p.vlArbitrationLowCap = smp.get8(D + 40);
    p.initTypeReply = smp.get8(D + 41) >> 4;
    p.mtuCap = smp.get8(D + 41) & 0xf;
    p.vlStallCount = smp.get8(D + 42) >> 5;
    p.hoqLife = smp.get8(D + 42) & 0x1f;
    p.operationalVls = smp.get8(D + 43) >> 4;
    p.partitionEnforcement = smp.get8(D + 43) & 0xf;
    p.mkeyViolations = smp.get16(D + 44);
    p.pkeyViolations = smp.get16(D + 46);
    p.qkeyViolations = smp.get16(D + 48);
    p.guidCap = smp.get8(D + 50);
    p.clientReregister = smp.get8(D + 51) & 0x80;
    p.multicastPkeyTrapSuppression = (smp.get8(D + 51) >> 5) & 3;
    p.subnetTimeout = smp.get8(D + 51) & 0x1f;
    p.respTimeValue = smp.get8(D + 52) & 0x1f;
    p.localPhyErrors = smp.get8(D + 53) >> 4;
    p.overrunErrors = smp.get8(D + 53) & 0xf;
    p.maxCreditHint = smp.get16(D + 54);
    p.linkRoundTripLatency = smp.get32(D + 56) & 0xffffff;
    p.capabilityMask2 = smp.get16(D + 60);
    p.linkSpeedExtActive = smp.get8(D + 62) >> 4;
    p.linkSpeedExtSupported = smp.get8(D + 62) & 0xf;
    p.linkSpeedExtEnabled = smp.get8(D + 63) & 0x1f;
    return p;
}

void writeBlock16(Mad &smp, std::span<const uint16_t> entries) {
    clearData(smp);
    const size_t n = std::min<size_t>(entries.size(), Mad::kSmpDataSize / 2);
    for (size_t i = 0; i < n; ++i)
        smp.set16(D + 2 * i, entries[i]);
}

void readBlock16(const Mad &smp, std::span<uint16_t> entries) {
    const size_t n = std::min<size_t>(entries.size(), Mad::kSmpDataSize / 2);
    for (size_t i = 0; i < n; ++i)
        entries[i] = smp.get16(D + 2 * i);
}

void writeBlock64(Mad &smp, std::span<const uint64_t> entries) {
    clearData(smp);
    const size_t n = std::min<size_t>(entries.size(), Mad::kSmpDataSize / 8);
    for (size_t i = 0; i < n; ++i)
        smp.set64(D + 8 * i, entries[i]);
}

void readBlock64(const Mad &smp, std::span<uint64_t> entries) {
    const size_t n = std::min<size_t>(entries.size(), Mad::kSmpDataSize / 8);
    for (size_t i = 0; i < n; ++i)
        entries[i] = smp.get64(D + 8 * i);
}

void writeBytes(Mad &smp, std::span<const uint8_t> bytes) {
    clearData(smp);
    std::memcpy(smp.bytes().data() + D, bytes.data(),
                std::min<size_t>(bytes.size(), Mad::kSmpDataSize));
}

void readBytes(const Mad &smp, std::span<uint8_t> bytes) {
    const size_t n = std::min<size_t>(bytes.size(), Mad::kSmpDataSize);
    for (size_t i = 0; i < n; ++i)
        bytes[i] = smp.get8(D + i);
}

} // namespace pib::iba
