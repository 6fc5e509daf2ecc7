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
#include <memory>
#include <vector>

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

// Send WQE objects the device's QPs gave back, for their next fetches: a
// send queue in its steady state then allocates nothing per message. It
// keeps at most kPooled objects, each with short lists only, so what it
// holds is small and bounded for the device (docs/prm.md §7.4).
class SendWqePool {
  public:
    // An object with nothing in it.
    std::unique_ptr<SendWqe> take() {
        if (free_.empty())
            return std::make_unique<SendWqe>();
        std::unique_ptr<SendWqe> w = std::move(free_.back());
        free_.pop_back();
        return w;
    }
    void give(std::unique_ptr<SendWqe> w) {
        if (free_.size() >= kPooled)
            return;
        clear(*w);
        free_.push_back(std::move(w));
    }
    // Empties `w`, keeping the room of its lists while they are short.
    static void clear(SendWqe &w) {
        std::vector<pib_wqe_data> sges = std::move(w.sges);
        std::vector<uint8_t> inlineData = std::move(w.inlineData);
        w = SendWqe{};
        if (sges.capacity() <= kKeptSges) {
            sges.clear();
            w.sges = std::move(sges);
        }
        if (inlineData.capacity() <= kKeptInlineBytes) {
            inlineData.clear();
            w.inlineData = std::move(inlineData);
        }
    }

  private:
    static constexpr size_t kPooled = 64;
    static constexpr size_t kKeptSges = 16;
    static constexpr size_t kKeptInlineBytes = 512;
    std::vector<std::unique_ptr<SendWqe>> free_;
};

} // namespace pib
