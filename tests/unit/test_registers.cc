// SPDX-License-Identifier: GPL-2.0-or-later
#include <catch2/catch.hpp>

#include "fake_host.hh"
#include "pib_hw.h"

TEST_CASE("identification registers read their documented values", "[regs]") {
    FakeHost host;
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_ID) == PIB_ID_MAGIC);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_ID) == 0x48424950u);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_IF_VERSION) == PIB_IF_VERSION(0, 15));
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_FW_VERSION) == PIB_FW_VERSION(0, 1, 0));
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_STATUS) == PIB_STATUS_READY);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_NODE_GUID_LO) == 0x00001234u);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_NODE_GUID_HI) == 0x0002c903u);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_NUM_DOORBELL_PAGES) == 16);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_NUM_MSIX_VECTORS) == 8);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_NUM_PORTS) == 1);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_RESET) == 0);
    CHECK(host.guestErrors() == 0);
}

TEST_CASE("the scratch register holds what is written until reset", "[regs]") {
    FakeHost host;
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_SCRATCH) == 0);
    host.write32(PIB_BAR_REGS, PIB_REG_SCRATCH, 0xdeadbeef);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_SCRATCH) == 0xdeadbeef);

    SECTION("guest reset through the register") {
        host.write32(PIB_BAR_REGS, PIB_REG_RESET, PIB_RESET_MAGIC);
        CHECK(host.traces("device_reset") == 1);
    }
    SECTION("host reset") {
        pib_core_reset(host.core);
        CHECK(host.traces("device_reset") == 1);
    }
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_SCRATCH) == 0);
    CHECK(host.guestErrors() == 0);
}

TEST_CASE("a reset register write without the magic is refused", "[regs]") {
    FakeHost host;
    host.write32(PIB_BAR_REGS, PIB_REG_SCRATCH, 7);
    host.write32(PIB_BAR_REGS, PIB_REG_RESET, 1);
    CHECK(host.guestErrors("regs-bad-reset") == 1);
    CHECK(host.traces("device_reset") == 0);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_SCRATCH) == 7);
}

TEST_CASE("read-only registers ignore writes and report them", "[regs]") {
    FakeHost host;
    for (uint32_t reg :
         {PIB_REG_ID, PIB_REG_IF_VERSION, PIB_REG_FW_VERSION, PIB_REG_STATUS, PIB_REG_NODE_GUID_LO,
          PIB_REG_NODE_GUID_HI, PIB_REG_NUM_DOORBELL_PAGES, PIB_REG_NUM_MSIX_VECTORS,
          PIB_REG_NUM_PORTS, PIB_REG_CORE_CLOCK_LO, PIB_REG_CORE_CLOCK_HI}) {
        const uint32_t before = host.read32(PIB_BAR_REGS, reg);
        host.write32(PIB_BAR_REGS, reg, ~before);
        CHECK(host.read32(PIB_BAR_REGS, reg) == before);
    }
    CHECK(host.guestErrors("regs-read-only") == 11);
    CHECK(host.guestErrors() == 11);
}

TEST_CASE("the core clock registers read the device's clock in two halves", "[regs]") {
    FakeHost host;
    host.now = 0x0000'0012'3456'789aull;
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_CORE_CLOCK_LO) == 0x3456'789au);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_CORE_CLOCK_HI) == 0x12u);
    // It runs with the host's clock and stands still with it.
    host.now += 0x1'0000'0000ull + 5;
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_CORE_CLOCK_LO) == 0x3456'789fu);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_CORE_CLOCK_HI) == 0x13u);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_CORE_CLOCK_HI) == 0x13u);
    CHECK(host.guestErrors() == 0);
}

TEST_CASE("bad register accesses are guest errors that read as 0", "[regs]") {
    FakeHost host;
    SECTION("undefined offset") {
        CHECK(host.read32(PIB_BAR_REGS, 0x300) == 0);
        host.write32(PIB_BAR_REGS, 0x300, 1);
        CHECK(host.guestErrors("regs-bad-offset") == 2);
    }
    SECTION("beyond the BAR") {
        CHECK(host.read32(PIB_BAR_REGS, PIB_REGS_SIZE) == 0);
        CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, ~0ull - 1, 4) == 0);
        host.write32(PIB_BAR_REGS, PIB_REGS_SIZE - 2, 1);
        CHECK(host.guestErrors("regs-out-of-range") == 3);
    }
    SECTION("unaligned") {
        CHECK(host.read32(PIB_BAR_REGS, PIB_REG_ID + 2) == 0);
        CHECK(host.guestErrors("regs-unaligned") == 1);
    }
    SECTION("narrow and wide accesses") {
        CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, PIB_REG_ID, 1) == 0);
        CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, PIB_REG_ID, 2) == 0);
        CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, PIB_REG_ID, 8) == 0);
        pib_core_bar_write(host.core, PIB_BAR_REGS, PIB_REG_SCRATCH, 5, 8);
        CHECK(host.guestErrors("regs-bad-size") == 4);
        CHECK(host.read32(PIB_BAR_REGS, PIB_REG_SCRATCH) == 0);
    }
    SECTION("impossible widths") {
        CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, PIB_REG_ID, 3) == 0);
        pib_core_bar_write(host.core, PIB_BAR_REGS, PIB_REG_ID, 0, 0);
        CHECK(host.guestErrors("bar-bad-width") == 2);
    }
    SECTION("BARs the device does not decode") {
        CHECK(pib_core_bar_read(host.core, 1, 0, 4) == 0);
        pib_core_bar_write(host.core, 5, 0, 0, 4);
        CHECK(host.guestErrors("bar-unknown") == 2);
    }
}
