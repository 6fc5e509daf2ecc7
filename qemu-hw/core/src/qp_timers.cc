// SPDX-License-Identifier: GPL-2.0-or-later
// The connected QPs' deadlines on the device's one host timer (qp_timers.hh).
#include "qp_timers.hh"

#include <algorithm>

namespace pib {

// The earliest of `qp`'s deadlines; 0 for none.
static uint64_t earliestDeadline(const QueuePair &qp) {
    uint64_t due = 0;
    for (const uint64_t deadline : {qp.req.ackDeadline, qp.req.rnrDeadline, qp.recordPollAt,
                                    qp.req.fault.deadline, qp.resp.fault.deadline})
        if (deadline && (!due || deadline < due))
            due = deadline;
    return due;
}

// An entry may come earlier than the QP's deadlines (they moved later, or
// went): expire() looks again. So the ACK timer restarted by every ACK
// leaves the set and the host's timer as they are, and only a deadline
// earlier than the entry moves it.
void QpTimers::schedule(QueuePair &qp) {
    const uint64_t due = earliestDeadline(qp);
    if (!due || (qp.timerAt && qp.timerAt <= due))
        return;
    forget(qp);
    qp.timerAt = due;
    timers_.insert({due, qp.number});
    rearm();
}

void QpTimers::forget(QueuePair &qp) {
    if (qp.timerAt)
        timers_.erase({qp.timerAt, qp.number});
    qp.timerAt = 0;
}

void QpTimers::rearm() {
    uint64_t next = timers_.empty() ? Host::kNever : timers_.begin()->first;
    if (const uint64_t other = otherDeadline_ ? otherDeadline_() : 0)
        next = std::min(next, other);
    if (next != armedAt_) {
        armedAt_ = next;
        host_.armTimer(next);
    }
}

void QpTimers::expire(const std::function<void(QueuePair &)> &expired) {
    armedAt_ = Host::kNever;
    const uint64_t now = host_.clockNs();
    // The entries due now, taken out first: what `expired` schedules (a
    // deadline it did not move on) waits for the next expiry, so one call
    // does bounded work.
    due_.clear();
    while (!timers_.empty() && timers_.begin()->first <= now) {
        due_.push_back(timers_.begin()->second);
        timers_.erase(timers_.begin());
    }
    for (const uint32_t qpn : due_) {
        QueuePair *qp = objects_.findTransportQp(qpn);
        if (!qp)
            continue;
        qp->timerAt = 0;
        const uint64_t deadline = earliestDeadline(*qp);
        if (deadline && deadline <= now)
            expired(*qp);
        // Whatever deadline is left, later or one `expired` did not serve.
        if ((qp = objects_.findTransportQp(qpn)))
            schedule(*qp);
    }
    rearm();
}

void QpTimers::reset() {
    timers_.clear();
    armedAt_ = Host::kNever;
    host_.armTimer(Host::kNever);
}

} // namespace pib
