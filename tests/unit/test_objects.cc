// SPDX-License-Identifier: GPL-2.0-or-later
// Event queues, completion queues, memory regions and SRQs.
#include <catch2/catch.hpp>

#include "fake_host.hh"

namespace {

struct Objects {
    FakeHost host;
    uint32_t uar = 0, pd = 0;

    Objects() {
        host.initHca();
        uar = static_cast<uint32_t>(host.command(PIB_CMD_ALLOC_UAR).result);
        pd = static_cast<uint32_t>(host.command(PIB_CMD_ALLOC_PD).result);
    }

    pib_eq_context eqContext(uint16_t flags = PIB_EQ_ASYNC, uint32_t log_size = 4) {
        pib_eq_context c{};
        c.buf = host.ring(1);
        c.log_size = log_size;
        c.msix_vector = 2;
        c.flags = flags;
        return c;
    }

    pib_cq_context cqContext(uint32_t eqn) {
        pib_cq_context c{};
        c.buf = host.ring(1);
        c.log_size = 6; // 64 CQEs of 64 bytes: one page
        c.eqn = eqn;
        c.uar_page = uar;
        c.ci_record = host.alloc(64, 64);
        return c;
    }
};

} // namespace

TEST_CASE("event queues are validated and deliver command completions", "[eq]") {
    Objects o;
    auto ctx = o.eqContext();
    SECTION("bad contexts are refused") {
        auto bad = ctx;
        bad.log_size = 0;
        CHECK(o.host.commandIn(PIB_CMD_CREATE_EQ, 0, bad).status == PIB_CMD_STATUS_BAD_PARAM);
        bad = ctx;
        bad.msix_vector = 8;
        CHECK(o.host.commandIn(PIB_CMD_CREATE_EQ, 0, bad).status == PIB_CMD_STATUS_BAD_PARAM);
        bad = ctx;
        bad.log_size = 8; // 256 EQEs need two pages
        CHECK(o.host.commandIn(PIB_CMD_CREATE_EQ, 0, bad).status == PIB_CMD_STATUS_BAD_PARAM);
        CHECK(o.host.guestErrors("cmd-bad-ring") == 1);
        bad = ctx;
        bad.buf.mtt_index = 9999;
        CHECK(o.host.commandIn(PIB_CMD_CREATE_EQ, 0, bad).status == PIB_CMD_STATUS_BAD_PARAM);
    }
    SECTION("a command with EVENT but no async EQ is refused, not run") {
        const auto pds = o.host.command(PIB_CMD_ALLOC_PD);
        REQUIRE(pds.status == PIB_CMD_STATUS_OK);
        CHECK(o.host.command(PIB_CMD_ALLOC_PD, 0, 0, 0, PIB_CMD_CTRL_EVENT).status ==
              PIB_CMD_STATUS_BAD_STATE);
        CHECK(o.host.guestErrors("cmd-no-async-eq") == 1);
        CHECK(o.host.command(PIB_CMD_ALLOC_PD).result == pds.result + 1); // none was allocated
    }
    SECTION("a command with EVENT posts an EQE and interrupts when armed") {
        const auto eq = o.host.commandIn(PIB_CMD_CREATE_EQ, 0, ctx);
        REQUIRE(eq.status == PIB_CMD_STATUS_OK);
        const auto eqn = static_cast<uint32_t>(eq.result);
        CHECK(o.host.commandIn(PIB_CMD_CREATE_EQ, 0, o.eqContext()).status ==
              PIB_CMD_STATUS_BAD_STATE); // one async EQ only
        o.host.write32(PIB_BAR_REGS, PIB_REG_EQ_DB(eqn) + PIB_EQ_DB_ARM, 0);
        o.host.write32(PIB_BAR_REGS, PIB_REG_CMD_TOKEN, 0xbeef);
        CHECK(o.host.command(PIB_CMD_ALLOC_PD, 0, 0, 0, PIB_CMD_CTRL_EVENT).status ==
              PIB_CMD_STATUS_OK);
        CHECK(o.host.interrupts == std::vector<unsigned>{2});
        pib_eq_context q;
        REQUIRE(o.host.commandOut(PIB_CMD_QUERY_EQ, eqn, &q).status == PIB_CMD_STATUS_OK);
        CHECK(q.log_size == 4);
        CHECK(q.msix_vector == 2);
    }
}

TEST_CASE("EQEs carry the phase bit and the EQ overruns safely", "[eq]") {
    Objects o;
    auto ctx = o.eqContext(PIB_EQ_ASYNC, 1); // two slots
    pib_mtt_write w{};
    const uint64_t page = o.host.alloc(PIB_PAGE_SIZE);
    w.count = 1;
    w.entries[0] = page;
    REQUIRE(o.host.commandIn(PIB_CMD_WRITE_MTT, ctx.buf.mtt_index, w).status == PIB_CMD_STATUS_OK);
    const auto eqn = static_cast<uint32_t>(o.host.commandIn(PIB_CMD_CREATE_EQ, 0, ctx).result);

    o.host.write32(PIB_BAR_REGS, PIB_REG_CMD_TOKEN, 0x1111);
    o.host.command(PIB_CMD_ALLOC_PD, 0, 0, 0, PIB_CMD_CTRL_EVENT);
    auto eqe = o.host.peek<pib_eqe>(page);
    CHECK(eqe.type == PIB_EQE_COMMAND);
    CHECK(eqe.flags & PIB_EQE_PHASE);
    CHECK(eqe.data.cmd.token == 0x1111);
    CHECK(eqe.data.cmd.status == PIB_CMD_STATUS_OK);
    CHECK(o.host.interrupts.empty()); // not armed

    o.host.command(PIB_CMD_ALLOC_PD, 0, 0, 0, PIB_CMD_CTRL_EVENT);
    o.host.command(PIB_CMD_ALLOC_PD, 0, 0, 0, PIB_CMD_CTRL_EVENT); // overrun
    CHECK(o.host.guestErrors("eq-overrun") == 1);
    // Consuming both and arming lets the next event through, phase flipped.
    o.host.write32(PIB_BAR_REGS, PIB_REG_EQ_DB(eqn) + PIB_EQ_DB_ARM, 2);
    CHECK(o.host.interrupts.empty());
    o.host.write32(PIB_BAR_REGS, PIB_REG_CMD_TOKEN, 0x2222);
    o.host.command(PIB_CMD_ALLOC_PD, 0, 0, 0, PIB_CMD_CTRL_EVENT);
    eqe = o.host.peek<pib_eqe>(page);
    CHECK(!(eqe.flags & PIB_EQE_PHASE));
    CHECK(eqe.data.cmd.token == 0x2222);
    CHECK(o.host.interrupts == std::vector<unsigned>{2});
    // A consumer index beyond the producer is refused.
    o.host.write32(PIB_BAR_REGS, PIB_REG_EQ_DB(eqn) + PIB_EQ_DB_CI, 100);
    CHECK(o.host.guestErrors("eq-db-bad-ci") == 1);
    o.host.write32(PIB_BAR_REGS, PIB_REG_EQ_DB(31) + PIB_EQ_DB_CI, 0);
    CHECK(o.host.guestErrors("eq-db-bad-index") == 1);
}

TEST_CASE("completion queues hold their EQ and doorbell page", "[cq]") {
    Objects o;
    const auto eqn =
        static_cast<uint32_t>(o.host.commandIn(PIB_CMD_CREATE_EQ, 0, o.eqContext()).result);
    auto ctx = o.cqContext(eqn);
    SECTION("bad contexts are refused") {
        auto bad = ctx;
        bad.eqn = 7;
        CHECK(o.host.commandIn(PIB_CMD_CREATE_CQ, 0, bad).status == PIB_CMD_STATUS_BAD_INDEX);
        bad = ctx;
        bad.uar_page = 9;
        CHECK(o.host.commandIn(PIB_CMD_CREATE_CQ, 0, bad).status == PIB_CMD_STATUS_BAD_INDEX);
        bad = ctx;
        bad.ci_record = 2;
        CHECK(o.host.commandIn(PIB_CMD_CREATE_CQ, 0, bad).status == PIB_CMD_STATUS_BAD_PARAM);
        bad = ctx;
        bad.log_size = 17;
        CHECK(o.host.commandIn(PIB_CMD_CREATE_CQ, 0, bad).status == PIB_CMD_STATUS_BAD_PARAM);
    }
    SECTION("a live CQ pins its EQ and doorbell page") {
        const auto cq = o.host.commandIn(PIB_CMD_CREATE_CQ, 0, ctx);
        REQUIRE(cq.status == PIB_CMD_STATUS_OK);
        CHECK(o.host.command(PIB_CMD_DESTROY_EQ, eqn).status == PIB_CMD_STATUS_BUSY);
        CHECK(o.host.command(PIB_CMD_FREE_UAR, o.uar).status == PIB_CMD_STATUS_BUSY);
        CHECK(o.host.command(PIB_CMD_FREE_MTT, ctx.buf.mtt_index).status == PIB_CMD_STATUS_BUSY);
        pib_cq_context q;
        REQUIRE(o.host.commandOut(PIB_CMD_QUERY_CQ, static_cast<uint32_t>(cq.result), &q).status ==
                PIB_CMD_STATUS_OK);
        CHECK(q.log_size == 6);
        CHECK(q.ci_record == ctx.ci_record);
        CHECK(o.host.command(PIB_CMD_DESTROY_CQ, static_cast<uint32_t>(cq.result)).status ==
              PIB_CMD_STATUS_OK);
        CHECK(o.host.command(PIB_CMD_DESTROY_EQ, eqn).status == PIB_CMD_STATUS_OK);
        CHECK(o.host.command(PIB_CMD_FREE_UAR, o.uar).status == PIB_CMD_STATUS_OK);
    }
}

TEST_CASE("memory regions", "[mr]") {
    Objects o;
    pib_mr_context mr{};
    mr.pdn = o.pd;
    mr.access = PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_READ;
    SECTION("physical (DMA) MR") {
        mr.flags = PIB_MR_PHYSICAL;
        mr.length = ~0ull;
        mr.key_variant = 0x5a;
        const auto r = o.host.commandIn(PIB_CMD_CREATE_MR, 0, mr);
        REQUIRE(r.status == PIB_CMD_STATUS_OK);
        CHECK((r.result & 0xff) == 0x5a);
        CHECK(r.result >> 8 >= 1);
        CHECK(o.host.command(PIB_CMD_DEALLOC_PD, o.pd).status == PIB_CMD_STATUS_BUSY);
        pib_mr_context q;
        CHECK(o.host.commandOut(PIB_CMD_QUERY_MR, static_cast<uint32_t>(r.result), &q).status ==
              PIB_CMD_STATUS_OK);
        CHECK(q.access == mr.access);
        // The wrong variant does not name the MR.
        CHECK(o.host.command(PIB_CMD_DESTROY_MR, static_cast<uint32_t>(r.result ^ 1)).status ==
              PIB_CMD_STATUS_BAD_INDEX);
        CHECK(o.host.command(PIB_CMD_DESTROY_MR, static_cast<uint32_t>(r.result)).status ==
              PIB_CMD_STATUS_OK);
        CHECK(o.host.command(PIB_CMD_DEALLOC_PD, o.pd).status == PIB_CMD_STATUS_OK);
    }
    SECTION("MR through the MTT") {
        const pib_buf_desc pages = o.host.ring(3);
        mr.iova = 0x7f0000001800; // starts mid-page: 3 pages for 0x2000 bytes
        mr.length = 0x2000;
        mr.log_page_size = 12;
        mr.mtt_index = pages.mtt_index;
        mr.mtt_count = 3;
        CHECK(o.host.commandIn(PIB_CMD_CREATE_MR, 0, mr).status == PIB_CMD_STATUS_OK);
        mr.mtt_count = 2;
        CHECK(o.host.commandIn(PIB_CMD_CREATE_MR, 0, mr).status == PIB_CMD_STATUS_BAD_PARAM);
        mr.mtt_count = 3;
        mr.log_page_size = 21; // the pages are not 2 MiB aligned
        mr.length = 0x600000;
        CHECK(o.host.commandIn(PIB_CMD_CREATE_MR, 0, mr).status == PIB_CMD_STATUS_BAD_PARAM);
    }
    SECTION("invalid access and PD") {
        mr.flags = PIB_MR_PHYSICAL;
        mr.access = PIB_ACCESS_REMOTE_WRITE; // without local write
        CHECK(o.host.commandIn(PIB_CMD_CREATE_MR, 0, mr).status == PIB_CMD_STATUS_BAD_PARAM);
        mr.access = 0x100;
        CHECK(o.host.commandIn(PIB_CMD_CREATE_MR, 0, mr).status == PIB_CMD_STATUS_BAD_PARAM);
        mr.access = 0;
        mr.pdn = 777;
        CHECK(o.host.commandIn(PIB_CMD_CREATE_MR, 0, mr).status == PIB_CMD_STATUS_BAD_INDEX);
    }
}

TEST_CASE("shared receive queues", "[srq]") {
    Objects o;
    pib_srq_context srq{};
    srq.pdn = o.pd;
    srq.uar_page = o.uar;
    srq.log_wqe_count = 6;
    srq.log_wqe_stride = 6; // 64 x 64 bytes: one page
    srq.buf = o.host.ring(1);
    srq.limit = 10;
    const auto r = o.host.commandIn(PIB_CMD_CREATE_SRQ, 0, srq);
    REQUIRE(r.status == PIB_CMD_STATUS_OK);
    const auto srqn = static_cast<uint32_t>(r.result);
    pib_srq_context q;
    REQUIRE(o.host.commandOut(PIB_CMD_QUERY_SRQ, srqn, &q).status == PIB_CMD_STATUS_OK);
    CHECK(q.limit == 10);
    CHECK(q.wqe_count == 0);
    CHECK(o.host.command(PIB_CMD_ARM_SRQ, srqn, 64).status == PIB_CMD_STATUS_BAD_PARAM);
    CHECK(o.host.command(PIB_CMD_ARM_SRQ, srqn, 5).status == PIB_CMD_STATUS_OK);
    o.host.commandOut(PIB_CMD_QUERY_SRQ, srqn, &q);
    CHECK(q.limit == 5);
    srq.log_wqe_stride = 12;
    CHECK(o.host.commandIn(PIB_CMD_CREATE_SRQ, 0, srq).status == PIB_CMD_STATUS_BAD_PARAM);
    CHECK(o.host.command(PIB_CMD_DESTROY_SRQ, srqn).status == PIB_CMD_STATUS_OK);
    CHECK(o.host.command(PIB_CMD_DESTROY_SRQ, srqn).status == PIB_CMD_STATUS_BAD_INDEX);
}
