// SPDX-License-Identifier: GPL-2.0-or-later
// The memory management extensions between two devices: fast registration
// of scattered pages at any IOVA, local invalidation, SEND with invalidate,
// and everything a guest or a peer may get wrong about them.
#include <catch2/catch.hpp>

#include "connected_fixture.hh"
#include "limits.hh"

using namespace pib;
using namespace pib::testing;

namespace {

constexpr uint64_t kIova = 0x7000'0123; // starts mid-page
constexpr uint32_t kPages = 3;
constexpr uint64_t kLength = kPages * 4096 - 0x123 - 16;

// Three pages of `n`'s memory with a page between each (so no two are
// contiguous), and the page list that names them.
struct Mapping {
    uint64_t pages[kPages];
    uint64_t list;

    explicit Mapping(Node &n) {
        for (uint64_t &page : pages) {
            page = n.host.alloc(4096);
            n.host.alloc(4096);
        }
        list = n.host.alloc(8 * kPages, 8);
        for (uint32_t i = 0; i < kPages; ++i)
            n.host.poke(list + 8 * i, pages[i]);
    }
    // Where byte `iova` of the region lies in guest memory.
    uint64_t physical(uint64_t iova) const {
        const uint64_t offset = iova - (kIova & ~uint64_t{4095});
        return pages[offset / 4096] + offset % 4096;
    }
};

uint32_t withVariant(uint32_t key, uint8_t variant) {
    return (key & ~0xffu) | variant;
}

pib_wqe_reg_mr registration(const Mapping &m, uint32_t key) {
    pib_wqe_reg_mr reg{};
    reg.iova = kIova;
    reg.length = kLength;
    reg.page_list = m.list;
    reg.key = key;
    reg.access = kAccessAll;
    reg.page_count = kPages;
    reg.log_page_size = 12;
    return reg;
}

// Posts one WQE on `n` and returns its one completion.
pib_cqe completionOf(Pair &p, Node &n) {
    p.wire.run();
    auto done = n.poll();
    expect(done.size() == 1, "one completion");
    return done[0];
}

} // namespace

TEST_CASE("fast registration maps scattered pages at an IOVA; LOCAL_INV frees the key",
          "[rc][memkeys]") {
    Pair p;
    const Mapping m(p.b);
    const uint32_t mr = p.b.createFastRegMr(kPages);
    const uint32_t key = withVariant(mr, 0x5a);
    p.b.postRegMr(1, registration(m, key));
    const pib_cqe reg = completionOf(p, p.b);
    CHECK(reg.status == PIB_WC_SUCCESS);
    CHECK(reg.opcode == PIB_WC_REG_MR);

    // A WRITE through the new R_Key lands page by page where the list said.
    const uint32_t len = 10000;
    const uint64_t local = p.a.host.alloc(16384), back = p.a.host.alloc(16384);
    p.a.fill(local, len, 0x31);
    p.a.postSend(2, {.opcode = PIB_WR_RDMA_WRITE,
                     .local = local,
                     .length = len,
                     .remote = kIova + 50,
                     .rkey = key});
    CHECK(completionOf(p, p.a).status == PIB_WC_SUCCESS);
    for (uint32_t i = 0; i < len; ++i)
        REQUIRE(*p.b.host.at(m.physical(kIova + 50 + i)) == *p.a.host.at(local + i));
    // And a READ brings the same bytes back.
    p.a.postSend(3, {.opcode = PIB_WR_RDMA_READ,
                     .local = back,
                     .length = len,
                     .remote = kIova + 50,
                     .rkey = key});
    CHECK(completionOf(p, p.a).status == PIB_WC_SUCCESS);
    CHECK(std::equal(p.a.host.at(local), p.a.host.at(local) + len, p.a.host.at(back)));

    // The region, as QUERY_MR reports it now.
    pib_mr_context q{};
    REQUIRE(p.b.host.commandOut(PIB_CMD_QUERY_MR, key, &q).status == PIB_CMD_STATUS_OK);
    CHECK(q.iova == kIova);
    CHECK(q.length == kLength);
    CHECK(q.key_variant == 0x5a);
    CHECK(q.flags == PIB_MR_FAST_REG);

    // Invalidated, then registered again under another variant: the old
    // key no longer reaches it, the new one does.
    p.b.postLocalInv(4, key);
    const pib_cqe inv = completionOf(p, p.b);
    CHECK(inv.status == PIB_WC_SUCCESS);
    CHECK(inv.opcode == PIB_WC_LOCAL_INV);
    const uint32_t again = withVariant(mr, 0x5b);
    p.b.postRegMr(5, registration(m, again));
    CHECK(completionOf(p, p.b).status == PIB_WC_SUCCESS);
    p.a.postSend(6, {.opcode = PIB_WR_RDMA_WRITE,
                     .local = local,
                     .length = 100,
                     .remote = kIova,
                     .rkey = again});
    CHECK(completionOf(p, p.a).status == PIB_WC_SUCCESS);
    p.a.postSend(
        7,
        {.opcode = PIB_WR_RDMA_WRITE, .local = local, .length = 100, .remote = kIova, .rkey = key});
    CHECK(completionOf(p, p.a).status == PIB_WC_REM_ACCESS_ERR);
    CHECK(p.b.host.traces("mr_registered") == 2);
    CHECK(p.b.host.traces("mr_invalidated") == 1);
    // The variant changed twice: DESTROY_MR goes by the index.
    CHECK(p.b.host.command(PIB_CMD_DESTROY_MR, mr).status == PIB_CMD_STATUS_OK);
}

TEST_CASE("SEND with invalidate frees the peer's R_Key; the receive names it", "[rc][memkeys]") {
    Pair p;
    const Mapping m(p.b);
    const uint32_t key = withVariant(p.b.createFastRegMr(kPages), 7);
    p.b.postRegMr(1, registration(m, key));
    REQUIRE(completionOf(p, p.b).status == PIB_WC_SUCCESS);
    const uint32_t len = GENERATE(40u, 5000u); // SEND Only, and First/Middle/Last
    const uint64_t out = p.a.host.alloc(8192), in = p.b.host.alloc(8192);
    p.a.fill(out, len, 3);
    p.b.postRecv(2, in, 8192);
    p.a.postSend(3, {.opcode = PIB_WR_SEND_INV, .local = out, .length = len, .imm = key});
    CHECK(completionOf(p, p.a).status == PIB_WC_SUCCESS);
    const pib_cqe got = completionOf(p, p.b);
    CHECK(got.status == PIB_WC_SUCCESS);
    CHECK(got.opcode == PIB_WC_RECV);
    CHECK(got.byte_len == len);
    CHECK(got.flags & PIB_CQE_WITH_INV);
    CHECK(got.imm == key);
    CHECK(std::equal(p.a.host.at(out), p.a.host.at(out) + len, p.b.host.at(in)));
    CHECK(p.wire.count(len > 1024 ? iba::kSendLastInv : iba::kSendOnlyInv) == 1);
    // The key is free now: a READ through it is refused.
    p.a.postSend(
        4, {.opcode = PIB_WR_RDMA_READ, .local = out, .length = 16, .remote = kIova, .rkey = key});
    CHECK(completionOf(p, p.a).status == PIB_WC_REM_ACCESS_ERR);
}

TEST_CASE("a SEND with invalidate of a key the peer may not invalidate fails both ends",
          "[rc][memkeys]") {
    Pair p;
    const uint64_t out = p.a.host.alloc(64), in = p.b.host.alloc(64);
    p.b.postRecv(1, in, 64);
    // b's own MR is a registered region, not a fast-registration one.
    p.a.postSend(2, {.opcode = PIB_WR_SEND_INV, .local = out, .length = 8, .imm = p.b.key});
    p.wire.run();
    const auto sent = p.a.poll();
    REQUIRE(!sent.empty());
    CHECK(sent[0].status == PIB_WC_REM_INV_REQ_ERR);
    const auto got = p.b.poll();
    REQUIRE(got.size() == 1);
    CHECK(got[0].status == PIB_WC_REM_INV_REQ_ERR);
    CHECK(p.b.qpState() == PIB_QPS_ERR);
    CHECK(p.b.host.traces("err_rc_request_refused") == 1);
    // The region was not touched: a new QP pair could still use it.
    pib_mr_context q{};
    CHECK(p.b.host.commandOut(PIB_CMD_QUERY_MR, p.b.key, &q).status == PIB_CMD_STATUS_OK);
}

TEST_CASE("REG_MR and LOCAL_INV WQEs a region cannot take complete with LOC_PROT_ERR",
          "[rc][memkeys]") {
    Pair p;
    const Mapping m(p.b);
    const uint32_t mr = p.b.createFastRegMr(kPages);
    pib_wqe_reg_mr reg = registration(m, withVariant(mr, 1));
    const char *token = "wqe-fast-reg";
    SECTION("registering a valid region again") {
        p.b.postRegMr(1, reg);
        REQUIRE(completionOf(p, p.b).status == PIB_WC_SUCCESS);
        reg.key = withVariant(mr, 2);
    }
    SECTION("a page list entry that is not page aligned") {
        p.b.host.poke(m.list + 8, m.pages[1] + 8);
    }
    SECTION("a page list the device cannot read") {
        reg.page_list = 0x10;
    }
    SECTION("more pages than the region reserved") {
        reg.length += 8192;
        reg.page_count += 2;
    }
    SECTION("page_count that is not the pages the range spans") {
        reg.page_count = 2;
    }
    SECTION("the key of a region that is not a fast-registration one") {
        reg.key = p.b.key;
    }
    SECTION("a region of another PD") {
        const auto pd = p.b.host.command(PIB_CMD_ALLOC_PD);
        reg.key = withVariant(p.b.createFastRegMr(kPages, static_cast<uint32_t>(pd.result)), 1);
    }
    SECTION("remote write without local write") {
        reg.access = PIB_ACCESS_REMOTE_WRITE;
    }
    SECTION("LOCAL_INV of a region that is not a fast-registration one") {
        token = "wqe-invalidate";
    }
    SECTION("LOCAL_INV of a free region") {
        token = "wqe-invalidate";
        reg.key = withVariant(mr, 0);
    }
    if (std::string(token) == "wqe-invalidate")
        p.b.postLocalInv(9, reg.key == withVariant(mr, 1) ? p.b.key : reg.key);
    else
        p.b.postRegMr(9, reg);
    p.wire.run();
    const auto done = p.b.poll();
    REQUIRE(!done.empty());
    CHECK(done[0].wr_id == 9);
    CHECK(done[0].status == PIB_WC_LOC_PROT_ERR);
    CHECK(p.b.host.guestErrors(token) == 1);
    CHECK(p.b.qpState() == PIB_QPS_ERR);
}

TEST_CASE("fast-registration MRs: what CREATE_MR and WRITE_MTT refuse", "[memkeys]") {
    Node n(PIB_QPT_RC, 0x11);
    const auto mtt = n.host.command(PIB_CMD_ALLOC_MTT, 0, 600);
    REQUIRE(mtt.status == PIB_CMD_STATUS_OK);
    pib_mr_context c{};
    c.pdn = n.pd;
    c.flags = PIB_MR_FAST_REG;
    c.mtt_index = static_cast<uint32_t>(mtt.result);
    c.mtt_count = 600; // beyond max_fast_reg_pages
    CHECK(n.host.commandIn(PIB_CMD_CREATE_MR, 0, c).status == PIB_CMD_STATUS_BAD_PARAM);
    c.mtt_count = 512;
    c.access = PIB_ACCESS_LOCAL_WRITE; // given by each REG_MR, not here
    CHECK(n.host.commandIn(PIB_CMD_CREATE_MR, 0, c).status == PIB_CMD_STATUS_BAD_PARAM);
    c.access = 0;
    c.flags |= PIB_MR_PHYSICAL;
    CHECK(n.host.commandIn(PIB_CMD_CREATE_MR, 0, c).status == PIB_CMD_STATUS_BAD_PARAM);
    c.flags = PIB_MR_FAST_REG;
    const auto mr = n.host.commandIn(PIB_CMD_CREATE_MR, 0, c);
    REQUIRE(mr.status == PIB_CMD_STATUS_OK);
    // The device writes these entries; the guest may not.
    pib_mtt_write w{};
    w.count = 1;
    w.entries[0] = n.host.alloc(4096);
    CHECK(n.host.commandIn(PIB_CMD_WRITE_MTT, c.mtt_index + 3, w).status ==
          PIB_CMD_STATUS_BAD_STATE);
    pib_dev_cap cap{};
    REQUIRE(n.host.commandOut(PIB_CMD_QUERY_DEV_CAP, 0, &cap).status == PIB_CMD_STATUS_OK);
    CHECK(cap.device_cap_flags & PIB_DEV_CAP_MEM_MGT_EXTENSIONS);
    CHECK(cap.max_fast_reg_pages == 512);
    // Once the MR is gone the range is the guest's again.
    CHECK(n.host.command(PIB_CMD_DESTROY_MR, static_cast<uint32_t>(mr.result)).status ==
          PIB_CMD_STATUS_OK);
    CHECK(n.host.commandIn(PIB_CMD_WRITE_MTT, c.mtt_index + 3, w).status == PIB_CMD_STATUS_OK);
}

TEST_CASE("a local operation waits for the WQEs before it: a resend never meets its "
          "invalidation",
          "[rc][memkeys]") {
    Pair p;
    // a's own fast-registration MR is the source of a WRITE that is lost
    // once; the LOCAL_INV posted behind it must wait for the resend.
    const Mapping m(p.a);
    const uint32_t key = withVariant(p.a.createFastRegMr(kPages), 9);
    const uint64_t remote = p.b.host.alloc(8192);
    for (uint32_t i = 0; i < 1000; ++i)
        *p.a.host.at(m.physical(kIova + i)) = static_cast<uint8_t>(i * 13);
    int dropped = 0;
    p.wire.filter = [&](bool fromA, iba::Packet &k) {
        return !(fromA && k.bth.opcode == iba::kWriteOnly && dropped++ == 0);
    };
    p.a.postRegMr(1, registration(m, key));
    p.a.postSend(2, {.opcode = PIB_WR_RDMA_WRITE,
                     .local = kIova,
                     .length = 1000,
                     .remote = remote,
                     .lkey = key});
    p.a.postLocalInv(3, key);
    p.wire.run();
    p.wire.advance(50'000'000);
    const auto done = p.a.poll();
    REQUIRE(done.size() == 3);
    for (int i = 0; i < 3; ++i) {
        CHECK(done[i].wr_id == uint64_t(i + 1));
        CHECK(done[i].status == PIB_WC_SUCCESS);
    }
    CHECK(dropped >= 2); // the WRITE went twice
    for (uint32_t i = 0; i < 1000; ++i)
        REQUIRE(*p.b.host.at(remote + i) == static_cast<uint8_t>(i * 13));
}

// Audit finding 5 (issue 27): local operations are work like packets. A
// doorbell for a thousand REG_MR and LOCAL_INV WQEs runs at most one
// event's budget of them inside the MMIO write; the rest go on from the
// host's bottom half (runScheduled), in order, each completing once.
TEST_CASE("REG_MR and LOCAL_INV WQEs count against the work budget of an event",
          "[rc][memkeys][budget]") {
    Pair p;
    Node &b = p.b;
    b.logSq = 10;
    b.createQp(PIB_QPT_RC);
    b.connect(p.a, PIB_QPT_RC, {});
    const Mapping m(b);
    const uint32_t mr = b.createFastRegMr(kPages);
    constexpr uint32_t kWqes = 1000;
    b.deferDoorbell = true;
    b.runAfterDoorbell = false; // the doorbell's own event, then each run
    for (uint32_t i = 0; i < kWqes; i += 2) {
        const uint32_t key = withVariant(mr, static_cast<uint8_t>(i / 2));
        b.postRegMr(i, registration(m, key));
        b.postLocalInv(i + 1, key);
    }
    b.ring(PIB_DB_SQ, b.sqPi);
    const auto first = b.poll();
    CHECK(first.size() <= limits::kPacketsPerEvent);
    CHECK(!first.empty());
    std::vector<pib_cqe> all = first;
    for (int round = 0; round < 100 && all.size() < kWqes; ++round) {
        b.host.runScheduled();
        const auto more = b.poll();
        CHECK(more.size() <= limits::kPacketsPerEvent);
        all.insert(all.end(), more.begin(), more.end());
    }
    REQUIRE(all.size() == kWqes);
    for (uint32_t i = 0; i < kWqes; ++i) {
        CHECK(all[i].wr_id == i);
        CHECK(all[i].status == PIB_WC_SUCCESS);
    }
}
