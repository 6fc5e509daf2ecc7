// SPDX-License-Identifier: GPL-2.0-or-later
// The core's trace events and guest errors: typed, named by the one list
// (qemu-hw/core/events.list), and free when nobody reads them.
#include <catch2/catch.hpp>

#include "fake_host.hh"
#include "pib_hw.h"

TEST_CASE("events carry their typed arguments and errors their token", "[events]") {
    FakeHost host;
    host.initHca();
    host.command(PIB_CMD_QUERY_PORT, 7); // no port 7: cmd-bad-port
    REQUIRE(host.guestErrors("cmd-bad-port") == 1);
    CHECK(host.errors.back().detail == "QUERY_PORT of port 7 (prm §4.6)"); // the rule it broke
    // The command event names the command and gives its fields as numbers.
    REQUIRE(host.traces("command") == 2);
    CHECK(host.traceLines.back().detail == "QUERY_PORT, 2, 7, 4, 0");
    // A name that is not in the list is a broken test, not a count of 0.
    CHECK_THROWS(host.traces("rc-timeout"));
    CHECK_THROWS(host.guestErrors("no-such-token"));
}

TEST_CASE("a disabled event or guest error costs one check, not its formatting", "[events]") {
    FakeHost host;
    host.initHca();
    host.reporting = false;
    host.enabledQueries = 0;
    host.clear();
    host.command(PIB_CMD_QUERY_PORT, 7);                  // a guest error and a command event
    host.write32(PIB_BAR_REGS, 0xffc, 1);                 // regs-bad-offset
    pib_core_bar_write(host.core, PIB_BAR_REGS, 3, 1, 4); // regs-unaligned
    CHECK(host.errors.empty());
    CHECK(host.traceLines.empty());
    // The core asked each time, and went no further: no detail was built.
    CHECK(host.enabledQueries >= 4);

    host.reporting = true;
    host.command(PIB_CMD_QUERY_PORT, 7);
    CHECK(host.guestErrors("cmd-bad-port") == 1);
    CHECK(host.traces("command") == 1);
}
