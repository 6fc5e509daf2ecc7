// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX interface's layouts, as the public mlx5_ifc.h and
// device.h of Linux describe them (docs/mlx5.md names the sections):
// big-endian fields named by their bit offset from the start of their
// structure, the most significant bit first. Only the facts, as numbers;
// the accessors are ours.
#pragma once

#include <cstdint>
#include <span>

#include "invariant.hh"

namespace pib::mlx5 {

// A field of an mlx5_ifc structure: its bit offset and width.
struct Field {
    uint32_t bit;
    uint32_t width; // 1..32, within one dword; or 64, dword-aligned
};

constexpr Field field(uint32_t bit, uint32_t width) {
    return Field{bit, width};
}

inline uint32_t readBe32(const uint8_t *p) {
    return uint32_t{p[0]} << 24 | uint32_t{p[1]} << 16 | uint32_t{p[2]} << 8 | p[3];
}

inline void writeBe32(uint8_t *p, uint32_t v) {
    p[0] = static_cast<uint8_t>(v >> 24), p[1] = static_cast<uint8_t>(v >> 16);
    p[2] = static_cast<uint8_t>(v >> 8), p[3] = static_cast<uint8_t>(v);
}

inline uint16_t readBe16(const uint8_t *p) {
    return static_cast<uint16_t>(p[0] << 8 | p[1]);
}

inline void writeBe16(uint8_t *p, uint16_t v) {
    p[0] = static_cast<uint8_t>(v >> 8);
    p[1] = static_cast<uint8_t>(v);
}

inline uint64_t readBe64(const uint8_t *p) {
    return uint64_t{readBe32(p)} << 32 | readBe32(p + 4);
}

inline void writeBe64(uint8_t *p, uint64_t v) {
    writeBe32(p, static_cast<uint32_t>(v >> 32));
    writeBe32(p + 4, static_cast<uint32_t>(v));
}

// The value of `f` in `bytes` (a field beyond them reads 0: a shorter
// input than the structure is zero-extended, as the device reads it).
inline uint64_t get(std::span<const uint8_t> bytes, Field f) {
    const uint32_t dword = f.bit / 32;
    if ((dword + (f.width == 64 ? 2 : 1)) * 4 > bytes.size())
        return 0;
    const uint8_t *p = bytes.data() + dword * 4;
    if (f.width == 64)
        return readBe64(p);
    const uint32_t shift = 32 - f.width - f.bit % 32;
    const uint32_t mask = f.width == 32 ? ~0u : (1u << f.width) - 1;
    return readBe32(p) >> shift & mask;
}

// Writes `value` into `f` of `bytes`, which must hold it.
inline void set(std::span<uint8_t> bytes, Field f, uint64_t value) {
    const uint32_t dword = f.bit / 32;
    PIB_INVARIANT((dword + (f.width == 64 ? 2 : 1)) * 4 <= bytes.size());
    uint8_t *p = bytes.data() + dword * 4;
    if (f.width == 64) {
        writeBe64(p, value);
        return;
    }
    const uint32_t shift = 32 - f.width - f.bit % 32;
    const uint32_t mask = (f.width == 32 ? ~0u : (1u << f.width) - 1) << shift;
    writeBe32(p, (readBe32(p) & ~mask) | (static_cast<uint32_t>(value) << shift & mask));
}

// Queue numbers (QPN, CQN, SRQN) and the consumer counters of the EQ and
// CQ doorbells are 24 bits.
inline constexpr uint32_t kMask24 = 0xffffff;
// log_wq_stride and log_rq_stride count from 16-byte units.
inline constexpr uint32_t kStrideUnitShift = 4;

// ---- Who the device says it is -----------------------------------------
// A ConnectX-5 (mlx5_core's table binds it) of Mellanox, whose PCI vendor
// ID, IEEE OUI (IBA NodeInfo's VendorID, QUERY_ADAPTER's) and device ID
// these are.
namespace identity {
inline constexpr uint16_t kPciVendorId = 0x15b3;
inline constexpr uint32_t kOui = 0x0002c9;
inline constexpr uint16_t kConnectX5 = 0x1017;
} // namespace identity

// ---- The initialization segment: BAR0 from 0 (device.h, mlx5_init_seg) --
namespace iseg {
inline constexpr uint32_t kFwRev = 0x000;         // minor 31:16, major 15:0
inline constexpr uint32_t kCmdifRevFwSub = 0x004; // command interface revision 31:16
inline constexpr uint32_t kCmdqAddrHigh = 0x010;
inline constexpr uint32_t kCmdqAddrLowSize = 0x014; // address 31:12, nic_interface 10:8, sizes
inline constexpr uint32_t kCmdDoorbell = 0x018;     // a bit per command slot
inline constexpr uint32_t kInitializing = 0x1fc;    // bit 31: firmware still initializing
inline constexpr uint32_t kHealth = 0x200;          // struct health_buffer, 64 bytes
inline constexpr uint32_t kHealthFwVer = 0x230;
inline constexpr uint32_t kHealthRfrSeverity = 0x238; // bit 7: reset requested
inline constexpr uint32_t kHealthSynd = 0x23d;
inline constexpr uint32_t kCmdExecTimeout = 0xff8;
inline constexpr uint32_t kCmdQueueInitTimeout = 0xffc;
inline constexpr uint32_t kInternalTimerHigh = 0x1000;
inline constexpr uint32_t kInternalTimerLow = 0x1004;
inline constexpr uint32_t kHealthCounter = 0x1010;
inline constexpr uint32_t kSize = 0x2010; // what the driver maps

// The revision of the command interface Linux's mlx5 speaks.
inline constexpr uint16_t kCmdifRevision = 5;
// nic_interface (cmdq_addr_l_sz 10:8), as the driver sets and the health
// poll reads it.
inline constexpr uint32_t kNicInterfaceShift = 8;
inline constexpr uint32_t kNicInterfaceMask = 7;
} // namespace iseg

// ---- The command queue (device.h, mlx5_cmd_layout, mlx5_cmd_prot_block) -
namespace cmdq {
inline constexpr uint32_t kLogSize = 5;   // 32 slots
inline constexpr uint32_t kLogStride = 6; // of 64 bytes: one 4 KiB page
inline constexpr uint32_t kSlots = 1u << kLogSize;
inline constexpr uint32_t kEntryBytes = 1u << kLogStride;
inline constexpr uint8_t kTransportPci = 7; // the layout's type

// The 64-byte layout of a slot.
inline constexpr uint32_t kType = 0x00;
inline constexpr uint32_t kInLength = 0x04;
inline constexpr uint32_t kInPointer = 0x08;
inline constexpr uint32_t kInInline = 0x10; // the input's first 16 bytes
inline constexpr uint32_t kOutInline = 0x20;
inline constexpr uint32_t kOutPointer = 0x30;
inline constexpr uint32_t kOutLength = 0x38;
inline constexpr uint32_t kToken = 0x3c;
inline constexpr uint32_t kStatusOwn = 0x3f; // bit 0: hardware owns it; 7:1 delivery status
inline constexpr uint32_t kInlineBytes = 16;

// A mailbox block: 512 bytes of data, then its chaining.
inline constexpr uint32_t kBlockData = 512;
inline constexpr uint32_t kBlockNext = 0x230;
inline constexpr uint32_t kBlockNumber = 0x238;
inline constexpr uint32_t kBlockBytes = 0x240;

// Delivery statuses: the command was not executed (cmd.c's list).
inline constexpr uint8_t kDeliveryOk = 0x0;
inline constexpr uint8_t kDeliveryBadBlockNumber = 0x3;
inline constexpr uint8_t kDeliveryOutPointerAlign = 0x4;
inline constexpr uint8_t kDeliveryInPointerAlign = 0x5;
inline constexpr uint8_t kDeliveryInLength = 0x7;
inline constexpr uint8_t kDeliveryOutLength = 0x8;
inline constexpr uint8_t kDeliveryDescriptor = 0x10;
} // namespace cmdq

// Every command's input starts with its opcode and op_mod, and its output
// with a status and a syndrome.
inline constexpr Field kOpcode = field(0x00, 16);
inline constexpr Field kUid = field(0x10, 16);
inline constexpr Field kOpMod = field(0x30, 16);
inline constexpr Field kStatus = field(0x00, 8);
inline constexpr Field kSyndrome = field(0x20, 32);
inline constexpr uint32_t kHeaderBytes = 0x10; // of an input, and of an output

// Execution statuses (device.h, MLX5_CMD_STAT_*).
namespace status {
inline constexpr uint8_t kOk = 0x00;
inline constexpr uint8_t kInternal = 0x01;
inline constexpr uint8_t kBadOpcode = 0x02;
inline constexpr uint8_t kBadParam = 0x03;
inline constexpr uint8_t kBadSystemState = 0x04;
inline constexpr uint8_t kBadResource = 0x05;
inline constexpr uint8_t kResourceBusy = 0x06;
inline constexpr uint8_t kLimit = 0x08;
inline constexpr uint8_t kBadResourceState = 0x09;
inline constexpr uint8_t kBadIndex = 0x0a;
inline constexpr uint8_t kNoResources = 0x0f;
inline constexpr uint8_t kBadQpState = 0x10;
inline constexpr uint8_t kBadInputLength = 0x50;
inline constexpr uint8_t kBadOutputLength = 0x51;
} // namespace status

} // namespace pib::mlx5
