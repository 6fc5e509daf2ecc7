// SPDX-License-Identifier: GPL-2.0-or-later
// Completion event moderation (docs/prm.md §6.1, docs/mlx5.md §8): the
// event of a CQ armed for its next CQE waits until `count` CQEs have come
// or `period` us have passed since the first of them, so that one
// interrupt reports many completions. The deadlines share the device's one
// host timer with the QPs' (qp_timers.hh).
#pragma once

#include <cstdint>
#include <functional>
#include <set>
#include <utility>

#include "host.hh"
#include "object_table.hh"
#include "objects.hh"

namespace pib {

class CqModeration {
  public:
    // `fire` posts CQ `cqn`'s completion event; `rearm` sets the host's
    // timer again after the earliest deadline changed.
    CqModeration(const Host &host, ObjectTable<CompletionQueue> &cqs,
                 std::function<void(uint32_t cqn, CompletionQueue &)> fire)
        : host_(host), cqs_(cqs), fire_(std::move(fire)) {}

    void setRearm(std::function<void()> rearm) { rearm_ = std::move(rearm); }
    static bool moderated(const CompletionQueue &cq) { return cq.ctx.moderation_period != 0; }
    // A CQE that the CQ's arm would report came: whether its event waits.
    bool hold(uint32_t cqn, CompletionQueue &cq);
    // The event goes now: no deadline.
    void release(uint32_t cqn, CompletionQueue &cq);
    // New parameters (MODIFY_CQ): an event that waits goes at once, so a
    // wait already begun is never lengthened.
    void change(uint32_t cqn, CompletionQueue &cq, uint16_t count, uint16_t periodUs);
    // A loaded CQ whose event waited for `held` CQEs when it was saved:
    // the event goes at the next turn of the timer (the move took longer
    // than any period: moderation only ever delays an event).
    void restoreHeld(uint32_t cqn, CompletionQueue &cq, uint32_t held);
    // The earliest deadline, 0 for none.
    uint64_t nextDeadline() const { return due_.empty() ? 0 : due_.begin()->first; }
    // The host's timer fired: every CQ whose deadline passed gets its event.
    void expire(uint64_t now);
    // The device was reset: no CQ waits.
    void reset() { due_.clear(); }

  private:
    const Host &host_;
    ObjectTable<CompletionQueue> &cqs_;
    std::function<void(uint32_t, CompletionQueue &)> fire_;
    std::function<void()> rearm_;
    // (deadline, CQN), earliest first. A CQ has at most one; an entry whose
    // CQ was destroyed meanwhile is dropped when it comes due.
    std::set<std::pair<uint64_t, uint32_t>> due_;
};

} // namespace pib
