// SPDX-License-Identifier: GPL-2.0-or-later
// Completion event moderation (docs/prm.md §6.1): MODIFY_CQ makes the
// event of a CQ armed for its next CQE wait for a count of CQEs or a
// period after the first of them, whichever comes first.
#include <catch2/catch.hpp>

#include "connected_fixture.hh"

using namespace pib;
using namespace pib::testing;

namespace {

uint64_t moderation(uint16_t count, uint16_t periodUs) {
    return uint64_t{periodUs} << 16 | count;
}

void armNext(Node &n, uint32_t how = PIB_CQ_ARM_NEXT) {
    pib_core_bar_write(n.host.core, PIB_BAR_DOORBELL,
                       uint64_t{n.uar} * PIB_PAGE_SIZE + PIB_DB_CQ_ARM, uint64_t{how} << 32 | n.cqn,
                       8);
}

// The completion events of the node's CQ in its EQ (first pass of the ring).
size_t completionEvents(Node &n) {
    size_t events = 0;
    for (uint64_t i = 0; i < 64; ++i) {
        const auto eqe = n.host.peek<pib_eqe>(n.eqPage + i * sizeof(pib_eqe));
        if ((eqe.flags & PIB_EQE_PHASE) && eqe.type == PIB_EQE_COMPLETION &&
            eqe.data.comp.cqn == n.cqn)
            ++events;
    }
    return events;
}

// `n` SENDs from A, each received by B.
void sendMessages(Pair &p, int n, uint8_t flags = PIB_WQE_SIGNALED) {
    static uint64_t wrId = 0;
    const uint64_t out = p.a.host.alloc(4096), in = p.b.host.alloc(4096);
    for (int i = 0; i < n; ++i) {
        p.b.postRecv(++wrId, in, 4096);
        p.a.postSend(wrId, {.opcode = PIB_WR_SEND, .local = out, .length = 64, .flags = flags});
    }
    p.wire.run();
}

} // namespace

TEST_CASE("the device advertises moderation, and MODIFY_CQ checks what it is given", "[cq]") {
    Pair p;
    FakeHost &h = p.b.host;
    const pib_dev_cap cap = h.caps();
    CHECK(cap.device_cap_flags & PIB_DEV_CAP_CQ_MODERATION);
    CHECK(cap.max_cq_moderation_count == 0xffff);
    CHECK(cap.max_cq_moderation_period == 4095);

    CHECK(h.command(PIB_CMD_MODIFY_CQ, p.b.cqn, moderation(16, 4095)).status == PIB_CMD_STATUS_OK);
    pib_cq_context ctx{};
    REQUIRE(h.commandOut(PIB_CMD_QUERY_CQ, p.b.cqn, &ctx).status == PIB_CMD_STATUS_OK);
    CHECK(ctx.moderation_count == 16);
    CHECK(ctx.moderation_period == 4095);

    CHECK(h.command(PIB_CMD_MODIFY_CQ, p.b.cqn, moderation(16, 4096)).status ==
          PIB_CMD_STATUS_BAD_PARAM);
    CHECK(h.command(PIB_CMD_MODIFY_CQ, p.b.cqn, uint64_t{1} << 32).status ==
          PIB_CMD_STATUS_BAD_PARAM);
    CHECK(h.command(PIB_CMD_MODIFY_CQ, 999, moderation(1, 1)).status == PIB_CMD_STATUS_BAD_INDEX);
    CHECK(h.guestErrors("cmd-bad-param") == 2);
    CHECK(h.guestErrors("cmd-bad-index") == 1);
    // What was refused changed nothing.
    REQUIRE(h.commandOut(PIB_CMD_QUERY_CQ, p.b.cqn, &ctx).status == PIB_CMD_STATUS_OK);
    CHECK(ctx.moderation_period == 4095);
}

TEST_CASE("a moderated CQ's event waits for its count of CQEs", "[cq]") {
    Pair p;
    REQUIRE(p.b.host.command(PIB_CMD_MODIFY_CQ, p.b.cqn, moderation(4, 1000)).status ==
            PIB_CMD_STATUS_OK);
    armNext(p.b);
    sendMessages(p, 3);
    CHECK(p.b.poll().size() == 3);
    CHECK(completionEvents(p.b) == 0);
    sendMessages(p, 1);
    CHECK(completionEvents(p.b) == 1);
    // Not armed: later CQEs make no event and start no period.
    sendMessages(p, 5);
    CHECK(completionEvents(p.b) == 1);
    p.b.host.advance(2'000'000);
    CHECK(completionEvents(p.b) == 1);
    CHECK(p.b.poll().size() == 6);
    // The count starts again at the next arm.
    armNext(p.b);
    sendMessages(p, 3);
    CHECK(completionEvents(p.b) == 1);
    sendMessages(p, 1);
    CHECK(completionEvents(p.b) == 2);
    CHECK(p.b.host.guestErrors() == 0);
}

TEST_CASE("a moderated CQ's event comes a period after its first CQE", "[cq]") {
    Pair p;
    REQUIRE(p.b.host.command(PIB_CMD_MODIFY_CQ, p.b.cqn, moderation(100, 50)).status ==
            PIB_CMD_STATUS_OK);
    armNext(p.b);
    sendMessages(p, 2);
    CHECK(completionEvents(p.b) == 0);
    p.b.host.advance(30'000);
    sendMessages(p, 1); // later CQEs do not push the deadline back
    p.b.host.advance(19'000);
    CHECK(completionEvents(p.b) == 0);
    p.b.host.advance(1'000);
    CHECK(completionEvents(p.b) == 1);
    CHECK(p.b.host.traces("cq_event_period") == 1);
    CHECK(p.b.poll().size() == 3);
}

TEST_CASE("moderation holds back no solicited event, and a new one frees what waits", "[cq]") {
    Pair p;
    REQUIRE(p.b.host.command(PIB_CMD_MODIFY_CQ, p.b.cqn, moderation(100, 1000)).status ==
            PIB_CMD_STATUS_OK);
    // The consumer asked to hear of the solicited CQE: it hears at once.
    armNext(p.b, PIB_CQ_ARM_SOLICITED);
    sendMessages(p, 1, PIB_WQE_SIGNALED | PIB_WQE_SOLICITED);
    CHECK(completionEvents(p.b) == 1);
    CHECK(p.b.poll().size() == 1); // consumed: the next arm waits

    armNext(p.b);
    sendMessages(p, 2);
    CHECK(completionEvents(p.b) == 1);
    // Moderation off: the event that waited goes now, not a period later.
    REQUIRE(p.b.host.command(PIB_CMD_MODIFY_CQ, p.b.cqn, moderation(0, 0)).status ==
            PIB_CMD_STATUS_OK);
    CHECK(completionEvents(p.b) == 2);
    p.b.host.advance(2'000'000);
    CHECK(completionEvents(p.b) == 2);
    // And now every armed CQE makes its event at once.
    CHECK(p.b.poll().size() == 2);
    armNext(p.b);
    CHECK(completionEvents(p.b) == 2);
    sendMessages(p, 1);
    CHECK(completionEvents(p.b) == 3);
}

TEST_CASE("a CQ destroyed while its event waits leaves no deadline behind", "[cq]") {
    Pair p;
    FakeHost &h = p.b.host;
    REQUIRE(h.command(PIB_CMD_MODIFY_CQ, p.b.cqn, moderation(100, 1000)).status ==
            PIB_CMD_STATUS_OK);
    armNext(p.b);
    sendMessages(p, 1);
    CHECK(completionEvents(p.b) == 0);
    // The QP goes, then its CQ; a CQ made in its place waits for nothing.
    REQUIRE(h.command(PIB_CMD_DESTROY_QP, p.b.qpn).status == PIB_CMD_STATUS_OK);
    REQUIRE(h.command(PIB_CMD_DESTROY_CQ, p.b.cqn).status == PIB_CMD_STATUS_OK);
    const FakeHost::Cq cq = h.createCq(p.b.eqn, p.b.uar, 6, 1);
    CHECK(cq.cqn == p.b.cqn);
    h.advance(2'000'000);
    CHECK(completionEvents(p.b) == 0);
    CHECK(h.guestErrors() == 0);
}

TEST_CASE("an arm of a CQ holding CQEs its driver has not consumed makes the event at once",
          "[cq][events]") {
    Pair p;
    // B's CQ takes a CQE while disarmed: no event.
    sendMessages(p, 1);
    CHECK(completionEvents(p.b) == 0);
    // IPoIB's way: arm without polling first. The CQE waits past the
    // consumer record, so the event comes at once, as a ConnectX's does.
    armNext(p.b);
    CHECK(completionEvents(p.b) == 1);
    // Consumed, the next arm waits for the next CQE.
    p.b.host.poke<uint32_t>(p.b.ciRecord, 1);
    armNext(p.b);
    CHECK(completionEvents(p.b) == 1);
    sendMessages(p, 1);
    CHECK(completionEvents(p.b) == 2);
    CHECK(p.b.host.guestErrors() == 0);
}
