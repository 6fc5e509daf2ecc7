// SPDX-License-Identifier: GPL-2.0-or-later
// A table of device objects (PDs, CQs, QPs...) addressed by number, with
// the lowest free number allocated first and a hard capacity.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <vector>

#include "invariant.hh"

namespace pib {

template <class T> class ObjectTable {
  public:
    // Numbers first .. first + capacity - 1.
    explicit ObjectTable(uint32_t capacity, uint32_t first = 0)
        : capacity_(capacity), first_(first) {}

    // Stores obj under the lowest free number; nullopt when full.
    std::optional<uint32_t> insert(std::unique_ptr<T> obj) {
        uint32_t slot;
        if (!free_.empty()) {
            slot = *free_.begin();
            free_.erase(free_.begin());
        } else if (slots_.size() < capacity_) {
            slot = static_cast<uint32_t>(slots_.size());
            slots_.emplace_back();
        } else {
            return std::nullopt;
        }
        slots_[slot] = std::move(obj);
        ++count_;
        return first_ + slot;
    }

    T *find(uint64_t number) const {
        if (number < first_ || number - first_ >= slots_.size())
            return nullptr;
        return slots_[number - first_].get();
    }

    // Object `number`, which the caller knows exists (an object another
    // one holds a reference to): a missing one is a bug in the core.
    T &at(uint64_t number) const {
        T *obj = find(number);
        PIB_INVARIANT(obj != nullptr);
        return *obj;
    }

    bool erase(uint64_t number) {
        if (!find(number))
            return false;
        const auto slot = static_cast<uint32_t>(number - first_);
        slots_[slot].reset();
        free_.insert(slot);
        --count_;
        return true;
    }

    void clear() {
        slots_.clear();
        free_.clear();
        count_ = 0;
    }

    template <class F> void forEach(F &&f) const {
        for (size_t i = 0; i < slots_.size(); ++i)
            if (slots_[i])
                f(first_ + static_cast<uint32_t>(i), *slots_[i]);
    }

    size_t size() const { return count_; }
    uint32_t capacity() const { return capacity_; }

  private:
    uint32_t capacity_;
    uint32_t first_;
    size_t count_ = 0;
    std::vector<std::unique_ptr<T>> slots_;
    std::set<uint32_t> free_;
};

} // namespace pib
