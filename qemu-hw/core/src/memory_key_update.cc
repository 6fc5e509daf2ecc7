// SPDX-License-Identifier: GPL-2.0-or-later
// MemoryKeys::update: a general key update (key_update.hh), checked whole
// before any of it takes effect.
#include <algorithm>

#include "limits.hh"
#include "memory_keys.hh"
#include "trace.hh"

namespace pib {

namespace {

constexpr uint64_t kBlockEntries = 8;
constexpr uint64_t kMinPageMask = (uint64_t{1} << limits::kMinLogPageSize) - 1;

const char *checkRange(const KeyUpdate &u) {
    if (u.logPageSize < limits::kMinLogPageSize || u.logPageSize > limits::kMaxLogPageSize)
        return "a page size outside 2^12..2^30";
    if (!u.length64 &&
        (u.length == 0 || u.length > limits::kMaxMrSize || u.iova + u.length < u.iova))
        return "a length of 0, beyond max_mr_size or wrapping";
    return nullptr;
}

// The length a key of `u`'s range has: to the address space's end for
// length64 (its last byte left out, so that no range wraps).
uint64_t lengthOf(const KeyUpdate &u) {
    return u.length64 ? ~uint64_t{0} - u.iova : u.length;
}

// The key's access rights once `u` sets those it sets.
uint32_t accessAfter(const MemoryRegion &mr, const KeyUpdate &u) {
    constexpr uint32_t kAtomic = PIB_ACCESS_REMOTE_ATOMIC;
    const uint32_t others = u.setsAccess ? u.access & ~kAtomic : mr.ctx.access & ~kAtomic;
    return others | ((u.setsAtomic ? u.access : mr.ctx.access) & kAtomic);
}

} // namespace

// Rights IBA does not allow a key (10.6.3.1: remote write or atomic
// without local write), or that no key has: why, or null.
const char *MemoryKeys::refusedAccess(uint32_t access) {
    if (access & ~PIB_ACCESS_ALL ||
        (access & (PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_ATOMIC) &&
         !(access & PIB_ACCESS_LOCAL_WRITE)))
        return "access rights IBA does not allow";
    return nullptr;
}

// What keeps `u` and its `entries` from applying to `mr` (named by `key`):
// null when nothing does.
const char *MemoryKeys::checkUpdate(const MemoryRegion *mr, uint32_t key, const KeyUpdate &u,
                                    std::span<const uint64_t> entries) const {
    if (!mr || !mr->ownsPages || !mr->fastReg())
        return "the key names no UMR-enabled translation key";
    if (!u.setsVariant && mr->key != key)
        return "the key's variant is not the region's";
    if (u.before == KeyUpdate::Before::kFree && mr->valid)
        return "the key is in use, and the UMR asks for a free one";
    if (u.before == KeyUpdate::Before::kInUse && !mr->valid)
        return "the key is free, and the UMR asks for one in use";
    if (u.setsRange)
        if (const char *why = checkRange(u))
            return why;
    if (const char *why = refusedAccess(accessAfter(*mr, u)))
        return why;
    if (u.setsPd && !pds_.find(u.pdn))
        return "no such PD";
    // The driver pads each load to 64 bytes (MLX5_UMR_FLEX_ALIGNMENT), a
    // key of 4 entries too: the table is whole blocks of 8 entries.
    const uint64_t table =
        (uint64_t{mr->ctx.mtt_count} + kBlockEntries - 1) / kBlockEntries * kBlockEntries;
    if (u.firstEntry > table || entries.size() > table - u.firstEntry)
        return "translation entries beyond the key's table";
    if (!mr->ksm) // a KSM key's entries are keys and addresses, checked as they are used
        for (uint64_t entry : entries)
            if (entry & ~key_entry::kFlags & kMinPageMask)
                return "a translation entry that is not a page address";
    return nullptr;
}

// Freeing the key gives its table back to the budget; entries beyond the
// table's end grow it, within the budget.
bool MemoryKeys::storeEntries(MemoryRegion &mr, const KeyUpdate &u,
                              std::span<const uint64_t> entries) {
    if (u.setsFree && u.free) {
        mtt_.returnKeyEntries(mr.ownPages.size());
        mr.ownPages = {};
    }
    if (entries.empty())
        return true;
    const uint64_t end = u.firstEntry + entries.size();
    if (end > mr.ownPages.size()) {
        if (!mtt_.takeKeyEntries(end - mr.ownPages.size()))
            return false;
        mr.ownPages.resize(end);
    }
    // As given, with their present bits: the UMR QP's keys are the ones
    // the driver pages on demand (MemoryRegion::pagedEntries); a KSM
    // key's are keys and addresses.
    std::copy(entries.begin(), entries.end(),
              mr.ownPages.begin() + static_cast<ptrdiff_t>(u.firstEntry));
    mr.pagedEntries = !mr.ksm;
    return true;
}

// mlx5_ib revokes a key of its MR cache (frees it, moves it to a PD of
// its own) whatever windows a process bound to it, as the hardware lets
// it: they reach nothing from now on, and hold the key no more. At most
// the window table's size, and only for a key windows are bound to.
void MemoryKeys::unbindWindowsOf(MemoryRegion &mr) {
    const uint32_t index = PIB_KEY_INDEX(mr.key);
    mws_.forEach([&](uint32_t, MemoryWindow &w) {
        if (w.ctx.bound && PIB_KEY_INDEX(w.ctx.mr_key) == index)
            unbind(mrs_, w);
    });
}

uint8_t MemoryKeys::update(uint32_t qpn, uint32_t index, uint32_t key, const KeyUpdate &u,
                           std::span<const uint64_t> entries) {
    MemoryRegion *mr = mrs_.find(PIB_KEY_INDEX(key));
    const char *why = checkUpdate(mr, key, u, entries);
    if (!why && !storeEntries(*mr, u, entries))
        why = "the device's translation memory is full";
    if (why) {
        host_.guestError(err::kMlx5Umr, "QP %u UMR WQE %u of key 0x%x: %s", qpn, index, key, why);
        return PIB_WC_LOC_PROT_ERR;
    }
    pib_mr_context &c = mr->ctx;
    if (u.setsRange) {
        c.iova = u.iova;
        c.length = lengthOf(u);
        c.log_page_size = u.logPageSize;
    }
    c.access = accessAfter(*mr, u);
    if (u.setsPd) {
        --pds_.at(c.pdn).refs;
        ++pds_.at(u.pdn).refs;
        c.pdn = u.pdn;
    }
    if (u.setsVariant) {
        c.key_variant = u.variant;
        mr->key = (PIB_KEY_INDEX(key) << 8) | u.variant;
    }
    if (u.setsFree)
        mr->valid = !u.free;
    if (mr->windows && (u.setsPd || (u.setsFree && u.free)))
        unbindWindowsOf(*mr);
    mr->umrQpOwned = true;
    trace::mlx5_umr(host_, qpn, mr->key, static_cast<unsigned>(entries.size()), u.firstEntry,
                    mr->valid, c.pdn);
    return PIB_WC_SUCCESS;
}

} // namespace pib
