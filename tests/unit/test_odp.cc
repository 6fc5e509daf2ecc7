// SPDX-License-Identifier: GPL-2.0-or-later
// pib-hca's on-demand paging (docs/prm.md §6.9): PIB_MR_ON_DEMAND regions
// whose MTT entries carry present bits, the PAGE_FAULT EQE a transfer
// that reaches an absent page raises, WRITE_MTT mapping the pages and
// PAGE_FAULT_RESUME ending the fault. Every byte that moves is checked.
#include <catch2/catch.hpp>

#include <algorithm>
#include <optional>
#include <vector>

#include "pib_odp_fixture.hh"

using namespace pib::testing;

TEST_CASE("pib ODP: a WRITE into an on-demand region's absent pages is RNR NAKed and faults; "
          "mapped and resumed, the resend lands whole",
          "[odp]") {
    Pair p(PIB_QPT_RC, patient());
    OdpRegion r(p.b, 3);
    FaultReader faults;
    const uint64_t source = p.a.host.allocRandom(8192, 17);
    p.a.postSend(1, {.opcode = PIB_WR_RDMA_WRITE,
                     .local = source,
                     .length = 8192,
                     .remote = kIova + 2048,
                     .rkey = r.key});
    p.wire.run();
    CHECK(p.a.poll().empty());
    const auto raised = faults.take(p.b);
    REQUIRE(raised.size() == 1);
    const pib_eqe &f = raised[0];
    CHECK(f.subtype == PIB_PAGE_FAULT_WRITE);
    CHECK(f.data.page_fault.key == r.key);
    CHECK(f.data.page_fault.va == kIova + 2048);
    CHECK(f.data.page_fault.length == 8192);
    CHECK(p.b.host.traces("page_fault") == 1);

    // The driver maps the pages and resumes; the requester's RNR wait
    // ends, and the WRITE goes again.
    const auto done = mapAndResume(p, p.b, r, {kWrite, kWrite, kWrite}, f.data.page_fault.token);
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    const std::vector<uint8_t> landed = r.bytes(p.b);
    CHECK(std::equal(p.a.host.at(source), p.a.host.at(source) + 8192, landed.begin() + 2048));
    CHECK(p.b.host.guestErrors() == 0);
}

TEST_CASE("pib ODP: a SEND from an on-demand region waits at its WQE for the pages; a page "
          "mapped for reads is enough",
          "[odp]") {
    Pair p(PIB_QPT_RC, patient());
    OdpRegion r(p.a, 2);
    FaultReader faults;
    p.a.fill(r.pages[0], kPage, 3);
    p.a.fill(r.pages[1], kPage, 4);
    const uint64_t sink = p.b.host.alloc(8192);
    p.b.postRecv(7, sink, 8192);
    p.a.postSend(2, {.opcode = PIB_WR_SEND, .local = kIova + 100, .length = 5000, .lkey = r.key});
    p.wire.run();
    CHECK(p.a.poll().empty());
    CHECK(p.b.poll().empty());
    const auto raised = faults.take(p.a);
    REQUIRE(raised.size() == 1);
    CHECK(raised[0].subtype == 0); // a read
    CHECK(raised[0].data.page_fault.va == kIova + 100);
    const auto sent = mapAndResume(p, p.a, r, {kRead, kRead}, raised[0].data.page_fault.token);
    const auto received = p.b.poll();
    REQUIRE(sent.size() == 1);
    REQUIRE(received.size() == 1);
    CHECK(sent[0].status == PIB_WC_SUCCESS);
    CHECK(received[0].status == PIB_WC_SUCCESS);
    const std::vector<uint8_t> source = r.bytes(p.a);
    CHECK(std::equal(source.begin() + 100, source.begin() + 5100, p.b.host.at(sink)));
    CHECK(faults.take(p.a).empty());
}

TEST_CASE("pib ODP: WRITE_MTT takes present bits and absent entries into an on-demand region's "
          "range only; a failed, unanswered or stale fault",
          "[odp]") {
    Pair p(PIB_QPT_RC, patient());
    OdpRegion r(p.a, 1);
    FaultReader faults;
    CHECK(r.map(p.a, {kRead}) == PIB_CMD_STATUS_OK);
    CHECK(r.map(p.a, {0}) == PIB_CMD_STATUS_OK);
    pib_mtt_write w{};
    w.count = 1;
    w.entries[0] = r.pages[0] | 4; // not a present bit
    CHECK(p.a.host.commandIn(PIB_CMD_WRITE_MTT, r.mtt, w).status == PIB_CMD_STATUS_BAD_PARAM);
    const uint32_t plain = static_cast<uint32_t>(p.a.host.command(PIB_CMD_ALLOC_MTT, 0, 1).result);
    w.entries[0] = r.pages[0] | kWrite; // a range no on-demand region holds
    CHECK(p.a.host.commandIn(PIB_CMD_WRITE_MTT, plain, w).status == PIB_CMD_STATUS_BAD_PARAM);
    pib_mr_context both{};
    both.pdn = p.a.pd;
    both.flags = PIB_MR_ON_DEMAND | PIB_MR_FAST_REG;
    CHECK(p.a.host.commandIn(PIB_CMD_CREATE_MR, 0, both).status == PIB_CMD_STATUS_BAD_PARAM);
    CHECK(p.a.host.command(PIB_CMD_PAGE_FAULT_RESUME, 2, 0).status == PIB_CMD_STATUS_BAD_PARAM);
    CHECK(p.a.host.guestErrors("cmd-bad-param") == 4);

    // Resumed as failed: the requester asks again 20 ms later, and when
    // the driver fails that too, the WQE completes with a local protection
    // error.
    auto raised = writeFromRegion(p, faults, r, 64, p.b.host.alloc(kPage));
    REQUIRE(raised.size() == 1);
    REQUIRE(resume(p.a, raised[0].data.page_fault.token, true) == PIB_CMD_STATUS_OK);
    p.wire.run();
    CHECK(p.a.poll().empty());
    CHECK(faults.take(p.a).empty());
    p.wire.advance(20'000'000, 1'000'000);
    const auto again = faults.take(p.a);
    REQUIRE(again.size() == 1);
    CHECK(again[0].data.page_fault.va == raised[0].data.page_fault.va);
    REQUIRE(resume(p.a, again[0].data.page_fault.token, true) == PIB_CMD_STATUS_OK);
    p.wire.run();
    auto done = p.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_LOC_PROT_ERR);
    // Again, or a token never raised: nothing to do.
    CHECK(resume(p.a, again[0].data.page_fault.token) == PIB_CMD_STATUS_OK);
    CHECK(p.a.host.traces("page_fault_stale") == 1);

    // Not resumed within 10 s, on a fresh pair: the same.
    Pair q(PIB_QPT_RC, patient());
    OdpRegion s(q.a, 1);
    FaultReader qFaults;
    REQUIRE(writeFromRegion(q, qFaults, s, 64, q.b.host.alloc(kPage)).size() == 1);
    q.wire.advance(9'000'000'000, 1'000'000'000);
    CHECK(q.a.poll().empty());
    q.wire.advance(2'000'000'000, 1'000'000'000);
    done = q.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_LOC_PROT_ERR);
    CHECK(q.a.host.traces("page_fault_timeout") == 1);
}

TEST_CASE("pib ODP: an ATOMIC WRITE and a FLUSH into an on-demand region's absent page fault "
          "and go on once it is mapped",
          "[odp][placement]") {
    Node::Options o = patient();
    o.qpAccess |= PIB_ACCESS_FLUSH_GLOBAL;
    Pair p(PIB_QPT_RC, o);
    OdpRegion r(p.b, 1);
    FaultReader faults;
    p.a.postPlacement(
        5, {.opcode = PIB_WR_ATOMIC_WRITE, .remote = kIova + 64, .rkey = r.key, .value = 0x55aa});
    p.wire.run();
    CHECK(p.a.poll().empty());
    auto raised = faults.take(p.b);
    REQUIRE(raised.size() == 1);
    CHECK(raised[0].subtype == PIB_PAGE_FAULT_WRITE);
    auto done = mapAndResume(p, p.b, r, {kWrite}, raised[0].data.page_fault.token);
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(p.b.host.peek<uint64_t>(r.pages[0] + 64) == 0x55aa);

    // Unmapped again (an invalidation), the FLUSH of the range faults too.
    REQUIRE(r.map(p.b, {0}) == PIB_CMD_STATUS_OK);
    p.a.postPlacement(6, {.remote = kIova, .rkey = r.key, .length = 4096});
    p.wire.run();
    raised = faults.take(p.b);
    REQUIRE(raised.size() == 1);
    CHECK(raised[0].subtype == 0);
    done = mapAndResume(p, p.b, r, {kRead}, raised[0].data.page_fault.token);
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(p.b.host.guestErrors() == 0);
}

TEST_CASE("pib ODP: a requester that waits for a page fault moves (saved state) and faults "
          "again where it loads; the old token is stale there",
          "[odp][device-state]") {
    Pair p(PIB_QPT_RC, patient());
    OdpRegion r(p.a, 1);
    FaultReader faults;
    p.a.fill(r.pages[0], kPage, 9);
    const uint64_t sink = p.b.host.alloc(kPage);
    const auto before = writeFromRegion(p, faults, r, 4096, sink);
    REQUIRE(before.size() == 1);
    p.wire.a.host.portOutput[1].clear();
    p.wire.b.host.portOutput[1].clear();
    REQUIRE(p.a.host.move() == "");
    p.wire.run();
    // The region and its (absent) entry came along; the QP raises its
    // fault anew, and the driver's resume of the old token finds nothing.
    const auto after = faults.take(p.a);
    REQUIRE(after.size() == 1);
    CHECK(after[0].data.page_fault.key == r.key);
    REQUIRE(resume(p.a, before[0].data.page_fault.token) == PIB_CMD_STATUS_OK);
    CHECK(p.a.host.traces("page_fault_stale") == 1);
    const auto done = mapAndResume(p, p.a, r, {kRead}, after[0].data.page_fault.token);
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(std::equal(p.a.host.at(r.pages[0]), p.a.host.at(r.pages[0]) + kPage, p.b.host.at(sink)));
}

TEST_CASE("pib ODP: a saved state keeps present bits, of a region's mapped pages and of a range "
          "whose region is gone",
          "[odp][device-state]") {
    Pair p(PIB_QPT_RC, patient());
    OdpRegion r(p.b, 2);
    OdpRegion gone(p.b, 1, kIova + (1 << 20));
    REQUIRE(r.map(p.b, {kWrite, kRead}) == PIB_CMD_STATUS_OK);
    REQUIRE(gone.map(p.b, {kWrite}) == PIB_CMD_STATUS_OK);
    // The region goes and leaves its entry, present bits and all, in its
    // MTT range, which stays allocated.
    REQUIRE(p.b.host.command(PIB_CMD_DESTROY_MR, gone.key).status == PIB_CMD_STATUS_OK);
    REQUIRE(p.b.host.move() == "");
    FaultReader faults;
    const uint64_t source = p.a.host.allocRandom(4096, 63);
    p.a.postSend(1, {.opcode = PIB_WR_RDMA_WRITE,
                     .local = source,
                     .length = 4096,
                     .remote = kIova,
                     .rkey = r.key});
    p.wire.run();
    const auto done = p.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(faults.take(p.b).empty());
    CHECK(std::equal(p.a.host.at(source), p.a.host.at(source) + 4096, p.b.host.at(r.pages[0])));
}
