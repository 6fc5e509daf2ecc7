// SPDX-License-Identifier: GPL-2.0-or-later
#include "doorbell_pages.hh"
#include "trace.hh"

#include <cinttypes>

#include "pib_hw.h"

namespace pib {

uint64_t DoorbellPages::size() const {
    return uint64_t{pages_} * PIB_PAGE_SIZE;
}

uint64_t DoorbellPages::read(uint64_t offset, unsigned size) {
    // Doorbells are write-only; reading one is harmless and returns 0.
    if (offset >= this->size())
        host_.guestError(err::kDoorbellOutOfRange, "read of %u bytes at 0x%" PRIx64 " beyond BAR2",
                         size, offset);
    return 0;
}

void DoorbellPages::write(uint64_t offset, uint64_t value, unsigned size) {
    if (offset >= this->size()) {
        host_.guestError(err::kDoorbellOutOfRange, "write of %u bytes at 0x%" PRIx64 " beyond BAR2",
                         size, offset);
        return;
    }
    // A doorbell names its queue and its new index in one atomic write.
    if (size != 8 || offset % 8) {
        host_.guestError(err::kDoorbellBadSize,
                         "write of %u bytes at 0x%" PRIx64 " (doorbells are aligned 64-bit writes)",
                         size, offset);
        return;
    }
    dataPath_.doorbell(static_cast<uint32_t>(offset / PIB_PAGE_SIZE),
                       static_cast<uint32_t>(offset % PIB_PAGE_SIZE), value);
}

} // namespace pib
