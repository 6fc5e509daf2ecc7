// SPDX-License-Identifier: GPL-2.0-or-later
// Event queues, completion queues and shared receive queues.
#include <cinttypes>

#include "commands.hh"
#include "limits.hh"
#include "pib_event_queues.hh"
#include "ring.hh"
#include "trace.hh"

namespace pib {

static constexpr unsigned kLogCqeSize = 6;
static_assert(1u << kLogCqeSize == PIB_CQE_SIZE);

// ---- event queues ------------------------------------------------------------

CommandOutcome CommandProcessor::createEq(const Command &cmd) {
    pib_eq_context ctx;
    if (!readMailbox(cmd, ctx))
        return mailboxFailed();
    return createEq(ctx);
}

CommandOutcome CommandProcessor::createEq(const pib_eq_context &ctx) {
    if (ctx.log_size < 1 || ctx.log_size > limits::kLogMaxEqe)
        return fail(err::kCmdBadParam, "CREATE_EQ log_size %u", ctx.log_size);
    if (ctx.msix_vector >= config_.msix_vectors)
        return fail(err::kCmdBadParam, "CREATE_EQ MSI-X vector %u of %u", ctx.msix_vector,
                    config_.msix_vectors);
    if (ctx.flags & ~PIB_EQ_ASYNC)
        return fail(err::kCmdBadParam, "CREATE_EQ flags 0x%x", ctx.flags);
    if (ctx.flags & PIB_EQ_ASYNC) {
        bool haveAsync = false;
        objects_.eqs.forEach(
            [&](uint32_t, const EventQueue &eq) { haveAsync |= eq.ctx.flags & PIB_EQ_ASYNC; });
        if (haveAsync)
            return fail(err::kCmdBadState, "CREATE_EQ: an async EQ exists");
    }
    if (!validRing(ctx.buf, ringPages(ctx.log_size, kLogEqeSize)))
        return fail(err::kCmdBadRing,
                    "CREATE_EQ ring of %u pages at MTT %u (needs %" PRIu64 " allocated)",
                    ctx.buf.npages, ctx.buf.mtt_index, ringPages(ctx.log_size, kLogEqeSize));
    auto eq = std::make_unique<EventQueue>();
    eq->ctx = ctx;
    const auto eqn = objects_.eqs.insert(std::move(eq));
    if (!eqn)
        return fail(err::kCmdNoResources, "all %u EQs in use", objects_.eqs.capacity());
    objects_.mtt.hold(ctx.buf.mtt_index);
    return {PIB_CMD_STATUS_OK, *eqn};
}

CommandOutcome CommandProcessor::destroyEq(const Command &cmd) {
    EventQueue *eq = objects_.eqs.find(cmd.modifier);
    if (!eq)
        return fail(err::kCmdBadIndex, "DESTROY_EQ of EQ %u", cmd.modifier);
    if (eq->refs)
        return fail(err::kCmdBusy, "DESTROY_EQ of EQ %u used by %u CQs", cmd.modifier, eq->refs);
    objects_.mtt.unhold(eq->ctx.buf.mtt_index);
    objects_.eqs.erase(cmd.modifier);
    return {};
}

CommandOutcome CommandProcessor::queryEq(const Command &cmd) {
    EventQueue *eq = objects_.eqs.find(cmd.modifier);
    if (!eq)
        return fail(err::kCmdBadIndex, "QUERY_EQ of EQ %u", cmd.modifier);
    if (!writeMailbox(cmd, eq->ctx))
        return mailboxFailed();
    return {};
}

// ---- completion queues ---------------------------------------------------------

// The ring and CI record of a CQ being created or resized.
std::optional<CommandOutcome> CommandProcessor::checkCqRing(const char *name,
                                                            const pib_cq_context &ctx) {
    if (ctx.log_size < 1 || ctx.log_size > limits::kLogMaxCqe)
        return fail(err::kCmdBadParam, "%s log_size %u", name, ctx.log_size);
    if (ctx.ci_record == 0 || ctx.ci_record % 4)
        return fail(err::kCmdBadParam, "%s consumer-index record at 0x%" PRIx64, name,
                    ctx.ci_record);
    if (!validRing(ctx.buf, ringPages(ctx.log_size, kLogCqeSize)))
        return fail(err::kCmdBadRing, "%s ring of %u pages at MTT %u (needs %" PRIu64 " allocated)",
                    name, ctx.buf.npages, ctx.buf.mtt_index, ringPages(ctx.log_size, kLogCqeSize));
    return std::nullopt;
}

CommandOutcome CommandProcessor::createCq(const Command &cmd) {
    pib_cq_context ctx;
    if (!readMailbox(cmd, ctx))
        return mailboxFailed();
    return createCq(ctx);
}

CommandOutcome CommandProcessor::createCq(const pib_cq_context &ctx) {
    if (auto failed = checkCqRing("CREATE_CQ", ctx))
        return *failed;
    if (ctx.moderation_period > limits::kMaxCqModerationPeriod)
        return fail(err::kCmdBadParam, "CREATE_CQ moderation period %u us (at most %u)",
                    ctx.moderation_period, limits::kMaxCqModerationPeriod);
    EventQueue *eq = objects_.eqs.find(ctx.eqn);
    if (!eq)
        return fail(err::kCmdBadIndex, "CREATE_CQ on EQ %u", ctx.eqn);
    DoorbellPage *uar = objects_.uars.find(ctx.uar_page);
    if (!uar)
        return fail(err::kCmdBadIndex, "CREATE_CQ with doorbell page %u", ctx.uar_page);
    auto cq = std::make_unique<CompletionQueue>();
    cq->ctx = ctx;
    const auto cqn = objects_.cqs.insert(std::move(cq));
    if (!cqn)
        return fail(err::kCmdNoResources, "all %u CQs in use", objects_.cqs.capacity());
    ++eq->refs;
    ++uar->refs;
    objects_.mtt.hold(ctx.buf.mtt_index);
    return {PIB_CMD_STATUS_OK, *cqn};
}

CommandOutcome CommandProcessor::destroyCq(const Command &cmd) {
    CompletionQueue *cq = objects_.cqs.find(cmd.modifier);
    if (!cq)
        return fail(err::kCmdBadIndex, "DESTROY_CQ of CQ %u", cmd.modifier);
    if (cq->refs)
        return fail(err::kCmdBusy, "DESTROY_CQ of CQ %u used by %u QPs", cmd.modifier, cq->refs);
    --objects_.eqs.at(cq->ctx.eqn).refs;
    --objects_.uars.at(cq->ctx.uar_page).refs;
    objects_.mtt.unhold(cq->ctx.buf.mtt_index);
    objects_.cqs.erase(cmd.modifier);
    return {};
}

CommandOutcome CommandProcessor::queryCq(const Command &cmd) {
    CompletionQueue *cq = objects_.cqs.find(cmd.modifier);
    if (!cq)
        return fail(err::kCmdBadIndex, "QUERY_CQ of CQ %u", cmd.modifier);
    if (!writeMailbox(cmd, cq->ctx))
        return mailboxFailed();
    return {};
}

// ibv_resize_cq: the CQ moves to a new ring and CI record. The device
// moves nothing itself, so the command costs the same for any size: the
// CQEs the consumer has not taken yet (n, the result) stay in the old ring
// for the driver to copy to slots 0 .. n-1 of the new one, and the device
// numbers on from n, as if the new ring had been filled from its start.
CommandOutcome CommandProcessor::resizeCq(const Command &cmd) {
    CompletionQueue *cq = objects_.cqs.find(cmd.modifier);
    if (!cq)
        return fail(err::kCmdBadIndex, "RESIZE_CQ of CQ %u", cmd.modifier);
    pib_cq_context ctx;
    if (!readMailbox(cmd, ctx))
        return mailboxFailed();
    if (auto failed = checkCqRing("RESIZE_CQ", ctx))
        return *failed;
    // The consumer index is the driver's word: believe it only if it is
    // one the ring could have (at most the CQEs written are consumed).
    uint32_t ci = 0;
    const uint32_t oldSize = 1u << cq->ctx.log_size;
    if (!host_.dmaRead(cq->ctx.ci_record, ci) || cq->producer - ci > oldSize)
        return fail(err::kCmdBadState,
                    "RESIZE_CQ of CQ %u: its CI record (%u) is not between %u and %u", cmd.modifier,
                    ci, cq->producer - oldSize, cq->producer);
    const uint32_t pending = cq->producer - ci;
    if (pending > (1u << ctx.log_size)) {
        // Some may have been written after the driver looked: a refusal,
        // not the driver's error.
        trace::cq_resize_refused(host_, cmd.modifier, ctx.log_size, pending);
        return CommandOutcome::failed(err::kCqResizeUnconsumed);
    }
    objects_.mtt.hold(ctx.buf.mtt_index);
    objects_.mtt.unhold(cq->ctx.buf.mtt_index);
    cq->ctx.buf = ctx.buf;
    cq->ctx.log_size = ctx.log_size;
    cq->ctx.ci_record = ctx.ci_record;
    cq->producer = pending;
    cq->consumer = 0;
    cq->overrun = false;
    return {PIB_CMD_STATUS_OK, pending};
}

// ibv_modify_cq and the kernel's rdma_dim: a new moderation, which an event
// already waiting does not wait out (docs/prm.md §6.1).
CommandOutcome CommandProcessor::modifyCq(const Command &cmd) {
    CompletionQueue *cq = objects_.cqs.find(cmd.modifier);
    if (!cq)
        return fail(err::kCmdBadIndex, "MODIFY_CQ of CQ %u", cmd.modifier);
    const auto count = static_cast<uint16_t>(cmd.in & 0xffff);
    const auto period = static_cast<uint16_t>((cmd.in >> 16) & 0xffff);
    if ((cmd.in >> 32) || period > limits::kMaxCqModerationPeriod)
        return fail(err::kCmdBadParam, "MODIFY_CQ of CQ %u: 0x%" PRIx64 " (period at most %u us)",
                    cmd.modifier, cmd.in, limits::kMaxCqModerationPeriod);
    core_.dataPath.events().moderation().change(cmd.modifier, *cq, count, period);
    return {};
}

// ---- shared receive queues -------------------------------------------------------

CommandOutcome CommandProcessor::createSrq(const Command &cmd) {
    pib_srq_context ctx;
    if (!readMailbox(cmd, ctx))
        return mailboxFailed();
    return createSrq(ctx);
}

CommandOutcome CommandProcessor::createSrq(pib_srq_context ctx) {
    ProtectionDomain *pd = objects_.pds.find(ctx.pdn);
    if (!pd)
        return fail(err::kCmdBadIndex, "CREATE_SRQ in PD %u", ctx.pdn);
    DoorbellPage *uar = objects_.uars.find(ctx.uar_page);
    if (!uar)
        return fail(err::kCmdBadIndex, "CREATE_SRQ with doorbell page %u", ctx.uar_page);
    if (ctx.log_wqe_count < 1 || ctx.log_wqe_count > limits::kLogMaxSrqWr ||
        ctx.log_wqe_stride < limits::kLogMinWqeStride ||
        ctx.log_wqe_stride > limits::kLogMaxWqeStride)
        return fail(err::kCmdBadParam, "CREATE_SRQ of 2^%u WQEs of 2^%u bytes", ctx.log_wqe_count,
                    ctx.log_wqe_stride);
    if (ctx.limit >= (1u << ctx.log_wqe_count))
        return fail(err::kCmdBadParam, "CREATE_SRQ limit %u of %u WQEs", ctx.limit,
                    1u << ctx.log_wqe_count);
    if (!validRing(ctx.buf, ringPages(ctx.log_wqe_count, ctx.log_wqe_stride)))
        return fail(
            err::kCmdBadRing, "CREATE_SRQ ring of %u pages at MTT %u (needs %" PRIu64 " allocated)",
            ctx.buf.npages, ctx.buf.mtt_index, ringPages(ctx.log_wqe_count, ctx.log_wqe_stride));
    if (const CommandOutcome bad = checkXrcSrq(ctx); bad.status != PIB_CMD_STATUS_OK)
        return bad;
    auto srq = std::make_unique<SharedReceiveQueue>();
    ctx.wqe_count = 0;
    srq->ctx = ctx;
    SharedReceiveQueue &made = *srq;
    const auto srqn = objects_.srqs.insert(std::move(srq));
    if (!srqn)
        return fail(err::kCmdNoResources, "all %u SRQs in use", objects_.srqs.capacity());
    made.number = *srqn;
    ++pd->refs;
    ++uar->refs;
    if (ctx.type == PIB_SRQT_XRC) {
        ++objects_.xrcds.at(ctx.xrcdn).refs;
        ++objects_.cqs.at(ctx.cqn).refs;
    }
    objects_.mtt.hold(ctx.buf.mtt_index);
    return {PIB_CMD_STATUS_OK, *srqn};
}

// An XRC SRQ belongs to an XRC domain and completes to a CQ of its own;
// a basic SRQ names neither (its QPs' CQs take its completions).
CommandOutcome CommandProcessor::checkXrcSrq(const pib_srq_context &ctx) {
    if (ctx.type == PIB_SRQT_BASIC) {
        if (ctx.xrcdn || ctx.cqn)
            return fail(err::kCmdBadParam, "CREATE_SRQ basic SRQ with XRCD %u and CQ %u", ctx.xrcdn,
                        ctx.cqn);
        return {};
    }
    if (ctx.type != PIB_SRQT_XRC)
        return fail(err::kCmdBadParam, "CREATE_SRQ of type %u", ctx.type);
    if (!objects_.xrcds.find(ctx.xrcdn) || !objects_.cqs.find(ctx.cqn))
        return fail(err::kCmdBadIndex,
                    "CREATE_SRQ XRC SRQ in XRCD %u completing to CQ %u: %s missing", ctx.xrcdn,
                    ctx.cqn, objects_.xrcds.find(ctx.xrcdn) ? "CQ" : "XRCD");
    return {};
}

CommandOutcome CommandProcessor::destroySrq(const Command &cmd) {
    SharedReceiveQueue *srq = objects_.srqs.find(cmd.modifier);
    if (!srq)
        return fail(err::kCmdBadIndex, "DESTROY_SRQ of SRQ %u", cmd.modifier);
    if (srq->refs)
        return fail(err::kCmdBusy, "DESTROY_SRQ of SRQ %u used by %u QPs", cmd.modifier, srq->refs);
    if (srq->isXrc())
        core_.dataPath.forgetXrcSrq(cmd.modifier); // XRC TGT QPs hold no reference
    --objects_.pds.at(srq->ctx.pdn).refs;
    --objects_.uars.at(srq->ctx.uar_page).refs;
    if (srq->isXrc()) {
        --objects_.xrcds.at(srq->ctx.xrcdn).refs;
        --objects_.cqs.at(srq->ctx.cqn).refs;
    }
    objects_.mtt.unhold(srq->ctx.buf.mtt_index);
    objects_.srqs.erase(cmd.modifier);
    return {};
}

CommandOutcome CommandProcessor::querySrq(const Command &cmd) {
    SharedReceiveQueue *srq = objects_.srqs.find(cmd.modifier);
    if (!srq)
        return fail(err::kCmdBadIndex, "QUERY_SRQ of SRQ %u", cmd.modifier);
    pib_srq_context out = srq->ctx;
    out.wqe_count = srq->producer - srq->consumer;
    if (!writeMailbox(cmd, out))
        return mailboxFailed();
    return {};
}

CommandOutcome CommandProcessor::armSrq(const Command &cmd) {
    SharedReceiveQueue *srq = objects_.srqs.find(cmd.modifier);
    if (!srq)
        return fail(err::kCmdBadIndex, "ARM_SRQ of SRQ %u", cmd.modifier);
    if (cmd.in >= (1u << srq->ctx.log_wqe_count))
        return fail(err::kCmdBadParam, "ARM_SRQ limit %" PRIu64 " of %u WQEs", cmd.in,
                    1u << srq->ctx.log_wqe_count);
    srq->ctx.limit = static_cast<uint32_t>(cmd.in);
    return {};
}

// ibv_modify_srq(IBV_SRQ_MAX_WR): the SRQ moves to a new ring of the same
// stride. The driver has already copied the WQEs from count `base` (the
// oldest it has not seen completed) to its last to slots 0 .. of the new
// ring; the device, which may have taken some of them meanwhile from the
// old ring, renumbers its counts from `base` and reads the new ring from
// there on. Nothing is copied here: the command costs the same for any size.
CommandOutcome CommandProcessor::resizeSrq(const Command &cmd) {
    SharedReceiveQueue *srq = objects_.srqs.find(cmd.modifier);
    if (!srq)
        return fail(err::kCmdBadIndex, "RESIZE_SRQ of SRQ %u", cmd.modifier);
    pib_srq_context ctx;
    if (!readMailbox(cmd, ctx))
        return mailboxFailed();
    const unsigned stride = srq->ctx.log_wqe_stride;
    if (ctx.log_wqe_count < 1 || ctx.log_wqe_count > limits::kLogMaxSrqWr ||
        ctx.log_wqe_stride != stride)
        return fail(err::kCmdBadParam, "RESIZE_SRQ to 2^%u WQEs of 2^%u bytes (its stride is 2^%u)",
                    ctx.log_wqe_count, ctx.log_wqe_stride, stride);
    const uint32_t size = 1u << ctx.log_wqe_count;
    if (srq->ctx.limit >= size) // an armed limit stays armed: it must still fit
        return fail(err::kCmdBadParam, "RESIZE_SRQ limit %u of %u WQEs", srq->ctx.limit, size);
    if (!validRing(ctx.buf, ringPages(ctx.log_wqe_count, stride)))
        return fail(err::kCmdBadRing,
                    "RESIZE_SRQ ring of %u pages at MTT %u (needs %" PRIu64 " allocated)",
                    ctx.buf.npages, ctx.buf.mtt_index, ringPages(ctx.log_wqe_count, stride));
    // The base must be one of the WQEs posted and not yet taken, or the
    // next: the device has taken every WQE before it.
    if (srq->consumer - ctx.base > srq->producer - ctx.base)
        return fail(err::kCmdBadState, "RESIZE_SRQ of SRQ %u from WQE %u: %u are taken, %u posted",
                    cmd.modifier, ctx.base, srq->consumer, srq->producer);
    if (srq->producer - ctx.base > size)
        return fail(err::kCmdBadParam, "RESIZE_SRQ of SRQ %u to %u WQEs: %u are posted from WQE %u",
                    cmd.modifier, size, srq->producer - ctx.base, ctx.base);
    objects_.mtt.hold(ctx.buf.mtt_index);
    objects_.mtt.unhold(srq->ctx.buf.mtt_index);
    srq->ctx.buf = ctx.buf;
    srq->ctx.log_wqe_count = ctx.log_wqe_count;
    srq->producer -= ctx.base;
    srq->consumer -= ctx.base;
    return {};
}

} // namespace pib
