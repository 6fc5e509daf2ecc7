// SPDX-License-Identifier: GPL-2.0-or-later
// The data path's entry points besides packets and the timer: the
// producer indices of the front ends' doorbells, QP state changes,
// destruction and resets.
#include "data_path.hh"

#include <cinttypes>

#include "trace.hh"

namespace pib {

void DataPath::shareTimer() {
    events_.moderation().setRearm([this] { timers_.rearm(); });
    timers_.setOtherDeadline([this] {
        const uint64_t cqs = events_.moderation().nextDeadline();
        const uint64_t other = otherDeadline_ ? otherDeadline_() : 0;
        return !cqs || (other && other < cqs) ? other : cqs;
    });
}

void DataPath::reset() {
    outstanding_.reset(); // the QPs went with the objects
    timers_.reset();
    events_.moderation().reset();
    scheduler_.reset();
}

// The states in which a QP's responder takes requests, and so may owe
// ACKs.
static bool answersRequests(uint8_t state) {
    return state == PIB_QPS_RTR || state == PIB_QPS_RTS || state == PIB_QPS_SQD ||
           state == PIB_QPS_SQE;
}

void DataPath::qpStateLeaving(QueuePair &qp, uint8_t next) {
    if ((next == PIB_QPS_RESET || next == PIB_QPS_ERR) && answersRequests(qp.attr.qp_state))
        responder_.sendOwedAcks(qp);
}

void DataPath::forgetQp(QueuePair &qp) {
    if (answersRequests(qp.attr.qp_state))
        responder_.sendOwedAcks(qp);
    if (receives_.receiveSrq(qp))
        receives_.completeClaimedWqe(qp, PIB_WC_WR_FLUSH_ERR);
    requester_.releaseWqes(qp);
    timers_.forget(qp);
}

// What entering state `next` from `cur` does beyond the attributes: the
// transport's state starts over, PSNs and retry counters are loaded, the
// queues flush or start, SQ drained is reported.
void DataPath::qpStateEntered(QueuePair &qp, uint8_t cur, uint8_t next, uint32_t mask) {
    const pib_qp_attr &a = qp.attr;
    qp.req.refetchUntil.reset();
    if (next == PIB_QPS_RESET) {
        // Reset empties the QP's own queues without completions, but a
        // WQE it took from an SRQ belongs to the SRQ: it completes.
        if (receives_.receiveSrq(qp))
            receives_.completeClaimedWqe(qp, PIB_WC_WR_FLUSH_ERR);
        qp.sq = qp.rq = WorkQueue{};
        requester_.releaseWqes(qp);
        // Its page faults end, their serials go on: a resume the driver
        // meant for one of before the reset is stale (page_faults.hh).
        const uint32_t requesterFaults = qp.req.fault.serial,
                       responderFaults = qp.resp.fault.serial;
        qp.req = RequesterState{};
        qp.resp = ResponderState{};
        qp.req.fault.serial = requesterFaults;
        qp.resp.fault.serial = responderFaults;
        if (qp.ctx.type == kQptDci) // connected to nothing; its next connection a new serial
            qp.dc = DcLink{};
        qp.streams.errored.clear();
        qp.lastWqeReached = false;
        qp.recordPollAt = qp.recordPollNs = 0;
        timers_.schedule(qp);
    }
    // The connected transports start from the PSNs given.
    if (next == PIB_QPS_RTR && cur == PIB_QPS_INIT)
        qp.resp.expectedPsn = a.rq_psn;
    if (next == PIB_QPS_RTS && cur == PIB_QPS_RTR)
        qp.req.psn = qp.req.unackedPsn = a.sq_psn;
    if (mask & PIB_QP_RETRY_CNT)
        qp.req.startRetriesOver(a.retry_cnt);
    if (mask & PIB_QP_RNR_RETRY)
        qp.req.rnrRetriesLeft = a.rnr_retry;
    if (next == PIB_QPS_ERR)
        flushQp(qp);
    if (next == PIB_QPS_RTS) // sends posted before RTS go now
        processSendQueue(qp);
    // IBA 11.6.3.2: the SQ is drained once every WQE it had started is
    // done; with none in flight, that is now; else the requester raises
    // it when the last one completes (completer.cc).
    qp.sqDrainPending = next == PIB_QPS_SQD && cur == PIB_QPS_RTS && a.en_sqd_async_notify;
    if (qp.sqDrainPending)
        requester_.notifyIfSqDrained(qp);
}

bool DataPath::updateProducer(const char *what, uint32_t number, uint32_t &producer,
                              uint32_t consumer, uint32_t size, uint32_t value) {
    // The producer only moves forward, and never more than a ring ahead.
    if (value - consumer > size || value - producer > size) {
        host_.guestError(err::kDoorbellBadIndex,
                         "%s %u producer index %u (was %u, consumer %u, %u slots)", what, number,
                         value, producer, consumer, size);
        return false;
    }
    producer = value;
    return true;
}

void DataPath::sendProduced(QueuePair &qp, uint32_t producer) {
    if (updateProducer("SQ of QP", qp.number, qp.sq.producer, qp.sq.consumer,
                       1u << qp.ctx.sq_log_wqe_count, producer))
        ringSendQueue(qp);
}

void DataPath::receiveProduced(QueuePair &qp, uint32_t producer) {
    if (updateProducer("RQ of QP", qp.number, qp.rq.producer, qp.rq.consumer,
                       1u << qp.ctx.rq_log_wqe_count, producer) &&
        qp.attr.qp_state == PIB_QPS_ERR)
        flushQp(qp); // IBA 10.8.3.1: posted in the error state, flushed at once
}

void DataPath::srqProduced(SharedReceiveQueue &srq, uint32_t producer) {
    updateProducer("SRQ", srq.number, srq.producer, srq.consumer, 1u << srq.ctx.log_wqe_count,
                   producer);
}

// A send's completion never appears while the doorbell write that posted
// it is under way, as on hardware: IPoIB counts a send as posted only after
// ib_post_send() returns, and wakes its stopped queue by that count. Sends
// that complete as they leave go after the write returns, from the next
// run; RC and XRC sends go at once (the fastest way out), and complete on
// the responder's acknowledgement, which for a looped-back packet also
// waits for that run.
void DataPath::ringSendQueue(QueuePair &qp) {
    if (completesOnLeaving(qp.ctx.type)) {
        scheduler_.postpone(qp.number, qp, /*needsPort*/ false);
        return;
    }
    processSendQueue(qp);
    scheduler_.holdLoopback();
}

} // namespace pib
