// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX completion queues (docs/mlx5.md §8). CREATE_CQ's context
// is checked and becomes one of the core's CompletionQueues, whose ring
// the core's EventWriter fills with what the transports report; this
// class is the personality's side of it (its EventCodec): the 64-byte
// CQE with its owner bit, the doorbell record where the driver keeps its
// consumer counter, the arm doorbell in a UAR page, and completion and
// async events as EQEs.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "conditions.hh"
#include "event_codec.hh"
#include "event_writer.hh"
#include "host.hh"
#include "mlx5_event_queues.hh"
#include "mlx5_uars.hh"
#include "object_tables.hh"
#include "state_archive.hh"

namespace pib::mlx5 {

class CompletionQueues final : public EventCodec {
  public:
    // The arm doorbell in a UAR page (MLX5_CQ_DOORBELL): a 64-bit write.
    static constexpr uint32_t kDoorbellArm = 0x20;

    CompletionQueues(const Host &host, ObjectTables &objects, const Uars &uars, EventQueues &eqs,
                     EventWriter &events)
        : host_(host), objects_(objects), uars_(uars), eqs_(eqs), events_(events) {}

    // CREATE_CQ: `in` is create_cq_in with its page list. Sets `cqn`, or
    // returns the condition that refuses it.
    const err::Condition *create(std::span<const uint8_t> in, uint32_t &cqn);
    // DESTROY_CQ; the condition that refuses it (it does not exist, or a
    // QP or SRQ uses it).
    const err::Condition *destroy(uint32_t cqn);
    // QUERY_CQ: the context as CREATE_CQ gave it, with the counters now;
    // the doorbell record's address only for the kernel (`addresses`),
    // since a process's is a guest physical address.
    const err::Condition *query(uint32_t cqn, std::span<uint8_t> out, bool addresses) const;
    // MODIFY_CQ's resize (op_mod 1): `in` is modify_cq_in with its page
    // list; the condition that refuses it, or nullptr.
    const err::Condition *resize(std::span<const uint8_t> in);
    // MODIFY_CQ's moderation (op_mod 0): `in` is modify_cq_in, whose
    // field select names the period, the count or both.
    const err::Condition *moderate(std::span<const uint8_t> in);
    // The CQs in the device's state (mlx5_state_queues.cc): each as the
    // CREATE_CQ input that makes it as it is, then its counters and arm.
    void save(StateWriter &w) const;
    void load(StateReader &r);
    // A write of `value` to the arm doorbell of UAR page `uar`.
    void armDoorbell(uint32_t uar, uint64_t value);

    unsigned logCqeBytes(const CompletionQueue &cq) const override;
    void encodeCqe(const Completion &c, uint32_t pass, std::span<uint8_t> cqe) const override;
    size_t cqeOwnerByte(const CompletionQueue &cq) const override;
    std::optional<uint32_t> readConsumer(uint64_t record, uint32_t producer) const override;
    void completionEvent(uint32_t eqn, uint32_t cqn) override;
    void asyncEvent(uint8_t event, uint32_t number) override;
    bool pageFault(const PageFaultReport &f) override { return eqs_.postPageFault(f); }

  private:
    std::vector<uint8_t> createInput(const CompletionQueue &cq) const;
    const err::Condition *checkContext(std::span<const uint8_t> in) const;
    const err::Condition *mapPages(std::span<const uint8_t> in, pib_buf_desc &buf) const;
    CompletionQueue *modified(uint32_t cqn);
    bool writeResizeCqe(CompletionQueue &cq);

    const Host &host_;
    ObjectTables &objects_;
    const Uars &uars_;
    EventQueues &eqs_;
    EventWriter &events_; // the core's: CQ rings, arms and moderation
};

} // namespace pib::mlx5
