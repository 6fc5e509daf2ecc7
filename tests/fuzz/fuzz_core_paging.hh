// SPDX-License-Identifier: GPL-2.0-or-later
// On-demand paging in fuzz-core (docs/prm.md §6.9, §6.10): the attacker's
// on-demand region and implicit region, which the input's messages and
// WQEs name like any key, and the driver's side of their page faults,
// which the input plays: it maps a fault's pages (for reads, or writes
// too), gives the implicit region a child for a span, fails a fault or
// lets it wait, and invalidates pages as the kernel unmaps them. Every
// page it maps is one of the data area's, which the attacker's keys
// reach anyway: the memory oracle holds as before.
#pragma once

#include <array>
#include <cstdint>

namespace pib::fuzz {

struct Paging {
    static constexpr uint64_t kOdpIova = 0x50000000;
    static constexpr uint32_t kOdpPages = 4;
    // The spans the driver gives the implicit region children for; a
    // fault anywhere else it fails.
    static constexpr unsigned kLogSpan = 21;
    static constexpr uint64_t kImplicitBase = 0x60000000;
    static constexpr unsigned kSpans = 2;
    static constexpr uint32_t kSpanPages = (1u << kLogSpan) / 4096;

    uint32_t odpMtt = 0;
    struct Child {
        uint32_t key = 0; // 0 until the driver made it
        uint32_t mtt = 0; // its MTT range, allocated at set-up
    };
    std::array<Child, kSpans> children{};
    uint32_t eqConsumed = 0; // EQEs of the node's EQ the driver took
};

} // namespace pib::fuzz
