// SPDX-License-Identifier: GPL-2.0-or-later
// XRC (IBA annex A14, docs/prm.md §6.8): an XRC INI QP sends to an XRC TGT
// QP, each message naming in its XRCETH the XRC SRQ it goes to; the SRQ's
// WQEs take the data, its PD checks the memory, its CQ gets the
// completion. A domain's TGT QPs reach its SRQs only.
#include <algorithm>

#include <catch2/catch.hpp>

#include "connected.hh"
#include "connected_fixture.hh"
#include "limits.hh"

using namespace pib;
using namespace pib::testing;

namespace {

bool sameBytes(Node &x, uint64_t ax, Node &y, uint64_t ay, uint32_t len) {
    return std::equal(x.host.at(ax), x.host.at(ax) + len, y.host.at(ay));
}

} // namespace

TEST_CASE("the device advertises XRC and its domains", "[xrc]") {
    FakeHost host;
    host.initHca();
    const pib_dev_cap cap = host.caps();
    CHECK(cap.device_cap_flags & PIB_DEV_CAP_XRC);
    CHECK(cap.max_xrcd == 65536);
}

TEST_CASE("XRC SENDs reach the XRC SRQ each names, and complete on its CQ", "[xrc]") {
    XrcPair p;
    const uint64_t out = p.a.host.alloc(16384), in = p.b.host.alloc(64 * 1024);
    uint64_t id = 1;
    for (uint32_t len : {0u, 1u, 1024u, 3000u, 10000u}) {
        const bool toBlue = id % 2 == 0;
        Srq &srq = toBlue ? p.blue : p.red;
        const uint64_t buf = in + id * 12 * 1024;
        srq.post(1000 + id, buf, 12 * 1024);
        p.a.fill(out, len, static_cast<uint8_t>(id));
        p.a.postSend(id, {.opcode = PIB_WR_SEND_IMM,
                          .local = out,
                          .length = len,
                          .imm = 0x11223344,
                          .srqn = srq.srqn});
        p.wire.run();
        const auto sent = p.a.poll();
        const auto got = toBlue ? p.pollBlue() : p.b.poll();
        REQUIRE(sent.size() == 1);
        REQUIRE(got.size() == 1);
        CHECK(sent[0].status == PIB_WC_SUCCESS);
        CHECK(sent[0].wr_id == id);
        CHECK(got[0].status == PIB_WC_SUCCESS);
        CHECK(got[0].opcode == PIB_WC_RECV);
        CHECK(got[0].wr_id == 1000 + id);
        CHECK(got[0].byte_len == len);
        CHECK(got[0].qpn == p.b.qpn); // the TGT QP took it
        CHECK(got[0].flags & PIB_CQE_SRQ);
        CHECK(got[0].srqn == srq.srqn);
        CHECK(got[0].flags & PIB_CQE_WITH_IMM);
        CHECK(got[0].imm == 0x11223344); // wire order, as the WQE had it
        CHECK(sameBytes(p.a, out, p.b, buf, len));
        ++id;
    }
    // Nothing went to the other SRQ's CQ by mistake.
    CHECK(p.b.poll().empty());
    CHECK(p.pollBlue().empty());
    // Every request on the wire is XRC and names its SRQ; responses name none.
    size_t requests = 0, responses = 0;
    for (const iba::Packet &pk : p.wire.seen) {
        CHECK((pk.bth.opcode & 0xe0) == iba::kTransportXrc);
        if ((pk.bth.opcode & 0x1f) == iba::kAcknowledge) {
            ++responses;
            CHECK(!pk.xrceth);
        } else {
            ++requests;
            REQUIRE(pk.xrceth);
            CHECK((*pk.xrceth == p.red.srqn || *pk.xrceth == p.blue.srqn));
        }
    }
    CHECK(requests == 1 + 1 + 1 + 3 + 10); // 1024-byte MTU
    CHECK(responses == 5);
}

TEST_CASE("XRC RDMA WRITE, READ and atomics check memory in the named SRQ's PD", "[xrc]") {
    XrcPair p;
    // A second PD on b with a region of its own, and an XRC SRQ in it.
    const auto pd2 = static_cast<uint32_t>(p.b.host.command(PIB_CMD_ALLOC_PD).result);
    const uint32_t key2 = p.b.host.createPhysicalMr(pd2, kAccessAll);
    Srq green = createSrq(p.b, 2, XrcSrq{p.b.xrcd, p.b.cqn, pd2});
    const uint64_t out = p.a.host.alloc(8192), in = p.b.host.alloc(8192);

    // Through an SRQ of b's own PD, b's key works.
    p.a.fill(out, 5000, 3);
    p.a.postSend(1, {.opcode = PIB_WR_RDMA_WRITE,
                     .local = out,
                     .length = 5000,
                     .remote = in,
                     .srqn = p.red.srqn});
    p.wire.run();
    auto sent = p.a.poll();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].status == PIB_WC_SUCCESS);
    CHECK(sameBytes(p.a, out, p.b, in, 5000));

    // READ back through the green SRQ needs the key of green's PD.
    const uint64_t back = p.a.host.alloc(8192);
    p.a.postSend(2, {.opcode = PIB_WR_RDMA_READ,
                     .local = back,
                     .length = 5000,
                     .remote = in,
                     .rkey = key2,
                     .srqn = green.srqn});
    p.wire.run();
    sent = p.a.poll();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].status == PIB_WC_SUCCESS);
    CHECK(sameBytes(p.a, back, p.b, in, 5000));

    // Fetch-and-add through red.
    p.b.host.poke(in, uint64_t{40});
    p.a.postSend(3, {.opcode = PIB_WR_ATOMIC_FETCH_AND_ADD,
                     .local = back,
                     .length = 8,
                     .remote = in,
                     .swapAdd = 2,
                     .srqn = p.red.srqn});
    p.wire.run();
    sent = p.a.poll();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].status == PIB_WC_SUCCESS);
    CHECK(p.a.host.peek<uint64_t>(back) == 40);
    CHECK(p.b.host.peek<uint64_t>(in) == 42);
    for (const iba::Packet &pk : p.wire.seen)
        CHECK((pk.bth.opcode & 0xe0) == iba::kTransportXrc);

    // b's own key through green (another PD): a remote access error, and
    // nothing written.
    std::vector<uint8_t> before(p.b.host.at(in), p.b.host.at(in) + 64);
    p.a.postSend(4, {.opcode = PIB_WR_RDMA_WRITE,
                     .local = out,
                     .length = 64,
                     .remote = in,
                     .srqn = green.srqn});
    p.wire.run();
    sent = p.a.poll();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].status == PIB_WC_REM_ACCESS_ERR);
    CHECK(std::equal(before.begin(), before.end(), p.b.host.at(in)));
    CHECK(p.b.qpState() == PIB_QPS_ERR);
    CHECK(p.a.qpState() == PIB_QPS_ERR);
    CHECK(p.b.host.traces("err_rc_request_refused") == 1);
}

TEST_CASE("an XRCETH naming no XRC SRQ of the TGT QP's domain is a remote access error", "[xrc]") {
    // Another domain's XRC SRQ, a basic SRQ, and no SRQ at all.
    for (int which = 0; which < 3; ++which) {
        XrcPair p;
        const auto other = static_cast<uint32_t>(p.b.host.command(PIB_CMD_ALLOC_XRCD).result);
        Srq foreign = createSrq(p.b, 2, XrcSrq{other, p.b.cqn});
        Srq basic = createSrq(p.b, 2);
        const uint32_t srqn = which == 0 ? foreign.srqn : which == 1 ? basic.srqn : 999;
        foreign.post(1, p.b.host.alloc(1024));
        basic.post(2, p.b.host.alloc(1024));
        const uint64_t out = p.a.host.alloc(64);
        p.a.postSend(1, {.local = out, .length = 64, .srqn = srqn});
        p.wire.run();
        const auto sent = p.a.poll();
        REQUIRE(sent.size() == 1);
        CHECK(sent[0].status == PIB_WC_REM_ACCESS_ERR);
        CHECK(p.b.poll().empty()); // no WQE of any SRQ was used
        CHECK(p.b.qpState() == PIB_QPS_ERR);
        CHECK(p.b.host.traces("err_rc_request_refused") == 1);
    }
}

TEST_CASE("XRC SENDs wait for an XRC SRQ WQE with RNR NAKs, and survive a lossy wire", "[xrc]") {
    XrcPair p;
    const uint64_t out = p.a.host.alloc(8192), in = p.b.host.alloc(8192);
    p.a.fill(out, 4000, 9);
    p.a.postSend(1, {.local = out, .length = 4000, .srqn = p.blue.srqn});
    p.wire.run();
    const auto rnrNaks = std::count_if(p.wire.seen.begin(), p.wire.seen.end(), [](auto &pk) {
        return pk.bth.opcode == (iba::kTransportXrc | iba::kAcknowledge) &&
               pk.aeth->syndrome >> 5 == aeth::kRnrNak;
    });
    CHECK(rnrNaks == 1);
    CHECK(p.a.poll().empty());
    p.blue.post(7, in, 8192);
    // The resend's first packet is lost: the responder NAKs the gap and the
    // requester resends from it.
    int n = 0;
    p.wire.filter = [&](bool fromA, iba::Packet &) { return !fromA || ++n != 1; };
    p.wire.advance(200'000'000);
    const auto sent = p.a.poll();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].status == PIB_WC_SUCCESS);
    const auto got = p.pollBlue();
    REQUIRE(got.size() == 1);
    CHECK(got[0].wr_id == 7);
    CHECK(got[0].byte_len == 4000);
    CHECK(sameBytes(p.a, out, p.b, in, 4000));
}

TEST_CASE("XRC objects: domains, SRQs and QPs are checked and held", "[xrc][cmd]") {
    XrcPair p;
    FakeHost &h = p.b.host;
    // A domain in use cannot go; an unknown one is refused.
    CHECK(h.command(PIB_CMD_DEALLOC_XRCD, p.b.xrcd).status == PIB_CMD_STATUS_BUSY);
    CHECK(h.command(PIB_CMD_DEALLOC_XRCD, 4000).status == PIB_CMD_STATUS_BAD_INDEX);
    // The SRQ's CQ is held by it.
    CHECK(h.command(PIB_CMD_DESTROY_CQ, p.blueCq.cqn).status == PIB_CMD_STATUS_BUSY);
    // An XRC SRQ with no domain, or a basic one naming a domain.
    uint64_t page = 0;
    pib_srq_context c = ringOf(p.b, 2, &page);
    c.pdn = p.b.pd;
    c.uar_page = p.b.uar;
    c.type = PIB_SRQT_XRC;
    c.xrcdn = 4000;
    c.cqn = p.b.cqn;
    CHECK(h.commandIn(PIB_CMD_CREATE_SRQ, 0, c).status == PIB_CMD_STATUS_BAD_INDEX);
    c.type = PIB_SRQT_BASIC;
    c.xrcdn = 5;
    CHECK(h.commandIn(PIB_CMD_CREATE_SRQ, 0, c).status == PIB_CMD_STATUS_BAD_PARAM);
    c.type = 7;
    CHECK(h.commandIn(PIB_CMD_CREATE_SRQ, 0, c).status == PIB_CMD_STATUS_BAD_PARAM);
    // A basic QP cannot use an XRC SRQ; an XRC QP uses no SRQ of its own;
    // a TGT QP has no queues and needs its domain; only it names one.
    pib_qp_context q{};
    q.type = PIB_QPT_RC;
    q.pdn = p.b.pd;
    q.send_cqn = q.recv_cqn = p.b.cqn;
    q.uar_page = p.b.uar;
    q.flags = PIB_QP_USE_SRQ;
    q.srqn = p.red.srqn;
    q.sq_log_wqe_count = 2;
    q.sq_log_wqe_stride = 6;
    q.sq_buf = h.ring(1);
    CHECK(h.commandIn(PIB_CMD_CREATE_QP, 0, q).status == PIB_CMD_STATUS_BAD_INDEX);
    q.type = PIB_QPT_XRC_INI;
    CHECK(h.commandIn(PIB_CMD_CREATE_QP, 0, q).status == PIB_CMD_STATUS_BAD_PARAM);
    q.flags = 0;
    q.xrcdn = 5;
    CHECK(h.commandIn(PIB_CMD_CREATE_QP, 0, q).status == PIB_CMD_STATUS_BAD_PARAM);
    pib_qp_context t{};
    t.type = PIB_QPT_XRC_TGT;
    t.xrcdn = 4000;
    CHECK(h.commandIn(PIB_CMD_CREATE_QP, 0, t).status == PIB_CMD_STATUS_BAD_INDEX);
    t.xrcdn = p.b.xrcd;
    t.sq_log_wqe_count = 2;
    CHECK(h.commandIn(PIB_CMD_CREATE_QP, 0, t).status == PIB_CMD_STATUS_BAD_PARAM);
    // Doorbells: a TGT QP has no queue, an INI QP no receive queue.
    pib_core_bar_write(h.core, PIB_BAR_DOORBELL, uint64_t{p.b.uar} * PIB_PAGE_SIZE + PIB_DB_SQ,
                       uint64_t{1} << 32 | p.b.qpn, 8);
    CHECK(h.guestErrors("doorbell-bad-object") == 1);
    pib_core_bar_write(p.a.host.core, PIB_BAR_DOORBELL,
                       uint64_t{p.a.uar} * PIB_PAGE_SIZE + PIB_DB_RQ, uint64_t{1} << 32 | p.a.qpn,
                       8);
    CHECK(p.a.host.guestErrors("doorbell-bad-object") == 1);
    // Destroyed in order, everything lets go.
    CHECK(h.command(PIB_CMD_DESTROY_QP, p.b.qpn).status == PIB_CMD_STATUS_OK);
    CHECK(h.command(PIB_CMD_DESTROY_SRQ, p.red.srqn).status == PIB_CMD_STATUS_OK);
    CHECK(h.command(PIB_CMD_DESTROY_SRQ, p.blue.srqn).status == PIB_CMD_STATUS_OK);
    CHECK(h.command(PIB_CMD_DESTROY_CQ, p.blueCq.cqn).status == PIB_CMD_STATUS_OK);
    CHECK(h.command(PIB_CMD_DEALLOC_XRCD, p.b.xrcd).status == PIB_CMD_STATUS_OK);
}

namespace {

// Holds back a's request packets from the first after a SEND_FIRST on,
// as a slow or hostile fabric may; release() delivers them to b in order.
struct HeldTail {
    XrcPair &p;
    std::vector<iba::Packet> held;
    bool holding = false;

    explicit HeldTail(XrcPair &pair) : p(pair) {
        p.wire.filter = [this](bool fromA, iba::Packet &k) {
            if (!fromA)
                return true;
            if (holding) {
                held.push_back(k);
                return false;
            }
            holding = (k.bth.opcode & 0x1f) == iba::kSendFirst;
            return true;
        };
    }
    void release() {
        p.wire.filter = {};
        for (const iba::Packet &k : held) {
            const auto frame = wire::encode(PIB_WIRE_PACKET, iba::build(k));
            pib_core_port_receive(p.b.host.core, 1, frame.data(), frame.size());
        }
        held.clear();
        p.wire.run();
    }
};

// SRQs made and destroyed on `n` until the device has given its highest
// SRQ number: SRQ numbers rotate, so the next SRQ takes the lowest free
// one, which a destroyed SRQ's number comes back as only after that.
void bringSrqNumbersRound(Node &n) {
    uint64_t page = 0;
    pib_srq_context c = ringOf(n, 2, &page);
    c.pdn = n.pd;
    c.uar_page = n.uar;
    const uint64_t mailbox = n.host.alloc(PIB_MAILBOX_SIZE); // one for all: RAM is 8 MiB
    n.host.poke(mailbox, c);
    for (uint32_t i = 0; i < pib::limits::kMaxSrq; ++i) {
        const auto made = n.host.command(PIB_CMD_CREATE_SRQ, 0, mailbox);
        REQUIRE(made.status == PIB_CMD_STATUS_OK);
        REQUIRE(n.host.command(PIB_CMD_DESTROY_SRQ, made.result).status == PIB_CMD_STATUS_OK);
        if (made.result == pib::limits::kMaxSrq - 1)
            return;
    }
    FAIL("the device never gave its highest SRQ number");
}

} // namespace

// Audit finding 1 (issue 27): a message keeps the XRC SRQ it started
// with. The SRQ destroyed midway, a new one (another tenant's XRC SRQ
// with its own CQ, or a basic SRQ, whose CQ field means nothing) takes
// its number: the old WQE completes once, flushed, on the old SRQ's CQ,
// and the rest of the message reaches neither the new SRQ nor any CQ.
TEST_CASE("an XRC message in progress ends with its SRQ, never completing into its successor",
          "[xrc][hostile]") {
    for (const bool successorIsXrc : {true, false}) {
        INFO((successorIsXrc ? "an XRC SRQ" : "a basic SRQ") << " takes the number");
        XrcPair p;
        HeldTail tail(p);
        const uint64_t out = p.a.host.alloc(4096), in = p.b.host.alloc(4096);
        p.red.post(0xbad, in, 4096);
        p.a.fill(out, 3000, 1);
        p.a.postSend(1, {.local = out, .length = 3000, .srqn = p.red.srqn});
        p.wire.run();
        REQUIRE(tail.held.size() == 2); // SEND_FIRST arrived; MIDDLE and LAST held
        auto &h = p.b.host;
        REQUIRE(h.command(PIB_CMD_DESTROY_SRQ, p.red.srqn).status == PIB_CMD_STATUS_OK);
        CHECK(h.traces("xrc_message_cut") == 1);
        // The claimed WQE completed, flushed, on red's CQ.
        const auto flushed = p.b.poll();
        REQUIRE(flushed.size() == 1);
        CHECK(flushed[0].wr_id == 0xbad);
        CHECK(flushed[0].status == PIB_WC_WR_FLUSH_ERR);
        CHECK(flushed[0].srqn == p.red.srqn);

        // Another tenant's CQ, and the SRQ that takes red's number once
        // every other number has been given.
        FakeHost::Cq otherCq = h.createCq(p.b.eqn, p.b.uar, Node::kLogCq, 4);
        bringSrqNumbersRound(p.b);
        Srq successor =
            successorIsXrc ? createSrq(p.b, 4, XrcSrq{p.b.xrcd, otherCq.cqn}) : createSrq(p.b, 4);
        REQUIRE(successor.srqn == p.red.srqn);
        const uint64_t theirs = h.alloc(4096);
        successor.post(0x7e4a47, theirs, 4096);
        tail.release();
        // Nothing completed anywhere, the new SRQ's WQE is untouched, and
        // the TGT QP refused the rest as out of sequence.
        CHECK(p.b.poll().empty());
        CHECK(p.pollBlue().empty());
        CHECK(h.peek<pib_cqe>(otherCq.page).flags == 0);
        CHECK(std::all_of(h.at(theirs), h.at(theirs) + 4096, [](uint8_t b) { return b == 0; }));
        CHECK(p.b.qpState() == PIB_QPS_ERR);
        const auto sent = p.a.poll();
        REQUIRE(sent.size() == 1);
        CHECK(sent[0].status == PIB_WC_REM_INV_REQ_ERR);
    }
}
