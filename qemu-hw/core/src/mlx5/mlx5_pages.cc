// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_pages.hh"

#include <algorithm>
#include <array>
#include <cinttypes>

namespace pib::mlx5 {

uint32_t FunctionPages::wanted(Stage stage) const {
    const uint32_t total = stage == Stage::kBoot ? kBootPages : kBootPages + kInitPages;
    return total > pages_.size() ? total - static_cast<uint32_t>(pages_.size()) : 0;
}

const err::Condition *FunctionPages::give(std::span<const uint64_t> pages) {
    if (pages.size() > wanted(Stage::kRegular)) {
        host_.guestError(err::kMlx5PagesBad, "%zu pages given, %u wanted (docs/mlx5.md §5)",
                         pages.size(), wanted(Stage::kRegular));
        return &err::kMlx5PagesBad;
    }
    std::array<uint8_t, 8> probe;
    for (size_t i = 0; i < pages.size(); ++i) {
        const uint64_t page = pages[i];
        const bool twice = std::find(pages_.begin(), pages_.end(), page) != pages_.end() ||
                           std::find(pages.begin(), pages.begin() + i, page) != pages.begin() + i;
        // The page must be guest RAM the device reaches, at both ends.
        const bool reachable = page % kPageBytes == 0 &&
                               host_.dmaRead(page, probe.data(), probe.size()) &&
                               host_.dmaRead(page + kPageBytes - 8, probe.data(), probe.size());
        if (twice || !reachable) {
            host_.guestError(err::kMlx5PagesBad, "page %zu at 0x%" PRIx64 ": %s", i, page,
                             twice ? "given twice" : "not 4 KiB-aligned guest RAM");
            return &err::kMlx5PagesBad;
        }
    }
    pages_.insert(pages_.end(), pages.begin(), pages.end());
    return nullptr;
}

std::vector<uint64_t> FunctionPages::take(uint32_t count) {
    const size_t n = std::min<size_t>(count, pages_.size());
    std::vector<uint64_t> back(pages_.end() - static_cast<ptrdiff_t>(n), pages_.end());
    pages_.resize(pages_.size() - n);
    return back;
}

} // namespace pib::mlx5
