// SPDX-License-Identifier: GPL-2.0-or-later
// A table of device objects (PDs, CQs, QPs...) addressed by number, with
// the lowest free number allocated first and a hard capacity.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <set>
#include <utility>
#include <vector>

#include "invariant.hh"

namespace pib {

// Which free number an insertion takes.
enum class Numbering {
    kLowestFree,
    // The lowest free one above the last given, wrapping around: a
    // destroyed object's number is the last to be given again. For QPs,
    // so that packets still on their way to a destroyed QP (duplicates,
    // requests a peer resends) find no successor under its number; for
    // SRQs, so that a driver that forgets a destroyed SRQ's number only
    // after the device has freed it (mlx5_ib does) never forgets the
    // next SRQ's, made meanwhile by another process under that number.
    kRotating,
};

template <class T> class ObjectTable {
  public:
    // Numbers first .. first + capacity - 1.
    explicit ObjectTable(uint32_t capacity, uint32_t first = 0,
                         Numbering numbering = Numbering::kLowestFree)
        : capacity_(capacity), first_(first), numbering_(numbering) {}

    // Stores obj under a free number (see Numbering), or the one
    // placeNextAt() named; nullopt when full (or that one is not free).
    std::optional<uint32_t> insert(std::unique_ptr<T> obj) {
        if (const auto at = std::exchange(placeAt_, std::nullopt))
            return insertAt(*at, std::move(obj)) ? std::optional(static_cast<uint32_t>(*at))
                                                 : std::nullopt;
        const auto slot = takeSlot();
        if (!slot)
            return std::nullopt;
        slots_[*slot] = std::move(obj);
        ++count_;
        next_ = *slot + 1;
        return first_ + *slot;
    }

    // Stores obj under `number`, as a loaded state had it: false when the
    // number is outside the table or taken.
    bool insertAt(uint64_t number, std::unique_ptr<T> obj) {
        if (number < first_ || number - first_ >= capacity_)
            return false;
        const auto slot = static_cast<uint32_t>(number - first_);
        while (slots_.size() <= slot) { // numbers below it become free ones
            free_.insert(static_cast<uint32_t>(slots_.size()));
            slots_.emplace_back();
        }
        if (slots_[slot])
            return false;
        free_.erase(slot);
        slots_[slot] = std::move(obj);
        ++count_;
        return true;
    }
    // Whether `number` is in the table and free.
    bool freeNumber(uint64_t number) const {
        return number >= first_ && number - first_ < capacity_ && !find(number);
    }
    // The next insert() stores its object under `number`: a loaded
    // state's object, created by the code that creates it.
    void placeNextAt(uint64_t number) { placeAt_ = number; }
    void cancelPlacement() { placeAt_.reset(); }
    // Where kRotating numbering goes on from, for a saved state: a loaded
    // table gives the numbers the saved one would have given.
    uint32_t rotation() const { return next_; }
    void restoreRotation(uint32_t next) { next_ = next < capacity_ ? next : 0; }

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
        next_ = 0;
    }

    template <class F> void forEach(F &&f) const {
        for (size_t i = 0; i < slots_.size(); ++i)
            if (slots_[i])
                f(first_ + static_cast<uint32_t>(i), *slots_[i]);
    }

    size_t size() const { return count_; }
    uint32_t capacity() const { return capacity_; }

  private:
    std::optional<uint32_t> takeSlot() {
        auto free = numbering_ == Numbering::kRotating ? free_.lower_bound(next_) : free_.begin();
        if (free == free_.end() && slots_.size() < capacity_) {
            slots_.emplace_back(); // a number never given yet
            return static_cast<uint32_t>(slots_.size() - 1);
        }
        if (free == free_.end())
            free = free_.begin(); // wrap around
        if (free == free_.end())
            return std::nullopt;
        const uint32_t slot = *free;
        free_.erase(free);
        return slot;
    }

    uint32_t capacity_;
    uint32_t first_;
    Numbering numbering_;
    uint32_t next_ = 0; // the slot after the last given
    std::optional<uint64_t> placeAt_;
    size_t count_ = 0;
    std::vector<std::unique_ptr<T>> slots_;
    std::set<uint32_t> free_;
};

} // namespace pib
