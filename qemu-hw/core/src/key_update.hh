// SPDX-License-Identifier: GPL-2.0-or-later
// A general update of a memory key, as a ConnectX UMR WQE on the driver's
// UMR QP gives it (docs/mlx5.md §10.1): translation entries loaded at an
// offset into the key's own table, and any of its range, page size,
// access rights, PD, variant and free state set, all or nothing. The
// driver loads a user memory region in chunks into a free key of its MR
// cache this way, then enables it; and frees it again at deregistration.
#pragma once

#include <cstdint>

namespace pib {

struct KeyUpdate {
    // What the key must be before: anything, free, or in use (not free).
    enum class Before : uint8_t { kAnything, kFree, kInUse };
    Before before = Before::kAnything;
    // The fields it sets; the others keep their values.
    bool setsRange = false;  // iova, length (or length64), logPageSize
    bool setsAccess = false; // local write, remote read and write
    bool setsAtomic = false; // the remote atomic right
    bool setsPd = false;
    bool setsVariant = false;
    bool setsFree = false;
    uint64_t iova = 0;
    uint64_t length = 0;
    // The key reaches from iova to the end of the address space (mlx5's
    // length64: an implicit on-demand region and its children).
    bool length64 = false;
    uint8_t logPageSize = 0;
    uint32_t access = 0; // PIB_ACCESS_*
    uint32_t pdn = 0;
    uint8_t variant = 0;
    bool free = false;
    // Where the WQE's translation entries (if any) go in the key's table.
    uint64_t firstEntry = 0;
};

} // namespace pib
