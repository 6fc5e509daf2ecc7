// SPDX-License-Identifier: GPL-2.0-or-later
// Everything the data path tells the driver: completions in the CQ rings,
// with overrun detection through the consumer's record and the arming
// that turns a CQE into a completion event, and async events. How a CQE
// and an event look is the personality's (EventCodec); the rings' life is
// the same for both (docs/prm.md §7.3, docs/mlx5.md §8).
#pragma once

#include <cstdint>

#include "completion.hh"
#include "cq_moderation.hh"
#include "event_codec.hh"
#include "host.hh"
#include "mtt.hh"
#include "object_table.hh"
#include "objects.hh"

namespace pib {

class EventWriter {
  public:
    // The device's: its front end installs its codec (use()) as the
    // device is built, before any CQ exists.
    EventWriter(const Host &host, const Mtt &mtt, ObjectTable<CompletionQueue> &cqs)
        : host_(host), mtt_(mtt), cqs_(cqs),
          moderation_(host, cqs,
                      [this](uint32_t cqn, CompletionQueue &cq) { fireEvent(cqn, cq); }) {}
    EventWriter(const Host &host, const Mtt &mtt, ObjectTable<CompletionQueue> &cqs,
                EventCodec &codec)
        : EventWriter(host, mtt, cqs) {
        use(codec);
    }

    // The personality whose driver reads the rings (the device's front end).
    void use(EventCodec &codec) { codec_ = &codec; }
    // An async event (PIB_ASYNC_*) about object `number`.
    void postAsyncEvent(uint8_t event, uint32_t number) { codec_->asyncEvent(event, number); }
    bool postPageFault(const PageFaultReport &f) { return codec_->pageFault(f); }
    // A CQE to CQ `cqn`, and a completion event if the CQ is armed for it.
    void postCqe(uint32_t cqn, const Completion &c, bool solicited);
    // The CQE of send WQE `index` of `qp`, unless it succeeded unsignaled.
    void completeSend(const QueuePair &qp, uint32_t index, uint64_t wrId, uint8_t opcode,
                      uint8_t status, uint32_t length, bool signaled, uint8_t vendorErr = 0);

    // CQ `cqn` is armed for its next completion, or its next solicited
    // one (PIB_CQ_ARM_*), by either personality's doorbell. `pending`:
    // CQEs wait past the driver's consumer (a ConnectX arm says which it
    // read), so the event goes at once, as the next CQE's would. An armed
    // "next" is not weakened by a later "solicited".
    void arm(uint32_t cqn, CompletionQueue &cq, uint8_t kind, bool pending);
    // Whether CQ `cq` holds CQEs its driver has not consumed, as the
    // consumer record the personality reads says (false when the record
    // cannot be read).
    bool unconsumed(const CompletionQueue &cq) const;

    // Completion event moderation: each CQ's parameters and deadline.
    CqModeration &moderation() { return moderation_; }

  private:
    bool full(uint32_t cqn, CompletionQueue &cq);
    void fireEvent(uint32_t cqn, CompletionQueue &cq);

    const Host &host_;
    const Mtt &mtt_;
    ObjectTable<CompletionQueue> &cqs_;
    EventCodec *codec_ = nullptr;
    CqModeration moderation_;
};

} // namespace pib
