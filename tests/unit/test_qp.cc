// SPDX-License-Identifier: GPL-2.0-or-later
// Queue pairs: creation checks and the IBA state machine.
#include <catch2/catch.hpp>

#include "fake_host.hh"
#include "object_table.hh"

namespace {

struct QpFixture {
    FakeHost host;
    uint32_t uar = 0, pd = 0, eqn = 0, cqn = 0;

    QpFixture() {
        host.initHca();
        uar = static_cast<uint32_t>(host.command(PIB_CMD_ALLOC_UAR).result);
        pd = static_cast<uint32_t>(host.command(PIB_CMD_ALLOC_PD).result);
        eqn = host.createEq(4, PIB_EQ_ASYNC).eqn;
        cqn = host.createCq(eqn, uar, 6).cqn;
    }

    pib_qp_context context(uint8_t type) {
        pib_qp_context c{};
        c.type = type;
        c.pdn = pd;
        c.send_cqn = cqn;
        c.recv_cqn = cqn;
        c.uar_page = uar;
        c.port = 1;
        c.sq_log_wqe_count = 6;
        c.sq_log_wqe_stride = 6;
        c.rq_log_wqe_count = 6;
        c.rq_log_wqe_stride = 6;
        c.sq_buf = host.ring(1);
        c.rq_buf = host.ring(1);
        return c;
    }

    uint32_t create(uint8_t type) {
        const auto r = host.commandIn(PIB_CMD_CREATE_QP, 0, context(type));
        REQUIRE(r.status == PIB_CMD_STATUS_OK);
        return static_cast<uint32_t>(r.result);
    }

    uint32_t modify(uint32_t qpn, pib_qp_attr attr) {
        return host.commandIn(PIB_CMD_MODIFY_QP, qpn, attr).status;
    }

    pib_qp_attr query(uint32_t qpn) {
        pib_qp_attr a;
        REQUIRE(host.commandOut(PIB_CMD_QUERY_QP, qpn, &a).status == PIB_CMD_STATUS_OK);
        return a;
    }
};

pib_qp_attr toInit(uint32_t extra = 0) {
    pib_qp_attr a{};
    a.attr_mask = PIB_QP_STATE | PIB_QP_PKEY_INDEX | PIB_QP_PORT | PIB_QP_ACCESS_FLAGS | extra;
    a.qp_state = PIB_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = PIB_ACCESS_REMOTE_WRITE;
    return a;
}

pib_qp_attr toRtr() {
    pib_qp_attr a{};
    a.attr_mask = PIB_QP_STATE | PIB_QP_AV | PIB_QP_PATH_MTU | PIB_QP_DEST_QPN | PIB_QP_RQ_PSN |
                  PIB_QP_MAX_DEST_RD_ATOMIC | PIB_QP_MIN_RNR_TIMER;
    a.qp_state = PIB_QPS_RTR;
    a.path_mtu = PIB_MTU_4096;
    a.dest_qp_num = 0x123;
    a.rq_psn = 0xabcdef;
    a.max_dest_rd_atomic = 4;
    a.min_rnr_timer = 12;
    a.av.dlid = 7;
    a.av.sl = 3;
    return a;
}

pib_qp_attr toRts() {
    pib_qp_attr a{};
    a.attr_mask = PIB_QP_STATE | PIB_QP_TIMEOUT | PIB_QP_RETRY_CNT | PIB_QP_RNR_RETRY |
                  PIB_QP_SQ_PSN | PIB_QP_MAX_QP_RD_ATOMIC;
    a.qp_state = PIB_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0x10;
    a.max_rd_atomic = 2;
    return a;
}

} // namespace

TEST_CASE("an RC QP walks RESET -> INIT -> RTR -> RTS -> SQD -> RTS -> ERR -> RESET", "[qp]") {
    QpFixture f;
    const uint32_t qpn = f.create(PIB_QPT_RC);
    CHECK(qpn >= PIB_FIRST_QPN);
    CHECK(f.query(qpn).qp_state == PIB_QPS_RESET);
    REQUIRE(f.modify(qpn, toInit()) == PIB_CMD_STATUS_OK);
    REQUIRE(f.modify(qpn, toRtr()) == PIB_CMD_STATUS_OK);
    REQUIRE(f.modify(qpn, toRts()) == PIB_CMD_STATUS_OK);
    auto a = f.query(qpn);
    CHECK(a.qp_state == PIB_QPS_RTS);
    CHECK(a.path_mtu == PIB_MTU_4096);
    CHECK(a.dest_qp_num == 0x123);
    CHECK(a.rq_psn == 0xabcdef);
    CHECK(a.sq_psn == 0x10);
    CHECK(a.av.dlid == 7);
    CHECK(a.av.sl == 3);
    CHECK(a.max_rd_atomic == 2);
    CHECK(a.qp_access_flags == PIB_ACCESS_REMOTE_WRITE);

    // SQD with notification raises SQ_DRAINED on the async EQ.
    pib_qp_attr sqd{};
    sqd.attr_mask = PIB_QP_STATE | PIB_QP_EN_SQD_ASYNC_NOTIFY;
    sqd.qp_state = PIB_QPS_SQD;
    sqd.en_sqd_async_notify = 1;
    f.host.write32(PIB_BAR_REGS, PIB_REG_EQ_DB(f.eqn) + PIB_EQ_DB_ARM, 0);
    REQUIRE(f.modify(qpn, sqd) == PIB_CMD_STATUS_OK);
    CHECK(f.host.interrupts.size() == 1);

    pib_qp_attr back{};
    back.attr_mask = PIB_QP_STATE | PIB_QP_CUR_STATE;
    back.qp_state = PIB_QPS_RTS;
    back.cur_qp_state = PIB_QPS_SQD;
    REQUIRE(f.modify(qpn, back) == PIB_CMD_STATUS_OK);
    pib_qp_attr err{};
    err.attr_mask = PIB_QP_STATE;
    err.qp_state = PIB_QPS_ERR;
    REQUIRE(f.modify(qpn, err) == PIB_CMD_STATUS_OK);
    err.qp_state = PIB_QPS_RESET;
    REQUIRE(f.modify(qpn, err) == PIB_CMD_STATUS_OK);
    a = f.query(qpn);
    CHECK(a.qp_state == PIB_QPS_RESET);
    CHECK(a.dest_qp_num == 0);
}

TEST_CASE("transitions the state machine forbids are refused", "[qp]") {
    QpFixture f;
    const uint32_t qpn = f.create(PIB_QPT_RC);
    CHECK(f.modify(qpn, toRts()) == PIB_CMD_STATUS_BAD_TRANSITION); // RESET -> RTS
    CHECK(f.modify(qpn, toRtr()) == PIB_CMD_STATUS_BAD_TRANSITION); // RESET -> RTR
    CHECK(f.host.guestErrors("cmd-bad-transition") == 2);
    REQUIRE(f.modify(qpn, toInit()) == PIB_CMD_STATUS_OK);
    CHECK(f.modify(qpn, toRts()) == PIB_CMD_STATUS_BAD_TRANSITION); // INIT -> RTS
    CHECK(f.query(qpn).qp_state == PIB_QPS_INIT);
}

TEST_CASE("attribute masks must fit the transition", "[qp]") {
    QpFixture f;
    const uint32_t qpn = f.create(PIB_QPT_RC);
    auto missing = toInit();
    missing.attr_mask &= ~PIB_QP_ACCESS_FLAGS; // required for RC
    CHECK(f.modify(qpn, missing) == PIB_CMD_STATUS_BAD_MASK);
    CHECK(f.modify(qpn, toInit(PIB_QP_QKEY)) == PIB_CMD_STATUS_BAD_MASK); // not for RC
    CHECK(f.modify(qpn, toInit(PIB_QP_CUR_STATE)) == PIB_CMD_STATUS_BAD_MASK);
    CHECK(f.host.guestErrors("cmd-bad-mask") == 3);
    REQUIRE(f.modify(qpn, toInit()) == PIB_CMD_STATUS_OK);
    auto rtr = toRtr();
    rtr.attr_mask &= ~PIB_QP_MIN_RNR_TIMER;
    CHECK(f.modify(qpn, rtr) == PIB_CMD_STATUS_BAD_MASK);
    // A modify without STATE stays in the state: INIT -> INIT.
    pib_qp_attr same{};
    same.attr_mask = PIB_QP_PKEY_INDEX;
    same.pkey_index = 1;
    CHECK(f.modify(qpn, same) == PIB_CMD_STATUS_OK);
    CHECK(f.query(qpn).pkey_index == 1);
}

TEST_CASE("attribute values are checked", "[qp]") {
    QpFixture f;
    const uint32_t qpn = f.create(PIB_QPT_RC);
    auto init = toInit();
    init.port_num = 2;
    CHECK(f.modify(qpn, init) == PIB_CMD_STATUS_BAD_PARAM);
    init = toInit();
    init.pkey_index = PIB_PKEY_TABLE_LEN;
    CHECK(f.modify(qpn, init) == PIB_CMD_STATUS_BAD_PARAM);
    REQUIRE(f.modify(qpn, toInit()) == PIB_CMD_STATUS_OK);
    auto rtr = toRtr();
    SECTION("path MTU") {
        rtr.path_mtu = 6;
    }
    SECTION("PSN") {
        rtr.rq_psn = 1u << 24;
    }
    SECTION("destination QPN") {
        rtr.dest_qp_num = 1u << 24;
    }
    SECTION("responder resources") {
        rtr.max_dest_rd_atomic = 17;
    }
    SECTION("RNR timer") {
        rtr.min_rnr_timer = 32;
    }
    SECTION("SL") {
        rtr.av.sl = 16;
    }
    SECTION("GID index") {
        rtr.av.flags = PIB_AV_GRH;
        rtr.av.sgid_index = PIB_GUID_TABLE_LEN;
    }
    SECTION("alternate path") {
        rtr.attr_mask |= PIB_QP_ALT_PATH;
    }
    CHECK(f.modify(qpn, rtr) == PIB_CMD_STATUS_BAD_PARAM);
    CHECK(f.query(qpn).qp_state == PIB_QPS_INIT);
}

TEST_CASE("a wrong current state is refused", "[qp]") {
    QpFixture f;
    const uint32_t qpn = f.create(PIB_QPT_RC);
    f.modify(qpn, toInit());
    f.modify(qpn, toRtr());
    auto rts = toRts();
    rts.attr_mask |= PIB_QP_CUR_STATE;
    rts.cur_qp_state = PIB_QPS_INIT;
    CHECK(f.modify(qpn, rts) == PIB_CMD_STATUS_BAD_STATE);
    rts.cur_qp_state = PIB_QPS_RTR;
    CHECK(f.modify(qpn, rts) == PIB_CMD_STATUS_OK);
}

TEST_CASE("UD and special QPs take a Q_Key and no connection", "[qp]") {
    QpFixture f;
    const uint32_t ud = f.create(PIB_QPT_UD);
    pib_qp_attr a{};
    a.attr_mask = PIB_QP_STATE | PIB_QP_PKEY_INDEX | PIB_QP_PORT | PIB_QP_QKEY;
    a.qp_state = PIB_QPS_INIT;
    a.port_num = 1;
    a.qkey = 0x11111111;
    REQUIRE(f.modify(ud, a) == PIB_CMD_STATUS_OK);
    a = {};
    a.attr_mask = PIB_QP_STATE;
    a.qp_state = PIB_QPS_RTR;
    REQUIRE(f.modify(ud, a) == PIB_CMD_STATUS_OK);
    a.attr_mask = PIB_QP_STATE | PIB_QP_SQ_PSN;
    a.qp_state = PIB_QPS_RTS;
    REQUIRE(f.modify(ud, a) == PIB_CMD_STATUS_OK);
    CHECK(f.query(ud).qkey == 0x11111111);

    const auto gsi = f.host.commandIn(PIB_CMD_CREATE_QP, 0, f.context(PIB_QPT_GSI));
    REQUIRE(gsi.status == PIB_CMD_STATUS_OK);
    CHECK(gsi.result == PIB_SPECIAL_QPN(1, PIB_QPT_GSI));
    CHECK(f.host.commandIn(PIB_CMD_CREATE_QP, 0, f.context(PIB_QPT_GSI)).status ==
          PIB_CMD_STATUS_BAD_STATE);
    auto smi = f.context(PIB_QPT_SMI);
    smi.port = 2;
    CHECK(f.host.commandIn(PIB_CMD_CREATE_QP, 0, smi).status == PIB_CMD_STATUS_BAD_PARAM);
    a = {};
    a.attr_mask = PIB_QP_STATE | PIB_QP_PKEY_INDEX | PIB_QP_QKEY;
    a.qp_state = PIB_QPS_INIT;
    a.qkey = 0x80010000;
    CHECK(f.modify(static_cast<uint32_t>(gsi.result), a) == PIB_CMD_STATUS_OK);
    CHECK(f.query(static_cast<uint32_t>(gsi.result)).port_num == 1);
}

TEST_CASE("QP creation checks its objects and rings; destroy releases them", "[qp]") {
    QpFixture f;
    auto ctx = f.context(PIB_QPT_RC);
    SECTION("bad objects") {
        auto bad = ctx;
        bad.pdn = 999;
        CHECK(f.host.commandIn(PIB_CMD_CREATE_QP, 0, bad).status == PIB_CMD_STATUS_BAD_INDEX);
        bad = ctx;
        bad.recv_cqn = 999;
        CHECK(f.host.commandIn(PIB_CMD_CREATE_QP, 0, bad).status == PIB_CMD_STATUS_BAD_INDEX);
        bad = ctx;
        bad.flags = PIB_QP_USE_SRQ;
        bad.srqn = 5;
        CHECK(f.host.commandIn(PIB_CMD_CREATE_QP, 0, bad).status == PIB_CMD_STATUS_BAD_INDEX);
        bad = ctx;
        bad.type = 9;
        CHECK(f.host.commandIn(PIB_CMD_CREATE_QP, 0, bad).status == PIB_CMD_STATUS_BAD_PARAM);
        bad = ctx;
        bad.sq_log_wqe_count = 15;
        CHECK(f.host.commandIn(PIB_CMD_CREATE_QP, 0, bad).status == PIB_CMD_STATUS_BAD_PARAM);
        bad = ctx;
        bad.rq_log_wqe_stride = 5;
        CHECK(f.host.commandIn(PIB_CMD_CREATE_QP, 0, bad).status == PIB_CMD_STATUS_BAD_PARAM);
        bad = ctx;
        bad.sq_log_wqe_count = 7; // needs two pages
        CHECK(f.host.commandIn(PIB_CMD_CREATE_QP, 0, bad).status == PIB_CMD_STATUS_BAD_PARAM);
    }
    SECTION("references") {
        const auto qp = f.host.commandIn(PIB_CMD_CREATE_QP, 0, ctx);
        REQUIRE(qp.status == PIB_CMD_STATUS_OK);
        CHECK(f.host.command(PIB_CMD_DESTROY_CQ, f.cqn).status == PIB_CMD_STATUS_BUSY);
        CHECK(f.host.command(PIB_CMD_DEALLOC_PD, f.pd).status == PIB_CMD_STATUS_BUSY);
        CHECK(f.host.command(PIB_CMD_DESTROY_QP, static_cast<uint32_t>(qp.result)).status ==
              PIB_CMD_STATUS_OK);
        CHECK(f.host.command(PIB_CMD_DESTROY_QP, static_cast<uint32_t>(qp.result)).status ==
              PIB_CMD_STATUS_BAD_INDEX);
        CHECK(f.host.command(PIB_CMD_DESTROY_CQ, f.cqn).status == PIB_CMD_STATUS_OK);
        CHECK(f.host.command(PIB_CMD_DEALLOC_PD, f.pd).status == PIB_CMD_STATUS_OK);
    }
}

TEST_CASE("queue doorbells are checked against their page, object and ring", "[qp][doorbell]") {
    QpFixture f;
    const uint32_t qpn = f.create(PIB_QPT_RC);
    const uint64_t page = uint64_t{f.uar} * PIB_PAGE_SIZE;
    auto ring = [&](uint64_t offset, uint32_t number, uint32_t value) {
        pib_core_bar_write(f.host.core, PIB_BAR_DOORBELL, page + offset,
                           uint64_t{value} << 32 | number, 8);
    };
    ring(PIB_DB_SQ, qpn, 3);
    ring(PIB_DB_RQ, qpn, 64); // a full ring is fine
    ring(PIB_DB_CQ_ARM, f.cqn, PIB_CQ_ARM_NEXT);
    CHECK(f.host.guestErrors() == 0);

    ring(PIB_DB_RQ, qpn, 200); // more than a ring ahead
    ring(PIB_DB_SQ, qpn, 2);   // backwards
    CHECK(f.host.guestErrors("doorbell-bad-index") == 2);
    ring(PIB_DB_SQ, 999, 1);
    ring(PIB_DB_SRQ, 5, 1);
    ring(PIB_DB_CQ_ARM, 77, PIB_CQ_ARM_NEXT);
    CHECK(f.host.guestErrors("doorbell-bad-object") == 3);
    ring(PIB_DB_CQ_ARM, f.cqn, 9);
    CHECK(f.host.guestErrors("doorbell-bad-arm") == 1);
    ring(0x20, qpn, 1);
    CHECK(f.host.guestErrors("doorbell-bad-offset") == 1);

    // Another context's page cannot ring this QP.
    const auto other = f.host.command(PIB_CMD_ALLOC_UAR);
    pib_core_bar_write(f.host.core, PIB_BAR_DOORBELL, other.result * PIB_PAGE_SIZE + PIB_DB_SQ,
                       uint64_t{4} << 32 | qpn, 8);
    CHECK(f.host.guestErrors("doorbell-bad-object") == 4);
}

// Packets still on their way to a destroyed QP (a peer's resends, the
// fabric's duplicates) must not reach the next QP created: a program that
// connects again with the same PSNs would take them for its own. So a QP
// number is given again only after every other one has been.
TEST_CASE("a destroyed QP's number is the last to be given again", "[qp]") {
    QpFixture f;
    const auto ctx = f.context(PIB_QPT_RC);
    const auto create = [&] {
        const auto qp = f.host.commandIn(PIB_CMD_CREATE_QP, 0, ctx);
        REQUIRE(qp.status == PIB_CMD_STATUS_OK);
        return static_cast<uint32_t>(qp.result);
    };
    const uint32_t first = create();
    REQUIRE(f.host.command(PIB_CMD_DESTROY_QP, first).status == PIB_CMD_STATUS_OK);
    const uint32_t second = create();
    CHECK(second != first);
    REQUIRE(f.host.command(PIB_CMD_DESTROY_QP, second).status == PIB_CMD_STATUS_OK);
    CHECK(create() != second);
}

TEST_CASE("rotating numbers wrap around to the lowest free one", "[objects]") {
    pib::ObjectTable<int> t(4, 16, pib::Numbering::kRotating);
    const auto add = [&] { return t.insert(std::make_unique<int>(0)); };
    CHECK(add() == 16u);
    CHECK(add() == 17u);
    REQUIRE(t.erase(16));
    CHECK(add() == 18u); // not 16: it was given last
    REQUIRE(t.erase(17));
    CHECK(add() == 19u);
    CHECK(add() == 16u); // every number was given: the lowest free one
    CHECK(add() == 17u);
    CHECK(add() == std::nullopt); // full
    pib::ObjectTable<int> lowest(4, 16);
    CHECK(lowest.insert(std::make_unique<int>(0)) == 16u);
    REQUIRE(lowest.erase(16));
    CHECK(lowest.insert(std::make_unique<int>(0)) == 16u);
}
