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

#include "state_archive.hh"

namespace pib::mlx5 {

class Uars {
  public:
    // The initialization segment covers BAR0 pages 0 to 2.
    static constexpr uint32_t kFirstUar = 3;
    static constexpr uint32_t kPageBytes = 4096;

    explicit Uars(uint32_t count) : given_(count, false) {}

    // The lowest page not given out, now given; nullopt when all are.
    std::optional<uint32_t> alloc();
    // False when `index` was not given out.
    bool free(uint32_t index);
    bool given(uint64_t index) const {
        return index >= kFirstUar && index - kFirstUar < given_.size() && given_[index - kFirstUar];
    }
    // How many pages are given out.
    size_t givenCount() const {
        return static_cast<size_t>(std::count(given_.begin(), given_.end(), true));
    }
    void reset() { given_.assign(given_.size(), false); }
    void save(StateWriter &w) const;
    void load(StateReader &r);

  private:
    std::vector<bool> given_; // by index - kFirstUar
};

} // namespace pib::mlx5
