// SPDX-License-Identifier: GPL-2.0-or-later
// Memory regions.
#include <bit>
#include <cinttypes>
#include <optional>

#include "limits.hh"
#include "memory_keys.hh"
#include "pib_commands.hh"
#include "trace.hh"

namespace pib {

// The rights a region may grant (docs/prm.md §6.2).
constexpr uint32_t kRegionAccess = PIB_ACCESS_ALL | PIB_ACCESS_MW_BIND | PIB_ACCESS_FLUSH_GLOBAL;

CommandOutcome CommandProcessor::createMr(const Command &cmd) {
    pib_mr_context ctx;
    if (!readMailbox(cmd, ctx))
        return mailboxFailed();
    return createMr(ctx);
}

CommandOutcome CommandProcessor::createMr(const pib_mr_context &ctx) {
    ProtectionDomain *pd = objects_.pds.find(ctx.pdn);
    if (!pd)
        return fail(err::kCmdBadIndex, "CREATE_MR in PD %u", ctx.pdn);
    constexpr uint8_t kFlags =
        PIB_MR_PHYSICAL | PIB_MR_FAST_REG | PIB_MR_ON_DEMAND | PIB_MR_IMPLICIT;
    if (ctx.access & ~kRegionAccess || ctx.flags & ~kFlags ||
        std::popcount(static_cast<unsigned>(ctx.flags)) > 1)
        return fail(err::kCmdBadParam, "CREATE_MR access 0x%x flags 0x%x", ctx.access, ctx.flags);
    if (ctx.flags & PIB_MR_FAST_REG)
        return createFastRegMr(ctx);
    if (const err::Condition *why = regions_.check("CREATE_MR", ctx))
        return CommandOutcome::failed(*why);
    return insertMr(ctx);
}

// A new MR of `ctx`: its key, or the failure.
CommandOutcome CommandProcessor::insertMr(const pib_mr_context &ctx) {
    uint32_t key = 0;
    if (const err::Condition *why = regions_.insert(ctx, &key))
        return CommandOutcome::failed(*why);
    return {PIB_CMD_STATUS_OK, key};
}

// A fast-registration MR is created free: the device fills its MTT range
// from REG_MR WQEs (memory_keys.cc), so nothing is mapped yet.
CommandOutcome CommandProcessor::createFastRegMr(const pib_mr_context &ctx) {
    if (ctx.iova || ctx.length || ctx.access || ctx.log_page_size)
        return fail(err::kCmdBadParam,
                    "CREATE_MR fast registration with iova, length, access or page size");
    if (ctx.mtt_count == 0 || ctx.mtt_count > limits::kMaxFastRegPages ||
        !objects_.mtt.covers(ctx.mtt_index, ctx.mtt_count))
        return fail(err::kCmdBadParam,
                    "CREATE_MR fast registration of %u pages at MTT %u (1..%u allocated entries)",
                    ctx.mtt_count, ctx.mtt_index, limits::kMaxFastRegPages);
    return insertMr(ctx);
}

CommandOutcome CommandProcessor::destroyMr(const Command &cmd) {
    if (const err::Condition *why = regions_.destroy("DESTROY_MR", cmd.modifier))
        return CommandOutcome::failed(*why);
    return {};
}

CommandOutcome CommandProcessor::queryMr(const Command &cmd) {
    MemoryRegion *mr = regions_.find(cmd.modifier);
    if (!mr)
        return fail(err::kCmdBadIndex, "QUERY_MR of key 0x%x", cmd.modifier);
    if (!writeMailbox(cmd, mr->ctx))
        return mailboxFailed();
    return {};
}

// ibv_rereg_mr in place (IBA 10.6.3.4, Reregister Memory Region): a new
// translation, PD or access under the same key. A region that windows are
// bound to, or a fast-registration one, is not reregistered.
CommandOutcome CommandProcessor::reregMr(const Command &cmd) {
    pib_mr_context ctx;
    if (!readMailbox(cmd, ctx))
        return mailboxFailed();
    MemoryRegion *mr = regions_.find(cmd.modifier);
    if (!mr || mr->fastReg())
        return fail(err::kCmdBadIndex, "REREG_MR of key 0x%x, which names no registered region",
                    cmd.modifier);
    // An on-demand region's entries, and an implicit one's spans, are the
    // driver's to change (docs/prm.md §6.9): it registers anew instead.
    if (mr->pagedEntries || mr->implicit())
        return fail(err::kCmdBadIndex, "REREG_MR of key 0x%x, an on-demand region", cmd.modifier);
    if (mr->windows)
        return fail(err::kCmdBusy, "REREG_MR of key 0x%x: %u memory windows are bound to it",
                    cmd.modifier, mr->windows);
    if (ctx.access & ~kRegionAccess || ctx.flags & ~PIB_MR_PHYSICAL)
        return fail(err::kCmdBadParam, "REREG_MR access 0x%x flags 0x%x", ctx.access, ctx.flags);
    if (const err::Condition *why = regions_.check("REREG_MR", ctx))
        return CommandOutcome::failed(*why);
    // The new translation is held before the old one is let go: they may
    // share a range.
    if (ctx.mtt_count)
        objects_.mtt.hold(ctx.mtt_index, ctx.log_page_size);
    if (mr->ctx.mtt_count)
        objects_.mtt.unhold(mr->ctx.mtt_index, mr->ctx.log_page_size);
    --objects_.pds.at(mr->ctx.pdn).refs;
    ++objects_.pds.at(ctx.pdn).refs;
    ctx.key_variant = mr->ctx.key_variant;
    mr->ctx = ctx;
    return {};
}

// The driver mapped the pages of page fault `in` (docs/prm.md §6.9), or
// (modifier 1) could not. A token no QP waits for is no error: the driver
// resumes from a queue of its own, and the QP may have been reset since.
CommandOutcome CommandProcessor::pageFaultResume(const Command &cmd) {
    if (cmd.modifier > 1)
        return fail(err::kCmdBadParam, "PAGE_FAULT_RESUME with modifier %u", cmd.modifier);
    core_.dataPath.resumePageFault(cmd.in, cmd.modifier == 1);
    return {};
}

CommandOutcome CommandProcessor::createMw(const Command &cmd) {
    pib_mw_context ctx;
    if (!readMailbox(cmd, ctx))
        return mailboxFailed();
    return createMw(ctx);
}

CommandOutcome CommandProcessor::createMw(const pib_mw_context &ctx) {
    uint32_t key = 0;
    if (const err::Condition *why =
            regions_.insertWindow("CREATE_MW", ctx.pdn, ctx.type, ctx.key_variant, &key))
        return CommandOutcome::failed(*why);
    return {PIB_CMD_STATUS_OK, key};
}

// A window's variant changes with each bind: its index names it.
static MemoryWindow *findWindow(const ObjectTable<MemoryWindow> &mws, uint32_t key) {
    return mws.find(PIB_KEY_INDEX(key));
}

CommandOutcome CommandProcessor::destroyMw(const Command &cmd) {
    if (const err::Condition *why = regions_.destroyWindow("DESTROY_MW", cmd.modifier))
        return CommandOutcome::failed(*why);
    return {};
}

CommandOutcome CommandProcessor::queryMw(const Command &cmd) {
    const MemoryWindow *mw = findWindow(objects_.mws, cmd.modifier);
    if (!mw)
        return fail(err::kCmdBadIndex, "QUERY_MW of key 0x%x", cmd.modifier);
    if (!writeMailbox(cmd, mw->ctx))
        return mailboxFailed();
    return {};
}

} // namespace pib
