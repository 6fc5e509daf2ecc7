// SPDX-License-Identifier: GPL-2.0-or-later
#include "indirect_key.hh"

#include <algorithm>
#include <limits>

namespace pib {

namespace indirect_layout {
constexpr uint32_t kMaxEntryBytes = 0x7fffffff; // "up to 2GB" (mlx5dv.h)
constexpr uint64_t kMaxAddress = std::numeric_limits<uint64_t>::max();
} // namespace indirect_layout

using indirect_layout::kMaxAddress;
using indirect_layout::kMaxEntryBytes;

const char *IndirectLayout::invalid() const {
    if (entries.empty())
        return "a layout of no entries";
    uint64_t offset = 0;
    for (const IndirectEntry &e : entries) {
        if (e.bytes == 0 || e.bytes > kMaxEntryBytes)
            return "an entry of 0 bytes, or of 2 GiB or more";
        if (e.offset != offset)
            return "an entry's offset is not the bytes before it";
        if (repeats && e.stride < e.bytes)
            return "a repeat block entry whose stride is shorter than its bytes";
        const uint64_t reach = (repeats ? uint64_t{repeats - 1} * e.stride : 0) + e.bytes;
        if (e.addr > kMaxAddress - reach)
            return "an entry whose range wraps";
        offset += e.bytes;
    }
    if (repeats && offset > kMaxAddress / repeats)
        return "a layout of 2^64 bytes or more";
    return nullptr;
}

// Only a valid layout (invalid()) is ever used: entries of a byte or
// more, in order of offset.
uint64_t IndirectLayout::blockBytes() const {
    return entries.empty() ? 0 : entries.back().offset + entries.back().bytes;
}

uint64_t IndirectLayout::length() const {
    return repeats ? blockBytes() * repeats : blockBytes();
}

// The entry that holds byte `within` of the list or block.
size_t IndirectLayout::entryAt(uint64_t within) const {
    const auto after =
        std::upper_bound(entries.begin(), entries.end(), within,
                         [](uint64_t at, const IndirectEntry &e) { return at < e.offset; });
    return static_cast<size_t>(after - entries.begin()) - 1;
}

bool IndirectLayout::forEachPiece(uint64_t offset, uint64_t len, const Piece &piece) const {
    const uint64_t total = length();
    if (offset > total || len > total - offset)
        return false;
    if (len == 0)
        return true;
    const uint64_t block = blockBytes();
    uint64_t r = repeats ? offset / block : 0;
    uint64_t within = repeats ? offset % block : offset;
    size_t i = entryAt(within);
    while (len) {
        const IndirectEntry &e = entries[i];
        const uint64_t skip = within - e.offset;
        const uint64_t n = std::min<uint64_t>(len, e.bytes - skip);
        if (!piece(e, e.addr + r * e.stride + skip, n))
            return false;
        len -= n;
        within += n;
        if (++i == entries.size()) { // the next block (only a repeat block has one)
            i = 0;
            within = 0;
            ++r;
        }
    }
    return true;
}

bool IndirectLayout::forEachHull(uint64_t offset, uint64_t len, const Piece &hull) const {
    if (!repeats || len == 0) // a list: one piece per entry at most
        return forEachPiece(offset, len, hull);
    const uint64_t total = length();
    if (offset > total || len > total - offset)
        return false;
    const uint64_t block = blockBytes();
    const uint64_t firstBlock = offset / block, firstAt = offset % block;
    const uint64_t lastBlock = (offset + len - 1) / block, lastAt = (offset + len - 1) % block;
    for (const IndirectEntry &e : entries) {
        const uint64_t end = e.offset + e.bytes; // within a block
        // The first block the range reaches the entry in, and the byte
        // of it; the same for the last (inclusive).
        const uint64_t fromBlock = firstAt < end ? firstBlock : firstBlock + 1;
        const uint64_t from = fromBlock == firstBlock ? std::max(firstAt, e.offset) - e.offset : 0;
        if (lastAt < e.offset && lastBlock == 0)
            continue;
        const uint64_t toBlock = lastAt >= e.offset ? lastBlock : lastBlock - 1;
        const uint64_t to =
            toBlock == lastBlock ? std::min(lastAt, end - 1) - e.offset : e.bytes - 1;
        if (toBlock < fromBlock || (toBlock == fromBlock && to < from))
            continue;
        // A stride is never shorter than the entry: the span grows with
        // the block.
        const uint64_t first = e.addr + fromBlock * e.stride + from;
        const uint64_t last = e.addr + toBlock * e.stride + to;
        if (!hull(e, first, last - first + 1))
            return false;
    }
    return true;
}

} // namespace pib
