// SPDX-License-Identifier: GPL-2.0-or-later
// pib-hca's SRQ commands (docs/prm.md §6.4, §6.8): CREATE_SRQ, DESTROY_SRQ,
// QUERY_SRQ, ARM_SRQ, RESIZE_SRQ.
#include <cinttypes>

#include "limits.hh"
#include "pib_commands.hh"
#include "ring.hh"

namespace pib {

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
