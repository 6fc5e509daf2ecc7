// SPDX-License-Identifier: GPL-2.0-or-later
// Two devices with connected QPs cabled back to back, for the transport's
// unit tests and the native benchmark: each Node is a device with an
// ACTIVE port and one RC or UC QP; the Wire between them moves packets and
// can drop, hold or rewrite them.
#pragma once

#include <algorithm>
#include <cstring>
#include <deque>
#include <functional>
#include <optional>
#include <stdexcept>
#include <vector>

#include "fake_host.hh"
#include "frame.hh"
#include "mad.hh"
#include "packet.hh"
#include "smp.hh"

namespace pib::testing {

inline void expect(bool ok, const char *what) {
    if (!ok)
        throw std::runtime_error(std::string("fixture: ") + what + " failed");
}

constexpr uint32_t kAccessAll = PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE |
                                PIB_ACCESS_REMOTE_READ | PIB_ACCESS_REMOTE_ATOMIC;

// One device with an ACTIVE port (LID `lid`) and one connected QP. An XRC
// TGT node's QP is in the node's XRC domain `xrcd`.
struct Node {
    FakeHost host;
    uint16_t lid;
    uint8_t type = 0; // of the QP the helpers act on
    uint32_t uar = 0, pd = 0, eqn = 0, cqn = 0, key = 0, qpn = 0, xrcd = 0;
    uint64_t cqPage = 0, sqPage = 0, rqPage = 0, eqPage = 0, ciRecord = 0;
    uint32_t sqPi = 0, rqPi = 0, cqCi = 0;
    static constexpr unsigned kLogCq = 8, kLogSq = 6, kLogRq = 6;
    unsigned logSq = kLogSq; // of the QPs createQp() makes from now on

    Node(uint8_t type, uint16_t lid_, uint64_t ramSize = FakeHost::kDefaultRamSize)
        : host(FakeHost::defaultConfig(), ramSize), lid(lid_) {
        host.initHca();
        uar = static_cast<uint32_t>(host.command(PIB_CMD_ALLOC_UAR).result);
        pd = static_cast<uint32_t>(host.command(PIB_CMD_ALLOC_PD).result);
        const FakeHost::Eq eq = host.createEq(6, PIB_EQ_ASYNC);
        eqn = eq.eqn, eqPage = eq.page;
        const FakeHost::Cq cq = host.createCq(eqn, uar, kLogCq, 4);
        cqn = cq.cqn, cqPage = cq.page, ciRecord = cq.ciRecord;
        key = host.createPhysicalMr(pd, kAccessAll);
        xrcd = static_cast<uint32_t>(host.command(PIB_CMD_ALLOC_XRCD).result);
        createQp(type);
        // Train the link, then configure the port as an SM would.
        pib_core_port_connected(host.core, 1, 1);
        pib_wire_hello hello{};
        const auto frame = wire::encode(
            PIB_WIRE_HELLO, std::span(reinterpret_cast<const uint8_t *>(&hello), sizeof(hello)));
        pib_core_port_receive(host.core, 1, frame.data(), frame.size());
        for (uint8_t state : {PIB_PORT_ARMED, PIB_PORT_ACTIVE})
            setPortState(state);
        host.portOutput[1].clear();
    }

    // A QP on this device (its PD, CQ and MR), which the helpers below then
    // act on; use() switches between QPs.
    struct Qp {
        uint32_t qpn;
        uint64_t sqPage, rqPage;
        uint32_t sqPi, rqPi;
        uint8_t type;
    };
    // With an SRQ, the QP has no receive queue of its own; an XRC INI QP
    // has none either, an XRC TGT QP no queue at all (objects.hh).
    Qp createQp(uint8_t qpType, std::optional<uint32_t> srqn = std::nullopt) {
        type = qpType;
        pib_qp_context qp{};
        qp.type = qpType;
        std::vector<uint64_t> pages;
        sqPage = rqPage = 0;
        if (qpType == PIB_QPT_XRC_TGT) {
            qp.xrcdn = xrcd;
            qpn = static_cast<uint32_t>(host.commandIn(PIB_CMD_CREATE_QP, 0, qp).result);
            expect(qpn >= PIB_FIRST_QPN, "CREATE_QP XRC TGT");
            sqPi = rqPi = 0;
            return current();
        }
        qp.pdn = pd;
        qp.send_cqn = qp.recv_cqn = cqn;
        qp.uar_page = uar;
        qp.port = 1;
        qp.sq_log_wqe_count = static_cast<uint8_t>(logSq);
        qp.sq_log_wqe_stride = 7;
        qp.sq_buf = host.ring(std::max(1u, (128u << logSq) / PIB_PAGE_SIZE), &pages);
        sqPage = pages.front();
        if (qpType == PIB_QPT_XRC_INI) {
        } else if (srqn) {
            qp.flags = PIB_QP_USE_SRQ;
            qp.srqn = *srqn;
            rqPage = 0;
        } else {
            qp.rq_log_wqe_count = kLogRq;
            qp.rq_log_wqe_stride = 6;
            qp.rq_buf = host.ring(1, &pages);
            rqPage = pages.back();
        }
        qpn = static_cast<uint32_t>(host.commandIn(PIB_CMD_CREATE_QP, 0, qp).result);
        expect(qpn >= PIB_FIRST_QPN || qpType == PIB_QPT_SMI || qpType == PIB_QPT_GSI, "CREATE_QP");
        sqPi = rqPi = 0;
        return current();
    }
    Qp current() const { return {qpn, sqPage, rqPage, sqPi, rqPi, type}; }
    void use(const Qp &q) {
        qpn = q.qpn, sqPage = q.sqPage, rqPage = q.rqPage, sqPi = q.sqPi, rqPi = q.rqPi;
        type = q.type;
    }

    void portInfoSet(const std::function<void(iba::Mad &)> &fill) {
        pib_mad_ifc response;
        expect(
            host.mad(iba::kClassSmpLid, iba::kSet, iba::kAttrPortInfo, 1, fill, &response).status ==
                PIB_CMD_STATUS_OK,
            "MAD_IFC");
    }

    // The PortInfo Set an SM sends to take the port to `state`: this
    // node's LID, NeighborMTU 4096.
    void setPortState(uint8_t state) {
        portInfoSet([&](iba::Mad &m) {
            iba::writePortInfo(m, {.lid = lid, .portState = state, .neighborMtu = PIB_MTU_4096});
        });
    }

    void modify(pib_qp_attr a) {
        expect(host.commandIn(PIB_CMD_MODIFY_QP, qpn, a).status == PIB_CMD_STATUS_OK, "MODIFY_QP");
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
        uint32_t qpAccess = kAccessAll & ~PIB_ACCESS_LOCAL_WRITE;
    };

    // INIT -> RTR -> RTS, connected to `peer`.
    void connect(const Node &peer, uint8_t type, const Options &o) {
        connectTo(peer.lid, peer.qpn, type, o);
    }
    // The same to QP `peerQpn` behind LID `peerLid`.
    void connectTo(uint16_t peerLid, uint32_t peerQpn, uint8_t type, const Options &o) {
        pib_qp_attr a{};
        a.attr_mask = PIB_QP_STATE | PIB_QP_PKEY_INDEX | PIB_QP_PORT | PIB_QP_ACCESS_FLAGS;
        a.qp_state = PIB_QPS_INIT;
        a.port_num = 1;
        a.qp_access_flags = o.qpAccess;
        modify(a);
        a = {};
        a.attr_mask = PIB_QP_STATE | PIB_QP_AV | PIB_QP_PATH_MTU | PIB_QP_DEST_QPN | PIB_QP_RQ_PSN;
        if (type == PIB_QPT_RC || type == PIB_QPT_XRC_TGT) // a responder's limits
            a.attr_mask |= PIB_QP_MAX_DEST_RD_ATOMIC | PIB_QP_MIN_RNR_TIMER;
        a.qp_state = PIB_QPS_RTR;
        a.av.dlid = peerLid;
        a.av.port = 1;
        a.path_mtu = o.mtu;
        a.dest_qp_num = peerQpn;
        a.rq_psn = o.rqPsn;
        a.max_dest_rd_atomic = o.maxRdAtomic;
        a.min_rnr_timer = o.minRnrTimer;
        modify(a);
        a = {};
        a.attr_mask = PIB_QP_STATE | PIB_QP_SQ_PSN;
        if (type == PIB_QPT_RC || type == PIB_QPT_XRC_INI) // a requester's
            a.attr_mask |=
                PIB_QP_TIMEOUT | PIB_QP_RETRY_CNT | PIB_QP_RNR_RETRY | PIB_QP_MAX_QP_RD_ATOMIC;
        else if (type == PIB_QPT_XRC_TGT)
            a.attr_mask |= PIB_QP_TIMEOUT;
        a.qp_state = PIB_QPS_RTS;
        a.sq_psn = o.sqPsn;
        a.timeout = o.timeout;
        a.retry_cnt = o.retryCnt;
        a.rnr_retry = o.rnrRetry;
        a.max_rd_atomic = o.maxRdAtomic;
        modify(a);
    }

    // Rings a doorbell, then lets the host's main loop run what it
    // scheduled (unless a test looks between the two): what a send
    // completes waits for the end of its doorbell write.
    bool runAfterDoorbell = true;
    void ring(uint32_t offset, uint32_t value) {
        pib_core_bar_write(host.core, PIB_BAR_DOORBELL, uint64_t{uar} * PIB_PAGE_SIZE + offset,
                           uint64_t{value} << 32 | qpn, 8);
        if (runAfterDoorbell)
            host.runScheduled();
    }

    void postRecv(uint64_t wrId, uint64_t buf, uint32_t len) {
        host.writeRecvWqe(rqPage + (rqPi % (1u << kLogRq)) * 64, wrId, key, buf, len);
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
        uint32_t rkey = 0; // 0: the node's own key (the peer's MR has the same)
        uint32_t srqn = 0; // XRC INI: the remote XRC SRQ
    };

    // Writes a send WQE; rings the doorbell unless told not to.
    void postSend(uint64_t wrId, const Send &s, bool ring_ = true) {
        const uint64_t slot = sqPage + (sqPi % (1u << logSq)) * 128;
        pib_wqe_ctrl ctrl{};
        ctrl.wr_id = wrId;
        ctrl.opcode = s.opcode;
        ctrl.flags = s.flags;
        ctrl.imm = s.imm;
        uint64_t at = slot + 16;
        if (type == PIB_QPT_XRC_INI) {
            host.poke(at, pib_wqe_xrc{s.srqn, {}});
            at += 16;
        }
        if (s.opcode != PIB_WR_SEND && s.opcode != PIB_WR_SEND_IMM && s.opcode != PIB_WR_SEND_INV) {
            host.poke(at, pib_wqe_raddr{s.remote, s.rkey ? s.rkey : key, 0});
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

    // IBA 1.5's FLUSH or ATOMIC WRITE: the remote address, then the FLUSH
    // segment or the 8 bytes, and no data.
    struct Placement {
        uint8_t opcode = PIB_WR_FLUSH;
        uint64_t remote = 0;
        uint32_t rkey = 0; // 0: the node's own key
        uint32_t length = 0;
        uint8_t placement = PIB_FLUSH_GLOBAL;
        uint8_t selectivity = PIB_FLUSH_RANGE;
        uint64_t value = 0; // ATOMIC WRITE: the 8 bytes, in memory order
        uint8_t flags = PIB_WQE_SIGNALED;
    };
    void postPlacement(uint64_t wrId, const Placement &s) {
        const uint64_t slot = sqPage + (sqPi % (1u << logSq)) * 128;
        pib_wqe_ctrl ctrl{};
        ctrl.wr_id = wrId;
        ctrl.opcode = s.opcode;
        ctrl.flags = s.flags;
        ctrl.num_ds = 3;
        host.poke(slot, ctrl);
        host.poke(slot + 16, pib_wqe_raddr{s.remote, s.rkey ? s.rkey : key, 0});
        if (s.opcode == PIB_WR_FLUSH)
            host.poke(slot + 32, pib_wqe_flush{s.length, s.placement, s.selectivity, 0, 0});
        else
            host.poke(slot + 32, pib_wqe_atomic{s.value, 0});
        ring(PIB_DB_SQ, ++sqPi);
    }

    // A local operation's WQE: LOCAL_INV of `key`, REG_MR of `reg`, or
    // BIND_MW of `bind`.
    void postLocalInv(uint64_t wrId, uint32_t invalidKey, uint8_t flags = PIB_WQE_SIGNALED) {
        postLocal(wrId, PIB_WR_LOCAL_INV, flags, invalidKey, nullptr, 0);
    }
    void postRegMr(uint64_t wrId, const pib_wqe_reg_mr &reg, uint8_t flags = PIB_WQE_SIGNALED) {
        postLocal(wrId, PIB_WR_REG_MR, flags, 0, &reg, sizeof(reg));
    }
    void postBind(uint64_t wrId, const pib_wqe_bind_mw &bind, uint8_t flags = PIB_WQE_SIGNALED) {
        postLocal(wrId, PIB_WR_BIND_MW, flags, 0, &bind, sizeof(bind));
    }
    // A UD SEND of `len` bytes at `buf` to the address and QP `ud` names.
    void postDatagram(uint64_t wrId, const pib_wqe_ud &ud, uint64_t buf, uint32_t len) {
        const uint64_t slot = sqPage + (sqPi % (1u << logSq)) * 128;
        pib_wqe_ctrl ctrl{};
        ctrl.wr_id = wrId;
        ctrl.opcode = PIB_WR_SEND;
        ctrl.flags = PIB_WQE_SIGNALED;
        ctrl.num_ds = 5;
        host.poke(slot, ctrl);
        host.poke(slot + 16, ud);
        host.poke(slot + 64, pib_wqe_data{len, key, buf});
        ring(PIB_DB_SQ, ++sqPi);
    }
    void postLocal(uint64_t wrId, uint8_t opcode, uint8_t flags, uint32_t imm, const void *segment,
                   size_t size) {
        const uint64_t slot = sqPage + (sqPi % (1u << logSq)) * 128;
        pib_wqe_ctrl ctrl{};
        ctrl.wr_id = wrId;
        ctrl.opcode = opcode;
        ctrl.flags = flags;
        ctrl.imm = imm;
        uint64_t at = slot + 16;
        if (type == PIB_QPT_XRC_INI) {
            host.poke(at, pib_wqe_xrc{});
            at += 16;
        }
        ctrl.num_ds = static_cast<uint8_t>((at - slot + size) / 16);
        if (size)
            std::memcpy(host.at(at), segment, size);
        host.poke(slot, ctrl);
        if (++sqPi, !deferDoorbell)
            ring(PIB_DB_SQ, sqPi);
    }
    bool deferDoorbell = false; // postLocal: the caller rings it for many WQEs

    // A fast-registration MR of `pd` with room for `pages` pages (free).
    uint32_t createFastRegMr(uint32_t pages, uint32_t inPd = UINT32_MAX) {
        const auto mtt = host.command(PIB_CMD_ALLOC_MTT, 0, pages);
        expect(mtt.status == PIB_CMD_STATUS_OK, "ALLOC_MTT");
        pib_mr_context c{};
        c.pdn = inPd == UINT32_MAX ? pd : inPd;
        c.flags = PIB_MR_FAST_REG;
        c.mtt_index = static_cast<uint32_t>(mtt.result);
        c.mtt_count = pages;
        const auto mr = host.commandIn(PIB_CMD_CREATE_MR, 0, c);
        expect(mr.status == PIB_CMD_STATUS_OK, "CREATE_MR fast registration");
        return static_cast<uint32_t>(mr.result);
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
        host.poke(ciRecord, cqCi); // as a driver tells the device how far it got
        return out;
    }

    std::vector<uint8_t> asyncEvents() { return host.asyncEvents(eqPage, 64); }

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

// A driver's SRQ on node `n`: its ring, the WQEs posted (pi) and seen
// completed (ci). An XRC SRQ is in the node's XRC domain and completes to
// CQ `cqn`.
struct Srq {
    static constexpr unsigned kStride = 6; // 64-byte receive WQEs: one data segment
    Node &n;
    uint32_t srqn = 0;
    uint64_t page = 0;
    unsigned log = 0;
    uint32_t pi = 0, ci = 0;

    uint64_t slot(uint32_t i) const { return page + (uint64_t{i & ((1u << log) - 1)} << kStride); }
    void post(uint64_t wrId, uint64_t buf, uint32_t len = 1024) {
        n.host.writeRecvWqe(slot(pi), wrId, n.key, buf, len);
        pib_core_bar_write(n.host.core, PIB_BAR_DOORBELL,
                           uint64_t{n.uar} * PIB_PAGE_SIZE + PIB_DB_SRQ,
                           uint64_t{++pi} << 32 | srqn, 8);
    }
};

// A ring of 2^log receive WQEs for an SRQ of `n`.
inline pib_srq_context ringOf(Node &n, unsigned log, uint64_t *page) {
    pib_srq_context c{};
    std::vector<uint64_t> pages;
    c.buf = n.host.ring(std::max(1u, (1u << (log + Srq::kStride)) / PIB_PAGE_SIZE), &pages);
    c.log_wqe_count = static_cast<uint8_t>(log);
    c.log_wqe_stride = Srq::kStride;
    *page = pages.front();
    return c;
}

struct XrcSrq {
    uint32_t xrcd, cqn;
    uint32_t pd = UINT32_MAX; // UINT32_MAX: the node's PD
};

inline Srq createSrq(Node &n, unsigned log, std::optional<XrcSrq> xrc = std::nullopt) {
    Srq s{n};
    pib_srq_context c = ringOf(n, log, &s.page);
    c.pdn = n.pd;
    c.uar_page = n.uar;
    if (xrc) {
        c.type = PIB_SRQT_XRC;
        c.xrcdn = xrc->xrcd;
        c.cqn = xrc->cqn;
        if (xrc->pd != UINT32_MAX)
            c.pdn = xrc->pd;
    }
    const auto r = n.host.commandIn(PIB_CMD_CREATE_SRQ, 0, c);
    expect(r.status == PIB_CMD_STATUS_OK, "CREATE_SRQ");
    s.srqn = static_cast<uint32_t>(r.result);
    s.log = log;
    return s;
}

// The cable between two nodes. Each packet passes the filter, which may
// drop it (false), change it, or just look.
struct Wire {
    Node &a, &b;
    std::function<bool(bool fromA, iba::Packet &)> filter;
    // Every packet, as sent. A deque: a long faulty-cable run sees tens of
    // thousands, and a vector copied them all at each growth.
    std::deque<iba::Packet> seen;
    wire::FrameReader readers[2];
    bool inspect = true; // false: bytes pass unparsed (benchmarks)
    std::vector<uint8_t> spare[2];

    // Moves packets, and runs the work each device postponed (as QEMU's
    // main loop runs a bottom half), until both sides are quiet.
    void run(int rounds = 100000) {
        for (int r = 0; r < rounds; ++r) {
            // Every step each round, whatever the others did.
            const bool movedAb = move(a, b, 0);
            const bool movedBa = move(b, a, 1);
            const bool ranA = a.host.runScheduled();
            const bool ranB = b.host.runScheduled();
            if (!movedAb && !movedBa && !ranA && !ranB)
                return;
        }
    }

    bool move(Node &from, Node &to, int side) {
        if (from.host.portOutput[1].empty())
            return false;
        // Swap buffers rather than move them: their capacity is kept, so
        // a benchmark measures the device, not fresh pages for the cable.
        auto &bytes = spare[side];
        bytes.swap(from.host.portOutput[1]);
        from.host.portDrained(1);
        if (!inspect) { // straight through, as a cable would
            pib_core_port_receive(to.host.core, 1, bytes.data(), bytes.size());
            bytes.clear();
            return true;
        }
        readers[side].feed(bytes);
        bytes.clear();
        wire::FrameReader::Error error;
        while (auto frame = readers[side].next(&error)) {
            if (frame->type != PIB_WIRE_PACKET)
                continue;
            iba::ParseError perr;
            auto packet = iba::parse(frame->payload, &perr);
            expect(packet.has_value(), "a packet on the wire does not parse");
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
    Wire wire{a, b, {}, {}, {}, true, {}};
    Pair(uint8_t type = PIB_QPT_RC, Node::Options o = {},
         uint64_t ramSize = FakeHost::kDefaultRamSize)
        : a(type, 0x11, ramSize), b(type, 0x22, ramSize) {
        a.connect(b, type, o);
        Node::Options ob = o;
        std::swap(ob.sqPsn, ob.rqPsn);
        b.connect(a, type, ob);
    }
};

// An XRC INI QP on `a` connected to an XRC TGT QP on `b`, and two XRC SRQs
// in b's domain: `red` completes to b's CQ, `blue` to a CQ of its own.
struct XrcPair {
    Node a{PIB_QPT_XRC_INI, 0x11}, b{PIB_QPT_XRC_TGT, 0x22};
    Wire wire{a, b, {}, {}, {}, true, {}};
    FakeHost::Cq blueCq = b.host.createCq(b.eqn, b.uar, Node::kLogCq, 4);
    Srq red = createSrq(b, 4, XrcSrq{b.xrcd, b.cqn});
    Srq blue = createSrq(b, 4, XrcSrq{b.xrcd, blueCq.cqn});

    XrcPair() {
        a.connect(b, PIB_QPT_XRC_INI, {});
        Node::Options ob;
        std::swap(ob.sqPsn, ob.rqPsn);
        b.connect(a, PIB_QPT_XRC_TGT, ob);
    }

    // New completions on the blue SRQ's CQ.
    std::vector<pib_cqe> pollBlue() {
        std::vector<pib_cqe> out;
        for (;;) {
            const pib_cqe c =
                b.host.peek<pib_cqe>(blueCq.page + (blueCi % (1u << Node::kLogCq)) * PIB_CQE_SIZE);
            if ((c.flags & PIB_CQE_PHASE) != (((blueCi >> Node::kLogCq) & 1) ^ 1))
                break;
            out.push_back(c);
            ++blueCi;
        }
        b.host.poke(blueCq.ciRecord, blueCi);
        return out;
    }
    uint32_t blueCi = 0;
};

} // namespace pib::testing
