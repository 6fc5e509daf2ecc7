// SPDX-License-Identifier: GPL-2.0-or-later
// A queue ring in guest memory, made of 4 KiB pages listed in the MTT.
#pragma once

#include <cstdint>
#include <cstring>
#include <optional>
#include <span>
#include <vector>

#include "mtt.hh"
#include "pib_hw.h"

namespace pib {

// Guest address of bytes [offset, offset + len) of the ring, which must not
// cross a page; nullopt if they lie outside it or its MTT entry is unset.
inline std::optional<uint64_t> ringAddress(const Mtt &mtt, const pib_buf_desc &buf, uint64_t offset,
                                           uint32_t len) {
    const uint64_t page = offset / PIB_PAGE_SIZE;
    const uint64_t within = offset % PIB_PAGE_SIZE;
    if (page >= buf.npages || within + len > PIB_PAGE_SIZE)
        return std::nullopt;
    const uint64_t base = mtt.entry(static_cast<uint32_t>(buf.mtt_index + page));
    if (base == 0)
        return std::nullopt;
    return base + within;
}

// Pages a ring of 2^log_count elements of 2^log_stride bytes needs.
inline uint64_t ringPages(unsigned log_count, unsigned log_stride) {
    const uint64_t bytes = uint64_t{1} << (log_count + log_stride);
    return (bytes + PIB_PAGE_SIZE - 1) / PIB_PAGE_SIZE;
}

// The data segments in `bytes` of a WQE (a whole number of them; any
// tail is ignored), copied out of the WQE.
inline void readDataSegments(std::span<const uint8_t> bytes, std::vector<pib_wqe_data> &out) {
    out.resize(bytes.size() / sizeof(pib_wqe_data));
    if (!out.empty()) // never memcpy to the null data() of an empty vector
        std::memcpy(out.data(), bytes.data(), out.size() * sizeof(pib_wqe_data));
}

} // namespace pib
