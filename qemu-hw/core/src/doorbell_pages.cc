// SPDX-License-Identifier: GPL-2.0-or-later
#include "doorbell_pages.hh"

#include <cinttypes>

#include "pib_hw.h"

namespace pib {

uint64_t DoorbellPages::size() const {
    return uint64_t{pages_} * PIB_PAGE_SIZE;
}

uint64_t DoorbellPages::read(uint64_t offset, unsigned size) {
    // Doorbells are write-only; reading one is harmless and returns 0.
    if (offset >= this->size())
        host_.guestError("doorbell-out-of-range", "read of %u bytes at 0x%" PRIx64 " beyond BAR2",
                         size, offset);
    return 0;
}

void DoorbellPages::write(uint64_t offset, uint64_t value, unsigned size) {
    if (offset >= this->size()) {
        host_.guestError("doorbell-out-of-range", "write of %u bytes at 0x%" PRIx64 " beyond BAR2",
                         size, offset);
        return;
    }
    // No user context can own a page yet, so every doorbell is unallocated.
    host_.guestError("doorbell-unallocated",
                     "write of 0x%" PRIx64 " (%u bytes) to page %" PRIu64 " offset 0x%" PRIx64
                     ", which no context owns",
                     value, size, offset / PIB_PAGE_SIZE, offset % PIB_PAGE_SIZE);
}

} // namespace pib
