// SPDX-License-Identifier: GPL-2.0-or-later
// Completion timestamps: every CQE carries the core clock at the moment
// the device wrote it (docs/prm.md §7.3), the clock the registers and the
// doorbell pages show.
#include <catch2/catch.hpp>

#include "connected_fixture.hh"

using namespace pib;
using namespace pib::testing;

TEST_CASE("the device advertises a 1 GHz core clock and CQE timestamps", "[timestamp]") {
    FakeHost host;
    host.initHca();
    const pib_dev_cap cap = host.caps();
    CHECK(cap.device_cap_flags & PIB_DEV_CAP_CQE_TIMESTAMP);
    CHECK(cap.hca_core_clock_khz == 1'000'000);
}

TEST_CASE("each CQE carries its device's clock at its writing", "[timestamp]") {
    Pair p;
    // The two devices' clocks are their own VMs' and need not agree.
    p.a.host.now = 5'000'000'000;
    p.b.host.now = 77'000'000'000;
    const uint64_t out = p.a.host.alloc(4096), in = p.b.host.alloc(4096);
    p.a.fill(out, 4096, 0x5a);

    p.b.postRecv(1, in, 4096);
    p.b.postRecv(2, in, 4096);
    p.a.postSend(1, {.opcode = PIB_WR_SEND, .local = out, .length = 4096});
    p.wire.run();
    auto sent = p.a.poll();
    auto got = p.b.poll();
    REQUIRE(sent.size() == 1);
    REQUIRE(got.size() == 1);
    CHECK(sent[0].timestamp == 5'000'000'000);
    CHECK(got[0].timestamp == 77'000'000'000);

    // 1.5 ms later on both sides, a second message: the difference of two
    // timestamps is the time between the completions, in nanoseconds.
    p.a.host.now += 1'500'000;
    p.b.host.now += 1'500'000;
    p.a.postSend(2, {.opcode = PIB_WR_SEND, .local = out, .length = 100});
    p.wire.run();
    sent = p.a.poll();
    got = p.b.poll();
    REQUIRE(sent.size() == 1);
    REQUIRE(got.size() == 1);
    CHECK(sent[0].timestamp == 5'001'500'000);
    CHECK(got[0].timestamp == 77'001'500'000);
    // The clock the CQEs carry is the one the registers read.
    CHECK(p.a.host.read32(PIB_BAR_REGS, PIB_REG_CORE_CLOCK_LO) ==
          static_cast<uint32_t>(sent[0].timestamp));
    CHECK(p.a.host.read32(PIB_BAR_REGS, PIB_REG_CORE_CLOCK_HI) ==
          static_cast<uint32_t>(sent[0].timestamp >> 32));
}

TEST_CASE("error completions are timestamped when the error is found", "[timestamp]") {
    // No receive WQE and no RNR retries: the first RNR NAK completes the
    // SEND with RNR_RETRY_EXC_ERR at once.
    Pair q(PIB_QPT_RC, {.rnrRetry = 0});
    const uint64_t qOut = q.a.host.alloc(4096);
    q.a.host.now = 3'000'000'000;
    q.a.postSend(7, {.opcode = PIB_WR_SEND, .local = qOut, .length = 8});
    q.wire.run();
    auto sent = q.a.poll();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].status == PIB_WC_RNR_RETRY_EXC_ERR);
    CHECK(sent[0].timestamp == 3'000'000'000);
    // The WQE behind it is flushed later, and its CQE says when.
    q.a.host.now += 250'000;
    q.a.postSend(8, {.opcode = PIB_WR_SEND, .local = qOut, .length = 8});
    q.wire.run();
    sent = q.a.poll();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].status == PIB_WC_WR_FLUSH_ERR);
    CHECK(sent[0].timestamp == 3'000'250'000);
}
