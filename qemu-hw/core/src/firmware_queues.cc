// SPDX-License-Identifier: GPL-2.0-or-later
// Event queues, completion queues and shared receive queues.
#include <cinttypes>

#include "firmware.hh"
#include "limits.hh"
#include "ring.hh"

namespace pib {

static constexpr unsigned kLogEqeSize = 5;
static constexpr unsigned kLogCqeSize = 6;
static_assert(1u << kLogEqeSize == sizeof(pib_eqe));
static_assert(1u << kLogCqeSize == PIB_CQE_SIZE);

// ---- event queues ------------------------------------------------------------

CommandOutcome Firmware::createEq(const Command &cmd) {
    pib_eq_context ctx;
    if (!readMailbox(cmd, ctx))
        return fail(PIB_CMD_STATUS_DMA_ERROR, "cmd-dma", "CREATE_EQ cannot read 0x%" PRIx64,
                    cmd.in);
    if (ctx.log_size < 1 || ctx.log_size > limits::kLogMaxEqe)
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-param", "CREATE_EQ log_size %u",
                    ctx.log_size);
    if (ctx.msix_vector >= config_.msix_vectors)
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-param", "CREATE_EQ MSI-X vector %u of %u",
                    ctx.msix_vector, config_.msix_vectors);
    if (ctx.flags & ~PIB_EQ_ASYNC)
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-param", "CREATE_EQ flags 0x%x", ctx.flags);
    if (ctx.flags & PIB_EQ_ASYNC) {
        bool haveAsync = false;
        eqs_.forEach(
            [&](uint32_t, const EventQueue &eq) { haveAsync |= eq.ctx.flags & PIB_EQ_ASYNC; });
        if (haveAsync)
            return fail(PIB_CMD_STATUS_BAD_STATE, "cmd-bad-state", "CREATE_EQ: an async EQ exists");
    }
    if (!validRing(ctx.buf, ringPages(ctx.log_size, kLogEqeSize)))
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-ring",
                    "CREATE_EQ ring of %u pages at MTT %u (needs %" PRIu64 " allocated)",
                    ctx.buf.npages, ctx.buf.mtt_index, ringPages(ctx.log_size, kLogEqeSize));
    auto eq = std::make_unique<EventQueue>();
    eq->ctx = ctx;
    const auto eqn = eqs_.insert(std::move(eq));
    if (!eqn)
        return fail(PIB_CMD_STATUS_NO_RESOURCES, "cmd-no-resources", "all %u EQs in use",
                    eqs_.capacity());
    mtt_.hold(ctx.buf.mtt_index);
    return {PIB_CMD_STATUS_OK, *eqn};
}

CommandOutcome Firmware::destroyEq(const Command &cmd) {
    EventQueue *eq = eqs_.find(cmd.modifier);
    if (!eq)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "DESTROY_EQ of EQ %u", cmd.modifier);
    if (eq->refs)
        return fail(PIB_CMD_STATUS_BUSY, "cmd-busy", "DESTROY_EQ of EQ %u used by %u CQs",
                    cmd.modifier, eq->refs);
    mtt_.unhold(eq->ctx.buf.mtt_index);
    eqs_.erase(cmd.modifier);
    return {};
}

CommandOutcome Firmware::queryEq(const Command &cmd) {
    EventQueue *eq = eqs_.find(cmd.modifier);
    if (!eq)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "QUERY_EQ of EQ %u", cmd.modifier);
    if (!writeMailbox(cmd, eq->ctx))
        return fail(PIB_CMD_STATUS_DMA_ERROR, "cmd-dma", "QUERY_EQ cannot write 0x%" PRIx64,
                    cmd.out);
    return {};
}

// ---- completion queues ---------------------------------------------------------

CommandOutcome Firmware::createCq(const Command &cmd) {
    pib_cq_context ctx;
    if (!readMailbox(cmd, ctx))
        return fail(PIB_CMD_STATUS_DMA_ERROR, "cmd-dma", "CREATE_CQ cannot read 0x%" PRIx64,
                    cmd.in);
    if (ctx.log_size < 1 || ctx.log_size > limits::kLogMaxCqe)
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-param", "CREATE_CQ log_size %u",
                    ctx.log_size);
    EventQueue *eq = eqs_.find(ctx.eqn);
    if (!eq)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "CREATE_CQ on EQ %u", ctx.eqn);
    DoorbellPage *uar = uars_.find(ctx.uar_page);
    if (!uar)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "CREATE_CQ with doorbell page %u",
                    ctx.uar_page);
    if (ctx.ci_record == 0 || ctx.ci_record % 4)
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-param",
                    "CREATE_CQ consumer-index record at 0x%" PRIx64, ctx.ci_record);
    if (!validRing(ctx.buf, ringPages(ctx.log_size, kLogCqeSize)))
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-ring",
                    "CREATE_CQ ring of %u pages at MTT %u (needs %" PRIu64 " allocated)",
                    ctx.buf.npages, ctx.buf.mtt_index, ringPages(ctx.log_size, kLogCqeSize));
    auto cq = std::make_unique<CompletionQueue>();
    cq->ctx = ctx;
    const auto cqn = cqs_.insert(std::move(cq));
    if (!cqn)
        return fail(PIB_CMD_STATUS_NO_RESOURCES, "cmd-no-resources", "all %u CQs in use",
                    cqs_.capacity());
    ++eq->refs;
    ++uar->refs;
    mtt_.hold(ctx.buf.mtt_index);
    return {PIB_CMD_STATUS_OK, *cqn};
}

CommandOutcome Firmware::destroyCq(const Command &cmd) {
    CompletionQueue *cq = cqs_.find(cmd.modifier);
    if (!cq)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "DESTROY_CQ of CQ %u", cmd.modifier);
    if (cq->refs)
        return fail(PIB_CMD_STATUS_BUSY, "cmd-busy", "DESTROY_CQ of CQ %u used by %u QPs",
                    cmd.modifier, cq->refs);
    --eqs_.find(cq->ctx.eqn)->refs;
    --uars_.find(cq->ctx.uar_page)->refs;
    mtt_.unhold(cq->ctx.buf.mtt_index);
    cqs_.erase(cmd.modifier);
    return {};
}

CommandOutcome Firmware::queryCq(const Command &cmd) {
    CompletionQueue *cq = cqs_.find(cmd.modifier);
    if (!cq)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "QUERY_CQ of CQ %u", cmd.modifier);
    if (!writeMailbox(cmd, cq->ctx))
        return fail(PIB_CMD_STATUS_DMA_ERROR, "cmd-dma", "QUERY_CQ cannot write 0x%" PRIx64,
                    cmd.out);
    return {};
}

// ---- shared receive queues -------------------------------------------------------

CommandOutcome Firmware::createSrq(const Command &cmd) {
    pib_srq_context ctx;
    if (!readMailbox(cmd, ctx))
        return fail(PIB_CMD_STATUS_DMA_ERROR, "cmd-dma", "CREATE_SRQ cannot read 0x%" PRIx64,
                    cmd.in);
    ProtectionDomain *pd = pds_.find(ctx.pdn);
    if (!pd)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "CREATE_SRQ in PD %u", ctx.pdn);
    DoorbellPage *uar = uars_.find(ctx.uar_page);
    if (!uar)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "CREATE_SRQ with doorbell page %u",
                    ctx.uar_page);
    if (ctx.log_wqe_count < 1 || ctx.log_wqe_count > limits::kLogMaxSrqWr ||
        ctx.log_wqe_stride < limits::kLogMinWqeStride ||
        ctx.log_wqe_stride > limits::kLogMaxWqeStride)
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-param",
                    "CREATE_SRQ of 2^%u WQEs of 2^%u bytes", ctx.log_wqe_count, ctx.log_wqe_stride);
    if (ctx.limit >= (1u << ctx.log_wqe_count))
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-param", "CREATE_SRQ limit %u of %u WQEs",
                    ctx.limit, 1u << ctx.log_wqe_count);
    if (!validRing(ctx.buf, ringPages(ctx.log_wqe_count, ctx.log_wqe_stride)))
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-ring",
                    "CREATE_SRQ ring of %u pages at MTT %u (needs %" PRIu64 " allocated)",
                    ctx.buf.npages, ctx.buf.mtt_index,
                    ringPages(ctx.log_wqe_count, ctx.log_wqe_stride));
    auto srq = std::make_unique<SharedReceiveQueue>();
    ctx.wqe_count = 0;
    srq->ctx = ctx;
    const auto srqn = srqs_.insert(std::move(srq));
    if (!srqn)
        return fail(PIB_CMD_STATUS_NO_RESOURCES, "cmd-no-resources", "all %u SRQs in use",
                    srqs_.capacity());
    ++pd->refs;
    ++uar->refs;
    mtt_.hold(ctx.buf.mtt_index);
    return {PIB_CMD_STATUS_OK, *srqn};
}

CommandOutcome Firmware::destroySrq(const Command &cmd) {
    SharedReceiveQueue *srq = srqs_.find(cmd.modifier);
    if (!srq)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "DESTROY_SRQ of SRQ %u",
                    cmd.modifier);
    if (srq->refs)
        return fail(PIB_CMD_STATUS_BUSY, "cmd-busy", "DESTROY_SRQ of SRQ %u used by %u QPs",
                    cmd.modifier, srq->refs);
    --pds_.find(srq->ctx.pdn)->refs;
    --uars_.find(srq->ctx.uar_page)->refs;
    mtt_.unhold(srq->ctx.buf.mtt_index);
    srqs_.erase(cmd.modifier);
    return {};
}

CommandOutcome Firmware::querySrq(const Command &cmd) {
    SharedReceiveQueue *srq = srqs_.find(cmd.modifier);
    if (!srq)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "QUERY_SRQ of SRQ %u", cmd.modifier);
    pib_srq_context out = srq->ctx;
    out.wqe_count = srq->producer - srq->consumer;
    if (!writeMailbox(cmd, out))
        return fail(PIB_CMD_STATUS_DMA_ERROR, "cmd-dma", "QUERY_SRQ cannot write 0x%" PRIx64,
                    cmd.out);
    return {};
}

CommandOutcome Firmware::armSrq(const Command &cmd) {
    SharedReceiveQueue *srq = srqs_.find(cmd.modifier);
    if (!srq)
        return fail(PIB_CMD_STATUS_BAD_INDEX, "cmd-bad-index", "ARM_SRQ of SRQ %u", cmd.modifier);
    if (cmd.in >= (1u << srq->ctx.log_wqe_count))
        return fail(PIB_CMD_STATUS_BAD_PARAM, "cmd-bad-param",
                    "ARM_SRQ limit %" PRIu64 " of %u WQEs", cmd.in, 1u << srq->ctx.log_wqe_count);
    srq->ctx.limit = static_cast<uint32_t>(cmd.in);
    return {};
}

} // namespace pib

namespace pib {

// ---- doorbells (BAR2) -----------------------------------------------------------

bool Firmware::updateProducer(const char *what, uint32_t number, uint32_t &producer,
                              uint32_t consumer, uint32_t size, uint32_t value) {
    // The producer only moves forward, and never more than a ring ahead.
    if (value - consumer > size || value - producer > size) {
        host_.guestError("doorbell-bad-index",
                         "%s %u producer index %u (was %u, consumer %u, %u slots)", what, number,
                         value, producer, consumer, size);
        return false;
    }
    producer = value;
    return true;
}

void Firmware::queueDoorbell(uint32_t page, uint32_t offset, uint64_t value) {
    const auto number = static_cast<uint32_t>(value);
    const auto arg = static_cast<uint32_t>(value >> 32);
    if (!uars_.find(page)) {
        host_.guestError("doorbell-unallocated",
                         "write of 0x%" PRIx64 " to page %u offset 0x%x, which no context owns",
                         value, page, offset);
        return;
    }
    switch (offset) {
    case PIB_DB_SQ:
    case PIB_DB_RQ: {
        QueuePair *qp = findQp(number);
        if (!qp || qp->ctx.uar_page != page) {
            host_.guestError("doorbell-bad-object", "%s doorbell of QP %u on page %u, which %s",
                             offset == PIB_DB_SQ ? "SQ" : "RQ", number, page,
                             qp ? "belongs to another page" : "does not exist");
            return;
        }
        if (offset == PIB_DB_SQ) {
            if (updateProducer("SQ of QP", number, qp->sq.producer, qp->sq.consumer,
                               1u << qp->ctx.sq_log_wqe_count, arg))
                processSendQueue(number, *qp);
        } else if (qp->ctx.flags & PIB_QP_USE_SRQ)
            host_.guestError("doorbell-bad-object", "RQ doorbell of QP %u, which uses an SRQ",
                             number);
        else
            updateProducer("RQ of QP", number, qp->rq.producer, qp->rq.consumer,
                           1u << qp->ctx.rq_log_wqe_count, arg);
        return;
    }
    case PIB_DB_SRQ: {
        SharedReceiveQueue *srq = srqs_.find(number);
        if (!srq || srq->ctx.uar_page != page) {
            host_.guestError("doorbell-bad-object", "doorbell of SRQ %u on page %u", number, page);
            return;
        }
        updateProducer("SRQ", number, srq->producer, srq->consumer, 1u << srq->ctx.log_wqe_count,
                       arg);
        return;
    }
    case PIB_DB_CQ_ARM: {
        CompletionQueue *cq = cqs_.find(number);
        if (!cq || cq->ctx.uar_page != page) {
            host_.guestError("doorbell-bad-object", "arm of CQ %u on page %u", number, page);
            return;
        }
        if (arg != PIB_CQ_ARM_NEXT && arg != PIB_CQ_ARM_SOLICITED) {
            host_.guestError("doorbell-bad-arm", "arm of CQ %u with 0x%x", number, arg);
            return;
        }
        // An armed "next" is not weakened by a later "solicited" arm.
        if (cq->arm != PIB_CQ_ARM_NEXT)
            cq->arm = static_cast<uint8_t>(arg);
        return;
    }
    default:
        host_.guestError("doorbell-bad-offset", "write of 0x%" PRIx64 " to page %u offset 0x%x",
                         value, page, offset);
        return;
    }
}

} // namespace pib
