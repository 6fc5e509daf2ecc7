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
    if (offset >= this->size()) {
        host_.guestError(err::kDoorbellOutOfRange, "read of %u bytes at 0x%" PRIx64 " beyond BAR2",
                         size, offset);
        return 0;
    }
    // Every page shows the core clock, so user space reads it without a
    // system call; the doorbells themselves are write-only and read as 0.
    const uint64_t inPage = offset % PIB_PAGE_SIZE;
    if (inPage == PIB_DB_CLOCK && size == 8)
        return host_.clockNs();
    if (inPage == PIB_DB_CLOCK && size == 4)
        return static_cast<uint32_t>(host_.clockNs());
    if (inPage == PIB_DB_CLOCK + 4 && size == 4)
        return static_cast<uint32_t>(host_.clockNs() >> 32);
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
