// SPDX-License-Identifier: GPL-2.0-or-later
// pib-hca's EQ commands (docs/prm.md §5): CREATE_EQ, DESTROY_EQ, QUERY_EQ.
#include <cinttypes>

#include "limits.hh"
#include "pib_commands.hh"
#include "pib_event_queues.hh"
#include "ring.hh"

namespace pib {

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

} // namespace pib
