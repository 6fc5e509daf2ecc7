// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_page_list.hh"

#include <algorithm>
#include <cinttypes>

#include "mlx5_ifc.hh"

namespace pib::mlx5 {

std::vector<uint8_t> PageList::inputFor(const Mtt &mtt, const pib_buf_desc &buf, uint32_t at) {
    std::vector<uint8_t> in(at + size_t{8} * buf.npages);
    for (uint32_t i = 0; i < buf.npages; ++i)
        writeBe64(in.data() + at + 8 * i, mtt.entry(buf.mtt_index + i));
    return in;
}

bool PageList::read(std::span<const uint8_t> in, uint32_t at, uint64_t count) {
    if (in.size() < at || (in.size() - at) / 8 < count)
        return false;
    pages.clear();
    for (uint64_t i = 0; i < count; ++i)
        pages.push_back(readBe64(in.data() + at + 8 * i));
    return true;
}

const err::Condition *PageList::load(const Host &host, std::span<const uint8_t> in, uint32_t at,
                                     uint64_t bytes, const char *command,
                                     const err::Condition &badPages) {
    const uint64_t count = countFor(offset + bytes, shift);
    if (!read(in, at, count)) {
        host.guestError(err::kMlx5CmdShortInput,
                        "%s: %zu bytes of input, %" PRIu64 " pages need %" PRIu64, command,
                        in.size(), count, at + 8 * count);
        return &err::kMlx5CmdShortInput;
    }
    if (const auto bad = firstBad(host, bytes)) {
        host.guestError(badPages,
                        "%s: page %zu at 0x%" PRIx64 " is not %" PRIu64 "-byte aligned guest RAM",
                        command, *bad, pages[*bad], uint64_t{1} << shift);
        return &badPages;
    }
    return nullptr;
}

const err::Condition *PageList::loadAndMap(const Host &host, Mtt &mtt, std::span<const uint8_t> in,
                                           uint32_t at, const Placement &placed,
                                           const char *command, const err::Condition &badPages,
                                           pib_buf_desc *out, uint32_t *start) {
    PageList ring;
    ring.shift = kAdapterPageShift + static_cast<uint32_t>(placed.logPageSize);
    ring.offset = startOf(placed.logPageSize, placed.pageOffset);
    if (const err::Condition *why = ring.load(host, in, at, placed.bytes, command, badPages))
        return why;
    const auto mapped = ring.map(mtt, placed.bytes);
    if (!mapped) {
        host.guestError(err::kMlx5CmdNoResources, "%s: the MTT is full", command);
        return &err::kMlx5CmdNoResources;
    }
    *out = *mapped;
    if (start)
        *start = static_cast<uint32_t>(ring.lead());
    return nullptr;
}

std::optional<pib_buf_desc> PageList::map(Mtt &mtt, uint64_t bytes) const {
    constexpr uint32_t kEntryShift = 12;
    const auto entries = static_cast<uint32_t>(countFor(lead() + bytes, kEntryShift));
    const auto first = mtt.allocate(entries);
    if (!first)
        return std::nullopt;
    const uint64_t granule = offset - lead(); // from the first page's start
    for (uint32_t i = 0; i < entries; ++i)
        mtt.write(*first + i, fromFirstPage(granule + (uint64_t{i} << kEntryShift)));
    return pib_buf_desc{*first, entries};
}

// Each page is probed at both ends of the part the ring uses: a page of
// MMIO (one of the device's own BARs included) or beyond RAM fails.
std::optional<size_t> PageList::firstBad(const Host &host, uint64_t bytes) const {
    const uint64_t pageBytes = uint64_t{1} << shift;
    const uint64_t end = offset + bytes; // from the start of the first page
    uint8_t probe[8];
    for (size_t i = 0; i < pages.size(); ++i) {
        const uint64_t page = pages[i];
        const uint64_t first = i == 0 ? offset : 0;
        const uint64_t last = std::min(pageBytes, end - i * pageBytes) - sizeof(probe);
        if (page % pageBytes || !host.dmaRead(page + first, probe, sizeof(probe)) ||
            !host.dmaRead(page + last, probe, sizeof(probe)))
            return i;
    }
    return std::nullopt;
}

} // namespace pib::mlx5
