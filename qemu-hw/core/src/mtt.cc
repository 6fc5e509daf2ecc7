// SPDX-License-Identifier: GPL-2.0-or-later
#include "mtt.hh"

#include <algorithm>

#include "pib_hw.h"
#include "state_archive.hh"

namespace pib {

// An on-demand region's entries carry them (PIB_MTT_READ, PIB_MTT_WRITE).
constexpr uint64_t kPresentBits = PIB_MTT_READ | PIB_MTT_WRITE;

std::optional<uint32_t> Mtt::allocate(uint32_t count) {
    if (count == 0 || count > capacity_)
        return std::nullopt;
    uint32_t candidate = 0;
    for (const auto &[first, range] : ranges_) {
        if (first - candidate >= count)
            break;
        candidate = first + range.count;
    }
    if (capacity_ - candidate < count)
        return std::nullopt;
    ranges_[candidate] = Range{count, 0, 0, 0, {}};
    if (entries_.size() < uint64_t{candidate} + count)
        entries_.resize(uint64_t{candidate} + count, 0);
    return candidate;
}

bool Mtt::release(uint32_t first) {
    auto it = ranges_.find(first);
    if (it == ranges_.end() || it->second.refs)
        return false;
    for (uint32_t i = 0; i < it->second.count; ++i)
        entries_[first + i] = 0;
    ranges_.erase(it);
    return true;
}

const std::pair<const uint32_t, Mtt::Range> *Mtt::rangeOf(uint32_t index) const {
    auto it = ranges_.upper_bound(index);
    if (it == ranges_.begin())
        return nullptr;
    --it;
    if (index - it->first >= it->second.count)
        return nullptr;
    return &*it;
}

bool Mtt::covers(uint32_t first, uint64_t count) const {
    const auto *range = rangeOf(first);
    return range && count > 0 && first - range->first + count <= range->second.count;
}

void Mtt::hold(uint32_t first, unsigned logPageSize, bool writes, bool paged) {
    if (auto *range = rangeOf(first)) {
        Range &r = ranges_.at(range->first);
        ++r.refs;
        r.deviceWriters += writes;
        r.pagedReaders += paged;
        if (logPageSize > kMinLogPage)
            r.largePages.push_back(static_cast<uint8_t>(logPageSize));
    }
}

void Mtt::unhold(uint32_t first, unsigned logPageSize, bool writes, bool paged) {
    if (auto *range = rangeOf(first); range && range->second.refs) {
        Range &r = ranges_.at(range->first);
        --r.refs;
        if (writes && r.deviceWriters)
            --r.deviceWriters;
        if (paged && r.pagedReaders)
            --r.pagedReaders;
        auto it = std::find(r.largePages.begin(), r.largePages.end(), logPageSize);
        if (it != r.largePages.end())
            r.largePages.erase(it);
    }
}

unsigned Mtt::logPageSizeAt(uint32_t index) const {
    const auto *range = rangeOf(index);
    if (!range || range->second.largePages.empty())
        return kMinLogPage;
    const auto &large = range->second.largePages;
    return *std::max_element(large.begin(), large.end());
}

bool Mtt::deviceWrites(uint32_t index) const {
    const auto *range = rangeOf(index);
    return range && range->second.deviceWriters > 0;
}

bool Mtt::paged(uint32_t index) const {
    const auto *range = rangeOf(index);
    return range && range->second.pagedReaders > 0;
}

bool Mtt::held(uint32_t first) const {
    auto it = ranges_.find(first);
    return it != ranges_.end() && it->second.refs > 0;
}

bool Mtt::takeKeyEntries(uint64_t count) {
    if (count > keyCapacity_ - keyEntries_)
        return false;
    keyEntries_ += count;
    return true;
}

void Mtt::returnKeyEntries(uint64_t count) {
    keyEntries_ -= std::min(count, keyEntries_);
}

void Mtt::write(uint32_t index, uint64_t address) {
    if (index < entries_.size())
        entries_[index] = address;
}

void Mtt::clear() {
    ranges_.clear();
    entries_.clear();
    keyEntries_ = 0;
}

void Mtt::save(StateWriter &w) const {
    w.beginSection(stateTag("MTT "));
    w.u32(static_cast<uint32_t>(ranges_.size()));
    for (const auto &[first, range] : ranges_) {
        w.u32(first);
        w.u32(range.count);
        for (uint32_t i = 0; i < range.count; ++i)
            w.u64(entries_[first + i]);
    }
    w.endSection();
}

void Mtt::load(StateReader &r) {
    clear();
    r.enterSection(stateTag("MTT "), "the MTT");
    const uint32_t ranges = r.count(capacity_, 8, "MTT ranges");
    uint32_t end = 0; // of the ranges so far: each starts at or after it
    for (uint32_t n = 0; n < ranges && r.ok(); ++n) {
        const uint32_t first = r.u32(), count = r.u32();
        if (r.ok() && (count == 0 || first < end || count > capacity_ - std::min(first, capacity_)))
            r.fail("MTT range of " + std::to_string(count) + " entries at " +
                   std::to_string(first) + " overlaps another or leaves the table");
        if (r.ok() && count > r.left() / 8)
            r.fail("MTT range of " + std::to_string(count) + " entries: the state ends first");
        if (!r.ok())
            break;
        ranges_[first] = Range{count, 0, 0, 0, {}};
        entries_.resize(uint64_t{first} + count, 0);
        for (uint32_t i = 0; i < count && r.ok(); ++i) {
            const uint64_t address = r.u64();
            if ((address & ~kPresentBits) % (uint64_t{1} << kMinLogPage))
                r.fail("MTT entry " + std::to_string(first + i) + " is not a page address");
            entries_[first + i] = address;
        }
        end = first + count;
    }
    r.leaveSection("the MTT");
    if (!r.ok())
        clear();
}

} // namespace pib
