// SPDX-License-Identifier: GPL-2.0-or-later
// The data path's entry points besides packets and the timer: doorbells
// (BAR2), QP state changes, destruction and resets.
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

void DataPath::forgetQp(QueuePair &qp) {
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
        qp.req = RequesterState{};
        qp.resp = ResponderState{};
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

void DataPath::sendQueueProduced(QueuePair &qp, uint32_t producer) {
    if (updateProducer("SQ of QP", qp.number, qp.sq.producer, qp.sq.consumer,
                       1u << qp.ctx.sq_log_wqe_count, producer))
        ringSendQueue(qp);
}

// What a doorbell at `offset` of its page rings, as its trace names it.
static const char *doorbellQueue(uint32_t offset) {
    switch (offset) {
    case PIB_DB_SQ:
        return "SQ of QP";
    case PIB_DB_RQ:
        return "RQ of QP";
    case PIB_DB_SRQ:
        return "SRQ";
    case PIB_DB_CQ_ARM:
        return "arm of CQ";
    default:
        return "nothing at its offset";
    }
}

void DataPath::doorbell(uint32_t page, uint32_t offset, uint64_t value) {
    const auto number = static_cast<uint32_t>(value);
    const auto arg = static_cast<uint32_t>(value >> 32);
    trace::doorbell(host_, page, doorbellQueue(offset), number, arg);
    if (!objects_.uars.find(page)) {
        host_.guestError(err::kDoorbellUnallocated,
                         "write of 0x%" PRIx64 " to page %u offset 0x%x, which no context owns",
                         value, page, offset);
        return;
    }
    switch (offset) {
    case PIB_DB_SQ:
    case PIB_DB_RQ: {
        QueuePair *qp = objects_.findQp(number);
        // An XRC TGT QP has no queue to ring (and belongs to no page); an
        // XRC INI QP no receive queue.
        const bool hasQueue =
            qp && (offset == PIB_DB_SQ ? hasSendQueue(qp->ctx.type) : hasReceiveSide(qp->ctx.type));
        if (!qp || qp->ctx.uar_page != page || !hasQueue) {
            host_.guestError(err::kDoorbellBadObject, "%s doorbell of QP %u on page %u, which %s",
                             offset == PIB_DB_SQ ? "SQ" : "RQ", number, page,
                             !qp                        ? "does not exist"
                             : qp->ctx.uar_page != page ? "belongs to another page"
                                                        : "has no such queue");
            return;
        }
        if (offset == PIB_DB_SQ) {
            if (updateProducer("SQ of QP", number, qp->sq.producer, qp->sq.consumer,
                               1u << qp->ctx.sq_log_wqe_count, arg))
                ringSendQueue(*qp);
        } else if (qp->ctx.flags & PIB_QP_USE_SRQ)
            host_.guestError(err::kDoorbellBadObject, "RQ doorbell of QP %u, which uses an SRQ",
                             number);
        else if (updateProducer("RQ of QP", number, qp->rq.producer, qp->rq.consumer,
                                1u << qp->ctx.rq_log_wqe_count, arg) &&
                 qp->attr.qp_state == PIB_QPS_ERR)
            flushQp(*qp); // IBA 10.8.3.1: posted in the error state, flushed at once
        return;
    }
    case PIB_DB_SRQ: {
        SharedReceiveQueue *srq = objects_.srqs.find(number);
        if (!srq || srq->ctx.uar_page != page) {
            host_.guestError(err::kDoorbellBadObject, "doorbell of SRQ %u on page %u", number,
                             page);
            return;
        }
        updateProducer("SRQ", number, srq->producer, srq->consumer, 1u << srq->ctx.log_wqe_count,
                       arg);
        return;
    }
    case PIB_DB_CQ_ARM: {
        CompletionQueue *cq = objects_.cqs.find(number);
        if (!cq || cq->ctx.uar_page != page) {
            host_.guestError(err::kDoorbellBadObject, "arm of CQ %u on page %u", number, page);
            return;
        }
        if (arg != PIB_CQ_ARM_NEXT && arg != PIB_CQ_ARM_SOLICITED) {
            host_.guestError(err::kDoorbellBadArm, "arm of CQ %u with 0x%x", number, arg);
            return;
        }
        // An armed "next" is not weakened by a later "solicited" arm.
        if (cq->arm != PIB_CQ_ARM_NEXT)
            cq->arm = static_cast<uint8_t>(arg);
        return;
    }
    default:
        host_.guestError(err::kDoorbellBadOffset, "write of 0x%" PRIx64 " to page %u offset 0x%x",
                         value, page, offset);
        return;
    }
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
