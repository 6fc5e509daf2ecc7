// SPDX-License-Identifier: GPL-2.0-or-later
#include "memory_keys.hh"

#include <algorithm>
#include <cinttypes>

#include "limits.hh"
#include "trace.hh"

namespace pib {

// What keeps `reg` from mapping `mr` (rxe's rxe_reg_fast_mr checks the
// same): null when nothing does.
const char *MemoryKeys::checkRegistration(const MemoryRegion *mr, uint32_t pdn,
                                          const pib_wqe_reg_mr &reg) const {
    if (!mr || !mr->fastReg() || mr->indirect)
        return "the key names no fast-registration region";
    if (mr->umrQpOwned)
        return "the key is the UMR QP's (a region of the driver's MR cache)";
    if (mr->ctx.pdn != pdn)
        return "the region is in another PD";
    if (mr->valid)
        return "the region is valid: it must be invalidated first";
    if (reg.access & ~(PIB_ACCESS_ALL | PIB_ACCESS_MW_BIND) ||
        (reg.access & (PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_ATOMIC) &&
         !(reg.access & PIB_ACCESS_LOCAL_WRITE)))
        return "access flags IBA does not allow";
    const unsigned shift = reg.log_page_size;
    if (shift < limits::kMinLogPageSize || shift > limits::kMaxLogPageSize)
        return "a page size outside 2^12..2^30";
    if (reg.length == 0 || reg.length > limits::kMaxMrSize || reg.iova + reg.length < reg.iova)
        return "a length of 0, beyond max_mr_size or wrapping";
    const uint64_t pages = ((reg.iova + reg.length - 1) >> shift) - (reg.iova >> shift) + 1;
    if (reg.page_count != pages || pages > mr->ctx.mtt_count || pages > limits::kMaxFastRegPages)
        return "page_count is not the pages the range spans, or more than the region reserved";
    if (reg.page_list % 8)
        return "a page list not 8-byte aligned";
    return nullptr;
}

// Reads the page list into pages_ (or takes the one the WQE gave) and
// checks every entry is a page.
bool MemoryKeys::readPageList(const pib_wqe_reg_mr &reg, std::span<const uint64_t> given,
                              const char **why) {
    pages_.resize(reg.page_count); // at most kMaxFastRegPages: checkRegistration
    if (!given.empty()) {
        if (given.size() != reg.page_count) {
            *why = "the WQE's page list does not hold the pages the range spans";
            return false;
        }
        // A ConnectX list's entries with their enables, which a fast
        // registration's pages do not page on demand: addresses alone.
        std::transform(given.begin(), given.end(), pages_.begin(),
                       [](uint64_t entry) { return entry & ~key_entry::kFlags; });
    } else if (!host_.dmaRead(reg.page_list, pages_.data(), pages_.size() * sizeof(uint64_t))) {
        *why = "the page list cannot be read";
        return false;
    }
    const uint64_t pageMask = (uint64_t{1} << reg.log_page_size) - 1;
    for (uint64_t page : pages_) {
        if (page == 0 || page & pageMask) {
            *why = "a page list entry that is not a page address";
            return false;
        }
    }
    return true;
}

// Writes the page list read into the region's translations: its MTT
// range, or (a key that owns its pages) its own table, resized within
// the device's budget.
bool MemoryKeys::storePages(MemoryRegion &mr, const char **why) {
    if (!mr.ownsPages) {
        for (size_t i = 0; i < pages_.size(); ++i)
            mtt_.write(static_cast<uint32_t>(mr.ctx.mtt_index + i), pages_[i]);
        return true;
    }
    const size_t held = mr.ownPages.size();
    if (pages_.size() > held && !mtt_.takeKeyEntries(pages_.size() - held)) {
        *why = "the device's translation memory is full";
        return false;
    }
    if (pages_.size() < held)
        mtt_.returnKeyEntries(held - pages_.size());
    if (pages_.size() == held)
        std::copy(pages_.begin(), pages_.end(), mr.ownPages.begin());
    else // exactly sized: what the budget counts is what the device holds
        mr.ownPages = std::vector<uint64_t>(pages_.begin(), pages_.end());
    return true;
}

uint8_t MemoryKeys::fastRegister(uint32_t qpn, uint32_t index, uint32_t pdn,
                                 const pib_wqe_reg_mr &reg, std::span<const uint64_t> given,
                                 std::optional<bool> remoteInvalidate) {
    MemoryRegion *mr = mrs_.find(PIB_KEY_INDEX(reg.key));
    const char *why = checkRegistration(mr, pdn, reg);
    if (!why && readPageList(reg, given, &why) && storePages(*mr, &why)) {
        mr->ctx.iova = reg.iova;
        mr->ctx.length = reg.length;
        mr->ctx.access = reg.access;
        mr->ctx.log_page_size = reg.log_page_size;
        mr->ctx.key_variant = static_cast<uint8_t>(reg.key);
        mr->key = reg.key;
        mr->pagedEntries = false; // the page list's entries are addresses alone
        mr->valid = true;
        if (remoteInvalidate)
            mr->remoteInvalidate = *remoteInvalidate;
        trace::mr_registered(host_, qpn, reg.key, reg.iova, reg.length, reg.access);
        return PIB_WC_SUCCESS;
    }
    host_.guestError(err::kWqeFastReg, "QP %u WQE %u: REG_MR of key 0x%x: %s", qpn, index, reg.key,
                     why);
    return PIB_WC_LOC_PROT_ERR;
}

// The region `key` names if PD `pdn` may invalidate it: a valid
// fast-registration region of that PD, named by its current key, that no
// window is bound to; for a peer (`remote`), one that allows that.
MemoryRegion *MemoryKeys::invalidatable(uint32_t pdn, uint32_t key, bool remote,
                                        const char **why) const {
    MemoryRegion *mr = mrs_.find(PIB_KEY_INDEX(key));
    if (!mr || mr->key != key)
        *why = "no region or window has this key";
    else if (!mr->fastReg())
        *why = "the region is not a fast-registration region";
    else if (mr->umrQpOwned)
        *why = "the key is the UMR QP's (a region of the driver's MR cache)";
    else if (mr->ctx.pdn != pdn)
        *why = "the region is in another PD";
    else if (!mr->valid)
        *why = "the region is already free";
    else if (mr->windows)
        *why = "memory windows are bound to the region";
    else if (remote && !mr->remoteInvalidate)
        *why = "the key does not allow remote invalidation (no en_rinval)";
    else
        return mr;
    return nullptr;
}

// A type 2 window of the PD, bound, and named by its current key, is
// unbound through the QP it is bound to (IBA 10.6.7.2.4); nothing else
// is. (Any QP of the PD could otherwise free a window another QP's peer
// was given.)
const char *MemoryKeys::invalidateWindow(uint32_t qpn, uint32_t pdn, uint32_t key,
                                         MemoryWindow &mw) {
    if (mw.key != key)
        return "no region or window has this key";
    if (mw.ctx.type != PIB_MW_TYPE_2)
        return "a type 1 window is not invalidated by a WQE";
    if (mw.ctx.pdn != pdn)
        return "the window is in another PD";
    if (!mw.ctx.bound)
        return "the window is already free";
    if (mw.ctx.qpn != qpn)
        return "the window is bound to another QP";
    unbind(mrs_, mw);
    return nullptr;
}

// Invalidates the region or window `key` names for PD `pdn`: null when
// done, else why not.
const char *MemoryKeys::invalidate(uint32_t qpn, uint32_t pdn, uint32_t key, bool remote) {
    if (MemoryWindow *mw = mws_.find(PIB_KEY_INDEX(key)))
        return invalidateWindow(qpn, pdn, key, *mw);
    const char *why = nullptr;
    MemoryRegion *mr = invalidatable(pdn, key, remote, &why);
    if (mr)
        mr->valid = false;
    return why;
}

uint8_t MemoryKeys::invalidateLocal(uint32_t qpn, uint32_t index, uint32_t pdn, uint32_t key) {
    if (const char *why = invalidate(qpn, pdn, key, false)) {
        host_.guestError(err::kWqeInvalidate, "QP %u WQE %u: LOCAL_INV of key 0x%x: %s", qpn, index,
                         key, why);
        return PIB_WC_LOC_PROT_ERR;
    }
    trace::mr_invalidated(host_, qpn, key, "local");
    return PIB_WC_SUCCESS;
}

const char *MemoryKeys::invalidateRemote(uint32_t qpn, uint32_t pdn, uint32_t rkey) {
    return invalidate(qpn, pdn, rkey, true);
}

void MemoryKeys::unbind(ObjectTable<MemoryRegion> &mrs, MemoryWindow &mw) {
    if (!mw.ctx.bound)
        return;
    if (MemoryRegion *mr = mrs.find(PIB_KEY_INDEX(mw.ctx.mr_key)); mr && mr->windows)
        --mr->windows;
    mw.ctx.bound = 0;
    mw.ctx.addr = mw.ctx.length = 0;
    mw.ctx.mr_key = mw.ctx.access = mw.ctx.qpn = 0;
}

// What keeps `bind` from binding `mw` to `mr` (IBA 10.6.7.2): null when
// nothing does. A type 1 bind of length 0 only unbinds: no region needed.
const char *MemoryKeys::checkBind(const MemoryWindow *mw, const MemoryRegion *mr, uint32_t pdn,
                                  const pib_wqe_bind_mw &bind) const {
    constexpr uint32_t kRemote =
        PIB_ACCESS_REMOTE_READ | PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_ATOMIC;
    if (!mw || mw->key != bind.mw_key)
        return "the key names no memory window";
    if (PIB_KEY_INDEX(bind.new_rkey) != PIB_KEY_INDEX(bind.mw_key))
        return "the new R_Key names another window";
    if (mw->ctx.pdn != pdn)
        return "the window is in another PD";
    if (mw->ctx.type == PIB_MW_TYPE_2 && mw->ctx.bound)
        return "a bound type 2 window must be invalidated before it is bound again";
    if (bind.access & ~kRemote)
        return "access a window cannot grant (remote read, write and atomic only)";
    if (mw->ctx.type == PIB_MW_TYPE_1 && bind.length == 0)
        return nullptr;
    if (!mr || mr->key != bind.mr_key || !mr->valid)
        return "the region's key is not valid";
    if (mr->indirect)
        return "an indirect key (one level of indirection: max_indirection 1)";
    if (mr->ctx.pdn != pdn)
        return "the region is in another PD";
    if (bindRightRequired_ && !(mr->ctx.access & PIB_ACCESS_MW_BIND))
        return "the region does not allow windows (no MW_BIND access)";
    if (bind.access & (PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_ATOMIC) &&
        !(mr->ctx.access & PIB_ACCESS_LOCAL_WRITE))
        return "remote write or atomic access to a region without local write";
    const pib_mr_context &c = mr->ctx;
    if (bind.addr < c.iova || bind.addr + bind.length < bind.addr ||
        bind.addr + bind.length - c.iova > c.length)
        return "the range is not within the region";
    return nullptr;
}

uint8_t MemoryKeys::bindWindow(uint32_t qpn, uint32_t index, uint32_t pdn,
                               const pib_wqe_bind_mw &bind) {
    MemoryWindow *mw = mws_.find(PIB_KEY_INDEX(bind.mw_key));
    MemoryRegion *mr = mrs_.find(PIB_KEY_INDEX(bind.mr_key));
    if (const char *why = checkBind(mw, mr, pdn, bind)) {
        host_.guestError(err::kWqeBindMw, "QP %u WQE %u: BIND_MW of key 0x%x: %s", qpn, index,
                         bind.mw_key, why);
        return PIB_WC_MW_BIND_ERR;
    }
    unbind(mrs_, *mw); // a type 1 window binds again in place
    mw->key = bind.new_rkey;
    mw->ctx.key_variant = static_cast<uint8_t>(bind.new_rkey);
    if (bind.length || mw->ctx.type == PIB_MW_TYPE_2) {
        ++mr->windows;
        mw->ctx.bound = 1;
        mw->ctx.addr = bind.addr;
        mw->ctx.length = bind.length;
        mw->ctx.mr_key = bind.mr_key;
        mw->ctx.access = bind.access;
        mw->ctx.qpn = mw->ctx.type == PIB_MW_TYPE_2 ? qpn : 0;
    }
    trace::mw_bound(host_, qpn, bind.new_rkey, bind.mr_key, bind.addr, bind.length, bind.access);
    return PIB_WC_SUCCESS;
}

} // namespace pib
