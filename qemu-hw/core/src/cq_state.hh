// SPDX-License-Identifier: GPL-2.0-or-later
// What a CQ did since it was made, in a saved state, as every personality
// saves it after the input that makes it (docs/migration.md): its
// producer and consumer counts, its arm, whether it is overrun or stopped
// by an injection, and the CQEs whose moderated event waits.
#pragma once

#include <string>

#include "cq_moderation.hh"
#include "objects.hh"
#include "state_archive.hh"

namespace pib {

struct CqProgress {
    uint32_t producer = 0;
    uint32_t consumer = 0;
    uint8_t arm = 0;
    bool overrun = false;
    bool stopped = false;
    uint32_t held = 0;

    static constexpr size_t kBytes = 4 + 4 + 1 + 1 + 1 + 4;

    static void save(StateWriter &w, const CompletionQueue &cq) {
        w.u32(cq.producer);
        w.u32(cq.consumer);
        w.u8(cq.arm);
        w.boolean(cq.overrun);
        w.boolean(cq.stopped);
        w.u32(cq.eventDue ? cq.heldCqes : 0);
    }
    // CQ `number`'s, read (*r fails on an arm no doorbell makes).
    static CqProgress read(StateReader &r, uint32_t number) {
        CqProgress p;
        p.producer = r.u32();
        p.consumer = r.u32();
        p.arm = r.u8();
        p.overrun = r.boolean("a CQ's overrun");
        p.stopped = r.boolean("a CQ stopped");
        p.held = r.u32();
        if (r.ok() && p.arm != 0 && p.arm != PIB_CQ_ARM_NEXT && p.arm != PIB_CQ_ARM_SOLICITED)
            r.fail("CQ " + std::to_string(number) + ": arm " + std::to_string(p.arm));
        return p;
    }
    // Into CQ `number`, just made again.
    void apply(CompletionQueue &cq, uint32_t number, CqModeration &moderation) const {
        cq.producer = producer;
        cq.consumer = consumer;
        cq.arm = arm;
        cq.overrun = overrun;
        cq.stopped = stopped;
        moderation.restoreHeld(number, cq, held);
    }
};

} // namespace pib
