// SPDX-License-Identifier: GPL-2.0-or-later
// libFuzzer harness of the device core, through its C interface with the
// unit tests' fake host. Each input starts from a device a driver set up
// (fuzz_core_target.hh): an attacker's QPs of every type connected to a
// peer behind LID 0x22, and a second tenant. The input then plays that
// peer and the attacker's user-space process: whole messages of every
// opcode to the responders at the PSNs they expect (some spoiled),
// answers to the requesters, WQEs of every kind, receive WQEs, local
// memory operations, QP state changes, queue resizes, any packet, raw
// stream bytes, timers, link flaps, a host queue that fills up, the
// host's test facilities. The harness keeps the QPs alive: one that went
// to the error state is flushed, reset and connected again with fresh
// PSNs. One input in four is also the driver itself: any command,
// register or doorbell page, resets, DMA aimed at the device's own BAR0.
//
// Findings: any ASan or UBSan report; an internal error that makes the
// device FATAL; and, for a driver keeping to the rules, a broken oracle
// (fuzz_core_ledger.hh, fuzz_core_memory.hh): a WQE with no CQE or two,
// a CQE for no WQE or on the wrong CQ, a write to memory no MR of the
// attacker's allows, any change to the second tenant's memory, CQ, SRQ
// or window, and WQE copies held beyond the bound of docs/prm.md §7.4.
#include <fuzzer/FuzzedDataProvider.h>

#include <algorithm>
#include <cinttypes>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

#include "connected.hh"
#include "fuzz_core_check.hh"
#include "fuzz_core_peer.hh"
#include "fuzz_core_target.hh"
#include "limits.hh"

using namespace pib;
using namespace pib::fuzz;

namespace {

constexpr int kSteps = 200;
constexpr uint32_t kAccessAllMw = testing::kAccessAll | PIB_ACCESS_MW_BIND;

// PIB_FUZZ_LOG=1 shows each step and what the device reported, to replay
// a finding.
bool logged() {
    static const bool on = std::getenv("PIB_FUZZ_LOG") != nullptr;
    return on;
}

template <class E> E pickEnum(FuzzedDataProvider &in) {
    return static_cast<E>(in.ConsumeIntegralInRange<int>(0, static_cast<int>(E::kCount) - 1));
}

// ---- the peer ---------------------------------------------------------------------

Qp &pickResponder(FuzzedDataProvider &in, Target &t) {
    Qp *responders[] = {&t.rc, &t.uc, &t.srqQp, &t.xrcTgt};
    return *responders[in.ConsumeIntegralInRange<size_t>(0, std::size(responders) - 1)];
}

uint32_t pickMessageLength(FuzzedDataProvider &in, const Qp &q) {
    const uint32_t mtu = q.mtu();
    switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0:
        return 0;
    case 1: // whole packets
        return mtu * in.ConsumeIntegralInRange<uint32_t>(1, 4);
    case 2:
        return in.ConsumeIntegralInRange<uint32_t>(0, 16 * mtu);
    default:
        return in.ConsumeIntegralInRange<uint32_t>(0, 3 * mtu);
    }
}

// The R_Key a SEND with invalidate names: mostly one the responder's QP
// may invalidate (the fast-registration region, a type 2 window bound to
// it), sometimes one it may not.
uint32_t pickKeyToInvalidate(FuzzedDataProvider &in, const Target &t) {
    switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0:
        return t.keys.windows[1].key;
    case 1:
        return t.pickKey(in);
    default:
        return t.keys.fastReg;
    }
}

// The memory a WRITE, READ or atomic names: mostly what the attacker's
// keys allow, sometimes anything.
void pickRemoteRange(FuzzedDataProvider &in, const Target &t, Message &m) {
    switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0:
    case 1:
        m.va = t.pickAddress(in);
        m.rkey = t.pickKey(in);
        return;
    case 2: { // on demand: it may fault
        const pib_wqe_data d = t.pickPagedBuffer(in, m.length);
        m.va = d.addr;
        m.rkey = d.lkey;
        return;
    }
    default:
        break;
    }
    const bool atomic = m.op == Operation::kCompareSwap || m.op == Operation::kFetchAdd ||
                        m.op == Operation::kAtomicWrite;
    const uint64_t room = kDataSize - std::min<uint64_t>(kDataSize, atomic ? 8 : m.length);
    m.va = t.data + in.ConsumeIntegralInRange<uint64_t>(0, room);
    if (atomic)
        m.va &= ~uint64_t{7};
    m.rkey = t.keys.data;
}

// The SRQ a message to the XRC TGT QP names: mostly its domain's XRC SRQ;
// sometimes the tenant's, a basic SRQ or any number, which it must refuse.
uint32_t pickXrcSrq(FuzzedDataProvider &in, const Target &t) {
    switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0:
        return t.tenant.srqn;
    case 1:
        return t.srq.srqn;
    case 2:
        return in.ConsumeIntegralInRange(0u, 0xffffffu);
    default:
        return t.xrcSrq.srqn;
    }
}

Message pickMessage(FuzzedDataProvider &in, const Target &t, const Qp &q) {
    Message m;
    m.op = pickEnum<Operation>(in);
    m.length = pickMessageLength(in, q);
    pickRemoteRange(in, t, m);
    m.imm = in.ConsumeIntegral<uint32_t>();
    if (m.op == Operation::kSendInv)
        m.invalidate = pickKeyToInvalidate(in, t);
    m.xrcSrqn = pickXrcSrq(in, t);
    m.swapAdd = in.ConsumeIntegral<uint64_t>();
    m.compare = in.ConsumeIntegral<uint64_t>();
    m.fill = in.ConsumeIntegral<uint8_t>();
    m.solicited = in.ConsumeBool();
    return m;
}

void peerSendsMessage(FuzzedDataProvider &in, Target &t, Peer &peer) {
    Qp &q = pickResponder(in, t);
    if (in.ConsumeIntegralInRange(0, 7) == 0) {
        peer.sendAgain(q, in);
        return;
    }
    if (!q.rest.empty() && in.ConsumeIntegralInRange(0, 3)) {
        peer.sendRest(q, in);
        return;
    }
    const Message m = pickMessage(in, t, q);
    // A message is often sent in two parts, so that a QP's state change,
    // a resize or an SRQ's end comes in the middle.
    Spoil spoil = Spoil::kNone;
    switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0:
        spoil = pickEnum<Spoil>(in);
        break;
    case 1:
        spoil = Spoil::kHoldBack;
        break;
    default:
        break;
    }
    peer.sendMessage(q, m, spoil, in);
}

void peerAnswers(FuzzedDataProvider &in, Target &t, Peer &peer) {
    Qp *requesters[] = {&t.rc, &t.srqQp, &t.xrcIni};
    Qp &q = *requesters[in.ConsumeIntegralInRange<size_t>(0, std::size(requesters) - 1)];
    for (int n = in.ConsumeIntegralInRange(1, 4); n > 0; --n) {
        const Answer how = in.ConsumeIntegralInRange(0, 7) ? Answer::kRight : pickEnum<Answer>(in);
        peer.answer(q, how, in);
    }
}

// ---- the attacker's process ------------------------------------------------------------

Qp &pickQpWithSendQueue(FuzzedDataProvider &in, Target &t) {
    Qp *qps[] = {&t.rc, &t.uc, &t.srqQp, &t.xrcIni, &t.ud, &t.smi, &t.gsi};
    return *qps[in.ConsumeIntegralInRange<size_t>(0, std::size(qps) - 1)];
}

void pickData(FuzzedDataProvider &in, const Target &t, WorkRequest &wr) {
    if (in.ConsumeIntegralInRange(0, 5) == 0) {
        wr.inlineData = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 96));
        return;
    }
    for (int n = in.ConsumeIntegralInRange(1, 4); n > 0; --n)
        wr.sges.push_back(t.pickSge(in));
}

WorkRequest connectedRequest(FuzzedDataProvider &in, const Target &t, const Qp &q) {
    static constexpr uint8_t kReliableOps[] = {PIB_WR_SEND,
                                               PIB_WR_SEND_IMM,
                                               PIB_WR_SEND_INV,
                                               PIB_WR_RDMA_WRITE,
                                               PIB_WR_RDMA_WRITE_IMM,
                                               PIB_WR_RDMA_READ,
                                               PIB_WR_ATOMIC_CMP_AND_SWP,
                                               PIB_WR_ATOMIC_FETCH_AND_ADD,
                                               PIB_WR_FLUSH,
                                               PIB_WR_ATOMIC_WRITE};
    WorkRequest wr;
    // UC has the first five but SEND with invalidate (IBA 9.4.1).
    const size_t ops = q.type == PIB_QPT_UC ? 5 : std::size(kReliableOps);
    wr.opcode = kReliableOps[in.ConsumeIntegralInRange<size_t>(0, ops - 1)];
    if (q.type == PIB_QPT_UC && wr.opcode == PIB_WR_SEND_INV)
        wr.opcode = PIB_WR_SEND;
    wr.imm = wr.opcode == PIB_WR_SEND_INV ? t.pickKey(in) : in.ConsumeIntegral<uint32_t>();
    wr.remoteSrqn = in.ConsumeIntegralInRange(0u, 0xffffffu);
    const bool atomic =
        wr.opcode == PIB_WR_ATOMIC_CMP_AND_SWP || wr.opcode == PIB_WR_ATOMIC_FETCH_AND_ADD;
    if (wr.opcode >= PIB_WR_RDMA_WRITE && wr.opcode <= PIB_WR_ATOMIC_FETCH_AND_ADD)
        wr.raddr = pib_wqe_raddr{in.ConsumeIntegral<uint64_t>(), in.ConsumeIntegral<uint32_t>(), 0};
    if (wr.opcode == PIB_WR_FLUSH || wr.opcode == PIB_WR_ATOMIC_WRITE) {
        // IBA 1.5: the remote address, then the FLUSH segment or the 8
        // bytes, and no data; placement and selectivity mostly valid.
        wr.raddr = pib_wqe_raddr{in.ConsumeIntegral<uint64_t>(), in.ConsumeIntegral<uint32_t>(), 0};
        if (wr.opcode == PIB_WR_ATOMIC_WRITE)
            wr.atomic = pib_wqe_atomic{in.ConsumeIntegral<uint64_t>(), 0};
        else
            wr.flush = pib_wqe_flush{in.ConsumeIntegral<uint32_t>(),
                                     in.ConsumeIntegralInRange<uint8_t>(0, 4),
                                     in.ConsumeIntegralInRange<uint8_t>(0, 2), 0, 0};
    } else if (atomic) {
        wr.atomic = pib_wqe_atomic{in.ConsumeIntegral<uint64_t>(), in.ConsumeIntegral<uint64_t>()};
        const auto at = in.ConsumeIntegralInRange<uint64_t>(0, kDataSize / 8 - 1) * 8;
        wr.sges.push_back({8, t.keys.data, t.data + at});
    } else if (wr.opcode == PIB_WR_RDMA_READ) {
        wr.sges.push_back(t.pickSge(in)); // what a READ fetches lands in memory: never inline
    } else {
        pickData(in, t, wr);
    }
    return wr;
}

// A datagram to the peer, back to the UD QP itself, to the multicast
// group or anywhere.
WorkRequest datagramRequest(FuzzedDataProvider &in, const Target &t) {
    WorkRequest wr;
    wr.opcode = in.ConsumeBool() ? PIB_WR_SEND : PIB_WR_SEND_IMM;
    wr.imm = in.ConsumeIntegral<uint32_t>();
    pib_wqe_ud ud{};
    ud.av.port = 1;
    ud.remote_qkey = in.ConsumeBool() ? kQkey : in.ConsumeIntegral<uint32_t>();
    switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0:
        ud.av.dlid = kLid;
        ud.remote_qpn = in.ConsumeBool() ? t.ud.qpn : in.ConsumeIntegralInRange(0u, 1u);
        break;
    case 1:
        ud.av.dlid = kMlid;
        ud.av.flags = PIB_AV_GRH;
        ud.av.dgid[0] = 0xff;
        ud.av.dgid[15] = 1;
        ud.remote_qpn = iba::kMulticastQpn;
        break;
    case 2:
        ud.av.dlid = in.ConsumeIntegral<uint16_t>();
        ud.remote_qpn = in.ConsumeIntegral<uint32_t>();
        break;
    default:
        ud.av.dlid = kPeerLid;
        ud.remote_qpn = kPeerQpn;
        break;
    }
    wr.ud = ud;
    pickData(in, t, wr);
    return wr;
}

// A WQE a verbs user would post. Most are signaled: a driver keeps
// some in every ring's worth so that it learns the ring has room.
void postWork(FuzzedDataProvider &in, Target &t) {
    Qp &q = pickQpWithSendQueue(in, t);
    WorkRequest wr = q.connected() ? connectedRequest(in, t, q) : datagramRequest(in, t);
    wr.flags = in.ConsumeIntegralInRange(0, 7) ? PIB_WQE_SIGNALED : 0;
    if (in.ConsumeIntegralInRange(0, 7) == 0)
        wr.flags |= PIB_WQE_FENCE;
    if (in.ConsumeBool())
        wr.flags |= PIB_WQE_SOLICITED;
    t.postSend(q, wr);
}

void postReceives(FuzzedDataProvider &in, Target &t) {
    const int where = in.ConsumeIntegralInRange(0, 6);
    for (int n = in.ConsumeIntegralInRange(1, 8); n > 0; --n) {
        std::vector<pib_wqe_data> sges;
        for (int s = in.ConsumeIntegralInRange(1, 3); s > 0; --s)
            sges.push_back(t.pickSge(in));
        switch (where) {
        case 0:
            t.postSrqRecv(t.srq, sges);
            break;
        case 1:
            t.postSrqRecv(t.xrcSrq, sges);
            break;
        default: {
            Qp *qps[] = {&t.rc, &t.uc, &t.ud, &t.smi, &t.gsi};
            t.postRecv(*qps[where - 2], sges);
            break;
        }
        }
    }
}

// REG_MR of the fast-registration region over pages of the data area.
// The page list names guest pages: a driver writes it, never the user.
WorkRequest registerFastRegion(FuzzedDataProvider &in, Target &t, KeyChange &change) {
    pib_wqe_reg_mr reg{};
    reg.key = in.ConsumeIntegralInRange(0, 7)
                  ? withVariant(t.keys.fastReg, in.ConsumeIntegral<uint8_t>())
                  : t.pickKey(in);
    reg.iova = in.ConsumeBool() ? 0x70000000 + in.ConsumeIntegralInRange<uint64_t>(0, 0x3000)
                                : in.ConsumeIntegral<uint64_t>();
    reg.length = in.ConsumeIntegralInRange<uint64_t>(1, 3 * PIB_PAGE_SIZE);
    reg.log_page_size = 12;
    const uint64_t pages = ((reg.iova + reg.length - 1) >> 12) - (reg.iova >> 12) + 1;
    reg.page_count = static_cast<uint32_t>(pages) + (in.ConsumeIntegralInRange(0, 15) ? 0 : 1);
    reg.access = in.ConsumeIntegralInRange(0, 3) ? kAccessAllMw : in.ConsumeIntegralInRange(0, 31);
    reg.page_list = t.pageList;
    for (uint32_t i = 0; i < std::min<uint32_t>(reg.page_count, 8); ++i) {
        const uint64_t page =
            t.data +
            in.ConsumeIntegralInRange<uint64_t>(0, kDataSize / PIB_PAGE_SIZE - 1) * PIB_PAGE_SIZE;
        t.memory.poke(t.pageList + i * 8, page);
    }
    t.keys.fastRegIova = reg.iova;
    change = {KeyChange::Kind::kRegister, reg.key};
    WorkRequest wr;
    wr.opcode = PIB_WR_REG_MR;
    wr.reg = reg;
    return wr;
}

WorkRequest invalidateKey(FuzzedDataProvider &in, Target &t, KeyChange &change) {
    WorkRequest wr;
    wr.opcode = PIB_WR_LOCAL_INV;
    wr.imm = pickKeyToInvalidate(in, t);
    change = {KeyChange::Kind::kInvalidate, wr.imm};
    return wr;
}

// BIND_MW of a window to a range of one of the regions that allow it.
WorkRequest bindWindow(FuzzedDataProvider &in, Target &t, const Qp &q, KeyChange &change) {
    const unsigned window = in.ConsumeBool();
    struct Region {
        uint32_t key;
        uint64_t start, length;
    };
    const Region regions[] = {{t.keys.data, t.data, kDataSize},
                              {t.keys.mtt, kMttIova, 4 * PIB_PAGE_SIZE},
                              {t.keys.fastReg, t.keys.fastRegIova, 3 * PIB_PAGE_SIZE}};
    const Region &r = regions[in.ConsumeIntegralInRange<size_t>(0, std::size(regions) - 1)];
    pib_wqe_bind_mw bind{};
    bind.mw_key = in.ConsumeIntegralInRange(0, 7) ? t.keys.windows[window].key : t.pickKey(in);
    bind.new_rkey = withVariant(t.windowNumbers[window], in.ConsumeIntegral<uint8_t>());
    bind.mr_key = r.key;
    const uint64_t offset = in.ConsumeIntegralInRange<uint64_t>(0, r.length);
    bind.addr = r.start + offset;
    bind.length = in.ConsumeIntegralInRange<uint64_t>(0, r.length - offset + 1);
    bind.access = in.ConsumeIntegralInRange<uint32_t>(0, 15) & ~PIB_ACCESS_LOCAL_WRITE;
    change = {KeyChange::Kind::kBind, bind.new_rkey, window, q.qpn, window == 0 && !bind.length};
    WorkRequest wr;
    wr.opcode = PIB_WR_BIND_MW;
    wr.bind = bind;
    return wr;
}

void localOperation(FuzzedDataProvider &in, Target &t) {
    Qp *qps[] = {&t.rc, &t.uc, &t.srqQp, &t.xrcIni};
    Qp &q = *qps[in.ConsumeIntegralInRange<size_t>(0, std::size(qps) - 1)];
    KeyChange change;
    WorkRequest wr;
    switch (in.ConsumeIntegralInRange(0, 2)) {
    case 0:
        wr = registerFastRegion(in, t, change);
        break;
    case 1:
        wr = invalidateKey(in, t, change);
        break;
    default:
        wr = bindWindow(in, t, q, change);
        break;
    }
    wr.flags = PIB_WQE_SIGNALED; // the driver learns whether the key changed
    if (const std::optional<uint64_t> wrId = t.postSend(q, wr))
        t.keyChanges[*wrId] = change;
}

// A slot of fields from the input (the wr_id aside), for any QP.
void postAnySend(FuzzedDataProvider &in, Target &t) {
    Qp &q = pickQpWithSendQueue(in, t);
    std::array<uint8_t, kSqStride> slot{};
    pib_wqe_ctrl ctrl{};
    ctrl.opcode = in.ConsumeIntegralInRange<uint8_t>(0, 12);
    // A REG_MR names guest pages by address: only a driver may choose them.
    if (ctrl.opcode == PIB_WR_REG_MR && !t.privileged)
        ctrl.opcode = PIB_WR_BIND_MW;
    ctrl.flags = in.ConsumeIntegral<uint8_t>();
    ctrl.num_ds = in.ConsumeIntegralInRange<uint8_t>(0, 9);
    ctrl.imm = in.ConsumeIntegral<uint32_t>();
    std::memcpy(slot.data(), &ctrl, sizeof(ctrl));
    size_t dataAt = 32; // where data segments start
    if (ctrl.opcode == PIB_WR_REG_MR && in.ConsumeBool()) {
        // Any pages, the device's own BAR0 included.
        pib_wqe_reg_mr reg{};
        reg.iova = t.pickAddress(in);
        reg.length = in.ConsumeIntegralInRange<uint64_t>(0, 5 * PIB_PAGE_SIZE);
        reg.page_list = in.ConsumeIntegralInRange(0, 7) ? t.pageList : t.pickAddress(in);
        reg.key = t.pickKey(in);
        reg.access = in.ConsumeIntegralInRange<uint32_t>(0, 16);
        reg.page_count = in.ConsumeIntegralInRange<uint32_t>(0, 6);
        reg.log_page_size = in.ConsumeIntegralInRange<uint8_t>(11, 13);
        for (uint32_t i = 0; i < reg.page_count; ++i) {
            const uint64_t page = in.ConsumeBool() ? t.data + i * PIB_PAGE_SIZE : t.pickAddress(in);
            t.memory.poke(t.pageList + i * 8, page);
        }
        std::memcpy(slot.data() + 16, &reg, sizeof(reg));
        dataAt = 16 + sizeof(reg);
    } else if (ctrl.opcode == PIB_WR_BIND_MW && in.ConsumeBool()) {
        pib_wqe_bind_mw bind{};
        bind.addr = t.pickAddress(in);
        bind.length = in.ConsumeIntegralInRange<uint64_t>(0, 5 * PIB_PAGE_SIZE);
        bind.mw_key = t.pickKey(in);
        bind.new_rkey = t.pickKey(in);
        bind.mr_key = t.pickKey(in);
        bind.access = in.ConsumeIntegralInRange<uint32_t>(0, 16);
        std::memcpy(slot.data() + 16, &bind, sizeof(bind));
        dataAt = 16 + sizeof(bind);
    } else if (in.ConsumeBool()) { // UD: an address vector and a remote QP
        pib_wqe_ud ud{};
        ud.av.dlid = in.ConsumeBool() ? kPeerLid : in.ConsumeIntegral<uint16_t>();
        ud.av.port = 1;
        ud.av.flags = in.ConsumeBool() ? PIB_AV_GRH : 0;
        ud.remote_qpn = in.ConsumeIntegral<uint32_t>();
        ud.remote_qkey = in.ConsumeIntegral<uint32_t>();
        std::memcpy(slot.data() + 16, &ud, sizeof(ud));
    } else { // connected: a remote address, maybe atomic operands
        const pib_wqe_raddr r{t.pickAddress(in), t.pickKey(in), 0};
        std::memcpy(slot.data() + 16, &r, sizeof(r));
    }
    for (size_t at = dataAt; at + 16 <= slot.size(); at += 16) {
        if (ctrl.flags & PIB_WQE_INLINE && at == dataAt) {
            const uint32_t count = in.ConsumeIntegralInRange<uint32_t>(0, 2000) | PIB_INLINE_FLAG;
            std::memcpy(slot.data() + at, &count, 4);
            continue;
        }
        const pib_wqe_data d{t.pickLength(in), t.pickKey(in), t.pickAddress(in)};
        std::memcpy(slot.data() + at, &d, sizeof(d));
    }
    t.postRawSend(q, slot);
}

// A QP the peer is in the middle of a message to, if any: what happens
// to it then is what a harness of whole messages never gets to.
Qp *midMessage(Target &t) {
    for (Qp *q : t.qps)
        if (!q->rest.empty())
            return q;
    return nullptr;
}

// What a user's ibv_modify_qp may do to its own QP; mostly one that is
// in the middle of a message, when there is one.
void changeQpState(FuzzedDataProvider &in, Target &t) {
    Qp *inMessage = midMessage(t);
    Qp &q = inMessage && in.ConsumeIntegralInRange(0, 3)
                ? *inMessage
                : *t.qps[in.ConsumeIntegralInRange<size_t>(0, t.qps.size() - 1)];
    switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0:
        t.resetDirectly(q);
        break;
    case 1: { // drain the send queue, then (keep-alive) back to RTS
        pib_qp_attr a{};
        a.attr_mask = PIB_QP_STATE | PIB_QP_EN_SQD_ASYNC_NOTIFY;
        a.qp_state = PIB_QPS_SQD;
        a.en_sqd_async_notify = 1;
        t.modifyQp(q, a);
        break;
    }
    default: // a message in progress is cut: its receive WQE completes flushed
        t.moveQp(q, PIB_QPS_ERR);
        break;
    }
    q.suspect = true;
}

// ibv_resize_cq, ibv_modify_cq, ibv_modify_srq(IBV_SRQ_MAX_WR), or the XRC
// SRQ destroyed and made again.
void reshapeQueue(FuzzedDataProvider &in, Target &t) {
    const bool small = in.ConsumeIntegralInRange(0, 7) == 0; // may overrun: the books stop
    if (t.xrcTgt.rest.size() && in.ConsumeBool()) { // the SRQ of a message in progress goes
        t.recreateXrcSrq();
        return;
    }
    switch (in.ConsumeIntegralInRange(0, 5)) {
    case 0:
    case 1: {
        Cq &cq = *t.cqs[in.ConsumeIntegralInRange<size_t>(0, t.cqs.size() - 1)];
        t.resizeCq(cq, small ? in.ConsumeIntegralInRange(1u, 5u)
                             : in.ConsumeIntegralInRange(6u, kMaxCqLog));
        break;
    }
    case 5: { // any count and period, the device's limit and beyond
        Cq &cq = *t.cqs[in.ConsumeIntegralInRange<size_t>(0, t.cqs.size() - 1)];
        t.moderateCq(cq, in.ConsumeIntegral<uint16_t>(),
                     in.ConsumeIntegralInRange<uint16_t>(0, 5000));
        break;
    }
    case 2:
    case 3: {
        Srq &s = in.ConsumeBool() ? t.srq : t.xrcSrq;
        t.resizeSrq(s, small ? in.ConsumeIntegralInRange(1u, 3u)
                             : in.ConsumeIntegralInRange(4u, kMaxSrqLog));
        break;
    }
    default:
        t.recreateXrcSrq();
        break;
    }
}

// Whether a doorbell at this offset moves a producer count of the
// attacker's (a random number may be one too).
bool namesOwnQueue(const Target &t, uint32_t offset, uint32_t number) {
    if (offset == PIB_DB_SRQ)
        return number == t.srq.srqn || number == t.xrcSrq.srqn;
    if (offset != PIB_DB_SQ && offset != PIB_DB_RQ)
        return false;
    return std::any_of(t.qps.begin(), t.qps.end(), [&](const Qp *q) { return q->qpn == number; });
}

// A doorbell of the attacker's own page with any value, mostly naming the
// tenant's queues: the device must refuse those. One that moves the
// attacker's own producer counts makes the device take stale slots, so
// the completion books stop.
void ringAnyDoorbell(FuzzedDataProvider &in, Target &t) {
    static constexpr uint32_t kOffsets[] = {PIB_DB_SQ, PIB_DB_RQ, PIB_DB_SRQ, PIB_DB_CQ_ARM,
                                            PIB_DB_CLOCK};
    const uint32_t offset = kOffsets[in.ConsumeIntegralInRange<size_t>(0, std::size(kOffsets) - 1)];
    const uint32_t foreign[] = {t.tenant.srqn, t.tenant.cqn, t.sendCq.cqn,
                                in.ConsumeIntegral<uint32_t>()};
    uint32_t number = foreign[in.ConsumeIntegralInRange<size_t>(0, std::size(foreign) - 1)];
    if (in.ConsumeIntegralInRange(0, 7) == 0)
        number = in.ConsumeBool() ? t.pickConnected(in).qpn : t.srq.srqn;
    if (namesOwnQueue(t, offset, number))
        t.ledger.stopChecking();
    pib_core_bar_write(t.host.core, PIB_BAR_DOORBELL, uint64_t{t.node.uar} * PIB_PAGE_SIZE + offset,
                       uint64_t{in.ConsumeIntegral<uint32_t>()} << 32 | number,
                       in.ConsumeIntegralInRange(0, 7) ? 8 : 4);
}

// ---- the host ------------------------------------------------------------------------

void linkFlap(FuzzedDataProvider &in, Target &t) {
    pib_core *core = t.host.core;
    t.rings.reset();
    t.ringScribbled = false;
    pib_core_port_connected(core, 1, 0);
    if (in.ConsumeIntegralInRange(0, 3) == 0)
        return;             // stays down for a while
    if (in.ConsumeBool()) { // a switch that takes rings: the device offers
        t.rings = std::make_unique<testing::RingSwitch>(t.host);
        if (in.ConsumeIntegralInRange(0, 3))
            t.rings->answer(in.ConsumeIntegralInRange(0, 7) != 0);
    } else {
        t.host.passesDescriptors = false;
        pib_core_port_connected(core, 1, 1);
        pib_wire_hello hello{};
        const auto frame = wire::encode(PIB_WIRE_HELLO, testing::RingSwitch::bytesOf(hello));
        pib_core_port_receive(core, 1, frame.data(), frame.size());
    }
    if (in.ConsumeIntegralInRange(0, 3))
        t.activatePort(); // the subnet manager sees the port again
}

// A hostile switch and the shared memory of its ring cable: any value in
// any index or doorbell request of either ring, or a doorbell with
// nothing behind it.
void ringScribble(FuzzedDataProvider &in, Target &t) {
    if (!t.ringsUp())
        return;
    if (in.ConsumeBool()) {
        const unsigned ring = in.ConsumeIntegralInRange(0, 1);
        t.ringScribbled |= ring == 0;
        pib_wire_ring_ctrl *ctrl = t.rings->ctrl(ring);
        uint32_t *fields[] = {&ctrl->produced, &ctrl->consumed, &ctrl->wake_consumer_at,
                              &ctrl->wake_producer_at};
        uint32_t &field = *fields[in.ConsumeIntegralInRange<size_t>(0, std::size(fields) - 1)];
        field = in.ConsumeBool() ? field + in.ConsumeIntegralInRange<uint32_t>(0, 8192)
                                 : in.ConsumeIntegral<uint32_t>();
    }
    t.rings->publish(true);
    t.rings->answerBell();
}

// A hostile switch and the ring cable's doorbell line: its end made
// blocking, the device's end flooded, or the line hung up. Whatever it
// does, no call of the device's waits on the line (a call that did would
// hang this harness: a timeout finding).
void ringLine(FuzzedDataProvider &in, Target &t) {
    if (!t.ringsUp())
        return;
    using Attack = testing::RingSwitch::LineAttack;
    static constexpr Attack kAttacks[] = {Attack::kBlocking, Attack::kFlood, Attack::kHangUp};
    t.rings->attackLine(in.PickValueInArray(kAttacks));
    t.rings->publish(true);
    t.rings->answerBell();
    t.host.runScheduled();
}

// The VM stops to move and the move fails: the device's links go silent
// (MOVING), whatever arrives meanwhile, then resume on the same cable.
void moveThatFails(FuzzedDataProvider &in, Target &t) {
    FakeHost &h = t.host;
    pib_core_moving(h.core);
    if (in.ConsumeBool())
        h.advance(in.ConsumeIntegralInRange<uint64_t>(0, 2'000'000'000));
    if (in.ConsumeBool()) {
        const auto bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 256));
        pib_core_port_receive(h.core, 1, bytes.data(), bytes.size());
    }
    pib_core_move_failed(h.core);
}

// The switch says it discarded packets to the port (docs/wire.md,
// "Stalls"), once or in a flood, as time passes or not: the port's RC QPs
// resend and say what they expect, at most once per 100 ms.
void switchDiscarded(FuzzedDataProvider &in, Target &t) {
    const auto frame = wire::encode(PIB_WIRE_DISCARDED, {});
    const int times = in.ConsumeIntegralInRange(1, 4);
    for (int i = 0; i < times; ++i) {
        pib_core_port_receive(t.host.core, 1, frame.data(), frame.size());
        if (in.ConsumeBool())
            t.host.advance(in.ConsumeIntegralInRange<uint64_t>(0, 150'000'000));
    }
}

void hostEnvironment(FuzzedDataProvider &in, Target &t) {
    FakeHost &h = t.host;
    switch (in.ConsumeIntegralInRange(0, 8)) {
    case 0: // time passes: retransmissions, RNR waits
        h.advance(in.ConsumeIntegralInRange<uint64_t>(0, 200'000'000));
        break;
    case 1:
        h.runScheduled();
        break;
    case 2:
        linkFlap(in, t);
        break;
    case 3: // the host's queue fills, or drains
        h.portQueueLimit =
            in.ConsumeBool() ? SIZE_MAX : in.ConsumeIntegralInRange<size_t>(0, 65536);
        h.portOutput[1].clear();
        pib_core_port_writable(h.core, 1);
        break;
    case 4: { // raw stream bytes
        const auto bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 512));
        pib_core_port_receive(h.core, 1, bytes.data(), bytes.size());
        break;
    }
    case 5:
        if (in.ConsumeIntegralInRange(0, 3))
            ringScribble(in, t);
        else
            ringLine(in, t);
        break;
    case 6:
        moveThatFails(in, t);
        break;
    case 7:
        switchDiscarded(in, t);
        break;
    default:
        pib_core_bar_read(h.core, in.ConsumeBool() ? PIB_BAR_REGS : PIB_BAR_DOORBELL,
                          in.ConsumeIntegralInRange(0u, 0x2000u),
                          1u << in.ConsumeIntegralInRange(0, 3));
        break;
    }
}

// The host's view of the device, in any state it is in: it must answer.
// Mostly one object (the whole device costs more than most inputs).
void inspect(FuzzedDataProvider &in, FakeHost &h) {
    static constexpr const char *kKinds[] = {"port", "eq", "cq", "qp", "srq", "mr"};
    std::string what;
    if (in.ConsumeIntegralInRange(0, 7))
        what = std::string(kKinds[in.ConsumeIntegralInRange<size_t>(0, std::size(kKinds) - 1)]) +
               " " + std::to_string(in.ConsumeIntegralInRange<uint32_t>(0, 300));
    char *answer = nullptr;
    const int rc = pib_core_inspect(h.core, what.c_str(), in.ConsumeBool(), &answer);
    check(answer != nullptr, "an inspection gave no answer");
    check(rc == 0 || !what.empty(), "the whole device could not be inspected");
    std::free(answer);
}

// The host's test facilities on the attacker's objects. Stopping a CQ or
// an EQ loses completions on purpose: only a privileged input does it.
void inject(FuzzedDataProvider &in, Target &t) {
    const std::string qp = std::to_string(t.pickConnected(in).qpn);
    const std::string cq = std::to_string(t.sendCq.cqn);
    const std::string lines[] = {
        "drop " + qp + " " + std::to_string(in.ConsumeIntegralInRange(1, 5)),
        "corrupt " + qp + " " + std::to_string(in.ConsumeIntegralInRange(1, 5)),
        "wqe " + qp + " REM_ACCESS_ERR 0x42",
        "command " + std::to_string(in.ConsumeIntegralInRange(0, 0x50)) + " BUSY",
        "event qp-fatal " + qp,
        "clear",
        "stop cq " + cq,
        "resume cq " + cq,
        "stop eq " + std::to_string(t.node.eqn),
        "resume eq " + std::to_string(t.node.eqn),
    };
    const size_t choices = t.privileged ? std::size(lines) : 6;
    char *answer = nullptr;
    pib_core_inject(t.host.core, lines[in.ConsumeIntegralInRange<size_t>(0, choices - 1)].c_str(),
                    &answer);
    std::free(answer);
}

void hostActs(FuzzedDataProvider &in, Target &t) {
    switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0:
        inspect(in, t.host);
        break;
    case 1:
        inject(in, t);
        break;
    default: { // the attacker writes its data area
        const uint64_t at = t.data + in.ConsumeIntegralInRange<uint64_t>(0, kDataSize - 256);
        const auto bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 256));
        t.memory.write(at, bytes.data(), bytes.size());
        break;
    }
    }
}

// ---- a privileged input: the driver itself -----------------------------------------------

// A command whose mailbox the input writes.
void anyCommand(FuzzedDataProvider &in, Target &t) {
    FakeHost &h = t.host;
    const uint16_t op =
        kCommandOpcodes[in.ConsumeIntegralInRange<size_t>(0, std::size(kCommandOpcodes) - 1)];
    const std::vector<uint8_t> bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 256));
    std::fill_n(h.at(t.mailbox), PIB_MAILBOX_SIZE, 0);
    std::copy(bytes.begin(), bytes.end(), h.at(t.mailbox));
    const uint32_t modifier = in.ConsumeBool() ? in.ConsumeIntegralInRange<uint32_t>(0, 40)
                                               : in.ConsumeIntegral<uint32_t>();
    const uint64_t inAddr = in.ConsumeIntegralInRange(0, 7) ? t.mailbox : t.pickAddress(in);
    const uint64_t outAddr = in.ConsumeIntegralInRange(0, 7) ? t.mailbox : t.pickAddress(in);
    h.command(op, modifier, inAddr, outAddr, in.ConsumeBool() ? PIB_CMD_CTRL_EVENT : 0);
}

void actAsDriver(FuzzedDataProvider &in, Target &t) {
    FakeHost &h = t.host;
    switch (in.ConsumeIntegralInRange(0, 4)) {
    case 0:
        anyCommand(in, t);
        break;
    case 1: // a register
        pib_core_bar_write(h.core, PIB_BAR_REGS, in.ConsumeIntegralInRange(0u, PIB_REGS_SIZE + 16),
                           in.ConsumeIntegral<uint64_t>(), 1u << in.ConsumeIntegralInRange(0, 3));
        break;
    case 2: // a doorbell, anywhere in BAR2
        pib_core_bar_write(h.core, PIB_BAR_DOORBELL,
                           in.ConsumeIntegralInRange(0u, 20 * PIB_PAGE_SIZE),
                           in.ConsumeIntegral<uint64_t>(), in.ConsumeBool() ? 8 : 4);
        break;
    case 3:
        pib_core_reset(h.core);
        break;
    default: // a send queue's producer count of the input's choosing
        pib_core_bar_write(
            h.core, PIB_BAR_DOORBELL, uint64_t{t.node.uar} * PIB_PAGE_SIZE + PIB_DB_SQ,
            uint64_t{in.ConsumeIntegral<uint32_t>()} << 32 | pickQpWithSendQueue(in, t).qpn, 8);
        break;
    }
}

void step(FuzzedDataProvider &in, Target &t, Peer &peer) {
    static constexpr const char *kNames[] = {
        "peer message", "peer message", "peer message", "peer message",   "peer answers",
        "peer answers", "post work",    "post work",    "post receives",  "local operation",
        "any packet",   "any send",     "QP state",     "reshape",        "host",
        "host",         "host acts",    "any doorbell", "driver or peer", "driver or peer",
        "page faults"};
    const int what = in.ConsumeIntegralInRange(0, 20);
    if (logged())
        std::fprintf(stderr, "step: %s\n", kNames[what]);
    switch (what) {
    case 0:
    case 1:
    case 2:
    case 3:
        peerSendsMessage(in, t, peer);
        break;
    case 4:
    case 5:
        peerAnswers(in, t, peer);
        break;
    case 6:
    case 7:
        postWork(in, t);
        break;
    case 8:
        postReceives(in, t);
        break;
    case 9:
        localOperation(in, t);
        break;
    case 10:
        peer.sendAnyPacket(in);
        break;
    case 11:
        postAnySend(in, t);
        break;
    case 12:
        changeQpState(in, t);
        break;
    case 13:
        reshapeQueue(in, t);
        break;
    case 14:
    case 15:
        hostEnvironment(in, t);
        break;
    case 16:
        hostActs(in, t);
        break;
    case 17:
        ringAnyDoorbell(in, t);
        break;
    case 20:
        t.servePageFaults(in);
        break;
    default:
        if (t.privileged)
            actAsDriver(in, t);
        else
            peerSendsMessage(in, t, peer);
        break;
    }
}

// ---- the bound on held WQEs ----------------------------------------------------------

// What the device holds of fetched send WQEs, as `info pib` shows it.
uint64_t heldWqeBytes(Target &t) {
    char *answer = nullptr;
    pib_core_inspect(t.host.core, "", 1, &answer);
    check(answer != nullptr, "the device could not be inspected");
    static constexpr char kKey[] = "\"outstanding_wqe_bytes\":";
    const char *at = std::strstr(answer, kKey);
    const uint64_t held = at ? std::strtoull(at + sizeof(kKey) - 1, nullptr, 10) : UINT64_MAX;
    std::free(answer);
    check(at != nullptr, "the device's inspection has no outstanding_wqe_bytes");
    return held;
}

// docs/prm.md §7.4: the copies of fetched send WQEs stay within 16 MiB
// plus one WQE of the largest stride per QP: the attacker's and the
// node's own (a privileged input may have made any number, up to the
// device's limit). With every QP in the error state, none is held at all.
void checkHeldWqes(Target &t, bool allFlushed) {
    const uint64_t qps = t.privileged ? limits::kMaxQp : t.qps.size() + 1;
    const uint64_t bound =
        limits::kOutstandingWqeBytes + qps * (sizeof(SendWqe) + (1u << limits::kLogMaxWqeStride));
    const uint64_t held = heldWqeBytes(t);
    if (held > bound)
        fail("the device holds %" PRIu64 " bytes of WQE copies, above the bound of %" PRIu64
             " for %" PRIu64 " QPs",
             held, bound, qps);
    if (allFlushed && held != 0)
        fail("with every QP flushed, the device still holds %" PRIu64 " bytes of WQE copies", held);
}

// Whether the input posted send WQEs on a connected QP: only those hold
// memory (an inspection of the whole device costs more than a short input).
bool postedConnectedSends(const Target &t) {
    for (Queue q : {Queue::kRcSend, Queue::kUcSend, Queue::kSrqQpSend, Queue::kXrcIniSend})
        if (t.ledger.posted(q))
            return true;
    return t.privileged;
}

// ---- after each step -------------------------------------------------------------------

// QPs that left RTS go back: a QP in the error state (or left in RESET,
// INIT or RTR) is flushed, reset and connected again with fresh PSNs; one
// in SQD resumes. Now and then the harness looks at every QP, since a lost
// NAK or event may hide an error.
void keepAlive(FuzzedDataProvider &in, Target &t, int stepIndex) {
    for (Qp *q : t.qps) {
        if (!q->suspect && stepIndex % 16 != 15)
            continue;
        const std::optional<uint8_t> state = t.qpState(*q);
        if (!state || *state == PIB_QPS_RTS) {
            q->suspect = false;
            continue;
        }
        if (in.ConsumeIntegralInRange(0, 7) == 0)
            continue; // left in that state a while
        if (*state == PIB_QPS_SQD)
            q->suspect = !t.moveQp(*q, PIB_QPS_RTS);
        else
            t.reconnect(*q, t.pickLink(in));
    }
}

// What the device said since the last look: a fatal internal error is a
// finding; an overrun CQ lost completions on purpose.
void readHostReports(Target &t) {
    FakeHost &h = t.host;
    if (logged()) {
        for (const FakeHost::Report &line : h.traceLines)
            std::fprintf(stderr, "  trace %s %s\n", line.what.c_str(), line.detail.c_str());
        for (const FakeHost::Report &error : h.errors)
            std::fprintf(stderr, "  error %s %s\n", error.what.c_str(), error.detail.c_str());
    }
    for (const FakeHost::Report &line : h.traceLines) {
        if (line.what == "fatal")
            fail("an internal error made the device FATAL: %s", line.detail.c_str());
    }
    for (const FakeHost::Report &error : h.errors)
        if (error.what == "cq-overrun")
            t.ledger.stopChecking();
    h.clear();
}

void afterStep(FuzzedDataProvider &in, Target &t, Peer &peer, int stepIndex) {
    FakeHost &h = t.host;
    check(h.mappings == 0, "the core returned with guest RAM still mapped");
    // What one event may send: its packet budget, plus the answers it owes
    // to a chunk of received bytes.
    check(h.portOutput[1].size() < (8u << 20), "one event sent more than 8 MiB");
    peer.readDeviceOutput();
    if (in.ConsumeIntegralInRange(0, 7)) // sometimes the driver is slow to poll
        t.pollAll();
    readHostReports(t);
    // Nothing a guest or a peer sends may break the core inside: an
    // exception there makes the device FATAL (docs/prm.md §2.2).
    check(!(pib_core_bar_read(h.core, PIB_BAR_REGS, PIB_REG_STATUS, 4) & PIB_STATUS_FATAL),
          "the device is FATAL");
    if (stepIndex % 50 == 49 && postedConnectedSends(t))
        checkHeldWqes(t, false);
    keepAlive(in, t, stepIndex);
}

// ---- at the end ------------------------------------------------------------------------

// Every WQE the device consumed has its one CQE. The SRQs say how many
// of theirs they still hold.
void checkCompletions(Target &t) {
    for (int q = 0; q < static_cast<int>(Queue::kCount); ++q) {
        const auto queue = static_cast<Queue>(q);
        uint64_t consumed = t.ledger.posted(queue);
        if (queue == Queue::kSrq || queue == Queue::kXrcSrq) {
            const Srq &s = queue == Queue::kSrq ? t.srq : t.xrcSrq;
            const std::optional<uint32_t> held = t.srqWqeCount(s.srqn);
            check(held.has_value(), "QUERY_SRQ of the attacker's SRQ failed");
            consumed -= *held;
        }
        t.ledger.checkSettled(queue, consumed);
    }
}

// The second tenant as it was: no CQE, every SRQ WQE still posted, its
// window bound, its memory unchanged (with everything else the device
// may not write).
void checkTenant(Target &t) {
    const auto first = t.host.peek<pib_cqe>(t.tenant.cqRing);
    check(!(first.flags & PIB_CQE_PHASE), "a CQE on the second tenant's CQ");
    const std::optional<uint32_t> held = t.srqWqeCount(t.tenant.srqn);
    if (!held || *held != t.tenant.srqWqes)
        fail("the second tenant's SRQ holds %d WQEs of %u", held ? static_cast<int>(*held) : -1,
             t.tenant.srqWqes);
    pib_mw_context mw{};
    check(t.commandOut(PIB_CMD_QUERY_MW, t.tenant.windowKey, &mw) && mw.bound,
          "the second tenant's window is no longer bound");
}

void checkMemory(const Target &t) {
    const std::optional<uint64_t> page = t.memory.firstForbiddenChange();
    if (!page)
        return;
    const char *what = *page >= t.tenant.buf && *page < t.tenant.buf + kTenantBytes
                           ? "the second tenant's buffer"
                       : *page == t.tenant.cqRing ? "the second tenant's CQ"
                                                  : "memory no MR of the attacker's covers";
    fail("the device wrote guest page 0x%" PRIx64 ", %s", *page, what);
}

// The device finishes what it postponed, the QPs are flushed, and the
// oracles look at what is left.
void finish(Target &t, Peer &peer) {
    FakeHost &h = t.host;
    if (t.privileged) {
        // Some of the postponed work (each run is one bounded event; a 2 GiB
        // READ takes thousands, which would only slow the fuzzer down).
        for (int runs = 0; runs < 64 && h.runScheduled(); ++runs)
            h.portOutput[1].clear();
        checkHeldWqes(t, false);
        return;
    }
    char *answer = nullptr;
    pib_core_inject(h.core, "clear", &answer); // no BUSY command in the way
    std::free(answer);
    for (Qp *q : t.qps)
        if (!t.moveQp(*q, PIB_QPS_ERR))
            fail("%s did not move to the error state", q->name);
    for (int runs = 0; runs < 64 && h.runScheduled(); ++runs)
        peer.readDeviceOutput();
    peer.readDeviceOutput();
    t.pollAll();
    readHostReports(t);
    checkCompletions(t);
    checkTenant(t);
    checkMemory(t);
    if (postedConnectedSends(t))
        checkHeldWqes(t, true);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzedDataProvider in(data, size);
    Target t(in.ConsumeIntegralInRange(0, 3) == 0);
    Peer peer(t);
    for (int i = 0; i < kSteps && in.remaining_bytes(); ++i) {
        step(in, t, peer);
        afterStep(in, t, peer, i);
    }
    finish(t, peer);
    return 0;
}
