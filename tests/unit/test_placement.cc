// SPDX-License-Identifier: GPL-2.0-or-later
// IBA 1.5's ATOMIC WRITE and FLUSH between two pib-hca devices cabled back
// to back (docs/prm.md §7.2, §7.4): what lands, what each is answered
// with, every refusal, and a duplicate answered without running again,
// also after the responder moved.
#include <catch2/catch.hpp>

#include "connected_fixture.hh"

using namespace pib;
using namespace pib::testing;

namespace {

constexpr uint32_t kQpAccess = PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_READ |
                               PIB_ACCESS_REMOTE_ATOMIC | PIB_ACCESS_FLUSH_GLOBAL;

// A pair whose QPs take FLUSHes, and on b a region that grants them.
struct PlacementPair : Pair {
    uint32_t flushKey;
    explicit PlacementPair(uint32_t qpAccess = kQpAccess)
        : Pair(PIB_QPT_RC, {.qpAccess = qpAccess}),
          flushKey(b.host.createPhysicalMr(b.pd, PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE |
                                                     PIB_ACCESS_FLUSH_GLOBAL)) {}

    // The one completion of a's send queue.
    pib_cqe done() {
        wire.run();
        auto got = a.poll();
        REQUIRE(got.size() == 1);
        return got[0];
    }
};

} // namespace

TEST_CASE("an ATOMIC WRITE lands its 8 bytes in one store and completes", "[rc][placement]") {
    PlacementPair p;
    const uint64_t remote = p.b.host.alloc(64);
    p.b.host.poke<uint64_t>(remote + 8, 0x1111111111111111);
    p.a.postPlacement(
        7, {.opcode = PIB_WR_ATOMIC_WRITE, .remote = remote + 8, .value = 0x0123456789abcdefull});
    const pib_cqe c = p.done();
    CHECK(c.status == PIB_WC_SUCCESS);
    CHECK(c.opcode == PIB_WC_ATOMIC_WRITE);
    CHECK(c.byte_len == 8);
    CHECK(c.wr_id == 7);
    CHECK(p.b.host.peek<uint64_t>(remote + 8) == 0x0123456789abcdefull);
    CHECK(p.b.host.peek<uint64_t>(remote) == 0); // nothing around it
    CHECK(p.b.host.peek<uint64_t>(remote + 16) == 0);
    CHECK(p.b.host.stores64 == 1);
    CHECK(p.wire.count(iba::kAtomicWrite) == 1);
    CHECK(p.wire.count(iba::kReadResponseOnly) == 1); // its answer: no data
}

TEST_CASE("a FLUSH of a range or of a whole region completes once checked", "[rc][placement]") {
    PlacementPair p;
    const uint64_t remote = p.b.host.alloc(8192);
    SECTION("a range") {
        p.a.postPlacement(1, {.remote = remote, .rkey = p.flushKey, .length = 8192});
        const pib_cqe c = p.done();
        CHECK(c.status == PIB_WC_SUCCESS);
        CHECK(c.opcode == PIB_WC_FLUSH);
        CHECK(c.byte_len == 8192);
    }
    SECTION("the whole region: its address and length are not looked at") {
        p.a.postPlacement(1, {.remote = 0,
                              .rkey = p.flushKey,
                              .length = 0xfedcba98, // beyond a message's 2^31: not looked at
                              .selectivity = PIB_FLUSH_MR});
        CHECK(p.done().status == PIB_WC_SUCCESS);
    }
    SECTION("after WRITEs: they completed first, in order") {
        const uint64_t local = p.a.host.allocRandom(4096, 3);
        p.a.postSend(1, {.opcode = PIB_WR_RDMA_WRITE,
                         .local = local,
                         .length = 4096,
                         .remote = remote,
                         .flags = 0,
                         .rkey = p.flushKey});
        p.a.postPlacement(2, {.remote = remote, .rkey = p.flushKey, .length = 4096});
        const pib_cqe c = p.done();
        CHECK(c.wr_id == 2);
        CHECK(c.status == PIB_WC_SUCCESS);
        CHECK(std::equal(p.a.host.at(local), p.a.host.at(local) + 4096, p.b.host.at(remote)));
    }
    CHECK(p.wire.count(iba::kFlush) == 1);
    CHECK(p.wire.count(iba::kReadResponseOnly) == 1);
}

TEST_CASE("FLUSH and ATOMIC WRITE refusals NAK as IBA says and fail both QPs", "[rc][placement]") {
    const uint64_t kValue = 0xfeedfacecafebeefull;
    SECTION("a FLUSH for persistence: no region grants it") {
        PlacementPair p;
        p.a.postPlacement(1, {.remote = p.b.host.alloc(64),
                              .rkey = p.flushKey,
                              .length = 64,
                              .placement = PIB_FLUSH_PERSISTENT});
        CHECK(p.done().status == PIB_WC_REM_ACCESS_ERR);
        CHECK(p.b.qpState() == PIB_QPS_ERR);
    }
    SECTION("a FLUSH of a region that does not grant it") {
        PlacementPair p;
        p.a.postPlacement(1, {.remote = p.b.host.alloc(64), .length = 64}); // b's key: no FLUSH
        CHECK(p.done().status == PIB_WC_REM_ACCESS_ERR);
    }
    SECTION("a FLUSH to a QP without FLUSH_GLOBAL") {
        PlacementPair p(kQpAccess & ~PIB_ACCESS_FLUSH_GLOBAL);
        p.a.postPlacement(1, {.remote = p.b.host.alloc(64), .rkey = p.flushKey, .length = 64});
        CHECK(p.done().status == PIB_WC_REM_INV_REQ_ERR);
        CHECK(p.b.qpState() == PIB_QPS_ERR);
    }
    SECTION("an ATOMIC WRITE to a QP without REMOTE_WRITE") {
        PlacementPair p(kQpAccess & ~PIB_ACCESS_REMOTE_WRITE);
        const uint64_t remote = p.b.host.alloc(64);
        p.a.postPlacement(1, {.opcode = PIB_WR_ATOMIC_WRITE, .remote = remote, .value = kValue});
        CHECK(p.done().status == PIB_WC_REM_INV_REQ_ERR);
        CHECK(p.b.host.peek<uint64_t>(remote) == 0);
    }
    SECTION("an ATOMIC WRITE at an address not 8-byte aligned") {
        PlacementPair p;
        const uint64_t remote = p.b.host.alloc(64);
        p.a.postPlacement(1,
                          {.opcode = PIB_WR_ATOMIC_WRITE, .remote = remote + 4, .value = kValue});
        CHECK(p.done().status == PIB_WC_REM_INV_REQ_ERR);
        CHECK(p.b.host.peek<uint64_t>(remote) == 0);
    }
    SECTION("an ATOMIC WRITE through a key without remote write") {
        PlacementPair p;
        const uint32_t readOnly = p.b.host.createPhysicalMr(p.b.pd, PIB_ACCESS_REMOTE_READ);
        const uint64_t remote = p.b.host.alloc(64);
        p.a.postPlacement(
            1,
            {.opcode = PIB_WR_ATOMIC_WRITE, .remote = remote, .rkey = readOnly, .value = kValue});
        CHECK(p.done().status == PIB_WC_REM_ACCESS_ERR);
        CHECK(p.b.host.peek<uint64_t>(remote) == 0);
    }
    SECTION("a FLUSH of a range longer than a message fails where it is") {
        PlacementPair p;
        p.a.postPlacement(1,
                          {.remote = p.b.host.alloc(64), .rkey = p.flushKey, .length = 0x80000001});
        CHECK(p.done().status == PIB_WC_LOC_LEN_ERR);
        CHECK(p.wire.count(iba::kFlush) == 0);
    }
    SECTION("a FLUSH WQE that names no placement type fails where it is") {
        PlacementPair p;
        p.a.postPlacement(1, {.remote = p.b.host.alloc(64), .length = 64, .placement = 0});
        CHECK(p.done().status == PIB_WC_LOC_QP_OP_ERR);
        CHECK(p.wire.count(iba::kFlush) == 0);
    }
    SECTION("a hostile FETH: a selectivity level IBA reserves") {
        PlacementPair p;
        p.wire.filter = [](bool fromA, iba::Packet &k) {
            if (fromA && k.feth)
                k.feth->selectivity = 3;
            return true;
        };
        p.a.postPlacement(1, {.remote = p.b.host.alloc(64), .rkey = p.flushKey, .length = 64});
        CHECK(p.done().status == PIB_WC_REM_INV_REQ_ERR);
    }
}

TEST_CASE("a lost answer: the duplicate ATOMIC WRITE is answered, not run again",
          "[rc][placement]") {
    PlacementPair p;
    const uint64_t remote = p.b.host.alloc(64);
    bool dropped = false;
    p.wire.filter = [&](bool fromA, iba::Packet &k) {
        if (!fromA && (k.bth.opcode & 0x1f) == iba::kReadResponseOnly && !dropped)
            return !(dropped = true);
        return true;
    };
    p.a.postPlacement(1, {.opcode = PIB_WR_ATOMIC_WRITE, .remote = remote, .value = 5});
    p.wire.run();
    CHECK(p.a.poll().empty());
    CHECK(p.b.host.peek<uint64_t>(remote) == 5);
    p.b.host.poke<uint64_t>(remote, 6); // b's CPU writes after it
    const bool moves = GENERATE(false, true);
    CAPTURE(moves);
    if (moves) { // the replayed answer is part of b's saved state
        p.wire.a.host.portOutput[1].clear();
        p.wire.b.host.portOutput[1].clear();
        REQUIRE(p.b.host.move() == "");
    }
    p.wire.advance(20'000'000); // the ACK timer resends
    auto done = p.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(p.b.host.peek<uint64_t>(remote) == 6);
    CHECK(p.wire.count(iba::kAtomicWrite) == 2);
}

TEST_CASE("FLUSHes and ATOMIC WRITEs wait within max_rd_atomic", "[rc][placement]") {
    Pair p(PIB_QPT_RC, {.maxRdAtomic = 1, .qpAccess = kQpAccess});
    const uint32_t flushKey = p.b.host.createPhysicalMr(
        p.b.pd, PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_FLUSH_GLOBAL);
    const uint64_t remote = p.b.host.alloc(64);
    int inFlight = 0, most = 0;
    p.wire.filter = [&](bool fromA, iba::Packet &k) {
        const uint8_t op = k.bth.opcode & 0x1f;
        if (fromA && (op == iba::kFlush || op == iba::kAtomicWrite))
            most = std::max(most, ++inFlight);
        if (!fromA && op == iba::kReadResponseOnly)
            --inFlight;
        return true;
    };
    for (uint64_t i = 0; i < 6; ++i) {
        if (i % 2)
            p.a.postPlacement(i, {.remote = remote, .rkey = flushKey, .length = 64});
        else
            p.a.postPlacement(i, {.opcode = PIB_WR_ATOMIC_WRITE, .remote = remote, .value = i});
    }
    p.wire.run();
    auto done = p.a.poll();
    REQUIRE(done.size() == 6);
    for (const pib_cqe &c : done)
        CHECK(c.status == PIB_WC_SUCCESS);
    CHECK(most == 1); // the responder would NAK a second one (too-many-reads)
    CHECK(p.b.host.peek<uint64_t>(remote) == 4);
}
