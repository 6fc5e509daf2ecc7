// SPDX-License-Identifier: GPL-2.0-or-later
// pib-hca's CQ commands (docs/prm.md §6.1): CREATE_CQ, DESTROY_CQ, QUERY_CQ,
// RESIZE_CQ, MODIFY_CQ.
#include <cinttypes>

#include "limits.hh"
#include "pib_commands.hh"
#include "ring.hh"
#include "trace.hh"

namespace pib {

static constexpr unsigned kLogCqeSize = 6;
static_assert(1u << kLogCqeSize == PIB_CQE_SIZE);

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

} // namespace pib
