// SPDX-License-Identifier: GPL-2.0-or-later
// The capabilities QUERY_HCA_CAP reports and SET_HCA_CAP adjusts
// (docs/mlx5.md §4.2): the general page, with the maximum the core
// supports and the current values the driver chose, the atomic page and
// the second general page; every other type the PRM names reads as zeros,
// and SET_HCA_CAP of one is refused.
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "host.hh"

namespace pib::mlx5 {

class HcaCaps {
  public:
    static constexpr uint32_t kPageBytes = 4096;
    static constexpr uint16_t kGeneral = 0;
    static constexpr uint16_t kOdp = 2;
    static constexpr uint16_t kAtomic = 3;
    static constexpr uint16_t kDeviceEvent = 0x14;
    static constexpr uint16_t kGeneral2 = 0x20;
    static constexpr uint16_t kTypes = 0x40; // the capability types the PRM names are below
    using Page = std::array<uint8_t, kPageBytes>;

    HcaCaps(uint32_t numPorts) : numPorts_(numPorts) { reset(); }

    // The page of capability type `type`, the current values or the
    // maximum; nullptr for a type beyond those the PRM names.
    const Page *page(uint16_t type, bool current) const;
    // SET_HCA_CAP of the general page: the fields a driver may choose are
    // taken from `requested`, checked against the maximum. nullptr, or
    // the condition a field breaks (nothing is changed then).
    const err::Condition *apply(const Host &host, uint16_t type,
                                std::span<const uint8_t> requested);
    void reset();
    // Whether the driver chose the memory scheme's page faults (set
    // mem_page_fault in the ODP page).
    bool memoryPageFaults() const;

  private:
    const err::Condition *applyOdp(const Host &host, std::span<const uint8_t> requested);

    uint32_t numPorts_;
    Page max_{};
    Page current_{};
    Page atomic_{};   // the atomic page: nothing in it a driver sets
    Page general2_{}; // the second general page: nothing a driver sets
    Page events_{};   // the event page: the events a DEVX process may ask for
    Page odpMax_{};   // the on-demand paging page: the memory scheme's faults
    Page odpCurrent_{};
};

} // namespace pib::mlx5
