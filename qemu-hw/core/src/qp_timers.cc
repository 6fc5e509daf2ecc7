// SPDX-License-Identifier: GPL-2.0-or-later
// The connected QPs' deadlines on the device's one host timer (qp_timers.hh).
#include "qp_timers.hh"

#include <algorithm>

namespace pib {

void QpTimers::schedule(QueuePair &qp) {
    forget(qp);
    qp.timerAt = 0;
    for (const uint64_t deadline : {qp.req.ackDeadline, qp.req.rnrDeadline, qp.recordPollAt})
        if (deadline && (!qp.timerAt || deadline < qp.timerAt))
            qp.timerAt = deadline;
    if (qp.timerAt)
        timers_.insert({qp.timerAt, qp.number});
    rearm();
}

void QpTimers::forget(const QueuePair &qp) {
    if (qp.timerAt)
        timers_.erase({qp.timerAt, qp.number});
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
    while (!timers_.empty() && timers_.begin()->first <= now) {
        const uint32_t qpn = timers_.begin()->second;
        timers_.erase(timers_.begin());
        QueuePair *qp = objects_.findQp(qpn);
        if (!qp)
            continue;
        qp->timerAt = 0;
        expired(*qp);
    }
    rearm();
}

void QpTimers::reset() {
    timers_.clear();
    armedAt_ = Host::kNever;
    host_.armTimer(Host::kNever);
}

} // namespace pib
