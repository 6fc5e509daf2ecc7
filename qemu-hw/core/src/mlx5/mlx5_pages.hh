// SPDX-License-Identifier: GPL-2.0-or-later
// The pages the device asks its driver for (docs/mlx5.md §5): a ConnectX
// keeps its own state in host memory the driver gives it with
// MANAGE_PAGES, and gives it back when asked. This device asks for a few
// at boot and at INIT_HCA, holds exactly what it was given, checked, and
// returns them on request.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "host.hh"

namespace pib::mlx5 {

class FunctionPages {
  public:
    static constexpr uint32_t kPageBytes = 4096;
    static constexpr uint32_t kBootPages = 4; // QUERY_PAGES op_mod BOOT
    static constexpr uint32_t kInitPages = 4; // and INIT, on top

    enum class Stage : uint16_t { kBoot = 1, kInit = 2, kRegular = 3 };

    explicit FunctionPages(const Host &host) : host_(host) {}

    // How many more pages the device wants at `stage`.
    uint32_t wanted(Stage stage) const;
    // MANAGE_PAGES give: nullptr when every page is taken, else the
    // condition it breaks (the device then holds none of them).
    const err::Condition *give(std::span<const uint64_t> pages);
    // MANAGE_PAGES take: up to `count` pages back, most recent first.
    std::vector<uint64_t> take(uint32_t count);
    size_t held() const { return pages_.size(); }
    const std::vector<uint64_t> &pages() const { return pages_; }
    void reset() { pages_.clear(); }

  private:
    const Host &host_;
    std::vector<uint64_t> pages_;
};

} // namespace pib::mlx5
