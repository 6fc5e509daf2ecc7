// SPDX-License-Identifier: GPL-2.0-or-later
#include "mtt.hh"

#include <algorithm>

namespace pib {

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
    ranges_[candidate] = Range{count, 0, 0, {}};
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

void Mtt::hold(uint32_t first, unsigned logPageSize, bool writes) {
    if (auto *range = rangeOf(first)) {
        Range &r = ranges_.at(range->first);
        ++r.refs;
        r.deviceWriters += writes;
        if (logPageSize > kMinLogPage)
            r.largePages.push_back(static_cast<uint8_t>(logPageSize));
    }
}

void Mtt::unhold(uint32_t first, unsigned logPageSize, bool writes) {
    if (auto *range = rangeOf(first); range && range->second.refs) {
        Range &r = ranges_.at(range->first);
        --r.refs;
        if (writes && r.deviceWriters)
            --r.deviceWriters;
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

bool Mtt::held(uint32_t first) const {
    auto it = ranges_.find(first);
    return it != ranges_.end() && it->second.refs > 0;
}

bool Mtt::takeKeyEntries(uint64_t count) {
    if (count > capacity_ - keyEntries_)
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

} // namespace pib
