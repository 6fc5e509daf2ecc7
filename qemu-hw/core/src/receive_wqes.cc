// SPDX-License-Identifier: GPL-2.0-or-later
// Receive WQEs as every transport takes them (receive_wqes.hh).
#include "receive_wqes.hh"

#include "ring.hh"

namespace pib {

// Takes the next receive WQE of `qp` (from its SRQ, if it has one). False
// when none is posted or it cannot be read; otherwise *status says whether
// it is well formed.
bool ReceiveWqes::takeReceiveWqe(QueuePair &qp, Wqe &wqe, uint16_t *index, uint8_t *status) {
    if (const auto srqn = receiveSrq(qp)) {
        SharedReceiveQueue *srq = objects_.srqs.find(*srqn);
        if (!srq)
            return false;
        wqes_.pollSrqProducer(*srq);
        if (srq->consumer == srq->producer)
            return false;
        if (!wqes_.readReceive(qp, srq, srq->consumer, wqe, status))
            return false;
        *index = wqe.completionIndex;
        ++srq->consumer;
        const uint32_t left = srq->producer - srq->consumer;
        if (srq->ctx.limit && left < srq->ctx.limit) {
            srq->ctx.limit = 0; // fires once, until armed again
            events_.postAsyncEvent(PIB_ASYNC_SRQ_LIMIT, *srqn);
        }
        return true;
    }
    wqes_.pollReceiveProducer(qp);
    if (qp.rq.consumer == qp.rq.producer)
        return false;
    if (!wqes_.readReceive(qp, nullptr, qp.rq.consumer, wqe, status))
        return false;
    *index = wqe.completionIndex;
    ++qp.rq.consumer;
    return true;
}

// Claims the next receive WQE for an incoming message.
bool ReceiveWqes::claimReceiveWqe(QueuePair &qp) {
    ResponderState &s = qp.resp;
    if (s.haveWqe)
        return true;
    Wqe wqe;
    wqe.sges = std::move(s.sges); // reuse its capacity
    uint16_t index = 0;
    uint8_t status = PIB_WC_SUCCESS;
    if (!takeReceiveWqe(qp, wqe, &index, &status))
        return false;
    s.wrId = wqe.ctrl.wr_id;
    s.wqeIndex = index;
    s.status = status;
    s.sges = std::move(wqe.sges);
    s.haveWqe = true;
    return true;
}

// The receive WQE claimed for the message in progress completes with
// `status`, an error: when the responder fails the message, when the QP
// leaves it (error, reset, destruction) or when its XRC SRQ goes. A WQE
// taken from a queue completes exactly once, whatever happens to its QP:
// one dropped silently would be lost to the SRQ for good.
void ReceiveWqes::completeClaimedWqe(QueuePair &qp, uint8_t status) {
    ResponderState &s = qp.resp;
    if (!s.haveWqe)
        return;
    Completion c;
    c.wrId = s.wrId;
    c.qpn = reportedQpn(qp);
    c.opcode = PIB_WC_RECV;
    c.status = status;
    c.wqeIndex = s.wqeIndex;
    c.srqn = receiveSrq(qp);
    events_.postCqe(receiveCq(qp), c, false);
    s.haveWqe = false;
}

// The SRQ `qp` takes receive WQEs from, if any: its own, or for an XRC TGT
// QP the one the request in progress names.
std::optional<uint32_t> ReceiveWqes::receiveSrq(const QueuePair &qp) const {
    if (qp.ctx.type == PIB_QPT_XRC_TGT)
        return qp.resp.xrcSrqn;
    if (qp.ctx.flags & PIB_QP_USE_SRQ)
        return qp.ctx.srqn;
    return std::nullopt;
}

// Where a receive completes: the QP's receive CQ, or an XRC SRQ's own.
uint32_t ReceiveWqes::receiveCq(const QueuePair &qp) const {
    if (qp.ctx.type != PIB_QPT_XRC_TGT)
        return qp.ctx.recv_cqn;
    // A basic SRQ has no CQ of its own: its ctx.cqn means nothing.
    const SharedReceiveQueue *srq = objects_.srqs.find(qp.resp.xrcSrqn);
    return srq && srq->isXrc() ? srq->ctx.cqn : UINT32_MAX; // UINT32_MAX names no CQ
}

} // namespace pib
