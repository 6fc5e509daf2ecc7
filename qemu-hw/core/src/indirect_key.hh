// SPDX-License-Identifier: GPL-2.0-or-later
// An indirect memory key (a ConnectX KLM key, docs/mlx5.md §4.6): a
// zero-based range stitched from pieces of other keys' ranges, as a
// UMR lays it out. A list (KLM) puts its entries one after the other; a
// repeat block repeats its entries `repeats` times, each entry's address
// moving by its stride from one block to the next (mlx5dv's interleaved
// layout). An access through the key is resolved through the entries'
// keys as they are at that moment: an entry whose key went or changed
// fails the access, as the hardware resolves each time it reads.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <vector>

namespace pib {

struct IndirectEntry {
    uint64_t addr = 0;   // its first byte (of the first block, in a repeat block)
    uint32_t key = 0;    // the direct key it is read and written through
    uint32_t bytes = 0;  // how many (in each block)
    uint32_t stride = 0; // repeat block: from its bytes in one block to the next's
    uint64_t offset = 0; // where it starts in the key (in a block)
};

struct IndirectLayout {
    uint32_t tableEntries = 0; // the most a UMR may load (CREATE_MKEY's table)
    uint32_t repeats = 0;      // 0: a list; else how many blocks
    std::vector<IndirectEntry> entries;

    // Why the entries make no layout (none; one of 0 bytes or of 2 GiB or
    // more; offsets that are not each the bytes before it; a repeat
    // block's stride shorter than its bytes; a range that wraps), or null.
    // Every layout a key takes is checked so.
    const char *invalid() const;
    // The bytes the entries cover (of all the blocks).
    uint64_t length() const;
    // A piece of the key's range: `len` bytes at `addr` of `entry`'s key.
    using Piece = std::function<bool(const IndirectEntry &entry, uint64_t addr, uint64_t len)>;
    // Hands `piece` the pieces that hold bytes [offset, offset + len) of
    // the key, in order; false when `piece` refused one, or the range
    // goes beyond the entries. Work is one call per piece: callers ask
    // for a packet's bytes at most (see hulls).
    bool forEachPiece(uint64_t offset, uint64_t len, const Piece &piece) const;
    // For a range of any length: per entry, the one span of its key from
    // the first byte the range reaches through it to the last, whatever
    // lies between (an entry's key covers one span, so the range is
    // reachable when every span is). One call per entry at most.
    bool forEachHull(uint64_t offset, uint64_t len, const Piece &hull) const;

  private:
    uint64_t blockBytes() const;
    size_t entryAt(uint64_t within) const;
};

// The device's translation memory an indirect key holds while it lives:
// its table's 16-byte entries count as two 8-byte translation entries.
inline uint64_t indirectCharge(const IndirectLayout &layout) {
    return uint64_t{layout.tableEntries} * 2;
}

// What a UMR of an indirect key sets (MLX5_MKEY_MASK_* and the key
// segment; docs/mlx5.md §10.4): the fields it names, the others as they
// were, all or nothing.
struct IndirectUpdate {
    enum class Before : uint8_t { kAnything, kFree };
    Before before = Before::kAnything;
    bool invalidation = false; // a LOCAL_INV: sets free, and nothing else
    bool setsLength = false, setsStart = false, setsVariant = false, setsFree = false;
    bool setsRemoteInvalidate = false;
    uint32_t accessMask = 0; // the PIB_ACCESS_* rights it sets
    uint64_t start = 0, length = 0;
    uint32_t access = 0;
    uint8_t variant = 0;
    bool free = false, remoteInvalidate = false;
    uint32_t octowords = 0; // of the table the WQE loads (padding included)
    std::optional<IndirectLayout> layout;
};

} // namespace pib
