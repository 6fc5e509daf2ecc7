// SPDX-License-Identifier: GPL-2.0-or-later
// The requester's other half (IBA 9.7.5.1): ACKs, NAKs, READ responses and
// atomic ACKs complete send WQEs in order; the local ACK timeout and RNR
// NAKs resend, within retry_cnt and rnr_retry.
#include <cinttypes>
#include <cstring>

#include "qp_timers.hh"
#include "requester.hh"
#include "trace.hh"

namespace pib {

namespace {

uint8_t completionOpcode(uint8_t wr) {
    switch (wr) {
    case PIB_WR_RDMA_WRITE:
    case PIB_WR_RDMA_WRITE_IMM:
        return PIB_WC_RDMA_WRITE;
    case PIB_WR_RDMA_READ:
        return PIB_WC_RDMA_READ;
    case PIB_WR_ATOMIC_CMP_AND_SWP:
        return PIB_WC_COMP_SWAP;
    case PIB_WR_ATOMIC_FETCH_AND_ADD:
        return PIB_WC_FETCH_ADD;
    case PIB_WR_LOCAL_INV:
        return PIB_WC_LOCAL_INV;
    case PIB_WR_REG_MR:
        return PIB_WC_REG_MR;
    case PIB_WR_BIND_MW:
        return PIB_WC_BIND_MW;
    case PIB_WR_FLUSH:
        return PIB_WC_FLUSH;
    case PIB_WR_ATOMIC_WRITE:
        return PIB_WC_ATOMIC_WRITE;
    case kWrNop:
        return kWcNop;
    case kWrDmaCopy:
        return kWcDmaCopy;
    default:
        return PIB_WC_SEND;
    }
}

} // namespace

// IBA 9.7.6.1.3: the local ACK timeout is 4.096 us * 2^timeout; 0 means
// the timer is off.
uint64_t Requester::ackTimeoutNs(const QueuePair &qp) const {
    const unsigned t = std::min<unsigned>(qp.attr.timeout, 31);
    return t ? uint64_t{4096} << t : 0;
}

// IBA 9.7.5.2.8, table 45: the RNR NAK timer field in microseconds * 100.
uint64_t Requester::rnrDelayNs(uint8_t code) {
    static constexpr uint32_t kHundredthsOfMs[32] = {
        65536, 1,    2,    3,    4,    6,     8,     12,    16,    24,   32,
        48,    64,   96,   128,  192,  256,   384,   512,   768,   1024, 1536,
        2048,  3072, 4096, 6144, 8192, 12288, 16384, 24576, 32768, 49152};
    return uint64_t{kHundredthsOfMs[code & 31]} * 10'000;
}

void Requester::restartAckTimer(QueuePair &qp) {
    rearmAckTimer(qp);
    if (qp.req.ackDeadline)
        qp.req.sentMark = scheduler_.cableSentMark(qp);
}

// The timer runs again, still timing what was sent by its mark.
void Requester::rearmAckTimer(QueuePair &qp) {
    RequesterState &r = qp.req;
    if (!r.unanswered())
        r.resending = false;
    const uint64_t timeout = ackTimeoutNs(qp);
    r.ackDeadline = !timeout || !r.timerRuns() ? 0 : host_.clockNs() + timeout;
    timers_.schedule(qp);
}

// Completes WQEs from the head while they are done: UC WQEs once sent, RC
// ones when acknowledged (marked by ackUpTo), bad ones with their error.
void Requester::completeInOrder(QueuePair &qp) {
    RequesterState &r = qp.req;
    while (!r.outstanding.empty()) {
        SendWqe &w = r.outstanding.front();
        if (w.localStatus != PIB_WC_SUCCESS) {
            completeHead(qp, w.localStatus);
            if (qp.attr.qp_state == PIB_QPS_ERR)
                return;
            continue; // it failed a DCI's stream only
        }
        const bool done = w.acked || (qp.ctx.type == PIB_QPT_UC && w.sentPackets == w.packets);
        if (!done)
            return;
        completeHead(qp, PIB_WC_SUCCESS);
    }
    notifyIfSqDrained(qp);
}

// Raises SQ drained for a QP in SQD that asked for it, once no send WQE
// it started is still in flight.
void Requester::notifyIfSqDrained(QueuePair &qp) {
    if (!qp.sqDrainPending || !qp.req.outstanding.empty() || qp.attr.qp_state != PIB_QPS_SQD)
        return;
    qp.sqDrainPending = false;
    events_.postAsyncEvent(PIB_ASYNC_SQ_DRAINED, qp.number);
}

// Completes the oldest outstanding WQE. An error completion moves the QP
// to the error state and flushes everything after it (IBA 10.8.3.3),
// unless it fails only its stream, a DCI's (dci_streams.hh): decided as
// it was fetched, or by onNak.
void Requester::completeHead(QueuePair &qp, uint8_t status) {
    RequesterState &r = qp.req;
    const FinishedWqe w = takeHeadWqe(qp);
    if (w.readOrAtomicSent && r.readsInFlight)
        --r.readsInFlight;
    const bool signaled = (w.flags & PIB_WQE_SIGNALED) || (qp.ctx.flags & PIB_QP_SIGNAL_ALL);
    events_.completeSend(qp, w.index, w.wrId, completionOpcode(w.opcode), status, w.length,
                         signaled, w.vendorErr);
    if (status != PIB_WC_SUCCESS && w.streamError) {
        trace::dci_stream_error(host_, qp.number, w.index, w.stream, status);
        return;
    }
    if (status != PIB_WC_SUCCESS) {
        trace::qp_error(host_, qp.number, w.index, status);
        qp.attr.qp_state = PIB_QPS_ERR;
        flushQp(qp);
    }
}

// An ACK (or an implied one) for every PSN up to `psn`: SENDs and WRITEs
// that end there are done. A READ or atomic the ACK passes was answered
// by responses that got lost: it must be asked again (IBA 9.7.5.1.5).
void Requester::ackUpTo(QueuePair &qp, uint32_t psn) {
    // An ACK that moves the window on is progress, also in the middle of a
    // long message: the retry count starts over and the timer restarts.
    // (The retries are for a peer that answers nothing; otherwise any
    // transfer longer than timeout x retries would fail.)
    bool progress = qp.req.acknowledged(psn);
    for (SendWqe &w : qp.req.outstanding) {
        if (w.localStatus != PIB_WC_SUCCESS)
            continue; // it completes as it failed
        if (w.packets == 0 || psnDiff(psn, w.lastPsn()) < 0)
            break;
        if (w.isReadOrAtomic()) {
            count(qp, &pib_port_counters::implied_naks);
            rewind(qp, psnAdd(w.firstPsn, w.received / pathMtu(qp)));
            break;
        }
        if (!w.acked)
            progress = true;
        w.acked = true;
    }
    if (progress)
        qp.req.answered(qp.attr.retry_cnt, qp.attr.rnr_retry);
    completeInOrder(qp);
    if (qp.attr.qp_state != PIB_QPS_ERR && progress)
        restartAckTimer(qp);
}

// A response packet: believed only for a request in flight, then taken
// by what it is. Each handler says whether the requester may send on.
void Requester::onResponse(QueuePair &qp, const iba::Packet &packet) {
    RequesterState &r = qp.req;
    const uint8_t state = qp.attr.qp_state;
    if (!isReliableRequester(qp.ctx.type) || (state != PIB_QPS_RTS && state != PIB_QPS_SQD) ||
        r.outstanding.empty())
        return; // nothing asked: a late or stray response
    const uint32_t psn = packet.bth.psn;
    const uint8_t op = packet.bth.opcode & 0x1f;
    // A response beyond what was sent is not ours to believe.
    if (psnDiff(psn, r.psn) >= 0) {
        trace::err_rc_bad_response_psn(host_, qp.number, psn, r.psn);
        return;
    }
    bool sendOn = true;
    if (op == iba::kAcknowledge)
        sendOn = onAcknowledge(qp, packet);
    else if (op == iba::kAtomicAcknowledge)
        sendOn = onAtomicAcknowledge(qp, packet);
    else if (op >= iba::kReadResponseFirst && op <= iba::kReadResponseOnly)
        readResponse(qp, packet);
    if (sendOn && qp.attr.qp_state == PIB_QPS_RTS)
        send(qp);
}

// An ACK or NAK (IBA 9.7.5.1): by its AETH's syndrome.
bool Requester::onAcknowledge(QueuePair &qp, const iba::Packet &packet) {
    const uint32_t psn = packet.bth.psn;
    const uint8_t syndrome = packet.aeth->syndrome;
    switch (syndrome >> 5) {
    case aeth::kAck:
        ackUpTo(qp, psn);
        return true;
    case aeth::kRnrNak:
        if (staleNak(qp, psn))
            return false;
        // The NAKed PSN itself is not acknowledged: everything before it is.
        ackUpTo(qp, psnAdd(psn, 0xffffff));
        if (qp.attr.qp_state != PIB_QPS_ERR && !qp.req.outstanding.empty())
            onRnrNak(qp, psn, syndrome & 0x1f);
        return false;
    case aeth::kNak:
        if (staleNak(qp, psn))
            return false;
        ackUpTo(qp, psnAdd(psn, 0xffffff));
        if (qp.attr.qp_state == PIB_QPS_ERR || qp.req.outstanding.empty())
            return false;
        return onNak(qp, psn, syndrome & 0x1f);
    default:
        return false; // reserved syndrome
    }
}

// A NAK of a PSN acknowledged already answers a duplicate the fabric
// delayed past what followed it: the request it names was done, and the
// WQEs in flight now are not its. Like any response older than the oldest
// request outstanding, it is a duplicate, and dropped.
bool Requester::staleNak(const QueuePair &qp, uint32_t psn) {
    if (psnDiff(psn, qp.req.unackedPsn) >= 0)
        return false;
    trace::rc_stale_nak(host_, qp.number, psn, qp.req.unackedPsn);
    return true;
}

// RNR NAK: the responder had no receive WQE; send again from `psn` after
// the delay it asks for, while RNR retries last (7: for ever).
void Requester::onRnrNak(QueuePair &qp, uint32_t psn, uint8_t timerCode) {
    RequesterState &r = qp.req;
    count(qp, &pib_port_counters::rnr_naks_received);
    if (r.rnrRetriesLeft == 0) {
        count(qp, &pib_port_counters::rnr_retry_exceeded);
        completeHead(qp, PIB_WC_RNR_RETRY_EXC_ERR);
        return;
    }
    if (r.rnrRetriesLeft != 7)
        --r.rnrRetriesLeft;
    rewind(qp, psn);
    r.rnrNakedPsn = psn;
    r.rnrDeadline = host_.clockNs() + rnrDelayNs(timerCode);
    r.ackDeadline = 0;
    timers_.schedule(qp);
    trace::rc_rnr(host_, qp.number, psn, rnrDelayNs(timerCode));
}

// NAK: a PSN sequence error is resent from `psn` while retries last; the
// others complete the WQE at the head in error. True when sending goes on.
// The requests sent behind one an RNR NAK refused are out of sequence at
// the responder, which NAKs the first of them naming the refused PSN: the
// RNR wait resends from there already, so that NAK tells of no loss and
// spends no retry. Else a receiver slow to post its WQEs would cost a
// retry every RNR wait, and the QP its connection in a few milliseconds
// (fabtests' fi_flood), though rnr_retry 7 waits for ever.
bool Requester::onNak(QueuePair &qp, uint32_t psn, uint8_t code) {
    if (code == aeth::kPsnSequence && qp.req.rnrNakedPsn == psn) {
        trace::rc_seq_nak_behind_rnr(host_, qp.number, psn);
        return false;
    }
    if (code == aeth::kPsnSequence) {
        trace::rc_seq_nak(host_, qp.number, psn);
        count(qp, &pib_port_counters::seq_naks_received);
        if (qp.req.retriesLeft == 0) {
            count(qp, &pib_port_counters::retry_exceeded);
            completeHead(qp, PIB_WC_RETRY_EXC_ERR);
            return false;
        }
        --qp.req.retriesLeft;
        rewind(qp, psn);
        return true;
    }
    const uint8_t status = code == aeth::kInvalidRequest ? PIB_WC_REM_INV_REQ_ERR
                           : code == aeth::kRemoteAccess ? PIB_WC_REM_ACCESS_ERR
                                                         : PIB_WC_REM_OP_ERR;
    const std::optional<uint16_t> stream = nakedStream(qp, psn, status);
    completeHead(qp, status);
    if (!stream)
        return false;
    // A DCI's stream failed, and with it the DCT's connection: the rest
    // goes on, on a new one, once the stream's WQEs behind it are flushed.
    restartAfterStreamError(qp, *stream);
    completeInOrder(qp);
    return true;
}

// Whether the NAK of `psn` fails only the stream of the WQE at the head
// (its stream then), on a DCI with streams: the NAK must name that WQE
// (one behind an unanswered READ fails the DCI, as without streams), and
// the DCI must have room for another stream in error.
std::optional<uint16_t> Requester::nakedStream(QueuePair &qp, uint32_t psn, uint8_t status) {
    SendWqe &head = qp.req.outstanding.front();
    if (qp.ctx.type != kQptDci || !qp.streams.on() || !failsStreamByNak(status) ||
        head.packets == 0 || psnDiff(psn, head.firstPsn) < 0 || psnDiff(psn, head.lastPsn()) > 0)
        return std::nullopt;
    head.streamError = qp.streams.fail(head.stream);
    return head.streamError ? std::optional<uint16_t>(head.stream) : std::nullopt;
}

// An atomic's answer: the original value lands in the WQE's buffer. False
// when it was no answer to the atomic at the head.
bool Requester::onAtomicAcknowledge(QueuePair &qp, const iba::Packet &packet) {
    RequesterState &r = qp.req;
    const uint32_t psn = packet.bth.psn;
    ackUpTo(qp, psnAdd(psn, 0xffffff));
    if (qp.attr.qp_state == PIB_QPS_ERR || r.outstanding.empty())
        return false;
    SendWqe &w = r.outstanding.front();
    if (w.opcode != PIB_WR_ATOMIC_CMP_AND_SWP && w.opcode != PIB_WR_ATOMIC_FETCH_AND_ADD)
        return false;
    if (w.firstPsn != psn || !packet.atomicAck)
        return false; // a duplicate answer
    uint8_t bytes[8];
    std::memcpy(bytes, &*packet.atomicAck, 8); // the original value, host order
    const uint8_t status = memory_.scatter(qp.ctx.pdn, w.sges, bytes, 0);
    if (status == PIB_WC_SUCCESS) {
        w.acked = true;
        r.acknowledged(psn);
    } else
        w.localStatus = status;
    r.answered(qp.attr.retry_cnt, qp.attr.rnr_retry);
    completeInOrder(qp);
    if (qp.attr.qp_state != PIB_QPS_ERR)
        restartAckTimer(qp);
    return true;
}

// A response after a gap says READ `w` lacks its responses from
// `expected` on. Every response in flight behind the lost one says the
// same: asking at each put a READ request on the wire per response (1019
// for one lost of 1024), which the responder answered one after another.
// So the READ asks once per gap, and again only on news that its request
// went unanswered: the answer it asked for started over and lost that
// response again, or the answer in flight ended (its last response) with
// the gap still open, the request lost or too late. Otherwise the ACK
// timer asks.
static bool mustAskAgain(const SendWqe &w, uint32_t expected, bool lastResponse) {
    return w.askedFrom != expected || w.answerRestarted || lastResponse;
}

// A READ response packet: its data lands where the READ's SGEs say, in
// order; anything out of order is dropped and asked for again.
void Requester::readResponse(QueuePair &qp, const iba::Packet &packet) {
    RequesterState &r = qp.req;
    const uint32_t psn = packet.bth.psn;
    // A response implies ACKs for every request before the READ.
    SendWqe *w = nullptr;
    for (SendWqe &o : r.outstanding) {
        if (o.packets && o.localStatus == PIB_WC_SUCCESS && psnDiff(psn, o.firstPsn) >= 0 &&
            psnDiff(psn, o.lastPsn()) <= 0) {
            w = &o;
            break;
        }
    }
    // A FLUSH and an ATOMIC WRITE are answered by one without data.
    if (!w || (w->opcode != PIB_WR_RDMA_READ && !w->isAnsweredEmpty()))
        return;
    ackUpTo(qp, psnAdd(w->firstPsn, 0xffffff));
    if (qp.attr.qp_state == PIB_QPS_ERR || r.outstanding.empty() || &r.outstanding.front() != w)
        return; // an earlier READ or atomic must be answered first
    const uint32_t mtu = pathMtu(qp);
    const uint32_t expected = psnAdd(w->firstPsn, w->received / mtu);
    const uint8_t op = packet.bth.opcode & 0x1f;
    const bool last = op == iba::kReadResponseLast || op == iba::kReadResponseOnly;
    if (psnDiff(psn, w->latestResponse) < 0)
        w->answerRestarted = true;
    w->latestResponse = psn;
    if (psn != expected) {
        if (psnDiff(psn, expected) > 0 && mustAskAgain(*w, expected, last)) {
            trace::rc_read_gap(host_, qp.number, psn, expected);
            rewind(qp, expected);
        }
        return;
    }
    const uint32_t left = w->responseBytes() - w->received;
    const size_t len = packet.data().size();
    if (len > left || (!last && len != mtu) || (last && len != left)) {
        trace::err_rc_bad_response_length(host_, qp.number, static_cast<unsigned>(len), left);
        w->localStatus = PIB_WC_BAD_RESP_ERR;
        completeInOrder(qp);
        return;
    }
    const uint8_t status = memory_.scatter(qp.ctx.pdn, w->sges, packet.data(), w->received);
    if (status != PIB_WC_SUCCESS) {
        w->localStatus = status;
        completeInOrder(qp);
        return;
    }
    w->received += static_cast<uint32_t>(len);
    r.acknowledged(psn);
    r.answered(qp.attr.retry_cnt, qp.attr.rnr_retry);
    if (last)
        w->acked = true;
    completeInOrder(qp);
    if (qp.attr.qp_state != PIB_QPS_ERR)
        restartAckTimer(qp);
}

// An ACK timeout while the QP's packets wait for room in the port's
// queue, or the switch has not yet taken from the port's ring cable what
// the QP had sent when its timer started: the switch process did not run
// (a loaded host can leave it waiting for a CPU for seconds), so the
// request may not even have left, and the peer had no chance to answer.
// Or while the device has not read what the switch had put on the cable
// for it at the last timeout (or, at the first, what waits there now):
// this QEMU is behind (a migration's precopy competes with it for the
// CPU, and the switch then holds back what the peer sends here behind
// what waits already), and the answer may be among it. Either way the
// timer would time the host, not the wire. Such a timeout spends no retry
// and resends nothing, for at most kCableStallGraceNs from the first one
// since the last answer: a port or cable that stays stuck still ends in
// RETRY_EXC_ERR, later (a QP that waited for room without its timer would
// wait for ever). The marks make it a test of progress, not of a level:
// on a busy cable that moves, a packet the fabric lost is resent at the
// QP's own timeout. True when the timer was started again instead.
bool Requester::cableStalled(QueuePair &qp, uint64_t now) {
    RequesterState &r = qp.req;
    const bool untaken = scheduler_.waitsForRoom(qp) || !scheduler_.cableTakenUpTo(qp, r.sentMark);
    const uint64_t arrived = scheduler_.cableArrivedMark(qp);
    const bool behind = !scheduler_.cableReadUpTo(qp, r.arrivedMark.value_or(arrived));
    r.arrivedMark = arrived;
    if (!untaken && !behind)
        return false;
    if (!r.cableStallFrom)
        r.cableStallFrom = now;
    if (now - r.cableStallFrom >= kCableStallGraceNs)
        return false;
    if (untaken)
        trace::rc_timeout_excused(host_, qp.number, r.unackedPsn);
    else
        trace::rc_timeout_behind(host_, qp.number, r.unackedPsn);
    rearmAckTimer(qp); // what was sent since is not what this timer waits for
    return true;
}

// Whether this ACK timeout spends one of the QP's retries: the first
// since the peer last answered does, later ones only kRetrySpacingNs
// after the last that did. The retries are for a peer that is gone; one
// that is only slow must not exhaust them. Under TCG a guest's QEMU can
// wait for a CPU for half a second on a loaded host, and at timeout 14
// (67 ms, ibv_rc_pingpong's) retry_cnt 7 would be spent in that time.
// Every timeout still resends at once: loss is recovered as fast as the
// QP asked.
bool Requester::spendsRetry(QueuePair &qp, uint64_t now) {
    RequesterState &r = qp.req;
    if (r.retrySpentAt && now - r.retrySpentAt < kRetrySpacingNs)
        return false;
    r.retrySpentAt = now;
    return true;
}

// The local ACK timer or an RNR wait of `qpn` ran out.
// Where sending starts again when nothing answered: the head WQE, less
// what ACKs covered of a long one, or a READ's responses that came.
uint32_t Requester::resendFrom(const QueuePair &qp) const {
    const RequesterState &r = qp.req;
    const SendWqe &head = r.outstanding.front();
    const uint32_t from = psnAdd(head.firstPsn, head.received / pathMtu(qp));
    if (psnDiff(r.unackedPsn, from) > 0 && psnDiff(r.unackedPsn, head.lastPsn()) <= 0)
        return r.unackedPsn;
    return from;
}

void Requester::resendAfterLoss(QueuePair &qp) {
    RequesterState &r = qp.req;
    if (!r.awaitsAnswer() || r.rnrDeadline) // an RNR wait resends when it ends
        return;
    const uint32_t from = resendFrom(qp);
    trace::rc_resent_after_loss(host_, qp.number, from);
    r.resending = true;
    rewind(qp, from);
    send(qp);
    restartAckTimer(qp);
}

void Requester::timerExpired(QueuePair &qp) {
    RequesterState &r = qp.req;
    const uint64_t now = host_.clockNs();
    if (qp.attr.qp_state != PIB_QPS_RTS && qp.attr.qp_state != PIB_QPS_SQD) {
        r.rnrDeadline = r.ackDeadline = 0;
        return;
    }
    if (r.rnrDeadline && r.rnrDeadline <= now) {
        r.rnrDeadline = 0;
        send(qp); // resends what the rewind marked
        restartAckTimer(qp);
        return;
    }
    if (!r.ackDeadline || r.ackDeadline > now)
        return;
    r.ackDeadline = 0;
    // The timer times the wire, not the device's own queue: with nothing
    // unanswered out no retry is spent (sending again starts the timer
    // again), nor, for a while, with the work held back by a full port
    // or a cable the switch does not empty.
    if (!r.timerRuns() || cableStalled(qp, now))
        return;
    const bool spent = spendsRetry(qp, now);
    if (spent && r.retriesLeft == 0) {
        trace::rc_retry_exceeded(host_, qp.number, qp.attr.retry_cnt);
        count(qp, &pib_port_counters::ack_timeouts);
        count(qp, &pib_port_counters::retry_exceeded);
        completeHead(qp, PIB_WC_RETRY_EXC_ERR);
        return;
    }
    const uint32_t from = resendFrom(qp);
    if (spent) {
        --r.retriesLeft;
        trace::rc_timeout(host_, qp.number, from);
    } else {
        trace::rc_timeout_unspent(host_, qp.number, from);
    }
    count(qp, &pib_port_counters::ack_timeouts);
    r.resending = true;
    rewind(qp, from);
    send(qp);
    restartAckTimer(qp);
}

} // namespace pib
