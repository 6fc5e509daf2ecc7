// SPDX-License-Identifier: GPL-2.0-or-later
// A QP's error flow (IBA 10.8.3.3): everything it holds completes
// flushed, in order, as far as each event's budget goes.
#include <algorithm>

#include "data_path.hh"
#include "limits.hh"
#include "ring.hh"
#include "trace.hh"

namespace pib {

namespace {

// What a flush may still do in this event: kFlushesPerPacket WQEs cost
// one packet of the event's budget.
class FlushBudget {
  public:
    explicit FlushBudget(Scheduler &scheduler) : scheduler_(scheduler) {}
    bool take() {
        if (taken_++ % limits::kFlushesPerPacket)
            return true;
        if (!scheduler_.mayWork())
            return false;
        scheduler_.charge();
        return true;
    }

  private:
    Scheduler &scheduler_;
    uint32_t taken_ = 0;
};

} // namespace

// A driver that posts receives by their record alone (a ConnectX's) rings
// nothing when it posts one to a QP in the error state, as ib_drain_rq
// does, and waits for its flushed completion: the device reads the record
// again, soon after the QP's last flush and then ever less often.
void DataPath::watchReceiveRecord(QueuePair &qp, uint64_t waitNs) {
    const bool ownRq = !(qp.ctx.flags & PIB_QP_USE_SRQ) && qp.ctx.rq_log_wqe_stride;
    if (!wqes_.receivesPostedByRecord() || !ownRq || qp.attr.qp_state != PIB_QPS_ERR) {
        qp.recordPollAt = qp.recordPollNs = 0;
        return;
    }
    qp.recordPollNs = waitNs;
    qp.recordPollAt = host_.clockNs() + waitNs;
}

// The wait for the record's next read ran out: flushed again, read later.
void DataPath::receiveRecordDue(QueuePair &qp) {
    const uint64_t next = std::min(qp.recordPollNs * 2, kMaxRecordPollNs);
    flushQp(qp);
    watchReceiveRecord(qp, next);
    timers_.schedule(qp);
}

// Completes every outstanding WQE of a QP in the error state as flushed
// (IBA 10.8.3.3), as far as the event's budget goes: a long queue goes on
// from the next run (resume() flushes a QP in the error state), in order.
void DataPath::flushQp(QueuePair &qp) {
    qp.resp.replies.clear(); // a QP in the error state answers nothing more
    qp.req.ackDeadline = qp.req.rnrDeadline = 0;
    watchReceiveRecord(qp, kFirstRecordPollNs);
    timers_.schedule(qp);
    // The receive WQE of a message cut short completes first: it is the
    // oldest the responder took.
    receives_.completeClaimedWqe(qp, PIB_WC_WR_FLUSH_ERR);
    qp.resp.in = ResponderState::InMessage::kNone;
    FlushBudget budget(scheduler_);
    const auto postponed = [&] {
        scheduler_.postpone(qp.number, qp, false);
        trace::qp_flush_postponed(host_, qp.number);
    };
    // Fetched WQEs first, in order, then those never fetched.
    while (!qp.req.outstanding.empty()) {
        if (!budget.take())
            return postponed();
        const FinishedWqe w = requester_.takeHeadWqe(qp);
        events_.completeSend(qp, w.index, w.wrId, PIB_WC_SEND, PIB_WC_WR_FLUSH_ERR, 0, true);
    }
    qp.req.readsInFlight = 0;
    while (qp.sq.consumer != qp.sq.producer) {
        if (!budget.take())
            return postponed();
        events_.completeSend(qp, qp.sq.consumer, wqes_.sendWrId(qp, qp.sq.consumer), PIB_WC_SEND,
                             PIB_WC_WR_FLUSH_ERR, 0, true);
        qp.sq.consume(wqes_.sendSlots(qp, qp.sq.consumer));
    }
    if (qp.ctx.flags & PIB_QP_USE_SRQ) {
        // IBA 11.6.3.5: no receive WQE of the SRQ will be used for this QP.
        if (!qp.lastWqeReached)
            events_.postAsyncEvent(PIB_ASYNC_QP_LAST_WQE_REACHED, qp.number);
        qp.lastWqeReached = true;
        return;
    }
    wqes_.pollReceiveProducer(qp);
    while (qp.rq.consumer != qp.rq.producer) {
        if (!budget.take())
            return postponed();
        Completion cqe;
        cqe.wrId = wqes_.receiveWrId(qp, qp.rq.consumer);
        cqe.qpn = qp.number;
        cqe.opcode = PIB_WC_RECV;
        cqe.status = PIB_WC_WR_FLUSH_ERR;
        cqe.wqeIndex = static_cast<uint16_t>(qp.rq.consumer);
        ++qp.rq.consumer;
        events_.postCqe(qp.ctx.recv_cqn, cqe, false);
    }
}

} // namespace pib
