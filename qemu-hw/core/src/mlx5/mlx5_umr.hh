// SPDX-License-Identifier: GPL-2.0-or-later
// A ConnectX UMR WQE (opcode 0x25, docs/mlx5.md §10) as the core's memory
// management operations: with a memory key context that maps a region,
// a fast registration (REG_MR) whose page list is in the WQE or where its
// data segment points; with the key's free bit set, an invalidation
// (LOCAL_INV). Kernel consumers post both (mlx5_ib's IB_WR_REG_MR and
// IB_WR_LOCAL_INV) for the keys CREATE_MKEY made free and UMR-enabled.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "host.hh"
#include "wqe_format.hh"

namespace pib::mlx5::umr {

// Decodes the segments after the control segment of `wqe` (`used` bytes
// of it, the DS count's) into `out`, whose control segment is read:
// ctrl.imm holds the key. Returns PIB_WC_SUCCESS or the status the WQE
// completes with, a guest error saying why.
// Only a QP with fast registration enabled (`fastRegEnabled`, the
// kernel's) registers and invalidates; any QP may post the UMRs of
// indirect keys (decodeIndirect), whose key is checked as it runs.
uint8_t decode(const Host &host, uint32_t qpn, uint32_t index, std::span<const uint8_t> wqe,
               size_t used, bool fastRegEnabled, Wqe &out);

// A UMR of an indirect key (docs/mlx5.md §10.4): its layout, range,
// rights and free state into out.indirect (indirect_key.hh).
uint8_t decodeIndirect(const Host &host, uint32_t qpn, uint32_t index, std::span<const uint8_t> wqe,
                       size_t used, Wqe &out);
// A UMR of a memory window (docs/mlx5.md §10.5): a bind as out.bind, a
// type 1 unbind (length 0) or a type 2 LOCAL_INV.
uint8_t decodeWindow(const Host &host, uint32_t qpn, uint32_t index, std::span<const uint8_t> wqe,
                     size_t used, Wqe &out);
// mlx5_ib's IB_WR_REG_MR of a KLM key (access mode 2 in the key segment),
// a kernel QP's: into out.indirect, its list inline, or behind the data
// segment in out.sges (indirectEntries parses it once read).
uint8_t decodeKernelIndirect(const Host &host, uint32_t qpn, uint32_t index,
                             std::span<const uint8_t> wqe, size_t used, Wqe &out);
// A KLM list as `bytes` (read from where a registration's data segment
// points) into u.layout for u.length bytes: null, or why not.
const char *indirectEntries(std::span<const uint8_t> bytes, IndirectUpdate &u);

// The same for a WQE of the driver's UMR QP: a general key update
// (key_update.hh, docs/mlx5.md §10.1) into out.update, its translation
// entries into out.pages.
uint8_t decodeUpdate(const Host &host, uint32_t qpn, uint32_t index, std::span<const uint8_t> wqe,
                     size_t used, Wqe &out);

// MTT entries as the translation list holds them (big-endian), each a
// page address with its enables (read, write) in the low bits: a key the
// UMR QP loads pages on demand by them (MemoryRegion::pagedEntries).
void translationEntries(std::span<const uint8_t> bytes, std::vector<uint64_t> &pages);

} // namespace pib::mlx5::umr
