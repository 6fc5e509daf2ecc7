// SPDX-License-Identifier: GPL-2.0-or-later
// The subnet management attributes (IBA 14.2.5) as structures with named
// fields, and the one codec between them and an SMP's 64 data bytes. The
// HCA's SMA and the switch's both read and write their attributes through
// it, so no attribute layout is written down twice.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "mad.hh"

namespace pib::iba {

// NodeInfo (IBA 14.2.5.3).
struct NodeInfo {
    uint8_t baseVersion = 1;
    uint8_t classVersion = 1;
    uint8_t nodeType = 0; // 1 channel adapter, 2 switch
    uint8_t numPorts = 0;
    uint64_t systemImageGuid = 0;
    uint64_t nodeGuid = 0;
    uint64_t portGuid = 0;
    uint16_t partitionCap = 0;
    uint16_t deviceId = 0;
    uint32_t revision = 0;
    uint8_t localPortNum = 0;
    uint32_t vendorId = 0; // 24 bits
};

inline constexpr uint8_t kNodeTypeCa = 1;
inline constexpr uint8_t kNodeTypeSwitch = 2;

// SwitchInfo (IBA 14.2.5.4).
struct SwitchInfo {
    uint16_t linearFdbCap = 0;
    uint16_t randomFdbCap = 0;
    uint16_t multicastFdbCap = 0;
    uint16_t linearFdbTop = 0;
    uint8_t defaultPort = 0;
    uint8_t defaultMulticastPrimaryPort = 0;
    uint8_t defaultMulticastNotPrimaryPort = 0;
    uint8_t lifeTimeValue = 0; // 5 bits
    bool portStateChange = false;
    uint8_t optimizedSlToVlMappingProgramming = 0; // 2 bits
    uint16_t lidsPerPort = 0;
    uint16_t partitionEnforcementCap = 0;
    uint8_t enforcementBits = 0; // inbound, outbound, filter raw in, out
    bool enhancedPort0 = false;
    uint16_t multicastFdbTop = 0;
};

// PortInfo (IBA 14.2.5.6). Fields of four bits or fewer hold their value
// in the low bits.
struct PortInfo {
    uint64_t mkey = 0;
    uint64_t gidPrefix = 0;
    uint16_t lid = 0;
    uint16_t masterSmLid = 0;
    uint32_t capabilityMask = 0;
    uint16_t diagCode = 0;
    uint16_t mkeyLeasePeriod = 0;
    uint8_t localPortNum = 0;
    uint8_t linkWidthEnabled = 0;
    uint8_t linkWidthSupported = 0;
    uint8_t linkWidthActive = 0;
    uint8_t linkSpeedSupported = 0;
    uint8_t portState = 0; // 0 on a Set: no change
    uint8_t portPhysicalState = 0;
    uint8_t linkDownDefaultState = 0;
    uint8_t mkeyProtectBits = 0; // 2 bits
    uint8_t lmc = 0;             // 3 bits
    uint8_t linkSpeedActive = 0;
    uint8_t linkSpeedEnabled = 0;
    uint8_t neighborMtu = 0;
    uint8_t masterSmSl = 0;
    uint8_t vlCap = 0;
    uint8_t initType = 0;
    uint8_t vlHighLimit = 0;
    uint8_t vlArbitrationHighCap = 0;
    uint8_t vlArbitrationLowCap = 0;
    uint8_t initTypeReply = 0;
    uint8_t mtuCap = 0;
    uint8_t vlStallCount = 0; // 3 bits
    uint8_t hoqLife = 0;      // 5 bits
    uint8_t operationalVls = 0;
    uint8_t partitionEnforcement = 0; // inbound, outbound, filter raw in, out
    uint16_t mkeyViolations = 0;
    uint16_t pkeyViolations = 0;
    uint16_t qkeyViolations = 0;
    uint8_t guidCap = 0;
    bool clientReregister = false;
    uint8_t multicastPkeyTrapSuppression = 0; // 2 bits
    uint8_t subnetTimeout = 0;                // 5 bits
    uint8_t respTimeValue = 0;                // 5 bits
    uint8_t localPhyErrors = 0;
    uint8_t overrunErrors = 0;
    uint16_t maxCreditHint = 0;
    uint32_t linkRoundTripLatency = 0; // 24 bits
    uint16_t capabilityMask2 = 0;
    uint8_t linkSpeedExtActive = 0;
    uint8_t linkSpeedExtSupported = 0;
    uint8_t linkSpeedExtEnabled = 0; // 5 bits
};

// PortInfo's PortState values (IBA 14.2.5.6, table 146).
enum PortState : uint8_t {
    kPortStateNop = 0,
    kPortStateDown = 1,
    kPortStateInit = 2,
    kPortStateArmed = 3,
    kPortStateActive = 4,
};

// PortInfo's PortPhysicalState and LinkDownDefaultState values.
enum PhysState : uint8_t {
    kPhysSleep = 1,
    kPhysPolling = 2,
    kPhysDisabled = 3,
    kPhysLinkUp = 5,
};

// The port a PortInfo SMP's attribute modifier names: its low 8 bits.
// The SM sets bit 31 on a Set to say it supports extended link speeds
// (opensm does when port 0 offers them); the rest is reserved.
inline unsigned portInfoPort(uint32_t modifier) {
    return modifier & 0xff;
}

// The whole 64-byte attribute is written: what a structure does not set
// reads as 0. Reading takes every field as sent.
void writeNodeInfo(Mad &smp, const NodeInfo &info);
void writeSwitchInfo(Mad &smp, const SwitchInfo &info);
void writePortInfo(Mad &smp, const PortInfo &info);
NodeInfo readNodeInfo(const Mad &smp);
SwitchInfo readSwitchInfo(const Mad &smp);
PortInfo readPortInfo(const Mad &smp);

// The table attributes, a block at a time: P_KeyTable (32 P_Keys),
// GUIDInfo (8 GUIDs), and the 16-bit entries of a multicast forwarding
// table block (32 port masks).
inline constexpr unsigned kPkeysPerBlock = 32;
inline constexpr unsigned kGuidsPerBlock = 8;
inline constexpr unsigned kMftEntriesPerBlock = 32;
void writeBlock16(Mad &smp, std::span<const uint16_t> entries);
void readBlock16(const Mad &smp, std::span<uint16_t> entries);
void writeBlock64(Mad &smp, std::span<const uint64_t> entries);
void readBlock64(const Mad &smp, std::span<uint64_t> entries);
// Attributes that are byte arrays (SLtoVLMappingTable, VLArbitrationTable
// blocks, LinearForwardingTable blocks, NodeDescription): bytes in order.
void writeBytes(Mad &smp, std::span<const uint8_t> bytes);
void readBytes(const Mad &smp, std::span<uint8_t> bytes);

} // namespace pib::iba
