// SPDX-License-Identifier: GPL-2.0-or-later
// Where a ConnectX UMR WQE (opcode 0x25, docs/mlx5.md §10) has its fields:
// shared by the decoders of the kernel's UMRs (mlx5_umr.cc) and of the
// UMRs of indirect keys (mlx5_umr_indirect.cc).
#pragma once

#include <cstddef>
#include <cstdint>

#include "pib_hw.h"

namespace pib::mlx5::umr::segments {

// After the 16-byte control segment: the UMR control segment
// (mlx5_wqe_umr_ctrl_seg, 48 bytes), the memory key segment
// (mlx5_mkey_seg, 64 bytes), then the translation entries inline or a
// data segment pointing at them.
constexpr size_t kControl = 16;
constexpr size_t kMkey = kControl + 48;
constexpr size_t kTranslations = kMkey + 64;
constexpr size_t kDataSegment = 16;

namespace control {
constexpr size_t kFlags = 0;
constexpr size_t kXltOctowords = 4;
constexpr size_t kXltOffset = 6;
constexpr size_t kMkeyMask = 8;
constexpr size_t kXltOffsetHigh = 16; // xlt_offset_47_16
constexpr uint8_t kInline = 0x80;
constexpr uint8_t kOffsetEnable = 0x10;
constexpr unsigned kCheckShift = 5; // 1: fail unless free, 2: fail if free
constexpr uint8_t kCheckMask = 0x3 << kCheckShift;
constexpr uint8_t kCheckFree = 0x1 << kCheckShift; // libmlx5's MLX5_UMR_CTRL_CHECK_FREE
constexpr uint8_t kCheckQpn = 0x08;                // the key's QP must be this one
constexpr uint8_t kFlagsKnown = kInline | kOffsetEnable | kCheckMask;
} // namespace control

// Which fields of the key the UMR sets (MLX5_MKEY_MASK_*).
namespace mask {
constexpr uint64_t kLength = 1u << 0;
constexpr uint64_t kPageSize = 1u << 1;
constexpr uint64_t kStartAddress = 1u << 6;
constexpr uint64_t kKey = 1u << 13;
constexpr uint64_t kFree = 1u << 29;
constexpr uint64_t kPd = 1u << 7;
constexpr uint64_t kQpn = 1u << 14;
constexpr uint64_t kRemoteInvalidate = 1u << 8; // MLX5_MKEY_MASK_EN_RINVAL
constexpr uint64_t kRights = 0xfu << 17;        // lr, lw, rr, rw
constexpr uint64_t kAtomic = 1u << 21;
constexpr uint64_t kSmallFence = 1u << 23;
constexpr uint64_t kRegistration = kLength | kPageSize | kStartAddress | kKey | kFree;
constexpr uint64_t kRange = kLength | kPageSize | kStartAddress;
constexpr uint64_t kUpdatable = kRange | kPd | kKey | kRights | kAtomic | kFree;
} // namespace mask

namespace mkey {
constexpr size_t kStatus = 0;
constexpr size_t kFlags = 2;
constexpr size_t kVariant = 7;   // the low byte of qpn_mkey7_0
constexpr size_t kLength64 = 12; // its top bit
constexpr uint8_t kLength64Bit = 0x80;
constexpr size_t kPd = 12;               // the low 24 bits of the dword
constexpr size_t kRemoteInvalidate = 12; // en_rinval: bit 24 of that dword
constexpr uint8_t kRemoteInvalidateBit = 0x01;
constexpr size_t kStartAddress = 16;
constexpr size_t kLength = 24;
constexpr size_t kLogPageSize = 59;
constexpr uint8_t kLogPageSizeMask = 0x3f;
constexpr uint8_t kStatusFree = 0x40;
constexpr uint8_t kAccessModeMask = 0x3;
constexpr uint8_t kAccessModeMtt = 0x1;
constexpr uint8_t kAccessModeKlm = 0x2;
// The access bits of the flags byte (MLX5_PERM_*).
constexpr uint8_t kLocalWrite = 1u << 3;
constexpr uint8_t kRemoteRead = 1u << 4;
constexpr uint8_t kRemoteWrite = 1u << 5;
constexpr uint8_t kAtomic = 1u << 6;
} // namespace mkey

inline uint32_t accessOf(uint8_t flags) {
    return (flags & mkey::kLocalWrite ? PIB_ACCESS_LOCAL_WRITE : 0) |
           (flags & mkey::kRemoteRead ? PIB_ACCESS_REMOTE_READ : 0) |
           (flags & mkey::kRemoteWrite ? PIB_ACCESS_REMOTE_WRITE : 0) |
           (flags & mkey::kAtomic ? PIB_ACCESS_REMOTE_ATOMIC : 0);
}

} // namespace pib::mlx5::umr::segments
