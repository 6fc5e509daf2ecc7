// SPDX-License-Identifier: GPL-2.0-or-later
// The UAR pages (docs/mlx5.md §6): BAR0 pages from kFirstUar on, each
// given to the driver by ALLOC_UAR and back by DEALLOC_UAR. A UAR page
// holds the doorbells of the EQs, CQs and QPs created on it; an access to
// one not given out is the driver's error.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "objects.hh"
#include "state_archive.hh"

namespace pib::mlx5 {

class Uars {
  public:
    // The initialization segment covers BAR0 pages 0 to 2.
    static constexpr uint32_t kFirstUar = 3;
    static constexpr uint32_t kPageBytes = 4096;

    explicit Uars(uint32_t count) : given_(count, false), owners_(count, 0) {}

    // The lowest page not given out, now given to user context `owner`;
    // nullopt when all are.
    std::optional<uint32_t> alloc(Owner owner);
    // False when `index` was not given out.
    bool free(uint32_t index);
    bool given(uint64_t index) const {
        return index >= kFirstUar && index - kFirstUar < given_.size() && given_[index - kFirstUar];
    }
    // The user context a page given out is given to.
    Owner owner(uint64_t index) const { return given(index) ? owners_[index - kFirstUar] : 0; }
    // The index after the last page.
    uint32_t limit() const { return kFirstUar + static_cast<uint32_t>(given_.size()); }
    // How many pages are given out.
    size_t givenCount() const {
        return static_cast<size_t>(std::count(given_.begin(), given_.end(), true));
    }
    void reset() { given_.assign(given_.size(), false); }
    void save(StateWriter &w) const;
    void load(StateReader &r);

  private:
    std::vector<bool> given_; // by index - kFirstUar
    std::vector<Owner> owners_;
};

} // namespace pib::mlx5
