// SPDX-License-Identifier: GPL-2.0-or-later
// Memory regions.
#include <cinttypes>
#include <optional>

#include "commands.hh"
#include "limits.hh"
#include "memory_keys.hh"
#include "trace.hh"

namespace pib {

// The checks CREATE_MR and REREG_MR make of a registered (not fast-
// registration) region's context: null when it is fine, else the failure.
std::optional<CommandOutcome> CommandProcessor::checkMrContext(const char *name,
                                                               const pib_mr_context &ctx) {
    if (!objects_.pds.find(ctx.pdn))
        return fail(err::kCmdBadIndex, "%s in PD %u", name, ctx.pdn);
    // IBA 10.6.3.1: remote write and atomic access need local write.
    if (ctx.access & (PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_ATOMIC) &&
        !(ctx.access & PIB_ACCESS_LOCAL_WRITE))
        return fail(err::kCmdBadParam, "%s remote write/atomic without local write (access 0x%x)",
                    name, ctx.access);
    if (ctx.flags & PIB_MR_PHYSICAL) {
        if (ctx.mtt_count)
            return fail(err::kCmdBadParam, "%s physical with MTT", name);
        return std::nullopt;
    }
    const unsigned shift = ctx.log_page_size;
    if (shift < limits::kMinLogPageSize || shift > limits::kMaxLogPageSize)
        return fail(err::kCmdBadParam, "%s page size 2^%u", name, shift);
    if (ctx.length == 0 || ctx.length > limits::kMaxMrSize || ctx.iova + ctx.length < ctx.iova)
        return fail(err::kCmdBadParam, "%s of 0x%" PRIx64 " bytes at 0x%" PRIx64, name, ctx.length,
                    ctx.iova);
    const uint64_t pages = ((ctx.iova + ctx.length - 1) >> shift) - (ctx.iova >> shift) + 1;
    if (pages != ctx.mtt_count || !objects_.mtt.covers(ctx.mtt_index, ctx.mtt_count))
        return fail(err::kCmdBadParam, "%s needs %" PRIu64 " allocated MTT entries, got %u at %u",
                    name, pages, ctx.mtt_count, ctx.mtt_index);
    const uint64_t pageMask = (uint64_t{1} << shift) - 1;
    for (uint32_t i = 0; i < ctx.mtt_count; ++i) {
        const uint64_t entry = objects_.mtt.entry(ctx.mtt_index + i);
        if (entry == 0 || entry & pageMask)
            return fail(err::kCmdBadParam,
                        "%s MTT entry %u (0x%" PRIx64 ") is not a 2^%u-byte page", name,
                        ctx.mtt_index + i, entry, shift);
    }
    return std::nullopt;
}

CommandOutcome CommandProcessor::createMr(const Command &cmd) {
    pib_mr_context ctx;
    if (!readMailbox(cmd, ctx))
        return mailboxFailed();
    ProtectionDomain *pd = objects_.pds.find(ctx.pdn);
    if (!pd)
        return fail(err::kCmdBadIndex, "CREATE_MR in PD %u", ctx.pdn);
    constexpr uint8_t kFlags = PIB_MR_PHYSICAL | PIB_MR_FAST_REG;
    if (ctx.access & ~(PIB_ACCESS_ALL | PIB_ACCESS_MW_BIND) || ctx.flags & ~kFlags ||
        (ctx.flags & kFlags) == kFlags)
        return fail(err::kCmdBadParam, "CREATE_MR access 0x%x flags 0x%x", ctx.access, ctx.flags);
    if (ctx.flags & PIB_MR_FAST_REG)
        return createFastRegMr(ctx, *pd);
    if (auto failed = checkMrContext("CREATE_MR", ctx))
        return *failed;
    return insertMr(ctx, *pd);
}

// A new MR of `ctx` in `pd`, holding its MTT range: its key, or the
// failure. A fast-registration MR starts free, and only the device writes
// its range.
CommandOutcome CommandProcessor::insertMr(const pib_mr_context &ctx, ProtectionDomain &pd) {
    auto mr = std::make_unique<MemoryRegion>();
    MemoryRegion *raw = mr.get();
    const auto index = objects_.mrs.insert(std::move(mr));
    if (!index)
        return fail(err::kCmdNoResources, "all %u MRs in use", objects_.mrs.capacity());
    raw->ctx = ctx;
    raw->key = (*index << 8) | ctx.key_variant;
    raw->valid = !raw->fastReg();
    ++pd.refs;
    if (raw->fastReg())
        objects_.mtt.hold(ctx.mtt_index, Mtt::kMinLogPage, true);
    else if (ctx.mtt_count)
        objects_.mtt.hold(ctx.mtt_index, ctx.log_page_size);
    return {PIB_CMD_STATUS_OK, raw->key};
}

// A fast-registration MR is created free: the device fills its MTT range
// from REG_MR WQEs (memory_keys.cc), so nothing is mapped yet.
CommandOutcome CommandProcessor::createFastRegMr(const pib_mr_context &ctx, ProtectionDomain &pd) {
    if (ctx.iova || ctx.length || ctx.access || ctx.log_page_size)
        return fail(err::kCmdBadParam,
                    "CREATE_MR fast registration with iova, length, access or page size");
    if (ctx.mtt_count == 0 || ctx.mtt_count > limits::kMaxFastRegPages ||
        !objects_.mtt.covers(ctx.mtt_index, ctx.mtt_count))
        return fail(err::kCmdBadParam,
                    "CREATE_MR fast registration of %u pages at MTT %u (1..%u allocated entries)",
                    ctx.mtt_count, ctx.mtt_index, limits::kMaxFastRegPages);
    return insertMr(ctx, pd);
}

// The MR a key names, if the key's variant matches too (a fast-registration
// MR's variant changes with each REG_MR: its index is enough).
static MemoryRegion *findByKey(const ObjectTable<MemoryRegion> &mrs, uint32_t key) {
    MemoryRegion *mr = mrs.find(PIB_KEY_INDEX(key));
    return mr && (mr->key == key || mr->fastReg()) ? mr : nullptr;
}

CommandOutcome CommandProcessor::destroyMr(const Command &cmd) {
    MemoryRegion *mr = findByKey(objects_.mrs, cmd.modifier);
    if (!mr)
        return fail(err::kCmdBadIndex, "DESTROY_MR of key 0x%x", cmd.modifier);
    if (mr->windows)
        return fail(err::kCmdBusy, "DESTROY_MR of key 0x%x: %u memory windows are bound to it",
                    cmd.modifier, mr->windows);
    --objects_.pds.at(mr->ctx.pdn).refs;
    if (mr->fastReg())
        objects_.mtt.unhold(mr->ctx.mtt_index, Mtt::kMinLogPage, true);
    else if (mr->ctx.mtt_count)
        objects_.mtt.unhold(mr->ctx.mtt_index, mr->ctx.log_page_size);
    objects_.mrs.erase(PIB_KEY_INDEX(cmd.modifier));
    return {};
}

CommandOutcome CommandProcessor::queryMr(const Command &cmd) {
    MemoryRegion *mr = findByKey(objects_.mrs, cmd.modifier);
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
    MemoryRegion *mr = findByKey(objects_.mrs, cmd.modifier);
    if (!mr || mr->fastReg())
        return fail(err::kCmdBadIndex, "REREG_MR of key 0x%x, which names no registered region",
                    cmd.modifier);
    if (mr->windows)
        return fail(err::kCmdBusy, "REREG_MR of key 0x%x: %u memory windows are bound to it",
                    cmd.modifier, mr->windows);
    if (ctx.access & ~(PIB_ACCESS_ALL | PIB_ACCESS_MW_BIND) || ctx.flags & ~PIB_MR_PHYSICAL)
        return fail(err::kCmdBadParam, "REREG_MR access 0x%x flags 0x%x", ctx.access, ctx.flags);
    if (auto failed = checkMrContext("REREG_MR", ctx))
        return *failed;
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

CommandOutcome CommandProcessor::createMw(const Command &cmd) {
    pib_mw_context ctx;
    if (!readMailbox(cmd, ctx))
        return mailboxFailed();
    ProtectionDomain *pd = objects_.pds.find(ctx.pdn);
    if (!pd)
        return fail(err::kCmdBadIndex, "CREATE_MW in PD %u", ctx.pdn);
    if (ctx.type != PIB_MW_TYPE_1 && ctx.type != PIB_MW_TYPE_2)
        return fail(err::kCmdBadParam, "CREATE_MW of type %u", ctx.type);
    auto mw = std::make_unique<MemoryWindow>();
    MemoryWindow *raw = mw.get();
    const auto index = objects_.mws.insert(std::move(mw));
    if (!index)
        return fail(err::kCmdNoResources, "all %u MWs in use", objects_.mws.capacity());
    raw->ctx = {};
    raw->ctx.pdn = ctx.pdn;
    raw->ctx.type = ctx.type;
    raw->ctx.key_variant = ctx.key_variant;
    raw->key = (*index << 8) | ctx.key_variant;
    ++pd->refs;
    return {PIB_CMD_STATUS_OK, raw->key};
}

// A window's variant changes with each bind: its index names it.
static MemoryWindow *findWindow(const ObjectTable<MemoryWindow> &mws, uint32_t key) {
    return mws.find(PIB_KEY_INDEX(key));
}

CommandOutcome CommandProcessor::destroyMw(const Command &cmd) {
    MemoryWindow *mw = findWindow(objects_.mws, cmd.modifier);
    if (!mw)
        return fail(err::kCmdBadIndex, "DESTROY_MW of key 0x%x", cmd.modifier);
    MemoryKeys::unbind(objects_.mrs, *mw); // IBA 10.6.7.1: deallocation invalidates it
    --objects_.pds.at(mw->ctx.pdn).refs;
    objects_.mws.erase(PIB_KEY_INDEX(cmd.modifier));
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
