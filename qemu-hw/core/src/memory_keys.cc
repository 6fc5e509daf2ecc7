// SPDX-License-Identifier: GPL-2.0-or-later
#include "memory_keys.hh"

#include <cinttypes>

#include "limits.hh"
#include "trace.hh"

namespace pib {

// What keeps `reg` from mapping `mr` (rxe's rxe_reg_fast_mr checks the
// same): null when nothing does.
const char *MemoryKeys::checkRegistration(const MemoryRegion *mr, uint32_t pdn,
                                          const pib_wqe_reg_mr &reg) const {
    if (!mr || !mr->fastReg())
        return "the key names no fast-registration region";
    if (mr->ctx.pdn != pdn)
        return "the region is in another PD";
    if (mr->valid)
        return "the region is valid: it must be invalidated first";
    if (reg.access & ~PIB_ACCESS_ALL ||
        (reg.access & (PIB_ACCESS_REMOTE_WRITE | PIB_ACCESS_REMOTE_ATOMIC) &&
         !(reg.access & PIB_ACCESS_LOCAL_WRITE)))
        return "access flags IBA does not allow";
    const unsigned shift = reg.log_page_size;
    if (shift < limits::kMinLogPageSize || shift > limits::kMaxLogPageSize)
        return "a page size outside 2^12..2^30";
    if (reg.length == 0 || reg.length > limits::kMaxMrSize || reg.iova + reg.length < reg.iova)
        return "a length of 0, beyond max_mr_size or wrapping";
    const uint64_t pages = ((reg.iova + reg.length - 1) >> shift) - (reg.iova >> shift) + 1;
    if (reg.page_count != pages || pages > mr->ctx.mtt_count)
        return "page_count is not the pages the range spans, or more than the region reserved";
    if (reg.page_list % 8)
        return "a page list not 8-byte aligned";
    return nullptr;
}

// Reads the page list into pages_ and checks every entry is a page.
bool MemoryKeys::readPageList(const pib_wqe_reg_mr &reg, const char **why) {
    pages_.resize(reg.page_count); // at most kMaxFastRegPages: checkRegistration
    if (!host_.dmaRead(reg.page_list, pages_.data(), pages_.size() * sizeof(uint64_t))) {
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

uint8_t MemoryKeys::fastRegister(uint32_t qpn, uint32_t index, uint32_t pdn,
                                 const pib_wqe_reg_mr &reg) {
    MemoryRegion *mr = mrs_.find(PIB_KEY_INDEX(reg.key));
    const char *why = checkRegistration(mr, pdn, reg);
    if (!why && readPageList(reg, &why)) {
        for (uint32_t i = 0; i < reg.page_count; ++i)
            mtt_.write(mr->ctx.mtt_index + i, pages_[i]);
        mr->ctx.iova = reg.iova;
        mr->ctx.length = reg.length;
        mr->ctx.access = reg.access;
        mr->ctx.log_page_size = reg.log_page_size;
        mr->ctx.key_variant = static_cast<uint8_t>(reg.key);
        mr->key = reg.key;
        mr->valid = true;
        trace::mr_registered(host_, qpn, reg.key, reg.iova, reg.length, reg.access);
        return PIB_WC_SUCCESS;
    }
    host_.guestError(err::kWqeFastReg, "QP %u WQE %u: REG_MR of key 0x%x: %s", qpn, index, reg.key,
                     why);
    return PIB_WC_LOC_PROT_ERR;
}

// The region `key` names if PD `pdn` may invalidate it: a valid
// fast-registration region of that PD, named by its current key.
MemoryRegion *MemoryKeys::invalidatable(uint32_t pdn, uint32_t key, const char **why) const {
    MemoryRegion *mr = mrs_.find(PIB_KEY_INDEX(key));
    if (!mr || mr->key != key)
        *why = "no region has this key";
    else if (!mr->fastReg())
        *why = "the region is not a fast-registration region";
    else if (mr->ctx.pdn != pdn)
        *why = "the region is in another PD";
    else if (!mr->valid)
        *why = "the region is already free";
    else
        return mr;
    return nullptr;
}

uint8_t MemoryKeys::invalidateLocal(uint32_t qpn, uint32_t index, uint32_t pdn, uint32_t key) {
    const char *why = nullptr;
    MemoryRegion *mr = invalidatable(pdn, key, &why);
    if (!mr) {
        host_.guestError(err::kWqeInvalidate, "QP %u WQE %u: LOCAL_INV of key 0x%x: %s", qpn, index,
                         key, why);
        return PIB_WC_LOC_PROT_ERR;
    }
    mr->valid = false;
    trace::mr_invalidated(host_, qpn, key, "local");
    return PIB_WC_SUCCESS;
}

const char *MemoryKeys::invalidateRemote(uint32_t pdn, uint32_t rkey) {
    const char *why = nullptr;
    MemoryRegion *mr = invalidatable(pdn, rkey, &why);
    if (mr)
        mr->valid = false;
    return why;
}

} // namespace pib
