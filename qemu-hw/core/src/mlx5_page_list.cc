// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_page_list.hh"

#include <algorithm>

#include "mlx5_ifc.hh"

namespace pib::mlx5 {

bool PageList::read(std::span<const uint8_t> in, uint32_t at, uint64_t count) {
    if (in.size() < at || (in.size() - at) / 8 < count)
        return false;
    pages.clear();
    for (uint64_t i = 0; i < count; ++i)
        pages.push_back(readBe64(in.data() + at + 8 * i));
    return true;
}

// Each page is probed at both ends of the part the ring uses: a page of
// MMIO (one of the device's own BARs included) or beyond RAM fails.
std::optional<size_t> PageList::firstBad(const Host &host, uint64_t used) const {
    const uint64_t pageBytes = uint64_t{1} << shift;
    used = std::min(used, pageBytes);
    uint8_t probe[8];
    for (size_t i = 0; i < pages.size(); ++i) {
        const uint64_t page = pages[i];
        if (page % pageBytes || !host.dmaRead(page, probe, sizeof(probe)) ||
            !host.dmaRead(page + used - sizeof(probe), probe, sizeof(probe)))
            return i;
    }
    return std::nullopt;
}

} // namespace pib::mlx5
