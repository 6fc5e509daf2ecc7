// SPDX-License-Identifier: GPL-2.0-or-later
// The connected QPs' deadlines (the local ACK timeout, an RNR wait) on the
// device's one host timer, which is armed for the earliest of them and of
// the links' own deadline.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <utility>
#include <vector>

#include "host.hh"
#include "object_tables.hh"

namespace pib {

class QpTimers {
  public:
    QpTimers(const Host &host, ObjectTables &objects) : host_(host), objects_(objects) {}

    // The links' next deadline (their Polling retries; 0 for none), read
    // again by rearm().
    void setOtherDeadline(std::function<uint64_t()> other) { otherDeadline_ = std::move(other); }
    // `qp` has an entry no later than the earliest of its ACK and RNR
    // deadlines, its page faults' and its next read of a receive record in
    // the error state.
    void schedule(QueuePair &qp);
    // `qp` goes: its entry with it.
    void forget(QueuePair &qp);
    // Arms the host's timer for the earliest deadline, if that changed.
    void rearm();
    // The host's timer fired: `expired` runs for each QP whose deadline
    // has passed, earliest first, then the timer is armed again.
    void expire(const std::function<void(QueuePair &)> &expired);
    // No deadlines, the host's timer off.
    void reset();

  private:
    const Host &host_;
    ObjectTables &objects_;
    // (deadline, QPN), earliest first, and what the host's timer is set to.
    std::set<std::pair<uint64_t, uint32_t>> timers_;
    std::vector<uint32_t> due_; // expire()'s QPs, kept for its next call
    std::function<uint64_t()> otherDeadline_;
    uint64_t armedAt_ = Host::kNever;
};

} // namespace pib
