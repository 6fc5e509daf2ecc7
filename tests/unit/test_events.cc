// SPDX-License-Identifier: GPL-2.0-or-later
// The core's trace events and guest errors: typed, named by the one list
// (qemu-hw/core/events.list), and free when nobody reads them.
#include <catch2/catch.hpp>

#include <set>
#include <string>
#include <vector>

#include "connected_fixture.hh"
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

// The normal path's events a host recorded, as "name: arguments".
static std::vector<std::string> pathEvents(const FakeHost &host) {
    static const std::set<std::string> kPath = {
        "doorbell",        "wqe_fetched", "recv_wqe_fetched", "packet_sent",
        "packet_received", "cqe_written", "eqe_written",      "mlx5_rq_record"};
    std::vector<std::string> lines;
    for (const FakeHost::Report &r : host.traceLines)
        if (kPath.count(r.what))
            lines.push_back(r.what + ": " + r.detail);
    return lines;
}

TEST_CASE("one SEND is followed in the trace from its doorbell to both completions", "[events]") {
    using namespace pib::testing;
    Pair p; // RC, path MTU 1024; a sends from PSN 100
    p.a.host.tracingPath = p.b.host.tracingPath = true;
    const uint64_t out = p.a.host.alloc(2000), in = p.b.host.alloc(4096);
    p.a.fill(out, 2000, 9);
    p.b.postRecv(5, in, 4096);
    p.a.postSend(6, {.opcode = PIB_WR_SEND, .local = out, .length = 2000});
    p.wire.run();
    REQUIRE(p.a.poll().size() == 1);
    REQUIRE(p.b.poll().size() == 1);
    const auto qa = std::to_string(p.a.qpn), qb = std::to_string(p.b.qpn);
    // Packets are LRH, BTH (and AETH), payload, ICRC and VCRC: a SEND First
    // 8 + 12 + 1024 + 6 bytes, an ACK 8 + 12 + 4 + 6.
    const std::vector<std::string> sender = {
        "doorbell: " + std::to_string(p.a.uar) + ", SQ of QP, " + qa + ", 1",
        "wqe_fetched: " + qa + ", 0, " + std::to_string(PIB_WR_SEND) + ", 2000, 0",
        "packet_sent: 1, 0, 100, " + qb + ", 1050",    // SEND First
        "packet_sent: 1, 2, 101, " + qb + ", 1002",    // SEND Last
        "packet_received: 1, 17, 101, " + qa + ", 30", // its ACK
        "cqe_written: " + std::to_string(p.a.cqn) + ", 0, " + qa + ", 0, " +
            std::to_string(PIB_WC_SEND) + ", 0, 2000"};
    CHECK(pathEvents(p.a.host) == sender);
    const std::vector<std::string> receiver = {
        "doorbell: " + std::to_string(p.b.uar) + ", RQ of QP, " + qb + ", 1",
        "packet_received: 1, 0, 100, " + qb + ", 1050", "recv_wqe_fetched: " + qb + ", 0, 0, 4096",
        "packet_received: 1, 2, 101, " + qb + ", 1002",
        // The receive completes before the ACK that says so leaves.
        "cqe_written: " + std::to_string(p.b.cqn) + ", 0, " + qb + ", 0, " +
            std::to_string(PIB_WC_RECV) + ", 0, 2000",
        "packet_sent: 1, 17, 101, " + qa + ", 30"};
    CHECK(pathEvents(p.b.host) == receiver);
}

// The driver takes a CQE or an EQE once its phase bit says so: the device
// writes every other byte first, and the byte with the phase bit alone,
// last (docs/prm.md §7.3).
TEST_CASE("a CQE's and an EQE's phase byte lands last, in a write of its own", "[events]") {
    using namespace pib::testing;
    Pair p;
    pib_core_bar_write(p.b.host.core, PIB_BAR_DOORBELL,
                       uint64_t{p.b.uar} * PIB_PAGE_SIZE + PIB_DB_CQ_ARM,
                       uint64_t{PIB_CQ_ARM_NEXT} << 32 | p.b.cqn, 8);
    const uint64_t out = p.a.host.alloc(100), in = p.b.host.alloc(100);
    p.b.postRecv(1, in, 100);
    p.b.host.recordingDmaWrites = true;
    p.a.postSend(1, {.opcode = PIB_WR_SEND, .local = out, .length = 100});
    p.wire.run();
    REQUIRE(p.b.poll().size() == 1);
    CHECK(p.b.host.ownerWrittenLast(p.b.cqPage, PIB_CQE_SIZE, offsetof(pib_cqe, flags)));
    size_t events = 0;
    for (uint64_t i = 0; i < 64; ++i) {
        const uint64_t slot = p.b.eqPage + i * sizeof(pib_eqe);
        const auto eqe = p.b.host.peek<pib_eqe>(slot);
        if ((eqe.flags & PIB_EQE_PHASE) && eqe.type == PIB_EQE_COMPLETION) {
            ++events;
            CHECK(p.b.host.ownerWrittenLast(slot, sizeof(pib_eqe), offsetof(pib_eqe, flags)));
        }
    }
    CHECK(events == 1);
}
