// SPDX-License-Identifier: GPL-2.0-or-later
// The memory translation table: guest page addresses that memory regions
// and queue rings are built from (docs/prm.md, "Memory translation").
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <vector>

namespace pib {

class StateReader;
class StateWriter;

class Mtt {
  public:
    Mtt(uint32_t capacity, uint64_t keyCapacity) : capacity_(capacity), keyCapacity_(keyCapacity) {}

    // Reserves `count` contiguous entries (first fit); nullopt when no room.
    std::optional<uint32_t> allocate(uint32_t count);
    // Releases the range starting at `first`; false if none starts there.
    bool release(uint32_t first);
    // True if [first, first + count) lies inside one allocated range.
    bool covers(uint32_t first, uint64_t count) const;
    // References keep a range from being released while an object uses it.
    // An object that reads its entries as pages of 2^logPageSize bytes
    // holds the range with that size: later writes must stay aligned to it.
    static constexpr unsigned kMinLogPage = 12;
    // A holder that `writes` the entries itself (a fast-registration MR)
    // keeps the guest's WRITE_MTT out of the range; one that reads them
    // `paged` (an on-demand region, PIB_MR_ON_DEMAND) lets it write
    // entries with present bits, or absent ones.
    void hold(uint32_t first, unsigned logPageSize = kMinLogPage, bool writes = false,
              bool paged = false);
    void unhold(uint32_t first, unsigned logPageSize = kMinLogPage, bool writes = false,
                bool paged = false);
    bool held(uint32_t first) const;
    bool deviceWrites(uint32_t index) const;
    bool paged(uint32_t index) const;
    // The largest page size (log2) any holder of index's range reads it with.
    unsigned logPageSizeAt(uint32_t index) const;

    // Entries a key keeps with itself rather than in the table (a ConnectX
    // key's translations, which the hardware holds in its ICM): a budget
    // of keyCapacity, so that a guest mapping every key it may make still
    // has the device hold at most that many.
    bool takeKeyEntries(uint64_t count);
    void returnKeyEntries(uint64_t count);

    void write(uint32_t index, uint64_t address);
    uint64_t entry(uint32_t index) const { return index < entries_.size() ? entries_[index] : 0; }
    void clear();
    // The ranges and their entries, for a saved state (docs/migration.md).
    // Holds are not saved: each object that holds a range takes its hold
    // again as it is loaded, so no count can disagree with its holders.
    void save(StateWriter &w) const;
    // Replaces the table with a saved one, unheld; a stream whose ranges
    // overlap, leave the table or hold entries that are not page
    // addresses is refused (*r fails) and leaves the table empty. An
    // entry may carry present bits: an on-demand region's, or one that
    // region left in its range when it was destroyed.
    void load(StateReader &r);
    // No range allocated, no entry kept by a key.
    bool empty() const { return ranges_.empty() && keyEntries_ == 0; }

  private:
    struct Range {
        uint32_t count;
        uint32_t refs = 0;
        uint32_t deviceWriters = 0;
        uint32_t pagedReaders = 0;
        // The page sizes (log2) of holders with pages above the minimum:
        // empty for rings and most MRs, so a range stays small.
        std::vector<uint8_t> largePages;
    };
    // The allocated range containing index, if any.
    const std::pair<const uint32_t, Range> *rangeOf(uint32_t index) const;

    uint32_t capacity_;
    uint64_t keyCapacity_;
    std::map<uint32_t, Range> ranges_; // first index -> range
    std::vector<uint64_t> entries_;
    uint64_t keyEntries_ = 0;
};

} // namespace pib
