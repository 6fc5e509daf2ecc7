// SPDX-License-Identifier: GPL-2.0-or-later
#include "memory_regions.hh"

#include "memory_keys.hh"

#include <cinttypes>
#include <cstdarg>

#include "limits.hh"

namespace pib {

const err::Condition *MemoryRegions::fail(const err::Condition &why, const char *fmt, ...) const {
    va_list args;
    va_start(args, fmt);
    host_.vguestError(why, fmt, args);
    va_end(args);
    return &why;
}

// The PD, access, page size and range of a region with translations. A
// `paged` one (entries with present bits) may have pages up to 2^61
// bytes and reach the address space's end: the pages it maps are what it
// reaches.
const err::Condition *MemoryRegions::checkTranslated(const char *command, const pib_mr_context &ctx,
                                                     bool paged) const {
    if (const err::Condition *why = checkPdAndAccess(command, ctx))
        return why;
    const unsigned shift = ctx.log_page_size;
    if (shift < limits::kMinLogPageSize ||
        shift > (paged ? limits::kMaxPagedLogPageSize : limits::kMaxLogPageSize))
        return fail(refusals_.badParam, "%s page size 2^%u", command, shift);
    if (ctx.length == 0 || (!paged && ctx.length > limits::kMaxMrSize) ||
        ctx.iova + ctx.length < ctx.iova)
        return fail(refusals_.badParam, "%s of 0x%" PRIx64 " bytes at 0x%" PRIx64, command,
                    ctx.length, ctx.iova);
    return nullptr;
}

const err::Condition *MemoryRegions::checkPdAndAccess(const char *command,
                                                      const pib_mr_context &ctx) const {
    if (!objects_.pds.find(ctx.pdn))
        return fail(refusals_.badIndex, "%s in PD %u", command, ctx.pdn);
    // IBA 10.6.3.1: remote write and atomic access need local write.
    if (ctx.access & (PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_ATOMIC) &&
        !(ctx.access & PIB_ACCESS_LOCAL_WRITE))
        return fail(refusals_.badParam, "%s remote write/atomic without local write (access 0x%x)",
                    command, ctx.access);
    return nullptr;
}

const err::Condition *MemoryRegions::check(const char *command, const pib_mr_context &ctx) const {
    if (ctx.parent_key && !(ctx.flags & PIB_MR_ON_DEMAND))
        return checkChild(command, ctx); // refuses it
    if (ctx.flags & PIB_MR_IMPLICIT)
        return checkImplicit(command, ctx);
    if (ctx.flags & PIB_MR_PHYSICAL) {
        if (ctx.mtt_count)
            return fail(refusals_.badParam, "%s physical with MTT", command);
        return checkPdAndAccess(command, ctx);
    }
    if (const err::Condition *why = checkTranslated(command, ctx))
        return why;
    const unsigned shift = ctx.log_page_size;
    const uint64_t pages = ((ctx.iova + ctx.length - 1) >> shift) - (ctx.iova >> shift) + 1;
    if (pages != ctx.mtt_count || !objects_.mtt.covers(ctx.mtt_index, ctx.mtt_count))
        return fail(refusals_.badParam, "%s needs %" PRIu64 " allocated MTT entries, got %u at %u",
                    command, pages, ctx.mtt_count, ctx.mtt_index);
    if (ctx.flags & PIB_MR_ON_DEMAND) // its entries say which pages it maps, whenever
        return ctx.parent_key ? checkChild(command, ctx) : nullptr;
    const uint64_t pageMask = (uint64_t{1} << shift) - 1;
    for (uint32_t i = 0; i < ctx.mtt_count; ++i) {
        const uint64_t entry = objects_.mtt.entry(ctx.mtt_index + i);
        if (entry == 0 || entry & pageMask)
            return fail(refusals_.badParam,
                        "%s MTT entry %u (0x%" PRIx64 ") is not a 2^%u-byte page", command,
                        ctx.mtt_index + i, entry, shift);
    }
    return nullptr;
}

// An implicit on-demand region (docs/prm.md §6.10): the whole address
// space, in spans its children cover, and no translations of its own.
const err::Condition *MemoryRegions::checkImplicit(const char *command,
                                                   const pib_mr_context &ctx) const {
    if (const err::Condition *why = checkPdAndAccess(command, ctx))
        return why;
    if (ctx.iova || ctx.length != UINT64_MAX || ctx.mtt_index || ctx.mtt_count ||
        ctx.log_page_size < PIB_IMPLICIT_MIN_LOG_SPAN ||
        ctx.log_page_size > PIB_IMPLICIT_MAX_LOG_SPAN)
        return fail(refusals_.badParam,
                    "%s implicit: 0x%" PRIx64 " bytes at 0x%" PRIx64
                    ", %u MTT entries at %u, spans of 2^%u bytes",
                    command, ctx.length, ctx.iova, ctx.mtt_count, ctx.mtt_index, ctx.log_page_size);
    return nullptr;
}

// An on-demand region that an implicit one (its parent_key) reaches for
// one of its spans: that span exactly, not yet covered, in the parent's
// PD and with its rights, which are what an access through it checked.
// Any other region has no parent.
const err::Condition *MemoryRegions::checkChild(const char *command,
                                                const pib_mr_context &ctx) const {
    if ((ctx.flags & (PIB_MR_ON_DEMAND | PIB_MR_PHYSICAL | PIB_MR_FAST_REG | PIB_MR_IMPLICIT)) !=
        PIB_MR_ON_DEMAND)
        return fail(refusals_.badParam, "%s with parent key 0x%x and flags 0x%x, not on demand",
                    command, ctx.parent_key, ctx.flags);
    const MemoryRegion *parent = find(ctx.parent_key);
    if (!parent || !parent->implicit())
        return fail(refusals_.badParam, "%s: parent key 0x%x names no implicit region", command,
                    ctx.parent_key);
    const unsigned shift = parent->ctx.log_page_size;
    const uint64_t span = uint64_t{1} << shift;
    if (ctx.iova & (span - 1) || ctx.length != span || ctx.pdn != parent->ctx.pdn ||
        ctx.access != parent->ctx.access)
        return fail(refusals_.badParam,
                    "%s: 0x%" PRIx64 " bytes at 0x%" PRIx64 " in PD %u with access 0x%x "
                    "is no span of implicit key 0x%x (2^%u bytes, PD %u, access 0x%x)",
                    command, ctx.length, ctx.iova, ctx.pdn, ctx.access, ctx.parent_key, shift,
                    parent->ctx.pdn, parent->ctx.access);
    if (parent->children.contains(ctx.iova >> shift))
        return fail(refusals_.badParam,
                    "%s: the span at 0x%" PRIx64 " of implicit key 0x%x "
                    "has a region already",
                    command, ctx.iova, ctx.parent_key);
    return nullptr;
}

// Links on-demand region `index` to the implicit region it names, for
// the span it covers (checkChild said it may be).
void MemoryRegions::linkChild(uint32_t index) {
    const pib_mr_context &ctx = objects_.mrs.at(index).ctx;
    MemoryRegion &parent = *find(ctx.parent_key);
    parent.children[ctx.iova >> parent.ctx.log_page_size] = index;
}

const err::Condition *MemoryRegions::relinkChild(const char *command, uint32_t index,
                                                 uint32_t parentKey) {
    MemoryRegion &child = objects_.mrs.at(index);
    pib_mr_context ctx = child.ctx;
    ctx.parent_key = parentKey;
    if (const err::Condition *why = checkChild(command, ctx))
        return why;
    child.ctx.parent_key = parentKey;
    linkChild(index);
    return nullptr;
}

const err::Condition *MemoryRegions::insertWithPages(const char *command, const pib_mr_context &ctx,
                                                     std::vector<uint64_t> pages, uint32_t *key,
                                                     bool paged) {
    if (const err::Condition *why = checkTranslated(command, ctx, paged))
        return why;
    const unsigned shift = ctx.log_page_size;
    const uint64_t spanned = ((ctx.iova + ctx.length - 1) >> shift) - (ctx.iova >> shift) + 1;
    if (pages.size() < spanned || pages.size() > ctx.mtt_count)
        return fail(refusals_.badParam,
                    "%s: %zu translation entries for a range of %" PRIu64 " pages, a table of %u",
                    command, pages.size(), spanned, ctx.mtt_count);
    const uint64_t pageMask = (uint64_t{1} << shift) - 1;
    for (size_t i = 0; i < spanned; ++i)
        if (paged ? (pages[i] & ~key_entry::kFlags & pageMask) != 0
                  : pages[i] == 0 || pages[i] & pageMask)
            return fail(refusals_.badParam,
                        "%s: translation entry %zu (0x%" PRIx64 ") is not a 2^%u-byte page",
                        command, i, pages[i], shift);
    if (!objects_.mtt.takeKeyEntries(pages.size()))
        return fail(refusals_.noResources, "%s: the device's translation memory is full", command);
    if (const err::Condition *why = insert(ctx, key, Translations::kOwn)) {
        objects_.mtt.returnKeyEntries(pages.size());
        return why;
    }
    MemoryRegion &mr = *objects_.mrs.find(PIB_KEY_INDEX(*key));
    mr.ownPages = std::move(pages);
    mr.pagedEntries = paged;
    mr.valid = true;
    return nullptr;
}

const err::Condition *MemoryRegions::insertIndirect(const char *command, const pib_mr_context &ctx,
                                                    uint32_t tableEntries, uint32_t *key) {
    IndirectLayout empty;
    empty.tableEntries = tableEntries;
    if (!objects_.mtt.takeKeyEntries(indirectCharge(empty)))
        return fail(refusals_.noResources, "%s: the device's translation memory is full", command);
    if (const err::Condition *why = insert(ctx, key, Translations::kIndirect)) {
        objects_.mtt.returnKeyEntries(indirectCharge(empty));
        return why;
    }
    objects_.mrs.find(PIB_KEY_INDEX(*key))->indirect = empty;
    return nullptr;
}

// A fast-registration region starts free, and only the device writes its
// range (or its own pages, which it has none of yet).
const err::Condition *MemoryRegions::insert(const pib_mr_context &ctx, uint32_t *key,
                                            Translations translations) {
    // Whatever the caller checked: a link names a parent that takes it.
    if (ctx.parent_key)
        if (const err::Condition *why = checkChild("CREATE_MR", ctx))
            return why;
    auto mr = std::make_unique<MemoryRegion>();
    MemoryRegion *raw = mr.get();
    const auto index = objects_.mrs.insert(std::move(mr));
    if (!index)
        return fail(refusals_.noResources, "all %u MRs in use", objects_.mrs.capacity());
    raw->ctx = ctx;
    raw->key = (*index << 8) | ctx.key_variant;
    raw->valid = !raw->fastReg();
    raw->ownsPages = translations == Translations::kOwn;
    raw->pagedEntries = ctx.flags & PIB_MR_ON_DEMAND;
    if (translations == Translations::kIndirect)
        raw->indirect = IndirectLayout{};
    ++objects_.pds.at(ctx.pdn).refs;
    holdTranslations(*raw, true);
    if (ctx.parent_key)
        linkChild(*index);
    *key = raw->key;
    return nullptr;
}

const err::Condition *MemoryRegions::insertWindow(const char *command, uint32_t pdn, uint8_t type,
                                                  uint8_t variant, uint32_t *key) {
    ProtectionDomain *pd = objects_.pds.find(pdn);
    if (!pd)
        return fail(refusals_.badIndex, "%s in PD %u", command, pdn);
    if (type != PIB_MW_TYPE_1 && type != PIB_MW_TYPE_2)
        return fail(refusals_.badParam, "%s of type %u", command, type);
    auto mw = std::make_unique<MemoryWindow>();
    MemoryWindow *raw = mw.get();
    const auto index = objects_.mws.insert(std::move(mw));
    if (!index)
        return fail(refusals_.noResources, "%s: all %u MWs in use", command,
                    objects_.mws.capacity());
    raw->ctx = {};
    raw->ctx.pdn = pdn;
    raw->ctx.type = type;
    raw->ctx.key_variant = variant;
    raw->key = (*index << 8) | variant;
    ++pd->refs;
    *key = raw->key;
    return nullptr;
}

const err::Condition *MemoryRegions::destroyWindow(const char *command, uint32_t key) {
    MemoryWindow *mw = objects_.mws.find(PIB_KEY_INDEX(key));
    if (!mw)
        return fail(refusals_.badIndex, "%s of key 0x%x", command, key);
    MemoryKeys::unbind(objects_.mrs, *mw); // IBA 10.6.7.1: deallocation invalidates it
    --objects_.pds.at(mw->ctx.pdn).refs;
    objects_.mws.erase(PIB_KEY_INDEX(key));
    return nullptr;
}

const err::Condition *MemoryRegions::destroy(const char *command, uint32_t key) {
    MemoryRegion *mr = find(key);
    if (!mr)
        return fail(refusals_.badIndex, "%s of key 0x%x", command, key);
    if (mr->windows)
        return fail(refusals_.busy, "%s of key 0x%x: %u memory windows are bound to it", command,
                    key, mr->windows);
    if (!mr->children.empty())
        return fail(refusals_.busy, "%s of key 0x%x: %zu on-demand regions are linked to it",
                    command, key, mr->children.size());
    if (mr->ctx.parent_key) { // its span faults on the parent again
        MemoryRegion &parent = *find(mr->ctx.parent_key);
        parent.children.erase(mr->ctx.iova >> parent.ctx.log_page_size);
    }
    --objects_.pds.at(mr->ctx.pdn).refs;
    holdTranslations(*mr, false);
    objects_.mrs.erase(PIB_KEY_INDEX(key));
    return nullptr;
}

// A region holds its MTT range while it lives: one it reads as its
// pages, or (fast registration) one only the device writes. A region that
// keeps its pages with it gives them back to the device's budget.
void MemoryRegions::holdTranslations(const MemoryRegion &mr, bool hold) {
    const pib_mr_context &ctx = mr.ctx;
    if (mr.indirect) { // its table, charged as it was made
        if (!hold)
            objects_.mtt.returnKeyEntries(indirectCharge(*mr.indirect));
    } else if (mr.ownsPages) {
        if (!hold)
            objects_.mtt.returnKeyEntries(mr.ownPages.size());
    } else if (mr.fastReg() || ctx.mtt_count) {
        const unsigned logPage = mr.fastReg() ? Mtt::kMinLogPage : ctx.log_page_size;
        if (hold)
            objects_.mtt.hold(ctx.mtt_index, logPage, mr.fastReg(), mr.pagedEntries);
        else
            objects_.mtt.unhold(ctx.mtt_index, logPage, mr.fastReg(), mr.pagedEntries);
    }
}

MemoryRegion *MemoryRegions::find(uint32_t key) const {
    MemoryRegion *mr = objects_.mrs.find(PIB_KEY_INDEX(key));
    return mr && (mr->key == key || mr->fastReg()) ? mr : nullptr;
}

} // namespace pib
