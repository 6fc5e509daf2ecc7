// SPDX-License-Identifier: GPL-2.0-or-later
// The objects of a saved state that a device's work made (docs/migration.md):
// a region a REG_MR WQE mapped, one invalidated since, windows bound by
// BIND_MW WQEs, each loaded into a fresh device as those WQEs left it.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "connected_fixture.hh"
#include "management_calls.hh"

using namespace pib;
using namespace pib::testing;

namespace {

std::vector<uint8_t> saved(FakeHost &host) {
    std::string why;
    std::vector<uint8_t> bytes = host.saveState(&why);
    INFO(why);
    REQUIRE(!bytes.empty());
    return bytes;
}

// A fresh device with `from`'s guest RAM and clock, loaded with `state`;
// the loader's reason when it refused.
std::string loadInto(FakeHost &to, FakeHost &from, const std::vector<uint8_t> &state) {
    to.ram = from.ram;
    to.ramNext = from.ramNext;
    to.now = from.now;
    return to.loadState(state);
}

pib_cqe completionOf(Pair &p, Node &n) {
    p.wire.run();
    auto done = n.poll();
    expect(done.size() == 1, "one completion");
    return done[0];
}

template <class T> T query(FakeHost &host, uint16_t opcode, uint32_t key) {
    T c{};
    REQUIRE(host.commandOut(opcode, key, &c).status == PIB_CMD_STATUS_OK);
    return c;
}

} // namespace

TEST_CASE("regions and windows are loaded as the WQEs that mapped and bound them left them",
          "[object-state]") {
    Pair p;
    Node &b = p.b;
    // A region windows may be bound to, a type 1 and a type 2 window bound.
    const uint64_t base = b.host.alloc(16384);
    pib_mr_context region{};
    region.pdn = b.pd;
    region.access = PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_MW_BIND;
    region.flags = PIB_MR_PHYSICAL;
    region.iova = base;
    region.length = 16384;
    const auto mrKey = static_cast<uint32_t>(b.host.commandIn(PIB_CMD_CREATE_MR, 0, region).result);
    std::vector<uint32_t> windows;
    for (uint8_t type : {PIB_MW_TYPE_1, PIB_MW_TYPE_2}) {
        pib_mw_context mw{};
        mw.pdn = b.pd;
        mw.type = type;
        mw.key_variant = 0x40;
        const auto key = static_cast<uint32_t>(b.host.commandIn(PIB_CMD_CREATE_MW, 0, mw).result);
        const uint32_t bound = (key & ~0xffu) | 0x41;
        b.postBind(type, {base + 4096 * type, 4096, key, bound, mrKey,
                          PIB_ACCESS_REMOTE_READ | PIB_ACCESS_REMOTE_WRITE});
        REQUIRE(completionOf(p, b).status == PIB_WC_SUCCESS);
        windows.push_back(bound);
    }
    // Two fast-registration regions mapped by REG_MR; the second is
    // invalidated since.
    std::vector<uint32_t> fast;
    for (uint64_t wr : {3, 4}) {
        const uint32_t key = (b.createFastRegMr(2) & ~0xffu) | 0x5a;
        const uint64_t list = b.host.alloc(16, 8);
        b.host.poke(list, b.host.alloc(4096));
        b.host.poke(list + 8, b.host.alloc(4096));
        pib_wqe_reg_mr reg{};
        reg.iova = 0x7000'0100;
        reg.length = 4096;
        reg.page_list = list;
        reg.key = key;
        reg.access = PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE;
        reg.page_count = 2;
        reg.log_page_size = 12;
        b.postRegMr(wr, reg);
        REQUIRE(completionOf(p, b).status == PIB_WC_SUCCESS);
        fast.push_back(key);
    }
    b.postLocalInv(5, fast[1]);
    REQUIRE(completionOf(p, b).status == PIB_WC_SUCCESS);
    // The QP goes (QPs are not saved yet); what its WQEs made stays.
    REQUIRE(b.host.command(PIB_CMD_DESTROY_QP, b.qpn).status == PIB_CMD_STATUS_OK);
    const std::vector<uint8_t> state = saved(b.host);

    FakeHost c;
    REQUIRE(loadInto(c, b.host, state) == "");
    CHECK(saved(c) == state);
    for (uint32_t key : fast) {
        const auto before = query<pib_mr_context>(b.host, PIB_CMD_QUERY_MR, key);
        const auto after = query<pib_mr_context>(c, PIB_CMD_QUERY_MR, key);
        CHECK(std::memcmp(&before, &after, sizeof(before)) == 0);
        CHECK(after.length == 4096);
    }
    for (uint32_t key : windows) {
        const auto before = query<pib_mw_context>(b.host, PIB_CMD_QUERY_MW, key);
        const auto after = query<pib_mw_context>(c, PIB_CMD_QUERY_MW, key);
        CHECK(std::memcmp(&before, &after, sizeof(before)) == 0);
    }
    // The type 1 window stays bound; the type 2 one went with its QP.
    CHECK(query<pib_mw_context>(c, PIB_CMD_QUERY_MW, windows[0]).bound == 1);
    // The region is held by its bound window, counted again.
    CHECK(c.command(PIB_CMD_DESTROY_MR, mrKey).status == PIB_CMD_STATUS_BUSY);
    for (uint32_t key : windows)
        CHECK(c.command(PIB_CMD_DESTROY_MW, key).status == PIB_CMD_STATUS_OK);
    CHECK(c.command(PIB_CMD_DESTROY_MR, mrKey).status == PIB_CMD_STATUS_OK);
    // A fast-registration region's range is written by the device only.
    const auto mapped = query<pib_mr_context>(c, PIB_CMD_QUERY_MR, fast[0]);
    pib_mtt_write write{};
    write.count = 1;
    write.entries[0] = 0x10000;
    CHECK(c.commandIn(PIB_CMD_WRITE_MTT, mapped.mtt_index, write).status ==
          PIB_CMD_STATUS_BAD_STATE);

    SECTION("a window bound beyond its region is refused with BIND_MW's reason") {
        std::vector<uint8_t> bad = state;
        pib_mw_context ctx = query<pib_mw_context>(b.host, PIB_CMD_QUERY_MW, windows[0]);
        auto at = std::search(bad.begin(), bad.end(), reinterpret_cast<const uint8_t *>(&ctx),
                              reinterpret_cast<const uint8_t *>(&ctx) + sizeof(ctx));
        REQUIRE(at != bad.end());
        ctx.length = 1 << 20;
        std::memcpy(&*at, &ctx, sizeof(ctx));
        FakeHost d;
        const std::string why = loadInto(d, b.host, bad);
        CHECK(why.find("the range is not within the region") != std::string::npos);
        CHECK(d.guestErrors() == 0);
    }
}

namespace {

bool sameBytes(Node &x, uint64_t ax, Node &y, uint64_t ay, uint32_t len) {
    return std::memcmp(x.host.at(ax), y.host.at(ay), len) == 0;
}

// `n` moves: its device's state is saved, what both cables held is lost,
// and the state is loaded into a new device in its place, with its RAM.
// The switch kept the link: the new cable's HELLO says it resumes.
void move(Wire &wire, Node &n) {
    wire.a.host.portOutput[1].clear();
    wire.b.host.portOutput[1].clear();
    REQUIRE(n.host.move() == "");
}

// One operation of a's, from aBuf to bBuf (or back, for a READ), that
// the tests below have lost in flight. An atomic adds 5 to what was 0.
struct LostOp {
    uint8_t opcode;
    uint64_t aBuf, bBuf;
    uint32_t length;
};

// `op` completes, with no time passing since `before`, and its bytes (or
// its atomic's values) are where they belong.
void checkDoneAtOnce(Pair &p, const LostOp &op, uint64_t before) {
    std::vector<pib_cqe> done;
    for (int round = 0; round < 20 && done.empty(); ++round) {
        p.wire.run();
        done = p.a.poll();
    }
    CHECK(p.a.host.now == before);
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    if (op.opcode == PIB_WR_ATOMIC_FETCH_AND_ADD) {
        CHECK(p.b.host.peek<uint64_t>(op.bBuf) == 5); // added once
        CHECK(p.a.host.peek<uint64_t>(op.aBuf) == 0); // the value it found
    } else if (op.opcode == PIB_WR_RDMA_READ) {
        CHECK(sameBytes(p.b, op.bBuf, p.a, op.aBuf, op.length));
    } else {
        CHECK(sameBytes(p.a, op.aBuf, p.b, op.bBuf, op.length));
    }
}

// Every completion of `n` that came, until `count` have.
std::vector<pib_cqe> completions(Wire &wire, Node &n, size_t count) {
    std::vector<pib_cqe> done;
    for (int i = 0; i < 400 && done.size() < count; ++i) { // up to 4 s of timeouts
        wire.advance(10'000'000, 1'000'000);
        for (const pib_cqe &c : n.poll())
            done.push_back(c);
    }
    return done;
}

} // namespace

// What issue 33 asks of the device's state: an RC transfer in flight moves
// whole when either end is saved and loaded in the middle of it, with
// SENDs, WRITEs, READs and atomics outstanding, every byte checked and no
// atomic run twice.
TEST_CASE("RC traffic in flight completes whole when either end is saved and loaded mid-way",
          "[object-state]") {
    constexpr uint32_t kLength = 64 << 10;
    constexpr int kEach = 4;
    Pair p(PIB_QPT_RC, {.maxRdAtomic = 4}, 32 << 20);
    const bool requesterMoves = GENERATE(true, false);
    // Where the move cuts the traffic: after this many packets crossed.
    const int crossed = GENERATE(3, 40, 150);
    CAPTURE(requesterMoves, crossed);
    std::vector<std::pair<uint64_t, uint64_t>> copies; // (a's, b's) buffers of kLength
    const uint64_t counter = p.b.host.alloc(8);
    uint64_t wr = 0;
    for (int i = 0; i < kEach; ++i) {
        const uint64_t sendSrc = p.a.host.allocRandom(kLength, 10 + i);
        const uint64_t sendDst = p.b.host.alloc(kLength);
        p.b.postRecv(100 + i, sendDst, kLength);
        p.a.postSend(++wr, {.local = sendSrc, .length = kLength});
        copies.emplace_back(sendSrc, sendDst);
        const uint64_t writeSrc = p.a.host.allocRandom(kLength, 20 + i);
        const uint64_t writeDst = p.b.host.alloc(kLength);
        p.a.postSend(++wr, {.opcode = PIB_WR_RDMA_WRITE,
                            .local = writeSrc,
                            .length = kLength,
                            .remote = writeDst});
        copies.emplace_back(writeSrc, writeDst);
        const uint64_t readDst = p.a.host.alloc(kLength);
        const uint64_t readSrc = p.b.host.allocRandom(kLength, 30 + i);
        p.a.postSend(
            ++wr,
            {.opcode = PIB_WR_RDMA_READ, .local = readDst, .length = kLength, .remote = readSrc});
        copies.emplace_back(readDst, readSrc);
        p.a.postSend(++wr, {.opcode = PIB_WR_ATOMIC_FETCH_AND_ADD,
                            .local = p.a.host.alloc(8),
                            .length = 8,
                            .remote = counter,
                            .swapAdd = 1});
    }
    // Some of it crossed and was answered, the rest is lost with the move.
    int passed = 0;
    p.wire.filter = [&](bool, iba::Packet &) { return ++passed <= crossed; };
    p.wire.run();
    p.wire.filter = nullptr;
    const size_t before = p.a.poll().size();
    CHECK(before < wr); // the move comes in the middle
    move(p.wire, requesterMoves ? p.a : p.b);
    const auto done = completions(p.wire, p.a, wr - before);
    REQUIRE(done.size() == wr - before);
    // What was lost on the move came again, at once: the moved requester
    // sent again from its oldest PSN not answered (the responder saw
    // duplicates), or the moved responder NAKed the PSN it expected.
    pib_port_counters atA{}, atB{};
    REQUIRE(p.a.host.commandOut(PIB_CMD_QUERY_COUNTERS, 1, &atA).status == PIB_CMD_STATUS_OK);
    REQUIRE(p.b.host.commandOut(PIB_CMD_QUERY_COUNTERS, 1, &atB).status == PIB_CMD_STATUS_OK);
    if (requesterMoves)
        CHECK(atB.duplicate_requests > 0);
    else
        CHECK(atA.seq_naks_received > 0);
    for (const pib_cqe &c : done) {
        CAPTURE(c.wr_id);
        CHECK(c.status == PIB_WC_SUCCESS);
    }
    for (const auto &[a, b] : copies)
        CHECK(sameBytes(p.a, a, p.b, b, kLength));
    // Each fetch-and-add ran once: the counter counts them exactly.
    CHECK(p.b.host.peek<uint64_t>(counter) == kEach);
    const auto received = p.b.poll();
    CHECK(received.size() == kEach);
    CHECK(p.a.qpState() == PIB_QPS_RTS);
    CHECK(p.b.qpState() == PIB_QPS_RTS);
}

// XRC: the target's end moves in the middle of SENDs to its two XRC SRQs;
// each message reaches its SRQ whole.
TEST_CASE("XRC SENDs in flight reach their XRC SRQs whole when the target moves",
          "[object-state]") {
    constexpr uint32_t kLength = 12 << 10;
    XrcPair p;
    const int crossed = GENERATE(2, 17);
    CAPTURE(crossed);
    std::vector<std::pair<uint64_t, uint64_t>> copies;
    for (uint64_t id = 1; id <= 6; ++id) {
        Srq &srq = id % 2 ? p.red : p.blue;
        const uint64_t src = p.a.host.allocRandom(kLength, static_cast<uint32_t>(id));
        const uint64_t dst = p.b.host.alloc(kLength);
        srq.post(100 + id, dst, kLength);
        p.a.postSend(id, {.local = src, .length = kLength, .srqn = srq.srqn});
        copies.emplace_back(src, dst);
    }
    int passed = 0;
    p.wire.filter = [&](bool, iba::Packet &) { return ++passed <= crossed; };
    p.wire.run();
    p.wire.filter = nullptr;
    const size_t before = p.a.poll().size();
    CHECK(before < 6);
    move(p.wire, p.b);
    const auto done = completions(p.wire, p.a, 6 - before);
    REQUIRE(done.size() == 6 - before);
    for (const pib_cqe &c : done)
        CHECK(c.status == PIB_WC_SUCCESS);
    for (const auto &[src, dst] : copies)
        CHECK(sameBytes(p.a, src, p.b, dst, kLength));
    CHECK(p.b.poll().size() + p.pollBlue().size() == 6);
}

// UC: what the move cut short is lost, as UC loses a message a gap cuts
// (IBA 9.8.3); the QPs stay up and the messages after the move arrive
// whole.
TEST_CASE("UC loses the message a move cuts, and carries the next ones whole", "[object-state]") {
    constexpr uint32_t kLength = 8 << 10;
    Pair p(PIB_QPT_UC);
    const bool senderMoves = GENERATE(true, false);
    CAPTURE(senderMoves);
    const uint64_t cut = p.a.host.allocRandom(kLength, 1), cutDst = p.b.host.alloc(kLength);
    p.b.postRecv(1, cutDst, kLength);
    p.a.postSend(1, {.local = cut, .length = kLength});
    int passed = 0;
    p.wire.filter = [&](bool, iba::Packet &) { return ++passed <= 3; }; // 3 of 8 packets
    p.wire.run();
    p.wire.filter = nullptr;
    move(p.wire, senderMoves ? p.a : p.b);
    std::vector<std::pair<uint64_t, uint64_t>> after;
    for (uint64_t id = 2; id <= 4; ++id) {
        const uint64_t src = p.a.host.allocRandom(kLength, static_cast<uint32_t>(id));
        const uint64_t dst = p.b.host.alloc(kLength);
        p.b.postRecv(id, dst, kLength);
        p.a.postSend(id, {.local = src, .length = kLength});
        after.emplace_back(src, dst);
    }
    p.wire.run();
    p.wire.advance(10'000'000);
    std::vector<pib_cqe> got = p.b.poll();
    REQUIRE(got.size() == 3);
    // The first receive WQE took the first whole message: the cut one is gone.
    for (size_t i = 0; i < got.size(); ++i) {
        CHECK(got[i].status == PIB_WC_SUCCESS);
        CHECK(got[i].byte_len == kLength);
    }
    const uint64_t firstDst = cutDst;
    CHECK(sameBytes(p.a, after[0].first, p.b, firstDst, kLength));
    CHECK(sameBytes(p.a, after[1].first, p.b, after[0].second, kLength));
    CHECK(sameBytes(p.a, after[2].first, p.b, after[1].second, kLength));
    CHECK(p.a.qpState() == PIB_QPS_RTS);
    CHECK(p.b.qpState() == PIB_QPS_RTS);
}

// Issue 57: a move costs a pause, not a timeout. Both ends have WRITEs,
// READs, SENDs and atomics in flight towards each other when one of them
// moves, and what the wire held is lost; the QPs' local ACK timeout is 30
// (73 minutes). Everything completes with the clock standing still: the
// moved end resends from its oldest PSN not answered as its link resumes,
// and NAKs the PSN it expects, on which the peer resends at once.
TEST_CASE("traffic both ways survives a move at ACK timeout 30 with the clock standing still",
          "[object-state]") {
    constexpr uint32_t kLength = 64 << 10;
    Pair p(PIB_QPT_RC, {.timeout = 30, .retryCnt = 7, .maxRdAtomic = 4}, 16 << 20);
    const bool aMoves = GENERATE(true, false);
    const int crossed = GENERATE(5, 60);
    CAPTURE(aMoves, crossed);
    struct Copy {
        Node *from, *to;
        uint64_t src, dst;
    };
    std::vector<Copy> copies;
    uint64_t wr[2] = {0, 0};
    const uint64_t counters[2] = {p.a.host.alloc(8), p.b.host.alloc(8)};
    int seed = 1;
    for (int side = 0; side < 2; ++side) {
        Node &me = side ? p.b : p.a, &peer = side ? p.a : p.b;
        for (int i = 0; i < 2; ++i) {
            const uint64_t sendSrc = me.host.allocRandom(kLength, ++seed);
            const uint64_t sendDst = peer.host.alloc(kLength);
            peer.postRecv(100 + i, sendDst, kLength);
            me.postSend(++wr[side], {.local = sendSrc, .length = kLength});
            copies.push_back({&me, &peer, sendSrc, sendDst});
            const uint64_t writeSrc = me.host.allocRandom(kLength, ++seed);
            const uint64_t writeDst = peer.host.alloc(kLength);
            me.postSend(++wr[side], {.opcode = PIB_WR_RDMA_WRITE,
                                     .local = writeSrc,
                                     .length = kLength,
                                     .remote = writeDst});
            copies.push_back({&me, &peer, writeSrc, writeDst});
            const uint64_t readDst = me.host.alloc(kLength);
            const uint64_t readSrc = peer.host.allocRandom(kLength, ++seed);
            me.postSend(++wr[side], {.opcode = PIB_WR_RDMA_READ,
                                     .local = readDst,
                                     .length = kLength,
                                     .remote = readSrc});
            copies.push_back({&peer, &me, readSrc, readDst});
            me.postSend(++wr[side], {.opcode = PIB_WR_ATOMIC_FETCH_AND_ADD,
                                     .local = me.host.alloc(8),
                                     .length = 8,
                                     .remote = counters[1 - side],
                                     .swapAdd = 1});
        }
    }
    int passed = 0;
    p.wire.filter = [&](bool, iba::Packet &) { return ++passed <= crossed; };
    p.wire.run();
    p.wire.filter = nullptr;
    size_t done[2] = {0, 0};
    const auto collect = [&] { // the send completions that came, each a success
        for (int side = 0; side < 2; ++side)
            for (const pib_cqe &c : (side ? p.b : p.a).poll()) {
                CAPTURE(side, c.wr_id);
                CHECK(c.status == PIB_WC_SUCCESS);
                done[side] += c.opcode < PIB_WC_RECV;
            }
    };
    collect();
    CHECK(done[0] + done[1] < wr[0] + wr[1]); // the move comes in the middle
    const uint64_t before = p.a.host.now;
    move(p.wire, aMoves ? p.a : p.b);
    // No time passes: only what the resume sets off.
    for (int round = 0; round < 50 && done[0] + done[1] < wr[0] + wr[1]; ++round) {
        p.wire.run();
        collect();
    }
    CHECK(p.a.host.now == before);
    CHECK(done[0] == wr[0]);
    CHECK(done[1] == wr[1]);
    for (const Copy &c : copies)
        CHECK(sameBytes(*c.from, c.src, *c.to, c.dst, kLength));
    CHECK(p.a.host.peek<uint64_t>(counters[0]) == 2); // each fetch-and-add ran once
    CHECK(p.b.host.peek<uint64_t>(counters[1]) == 2);
    CHECK(p.a.qpState() == PIB_QPS_RTS);
    CHECK(p.b.qpState() == PIB_QPS_RTS);
}

// The responder took the whole request, then its answer was lost as its VM
// stopped to move (the switch discards what reaches a moving port). Both
// QPs were in RTS before any packet came, as when both ends connect first,
// so the responder never raised COMM_EST. Once it resumes, its ACK of
// what it took, or the implied NAK that ACK is for a READ or atomic, makes
// the requester complete without waiting out its ACK timeout (30: 73
// minutes), and the atomic runs once.
TEST_CASE("a responder that moves after taking all has its requester complete at once",
          "[object-state]") {
    constexpr uint32_t kLength = 16 << 10;
    Pair p(PIB_QPT_RC, {.timeout = 30, .retryCnt = 7, .maxRdAtomic = 4});
    const uint8_t op = GENERATE(as<uint8_t>{}, PIB_WR_SEND, PIB_WR_RDMA_WRITE, PIB_WR_RDMA_READ,
                                PIB_WR_ATOMIC_FETCH_AND_ADD);
    CAPTURE(op);
    const bool atomic = op == PIB_WR_ATOMIC_FETCH_AND_ADD;
    const uint64_t aBuf =
        op == PIB_WR_RDMA_READ ? p.a.host.alloc(kLength) : p.a.host.allocRandom(kLength, 11);
    const uint64_t bBuf =
        op == PIB_WR_RDMA_READ ? p.b.host.allocRandom(kLength, 12) : p.b.host.alloc(kLength);
    if (op == PIB_WR_SEND)
        p.b.postRecv(1, bBuf, kLength);
    p.a.postSend(1, {.opcode = op,
                     .local = aBuf,
                     .length = atomic ? 8 : kLength,
                     .remote = bBuf,
                     .swapAdd = 5});
    p.wire.filter = [](bool fromA, iba::Packet &) { return fromA; }; // b's answers are lost
    p.wire.run();
    p.wire.filter = nullptr;
    CHECK(p.a.poll().empty());
    const uint64_t before = p.a.host.now;
    move(p.wire, p.b);
    checkDoneAtOnce(p, {op, aBuf, bBuf, kLength}, before);
}

namespace {

// The switch says it discarded packets to `n`'s port (PIB_WIRE_DISCARDED).
void tellDiscarded(Node &n) {
    const auto frame = wire::encode(PIB_WIRE_DISCARDED, {});
    pib_core_port_receive(n.host.core, 1, frame.data(), frame.size());
}

} // namespace

// Found in CI: a QEMU the host did not run for 268 ms had the switch
// discard what was sent to it (its head-of-queue lifetime ran out), and at
// ACK timeout 30 its peer, or itself, waited for 73 minutes. The switch
// says DISCARDED once the port drains again; then each RC QP of the port
// says what it is missing, as after a move, and no time needs to pass.
TEST_CASE("a port the switch discarded packets to has its RC traffic go on at once",
          "[object-state]") {
    constexpr uint32_t kLength = 16 << 10;
    Pair p(PIB_QPT_RC, {.timeout = 30, .retryCnt = 7, .maxRdAtomic = 4});
    const uint8_t op = GENERATE(as<uint8_t>{}, PIB_WR_SEND, PIB_WR_RDMA_WRITE, PIB_WR_RDMA_READ,
                                PIB_WR_ATOMIC_FETCH_AND_ADD);
    const bool requesterStalled = GENERATE(true, false);
    CAPTURE(op, requesterStalled);
    const bool atomic = op == PIB_WR_ATOMIC_FETCH_AND_ADD;
    const uint64_t aBuf =
        op == PIB_WR_RDMA_READ ? p.a.host.alloc(kLength) : p.a.host.allocRandom(kLength, 21);
    const uint64_t bBuf =
        op == PIB_WR_RDMA_READ ? p.b.host.allocRandom(kLength, 22) : p.b.host.alloc(kLength);
    if (op == PIB_WR_SEND)
        p.b.postRecv(1, bBuf, kLength);
    if (!requesterStalled) { // b took a WRITE first: a responder that took
        // nothing since RTR says nothing (docs/migration.md)
        const uint64_t first = p.b.host.alloc(8);
        p.a.postSend(9, {.opcode = PIB_WR_RDMA_WRITE,
                         .local = p.a.host.allocRandom(8, 23),
                         .length = 8,
                         .remote = first});
        p.wire.run();
        REQUIRE(p.a.poll().size() == 1);
    }
    p.a.postSend(1, {.opcode = op,
                     .local = aBuf,
                     .length = atomic ? 8 : kLength,
                     .remote = bBuf,
                     .swapAdd = 5});
    // The switch discards what goes to the stalled port: b's answers to a,
    // or a's requests to b.
    p.wire.filter = [&](bool fromA, iba::Packet &) { return requesterStalled == fromA; };
    p.wire.advance(1'000'000'000, 10'000'000); // a second: no ACK timer of 73 minutes fires
    p.wire.filter = nullptr;
    CHECK(p.a.poll().empty());
    Node &told = requesterStalled ? p.a : p.b;
    const uint64_t before = p.a.host.now;
    tellDiscarded(told);
    CHECK(told.host.traces("link_discards_told") == 1);
    checkDoneAtOnce(p, {op, aBuf, bBuf, kLength}, before);
    // A switch that says it again at once is not heard: each word costs a
    // pass over the port's QPs.
    tellDiscarded(told);
    CHECK(told.host.traces("link_discards_told") == 1);
    CHECK(told.host.traces("link_discards_too_often") == 1);
}

// The review's finding: a switch that reads nothing from the port (its
// queue stays full) and says DISCARDED every 100 ms must not make each
// RC responder queue another ACK and NAK each time: what it owes is said
// once while it waits.
TEST_CASE("a switch that says DISCARDED again and again while it reads nothing grows no queue",
          "[object-state]") {
    Pair p(PIB_QPT_RC, {.timeout = 30, .retryCnt = 7, .maxRdAtomic = 4});
    const uint64_t src = p.a.host.allocRandom(64, 51), dst = p.b.host.alloc(64);
    p.a.postSend(1, {.opcode = PIB_WR_RDMA_WRITE, .local = src, .length = 64, .remote = dst});
    p.wire.filter = [](bool fromA, iba::Packet &) { return fromA; }; // b's ACK is lost
    p.wire.run();
    p.wire.filter = nullptr;
    p.b.host.portQueueLimit = 0; // from now on b's queue is full: nothing more goes
    const auto owed = [&] {
        const auto a = inspect(p.b, ("qp " + std::to_string(p.b.qpn)).c_str(), true);
        REQUIRE(a.rc == 0);
        return nlohmann::json::parse(a.text)["responder"]["replies_owed"].get<size_t>();
    };
    for (int i = 0; i < 50; ++i) {
        tellDiscarded(p.b);
        p.b.host.advance(150'000'000);
    }
    CHECK(p.b.host.traces("link_discards_told") == 50);
    CHECK(owed() <= 2);
    // The switch reads again: the ACK and the NAK go, a's WRITE completes.
    p.b.host.portQueueLimit = SIZE_MAX;
    p.wire.run();
    const auto done = p.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
}

// Found in CI: after a move, a responder's ACK of all it took waited (the
// port's budget for the event was spent by another QP's resends), and the
// NAK queued behind it replaced it. The peer had lost only that ACK: it
// dropped the NAK (its PSN is the next it would send) and its WRITE waited
// for an ACK timer of 73 minutes. b's first QP resends more than an
// event's budget; its second took a's WRITE, whose ACK was lost.
TEST_CASE("a responder's ACK after a move goes even when other QPs' resends spent the budget",
          "[object-state]") {
    const Node::Options o{.timeout = 30, .retryCnt = 7, .maxRdAtomic = 4};
    Pair p(PIB_QPT_RC, o, 16 << 20);
    const Node::Qp b1 = p.b.current();
    const Node::Qp a2 = p.a.createQp(PIB_QPT_RC), b2 = p.b.createQp(PIB_QPT_RC);
    p.a.connectTo(p.b.lid, b2.qpn, PIB_QPT_RC, o);
    Node::Options ob = o;
    std::swap(ob.sqPsn, ob.rqPsn);
    p.b.connectTo(p.a.lid, a2.qpn, PIB_QPT_RC, ob);
    constexpr uint32_t kBig = 512 << 10; // 512 packets of 1 KiB: beyond one event's budget
    const uint64_t bigSrc = p.b.host.allocRandom(kBig, 41), bigDst = p.a.host.alloc(kBig);
    p.b.use(b1);
    p.b.postSend(1,
                 {.opcode = PIB_WR_RDMA_WRITE, .local = bigSrc, .length = kBig, .remote = bigDst});
    const uint64_t smallSrc = p.a.host.allocRandom(8, 42), smallDst = p.b.host.alloc(8);
    p.a.use(a2);
    p.a.postSend(2,
                 {.opcode = PIB_WR_RDMA_WRITE, .local = smallSrc, .length = 8, .remote = smallDst});
    p.wire.filter = [](bool fromA, iba::Packet &) { return fromA; }; // all b sends is lost
    p.wire.run();
    p.wire.filter = nullptr;
    CHECK(p.a.poll().empty());
    CHECK(sameBytes(p.a, smallSrc, p.b, smallDst, 8)); // b took a's WRITE
    // b moves; its first cable is refused (the switch still holds the old
    // QEMU's), and its loaded QPs send meanwhile into a link not up.
    std::string why;
    const std::vector<uint8_t> state = p.b.host.saveState(&why);
    REQUIRE(why.empty());
    p.a.host.portOutput[1].clear();
    p.b.host.replaceCore();
    REQUIRE(p.b.host.loadState(state).empty());
    pib_core_port_connected(p.b.host.core, 1, 1);
    while (p.b.host.runScheduled()) {
    }
    p.b.host.portOutput[1].clear();
    p.b.host.switchHello(PIB_WIRE_HELLO_RESUMES);
    CHECK(p.b.host.traces("link_resumed") == 1);
    const uint64_t before = p.a.host.now;
    std::vector<pib_cqe> done;
    for (int round = 0; round < 20 && done.size() < 1; ++round) { // no time passes
        p.wire.run();
        for (const pib_cqe &c : p.a.poll())
            done.push_back(c);
    }
    CHECK(p.a.host.now == before);
    REQUIRE(done.size() == 1);
    CHECK(done[0].wr_id == 2);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(p.a.host.traces("err_rc_bad_response_psn") <= 1); // the NAK, dropped
    p.b.use(b1);
    p.wire.run();
    const auto bigDone = p.b.poll();
    REQUIRE(bigDone.size() == 1);
    CHECK(bigDone[0].status == PIB_WC_SUCCESS);
    CHECK(sameBytes(p.b, bigSrc, p.a, bigDst, kBig));
}

// A move that fails and whose cable the switch did not keep: the link
// comes back as a new one (the port DOWN, then INIT), and what was in
// flight is lost as in a move. Once the SM makes the port ACTIVE again,
// both ends' traffic goes on at once, at ACK timeout 30.
TEST_CASE("a failed move whose link came back new resends once the port is ACTIVE",
          "[object-state]") {
    constexpr uint32_t kLength = 16 << 10;
    Pair p(PIB_QPT_RC, {.timeout = 30, .retryCnt = 7});
    const uint64_t aSrc = p.a.host.allocRandom(kLength, 3), bDst = p.b.host.alloc(kLength);
    const uint64_t bSrc = p.b.host.allocRandom(kLength, 4), aDst = p.a.host.alloc(kLength);
    p.a.postSend(1,
                 {.opcode = PIB_WR_RDMA_WRITE, .local = aSrc, .length = kLength, .remote = bDst});
    p.b.postSend(1,
                 {.opcode = PIB_WR_RDMA_WRITE, .local = bSrc, .length = kLength, .remote = aDst});
    p.wire.filter = [](bool, iba::Packet &) { return false; }; // on the wire as a's VM stopped
    p.wire.run();
    p.wire.filter = nullptr;
    pib_core_moving(p.a.host.core);
    pib_core_move_failed(p.a.host.core);
    pib_core_port_connected(p.a.host.core, 1, 0); // the cable went, and a new one came
    pib_core_port_connected(p.a.host.core, 1, 1);
    p.a.host.switchHello(); // a new link: the switch kept nothing
    p.wire.run();
    CHECK(p.a.poll().empty()); // nothing yet: the port is not ACTIVE
    for (uint8_t state : {PIB_PORT_ARMED, PIB_PORT_ACTIVE})
        p.a.setPortState(state);
    const uint64_t before = p.a.host.now;
    for (int round = 0; round < 20; ++round)
        p.wire.run();
    CHECK(p.a.host.now == before); // no time passed: no timer resent anything
    const auto aDone = p.a.poll(), bDone = p.b.poll();
    REQUIRE(aDone.size() == 1);
    REQUIRE(bDone.size() == 1);
    CHECK(aDone[0].status == PIB_WC_SUCCESS);
    CHECK(bDone[0].status == PIB_WC_SUCCESS);
    CHECK(sameBytes(p.a, aSrc, p.b, bDst, kLength));
    CHECK(sameBytes(p.b, bSrc, p.a, aDst, kLength));
}

// The requester moves while it waits: for the RNR NAK's delay (no receive
// was posted), or for the ACK of a SEND whose packets the wire lost (its
// retransmission timer armed). Either way the SEND completes whole.
TEST_CASE("a requester that moves during an RNR wait or with its ACK timer armed completes",
          "[object-state]") {
    constexpr uint32_t kLength = 4096;
    Pair p(PIB_QPT_RC, {.rnrRetry = 7, .minRnrTimer = 20}); // RNR: 2.56 ms waits, no limit
    const bool rnr = GENERATE(true, false);
    CAPTURE(rnr);
    const uint64_t src = p.a.host.allocRandom(kLength, 5), dst = p.b.host.alloc(kLength);
    if (!rnr) {
        p.b.postRecv(1, dst, kLength);
        p.wire.filter = [](bool, iba::Packet &) { return false; }; // lost
    }
    p.a.postSend(1, {.local = src, .length = kLength});
    p.wire.run();
    p.wire.filter = nullptr;
    pib_port_counters a{};
    REQUIRE(p.a.host.commandOut(PIB_CMD_QUERY_COUNTERS, 1, &a).status == PIB_CMD_STATUS_OK);
    if (rnr)
        CHECK(a.rnr_naks_received == 1);
    CHECK(p.a.poll().empty());
    move(p.wire, p.a);
    if (rnr)
        p.b.postRecv(1, dst, kLength);
    const auto done = completions(p.wire, p.a, 1);
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(sameBytes(p.a, src, p.b, dst, kLength));
    CHECK(p.b.poll().size() == 1);
}

namespace {

constexpr uint32_t kQkey = 0x11111111;

// A UD SEND of `len` bytes at `buf` from `n` to `to`'s QP.
void postDatagram(Node &n, uint64_t wrId, const Node &to, uint64_t buf, uint32_t len) {
    pib_wqe_ud ud{};
    ud.av.dlid = to.lid;
    ud.av.port = 1;
    ud.remote_qpn = to.qpn;
    ud.remote_qkey = kQkey;
    n.postDatagram(wrId, ud, buf, len);
}

} // namespace

// UD: a move loses the datagram on the wire, as UD may; the moved QP keeps
// its number, Q_Key and port, and the datagrams after it arrive whole.
TEST_CASE("a UD QP that moves loses what was on the wire and carries what follows",
          "[object-state]") {
    constexpr uint32_t kLength = 1024;
    Node a(PIB_QPT_UD, 0x11), b(PIB_QPT_UD, 0x22);
    Wire wire{a, b, {}, {}, {}, true, {}};
    a.host.datagramToRts(a.qpn, PIB_QPT_UD, kQkey);
    b.host.datagramToRts(b.qpn, PIB_QPT_UD, kQkey);
    const bool senderMoves = GENERATE(true, false);
    CAPTURE(senderMoves);
    const uint64_t lost = a.host.allocRandom(kLength, 1), next = a.host.allocRandom(kLength, 2);
    const uint64_t in = b.host.alloc(2 * (kLength + 40));
    b.postRecv(1, in, kLength + 40); // the GRH's 40 bytes come first
    b.postRecv(2, in + kLength + 40, kLength + 40);
    postDatagram(a, 1, b, lost, kLength);
    wire.filter = [](bool, iba::Packet &) { return false; };
    wire.run();
    wire.filter = nullptr;
    CHECK(a.poll().size() == 1); // UD completes as it leaves
    move(wire, senderMoves ? a : b);
    postDatagram(a, 2, b, next, kLength);
    wire.run();
    const auto sent = a.poll();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].status == PIB_WC_SUCCESS);
    const auto got = b.poll();
    REQUIRE(got.size() == 1);
    CHECK(got[0].status == PIB_WC_SUCCESS);
    CHECK(got[0].wr_id == 1); // the first receive WQE: the lost datagram took none
    CHECK(got[0].byte_len == kLength + 40);
    CHECK(got[0].src_qp == a.qpn);
    CHECK(sameBytes(a, next, b, in + 40, kLength));
}

// One operation at a time, as pib-traffic runs them, and a move at
// random points, across many laps of the CQ and its pages: every
// operation completes, in order, whatever the move cut.
TEST_CASE("RC operations one at a time complete across hundreds of moves at random points",
          "[object-state]") {
    constexpr uint32_t kLength = 8 << 10;
    Pair p(PIB_QPT_RC, {.maxRdAtomic = 1}, 8 << 20);
    const uint64_t seed = GENERATE(1, 2, 3, 4);
    CAPTURE(seed);
    std::mt19937_64 rng(seed);
    const uint64_t local = p.a.host.allocRandom(kLength, 7);
    const uint64_t remote = p.b.host.allocRandom(kLength, 8);
    const uint64_t counter = p.b.host.alloc(8);
    const uint64_t old = p.a.host.alloc(8);
    int moves = 0;
    for (uint64_t round = 1; round <= 700; ++round) {
        CAPTURE(round, moves);
        static constexpr uint8_t kOps[] = {PIB_WR_RDMA_WRITE, PIB_WR_RDMA_READ,
                                           PIB_WR_ATOMIC_FETCH_AND_ADD, PIB_WR_ATOMIC_CMP_AND_SWP};
        const uint8_t op = kOps[round % 4];
        const bool atomic = op == PIB_WR_ATOMIC_FETCH_AND_ADD || op == PIB_WR_ATOMIC_CMP_AND_SWP;
        p.a.postSend(round, {.opcode = op,
                             .local = atomic ? old : local,
                             .length = atomic ? 8 : kLength,
                             .remote = atomic ? counter : remote,
                             .swapAdd = 1});
        if (rng() % 3 == 0) {
            int passed = 0;
            const int crossed = static_cast<int>(rng() % 4);
            p.wire.filter = [&](bool, iba::Packet &) { return ++passed <= crossed; };
            p.wire.run();
            p.wire.filter = nullptr;
            move(p.wire, rng() % 2 ? p.a : p.b);
            ++moves;
        }
        const auto done = completions(p.wire, p.a, 1);
        REQUIRE(done.size() == 1);
        CHECK(done[0].wr_id == round);
        REQUIRE(done[0].status == PIB_WC_SUCCESS);
    }
    CHECK(p.a.qpState() == PIB_QPS_RTS);
}

// Issue 57's defect 6: a duplicate READ is answered through the PD its
// replay entry names, so a loaded responder's entry must name the PD its
// request was checked in. A state whose READ names another PD of the
// device (one that holds memory the peer was never given) is refused.
TEST_CASE("a loaded responder's READ remembered in another PD is refused", "[object-state]") {
    Pair p(PIB_QPT_RC, {.maxRdAtomic = 4});
    const uint32_t otherPd = static_cast<uint32_t>(p.b.host.command(PIB_CMD_ALLOC_PD).result);
    REQUIRE(otherPd != p.b.pd);
    constexpr uint32_t kLength = 4096;
    const uint64_t src = p.b.host.allocRandom(kLength, 5), dst = p.a.host.alloc(kLength);
    // A fetch-and-add first: its remembered answer names no PD, and loads.
    p.a.postSend(1, {.opcode = PIB_WR_ATOMIC_FETCH_AND_ADD,
                     .local = p.a.host.alloc(8),
                     .length = 8,
                     .remote = p.b.host.alloc(8),
                     .swapAdd = 1});
    REQUIRE(completionOf(p, p.a).status == PIB_WC_SUCCESS);
    p.a.postSend(2, {.opcode = PIB_WR_RDMA_READ, .local = dst, .length = kLength, .remote = src});
    REQUIRE(completionOf(p, p.a).status == PIB_WC_SUCCESS);
    const std::vector<uint8_t> state = saved(p.b.host);
    // The READ's replay entry: its address, R_Key and length, then its PD.
    std::vector<uint8_t> entry(16);
    for (int i = 0; i < 8; ++i)
        entry[i] = static_cast<uint8_t>(src >> (8 * i));
    for (int i = 0; i < 4; ++i) {
        entry[8 + i] = static_cast<uint8_t>(p.b.key >> (8 * i));
        entry[12 + i] = static_cast<uint8_t>(kLength >> (8 * i));
    }
    const auto at = std::search(state.begin(), state.end(), entry.begin(), entry.end());
    REQUIRE(at != state.end());
    const size_t pdAt = static_cast<size_t>(at - state.begin()) + entry.size();
    uint32_t pd = 0;
    std::memcpy(&pd, &state[pdAt], sizeof(pd));
    REQUIRE(pd == p.b.pd);

    FakeHost same;
    CHECK(loadInto(same, p.b.host, state).empty()); // as saved, it loads
    std::vector<uint8_t> other = state;
    std::memcpy(&other[pdAt], &otherPd, sizeof(otherPd));
    FakeHost fresh;
    CHECK_THAT(
        loadInto(fresh, p.b.host, other),
        Catch::Contains("a READ or atomic remembered in a PD its request was not checked in"));
}
