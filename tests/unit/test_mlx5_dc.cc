// SPDX-License-Identifier: GPL-2.0-or-later
// DC on the ConnectX personality (docs/mlx5.md §15): DCTs by CREATE_DCT,
// a DCI by CREATE_QP (st 5), whose send WQEs carry the DCT's address and
// key. One DCI reaches two DCTs in turn with SENDs, WRITEs, READs and
// atomics, every byte checked; a wrong key is dropped and counted; a
// drained DCT raises DCT_DRAINED and takes nothing more.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>

#include "mlx5_checks.hh"
#include "mlx5_dc_function.hh"
#include "packet.hh"

using namespace pib;
using namespace pib::mlx5;

namespace {

using namespace pib::testing::mlx5qp;
using pib::testing::DcFunction;
using pib::testing::Mlx5Function;
constexpr uint8_t kDci = 0x5;
constexpr uint16_t kDestroyDct = 0x711, kDrainDct = 0x712;
constexpr uint8_t kFetchAdd = 0x12;
constexpr uint32_t kDctc = 0x80; // the context's bit in create_dct_in and query_dct_out
constexpr uint64_t kKeyA = 0x1ee7a330, kKeyB = 0xbadc0de;

void fillRandom(Mlx5Host &host, uint64_t addr, size_t bytes, std::mt19937 &random) {
    std::generate_n(host.at(addr), bytes, [&] { return static_cast<uint8_t>(random()); });
}

} // namespace

TEST_CASE("mlx5: a DCI reaches two DCTs in turn: SEND, WRITE, READ and atomics, every byte "
          "checked",
          "[mlx5][dc]") {
    DcFunction f;
    const uint32_t a = f.dct(kKeyA), b = f.dct(kKeyB);
    auto qp = f.dci();
    CHECK(f.query(qp.qpn).get(kSt) == kDci);
    CHECK(f.queryDct(a).get(field(kDctc + 0x100, 64)) == kKeyA);
    CHECK(f.queryDct(b).get(field(kDctc + 0x04, 4)) == 0); // active

    std::mt19937 random(29);
    constexpr uint32_t kBytes = 5000; // five packets at MTU 1024
    const uint64_t source = f.host.alloc(8192), sinkA = f.host.alloc(8192),
                   sinkB = f.host.alloc(8192), window = f.host.alloc(8192),
                   readBack = f.host.alloc(8192), counter = f.host.alloc(64);
    f.postSrq(f.srq, sinkA, 8192);
    f.postSrq(f.srq, sinkB, 8192);
    uint32_t next = 0;

    // SEND to A, WRITE to B, SEND to B, READ from A, fetch-and-add on B:
    // each DCT change waits for the work before it to be answered.
    fillRandom(f.host, source, kBytes, random);
    std::vector<uint8_t> first(f.host.at(source), f.host.at(source) + kBytes);
    f.dcSend(qp, a, kKeyA, {.opcode = kSend, .addr = source, .length = kBytes});
    f.blueFlame(
        f.dcSend(qp, b, kKeyB,
                 {.opcode = kRdmaWrite, .addr = source, .length = kBytes, .remoteAddr = window}),
        f.uar);
    auto done = f.completions(&next, 3); // two sends' CQEs, one receive
    REQUIRE(done.size() == 3);
    CHECK(std::equal(first.begin(), first.end(), f.host.at(sinkA)));
    CHECK(std::equal(first.begin(), first.end(), f.host.at(window)));
    const auto received = std::find_if(done.begin(), done.end(),
                                       [](const uint8_t *c) { return c[0x3f] >> 4 == 0x2; });
    REQUIRE(received != done.end());
    CHECK((readBe32(*received + 0x38) & 0xffffff) == a);          // the DCT's number
    CHECK((readBe32(*received + 0x20) & 0xffffff) == f.srq.srqn); // its SRQ
    CHECK((readBe32(*received + 0x18) & 0xffffff) == qp.qpn);     // the DCI
    CHECK(readBe32(*received + 0x2c) == kBytes);

    fillRandom(f.host, source, kBytes, random);
    std::vector<uint8_t> second(f.host.at(source), f.host.at(source) + kBytes);
    fillRandom(f.host, window + kBytes, 1000, random);
    const uint64_t start = 40, added = 2; // in memory in the host's order, as the verbs see it
    std::memcpy(f.host.at(counter), &start, 8);
    f.dcSend(qp, b, kKeyB, {.opcode = kSend, .addr = source, .length = kBytes});
    f.dcSend(
        qp, a, kKeyA,
        {.opcode = kRdmaRead, .addr = readBack, .length = kBytes + 1000, .remoteAddr = window});
    f.blueFlame(
        f.dcSend(qp, b, kKeyB,
                 {.opcode = kFetchAdd, .addr = readBack + 7000, .length = 8, .remoteAddr = counter},
                 added),
        f.uar);
    done = f.completions(&next, 4);
    REQUIRE(done.size() == 4);
    for (const uint8_t *c : done)
        CHECK(c[0x3f] >> 4 != 0xd);
    CHECK(std::equal(second.begin(), second.end(), f.host.at(sinkB)));
    CHECK(std::equal(f.host.at(window), f.host.at(window) + kBytes + 1000, f.host.at(readBack)));
    uint64_t after = 0, fetched = 0;
    std::memcpy(&after, f.host.at(counter), 8);
    std::memcpy(&fetched, f.host.at(readBack + 7000), 8);
    CHECK(after == start + added);
    CHECK(fetched == start);
    // A, B; then B again (its DISCONNECT went when the DCI fell idle), A, B:
    // a connection opened at the DCT for each CONNECT, and each DCT change
    // or idle DCI closed one.
    CHECK(f.host.traces("dc_connect") == 5);
    CHECK(f.host.traces("dc_opened") == 5);
    CHECK(f.host.traces("dc_closed") == 5);
    CHECK(f.host.traces("err_dc_dropped") == 0);
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5: a DC request with a wrong key is dropped and counted, and raises "
          "DCT_KEY_VIOLATION once when armed; a drained DCT raises DCT_DRAINED and is destroyed",
          "[mlx5][dc]") {
    DcFunction f;
    // The event page offers both events to DEVX (and mlx5_core's async EQ).
    const auto caps = f.host.run(Mlx5Host::input(0x100, 1), 0x1010);
    CHECK(caps.get(field(0x80 + 0x90, 1)) == 1); // event_cap
    const auto events = f.host.run(Mlx5Host::input(0x100, 0x14 << 1 | 1), 0x1010);
    REQUIRE(events.status() == 0);
    CHECK((events.get(field(0x80, 64)) & (uint64_t{3} << 0x1c)) == uint64_t{3} << 0x1c);
    uint64_t ring = 0;
    const auto eq = f.host.run(f.host.eqInput(3, uint64_t{3} << 0x1c, 0, f.uar, &ring), 16);
    REQUIRE(eq.status() == 0);
    const uint32_t a = f.dct(kKeyA);
    auto arm = Mlx5Host::input(0x714);
    set(arm, kHeld, a);
    CHECK(f.host.run(arm, 16).status() == 0);
    set(arm, kHeld, a + 5);
    CHECK(f.host.run(arm, 16).status() == status::kBadResource);
    auto qp = f.dci();
    const uint64_t source = f.host.alloc(4096), sink = f.host.alloc(4096);
    f.postSrq(f.srq, sink, 4096);
    uint32_t next = 0;
    // The wrong key: nothing answers, the DCI's retries run out.
    f.blueFlame(f.dcSend(qp, a, kKeyB, {.opcode = kSend, .addr = source, .length = 64}), f.uar);
    std::vector<const uint8_t *> failed;
    for (int i = 0; i < 8 && failed.empty(); ++i) {
        f.host.advance(2'000'000'000);
        f.host.runScheduled();
        failed = f.cqes(&next);
    }
    REQUIRE(failed.size() == 1);
    CHECK(failed[0][0x3f] >> 4 == 0xd);
    CHECK(failed[0][0x37] == 0x15);                          // transport retry counter exceeded
    CHECK(f.queryDct(a).get(field(kDctc + 0x180, 32)) >= 2); // the SEND and its resends
    // One event for them all: the first, which the arming asked for.
    const uint8_t *violation = f.host.at(ring);
    CHECK(violation[1] == 0x1d);
    CHECK((readBe32(violation + 0x38) & 0xffffff) == a);
    CHECK(f.host.traces("mlx5_dct_arm") == 1);

    // Drain: the event names the DCT, which is drained and then goes.
    auto drain = Mlx5Host::input(kDrainDct);
    set(drain, kHeld, a);
    CHECK(f.host.run(drain, 16).status() == 0);
    const uint8_t *eqe = f.host.at(ring + 64);
    CHECK(eqe[1] != 0x1d); // no second violation event
    CHECK(eqe[1] == 0x1c);
    CHECK((readBe32(eqe + 0x38) & 0xffffff) == a);
    CHECK(f.queryDct(a).get(field(kDctc + 0x04, 4)) == 2);
    CHECK(f.destroy(kDestroyDct, a).status() == 0);
    CHECK(f.queryDct(a).status() != 0);
    // Nothing holds the SRQ now but nothing else: the DCI does not.
    CHECK(f.destroy(kDestroyQp, qp.qpn).status() == 0);
    CHECK(f.destroy(0x701, f.srq.srqn).status() == 0);
}

TEST_CASE("mlx5: DCTs and DCIs the device cannot take are refused", "[mlx5][dc]") {
    DcFunction f;
    auto bad = f.dctInput(f.srq.srqn, kKeyA);
    set(bad, field(kDctc + 0xa8, 24), f.srq.srqn + 7); // no such SRQ
    checkRefused(f.host, bad, status::kBadParam, err::kMlx5DctBadContext);
    bad = f.dctInput(f.srq.srqn, kKeyA);
    set(bad, field(kDctc + 0x148, 8), 9); // no such port
    checkRefused(f.host, bad, status::kBadParam, err::kMlx5DctBadContext);
    bad = f.dctInput(f.srq.srqn, kKeyA);
    set(bad, field(kDctc + 0x68, 4), 4); // 16-byte atomics
    checkRefused(f.host, bad, status::kBadParam, err::kMlx5DctBadContext);
    Mlx5Function::Qp qp;
    auto withRq = f.qpInput(kDci, 0, 2, 2, qp); // a DCI with an RQ
    checkRefused(f.host, withRq, status::kBadParam, err::kMlx5QpBadContext);
    for (uint16_t opcode : {kDestroyDct, kDrainDct}) {
        auto in = Mlx5Host::input(opcode);
        set(in, kHeld, 0x77);
        checkRefused(f.host, in, status::kBadResource, err::kMlx5CmdBadResource);
    }
    f.host.clear();
    CHECK(f.queryDct(0x77).status() == status::kBadResource);
    CHECK(f.host.guestErrors(err::kMlx5CmdBadResource.token) == 1);
}

// A DCI's SEND waits on an RNR NAK (the SRQ is empty) with a WRITE to
// another DCT behind it when the function moves: the DCTs and the
// connection come back, and everything completes whole.
TEST_CASE("mlx5: DC traffic waiting when the function moves completes whole", "[mlx5][dc]") {
    DcFunction f;
    const uint32_t a = f.dct(kKeyA), b = f.dct(kKeyB);
    auto qp = f.dci();
    constexpr uint32_t kBytes = 6000;
    std::mt19937 random(31);
    const uint64_t source = f.host.alloc(8192), sink = f.host.alloc(8192),
                   window = f.host.alloc(8192);
    fillRandom(f.host, source, kBytes, random);
    f.dcSend(qp, a, kKeyA, {.opcode = kSend, .addr = source, .length = kBytes});
    f.blueFlame(
        f.dcSend(qp, b, kKeyB,
                 {.opcode = kRdmaWrite, .addr = source, .length = kBytes, .remoteAddr = window}),
        f.uar);
    uint32_t next = 0;
    f.host.advance(1'000'000);
    f.host.runScheduled();
    CHECK(f.cqes(&next).empty());
    CHECK(f.host.traces("dc_opened") == 1);
    REQUIRE(f.host.move() == "");
    CHECK(f.queryDct(a).get(field(kDctc + 0x100, 64)) == kKeyA);
    f.postSrq(f.srq, sink, 8192);
    std::vector<const uint8_t *> done;
    for (int i = 0; i < 20 && done.size() < 3; ++i) {
        f.host.advance(100'000'000);
        const auto more = f.completions(&next, 3 - done.size());
        done.insert(done.end(), more.begin(), more.end());
    }
    REQUIRE(done.size() == 3);
    for (const uint8_t *c : done)
        CHECK(c[0x3f] >> 4 != 0xd);
    CHECK(std::equal(f.host.at(source), f.host.at(source) + kBytes, f.host.at(sink)));
    CHECK(std::equal(f.host.at(source), f.host.at(source) + kBytes, f.host.at(window)));
    // A's connection came back with the state (no second CONNECT opened
    // one); B's opened after the SEND completed.
    CHECK(f.host.traces("dc_opened") == 2);
    CHECK(f.host.guestErrors() == 0);
}

// A hostile peer's DCIs CONNECT to a DCT by the thousand: the device keeps
// at most kMaxDcConnections, drops the rest while every one is busy, and
// takes new ones in place of those idle a second; the function's own DCI
// still reaches the DCT.
TEST_CASE("mlx5: a DCT's connections are bounded, and idle ones give their place", "[mlx5][dc]") {
    DcFunction f;
    const uint32_t a = f.dct(kKeyA);
    constexpr uint32_t kMax = 1024, kMore = 40;
    const auto connect = [&](uint32_t dci) {
        iba::Packet p;
        p.lrh.dlid = Mlx5Function::kLid;
        p.lrh.slid = 0x50;
        p.bth.opcode = static_cast<uint8_t>(iba::kTransportDc | iba::kSendOnly);
        p.bth.destQp = a;
        p.bth.psn = dci;
        p.dceth = iba::Dceth{kKeyA, dci, iba::Dceth::kConnect};
        p.payload.assign(8, 0x5a);
        const auto frame = wire::encode(PIB_WIRE_PACKET, iba::build(p));
        pib_core_port_receive(f.host.core, 1, frame.data(), frame.size());
        f.host.runScheduled();
        f.host.portOutput[1].clear(); // its RNR NAKs: the SRQ is empty
    };
    for (uint32_t dci = 1; dci <= kMax + kMore; ++dci)
        connect(dci);
    CHECK(f.host.traces("dc_opened") == kMax);
    CHECK(f.host.traces("err_dc_dropped") == kMore);
    f.host.advance(1'500'000'000);
    for (uint32_t dci = 5000; dci < 5000 + kMore; ++dci)
        connect(dci);
    CHECK(f.host.traces("dc_opened") == kMax + kMore);
    CHECK(f.host.traces("dc_closed") == kMore);

    // The function's own DCI: its CONNECT takes the place of an idle one.
    f.host.advance(1'500'000'000);
    auto qp = f.dci();
    const uint64_t source = f.host.allocRandom(4096, 7), sink = f.host.alloc(4096);
    f.postSrq(f.srq, sink, 4096);
    uint32_t next = 0;
    f.blueFlame(f.dcSend(qp, a, kKeyA, {.opcode = kSend, .addr = source, .length = 4096}), f.uar);
    const auto done = f.completions(&next, 2);
    REQUIRE(done.size() == 2);
    CHECK(std::equal(f.host.at(source), f.host.at(source) + 4096, f.host.at(sink)));
}

// UCX resets a DCI that failed and takes it to RTS again, from the same
// SQ PSN. The DCT may still hold its old connection (the DCI failed
// before its DISCONNECT), expecting a later PSN: the new connection's
// serial tells it apart, and its SEND is delivered, not taken for a
// duplicate of the old connection's.
TEST_CASE("mlx5: a DCI reset and connected again from the same PSN opens a new connection",
          "[mlx5][dc]") {
    DcFunction f;
    const uint32_t a = f.dct(kKeyA);
    auto qp = f.dci();
    const uint64_t first = f.host.allocRandom(4096, 41), second = f.host.allocRandom(4096, 42);
    const uint64_t sinkFirst = f.host.alloc(4096), sinkSecond = f.host.alloc(4096);
    f.postSrq(f.srq, sinkFirst, 4096);
    uint32_t next = 0;
    // The first SEND lands; the second finds no receive WQE and waits on
    // RNR NAKs: the DCI stays connected, the DCT's connection expects the
    // second's PSN.
    f.dcSend(qp, a, kKeyA, {.opcode = kSend, .addr = first, .length = 4096});
    f.blueFlame(f.dcSend(qp, a, kKeyA, {.opcode = kSend, .addr = first, .length = 4096}), f.uar);
    REQUIRE(f.completions(&next, 2).size() == 2);
    CHECK(std::equal(f.host.at(first), f.host.at(first) + 4096, f.host.at(sinkFirst)));
    // The DCI fails, then is reset and made ready again, its SQ PSN as before.
    REQUIRE(f.change(kToErr, qp.qpn).status() == 0);
    const auto flushed = f.completions(&next, 1);
    REQUIRE(flushed.size() == 1);
    CHECK(flushed[0][0x3f] >> 4 == 0xd);
    REQUIRE(f.change(kToRst, qp.qpn).status() == 0);
    qp.sqPosted = 0;
    writeBe32(f.host.at(qp.record + 4), 0);
    REQUIRE(f.toRts(qp.qpn, {.ackTimeout = 14, .retries = 2, .rnrRetries = 7}));
    f.postSrq(f.srq, sinkSecond, 4096);
    f.blueFlame(f.dcSend(qp, a, kKeyA, {.opcode = kSend, .addr = second, .length = 4096}), f.uar);
    const auto done = f.completions(&next, 2);
    REQUIRE(done.size() == 2);
    for (const uint8_t *c : done)
        CHECK(c[0x3f] >> 4 != 0xd);
    CHECK(std::equal(f.host.at(second), f.host.at(second) + 4096, f.host.at(sinkSecond)));
    CHECK(f.host.traces("dc_opened") == 2);
}
