// SPDX-License-Identifier: GPL-2.0-or-later
// The connected transports between two devices cabled back to back, with
// a wire in between that can drop, hold or rewrite packets: SEND, RDMA
// WRITE/READ and atomics; segmentation; PSN wrap-around; every NAK path;
// retransmission on the ACK timer; RNR; UC.
#include <algorithm>
#include <functional>

#include <catch2/catch.hpp>

#include "fake_host.hh"
#include "frame.hh"
#include "mad.hh"
#include "packet.hh"

using namespace pib;

namespace {

constexpr uint32_t kAccessAll = PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE |
                                PIB_ACCESS_REMOTE_READ | PIB_ACCESS_REMOTE_ATOMIC;

// One device with an ACTIVE port (LID `lid`) and one connected QP.
struct Node {
    FakeHost host;
    uint16_t lid;
    uint32_t uar = 0, pd = 0, eqn = 0, cqn = 0, key = 0, qpn = 0;
    uint64_t cqPage = 0, sqPage = 0, rqPage = 0, eqPage = 0;
    uint32_t sqPi = 0, rqPi = 0, cqCi = 0;
    static constexpr unsigned kLogCq = 8, kLogSq = 6, kLogRq = 6;

    Node(uint8_t type, uint16_t lid_) : lid(lid_) {
        host.initHca();
        uar = static_cast<uint32_t>(host.command(PIB_CMD_ALLOC_UAR).result);
        pd = static_cast<uint32_t>(host.command(PIB_CMD_ALLOC_PD).result);
        std::vector<uint64_t> pages;
        pib_eq_context eq{};
        eq.buf = host.ring(1, &pages);
        eqPage = pages.back();
        eq.log_size = 6;
        eq.flags = PIB_EQ_ASYNC;
        eqn = static_cast<uint32_t>(host.commandIn(PIB_CMD_CREATE_EQ, 0, eq).result);
        pib_cq_context cq{};
        pages.clear();
        cq.buf = host.ring(4, &pages); // contiguous, as the fake host allocates
        cqPage = pages.front();
        cq.log_size = kLogCq;
        cq.eqn = eqn;
        cq.uar_page = uar;
        cq.ci_record = host.alloc(64, 64);
        cqn = static_cast<uint32_t>(host.commandIn(PIB_CMD_CREATE_CQ, 0, cq).result);
        pib_mr_context mr{};
        mr.pdn = pd;
        mr.access = kAccessAll;
        mr.flags = PIB_MR_PHYSICAL;
        mr.length = ~0ull;
        key = static_cast<uint32_t>(host.commandIn(PIB_CMD_CREATE_MR, 0, mr).result);
        pib_qp_context qp{};
        qp.type = type;
        qp.pdn = pd;
        qp.send_cqn = qp.recv_cqn = cqn;
        qp.uar_page = uar;
        qp.sq_log_wqe_count = kLogSq;
        qp.sq_log_wqe_stride = 7;
        qp.rq_log_wqe_count = kLogRq;
        qp.rq_log_wqe_stride = 6;
        pages.clear();
        qp.sq_buf = host.ring(2, &pages);
        sqPage = pages.front();
        qp.rq_buf = host.ring(1, &pages);
        rqPage = pages.back();
        qpn = static_cast<uint32_t>(host.commandIn(PIB_CMD_CREATE_QP, 0, qp).result);
        REQUIRE(qpn >= PIB_FIRST_QPN);
        // Train the link, then configure the port as an SM would.
        pib_core_port_connected(host.core, 1, 1);
        pib_wire_hello hello{};
        const auto frame = wire::encode(
            PIB_WIRE_HELLO, std::span(reinterpret_cast<const uint8_t *>(&hello), sizeof(hello)));
        pib_core_port_receive(host.core, 1, frame.data(), frame.size());
        for (uint8_t state : {PIB_PORT_ARMED, PIB_PORT_ACTIVE})
            portInfoSet([&](iba::Mad &m) {
                m.set16(64 + 16, lid);
                m.set8(64 + 32, state);
                m.set8(64 + 36, 5 << 4); // NeighborMTU 4096
            });
        host.portOutput[1].clear();
    }

    void portInfoSet(const std::function<void(iba::Mad &)> &fill) {
        pib_mad_ifc ifc{};
        iba::Mad m(ifc.mad);
        m.set8(0, 1);
        m.set8(1, iba::kClassSmpLid);
        m.set8(2, 1);
        m.set8(3, iba::kSet);
        m.set16(16, iba::kAttrPortInfo);
        m.set32(20, 1);
        fill(m);
        const uint64_t in = host.alloc(PIB_MAILBOX_SIZE), out = host.alloc(PIB_MAILBOX_SIZE);
        host.poke(in, ifc);
        REQUIRE(host.command(PIB_CMD_MAD_IFC, 1, in, out).status == PIB_CMD_STATUS_OK);
    }

    void modify(pib_qp_attr a) {
        REQUIRE(host.commandIn(PIB_CMD_MODIFY_QP, qpn, a).status == PIB_CMD_STATUS_OK);
    }

    struct Options {
        uint8_t mtu = 3; // 1024 bytes
        uint32_t sqPsn = 100;
        uint32_t rqPsn = 200;
        uint8_t timeout = 10; // 4.2 ms
        uint8_t retryCnt = 3;
        uint8_t rnrRetry = 2;
        uint8_t minRnrTimer = 1; // 0.01 ms
        uint8_t maxRdAtomic = 4;
    };

    // INIT -> RTR -> RTS, connected to `peer`.
    void connect(const Node &peer, uint8_t type, const Options &o) {
        pib_qp_attr a{};
        a.attr_mask = PIB_QP_STATE | PIB_QP_PKEY_INDEX | PIB_QP_PORT | PIB_QP_ACCESS_FLAGS;
        a.qp_state = PIB_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags = kAccessAll & ~PIB_ACCESS_LOCAL_WRITE;
        modify(a);
        a = {};
        a.attr_mask = PIB_QP_STATE | PIB_QP_AV | PIB_QP_PATH_MTU | PIB_QP_DEST_QPN | PIB_QP_RQ_PSN;
        if (type == PIB_QPT_RC)
            a.attr_mask |= PIB_QP_MAX_DEST_RD_ATOMIC | PIB_QP_MIN_RNR_TIMER;
        a.qp_state = PIB_QPS_RTR;
        a.av.dlid = peer.lid;
        a.av.port = 1;
        a.path_mtu = o.mtu;
        a.dest_qp_num = peer.qpn;
        a.rq_psn = o.rqPsn;
        a.max_dest_rd_atomic = o.maxRdAtomic;
        a.min_rnr_timer = o.minRnrTimer;
        modify(a);
        a = {};
        a.attr_mask = PIB_QP_STATE | PIB_QP_SQ_PSN;
        if (type == PIB_QPT_RC)
            a.attr_mask |=
                PIB_QP_TIMEOUT | PIB_QP_RETRY_CNT | PIB_QP_RNR_RETRY | PIB_QP_MAX_QP_RD_ATOMIC;
        a.qp_state = PIB_QPS_RTS;
        a.sq_psn = o.sqPsn;
        a.timeout = o.timeout;
        a.retry_cnt = o.retryCnt;
        a.rnr_retry = o.rnrRetry;
        a.max_rd_atomic = o.maxRdAtomic;
        modify(a);
    }

    void ring(uint32_t offset, uint32_t value) {
        pib_core_bar_write(host.core, PIB_BAR_DOORBELL, uint64_t{uar} * PIB_PAGE_SIZE + offset,
                           uint64_t{value} << 32 | qpn, 8);
    }

    void postRecv(uint64_t wrId, uint64_t buf, uint32_t len) {
        const uint64_t slot = rqPage + (rqPi % (1u << kLogRq)) * 64;
        pib_wqe_ctrl ctrl{};
        ctrl.wr_id = wrId;
        ctrl.num_ds = 2;
        host.poke(slot, ctrl);
        host.poke(slot + 16, pib_wqe_data{len, key, buf});
        ring(PIB_DB_RQ, ++rqPi);
    }

    struct Send {
        uint8_t opcode = PIB_WR_SEND;
        uint64_t local = 0;
        uint32_t length = 0;
        uint64_t remote = 0;
        uint32_t imm = 0;
        uint64_t swapAdd = 0, compare = 0;
        uint8_t flags = PIB_WQE_SIGNALED;
        uint32_t lkey = 0; // 0: the node's MR
    };

    // Writes a send WQE; rings the doorbell unless told not to.
    void postSend(uint64_t wrId, const Send &s, bool ring_ = true) {
        const uint64_t slot = sqPage + (sqPi % (1u << kLogSq)) * 128;
        pib_wqe_ctrl ctrl{};
        ctrl.wr_id = wrId;
        ctrl.opcode = s.opcode;
        ctrl.flags = s.flags;
        ctrl.imm = s.imm;
        uint64_t at = slot + 16;
        if (s.opcode != PIB_WR_SEND && s.opcode != PIB_WR_SEND_IMM) {
            host.poke(at, pib_wqe_raddr{s.remote, key, 0});
            at += 16;
        }
        if (s.opcode == PIB_WR_ATOMIC_CMP_AND_SWP || s.opcode == PIB_WR_ATOMIC_FETCH_AND_ADD) {
            host.poke(at, pib_wqe_atomic{s.swapAdd, s.compare});
            at += 16;
        }
        if (s.flags & PIB_WQE_INLINE) {
            uint32_t count = s.length | PIB_INLINE_FLAG;
            host.poke(at, count);
            std::memcpy(host.at(at + 4), host.at(s.local), s.length);
            at += (4 + s.length + 15) / 16 * 16;
        } else {
            host.poke(at, pib_wqe_data{s.length, s.lkey ? s.lkey : key, s.local});
            at += 16;
        }
        ctrl.num_ds = static_cast<uint8_t>((at - slot) / 16);
        host.poke(slot, ctrl);
        ++sqPi;
        if (ring_)
            ring(PIB_DB_SQ, sqPi);
    }

    // New completions since the last call.
    std::vector<pib_cqe> poll() {
        std::vector<pib_cqe> out;
        for (;;) {
            const pib_cqe c = host.peek<pib_cqe>(cqPage + (cqCi % (1u << kLogCq)) * PIB_CQE_SIZE);
            const unsigned phase = ((cqCi >> kLogCq) & 1) ^ 1;
            if ((c.flags & PIB_CQE_PHASE) != phase)
                break;
            out.push_back(c);
            ++cqCi;
        }
        return out;
    }

    std::vector<uint8_t> asyncEvents() {
        std::vector<uint8_t> events;
        for (unsigned i = 0; i < 64; ++i) {
            auto e = host.peek<pib_eqe>(eqPage + i * sizeof(pib_eqe));
            if (e.flags & PIB_EQE_PHASE && e.type == PIB_EQE_ASYNC)
                events.push_back(e.subtype);
        }
        return events;
    }

    uint8_t qpState() {
        pib_qp_attr out{};
        host.commandOut(PIB_CMD_QUERY_QP, qpn, &out);
        return out.qp_state;
    }

    void fill(uint64_t addr, uint32_t len, uint8_t seed) {
        for (uint32_t i = 0; i < len; ++i)
            host.at(addr)[i] = static_cast<uint8_t>(seed + i * 7);
    }
};

// The cable between two nodes. Each packet passes the filter, which may
// drop it (false), change it, or just look.
struct Wire {
    Node &a, &b;
    std::function<bool(bool fromA, iba::Packet &)> filter;
    std::vector<iba::Packet> seen; // every packet, as sent
    wire::FrameReader readers[2];

    // Moves packets until both sides are quiet.
    void run(int rounds = 64) {
        for (int r = 0; r < rounds; ++r)
            if (!move(a, b, 0) & !move(b, a, 1))
                return;
    }

    bool move(Node &from, Node &to, int side) {
        auto bytes = std::move(from.host.portOutput[1]);
        from.host.portOutput[1].clear();
        if (bytes.empty())
            return false;
        readers[side].feed(bytes);
        wire::FrameReader::Error error;
        while (auto frame = readers[side].next(&error)) {
            if (frame->type != PIB_WIRE_PACKET)
                continue;
            iba::ParseError perr;
            auto packet = iba::parse(frame->payload, &perr);
            REQUIRE(packet);
            seen.push_back(*packet);
            if (filter && !filter(side == 0, *packet))
                continue;
            const auto out = wire::encode(PIB_WIRE_PACKET, iba::build(*packet));
            pib_core_port_receive(to.host.core, 1, out.data(), out.size());
        }
        return true;
    }

    // Moves time forward in steps, firing timers and moving packets.
    void advance(uint64_t ns, uint64_t step = 100'000) {
        for (uint64_t t = 0; t < ns; t += step) {
            a.host.advance(step);
            b.host.advance(step);
            run();
        }
    }

    size_t count(uint8_t opcode) const {
        return std::count_if(seen.begin(), seen.end(),
                             [&](const iba::Packet &p) { return p.bth.opcode == opcode; });
    }
};

struct Pair {
    Node a, b;
    Wire wire{a, b, {}, {}, {}};
    Pair(uint8_t type = PIB_QPT_RC, Node::Options o = {}) : a(type, 0x11), b(type, 0x22) {
        a.connect(b, type, o);
        Node::Options ob = o;
        std::swap(ob.sqPsn, ob.rqPsn);
        b.connect(a, type, ob);
    }
};

bool sameBytes(Node &x, uint64_t ax, Node &y, uint64_t ay, uint32_t len) {
    return std::equal(x.host.at(ax), x.host.at(ax) + len, y.host.at(ay));
}

} // namespace

TEST_CASE("RC SENDs of every size arrive whole, segmented at the path MTU", "[rc]") {
    Pair p;
    const uint64_t out = p.a.host.alloc(16384), in = p.b.host.alloc(16384);
    uint64_t id = 1;
    for (uint32_t len : {0u, 1u, 1023u, 1024u, 1025u, 4096u, 10000u}) {
        p.a.fill(out, len, static_cast<uint8_t>(len));
        p.b.postRecv(id, in, 16384);
        p.a.postSend(id, {.opcode = PIB_WR_SEND, .local = out, .length = len});
        p.wire.run();
        auto sent = p.a.poll();
        auto got = p.b.poll();
        REQUIRE(sent.size() == 1);
        REQUIRE(got.size() == 1);
        CHECK(sent[0].status == PIB_WC_SUCCESS);
        CHECK(sent[0].opcode == PIB_WC_SEND);
        CHECK(sent[0].wr_id == id);
        CHECK(got[0].status == PIB_WC_SUCCESS);
        CHECK(got[0].opcode == PIB_WC_RECV);
        CHECK(got[0].byte_len == len);
        CHECK(got[0].wr_id == id);
        CHECK(got[0].qpn == p.b.qpn);
        CHECK(got[0].slid == 0x11);
        CHECK(sameBytes(p.a, out, p.b, in, len));
        ++id;
    }
    // 4096 bytes at MTU 1024 took first, 2 middles, last; 10000 bytes
    // first, 8 middles, last.
    CHECK(p.wire.count(iba::kSendMiddle) == 2 + 8);
    CHECK(p.wire.count(iba::kSendFirst) == 3);
    // One ACK per message, none per packet.
    CHECK(p.wire.count(iba::kAcknowledge) == 7);
    CHECK(p.a.qpState() == PIB_QPS_RTS);
    CHECK(p.b.qpState() == PIB_QPS_RTS);
}

TEST_CASE("SEND with immediate, inline data and the solicited bit", "[rc]") {
    Pair p;
    const uint64_t out = p.a.host.alloc(64), in = p.b.host.alloc(64);
    p.a.fill(out, 40, 3);
    p.b.postRecv(7, in, 64);
    p.a.postSend(8, {.opcode = PIB_WR_SEND_IMM,
                     .local = out,
                     .length = 40,
                     .imm = 0x78563412,
                     .flags = PIB_WQE_SIGNALED | PIB_WQE_INLINE | PIB_WQE_SOLICITED});
    p.wire.run();
    auto got = p.b.poll();
    REQUIRE(got.size() == 1);
    CHECK(got[0].flags & PIB_CQE_WITH_IMM);
    CHECK(got[0].imm == 0x78563412);
    CHECK(got[0].byte_len == 40);
    CHECK(sameBytes(p.a, out, p.b, in, 40));
    REQUIRE(p.wire.count(iba::kSendOnlyImm) == 1);
    CHECK(std::find_if(p.wire.seen.begin(), p.wire.seen.end(), [](auto &k) {
              return k.bth.opcode == iba::kSendOnlyImm;
          })->bth.solicited);
}

TEST_CASE("RDMA WRITE, WRITE with immediate, READ and atomics", "[rc]") {
    Pair p;
    const uint64_t local = p.a.host.alloc(65536), remote = p.b.host.alloc(65536);
    SECTION("a 40000-byte WRITE lands in order and consumes no receive WQE") {
        p.a.fill(local, 40000, 9);
        p.a.postSend(
            1,
            {.opcode = PIB_WR_RDMA_WRITE, .local = local, .length = 40000, .remote = remote + 8});
        p.wire.run();
        auto sent = p.a.poll();
        REQUIRE(sent.size() == 1);
        CHECK(sent[0].status == PIB_WC_SUCCESS);
        CHECK(sent[0].opcode == PIB_WC_RDMA_WRITE);
        CHECK(p.b.poll().empty());
        CHECK(sameBytes(p.a, local, p.b, remote + 8, 40000));
        CHECK(p.wire.count(iba::kWriteFirst) == 1);
        CHECK(p.wire.count(iba::kWriteLast) == 1);
    }
    SECTION("WRITE with immediate completes a receive with the length") {
        p.b.postRecv(5, p.b.host.alloc(16), 16);
        p.a.fill(local, 3000, 1);
        p.a.postSend(2, {.opcode = PIB_WR_RDMA_WRITE_IMM,
                         .local = local,
                         .length = 3000,
                         .remote = remote,
                         .imm = 0x01020304});
        p.wire.run();
        auto got = p.b.poll();
        REQUIRE(got.size() == 1);
        CHECK(got[0].opcode == PIB_WC_RECV_RDMA_WITH_IMM);
        CHECK(got[0].byte_len == 3000);
        CHECK(got[0].imm == 0x01020304);
        CHECK(sameBytes(p.a, local, p.b, remote, 3000));
    }
    SECTION("a 20000-byte READ comes back in response packets") {
        p.b.fill(remote, 20000, 5);
        p.a.postSend(
            3, {.opcode = PIB_WR_RDMA_READ, .local = local, .length = 20000, .remote = remote});
        p.wire.run();
        auto done = p.a.poll();
        REQUIRE(done.size() == 1);
        CHECK(done[0].status == PIB_WC_SUCCESS);
        CHECK(done[0].opcode == PIB_WC_RDMA_READ);
        CHECK(done[0].byte_len == 20000);
        CHECK(sameBytes(p.a, local, p.b, remote, 20000));
        CHECK(p.wire.count(iba::kReadRequest) == 1);
        CHECK(p.wire.count(iba::kReadResponseMiddle) == 18);
    }
    SECTION("compare-and-swap and fetch-and-add return the old value") {
        p.b.host.poke<uint64_t>(remote, 10);
        p.a.postSend(4, {.opcode = PIB_WR_ATOMIC_FETCH_AND_ADD,
                         .local = local,
                         .length = 8,
                         .remote = remote,
                         .swapAdd = 5});
        p.a.postSend(5, {.opcode = PIB_WR_ATOMIC_CMP_AND_SWP,
                         .local = local + 8,
                         .length = 8,
                         .remote = remote,
                         .swapAdd = 99,
                         .compare = 15});
        p.a.postSend(6, {.opcode = PIB_WR_ATOMIC_CMP_AND_SWP,
                         .local = local + 16,
                         .length = 8,
                         .remote = remote,
                         .swapAdd = 7,
                         .compare = 1234});
        p.wire.run();
        auto done = p.a.poll();
        REQUIRE(done.size() == 3);
        CHECK(done[0].opcode == PIB_WC_FETCH_ADD);
        CHECK(done[1].opcode == PIB_WC_COMP_SWAP);
        CHECK(p.a.host.peek<uint64_t>(local) == 10);
        CHECK(p.a.host.peek<uint64_t>(local + 8) == 15);
        CHECK(p.a.host.peek<uint64_t>(local + 16) == 99); // compare failed: unchanged
        CHECK(p.b.host.peek<uint64_t>(remote) == 99);
    }
}

TEST_CASE("PSNs wrap around 2^24", "[rc]") {
    Pair p(PIB_QPT_RC, {.sqPsn = 0xfffffd, .rqPsn = 0xfffffd});
    const uint64_t out = p.a.host.alloc(8192), in = p.b.host.alloc(8192);
    p.a.fill(out, 8000, 4);
    p.b.postRecv(1, in, 8192);
    p.a.postSend(1, {.local = out, .length = 8000}); // 8 packets: PSN 0xfffffd .. 4
    p.a.postSend(2, {.opcode = PIB_WR_RDMA_READ, .local = out, .length = 3000, .remote = in});
    p.wire.run();
    auto done = p.a.poll();
    REQUIRE(done.size() == 2);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(done[1].status == PIB_WC_SUCCESS);
    REQUIRE(p.b.poll().size() == 1);
    CHECK(p.wire.seen.back().bth.psn == 7); // the last READ response
}

TEST_CASE("lost packets: a PSN sequence NAK resends from the gap", "[rc]") {
    Pair p;
    const uint64_t out = p.a.host.alloc(8192), in = p.b.host.alloc(8192);
    p.a.fill(out, 5000, 8);
    p.b.postRecv(1, in, 8192);
    int sendPackets = 0;
    p.wire.filter = [&](bool fromA, iba::Packet &k) {
        return !(fromA && k.bth.opcode == iba::kSendMiddle && ++sendPackets == 2);
    };
    p.a.postSend(1, {.local = out, .length = 5000});
    p.wire.run();
    auto sent = p.a.poll();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].status == PIB_WC_SUCCESS);
    CHECK(sameBytes(p.a, out, p.b, in, 5000));
    REQUIRE(p.b.poll().size() == 1);
    // One NAK for the gap, not one per packet after it.
    CHECK(std::count_if(p.wire.seen.begin(), p.wire.seen.end(), [](auto &k) {
              return k.bth.opcode == iba::kAcknowledge && k.aeth->syndrome == 0x60;
          }) == 1);
    CHECK(p.a.host.traces("rc-seq-nak") == 1);
}

TEST_CASE("a lost ACK: the timer resends, the duplicate is ACKed again", "[rc]") {
    Pair p;
    const uint64_t out = p.a.host.alloc(64), in = p.b.host.alloc(64);
    p.b.postRecv(1, in, 64);
    bool dropped = false;
    p.wire.filter = [&](bool fromA, iba::Packet &k) {
        if (!fromA && k.bth.opcode == iba::kAcknowledge && !dropped)
            return !(dropped = true);
        return true;
    };
    p.a.postSend(1, {.local = out, .length = 64});
    p.wire.run();
    CHECK(p.a.poll().empty());
    CHECK(p.b.poll().size() == 1); // delivered once
    p.wire.advance(10'000'000);    // > 4.096 us * 2^10
    auto sent = p.a.poll();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].status == PIB_WC_SUCCESS);
    CHECK(p.b.poll().empty()); // the duplicate SEND consumed nothing
    CHECK(p.a.host.traces("rc-timeout") == 1);
}

TEST_CASE("lost READ responses and atomic ACKs are asked for again", "[rc]") {
    Pair p;
    const uint64_t local = p.a.host.alloc(8192), remote = p.b.host.alloc(8192);
    p.b.fill(remote, 6000, 2);
    p.b.host.poke<uint64_t>(remote + 6000 + 0, 1); // 8-aligned: remote + 6000
    int responses = 0;
    bool ackDropped = false;
    p.wire.filter = [&](bool fromA, iba::Packet &k) {
        if (fromA)
            return true;
        if (k.bth.opcode == iba::kReadResponseMiddle && ++responses == 3)
            return false;
        if (k.bth.opcode == iba::kAtomicAcknowledge && !ackDropped)
            return !(ackDropped = true);
        return true;
    };
    p.a.postSend(1, {.opcode = PIB_WR_RDMA_READ, .local = local, .length = 6000, .remote = remote});
    p.a.postSend(2, {.opcode = PIB_WR_ATOMIC_FETCH_AND_ADD,
                     .local = local + 6000,
                     .length = 8,
                     .remote = remote + 6000,
                     .swapAdd = 1});
    p.wire.run();
    p.wire.advance(20'000'000);
    auto done = p.a.poll();
    REQUIRE(done.size() == 2);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(done[1].status == PIB_WC_SUCCESS);
    CHECK(sameBytes(p.a, local, p.b, remote, 6000));
    // The atomic ran once: its duplicate got the saved result.
    CHECK(p.b.host.peek<uint64_t>(remote + 6000) == 2);
    CHECK(p.a.host.peek<uint64_t>(local + 6000) == 1);
}

TEST_CASE("retry exhaustion completes in error and flushes the rest", "[rc]") {
    Pair p(PIB_QPT_RC, {.retryCnt = 2});
    const uint64_t out = p.a.host.alloc(64);
    p.wire.filter = [](bool fromA, iba::Packet &) { return !fromA; }; // a black hole
    p.a.postSend(1, {.local = out, .length = 64});
    p.a.postSend(2, {.local = out, .length = 64});
    p.wire.advance(40'000'000);
    auto done = p.a.poll();
    REQUIRE(done.size() == 2);
    CHECK(done[0].status == PIB_WC_RETRY_EXC_ERR);
    CHECK(done[0].wr_id == 1);
    CHECK(done[1].status == PIB_WC_WR_FLUSH_ERR);
    CHECK(p.a.qpState() == PIB_QPS_ERR);
    CHECK(p.a.host.traces("rc-timeout") == 2);
    // Both WQEs went out, and each retry resent both.
    CHECK(p.wire.count(iba::kSendOnly) == 2 * 3);
}

TEST_CASE("RNR: no receive WQE, a NAK, then the retry finds one", "[rc]") {
    SECTION("a receive posted in time") {
        Pair p;
        const uint64_t out = p.a.host.alloc(64), in = p.b.host.alloc(64);
        p.a.postSend(1, {.local = out, .length = 64});
        p.wire.run();
        CHECK(p.a.poll().empty());
        CHECK(p.wire.count(iba::kAcknowledge) == 1); // the RNR NAK
        p.b.postRecv(9, in, 64);
        p.wire.advance(1'000'000);
        auto sent = p.a.poll();
        REQUIRE(sent.size() == 1);
        CHECK(sent[0].status == PIB_WC_SUCCESS);
        CHECK(p.b.poll().size() == 1);
    }
    SECTION("rnr_retry exhausted") {
        Pair p(PIB_QPT_RC, {.rnrRetry = 1});
        const uint64_t out = p.a.host.alloc(64);
        p.a.postSend(1, {.local = out, .length = 64});
        p.wire.advance(2'000'000);
        auto sent = p.a.poll();
        REQUIRE(sent.size() == 1);
        CHECK(sent[0].status == PIB_WC_RNR_RETRY_EXC_ERR);
        CHECK(p.a.qpState() == PIB_QPS_ERR);
    }
    SECTION("rnr_retry 7 retries for ever") {
        Pair p(PIB_QPT_RC, {.rnrRetry = 7});
        const uint64_t out = p.a.host.alloc(64), in = p.b.host.alloc(64);
        p.a.postSend(1, {.local = out, .length = 64});
        p.wire.advance(5'000'000);
        CHECK(p.a.poll().empty());
        CHECK(p.wire.count(iba::kAcknowledge) > 20);
        p.b.postRecv(1, in, 64);
        p.wire.advance(200'000);
        REQUIRE(p.a.poll().size() == 1);
    }
}

TEST_CASE("access violations NAK and put both QPs in error", "[rc]") {
    Pair p;
    const uint64_t local = p.a.host.alloc(4096), remote = p.b.host.alloc(4096);
    SECTION("a WRITE with an R_Key that is no key") {
        // Write the WQE by hand with a bad rkey.
        p.a.postSend(1,
                     {.opcode = PIB_WR_RDMA_WRITE, .local = local, .length = 100, .remote = remote},
                     false);
        const uint64_t slot = p.a.sqPage;
        p.a.host.poke(slot + 16, pib_wqe_raddr{remote, 0xbad00, 0});
        p.a.ring(PIB_DB_SQ, p.a.sqPi);
        p.wire.run();
        auto done = p.a.poll();
        REQUIRE(done.size() == 1);
        CHECK(done[0].status == PIB_WC_REM_ACCESS_ERR);
        CHECK(p.a.qpState() == PIB_QPS_ERR);
        CHECK(p.b.qpState() == PIB_QPS_ERR);
        auto events = p.b.asyncEvents();
        CHECK(std::count(events.begin(), events.end(), PIB_ASYNC_QP_ACCESS_ERR) == 1);
    }
    SECTION("an atomic on an unaligned address") {
        p.a.postSend(1, {.opcode = PIB_WR_ATOMIC_FETCH_AND_ADD,
                         .local = local,
                         .length = 8,
                         .remote = remote + 4,
                         .swapAdd = 1});
        p.wire.run();
        auto done = p.a.poll();
        REQUIRE(done.size() == 1);
        CHECK(done[0].status == PIB_WC_REM_INV_REQ_ERR);
    }
    SECTION("a SEND larger than the receive buffer") {
        p.b.postRecv(1, remote, 100);
        p.a.postSend(1, {.local = local, .length = 200});
        p.wire.run();
        auto done = p.a.poll();
        REQUIRE(done.size() == 1);
        CHECK(done[0].status == PIB_WC_REM_INV_REQ_ERR);
        auto got = p.b.poll();
        REQUIRE(got.size() == 1);
        CHECK(got[0].status == PIB_WC_LOC_LEN_ERR);
    }
    SECTION("a WRITE the responder cannot DMA: remote operational error") {
        // The MR covers all of physical memory, but nothing is there.
        p.a.postSend(1,
                     {.opcode = PIB_WR_RDMA_WRITE, .local = local, .length = 100, .remote = 0x10});
        p.wire.run();
        auto done = p.a.poll();
        REQUIRE(done.size() == 1);
        CHECK(done[0].status == PIB_WC_REM_OP_ERR);
        CHECK(p.b.qpState() == PIB_QPS_ERR);
    }
    SECTION("a local L_Key that is no key fails before anything is sent") {
        p.a.postSend(1, {.local = local, .length = 100, .lkey = 0x77700});
        p.wire.run();
        auto done = p.a.poll();
        REQUIRE(done.size() == 1);
        CHECK(done[0].status == PIB_WC_LOC_PROT_ERR);
        CHECK(p.wire.seen.empty());
        CHECK(p.a.host.guestErrors("wqe-bad-key") == 1);
    }
}

TEST_CASE("duplicate and out-of-order packets from a hostile peer", "[rc]") {
    Pair p;
    const uint64_t out = p.a.host.alloc(4096), in = p.b.host.alloc(4096);
    p.b.postRecv(1, in, 4096);
    p.b.postRecv(2, in, 4096);
    std::vector<iba::Packet> requests;
    p.wire.filter = [&](bool fromA, iba::Packet &k) {
        if (fromA)
            requests.push_back(k);
        return true;
    };
    p.a.postSend(1, {.local = out, .length = 3000}); // 3 packets
    p.wire.run();
    REQUIRE(requests.size() == 3);
    REQUIRE(p.b.poll().size() == 1);
    auto replay = [&](const iba::Packet &k) {
        const auto f = wire::encode(PIB_WIRE_PACKET, iba::build(k));
        pib_core_port_receive(p.b.host.core, 1, f.data(), f.size());
        p.wire.run();
    };
    // Old middles and the whole message again: ACKed, nothing consumed.
    for (const auto &k : requests)
        replay(k);
    CHECK(p.b.poll().empty());
    CHECK(p.b.qpState() == PIB_QPS_RTS);
    // A packet from the future: one NAK, no state change.
    iba::Packet future = requests[0];
    future.bth.psn = (future.bth.psn + 50) & 0xffffff;
    replay(future);
    replay(future);
    CHECK(std::count_if(p.wire.seen.begin(), p.wire.seen.end(), [](auto &k) {
              return k.bth.opcode == iba::kAcknowledge && k.aeth->syndrome == 0x60;
          }) == 1);
    // A middle where a first is due: invalid request, and B goes to error.
    iba::Packet middle = requests[1];
    middle.bth.psn = (requests[2].bth.psn + 1) & 0xffffff;
    replay(middle);
    CHECK(p.b.qpState() == PIB_QPS_ERR);
    auto flushed = p.b.poll();
    REQUIRE(flushed.size() == 1);
    CHECK(flushed[0].status == PIB_WC_WR_FLUSH_ERR);
}

TEST_CASE("UC: no ACKs, and a lost packet loses only its message", "[uc]") {
    Pair p(PIB_QPT_UC);
    const uint64_t out = p.a.host.alloc(8192), in = p.b.host.alloc(8192);
    p.a.fill(out, 3000, 6);
    p.b.postRecv(1, in, 8192);
    int n = 0;
    p.wire.filter = [&](bool, iba::Packet &k) {
        return !((k.bth.opcode & 0x1f) == iba::kSendMiddle && ++n == 1);
    };
    p.a.postSend(1, {.local = out, .length = 3000}); // loses its middle
    p.a.postSend(2, {.local = out, .length = 3000});
    p.a.postSend(3,
                 {.opcode = PIB_WR_RDMA_WRITE, .local = out, .length = 3000, .remote = in + 4096});
    p.wire.run();
    auto sent = p.a.poll();
    REQUIRE(sent.size() == 3); // complete when sent
    for (auto &c : sent)
        CHECK(c.status == PIB_WC_SUCCESS);
    auto got = p.b.poll();
    REQUIRE(got.size() == 1); // the second message, in the same receive WQE
    CHECK(got[0].wr_id == 1);
    CHECK(got[0].byte_len == 3000);
    CHECK(sameBytes(p.a, out, p.b, in, 3000));
    CHECK(sameBytes(p.a, out, p.b, in + 4096, 3000));
    CHECK(p.wire.count(iba::kAcknowledge) == 0);
    CHECK(p.wire.count(iba::kTransportUc | iba::kWriteFirst) == 1);
}

TEST_CASE("loopback: a QP connected to itself never uses the wire", "[rc]") {
    Node a(PIB_QPT_RC, 0x11);
    a.connect(a, PIB_QPT_RC, {.sqPsn = 300, .rqPsn = 300});
    const uint64_t out = a.host.alloc(4096), in = a.host.alloc(4096);
    a.fill(out, 2000, 1);
    a.postRecv(1, in, 4096);
    a.postSend(2, {.local = out, .length = 2000});
    auto done = a.poll();
    REQUIRE(done.size() == 2);
    CHECK(
        std::all_of(done.begin(), done.end(), [](auto &c) { return c.status == PIB_WC_SUCCESS; }));
    CHECK(std::equal(a.host.at(out), a.host.at(out) + 2000, a.host.at(in)));
    CHECK(a.host.portOutput[1].empty()); // nothing left the port
}
