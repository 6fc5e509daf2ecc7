// SPDX-License-Identifier: GPL-2.0-or-later
// An internal error (here an exception thrown from inside a command, as a
// broken invariant would) puts the device in its FATAL state: STATUS says
// so, the driver gets one DEVICE_FATAL event, and the device does nothing
// more until the driver resets it; then it works again.
#include <catch2/catch.hpp>

#include <algorithm>

#include "fake_host.hh"
#include "frame.hh"
#include "invariant.hh"
#include "object_table.hh"
#include "packet.hh"
#include "ports.hh"

using namespace pib;

TEST_CASE("an internal error stops the device until it is reset", "[fatal]") {
    FakeHost host;
    host.initHca();
    const FakeHost::Eq eq = host.createEq(4, PIB_EQ_ASYNC, /*msixVector=*/2);
    const uint32_t uar = static_cast<uint32_t>(host.command(PIB_CMD_ALLOC_UAR).result);
    REQUIRE(host.read32(PIB_BAR_REGS, PIB_REG_STATUS) == PIB_STATUS_READY);
    host.write32(PIB_BAR_REGS, PIB_REG_EQ_DB(eq.eqn) + PIB_EQ_DB_ARM, 0);
    host.clear();

    // CREATE_CQ reads its mailbox first: that read throws.
    host.throwOnNextDmaRead = true;
    host.commandIn(PIB_CMD_CREATE_CQ, 0, pib_cq_context{});
    REQUIRE_FALSE(host.throwOnNextDmaRead);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_STATUS) == PIB_STATUS_FATAL);
    CHECK(host.traces("fatal") == 1);
    const auto events = host.asyncEvents(eq.page, 16);
    CHECK(std::count(events.begin(), events.end(), PIB_ASYNC_DEVICE_FATAL) == 1);
    CHECK(host.interrupts == std::vector<unsigned>{2});

    // Nothing runs now: commands are refused, doorbells, timers and
    // packets do nothing, and no second event follows.
    const FakeHost::Outcome refused = host.command(PIB_CMD_ALLOC_PD);
    CHECK(refused.status == PIB_CMD_STATUS_BAD_STATE);
    CHECK(host.traces("command_refused_fatal") == 1);
    pib_core_bar_write(host.core, PIB_BAR_DOORBELL, uint64_t{uar} * PIB_PAGE_SIZE + PIB_DB_SQ,
                       uint64_t{1} << 32 | 0x40, 8);
    pib_core_timer_expired(host.core);
    pib_core_run(host.core);
    iba::Packet k;
    k.lrh.dlid = 1;
    k.bth.opcode = iba::kUdSendOnly;
    k.bth.destQp = 1;
    k.deth = iba::Deth{iba::kQp1Qkey, 1};
    k.payload.assign(256, 0);
    const auto frame = wire::encode(PIB_WIRE_PACKET, iba::build(k));
    pib_core_port_receive(host.core, 1, frame.data(), frame.size());
    CHECK(host.traces("fatal") == 1);
    const auto after = host.asyncEvents(eq.page, 16);
    CHECK(std::count(after.begin(), after.end(), PIB_ASYNC_DEVICE_FATAL) == 1);

    // A reset brings it back, and it works as new.
    host.write32(PIB_BAR_REGS, PIB_REG_RESET, PIB_RESET_MAGIC);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_STATUS) == PIB_STATUS_READY);
    host.initHca();
    CHECK(host.command(PIB_CMD_ALLOC_PD).status == PIB_CMD_STATUS_OK);
}

TEST_CASE("the host can inject a fatal error to test a driver's recovery", "[fatal]") {
    FakeHost host;
    host.initHca();
    const FakeHost::Eq eq = host.createEq(4, PIB_EQ_ASYNC);
    host.clear();
    pib_core_inject_fatal(host.core, "a test");
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_STATUS) == PIB_STATUS_FATAL);
    REQUIRE(host.traces("fatal") == 1);
    CHECK(host.traceLines.front().detail == "a test");
    const auto events = host.asyncEvents(eq.page, 16);
    CHECK(std::count(events.begin(), events.end(), PIB_ASYNC_DEVICE_FATAL) == 1);
    CHECK(host.command(PIB_CMD_ALLOC_PD).status == PIB_CMD_STATUS_BAD_STATE);
    host.write32(PIB_BAR_REGS, PIB_REG_RESET, PIB_RESET_MAGIC);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_STATUS) == PIB_STATUS_READY);
}

// Issue 27, finding 8: the core checks its invariants, and a broken one
// (a bug, which no input can cause) is an internal error like any other.
TEST_CASE("a broken invariant throws, naming the condition and where it was checked", "[fatal]") {
    try {
        PIB_INVARIANT(1 + 1 == 3);
        FAIL("PIB_INVARIANT let a false condition pass");
    } catch (const InvariantBroken &e) {
        const std::string what = e.what();
        CHECK(what.find("1 + 1 == 3") != std::string::npos);
        CHECK(what.find("test_fatal.cc:") != std::string::npos);
    }
    // Checked lookups: a port the device lacks, an object that is not there.
    const pib_core_config config = FakeHost::defaultConfig();
    Ports ports(config);
    CHECK(&ports.at(1) == ports.find(1));
    CHECK_THROWS_AS(ports.at(0), InvariantBroken);
    CHECK_THROWS_AS(ports.at(config.num_ports + 1), InvariantBroken);
    ObjectTable<int> table(4);
    const auto n = table.insert(std::make_unique<int>(7));
    REQUIRE(n);
    CHECK(table.at(*n) == 7);
    CHECK_THROWS_AS(table.at(*n + 1), InvariantBroken);
}

TEST_CASE("an exception of any type inside the core makes the device FATAL", "[fatal]") {
    FakeHost host;
    host.initHca();
    host.throwOnNextDmaRead = host.throwForeign = true;
    host.commandIn(PIB_CMD_CREATE_CQ, 0, pib_cq_context{});
    CHECK_FALSE(host.throwOnNextDmaRead);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_STATUS) == PIB_STATUS_FATAL);
    CHECK(host.traces("fatal") == 1);
}
