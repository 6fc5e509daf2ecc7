// SPDX-License-Identifier: GPL-2.0-or-later
#include "event_writer.hh"
#include "trace.hh"

#include <array>

#include "ring.hh"

namespace pib {

namespace {
constexpr unsigned kMaxLogCqeBytes = 7; // the largest CQE of any personality
} // namespace

// Whether CQ `cqn` has no room; on the first CQE lost, the overrun is
// reported once (a guest error, and the async event CQ_ERR).
bool EventWriter::full(uint32_t cqn, CompletionQueue &cq) {
    if (cq.ignoreOverrun && !cq.stopped)
        return false;
    const uint32_t size = 1u << cq.ctx.log_size;
    if (cq.producer - cq.consumer >= size) {
        // Looks full: see how far the consumer really got.
        const auto ci = codec_->readConsumer(cq.ctx.ci_record, cq.producer);
        if (ci && cq.producer - *ci <= size)
            cq.consumer = *ci;
    }
    if (!cq.stopped && cq.producer - cq.consumer < size) {
        cq.overrun = false;
        return false;
    }
    if (!cq.overrun) {
        // A CQ the host stopped overruns as a full one does.
        if (cq.stopped)
            trace::inject_overrun(host_, "CQ", cqn);
        else
            host_.guestError(err::kCqOverrun, "CQ %u overran; completions are lost", cqn);
        postAsyncEvent(PIB_ASYNC_CQ_ERR, cqn);
    }
    cq.overrun = true;
    return true;
}

void EventWriter::postCqe(uint32_t cqn, const Completion &c, bool solicited) {
    CompletionQueue *cq = cqs_.find(cqn);
    if (!cq || full(cqn, *cq))
        return;
    const unsigned logBytes = codec_->logCqeBytes(*cq);
    std::array<uint8_t, 1u << kMaxLogCqeBytes> bytes{};
    const std::span<uint8_t> cqe(bytes.data(), size_t{1} << logBytes);
    codec_->encodeCqe(c, cq->producer >> cq->ctx.log_size, cqe);
    const uint32_t slot = cq->producer & ((1u << cq->ctx.log_size) - 1);
    const auto addr = ringAddress(mtt_, cq->ctx.buf, uint64_t{slot} << logBytes, cqe.size());
    if (!addr || !host_.dmaWriteOwnerLast(*addr, cqe, codec_->cqeOwnerByte(*cq))) {
        host_.guestError(err::kCqDma, "CQ %u: cannot write CQE %u", cqn, cq->producer);
        return;
    }
    trace::cqe_written(host_, cqn, cq->producer, c.qpn, c.wqeIndex, c.opcode, c.status, c.byteLen);
    ++cq->producer;
    // A solicited event is never held back: the consumer asked to hear of
    // that one CQE.
    if (cq->arm == PIB_CQ_ARM_NEXT) {
        if (!CqModeration::moderated(*cq) || !moderation_.hold(cqn, *cq))
            fireEvent(cqn, *cq);
    } else if (cq->arm == PIB_CQ_ARM_SOLICITED && solicited) {
        fireEvent(cqn, *cq);
    }
}

void EventWriter::arm(uint32_t cqn, CompletionQueue &cq, uint8_t kind, bool pending) {
    if (pending)
        fireEvent(cqn, cq);
    else if (cq.arm != PIB_CQ_ARM_NEXT)
        cq.arm = kind;
}

bool EventWriter::unconsumed(const CompletionQueue &cq) const {
    const auto ci = codec_->readConsumer(cq.ctx.ci_record, cq.producer);
    return ci && *ci != cq.producer;
}

void EventWriter::fireEvent(uint32_t cqn, CompletionQueue &cq) {
    moderation_.release(cqn, cq);
    cq.arm = 0;
    codec_->completionEvent(cq.ctx.eqn, cqn);
}

void EventWriter::completeSend(const QueuePair &qp, uint32_t index, uint64_t wrId, uint8_t opcode,
                               uint8_t status, uint32_t length, bool signaled, uint8_t vendorErr) {
    // Errors always complete; successes when asked to.
    if (!signaled && status == PIB_WC_SUCCESS)
        return;
    Completion c;
    c.wrId = wrId;
    c.byteLen = length;
    c.qpn = qp.number;
    c.opcode = opcode;
    c.status = status;
    c.vendorErr = vendorErr;
    c.wqeIndex = static_cast<uint16_t>(index);
    postCqe(qp.ctx.send_cqn, c, false);
}

} // namespace pib
