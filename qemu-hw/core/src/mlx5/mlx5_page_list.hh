// SPDX-License-Identifier: GPL-2.0-or-later
// A queue's ring as a ConnectX command gives it (docs/mlx5.md §7, §8): a
// page list (PAS) of big-endian guest addresses of 2^shift-byte pages,
// which the device checks before it writes a byte there.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "conditions.hh"
#include "host.hh"
#include "mtt.hh"
#include "pib_hw.h"

namespace pib::mlx5 {

struct PageList {
    // A context's log_page_size counts from 4 KiB; pages up to 1 GiB are
    // what a driver's buffers may be made of.
    static constexpr uint32_t kAdapterPageShift = 12;
    static constexpr uint32_t kMaxLogPageSize = 18;

    uint32_t shift = 0;          // log2 of the page size
    uint64_t offset = 0;         // where in the first page the ring starts
    std::vector<uint64_t> pages; // guest addresses

    // A context's page_offset counts 64ths of its page: mlx5_ib quantizes
    // where a user buffer starts in the largest page it finds the buffer
    // in. CQs, SRQs and EQs start on a 4 KiB boundary, as libmlx5 and the
    // kernel place them; a QP's ring may start at any multiple of 64 bytes
    // (of its RQ stride), where a parent domain's allocator puts it.
    // Callers check logPageSize against kMaxLogPageSize first.
    static uint64_t startOf(uint64_t logPageSize, uint64_t pageOffset) {
        return pageOffset << (kAdapterPageShift + logPageSize) >> 6;
    }
    static bool startsOn(uint64_t logPageSize, uint64_t pageOffset, uint64_t align) {
        return startOf(logPageSize, pageOffset) % align == 0;
    }
    static bool startsOnAdapterPage(uint64_t logPageSize, uint64_t pageOffset) {
        return startsOn(logPageSize, pageOffset, uint64_t{1} << kAdapterPageShift);
    }

    // Pages of 2^shift bytes a ring of `bytes` takes (one at least), from
    // the start of the first: a QP's RQ and SQ together (2 KiB and 64 KiB,
    // say) end within a page, which the list has too.
    static uint64_t countFor(uint64_t bytes, uint32_t shift) {
        const uint64_t count = (bytes + (uint64_t{1} << shift) - 1) >> shift;
        return count ? count : 1;
    }
    // The `count` entries at byte `at` of `in`; false when `in` is short.
    bool read(std::span<const uint8_t> in, uint32_t at, uint64_t count);
    // The list at byte `at` of `command`'s input `in`, for a ring of
    // `bytes`, read and checked: nullptr, or the condition refusing it
    // (short input, or `badPages`), reported as the guest's error.
    const err::Condition *load(const Host &host, std::span<const uint8_t> in, uint32_t at,
                               uint64_t bytes, const char *command, const err::Condition &badPages);
    // Where a ring is, as a context gives it: log_page_size, page_offset
    // (startsOnAdapterPage), and how long it is.
    struct Placement {
        uint64_t logPageSize;
        uint64_t pageOffset;
        uint64_t bytes;
    };
    // A CQ's, SRQ's or QP's ring: the list of 2^(12 + logPageSize)-byte
    // pages at byte `at` of `command`'s input, loaded as above, then mapped
    // in the MTT into *out, and where in its first entry the ring starts
    // into *start (0 for a ring on a 4 KiB boundary); nullptr, or the
    // condition refusing it (a full MTT: NO_RES).
    static const err::Condition *loadAndMap(const Host &host, Mtt &mtt, std::span<const uint8_t> in,
                                            uint32_t at, const Placement &ring, const char *command,
                                            const err::Condition &badPages, pib_buf_desc *out,
                                            uint32_t *start = nullptr);
    // Where the ring starts in its first 4 KiB granule.
    uint64_t lead() const { return offset & ((uint64_t{1} << kAdapterPageShift) - 1); }
    // The 4 KiB granules the ring's first `bytes` take, from the one it
    // starts in, in newly allocated MTT entries, as the core's rings are
    // read (ring.hh, at lead() into the first); nullopt when the MTT is full.
    std::optional<pib_buf_desc> map(Mtt &mtt, uint64_t bytes) const;
    // A command's input that gives the ring `buf` maps in the MTT again,
    // for a saved state: `at` bytes for its fields, then the list of its
    // 4 KiB pages, as log_page_size 0 places them (page_offset, in 64-byte
    // units then, is the ring's start in the first: the caller's field).
    static std::vector<uint8_t> inputFor(const Mtt &mtt, const pib_buf_desc &buf, uint32_t at);
    // The first page that is not guest RAM aligned to its size across the
    // part of it the ring's `bytes` take; nullopt when every one is.
    std::optional<size_t> firstBad(const Host &host, uint64_t bytes) const;
    // The guest address of byte `at` of the ring.
    uint64_t address(uint64_t at) const { return fromFirstPage(at + offset); }

  private:
    // The guest address of byte `at` counted from the first page's start.
    uint64_t fromFirstPage(uint64_t at) const {
        return pages[at >> shift] + (at & ((uint64_t{1} << shift) - 1));
    }
};

// A doorbell record the device reads (a CQ's consumer counter, an SRQ's
// or QP's WQE counter): 8-byte aligned guest RAM.
inline bool isDoorbellRecord(const Host &host, uint64_t address) {
    uint64_t record = 0;
    return address % 8 == 0 && host.dmaRead(address, record);
}

} // namespace pib::mlx5
