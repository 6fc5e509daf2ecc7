// SPDX-License-Identifier: GPL-2.0-or-later
// The requester of the connected transports (IBA 9.7.4): send WQEs of RC
// and UC QPs fetched by DMA, cut into request packets at the path MTU,
// and resent from any PSN when the responder or the ACK timer asks.
#include <cinttypes>
#include <cstring>

#include "frame.hh"
#include "limits.hh"
#include "requester.hh"
#include "ring.hh"
#include "trace.hh"

namespace pib {

namespace {

// Outstanding WQEs per QP: bounds the memory a QP holds and, with the
// MTU, how many packets are in flight unacknowledged.
constexpr size_t kMaxOutstanding = 128;

} // namespace

// Reads send WQE `index` into `w`. Returns PIB_WC_SUCCESS or the status
// the WQE completes with: a bad WQE still takes its place in the queue.
uint8_t Requester::fetchSendWqe(QueuePair &qp, uint32_t index, SendWqe &w) {
    Wqe wqe;
    wqe.sges = std::move(w.sges); // reuse its capacity
    w.index = index;
    uint8_t status = wqes_.readSend(qp, index, wqe);
    w.wrId = wqe.ctrl.wr_id;
    w.opcode = wqe.ctrl.opcode;
    w.flags = wqe.ctrl.flags;
    w.imm = wqe.ctrl.imm;
    w.slots = wqe.slots;
    w.stream = wqe.dciStream;
    if (status == PIB_WC_SUCCESS)
        status = injectedCompletion(qp, index, &w.vendorErr);
    if (status != PIB_WC_SUCCESS)
        return status;
    w.remoteAddr = wqe.raddr.remote_addr;
    w.rkey = wqe.raddr.rkey;
    w.swapAdd = wqe.atomic.swap_add;
    w.compare = wqe.atomic.compare;
    w.flushPlacement = wqe.flush.placement;
    w.flushSelectivity = wqe.flush.selectivity;
    w.reg = wqe.reg;
    w.pages = std::move(wqe.pages);
    w.update = std::move(wqe.update);
    w.indirect = std::move(wqe.indirect);
    w.remoteInvalidate = wqe.remoteInvalidate;
    w.bind = wqe.bind;
    w.remoteSrqn = wqe.xrc.remote_srqn;
    w.dc = DcAddress{wqe.ud.av, wqe.ud.remote_qpn & 0xffffff, wqe.dcKey};
    if (w.isLocal()) {
        w.length = 0;
        w.packets = 0;
        if (w.opcode == kWrDmaCopy)
            w.sges = std::move(wqe.sges);
        if (w.opcode == PIB_WR_REG_MR && !wqe.sges.empty())
            return readTranslationList(qp, w, wqe.sges.front());
        return PIB_WC_SUCCESS;
    }
    if (w.isAnsweredEmpty())
        return takeEmptyAnswered(qp, w, wqe);
    uint64_t length = 0;
    if (wqe.isInline) { // a prefix, perhaps followed by data segments
        w.inlineData.assign(wqe.inlineData.begin(), wqe.inlineData.end());
        length = w.inlineData.size();
    }
    w.sges = std::move(wqe.sges);
    status = checkLocalBuffers(qp, w, &length);
    if (status != PIB_WC_SUCCESS)
        return status;
    if (length > limits::kMaxMsgSize || (w.isAtomic() && length != 8))
        return PIB_WC_LOC_LEN_ERR;
    w.length = static_cast<uint32_t>(length);
    const uint32_t mtu = pathMtu(qp);
    w.packets = w.isAtomic() ? 1 : std::max<uint32_t>(1, (w.length + mtu - 1) / mtu);
    return PIB_WC_SUCCESS;
}

// IBA 1.5's FLUSH and ATOMIC WRITE carry no data segments: a FLUSH names
// a range (or a whole region) and where its data must be placed, an
// ATOMIC WRITE its 8 bytes, sent as the request's payload.
uint8_t Requester::takeEmptyAnswered(const QueuePair &qp, SendWqe &w, const Wqe &wqe) {
    w.sges.clear();
    w.inlineData.clear();
    w.packets = 1;
    if (w.opcode == PIB_WR_ATOMIC_WRITE) {
        const auto *bytes = reinterpret_cast<const uint8_t *>(&wqe.atomic.swap_add);
        w.inlineData.assign(bytes, bytes + sizeof(wqe.atomic.swap_add));
        w.length = sizeof(wqe.atomic.swap_add);
        return PIB_WC_SUCCESS;
    }
    const uint8_t placement = w.flushPlacement, level = w.flushSelectivity;
    if (!placement || placement & ~(PIB_FLUSH_GLOBAL | PIB_FLUSH_PERSISTENT) ||
        level > PIB_FLUSH_MR) {
        host_.guestError(err::kWqeBad, "QP %u WQE %u: FLUSH of placement %u, selectivity %u",
                         qp.number, w.index, placement, level);
        return PIB_WC_LOC_QP_OP_ERR;
    }
    // A range is a message's length at most; a whole region's length is
    // sent and not looked at.
    w.length = wqe.flush.length;
    return level == PIB_FLUSH_RANGE && w.length > limits::kMaxMsgSize ? PIB_WC_LOC_LEN_ERR
                                                                      : PIB_WC_SUCCESS;
}

// A ConnectX UMR's translation entries behind its data segment, read as
// the hardware reads them: through the segment's L_Key with local read,
// in the QP's PD (the UMR QP has none: in the key's own), never at a bare
// guest address. A user process's key reaches only its own memory.
uint8_t Requester::readTranslationList(const QueuePair &qp, SendWqe &w, const pib_wqe_data &list) {
    const MemoryRegion *key = objects_.mrs.find(PIB_KEY_INDEX(list.lkey));
    const uint32_t pdn = qp.umr && key ? key->ctx.pdn : qp.ctx.pdn;
    std::vector<uint8_t> &bytes = translationBytes_;
    bytes.resize(list.byte_count);
    const uint8_t status = memory_.gatherInto(pdn, std::span(&list, 1), 0, bytes);
    if (status != PIB_WC_SUCCESS) {
        host_.guestError(err::kWqeBadKey,
                         "QP %u UMR WQE %u: translation entries at 0x%" PRIx64
                         " through L_Key 0x%x",
                         qp.number, w.index, list.addr, list.lkey);
        return PIB_WC_LOC_PROT_ERR;
    }
    if (w.indirect) {
        if (const char *why = wqes_.indirectEntries(bytes, *w.indirect)) {
            host_.guestError(err::kWqeFastReg,
                             "QP %u UMR WQE %u: the KLM list at 0x%" PRIx64 ": %s", qp.number,
                             w.index, list.addr, why);
            return PIB_WC_LOC_PROT_ERR;
        }
        return PIB_WC_SUCCESS;
    }
    wqes_.pageListEntries(bytes, w.pages);
    return PIB_WC_SUCCESS;
}

// Checks that the L_Keys of `w`'s scatter/gather list cover its buffers
// (a READ's and an atomic's with local write access), and adds up its
// length. Zero-length SGEs are dropped, as verbs allow.
uint8_t Requester::checkLocalBuffers(QueuePair &qp, SendWqe &w, uint64_t *length) {
    std::erase_if(w.sges, [](const pib_wqe_data &s) { return s.byte_count == 0; });
    const uint32_t access = w.isReadOrAtomic() ? PIB_ACCESS_LOCAL_WRITE : 0;
    for (const pib_wqe_data &s : w.sges) {
        const uint8_t status = memory_.check(s.lkey, qp.ctx.pdn, s.addr, s.byte_count, access);
        if (status != PIB_WC_SUCCESS) {
            const std::optional<FaultSite> fault = memory_.takeFault();
            if (fault) {
                fetchFaulted_ = waitForPage(qp, FaultSide::kRequester, *fault);
                return status; // a failed fault is no guest error
            }
            host_.guestError(err::kWqeBadKey, "QP %u WQE %u: L_Key 0x%x at 0x%" PRIx64, qp.number,
                             w.index, s.lkey, s.addr);
            return status;
        }
        *length += s.byte_count;
    }
    return PIB_WC_SUCCESS;
}

void Requester::send(QueuePair &qp) {
    RequesterState &r = qp.req;
    if (r.rnrDeadline)
        return; // an RNR NAK asked us to wait
    // Resend what a rewind asked for, and what a full window or port held
    // back, then send new work. Packets leave in PSN order: a full window
    // stops everything after it.
    if (r.unsentHeld) {
        for (SendWqe &w : r.outstanding)
            if (!sendAll(qp, w))
                return;
        r.unsentHeld = false;
    }
    if (qp.ctx.type == PIB_QPT_UC) // UC WQEs whose last packets went out just now
        completeInOrder(qp);
    const unsigned maxReads = std::max<unsigned>(1, qp.attr.max_rd_atomic);
    while (qp.sq.consumer != qp.sq.producer && fetchesNew(qp) && !r.fault.waiting() &&
           r.outstanding.size() < kMaxOutstanding) {
        // Every WQE is work the event's budget pays for: a packet, or a
        // local operation (a doorbell for thousands of REG_MRs must not
        // run them all inside one MMIO write).
        if (!scheduler_.mayTransmit(qp.attr.port_num)) {
            stopSending(qp, SendProgress::kPaused);
            return;
        }
        SendWqe &w = spareWqe();
        fetchFaulted_ = false;
        const uint8_t fetched = fetchSendWqe(qp, qp.sq.consumer, w);
        if (fetchFaulted_)
            break; // the WQE waits for its pages, and everything after it
        const uint8_t status = streamStatus(qp, w, fetched);
        if (status == PIB_WC_SUCCESS && w.isLocal()) {
            // It acts once everything before it has completed: no
            // resend of an earlier WQE then meets a key it invalidated.
            if (!r.outstanding.empty())
                break;
            qp.sq.consume(w.slots);
            scheduler_.charge();
            runLocalOperation(qp, w);
            continue;
        }
        if (status == PIB_WC_SUCCESS && qp.ctx.type == kQptDci && !reachesDct(qp, w.dc)) {
            // A DCI serves one DCT at a time: a WQE for another waits
            // until everything before it is answered.
            if (!r.outstanding.empty())
                break;
            connectDci(qp, w.dc);
        }
        if (status == PIB_WC_SUCCESS) {
            // IBA 10.8.3.3: reads and atomics beyond max_rd_atomic, and a
            // fenced WQE behind unanswered ones, wait.
            if (w.isReadOrAtomic() && r.readsInFlight >= maxReads)
                break;
            if ((w.flags & PIB_WQE_FENCE) && r.readsInFlight)
                break;
            // So does one the device has no memory for: a completion of
            // this QP's outstanding WQEs brings it back.
            if (!outstanding_.mayHold(r.heldBytes, footprint(w))) {
                trace::rc_work_held(host_, qp.number, outstanding_.held());
                break;
            }
        }
        qp.sq.consume(w.slots);
        if (status != PIB_WC_SUCCESS) {
            // Completes in error once everything before it has completed.
            // Unless it fails only its stream (a DCI's), nothing after it
            // is fetched: the QP fails with it.
            const bool streamOnly = w.streamError;
            w.packets = 0;
            w.localStatus = status;
            w.sges.clear(); // it holds no more of the device's budget than it needs
            w.inlineData.clear();
            holdWqe(qp);
            completeInOrder(qp);
            if (!streamOnly)
                return;
            scheduler_.charge();
            continue;
        }
        w.firstPsn = r.psn;
        r.psn = psnAdd(r.psn, w.packets);
        if (w.isReadOrAtomic())
            ++r.readsInFlight;
        holdWqe(qp);
        if (!sendAll(qp, w))
            return;
        if (qp.ctx.type == PIB_QPT_UC) // unacknowledged: done once sent
            completeInOrder(qp);
    }
    armAckTimerIfIdle(qp);
    // A DCI with nothing more to send and nothing unanswered leaves its DCT.
    if (qp.ctx.type == kQptDci && r.outstanding.empty() && qp.sq.consumer == qp.sq.producer)
        disconnectDci(qp, "its work is done");
}

// A DCI with streams (dci_streams.hh): a WQE of a stream in error is
// flushed, and one that fails as it is fetched fails its stream only,
// while the DCI has room for another stream in error.
uint8_t Requester::streamStatus(QueuePair &qp, SendWqe &w, uint8_t status) {
    DciStreams &streams = qp.streams;
    if (qp.ctx.type != kQptDci || !streams.on())
        return status;
    if (status != PIB_WC_SUCCESS && !failsStreamAtFetch(status))
        return status; // the DCI's: a malformed WQE fails it, whatever its stream
    if (streams.inError(w.stream)) {
        w.streamError = true;
        return PIB_WC_WR_FLUSH_ERR;
    }
    if (status != PIB_WC_SUCCESS)
        w.streamError = streams.fail(w.stream);
    return status;
}

// A DCI's stream failed at a WQE its DCT answered with an error NAK: the
// DCT's connection failed with it and dropped everything after it. The
// stream's later WQEs are flushed, and the others go again, numbered
// anew, on a new connection: none of them is lost with the old one, and
// none done twice.
void Requester::restartAfterStreamError(QueuePair &qp, uint16_t stream) {
    RequesterState &r = qp.req;
    disconnectDci(qp, "one of its streams failed");
    const uint32_t start = r.psn;
    bool resend = false;
    for (SendWqe &w : r.outstanding) {
        if (w.localStatus != PIB_WC_SUCCESS || w.acked)
            continue;
        if (w.stream == stream) {
            w.localStatus = PIB_WC_WR_FLUSH_ERR;
            w.streamError = true;
            w.sentPackets = w.packets; // nothing more of it goes out
            continue;
        }
        w.firstPsn = r.psn;
        r.psn = psnAdd(r.psn, w.packets);
        w.sentPackets = w.received = 0;
        resend = true;
    }
    r.unackedPsn = start;
    r.unsentHeld = resend;
    if (resend) {
        qp.dc.connected = true;
        qp.dc.connectPsn = start;
        qp.dc.serial = objects_.dcConnections.takeSerial();
        trace::dc_connect(host_, qp.number, qp.attr.dest_qp_num, qp.attr.av.dlid, start);
    }
}

// Whether `qp`, a DCI, is connected to the DCT at `to`, by the same path.
bool Requester::reachesDct(const QueuePair &qp, const DcAddress &to) {
    const pib_av &a = qp.attr.av, &b = to.av;
    return qp.dc.connected && qp.attr.dest_qp_num == to.dct && qp.dc.key == to.key &&
           a.dlid == b.dlid && a.sl == b.sl && a.src_path_bits == b.src_path_bits &&
           (a.flags & PIB_AV_GRH) == (b.flags & PIB_AV_GRH) &&
           (!(a.flags & PIB_AV_GRH) ||
            (a.sgid_index == b.sgid_index && std::memcmp(a.dgid, b.dgid, sizeof a.dgid) == 0));
}

// DCI `qp`, with nothing unanswered, connects to the DCT at `to`: its
// next request packet says CONNECT (as does every resend of it).
void Requester::connectDci(QueuePair &qp, const DcAddress &to) {
    disconnectDci(qp, "it goes to another DCT");
    qp.attr.av = to.av;
    qp.attr.dest_qp_num = to.dct;
    qp.dc.key = to.key;
    qp.dc.connectPsn = qp.req.psn;
    qp.dc.connected = true;
    qp.dc.serial = objects_.dcConnections.takeSerial();
    trace::dc_connect(host_, qp.number, to.dct, to.av.dlid, qp.req.psn);
}

// DCI `qp` leaves the DCT it is connected to, if any, with a DISCONNECT
// that frees its connection there. Nothing answers it; if it is lost (or
// the port is full), the DCT's table takes the place back when it needs it.
void Requester::disconnectDci(QueuePair &qp, const char *why) {
    if (!qp.dc.connected)
        return;
    qp.dc.connected = false;
    trace::dc_disconnect(host_, qp.number, qp.attr.dest_qp_num, why);
    if (!scheduler_.mayTransmit(qp.attr.port_num))
        return;
    iba::Packet p;
    p.bth.opcode = iba::kDcDisconnect;
    p.bth.psn = qp.req.psn;
    p.dceth = iba::Dceth{qp.dc.key, qp.number, 0, qp.dc.serial};
    sendConnected(qp, p);
}

// Whether the requester fetches the next WQE: in RTS; in SQD only one a
// loaded QP had started before it was saved (transport_state.cc).
bool Requester::fetchesNew(const QueuePair &qp) {
    const RequesterState &r = qp.req;
    return qp.attr.qp_state == PIB_QPS_RTS ||
           (qp.attr.qp_state == PIB_QPS_SQD && r.refetchUntil && qp.sq.consumer != *r.refetchUntil);
}

// A REG_MR, BIND_MW or LOCAL_INV WQE (the spare) at the head of an idle
// send queue: it takes effect now, and completes (in error, the QP with
// it) at once.
void Requester::runLocalOperation(QueuePair &qp, SendWqe &w) {
    uint8_t status = PIB_WC_SUCCESS;
    if (w.update)
        status = keys_.update(qp.number, w.index, w.imm, *w.update, w.pages);
    else if (w.indirect)
        status = keys_.configureIndirect(qp, w.index, w.imm, *w.indirect);
    else if (w.opcode == PIB_WR_REG_MR)
        status =
            keys_.fastRegister(qp.number, w.index, qp.ctx.pdn, w.reg, w.pages, w.remoteInvalidate);
    else if (w.opcode == PIB_WR_BIND_MW)
        status = keys_.bindWindow(qp.number, w.index, qp.ctx.pdn, w.bind);
    else if (w.opcode == kWrNop)
        trace::wqe_nop(host_, qp.number, w.index);
    else if (w.opcode == kWrDmaCopy)
        status = copyLocal(qp, w);
    else
        status = keys_.invalidateLocal(qp.number, w.index, qp.ctx.pdn, w.imm);
    w.localStatus = status;
    w.acked = true;
    holdWqe(qp);
    completeInOrder(qp);
}

// A DMA copy: the first data segment's bytes into the second's, both
// through local keys of the QP's PD (the destination's with local write),
// of one length up to kMaxDmaCopy.
uint8_t Requester::copyLocal(const QueuePair &qp, SendWqe &w) {
    if (w.sges.size() != 2 || w.sges[0].byte_count != w.sges[1].byte_count ||
        w.sges[0].byte_count == 0 || w.sges[0].byte_count > limits::kMaxDmaCopy)
        return PIB_WC_LOC_LEN_ERR;
    copyBuffer_.resize(w.sges[0].byte_count);
    uint8_t status = memory_.gatherInto(qp.ctx.pdn, std::span(w.sges).first(1), 0, copyBuffer_);
    if (status == PIB_WC_SUCCESS)
        status = memory_.scatter(qp.ctx.pdn, std::span(w.sges).subspan(1), copyBuffer_, 0);
    w.length = status == PIB_WC_SUCCESS ? w.sges[0].byte_count : 0;
    trace::wqe_dma_copy(host_, qp.number, w.index, w.sges[0].byte_count, status);
    return status;
}

// An empty WQE object to fetch the next WQE into; it stays this
// requester's spare until holdWqe() takes it.
SendWqe &Requester::spareWqe() {
    if (spare_)
        SendWqePool::clear(*spare_);
    else
        spare_ = pool_.take();
    return *spare_;
}

// The spare joins `qp`'s outstanding WQEs.
void Requester::holdWqe(QueuePair &qp) {
    SendWqe &w = *spare_;
    w.footprint = static_cast<uint32_t>(footprint(w));
    qp.req.heldBytes += w.footprint;
    outstanding_.add(w.footprint);
    qp.req.outstanding.push(std::move(spare_));
}

FinishedWqe Requester::takeHeadWqe(QueuePair &qp) {
    PIB_INVARIANT(!qp.req.outstanding.empty());
    std::unique_ptr<SendWqe> w = qp.req.outstanding.pop();
    PIB_INVARIANT(qp.req.heldBytes >= w->footprint);
    qp.req.heldBytes -= w->footprint;
    outstanding_.remove(w->footprint);
    const FinishedWqe done{.index = w->index,
                           .wrId = w->wrId,
                           .opcode = w->opcode,
                           .flags = w->flags,
                           .vendorErr = w->vendorErr,
                           .length = w->length,
                           .readOrAtomicSent = w->isReadOrAtomic() && w->packets,
                           .stream = w->stream,
                           .streamError = w->streamError};
    pool_.give(std::move(w));
    return done;
}

void Requester::releaseWqes(QueuePair &qp) {
    outstanding_.remove(qp.req.heldBytes);
    qp.req.heldBytes = 0;
    qp.req.outstanding.clear();
}

// Sends what `w` has not sent. False when the requester must stop: the QP
// failed, or a full window, a spent budget or a full port held the rest.
bool Requester::sendAll(QueuePair &qp, SendWqe &w) {
    const SendProgress progress = sendRequestPackets(qp, w);
    if (progress != SendProgress::kAllSent && progress != SendProgress::kFailed)
        stopSending(qp, progress);
    return progress == SendProgress::kAllSent;
}

// The requester stops before its work is all out: a full window waits for
// ACKs, a spent budget or a full port for the scheduler, a page fault for
// the driver's resume.
void Requester::stopSending(QueuePair &qp, SendProgress why) {
    qp.req.unsentHeld = true;
    if (why == SendProgress::kPaused)
        scheduler_.postpone(qp.number, qp);
    armAckTimerIfIdle(qp);
}

void Requester::armAckTimerIfIdle(QueuePair &qp) {
    if (isReliableRequester(qp.ctx.type) && !qp.req.outstanding.empty() && !qp.req.ackDeadline)
        restartAckTimer(qp);
}

// The opcode and extension headers of request packet `i` of `w`: its
// position in the message picks First, Middle, Last or Only; the first
// WRITE packet carries the RETH, a READ request asks for what has not
// arrived yet.
static void requestHeaders(const SendWqe &w, uint32_t i, uint32_t mtu, uint8_t transport,
                           iba::Packet &p) {
    const bool first = i == 0, last = i == w.packets - 1, only = w.packets == 1;
    uint8_t op = 0;
    switch (w.opcode) {
    case PIB_WR_SEND:
    case PIB_WR_SEND_IMM: {
        const bool imm = w.opcode == PIB_WR_SEND_IMM;
        op = only    ? (imm ? iba::kSendOnlyImm : iba::kSendOnly)
             : first ? iba::kSendFirst
             : last  ? (imm ? iba::kSendLastImm : iba::kSendLast)
                     : iba::kSendMiddle;
        break;
    }
    case PIB_WR_SEND_INV:
        op = only    ? iba::kSendOnlyInv
             : first ? iba::kSendFirst
             : last  ? iba::kSendLastInv
                     : iba::kSendMiddle;
        break;
    case PIB_WR_RDMA_WRITE:
    case PIB_WR_RDMA_WRITE_IMM: {
        const bool imm = w.opcode == PIB_WR_RDMA_WRITE_IMM;
        op = only    ? (imm ? iba::kWriteOnlyImm : iba::kWriteOnly)
             : first ? iba::kWriteFirst
             : last  ? (imm ? iba::kWriteLastImm : iba::kWriteLast)
                     : iba::kWriteMiddle;
        if (first)
            p.reth = iba::Reth{w.remoteAddr, w.rkey, w.length};
        break;
    }
    case PIB_WR_RDMA_READ:
        // One request for what has not arrived yet (all of it, unless a
        // rewind found part of the response already placed).
        op = iba::kReadRequest;
        p.bth.psn = psnAdd(w.firstPsn, w.received / mtu);
        p.reth = iba::Reth{w.remoteAddr + w.received, w.rkey, w.length - w.received};
        break;
    case PIB_WR_ATOMIC_CMP_AND_SWP:
    case PIB_WR_ATOMIC_FETCH_AND_ADD:
        op = w.opcode == PIB_WR_ATOMIC_CMP_AND_SWP ? iba::kCompareSwap : iba::kFetchAdd;
        p.atomicEth = iba::AtomicEth{w.remoteAddr, w.rkey, w.swapAdd, w.compare};
        break;
    case PIB_WR_FLUSH:
        op = iba::kFlush;
        p.feth = iba::Feth{w.flushPlacement, w.flushSelectivity};
        p.reth = iba::Reth{w.remoteAddr, w.rkey, w.length};
        break;
    case PIB_WR_ATOMIC_WRITE:
        op = iba::kAtomicWrite;
        p.reth = iba::Reth{w.remoteAddr, w.rkey, w.length};
        break;
    }
    p.bth.opcode = static_cast<uint8_t>(transport | op);
    if (iba::layoutOf(p.bth.opcode).imm)
        p.imm = __builtin_bswap32(w.imm);
    if (iba::layoutOf(p.bth.opcode).ieth)
        p.ieth = w.imm; // the R_Key, in host order in the WQE
    if (last && (w.opcode == PIB_WR_SEND || w.opcode == PIB_WR_SEND_IMM ||
                 w.opcode == PIB_WR_SEND_INV || w.opcode == PIB_WR_RDMA_WRITE_IMM))
        p.bth.solicited = w.flags & PIB_WQE_SOLICITED;
}

// Builds request packet `p` with bytes [offset, offset + len) of `w`'s
// data, read by DMA straight into it, and sends it. kFailed when the data
// cannot be read: `w` then completes in error. kPageFault when it reaches
// a page its key stopped mapping since the WQE was checked (the driver
// invalidated it meanwhile, docs/mlx5.md §10.6): the packet waits for the
// fault, and goes when it is resumed.
Requester::SendProgress Requester::sendRequestPacket(QueuePair &qp, SendWqe &w, iba::Packet &p,
                                                     uint32_t offset, uint32_t len) {
    if (!addressConnected(qp, p)) {
        scheduler_.charge(); // lost on a port that cannot send: the same work bound
        return SendProgress::kAllSent;
    }
    iba::PacketWriter writer = startPacket(qp, p, len);
    uint8_t status = PIB_WC_SUCCESS;
    // The inline prefix first, then what the data segments gather.
    const uint32_t inlineBytes = static_cast<uint32_t>(w.inlineData.size());
    const uint32_t fromInline = offset < inlineBytes ? std::min(len, inlineBytes - offset) : 0;
    if (fromInline)
        writer.append(w.inlineData.data() + offset, fromInline);
    if (len > fromInline)
        status = memory_.gatherInto(qp.ctx.pdn, w.sges, offset + fromInline - inlineBytes,
                                    len - fromInline, writer);
    if (status != PIB_WC_SUCCESS) {
        const std::optional<FaultSite> fault = memory_.takeFault();
        if (fault && waitForPage(qp, FaultSide::kRequester, *fault))
            return SendProgress::kPageFault;
        if (!fault) // a failed fault is no guest error
            host_.guestError(err::kWqeDma, "QP %u WQE %u: cannot read its data", qp.number,
                             w.index);
        w.localStatus = status;
        w.packets = w.sentPackets; // nothing more of it goes out
        completeInOrder(qp);
        return SendProgress::kFailed;
    }
    transmitConnected(qp, std::move(writer));
    return SendProgress::kAllSent;
}

// Sends the packets of `w` not yet sent, as far as the RC send window
// lets them go. kFailed when the QP went to the error state on the way.
Requester::SendProgress Requester::sendRequestPackets(QueuePair &qp, SendWqe &w) {
    const uint32_t mtu = pathMtu(qp);
    const bool uc = qp.ctx.type == PIB_QPT_UC;
    const bool xrc = qp.ctx.type == PIB_QPT_XRC_INI, dc = qp.ctx.type == kQptDci;
    const uint8_t transport = uc    ? iba::kTransportUc
                              : xrc ? iba::kTransportXrc
                              : dc  ? iba::kTransportDc
                                    : iba::kTransportRc;
    const uint32_t window = sendWindowPackets(mtu), ackInterval = ackRequestInterval(mtu);
    while (w.sentPackets < w.packets) {
        const uint32_t i = w.sentPackets;
        const bool last = i == w.packets - 1;
        iba::Packet p;
        p.bth.psn = psnAdd(w.firstPsn, i);
        // A READ or atomic request is one packet whatever its PSNs: the
        // window holds back data packets only.
        if (!uc && !w.isReadOrAtomic() &&
            psnDiff(p.bth.psn, qp.req.unackedPsn) >= static_cast<int32_t>(window))
            return SendProgress::kWindowFull;
        if (!scheduler_.mayTransmit(qp.attr.port_num))
            return SendProgress::kPaused;
        requestHeaders(w, i, mtu, transport, p);
        if (xrc)
            p.xrceth = w.remoteSrqn & 0xffffff;
        if (dc)
            p.dceth = iba::Dceth{qp.dc.key, qp.number,
                                 p.bth.psn == qp.dc.connectPsn ? iba::Dceth::kConnect : uint8_t{0},
                                 qp.dc.serial};
        // RC asks for an ACK at the end of each SEND and WRITE, and every
        // ackInterval PSNs within long ones (reads and atomics are
        // answered anyway); the responder's one ACK covers every packet
        // before it.
        p.bth.ackReq = !uc && !w.isReadOrAtomic() && (last || (p.bth.psn + 1) % ackInterval == 0);
        // A READ request and an atomic carry none; an ATOMIC WRITE its 8 bytes.
        const bool data = iba::layoutOf(p.bth.opcode).payload;
        const uint32_t offset = i * mtu;
        const uint32_t len = data ? std::min(mtu, w.length - offset) : 0;
        if (const SendProgress sent = sendRequestPacket(qp, w, p, offset, len);
            sent != SendProgress::kAllSent)
            return sent;
        if (w.opcode == PIB_WR_RDMA_READ) {
            w.askedFrom = p.bth.psn;
            w.latestResponse = psnAdd(p.bth.psn, 0xffffff);
            w.answerRestarted = false;
        }
        w.sentPackets = w.isReadOrAtomic() ? w.packets : i + 1;
    }
    return SendProgress::kAllSent;
}

// Resends from `psn` on: every outstanding WQE from the one that holds it.
void Requester::rewind(QueuePair &qp, uint32_t psn) {
    qp.req.unsentHeld = true;
    // A DCI's resend says CONNECT: a DCT that lost the connection (its
    // table took the place, or a move lost it) opens it again there, and
    // one that has it takes the packet as in sequence or a duplicate.
    if (qp.ctx.type == kQptDci && qp.dc.connected)
        qp.dc.connectPsn = psn;
    for (SendWqe &w : qp.req.outstanding) {
        const int32_t d = psnDiff(psn, w.firstPsn);
        if (d >= static_cast<int32_t>(w.packets))
            continue;
        if (w.isReadOrAtomic())
            w.sentPackets = 0; // the request again, for what is missing
        else
            w.sentPackets = d > 0 ? static_cast<uint32_t>(d) : 0;
    }
}

} // namespace pib
