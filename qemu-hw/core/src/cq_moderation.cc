// SPDX-License-Identifier: GPL-2.0-or-later
// Completion event moderation (cq_moderation.hh).
#include "cq_moderation.hh"

#include "trace.hh"

namespace pib {

namespace {
constexpr uint64_t kNsPerUs = 1000;
} // namespace

bool CqModeration::hold(uint32_t cqn, CompletionQueue &cq) {
    ++cq.heldCqes;
    if (cq.ctx.moderation_count && cq.heldCqes >= cq.ctx.moderation_count)
        return false;
    if (!cq.eventDue) {
        cq.eventDue = host_.clockNs() + cq.ctx.moderation_period * kNsPerUs;
        due_.insert({cq.eventDue, cqn});
        trace::cq_event_held(host_, cqn, cq.ctx.moderation_count, cq.ctx.moderation_period);
        if (rearm_)
            rearm_();
    }
    return true;
}

void CqModeration::release(uint32_t cqn, CompletionQueue &cq) {
    if (cq.eventDue)
        due_.erase({cq.eventDue, cqn});
    cq.eventDue = 0;
    cq.heldCqes = 0;
}

void CqModeration::change(uint32_t cqn, CompletionQueue &cq, uint16_t count, uint16_t periodUs) {
    trace::cq_moderate(host_, cqn, count, periodUs);
    cq.ctx.moderation_count = count;
    cq.ctx.moderation_period = periodUs;
    if (cq.heldCqes)
        fire_(cqn, cq);
}

void CqModeration::restoreHeld(uint32_t cqn, CompletionQueue &cq, uint32_t held) {
    release(cqn, cq);
    if (!held)
        return;
    cq.heldCqes = held;
    cq.eventDue = host_.clockNs() + 1;
    due_.insert({cq.eventDue, cqn});
    if (rearm_)
        rearm_();
}

void CqModeration::expire(uint64_t now) {
    while (!due_.empty() && due_.begin()->first <= now) {
        const auto [due, cqn] = *due_.begin();
        due_.erase(due_.begin());
        CompletionQueue *cq = cqs_.find(cqn);
        if (!cq || cq->eventDue != due)
            continue; // destroyed, or released meanwhile
        cq->eventDue = 0;
        trace::cq_event_period(host_, cqn, cq->heldCqes);
        fire_(cqn, *cq);
    }
}

} // namespace pib
