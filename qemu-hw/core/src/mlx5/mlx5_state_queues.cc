// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX queues in a saved state (docs/migration.md, "The ConnectX
// personality"): EQs, CQs, SRQs and QPs, each as the create command's
// input that makes it as it is (mlx5_state.cc says why), then what its
// doorbells and work did since; multicast attachments as ATTACH_TO_MCG's.
#include <algorithm>

#include "cq_state.hh"
#include "limits.hh"
#include "mlx5_commands.hh"
#include "mlx5_completion_queues.hh"
#include "mlx5_event_queues.hh"
#include "mlx5_ifc.hh"
#include "mlx5_queue_pairs.hh"
#include "mlx5_shared_receive_queues.hh"
#include "qp_lifecycle.hh"
#include "state_tables.hh"

namespace pib::mlx5 {

namespace {

constexpr uint32_t kEqsTag = stateTag("M5EQ");
constexpr uint32_t kCqsTag = stateTag("M5CQ");
constexpr uint32_t kSrqsTag = stateTag("M5SR");
constexpr uint32_t kQpsTag = stateTag("M5QP");
constexpr uint32_t kSpecialQpsTag = stateTag("M5Q1");
constexpr uint32_t kMulticastTag = stateTag("M5MC");

// attach_to_mcg_in: the QP, and the group's GID at byte 0x10.
constexpr Field kAttachQpn = field(0x48, 24);
constexpr uint32_t kAttachGidByte = 0x10;
constexpr uint32_t kAttachBytes = kAttachGidByte + 16;

// The create commands whose inputs make the objects.
constexpr uint16_t kCreateEq = 0x301, kCreateCq = 0x400, kCreateSrq = 0x700, kCreateQp = 0x500;

} // namespace

// ---- EQs -------------------------------------------------------------------

void EventQueues::save(StateWriter &w) const {
    saveTable(w, kEqsTag, eqs_, [&](const Eq &eq) {
        w.bytes(createInput(eq));
        w.u32(eq.producer);
        w.u32(eq.consumer);
        w.boolean(eq.armed);
        w.boolean(eq.overrun);
    });
}

void EventQueues::load(StateReader &r) {
    loadTable(r, kEqsTag, "EQs", eqs_, 4 + 10, [&](uint32_t number) {
        const std::vector<uint8_t> in = Commands::savedInput(r, kCreateEq);
        const uint32_t producer = r.u32(), consumer = r.u32();
        const bool armed = r.boolean("an EQ's arm"), overrun = r.boolean("an EQ's overrun");
        uint32_t eqn = 0;
        if (!restoreAt(r, host_, "EQ", eqs_, number, [&] { return !create(in, eqn); }))
            return;
        Eq &eq = eqs_.at(number);
        // The consumer never passes what the device wrote (doorbell()).
        if (consumer > kMask24 || ((producer - consumer) & kMask24) > (uint32_t{1} << eq.logSize)) {
            r.fail("EQ " + std::to_string(number) + ": its counters are not an EQ's");
            return;
        }
        eq.producer = producer;
        eq.consumer = consumer;
        eq.armed = armed;
        eq.overrun = overrun;
    });
}

// ---- CQs -------------------------------------------------------------------

void CompletionQueues::save(StateWriter &w) const {
    saveTable(w, kCqsTag, objects_.cqs, [&](const CompletionQueue &cq) {
        w.bytes(createInput(cq));
        CqProgress::save(w, cq);
    });
}

void CompletionQueues::load(StateReader &r) {
    loadTable(r, kCqsTag, "CQs", objects_.cqs, 4 + CqProgress::kBytes, [&](uint32_t number) {
        const std::vector<uint8_t> in = Commands::savedInput(r, kCreateCq);
        const CqProgress progress = CqProgress::read(r, number);
        uint32_t cqn = 0;
        if (restoreAt(r, host_, "CQ", objects_.cqs, number, [&] { return !create(in, cqn); }))
            progress.apply(objects_.cqs.at(number), number, events_.moderation());
    });
}

// ---- SRQs ------------------------------------------------------------------

void SharedReceiveQueues::save(StateWriter &w) const {
    saveTable(w, kSrqsTag, objects_.srqs, [&](const SharedReceiveQueue &srq) {
        w.bytes(createInput(srq));
        w.u32(srq.producer);
        w.u32(srq.consumer);
        w.u32(srq.head);
        w.u32(srq.ctx.wqe_count);
    });
}

void SharedReceiveQueues::load(StateReader &r) {
    loadTable(r, kSrqsTag, "SRQs", objects_.srqs, 4 + 16, [&](uint32_t number) {
        const std::vector<uint8_t> in = Commands::savedInput(r, kCreateSrq);
        const uint32_t producer = r.u32(), consumer = r.u32(), head = r.u32();
        const uint32_t posted = r.u32();
        uint32_t srqn = 0;
        if (!restoreAt(r, host_, "SRQ", objects_.srqs, number, [&] { return !create(in, srqn); }))
            return;
        SharedReceiveQueue &srq = objects_.srqs.at(number);
        const uint32_t size = 1u << srq.ctx.log_wqe_count;
        // The consumer never passes the producer, nor is a ring behind it;
        // the free list's head is one of the ring's slots.
        if (producer - consumer > size || head >= size || posted > size) {
            r.fail("SRQ " + std::to_string(number) + ": its counters are not an SRQ's");
            return;
        }
        srq.producer = producer;
        srq.consumer = consumer;
        srq.head = head;
        srq.ctx.wqe_count = posted;
    });
}

// ---- QPs -------------------------------------------------------------------

void QueuePairs::saveQp(StateWriter &w, const QueuePair &qp) const {
    w.bytes(createInput(qp));
    w.u32(qp.counterSet);
    w.u8(qp.dmaCopy);
    w.record(qp.attr);
    dataPath_.saveTransport(qp, w);
}

void QueuePairs::save(StateWriter &w) const {
    // The DCTs, numbered among the QPs, have a section of their own
    // (mlx5_dc_targets.cc).
    saveTableWhere(
        w, kQpsTag, objects_.qps, [](const QueuePair &qp) { return qp.ctx.type != kQptDct; },
        [&](const QueuePair &qp) { saveQp(w, qp); });
    saveSpecialQps(w, kSpecialQpsTag, objects_, [&](const QueuePair &qp) { saveQp(w, qp); });
    saveMulticast(w, kMulticastTag, objects_.multicast);
}

// QP `qpn` made by CREATE_QP's code (QP0 and QP1 in their port's slot,
// which the command picks: they are loaded in the order of their
// numbers), bound to its Q counter, then given its attributes and
// transport.
void QueuePairs::loadQp(StateReader &r, uint32_t qpn) {
    const std::vector<uint8_t> in = Commands::savedInput(r, kCreateQp);
    const uint32_t set = r.u32();
    const uint8_t dmaCopy = r.u8();
    pib_qp_attr attr;
    r.record(attr, "a QP's attributes");
    uint32_t made = 0;
    const auto create = [&] { return !this->create(in, made); };
    const bool special = qpn < objects_.specialQps.size();
    if (special) {
        std::string why;
        host_.captureGuestErrors(&why);
        const bool created = r.ok() && create();
        host_.captureGuestErrors(nullptr);
        if (r.ok() && (!created || made != qpn))
            r.fail("QP " + std::to_string(qpn) + ": " +
                   (created ? "not the special QP of that number" : why));
    } else if (!restoreAt(r, host_, "QP", objects_.qps, qpn, create)) {
        return;
    }
    if (!r.ok())
        return;
    QueuePair &qp = *objects_.findQp(qpn);
    if (set && !objects_.counterSets.find(set)) {
        r.fail("QP " + std::to_string(qpn) + ": Q counter " + std::to_string(set) +
               " does not exist");
        return;
    }
    if (dmaCopy > 1 || (dmaCopy && qp.ctx.type != PIB_QPT_RC)) {
        r.fail("QP " + std::to_string(qpn) + ": DMA copies on a QP other than RC");
        return;
    }
    qp.dmaCopy = dmaCopy;
    bindCounterSet(qp, set);
    loadQpState(r, qp, attr, ports_, {limits::kMaxRdAtom, limits::kMaxRdAtom}, dataPath_);
}

void QueuePairs::load(StateReader &r) {
    const auto load = [&](uint32_t qpn) { loadQp(r, qpn); };
    loadTable(r, kQpsTag, "QPs", objects_.qps, 4 + 4 + 1 + sizeof(pib_qp_attr), load);
    loadSpecialQps(r, kSpecialQpsTag, load);
    loadMulticast(r, kMulticastTag, objects_,
                  [&](const SavedAttachment &a) { return attachLoaded(a); });
    if (r.ok())
        resumeLoadedQps(objects_, dataPath_);
}

// A multicast attachment, made again by ATTACH_TO_MCG's code (which knows
// no LID: a group is known by its GID).
std::string QueuePairs::attachLoaded(const SavedAttachment &a) {
    std::vector<uint8_t> in(kAttachBytes);
    mlx5::set(in, kAttachQpn, a.qpn & kMask24);
    std::copy(a.gid.begin(), a.gid.end(), in.begin() + kAttachGidByte);
    std::string why;
    host_.captureGuestErrors(&why);
    const bool refused = attachMulticast(true, in) != nullptr;
    host_.captureGuestErrors(nullptr);
    return !refused ? "" : why.empty() ? "refused" : why;
}

} // namespace pib::mlx5
