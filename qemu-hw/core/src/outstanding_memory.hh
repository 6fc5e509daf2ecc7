// SPDX-License-Identifier: GPL-2.0-or-later
// The memory the device holds for send WQEs of connected QPs that it has
// fetched and not yet completed: each keeps a copy of its SGE list and
// inline data, so that a resend reads no ring again. The copies are
// bounded for the device as a whole, not per QP: 4096 QPs whose rings
// alias one guest page could otherwise pin over a GiB of QEMU's heap.
//
// A QP may always hold one WQE, whatever the others hold, so that every
// QP makes progress; beyond that it takes a new WQE only while the
// device's total stays within limits::kOutstandingWqeBytes. A QP refused
// has outstanding WQEs, so a completion (an ACK, a response, a flush)
// runs its send queue again. The bound is thus kOutstandingWqeBytes plus
// kMaxQp times the largest WQE's footprint (docs/prm.md §7.4).
#pragma once

#include <cstdint>

#include "connected.hh"
#include "invariant.hh"
#include "limits.hh"

namespace pib {

// What one outstanding WQE costs: the copy and the lists it owns.
inline uint64_t footprint(const SendWqe &w) {
    return sizeof(SendWqe) + w.sges.capacity() * sizeof(pib_wqe_data) + w.inlineData.capacity() +
           w.pages.capacity() * sizeof(uint64_t);
}

class OutstandingMemory {
  public:
    // Whether a QP that holds `heldByQp` bytes may take a WQE of `bytes`.
    bool mayHold(uint64_t heldByQp, uint64_t bytes) const {
        return heldByQp == 0 || held_ + bytes <= limits::kOutstandingWqeBytes;
    }
    void add(uint64_t bytes) { held_ += bytes; }
    void remove(uint64_t bytes) {
        PIB_INVARIANT(held_ >= bytes);
        held_ -= bytes;
    }
    uint64_t held() const { return held_; }
    // After a device reset: no QP holds anything.
    void reset() { held_ = 0; }

  private:
    uint64_t held_ = 0;
};

} // namespace pib
