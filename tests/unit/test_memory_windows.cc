// SPDX-License-Identifier: GPL-2.0-or-later
// Memory windows between two devices (docs/prm.md §6.7): type 1 bound,
// rebound and unbound; type 2 bound to one QP and invalidated locally or
// by the peer; the bind checks of IBA 10.6.7.2; and a region that stays
// while windows are bound to it.
#include <catch2/catch.hpp>

#include "connected_fixture.hh"

using namespace pib;
using namespace pib::testing;

namespace {

constexpr uint32_t kRemoteRw = PIB_ACCESS_REMOTE_READ | PIB_ACCESS_REMOTE_WRITE;

// A region over `bytes` of n's memory (by physical address) that windows
// may be bound to, and a window of `type` in the same PD.
struct Window {
    uint64_t base;
    uint32_t mrKey, mwKey;

    Window(Node &n, uint8_t type, uint32_t mrAccess = PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_MW_BIND)
        : base(n.host.alloc(16384)) {
        pib_mr_context mr{};
        mr.pdn = n.pd;
        mr.access = mrAccess;
        mr.flags = PIB_MR_PHYSICAL;
        mr.iova = base;
        mr.length = 16384;
        const auto created = n.host.commandIn(PIB_CMD_CREATE_MR, 0, mr);
        expect(created.status == PIB_CMD_STATUS_OK, "CREATE_MR");
        mrKey = static_cast<uint32_t>(created.result);
        pib_mw_context mw{};
        mw.pdn = n.pd;
        mw.type = type;
        mw.key_variant = 0x40;
        const auto window = n.host.commandIn(PIB_CMD_CREATE_MW, 0, mw);
        expect(window.status == PIB_CMD_STATUS_OK, "CREATE_MW");
        mwKey = static_cast<uint32_t>(window.result);
    }
    // A bind of [base + offset, + length) with the next variant.
    pib_wqe_bind_mw bind(uint64_t offset, uint64_t length, uint32_t access = kRemoteRw) {
        return {base + offset, length, mwKey, (mwKey & ~0xffu) | ((mwKey + 1) & 0xff),
                mrKey,         access};
    }
};

pib_cqe only(Pair &p, Node &n) {
    p.wire.run();
    auto done = n.poll();
    expect(done.size() == 1, "one completion");
    return done[0];
}

pib_mw_context query(Node &n, uint32_t key) {
    pib_mw_context c{};
    expect(n.host.commandOut(PIB_CMD_QUERY_MW, key, &c).status == PIB_CMD_STATUS_OK, "QUERY_MW");
    return c;
}

} // namespace

TEST_CASE("a type 1 window: bound, used, rebound elsewhere, unbound", "[rc][mw]") {
    Pair p;
    Window w(p.b, PIB_MW_TYPE_1);
    const uint64_t local = p.a.host.alloc(8192);
    p.a.fill(local, 2000, 7);
    const pib_wqe_bind_mw first = w.bind(4096, 4096);
    p.b.postBind(1, first);
    const pib_cqe bound = only(p, p.b);
    CHECK(bound.status == PIB_WC_SUCCESS);
    CHECK(bound.opcode == PIB_WC_BIND_MW);
    const pib_mw_context q = query(p.b, first.new_rkey);
    CHECK(q.bound == 1);
    CHECK(q.addr == w.base + 4096);
    CHECK(q.length == 4096);
    CHECK(q.mr_key == w.mrKey);
    CHECK(PIB_KEY_INDEX(first.new_rkey) > 65536); // above every MR
    // Through the window's R_Key, within its range: the region's pages.
    p.a.postSend(2, {.opcode = PIB_WR_RDMA_WRITE,
                     .local = local,
                     .length = 2000,
                     .remote = w.base + 5000,
                     .rkey = first.new_rkey});
    CHECK(only(p, p.a).status == PIB_WC_SUCCESS);
    CHECK(std::equal(p.a.host.at(local), p.a.host.at(local) + 2000, p.b.host.at(w.base + 5000)));
    // The region may not go while the window is bound.
    CHECK(p.b.host.command(PIB_CMD_DESTROY_MR, w.mrKey).status == PIB_CMD_STATUS_BUSY);
    // Bound again, elsewhere, under a new variant: the old key is dead.
    pib_wqe_bind_mw second = w.bind(0, 1024, PIB_ACCESS_REMOTE_READ);
    second.mw_key = first.new_rkey;
    second.new_rkey = (first.new_rkey & ~0xffu) | 0x77;
    p.b.postBind(3, second);
    CHECK(only(p, p.b).status == PIB_WC_SUCCESS);
    p.a.postSend(4, {.opcode = PIB_WR_RDMA_READ,
                     .local = local,
                     .length = 1024,
                     .remote = w.base,
                     .rkey = second.new_rkey});
    CHECK(only(p, p.a).status == PIB_WC_SUCCESS);
    // A bind of length 0 unbinds it; the region may go then.
    pib_wqe_bind_mw none = w.bind(0, 0);
    none.mw_key = second.new_rkey;
    p.b.postBind(5, none);
    CHECK(only(p, p.b).status == PIB_WC_SUCCESS);
    CHECK(query(p.b, none.new_rkey).bound == 0);
    SECTION("the old key after the rebind") {
        p.a.postSend(6, {.opcode = PIB_WR_RDMA_WRITE,
                         .local = local,
                         .length = 16,
                         .remote = w.base + 5000,
                         .rkey = first.new_rkey});
        CHECK(only(p, p.a).status == PIB_WC_REM_ACCESS_ERR);
    }
    SECTION("the region goes once no window is bound") {
        CHECK(p.b.host.command(PIB_CMD_DESTROY_MR, w.mrKey).status == PIB_CMD_STATUS_OK);
        CHECK(p.b.host.command(PIB_CMD_DESTROY_MW, none.new_rkey).status == PIB_CMD_STATUS_OK);
    }
}

TEST_CASE("a window grants only its own access and range", "[rc][mw]") {
    Pair p;
    Window w(p.b, PIB_MW_TYPE_1);
    const uint64_t local = p.a.host.alloc(8192);
    const pib_wqe_bind_mw b = w.bind(4096, 4096, PIB_ACCESS_REMOTE_READ);
    p.b.postBind(1, b);
    REQUIRE(only(p, p.b).status == PIB_WC_SUCCESS);
    Node::Send s{.opcode = PIB_WR_RDMA_READ,
                 .local = local,
                 .length = 64,
                 .remote = w.base + 4096 + 4096 - 32,
                 .rkey = b.new_rkey};
    SECTION("past its end") {}
    SECTION("before its start") {
        s.remote = w.base + 4000;
    }
    SECTION("a WRITE through a read-only window") {
        s.opcode = PIB_WR_RDMA_WRITE;
        s.remote = w.base + 4096;
    }
    p.a.postSend(2, s);
    CHECK(only(p, p.a).status == PIB_WC_REM_ACCESS_ERR);
}

TEST_CASE("a type 2 window answers only the QP that bound it, and is invalidated", "[rc][mw]") {
    Pair p;
    const Node::Qp a1 = p.a.current(), b1 = p.b.current();
    const Node::Qp a2 = p.a.createQp(PIB_QPT_RC), b2 = p.b.createQp(PIB_QPT_RC);
    p.a.connect(p.b, PIB_QPT_RC, {.sqPsn = 100, .rqPsn = 200});
    p.b.connect(p.a, PIB_QPT_RC, {.sqPsn = 200, .rqPsn = 100});
    Window w(p.b, PIB_MW_TYPE_2);
    const uint64_t local = p.a.host.alloc(4096);
    const pib_wqe_bind_mw b = w.bind(0, 4096);
    p.b.use(b2); // bound by b's second QP
    p.b.postBind(1, b);
    REQUIRE(only(p, p.b).status == PIB_WC_SUCCESS);
    CHECK(query(p.b, b.new_rkey).qpn == b2.qpn);
    const Node::Send write{.opcode = PIB_WR_RDMA_WRITE,
                           .local = local,
                           .length = 64,
                           .remote = w.base,
                           .rkey = b.new_rkey};
    p.a.use(a2);
    p.a.postSend(2, write);
    CHECK(only(p, p.a).status == PIB_WC_SUCCESS);
    SECTION("through another QP of the PD it is refused") {
        p.a.use(a1);
        p.a.postSend(3, write);
        CHECK(only(p, p.a).status == PIB_WC_REM_ACCESS_ERR);
        (void)b1;
    }
    SECTION("bound again while bound: MW_BIND_ERR") {
        pib_wqe_bind_mw again = w.bind(0, 512);
        again.mw_key = b.new_rkey;
        p.b.postBind(3, again);
        CHECK(only(p, p.b).status == PIB_WC_MW_BIND_ERR);
        CHECK(p.b.host.guestErrors("wqe-bind-mw") == 1);
    }
    SECTION("LOCAL_INV frees it, and it binds again") {
        p.b.postLocalInv(3, b.new_rkey);
        CHECK(only(p, p.b).status == PIB_WC_SUCCESS);
        CHECK(query(p.b, b.new_rkey).bound == 0);
        pib_wqe_bind_mw again = w.bind(0, 512);
        again.mw_key = b.new_rkey;
        again.new_rkey = (b.new_rkey & ~0xffu) | 0x99;
        p.b.postBind(4, again);
        CHECK(only(p, p.b).status == PIB_WC_SUCCESS);
    }
    SECTION("the peer's SEND with invalidate frees it") {
        const uint64_t in = p.b.host.alloc(64);
        p.b.postRecv(5, in, 64);
        p.a.postSend(6,
                     {.opcode = PIB_WR_SEND_INV, .local = local, .length = 8, .imm = b.new_rkey});
        p.wire.run();
        CHECK(p.a.poll().at(0).status == PIB_WC_SUCCESS);
        const pib_cqe got = p.b.poll().at(0);
        CHECK(got.flags & PIB_CQE_WITH_INV);
        CHECK(got.imm == b.new_rkey);
        CHECK(query(p.b, b.new_rkey).bound == 0);
        p.a.postSend(7, write);
        CHECK(only(p, p.a).status == PIB_WC_REM_ACCESS_ERR);
    }
    // Audit finding 6 (issue 27): only the QP it is bound to invalidates it.
    SECTION("LOCAL_INV through another QP of the PD fails and leaves it bound") {
        p.b.use(b1);
        p.b.postLocalInv(3, b.new_rkey);
        CHECK(only(p, p.b).status == PIB_WC_LOC_PROT_ERR);
        CHECK(p.b.host.guestErrors("wqe-invalidate") == 1);
        CHECK(query(p.b, b.new_rkey).bound == 1);
        p.a.postSend(3, write); // a is still on a2
        CHECK(only(p, p.a).status == PIB_WC_SUCCESS);
    }
    SECTION("a SEND with invalidate through another QP of the PD fails and leaves it bound") {
        const uint64_t in = p.b.host.alloc(64);
        p.b.use(b1);
        p.b.postRecv(5, in, 64);
        const Node::Qp a2now = p.a.current();
        p.a.use(a1);
        p.a.postSend(6,
                     {.opcode = PIB_WR_SEND_INV, .local = local, .length = 8, .imm = b.new_rkey});
        p.wire.run();
        CHECK(p.a.poll().at(0).status == PIB_WC_REM_INV_REQ_ERR);
        CHECK(p.b.poll().at(0).status == PIB_WC_REM_INV_REQ_ERR);
        CHECK(query(p.b, b.new_rkey).bound == 1);
        p.a.use(a2now);
        p.a.postSend(7, write);
        CHECK(only(p, p.a).status == PIB_WC_SUCCESS);
    }
    SECTION("destroying its QP unbinds it") {
        CHECK(p.b.host.command(PIB_CMD_DESTROY_QP, b2.qpn).status == PIB_CMD_STATUS_OK);
        CHECK(query(p.b, b.new_rkey).bound == 0);
        CHECK(p.b.host.command(PIB_CMD_DESTROY_MR, w.mrKey).status == PIB_CMD_STATUS_OK);
    }
}

TEST_CASE("BIND_MW WQEs IBA 10.6.7.2 refuses complete with MW_BIND_ERR", "[rc][mw]") {
    Pair p;
    SECTION("a region registered without MW_BIND") {
        Window w(p.b, PIB_MW_TYPE_1, PIB_ACCESS_LOCAL_WRITE);
        p.b.postBind(1, w.bind(0, 64));
    }
    SECTION("remote write over a region without local write") {
        Window w(p.b, PIB_MW_TYPE_1, PIB_ACCESS_MW_BIND);
        p.b.postBind(1, w.bind(0, 64, PIB_ACCESS_REMOTE_WRITE));
    }
    SECTION("a range beyond the region") {
        Window w(p.b, PIB_MW_TYPE_1);
        p.b.postBind(1, w.bind(16000, 1000));
    }
    SECTION("a new key of another index") {
        Window w(p.b, PIB_MW_TYPE_1);
        pib_wqe_bind_mw b = w.bind(0, 64);
        b.new_rkey += 0x100;
        p.b.postBind(1, b);
    }
    SECTION("local access asked of a window") {
        Window w(p.b, PIB_MW_TYPE_1);
        p.b.postBind(1, w.bind(0, 64, PIB_ACCESS_LOCAL_WRITE));
    }
    SECTION("a window of another PD") {
        Window w(p.b, PIB_MW_TYPE_1);
        pib_mw_context mw{};
        mw.pdn = static_cast<uint32_t>(p.b.host.command(PIB_CMD_ALLOC_PD).result);
        mw.type = PIB_MW_TYPE_1;
        pib_wqe_bind_mw b = w.bind(0, 64);
        b.mw_key = b.new_rkey =
            static_cast<uint32_t>(p.b.host.commandIn(PIB_CMD_CREATE_MW, 0, mw).result);
        p.b.postBind(1, b);
    }
    SECTION("LOCAL_INV of a type 1 window") {
        Window w(p.b, PIB_MW_TYPE_1);
        p.b.postBind(1, w.bind(0, 64));
        REQUIRE(only(p, p.b).status == PIB_WC_SUCCESS);
        p.b.postLocalInv(2, w.bind(0, 64).new_rkey);
        CHECK(only(p, p.b).status == PIB_WC_LOC_PROT_ERR);
        CHECK(p.b.host.guestErrors("wqe-invalidate") == 1);
        return;
    }
    const pib_cqe c = only(p, p.b);
    CHECK(c.status == PIB_WC_MW_BIND_ERR);
    CHECK(c.opcode == PIB_WC_BIND_MW);
    CHECK(p.b.host.guestErrors("wqe-bind-mw") == 1);
    CHECK(p.b.qpState() == PIB_QPS_ERR);
}

TEST_CASE("CREATE_MW, QUERY_MW and DESTROY_MW check what they are given", "[mw]") {
    Node n(PIB_QPT_RC, 0x11);
    pib_mw_context mw{};
    mw.pdn = n.pd;
    mw.type = 3;
    CHECK(n.host.commandIn(PIB_CMD_CREATE_MW, 0, mw).status == PIB_CMD_STATUS_BAD_PARAM);
    mw.type = PIB_MW_TYPE_2;
    mw.pdn = 999;
    CHECK(n.host.commandIn(PIB_CMD_CREATE_MW, 0, mw).status == PIB_CMD_STATUS_BAD_INDEX);
    mw.pdn = n.pd;
    const auto created = n.host.commandIn(PIB_CMD_CREATE_MW, 0, mw);
    REQUIRE(created.status == PIB_CMD_STATUS_OK);
    const auto key = static_cast<uint32_t>(created.result);
    // Its PD is in use; MR commands do not know its key.
    CHECK(n.host.command(PIB_CMD_DEALLOC_PD, n.pd).status == PIB_CMD_STATUS_BUSY);
    CHECK(n.host.command(PIB_CMD_DESTROY_MR, key).status == PIB_CMD_STATUS_BAD_INDEX);
    CHECK(n.host.command(PIB_CMD_DESTROY_MW, n.key).status == PIB_CMD_STATUS_BAD_INDEX);
    CHECK(query(n, key).type == PIB_MW_TYPE_2);
    CHECK(n.host.command(PIB_CMD_DESTROY_MW, key).status == PIB_CMD_STATUS_OK);
    CHECK(n.host.command(PIB_CMD_QUERY_MW, key).status == PIB_CMD_STATUS_BAD_INDEX);
    pib_dev_cap cap{};
    REQUIRE(n.host.commandOut(PIB_CMD_QUERY_DEV_CAP, 0, &cap).status == PIB_CMD_STATUS_OK);
    CHECK(cap.device_cap_flags & PIB_DEV_CAP_MEM_WINDOW);
    CHECK(cap.device_cap_flags & PIB_DEV_CAP_MEM_WINDOW_TYPE_2B);
    CHECK(cap.max_mw == 65536);
}

TEST_CASE("REREG_MR gives a region new access, PD or pages under the same key", "[mr][rereg]") {
    Pair p;
    Window w(p.b, PIB_MW_TYPE_1); // a region by physical address over 16 KiB
    const uint64_t local = p.a.host.alloc(4096);
    pib_mr_context q{};
    REQUIRE(p.b.host.commandOut(PIB_CMD_QUERY_MR, w.mrKey, &q).status == PIB_CMD_STATUS_OK);
    const Node::Send write{.opcode = PIB_WR_RDMA_WRITE,
                           .local = local,
                           .length = 64,
                           .remote = w.base + 8192,
                           .rkey = w.mrKey};
    SECTION("remote write granted, then taken away") {
        q.access = PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE;
        REQUIRE(p.b.host.commandIn(PIB_CMD_REREG_MR, w.mrKey, q).status == PIB_CMD_STATUS_OK);
        p.a.postSend(1, write);
        CHECK(only(p, p.a).status == PIB_WC_SUCCESS);
        q.access = PIB_ACCESS_LOCAL_WRITE;
        REQUIRE(p.b.host.commandIn(PIB_CMD_REREG_MR, w.mrKey, q).status == PIB_CMD_STATUS_OK);
        p.a.postSend(2, write);
        CHECK(only(p, p.a).status == PIB_WC_REM_ACCESS_ERR);
    }
    SECTION("a new range: the old one is outside it") {
        q.access = PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE;
        q.iova = w.base + 12288;
        q.length = 4096;
        REQUIRE(p.b.host.commandIn(PIB_CMD_REREG_MR, w.mrKey, q).status == PIB_CMD_STATUS_OK);
        p.a.postSend(1, write);
        CHECK(only(p, p.a).status == PIB_WC_REM_ACCESS_ERR);
    }
    SECTION("another PD: the QP's PD no longer reaches it, and the PDs' uses move") {
        const auto pd = static_cast<uint32_t>(p.b.host.command(PIB_CMD_ALLOC_PD).result);
        q.pdn = pd;
        q.access = PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE;
        REQUIRE(p.b.host.commandIn(PIB_CMD_REREG_MR, w.mrKey, q).status == PIB_CMD_STATUS_OK);
        CHECK(p.b.host.command(PIB_CMD_DEALLOC_PD, pd).status == PIB_CMD_STATUS_BUSY);
        p.a.postSend(1, write);
        CHECK(only(p, p.a).status == PIB_WC_REM_ACCESS_ERR);
        CHECK(p.b.host.command(PIB_CMD_DESTROY_MR, w.mrKey).status == PIB_CMD_STATUS_OK);
        CHECK(p.b.host.command(PIB_CMD_DEALLOC_PD, pd).status == PIB_CMD_STATUS_OK);
    }
    SECTION("what it refuses") {
        pib_mr_context bad = q;
        bad.access = PIB_ACCESS_REMOTE_WRITE; // without local write
        CHECK(p.b.host.commandIn(PIB_CMD_REREG_MR, w.mrKey, bad).status ==
              PIB_CMD_STATUS_BAD_PARAM);
        bad = q;
        bad.pdn = 12345;
        CHECK(p.b.host.commandIn(PIB_CMD_REREG_MR, w.mrKey, bad).status ==
              PIB_CMD_STATUS_BAD_INDEX);
        CHECK(p.b.host.commandIn(PIB_CMD_REREG_MR, p.b.createFastRegMr(1), q).status ==
              PIB_CMD_STATUS_BAD_INDEX);
        p.b.postBind(1, w.bind(0, 64));
        REQUIRE(only(p, p.b).status == PIB_WC_SUCCESS);
        CHECK(p.b.host.commandIn(PIB_CMD_REREG_MR, w.mrKey, q).status == PIB_CMD_STATUS_BUSY);
        // Nothing changed: the key still reaches the region as before.
        pib_mr_context after{};
        REQUIRE(p.b.host.commandOut(PIB_CMD_QUERY_MR, w.mrKey, &after).status == PIB_CMD_STATUS_OK);
        CHECK(after.access == q.access);
        CHECK(after.pdn == q.pdn);
    }
}
