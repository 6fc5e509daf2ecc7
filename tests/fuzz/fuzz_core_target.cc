// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuzz_core_target.hh"

#include <algorithm>
#include <stdexcept>
#include <string>

#include "connected.hh"

namespace pib::fuzz {

using testing::kAccessAll;

namespace {

constexpr unsigned kSrqStride = 6;        // 64-byte receive WQEs: up to three SGEs
constexpr unsigned kLogCqeSize = 6;       // 64-byte CQEs
constexpr uint16_t kTenantPeerLid = 0x33; // a peer the input never plays

// The pages of `ring` that 2^log entries of 2^logStride bytes use: a
// ring names exactly those (its MTT range may hold more).
pib_buf_desc firstPages(pib_buf_desc ring, unsigned log, unsigned logStride) {
    ring.npages = std::max(1u, (1u << (log + logStride)) / PIB_PAGE_SIZE);
    return ring;
}

} // namespace

// The set-up must succeed: a failure is the harness's, with the device's
// last word on it.
void Target::require(bool ok, const char *what) {
    if (!ok)
        throw std::runtime_error(std::string("fuzz-core set-up: ") + what + " failed: " +
                                 (host.errors.empty() ? "" : host.errors.back().detail));
}

uint32_t Target::created(const FakeHost::Outcome &o, const char *what) {
    require(o.status == PIB_CMD_STATUS_OK, what);
    return static_cast<uint32_t>(o.result);
}

Target::Target(bool privileged_) : privileged(privileged_) {
    mailbox = host.alloc(2 * PIB_MAILBOX_SIZE);
    setUpMemory();
    for (Cq *cq : cqs)
        *cq = createCq(8);
    srq = createSrq(Queue::kSrq, 6);
    xrcSrq = createSrq(Queue::kXrcSrq, 6);
    setUpQps();
    setUpTenant();
    setUpReceives();
    allowDeviceWrites();
    host.portOutput[1].clear();
    host.clear();
    // A driver that keeps to the rules is what the oracles assume.
    if (privileged)
        ledger.stopChecking();
    else
        memory.arm();
}

// ---- set-up ----------------------------------------------------------------

// A region of guest memory by its address (PIB_MR_PHYSICAL), no MTT.
uint32_t Target::createDmaMr(uint64_t addr, uint64_t length, uint32_t pd, uint32_t access) {
    pib_mr_context c{};
    c.iova = addr;
    c.length = length;
    c.pdn = pd;
    c.access = access;
    c.flags = PIB_MR_PHYSICAL;
    return created(commandIn(PIB_CMD_CREATE_MR, 0, c), "CREATE_MR");
}

// The attacker's memory: a DMA region over its data area alone, four
// pages through the MTT, a fast-registration region and two windows. The
// node's DMA region over all of guest RAM would let any peer write
// anywhere: only a privileged input keeps it.
void Target::setUpMemory() {
    data = host.alloc(kDataSize);
    keys.data = createDmaMr(data, kDataSize, node.pd,
                            kAccessAll | PIB_ACCESS_MW_BIND | PIB_ACCESS_FLUSH_GLOBAL);
    std::vector<uint64_t> pages;
    const pib_buf_desc mtt = host.ring(4, &pages);
    mttPages = pages.front();
    pib_mr_context mr{};
    mr.iova = kMttIova;
    mr.length = 4 * PIB_PAGE_SIZE;
    mr.pdn = node.pd;
    mr.access = kAccessAll | PIB_ACCESS_MW_BIND;
    mr.mtt_index = mtt.mtt_index;
    mr.mtt_count = 4;
    mr.log_page_size = 12;
    keys.mtt = created(commandIn(PIB_CMD_CREATE_MR, 0, mr), "CREATE_MR through the MTT");
    keys.fastReg = node.createFastRegMr(4);
    for (uint8_t type : {PIB_MW_TYPE_1, PIB_MW_TYPE_2}) {
        pib_mw_context mw{};
        mw.pdn = node.pd;
        mw.type = type;
        windowNumbers[type - 1] = created(commandIn(PIB_CMD_CREATE_MW, 0, mw), "CREATE_MW");
        keys.windows[type - 1].key = windowNumbers[type - 1];
    }
    pageList = host.alloc(PIB_PAGE_SIZE);
    setUpPaging();
    if (!privileged)
        created(command(PIB_CMD_DESTROY_MR, node.key, 0, 0), "DESTROY_MR");
}

Cq Target::createCq(unsigned log) {
    Cq cq;
    cq.log = log;
    for (unsigned i = 0; i < 2; ++i) {
        std::vector<uint64_t> pages;
        cq.buf[i] = host.ring((1u << kMaxCqLog) * PIB_CQE_SIZE / PIB_PAGE_SIZE, &pages);
        cq.ring[i] = pages.front(); // alloc() hands out pages in order: contiguous
        cq.ciRecord[i] = host.alloc(PIB_PAGE_SIZE);
    }
    pib_cq_context c{};
    c.buf = firstPages(cq.buf[0], log, kLogCqeSize);
    c.log_size = log;
    c.eqn = node.eqn;
    c.uar_page = node.uar;
    c.ci_record = cq.ciRecord[0];
    cq.cqn = created(commandIn(PIB_CMD_CREATE_CQ, 0, c), "CREATE_CQ");
    return cq;
}

pib_srq_context Target::srqContext(const Srq &s) const {
    pib_srq_context c{};
    c.buf = firstPages(s.buf[s.current], s.log, kSrqStride);
    c.pdn = node.pd;
    c.uar_page = node.uar;
    c.log_wqe_count = static_cast<uint8_t>(s.log);
    c.log_wqe_stride = kSrqStride;
    c.limit = 2;
    if (s.queue == Queue::kXrcSrq) {
        c.type = PIB_SRQT_XRC;
        c.xrcdn = node.xrcd;
        c.cqn = xrcCq.cqn;
    }
    return c;
}

Srq Target::createSrq(Queue queue, unsigned log) {
    Srq s;
    s.queue = queue;
    s.log = log;
    for (unsigned i = 0; i < 2; ++i) {
        std::vector<uint64_t> pages;
        s.buf[i] = host.ring((1u << (kMaxSrqLog + kSrqStride)) / PIB_PAGE_SIZE, &pages);
        s.ring[i] = pages.front();
    }
    s.srqn = created(commandIn(PIB_CMD_CREATE_SRQ, 0, srqContext(s)), "CREATE_SRQ");
    return s;
}

Qp Target::createQp(const char *name, uint8_t type, Srq *onSrq) {
    Qp q;
    q.name = name;
    q.type = type;
    pib_qp_context c{};
    c.type = type;
    if (type == PIB_QPT_XRC_TGT) {
        c.xrcdn = node.xrcd; // no queue, PD or CQ of its own
    } else {
        c.pdn = node.pd;
        c.send_cqn = sendCq.cqn;
        c.recv_cqn = recvCq.cqn;
        c.uar_page = node.uar;
        c.port = 1;
        c.sq_log_wqe_count = kLogSq;
        c.sq_log_wqe_stride = 7;
        std::vector<uint64_t> pages;
        c.sq_buf = host.ring((kSqStride << kLogSq) / PIB_PAGE_SIZE, &pages);
        q.sqRing = pages.front();
        if (onSrq) {
            c.flags = PIB_QP_USE_SRQ;
            c.srqn = onSrq->srqn;
            q.srq = onSrq;
        } else if (type != PIB_QPT_XRC_INI) {
            c.rq_log_wqe_count = kLogRq;
            c.rq_log_wqe_stride = 6;
            pages.clear();
            c.rq_buf = host.ring(1, &pages);
            q.rqRing = pages.front();
        }
    }
    q.qpn = created(commandIn(PIB_CMD_CREATE_QP, 0, c), "CREATE_QP");
    return q;
}

void Target::openQueues(Qp &q, Queue send, std::optional<Queue> recv) {
    ledger.open(send, sendCq.cqn, q.qpn, 1u << kLogSq);
    q.sq = send;
    if (recv) {
        ledger.open(*recv, recvCq.cqn, q.qpn, 1u << kLogRq);
        q.rq = recv;
    }
}

void Target::setUpQps() {
    rc = createQp("the RC QP", PIB_QPT_RC);
    openQueues(rc, Queue::kRcSend, Queue::kRcRecv);
    uc = createQp("the UC QP", PIB_QPT_UC);
    openQueues(uc, Queue::kUcSend, Queue::kUcRecv);
    srqQp = createQp("the RC QP on the SRQ", PIB_QPT_RC, &srq);
    openQueues(srqQp, Queue::kSrqQpSend, std::nullopt);
    xrcTgt = createQp("the XRC TGT QP", PIB_QPT_XRC_TGT);
    xrcIni = createQp("the XRC INI QP", PIB_QPT_XRC_INI);
    openQueues(xrcIni, Queue::kXrcIniSend, std::nullopt);
    ud = createQp("the UD QP", PIB_QPT_UD);
    openQueues(ud, Queue::kUdSend, Queue::kUdRecv);
    smi = createQp("QP0", PIB_QPT_SMI);
    openQueues(smi, Queue::kSmiSend, Queue::kSmiRecv);
    gsi = createQp("QP1", PIB_QPT_GSI);
    openQueues(gsi, Queue::kGsiSend, Queue::kGsiRecv);
    ledger.open(Queue::kSrq, recvCq.cqn, srqQp.qpn, 1u << srq.log);
    ledger.open(Queue::kXrcSrq, xrcCq.cqn, xrcTgt.qpn, 1u << xrcSrq.log);
    for (size_t i = 0; i < qps.size(); ++i) {
        qps[i]->peerQpn = kPeerQpn + static_cast<uint32_t>(i);
        require(bringUp(*qps[i], Link{}), "bringing a QP up");
    }
    pib_mcast m{};
    m.gid[0] = 0xff;
    m.gid[15] = 1;
    m.mlid = kMlid;
    created(commandIn(PIB_CMD_ATTACH_MCAST, ud.qpn, m), "ATTACH_MCAST");
}

// Receive WQEs on every queue from the start, so that SENDs complete.
void Target::setUpReceives() {
    auto sge = [&](unsigned i) {
        return std::vector<pib_wqe_data>{{2048, keys.data, data + (i % 32) * 2048}};
    };
    for (Qp *q : {&rc, &uc, &ud, &smi, &gsi})
        for (unsigned i = 0; i < 4; ++i)
            postRecv(*q, sge(i));
    for (Srq *s : {&srq, &xrcSrq})
        for (unsigned i = 0; i < 8; ++i)
            postSrqRecv(*s, sge(i));
}

void Target::setUpTenant() {
    Tenant &t = tenant;
    t.uar = created(command(PIB_CMD_ALLOC_UAR, 0, 0, 0), "ALLOC_UAR");
    t.pd = created(command(PIB_CMD_ALLOC_PD, 0, 0, 0), "ALLOC_PD");
    t.xrcd = created(command(PIB_CMD_ALLOC_XRCD, 0, 0, 0), "ALLOC_XRCD");
    std::vector<uint64_t> pages;
    pib_cq_context cq{};
    cq.buf = host.ring(1, &pages);
    cq.log_size = 6;
    cq.eqn = node.eqn;
    cq.uar_page = t.uar;
    cq.ci_record = host.alloc(PIB_PAGE_SIZE);
    t.cqRing = pages.front();
    t.cqn = created(commandIn(PIB_CMD_CREATE_CQ, 0, cq), "CREATE_CQ of the tenant");
    t.buf = host.alloc(kTenantBytes);
    t.mrKey = createDmaMr(t.buf, kTenantBytes, t.pd, kAccessAll | PIB_ACCESS_MW_BIND);
    pages.clear();
    pib_srq_context srqc{};
    srqc.buf = host.ring(1, &pages);
    srqc.pdn = t.pd;
    srqc.uar_page = t.uar;
    srqc.log_wqe_count = 4;
    srqc.log_wqe_stride = kSrqStride;
    srqc.type = PIB_SRQT_XRC;
    srqc.xrcdn = t.xrcd;
    srqc.cqn = t.cqn;
    t.srqn = created(commandIn(PIB_CMD_CREATE_SRQ, 0, srqc), "CREATE_SRQ of the tenant");
    for (uint32_t i = 0; i < 8; ++i)
        host.writeRecvWqe(pages.front() + (i << kSrqStride), i, t.mrKey, t.buf + i * 1024, 1024);
    t.srqWqes = 8;
    doorbell(t.uar, PIB_DB_SRQ, t.srqn, t.srqWqes);
    bindTenantWindow();
}

// The tenant binds a type 1 window to its region through a QP of its own,
// then destroys the QP: the window stays bound, reachable through its PD
// alone. The bind is unsignaled, so the tenant's CQ stays empty.
void Target::bindTenantWindow() {
    Tenant &t = tenant;
    pib_mw_context mw{};
    mw.pdn = t.pd;
    mw.type = PIB_MW_TYPE_1;
    const uint32_t window = created(commandIn(PIB_CMD_CREATE_MW, 0, mw), "CREATE_MW");
    Qp q;
    q.name = "the tenant's QP";
    q.type = PIB_QPT_RC;
    q.peerLid = kTenantPeerLid;
    q.peerQpn = 0x99;
    pib_qp_context c{};
    c.type = PIB_QPT_RC;
    c.pdn = t.pd;
    c.send_cqn = c.recv_cqn = t.cqn;
    c.uar_page = t.uar;
    c.sq_log_wqe_count = kLogSq;
    c.sq_log_wqe_stride = 7;
    std::vector<uint64_t> pages;
    c.sq_buf = host.ring((kSqStride << kLogSq) / PIB_PAGE_SIZE, &pages);
    c.rq_log_wqe_count = kLogRq;
    c.rq_log_wqe_stride = 6;
    c.rq_buf = host.ring(1);
    q.qpn = created(commandIn(PIB_CMD_CREATE_QP, 0, c), "CREATE_QP of the tenant");
    require(bringUp(q, Link{}), "bringing the tenant's QP up");
    t.windowKey = withVariant(window, 0x5a);
    pib_wqe_bind_mw bind{};
    bind.addr = t.buf;
    bind.length = 8192;
    bind.mw_key = window;
    bind.new_rkey = t.windowKey;
    bind.mr_key = t.mrKey;
    bind.access = PIB_ACCESS_REMOTE_READ | PIB_ACCESS_REMOTE_WRITE;
    WorkRequest wr;
    wr.opcode = PIB_WR_BIND_MW;
    wr.flags = 0;
    wr.bind = bind;
    const auto slot = encodeSendWqe(wr, false);
    std::memcpy(host.at(pages.front()), slot.data(), slot.size());
    doorbell(t.uar, PIB_DB_SQ, q.qpn, 1);
    pib_mw_context bound{};
    require(commandOut(PIB_CMD_QUERY_MW, t.windowKey, &bound) && bound.bound,
            "the tenant's window is bound");
    created(command(PIB_CMD_DESTROY_QP, q.qpn, 0, 0), "DESTROY_QP of the tenant");
}

// What the device may write: the attacker's memory that its MRs with write
// access cover, its CQ and EQ rings, and the mailbox. Not the node's own
// CQ, which no QP uses, nor anything of the tenant's.
void Target::allowDeviceWrites() {
    memory.allowDeviceWrites(data, kDataSize);
    memory.allowDeviceWrites(mttPages, 4 * PIB_PAGE_SIZE);
    for (const Cq *cq : cqs) {
        for (unsigned i = 0; i < 2; ++i) {
            memory.allowDeviceWrites(cq->ring[i], (1u << kMaxCqLog) * PIB_CQE_SIZE);
            memory.allowDeviceWrites(cq->ciRecord[i], 4);
        }
    }
    memory.allowDeviceWrites(node.eqPage, PIB_PAGE_SIZE);
    memory.allowDeviceWrites(mailbox, 2 * PIB_MAILBOX_SIZE);
}

// ---- commands and QP states ---------------------------------------------------

FakeHost::Outcome Target::command(uint16_t op, uint32_t modifier, uint64_t in, uint64_t out) {
    // The host's test facility may have made this command BUSY: a driver
    // tries again.
    FakeHost::Outcome o{};
    for (int attempt = 0; attempt < 8; ++attempt) {
        o = host.command(op, modifier, in, out);
        if (o.status != PIB_CMD_STATUS_BUSY)
            break;
    }
    return o;
}

void Target::activatePort() {
    for (uint8_t state : {PIB_PORT_ARMED, PIB_PORT_ACTIVE}) {
        pib_mad_ifc ifc{};
        iba::Mad m(ifc.mad);
        m.set8(0, 1); // base version
        m.set8(1, iba::kClassSmpLid);
        m.set8(2, 1); // class version
        m.set8(3, iba::kSet);
        m.set16(16, iba::kAttrPortInfo);
        m.set32(20, 1); // port 1
        m.set16(64 + 16, kLid);
        m.set8(64 + 32, state);
        m.set8(64 + 36, 5 << 4); // NeighborMTU 4096
        std::memcpy(host.at(mailbox), &ifc, sizeof(ifc));
        command(PIB_CMD_MAD_IFC, 1, mailbox, mailbox + PIB_MAILBOX_SIZE);
    }
}

bool Target::modifyQp(Qp &q, const pib_qp_attr &a) {
    return commandIn(PIB_CMD_MODIFY_QP, q.qpn, a).status == PIB_CMD_STATUS_OK;
}

bool Target::moveQp(Qp &q, uint8_t state) {
    pib_qp_attr a{};
    a.attr_mask = PIB_QP_STATE;
    a.qp_state = state;
    return modifyQp(q, a);
}

std::optional<uint8_t> Target::qpState(const Qp &q) {
    pib_qp_attr out{};
    if (!commandOut(PIB_CMD_QUERY_QP, q.qpn, &out))
        return std::nullopt;
    return out.qp_state;
}

bool Target::toRtsDatagram(Qp &q) {
    pib_qp_attr a{};
    a.attr_mask = PIB_QP_STATE | PIB_QP_PKEY_INDEX | PIB_QP_QKEY;
    if (q.type == PIB_QPT_UD)
        a.attr_mask |= PIB_QP_PORT;
    a.qp_state = PIB_QPS_INIT;
    a.port_num = 1;
    a.qkey = kQkey;
    if (!modifyQp(q, a) || !moveQp(q, PIB_QPS_RTR))
        return false;
    a = {};
    a.attr_mask = PIB_QP_STATE | PIB_QP_SQ_PSN;
    a.qp_state = PIB_QPS_RTS;
    return modifyQp(q, a);
}

// The attributes docs/prm.md §6.3 and §6.8 require of each transition,
// for the QP's type.
bool Target::bringUp(Qp &q, const Link &l) {
    q.suspect = true; // until it is in RTS
    if (!q.connected()) {
        q.suspect = !toRtsDatagram(q);
        return !q.suspect;
    }
    const bool responder = q.type == PIB_QPT_RC || q.type == PIB_QPT_XRC_TGT;
    const bool requester = q.type == PIB_QPT_RC || q.type == PIB_QPT_XRC_INI;
    pib_qp_attr a{};
    a.attr_mask = PIB_QP_STATE | PIB_QP_PKEY_INDEX | PIB_QP_PORT | PIB_QP_ACCESS_FLAGS;
    a.qp_state = PIB_QPS_INIT;
    a.port_num = 1;
    a.qp_access_flags = l.access;
    if (!modifyQp(q, a))
        return false;
    a = {};
    a.attr_mask = PIB_QP_STATE | PIB_QP_AV | PIB_QP_PATH_MTU | PIB_QP_DEST_QPN | PIB_QP_RQ_PSN;
    if (responder)
        a.attr_mask |= PIB_QP_MAX_DEST_RD_ATOMIC | PIB_QP_MIN_RNR_TIMER;
    a.qp_state = PIB_QPS_RTR;
    a.av.dlid = q.peerLid;
    a.av.port = 1;
    a.path_mtu = l.mtu;
    a.dest_qp_num = q.peerQpn;
    a.rq_psn = l.rqPsn;
    a.max_dest_rd_atomic = l.maxDestRdAtomic;
    a.min_rnr_timer = l.minRnrTimer;
    if (!modifyQp(q, a))
        return false;
    a = {};
    a.attr_mask = PIB_QP_STATE | PIB_QP_SQ_PSN;
    if (requester)
        a.attr_mask |=
            PIB_QP_TIMEOUT | PIB_QP_RETRY_CNT | PIB_QP_RNR_RETRY | PIB_QP_MAX_QP_RD_ATOMIC;
    else if (q.type == PIB_QPT_XRC_TGT)
        a.attr_mask |= PIB_QP_TIMEOUT;
    a.qp_state = PIB_QPS_RTS;
    a.sq_psn = l.sqPsn;
    a.timeout = l.timeout;
    a.retry_cnt = l.retryCnt;
    a.rnr_retry = l.rnrRetry;
    a.max_rd_atomic = l.maxRdAtomic;
    if (!modifyQp(q, a))
        return false;
    q.link = l;
    q.expectedPsn = l.rqPsn;
    q.lastRequestPsn = psnAdd(l.sqPsn, 0xffffff);
    q.owed.clear();
    q.recent.clear();
    q.rest.clear();
    q.suspect = false;
    return true;
}

void Target::restartRings(Qp &q) {
    if (q.sq)
        ledger.restartRing(*q.sq);
    if (q.rq)
        ledger.restartRing(*q.rq);
}

// Through the error state, so that everything the QP took completes
// (flushed) before the reset empties its queues.
bool Target::reconnect(Qp &q, const Link &l) {
    const std::optional<uint8_t> state = qpState(q);
    if (!state || (*state != PIB_QPS_ERR && !moveQp(q, PIB_QPS_ERR)))
        return false;
    if (!moveQp(q, PIB_QPS_RESET))
        return false;
    restartRings(q);
    return bringUp(q, l);
}

bool Target::resetDirectly(Qp &q) {
    for (const std::optional<Queue> &queue : {q.sq, q.rq})
        if (queue)
            ledger.excuseUncompleted(*queue);
    if (!moveQp(q, PIB_QPS_RESET))
        return false;
    restartRings(q);
    q.suspect = true; // the keep-alive brings it up again
    return true;
}

// ---- work queues -------------------------------------------------------------

// The device works on a send queue after its doorbell write has returned,
// from the run it schedules; the host's main loop runs it next, before
// whatever the guest does after the write.
void Target::doorbell(uint32_t uar, uint32_t offset, uint32_t number, uint32_t count) {
    pib_core_bar_write(host.core, PIB_BAR_DOORBELL, uint64_t{uar} * PIB_PAGE_SIZE + offset,
                       uint64_t{count} << 32 | number, 8);
    if (offset == PIB_DB_SQ)
        host.runScheduled();
}

std::array<uint8_t, kSqStride> encodeSendWqe(const WorkRequest &wr, bool xrc) {
    std::array<uint8_t, kSqStride> slot{};
    size_t at = sizeof(pib_wqe_ctrl);
    const auto put = [&](const void *segment, size_t size) {
        if (size && at + size <= slot.size())
            std::memcpy(slot.data() + at, segment, size);
        at += size;
    };
    if (xrc) {
        const pib_wqe_xrc x{wr.remoteSrqn, {}};
        put(&x, sizeof(x));
    }
    if (wr.raddr)
        put(&*wr.raddr, sizeof(*wr.raddr));
    if (wr.atomic)
        put(&*wr.atomic, sizeof(*wr.atomic));
    if (wr.ud)
        put(&*wr.ud, sizeof(*wr.ud));
    if (wr.reg)
        put(&*wr.reg, sizeof(*wr.reg));
    if (wr.bind)
        put(&*wr.bind, sizeof(*wr.bind));
    if (wr.flush)
        put(&*wr.flush, sizeof(*wr.flush));
    pib_wqe_ctrl ctrl{};
    ctrl.opcode = wr.opcode;
    ctrl.flags = wr.flags;
    ctrl.imm = wr.imm;
    if (wr.inlineData) {
        ctrl.flags |= PIB_WQE_INLINE;
        const size_t room = at + 4 < slot.size() ? slot.size() - at - 4 : 0;
        const size_t bytes = std::min(room, wr.inlineData->size());
        const uint32_t count = static_cast<uint32_t>(bytes) | PIB_INLINE_FLAG;
        put(&count, 4);
        put(wr.inlineData->data(), bytes);
        at = (at + 15) / 16 * 16;
    } else {
        for (const pib_wqe_data &sge : wr.sges)
            put(&sge, sizeof(sge));
    }
    ctrl.num_ds = static_cast<uint8_t>(std::min(at, slot.size()) / 16);
    std::memcpy(slot.data(), &ctrl, sizeof(ctrl));
    return slot;
}

std::optional<uint64_t> Target::postSend(Qp &q, const WorkRequest &wr) {
    return postRawSend(q, encodeSendWqe(wr, q.type == PIB_QPT_XRC_INI));
}

// Only into a free slot, as a driver does: the WQE last there has been
// taken by the device.
std::optional<uint64_t> Target::postRawSend(Qp &q, std::array<uint8_t, kSqStride> slot) {
    if (!q.sq || !ledger.hasRoom(*q.sq))
        return std::nullopt;
    pib_wqe_ctrl ctrl;
    std::memcpy(&ctrl, slot.data(), sizeof(ctrl));
    const uint32_t count = ledger.producerCount(*q.sq);
    ctrl.wr_id = ledger.post(*q.sq, ctrl.flags & PIB_WQE_SIGNALED);
    std::memcpy(slot.data(), &ctrl, sizeof(ctrl));
    memory.write(q.sqRing + uint64_t{count % (1u << kLogSq)} * kSqStride, slot.data(), slot.size());
    doorbell(node.uar, PIB_DB_SQ, q.qpn, count + 1);
    return ctrl.wr_id;
}

namespace {

// A receive WQE: the control segment, then up to three SGEs.
std::array<uint8_t, 1u << kSrqStride> receiveSlot(uint64_t wrId,
                                                  const std::vector<pib_wqe_data> &sges) {
    std::array<uint8_t, 1u << kSrqStride> slot{};
    const size_t count = std::min<size_t>(sges.size(), 3);
    pib_wqe_ctrl ctrl{};
    ctrl.wr_id = wrId;
    ctrl.num_ds = static_cast<uint8_t>(1 + count);
    std::memcpy(slot.data(), &ctrl, sizeof(ctrl));
    std::memcpy(slot.data() + sizeof(ctrl), sges.data(), count * sizeof(pib_wqe_data));
    return slot;
}

} // namespace

bool Target::postRecv(Qp &q, const std::vector<pib_wqe_data> &sges) {
    if (!q.rq || !ledger.hasRoom(*q.rq))
        return false;
    const uint32_t count = ledger.producerCount(*q.rq);
    const auto slot = receiveSlot(ledger.post(*q.rq, true), sges);
    memory.write(q.rqRing + uint64_t{count % (1u << kLogRq)} * kRecvStride, slot.data(),
                 slot.size());
    doorbell(node.uar, PIB_DB_RQ, q.qpn, count + 1);
    return true;
}

bool Target::postSrqRecv(Srq &s, const std::vector<pib_wqe_data> &sges) {
    if (!ledger.hasRoom(s.queue))
        return false;
    const uint32_t count = ledger.producerCount(s.queue);
    const auto slot = receiveSlot(ledger.post(s.queue, true), sges);
    memory.write(s.ring[s.current] + (uint64_t{count % (1u << s.log)} << kSrqStride), slot.data(),
                 slot.size());
    doorbell(node.uar, PIB_DB_SRQ, s.srqn, count + 1);
    return true;
}

// ---- completions -----------------------------------------------------------------

void Target::poll(Cq &cq) {
    const uint32_t size = 1u << cq.log;
    for (;;) {
        const auto cqe =
            host.peek<pib_cqe>(cq.ring[cq.current] + uint64_t{cq.ci % size} * PIB_CQE_SIZE);
        const unsigned phase = ((cq.ci >> cq.log) & 1) ^ 1;
        if ((cqe.flags & PIB_CQE_PHASE) != phase)
            break;
        ++cq.ci;
        ledger.onCqe(cq.cqn, cqe);
        noteCompletion(cqe);
    }
    host.poke(cq.ciRecord[cq.current], cq.ci); // as a driver tells the device how far it got
}

void Target::pollAll() {
    for (Cq *cq : cqs)
        poll(*cq);
}

Qp *Target::findQp(uint32_t qpn) {
    for (Qp *q : qps)
        if (q->qpn == qpn)
            return q;
    return nullptr;
}

// What a completion tells the driver: an error means its QP left RTS; a
// local memory operation or a peer's invalidation changed a key.
void Target::noteCompletion(const pib_cqe &cqe) {
    if (cqe.status != PIB_WC_SUCCESS)
        if (Qp *q = findQp(cqe.qpn))
            q->suspect = true;
    if (const auto it = keyChanges.find(cqe.wr_id); it != keyChanges.end()) {
        if (cqe.status == PIB_WC_SUCCESS)
            applyKeyChange(it->second);
        keyChanges.erase(it);
    }
    if (cqe.status == PIB_WC_SUCCESS && cqe.flags & PIB_CQE_WITH_INV)
        applyKeyChange({KeyChange::Kind::kInvalidate, cqe.imm});
}

void Target::applyKeyChange(const KeyChange &change) {
    switch (change.kind) {
    case KeyChange::Kind::kRegister:
        keys.fastReg = change.key;
        keys.fastRegValid = true;
        break;
    case KeyChange::Kind::kInvalidate:
        if (change.key == keys.fastReg)
            keys.fastRegValid = false;
        for (Keys::Window &w : keys.windows)
            if (change.key == w.key)
                w.bound = false;
        break;
    case KeyChange::Kind::kBind: {
        Keys::Window &w = keys.windows[change.window];
        w.key = change.key;
        w.bound = !change.unbinds;
        w.qpn = change.qpn;
        break;
    }
    }
}

void Target::moderateCq(Cq &cq, uint16_t count, uint16_t periodUs) {
    command(PIB_CMD_MODIFY_CQ, cq.cqn, uint64_t{periodUs} << 16 | count, 0);
    doorbell(node.uar, PIB_DB_CQ_ARM, cq.cqn, PIB_CQ_ARM_NEXT);
}

// ibv_resize_cq as docs/prm.md §6.1 has a driver do it, between the CQ's
// two rings.
bool Target::resizeCq(Cq &cq, unsigned log) {
    const unsigned next = cq.current ^ 1;
    host.poke(cq.ciRecord[cq.current], cq.ci);
    host.poke(cq.ciRecord[next], uint32_t{0});
    std::memset(host.at(cq.ring[next]), 0, (1u << kMaxCqLog) * PIB_CQE_SIZE);
    pib_cq_context c{};
    c.buf = firstPages(cq.buf[next], log, kLogCqeSize);
    c.log_size = log;
    c.ci_record = cq.ciRecord[next];
    const FakeHost::Outcome o = commandIn(PIB_CMD_RESIZE_CQ, cq.cqn, c);
    if (o.status != PIB_CMD_STATUS_OK)
        return false;
    // The CQEs not yet consumed move to the new ring's first slots.
    const auto pending = static_cast<uint32_t>(o.result);
    const uint32_t oldSize = 1u << cq.log;
    for (uint32_t i = 0; i < pending; ++i) {
        auto cqe = host.peek<pib_cqe>(cq.ring[cq.current] +
                                      uint64_t{(cq.ci + i) % oldSize} * PIB_CQE_SIZE);
        cqe.flags |= PIB_CQE_PHASE;
        host.poke(cq.ring[next] + uint64_t{i} * PIB_CQE_SIZE, cqe);
    }
    cq.current = next;
    cq.log = log;
    cq.ci = 0;
    return true;
}

// ibv_modify_srq(IBV_SRQ_MAX_WR) as docs/prm.md §6.4 has a driver do it:
// from the oldest WQE not seen completed, the WQEs move to the spare ring.
bool Target::resizeSrq(Srq &s, unsigned log) {
    const unsigned next = s.current ^ 1;
    const uint64_t posted = ledger.posted(s.queue);
    const uint64_t ringStart = posted - ledger.producerCount(s.queue);
    const uint64_t base = ledger.oldestUncompleted(s.queue);
    const uint32_t oldSize = 1u << s.log, newSize = 1u << log;
    for (uint64_t seq = base; seq < posted && seq - base < newSize; ++seq) {
        const uint64_t from = s.ring[s.current] + (((seq - ringStart) % oldSize) << kSrqStride);
        memory.write(s.ring[next] + ((seq - base) << kSrqStride), host.at(from), 1u << kSrqStride);
    }
    pib_srq_context c{};
    c.buf = firstPages(s.buf[next], log, kSrqStride);
    c.log_wqe_count = static_cast<uint8_t>(log);
    c.log_wqe_stride = kSrqStride;
    c.base = static_cast<uint32_t>(base - ringStart);
    if (commandIn(PIB_CMD_RESIZE_SRQ, s.srqn, c).status != PIB_CMD_STATUS_OK)
        return false;
    s.current = next;
    s.log = log;
    ledger.rebase(s.queue, base, newSize);
    return true;
}

// ibv_destroy_srq of the XRC SRQ, whatever the XRC TGT QP is receiving
// into it (docs/prm.md §6.8), then a new one on the same ring. The WQEs
// the device had not taken go with the old one, uncompleted.
bool Target::recreateXrcSrq() {
    const std::optional<uint32_t> held = srqWqeCount(xrcSrq.srqn);
    if (!held || command(PIB_CMD_DESTROY_SRQ, xrcSrq.srqn, 0, 0).status != PIB_CMD_STATUS_OK)
        return false;
    poll(xrcCq); // what the SRQ's end completed
    ledger.abandon(Queue::kXrcSrq, ledger.posted(Queue::kXrcSrq) - *held);
    const FakeHost::Outcome o = commandIn(PIB_CMD_CREATE_SRQ, 0, srqContext(xrcSrq));
    if (o.status != PIB_CMD_STATUS_OK)
        return false;
    xrcSrq.srqn = static_cast<uint32_t>(o.result);
    ledger.rebase(Queue::kXrcSrq, ledger.posted(Queue::kXrcSrq), 1u << xrcSrq.log);
    return true;
}

std::optional<uint32_t> Target::srqWqeCount(uint32_t srqn) {
    pib_srq_context out{};
    if (!commandOut(PIB_CMD_QUERY_SRQ, srqn, &out))
        return std::nullopt;
    return out.wqe_count;
}

// ---- the input's choices ------------------------------------------------------------

// Mostly the data area; sometimes another region of the attacker's, the
// tenant's buffer, the device's own BAR0 or anything at all.
uint64_t Target::pickAddress(FuzzedDataProvider &in) const {
    switch (in.ConsumeIntegralInRange(0, 9)) {
    case 0:
        return FakeHost::kBar0Base + in.ConsumeIntegralInRange<uint64_t>(0, PIB_REGS_SIZE - 1);
    case 1:
        return kMttIova + in.ConsumeIntegralInRange<uint64_t>(0, 4 * PIB_PAGE_SIZE);
    case 2:
        return in.ConsumeIntegral<uint64_t>();
    case 3:
        return tenant.buf + in.ConsumeIntegralInRange<uint64_t>(0, kTenantBytes);
    case 4:
        return keys.fastRegIova + in.ConsumeIntegralInRange<uint64_t>(0, 4 * PIB_PAGE_SIZE);
    case 5:
        return Paging::kOdpIova +
               in.ConsumeIntegralInRange<uint64_t>(0, Paging::kOdpPages * PIB_PAGE_SIZE);
    case 6: // the implicit region's spans, and a little around them
        return Paging::kImplicitBase - PIB_PAGE_SIZE +
               in.ConsumeIntegralInRange<uint64_t>(0, (Paging::kSpans << Paging::kLogSpan) +
                                                          2 * PIB_PAGE_SIZE);
    default:
        return data + in.ConsumeIntegralInRange<uint64_t>(0, kDataSize);
    }
}

uint32_t Target::pickKey(FuzzedDataProvider &in) const {
    switch (in.ConsumeIntegralInRange(0, 11)) {
    case 0:
        return keys.mtt;
    case 1:
        return in.ConsumeIntegral<uint32_t>();
    case 2: // the fast-registration region, mostly with its current variant
        return in.ConsumeBool() ? keys.fastReg
                                : withVariant(keys.fastReg, in.ConsumeIntegral<uint8_t>());
    case 3:
        return keys.windows[in.ConsumeBool()].key;
    case 4: // the tenant's
        return in.ConsumeBool() ? tenant.mrKey : tenant.windowKey;
    case 5: // the DMA region over all of RAM (a privileged input's only)
        return node.key;
    case 6:
        return keys.odp;
    case 7:
        return keys.implicit;
    default:
        return keys.data;
    }
}

uint32_t Target::pickLength(FuzzedDataProvider &in) const {
    switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0:
        return in.ConsumeIntegral<uint32_t>();
    case 1:
        return in.ConsumeIntegralInRange<uint32_t>(0, 1 << 20);
    default:
        return in.ConsumeIntegralInRange<uint32_t>(0, 5000);
    }
}

// An SGE: mostly a buffer of the data area under its key.
pib_wqe_data Target::pickSge(FuzzedDataProvider &in) const {
    switch (in.ConsumeIntegralInRange(0, 7)) {
    case 0:
    case 1:
        return {pickLength(in), pickKey(in), pickAddress(in)};
    case 2:
        return pickPagedBuffer(in, in.ConsumeIntegralInRange<uint32_t>(0, 8192));
    default:
        break;
    }
    const auto offset = in.ConsumeIntegralInRange<uint32_t>(0, kDataSize - 1);
    return {in.ConsumeIntegralInRange<uint32_t>(0, std::min<uint32_t>(kDataSize - offset, 8192)),
            keys.data, data + offset};
}

namespace {

// PSNs anywhere, some just before the 24-bit wrap.
uint32_t pickPsn(FuzzedDataProvider &in) {
    return in.ConsumeBool() ? 0xffffff - in.ConsumeIntegralInRange<uint32_t>(0, 8)
                            : in.ConsumeIntegralInRange<uint32_t>(0, 0xffffff);
}

} // namespace

Link Target::pickLink(FuzzedDataProvider &in) const {
    Link l;
    l.sqPsn = pickPsn(in);
    l.rqPsn = pickPsn(in);
    l.mtu = in.ConsumeIntegralInRange<uint8_t>(1, 5);
    l.timeout = in.ConsumeIntegralInRange<uint8_t>(0, 18);
    l.retryCnt = in.ConsumeIntegralInRange<uint8_t>(0, 7);
    l.rnrRetry = in.ConsumeIntegralInRange<uint8_t>(0, 7);
    l.minRnrTimer = in.ConsumeIntegralInRange<uint8_t>(0, 31);
    l.maxRdAtomic = in.ConsumeIntegralInRange<uint8_t>(0, 16);
    l.maxDestRdAtomic = in.ConsumeIntegralInRange<uint8_t>(0, 16);
    if (in.ConsumeIntegralInRange(0, 7) == 0) // fewer remote rights than usual
        l.access = in.ConsumeIntegralInRange<uint32_t>(0, 31) & ~PIB_ACCESS_LOCAL_WRITE &
                   ~PIB_ACCESS_MW_BIND;
    if (l.access & 0x10) // the fifth bit stands for FLUSH_GLOBAL
        l.access = (l.access & ~0x10u) | PIB_ACCESS_FLUSH_GLOBAL;
    return l;
}

Qp &Target::pickConnected(FuzzedDataProvider &in) {
    Qp *connected[] = {&rc, &uc, &srqQp, &xrcTgt, &xrcIni};
    return *connected[in.ConsumeIntegralInRange<size_t>(0, std::size(connected) - 1)];
}

} // namespace pib::fuzz
