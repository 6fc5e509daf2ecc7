// SPDX-License-Identifier: GPL-2.0-or-later
// The memory regions and windows of the core's tables as every
// personality's commands make and end them: a context is checked against the PDs and the MTT, a
// region holds its PD and its MTT range, and a key names it. Which
// condition a refusal is, and so what the driver reads, is the
// personality's (Refusals).
#pragma once

#include <cstdint>
#include <vector>

#include "host.hh"
#include "object_tables.hh"

namespace pib {

// The conditions a personality's commands refuse with.
struct Refusals {
    const err::Condition &badIndex; // an object that does not exist
    const err::Condition &badParam; // a field out of range
    const err::Condition &noResources;
    const err::Condition &busy; // an object others still use
};

class MemoryRegions {
  public:
    MemoryRegions(const Host &host, ObjectTables &objects, const Refusals &refusals)
        : host_(host), objects_(objects), refusals_(refusals) {}

    // Checks the context of a registered region (not a fast-registration
    // one) for `command`: its PD, access, page size, range and MTT.
    const err::Condition *check(const char *command, const pib_mr_context &ctx) const;
    // Where a region's translations are: in the MTT range its context
    // names, or (a fast-registration region only) kept with it.
    enum class Translations { kMtt, kOwn, kIndirect };
    // A new region of `ctx`, which the caller checked, holding its PD and
    // MTT range, and linked to the implicit region it is a span of (its
    // parent_key, checked here whatever the caller checked); its key in
    // *key.
    const err::Condition *insert(const pib_mr_context &ctx, uint32_t *key,
                                 Translations translations = Translations::kMtt);
    // A new region of `ctx` (checked here: its PD, access, page size and
    // range) that keeps `pages`, its translation entries, with itself (a
    // ConnectX key made with its pages): they cover the range, and are at
    // most ctx.mtt_count, the table UMRs may fill later. In use at once.
    // `paged`: the entries carry present bits (MemoryRegion::pagedEntries),
    // absent ones too, in pages of up to 2^kMaxPagedLogPageSize bytes.
    const err::Condition *insertWithPages(const char *command, const pib_mr_context &ctx,
                                          std::vector<uint64_t> pages, uint32_t *key,
                                          bool paged = false);
    // A new indirect key (indirect_key.hh) of `ctx` with a table of
    // `tableEntries`, taken from the device's translation budget: free
    // until a UMR lays it out.
    const err::Condition *insertIndirect(const char *command, const pib_mr_context &ctx,
                                         uint32_t tableEntries, uint32_t *key);
    // A new memory window (IBA 10.6.7.1) of `type` in PD `pdn`, unbound,
    // holding its PD; its key in *key.
    const err::Condition *insertWindow(const char *command, uint32_t pdn, uint8_t type,
                                       uint8_t variant, uint32_t *key);
    // Ends the window `key` names (its index: a window's variant changes
    // with each bind), unbinding it first.
    const err::Condition *destroyWindow(const char *command, uint32_t key);
    // Links the on-demand region at `index`, loaded without its parent,
    // to implicit region `parentKey` as CREATE_MR would have (a saved
    // state's regions are loaded by index, a parent after its children
    // perhaps).
    const err::Condition *relinkChild(const char *command, uint32_t index, uint32_t parentKey);
    // Ends the region `key` names, unless windows are bound to it or
    // on-demand regions are linked to it; a linked one leaves its parent.
    const err::Condition *destroy(const char *command, uint32_t key);
    // The region a key names, if the key's variant matches too (a
    // fast-registration region's variant changes with each REG_MR: its
    // index is enough).
    MemoryRegion *find(uint32_t key) const;

  private:
    const err::Condition *checkPdAndAccess(const char *command, const pib_mr_context &ctx) const;
    const err::Condition *checkTranslated(const char *command, const pib_mr_context &ctx,
                                          bool paged = false) const;
    const err::Condition *checkImplicit(const char *command, const pib_mr_context &ctx) const;
    const err::Condition *checkChild(const char *command, const pib_mr_context &ctx) const;
    void linkChild(uint32_t index);
    void holdTranslations(const MemoryRegion &mr, bool hold);
    [[gnu::format(printf, 3, 4)]] const err::Condition *fail(const err::Condition &why,
                                                             const char *fmt, ...) const;

    const Host &host_;
    ObjectTables &objects_;
    const Refusals &refusals_;
};

} // namespace pib
