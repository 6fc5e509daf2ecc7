// SPDX-License-Identifier: GPL-2.0-or-later
// RESIZE_CQ (docs/prm.md §6.1): the CQ moves to a new ring, the driver
// copies what was not consumed, and completions go on in the new ring.
#include <catch2/catch.hpp>

#include "conditions.hh"

#include "connected_fixture.hh"
#include "limits.hh"

using namespace pib;
using namespace pib::testing;

namespace {

// A driver's view of the CQ: its ring, its size and how far it polled.
struct CqView {
    Node &n;
    uint64_t page, ciRecord;
    unsigned log;
    uint32_t ci = 0;

    uint64_t slot(uint32_t i) const { return page + (i & ((1u << log) - 1)) * PIB_CQE_SIZE; }
    std::vector<pib_cqe> poll(size_t most = SIZE_MAX) {
        std::vector<pib_cqe> out;
        while (out.size() < most) {
            const pib_cqe c = n.host.peek<pib_cqe>(slot(ci));
            if ((c.flags & PIB_CQE_PHASE) != (((ci >> log) & 1) ^ 1))
                break;
            out.push_back(c);
            ++ci;
        }
        n.host.poke(ciRecord, ci);
        return out;
    }
};

// One SEND to itself: a send and a receive completion.
void exchange(Node &n, uint64_t wrId, uint64_t buf) {
    n.postRecv(wrId, buf + 2048, 1024);
    n.postSend(wrId, {.local = buf, .length = 100});
}

struct Resize {
    pib_cq_context ctx{};
    uint64_t page = 0, ciRecord = 0;
};

Resize newRing(Node &n, unsigned log) {
    Resize r;
    std::vector<uint64_t> pages;
    const uint32_t count = std::max(1u, (PIB_CQE_SIZE << log) / PIB_PAGE_SIZE);
    r.ctx.buf = n.host.ring(count, &pages);
    r.ctx.log_size = log;
    r.ctx.ci_record = r.ciRecord = n.host.alloc(64, 64);
    r.page = pages.front();
    return r;
}

} // namespace

TEST_CASE("RESIZE_CQ moves the CQ; the driver moves what it has not consumed", "[cq]") {
    Node n(PIB_QPT_RC, 0x11);
    n.connect(n, PIB_QPT_RC, {.sqPsn = 100, .rqPsn = 100});
    const uint64_t buf = n.host.alloc(4096);
    CqView cq{n, n.cqPage, n.ciRecord, Node::kLogCq};
    pib_dev_cap cap{};
    n.host.commandOut(PIB_CMD_QUERY_DEV_CAP, 0, &cap);
    CHECK(cap.device_cap_flags & PIB_DEV_CAP_RESIZE_CQ);

    for (uint64_t i = 1; i <= 5; ++i)
        exchange(n, i, buf);
    REQUIRE(cq.poll(3).size() == 3); // 7 CQEs left

    // Too small for what is left: refused, and nothing changes.
    Resize tiny = newRing(n, 2);
    CHECK(n.host.commandIn(PIB_CMD_RESIZE_CQ, n.cqn, tiny.ctx).status == PIB_CMD_STATUS_BAD_PARAM);
    CHECK(n.host.read32(PIB_BAR_REGS, PIB_REG_CMD_SYNDROME) ==
          pib::err::kCqResizeUnconsumed.syndrome);
    // The driver cannot always see every CQE waiting: no guest error.
    CHECK(n.host.guestErrors() == 0);
    CHECK(n.host.traces("cq_resize_refused") == 1);
    REQUIRE(cq.poll(1).size() == 1); // 6 left, still in the old ring

    Resize r = newRing(n, 3);
    const auto outcome = n.host.commandIn(PIB_CMD_RESIZE_CQ, n.cqn, r.ctx);
    REQUIRE(outcome.status == PIB_CMD_STATUS_OK);
    REQUIRE(outcome.result == 6);
    // The driver copies them to the start of the new ring, phase of its
    // first pass, and polls on from index 0.
    for (uint32_t k = 0; k < outcome.result; ++k) {
        pib_cqe c = n.host.peek<pib_cqe>(cq.slot(cq.ci + k));
        c.flags |= PIB_CQE_PHASE;
        n.host.poke(r.page + k * PIB_CQE_SIZE, c);
    }
    cq.page = r.page, cq.ciRecord = r.ciRecord, cq.log = 3, cq.ci = 0;
    n.host.poke(r.ciRecord, 0u);

    // Two more exchanges fill it (6 + 4 > 8 only if nothing is polled).
    const auto moved = cq.poll();
    REQUIRE(moved.size() == 6);
    for (uint64_t i = 6; i <= 7; ++i)
        exchange(n, i, buf);
    const auto fresh = cq.poll();
    REQUIRE(fresh.size() == 4); // indices 6 .. 9: the ring wrapped
    std::vector<uint64_t> ids;
    for (const auto &c : moved)
        ids.push_back(c.wr_id);
    for (const auto &c : fresh) {
        ids.push_back(c.wr_id);
        CHECK(c.status == PIB_WC_SUCCESS);
    }
    // Sends and receives of 1..7, each exactly twice, in order.
    REQUIRE(ids.size() == 10);
    CHECK(ids.front() == 3);
    CHECK(ids.back() == 7);
    CHECK(n.host.guestErrors("cq-overrun") == 0);

    pib_cq_context now{};
    n.host.commandOut(PIB_CMD_QUERY_CQ, n.cqn, &now);
    CHECK(now.log_size == 3);
    CHECK(now.ci_record == r.ciRecord);

    // A full new ring overruns as any CQ does.
    for (uint64_t i = 8; i <= 12; ++i)
        exchange(n, i, buf);
    CHECK(n.host.guestErrors("cq-overrun") == 1);
}

TEST_CASE("RESIZE_CQ refuses what a driver must not ask", "[cq]") {
    Node n(PIB_QPT_RC, 0x11);
    Resize r = newRing(n, 3);
    CHECK(n.host.commandIn(PIB_CMD_RESIZE_CQ, n.cqn + 7, r.ctx).status == PIB_CMD_STATUS_BAD_INDEX);
    Resize bad = r;
    bad.ctx.log_size = limits::kLogMaxCqe + 1;
    CHECK(n.host.commandIn(PIB_CMD_RESIZE_CQ, n.cqn, bad.ctx).status == PIB_CMD_STATUS_BAD_PARAM);
    bad = r;
    bad.ctx.ci_record = r.ciRecord + 2;
    CHECK(n.host.commandIn(PIB_CMD_RESIZE_CQ, n.cqn, bad.ctx).status == PIB_CMD_STATUS_BAD_PARAM);
    bad = r;
    bad.ctx.log_size = 8; // more CQEs than its one page holds
    CHECK(n.host.commandIn(PIB_CMD_RESIZE_CQ, n.cqn, bad.ctx).status == PIB_CMD_STATUS_BAD_PARAM);
    // A CI record ahead of every CQE written is not believed.
    n.host.poke(n.ciRecord, 5u);
    CHECK(n.host.commandIn(PIB_CMD_RESIZE_CQ, n.cqn, r.ctx).status == PIB_CMD_STATUS_BAD_STATE);
    n.host.poke(n.ciRecord, 0u);
    CHECK(n.host.commandIn(PIB_CMD_RESIZE_CQ, n.cqn, r.ctx).status == PIB_CMD_STATUS_OK);
    // The old ring's MTT range is no longer held: it can be freed.
    pib_cq_context now{};
    n.host.commandOut(PIB_CMD_QUERY_CQ, n.cqn, &now);
    CHECK(now.buf.mtt_index == r.ctx.buf.mtt_index);
}
