// SPDX-License-Identifier: GPL-2.0-or-later
#include <catch2/catch.hpp>

#include "fake_host.hh"
#include "pib_hw.h"

TEST_CASE("doorbell pages read as 0 but for the core clock", "[doorbell]") {
    FakeHost host;
    host.now = 0x0000'00ab'cdef'0123ull;
    CHECK(host.read32(PIB_BAR_DOORBELL, 0) == 0);
    CHECK(host.read32(PIB_BAR_DOORBELL, 15 * PIB_PAGE_SIZE + 0xffc) == 0);
    for (uint64_t page : {0ull, 7ull, 15ull}) {
        const uint64_t base = page * PIB_PAGE_SIZE;
        CHECK(pib_core_bar_read(host.core, PIB_BAR_DOORBELL, base + PIB_DB_CLOCK, 8) == host.now);
        CHECK(host.read32(PIB_BAR_DOORBELL, base + PIB_DB_CLOCK) == 0xcdef'0123u);
        CHECK(host.read32(PIB_BAR_DOORBELL, base + PIB_DB_CLOCK + 4) == 0xabu);
        // Only whole halves or the whole clock: a byte of it reads as 0.
        CHECK(pib_core_bar_read(host.core, PIB_BAR_DOORBELL, base + PIB_DB_CLOCK, 1) == 0);
        CHECK(pib_core_bar_read(host.core, PIB_BAR_DOORBELL, base + PIB_DB_CLOCK + 4, 8) == 0);
    }
    host.now += 1000;
    CHECK(pib_core_bar_read(host.core, PIB_BAR_DOORBELL, PIB_DB_CLOCK, 8) == host.now);
    CHECK(host.guestErrors() == 0);
}

TEST_CASE("a doorbell on a page no context owns is a guest error", "[doorbell]") {
    FakeHost host;
    host.initHca();
    pib_core_bar_write(host.core, PIB_BAR_DOORBELL, 2 * PIB_PAGE_SIZE + 8, 0x1234, 8);
    REQUIRE(host.guestErrors("doorbell-unallocated") == 1);
    CHECK(host.errors[0].detail.find("page 2 offset 0x8") != std::string::npos);
}

TEST_CASE("doorbells are aligned 64-bit writes", "[doorbell]") {
    FakeHost host;
    host.write32(PIB_BAR_DOORBELL, 0, 1);
    pib_core_bar_write(host.core, PIB_BAR_DOORBELL, 4, 1, 8);
    CHECK(host.guestErrors("doorbell-bad-size") == 2);
}

TEST_CASE("doorbell accesses beyond the configured pages are refused", "[doorbell]") {
    FakeHost host;
    CHECK(host.read32(PIB_BAR_DOORBELL, 16 * PIB_PAGE_SIZE) == 0);
    host.write32(PIB_BAR_DOORBELL, 16 * PIB_PAGE_SIZE, 1);
    pib_core_bar_write(host.core, PIB_BAR_DOORBELL, ~0ull - 7, 1, 8);
    CHECK(host.guestErrors("doorbell-out-of-range") == 3);
}
