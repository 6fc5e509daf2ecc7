// SPDX-License-Identifier: GPL-2.0-or-later
// The pib-hca personality's events (docs/prm.md §5, §7.3): its EQs of
// pib_eqe (async events, command completions, completion events) with
// their phase bit and MSI-X interrupt, and its CQE, pib_cqe.
#pragma once

#include <cstdint>

#include "eq_engine.hh"
#include "event_codec.hh"
#include "host.hh"
#include "mtt.hh"
#include "object_table.hh"
#include "objects.hh"
#include "pib_hw.h"

namespace pib {

// An EQE is 32 bytes.
inline constexpr unsigned kLogEqeSize = 5;
static_assert(1u << kLogEqeSize == sizeof(pib_eqe));

class PibEventQueues final : public EventCodec {
  public:
    PibEventQueues(const Host &host, const Mtt &mtt, ObjectTable<EventQueue> &eqs);

    // An EQ doorbell in BAR0: the driver consumed EQEs up to `consumer`,
    // and arms the EQ's interrupt if `arm`.
    void eqDoorbell(uint32_t eqn, uint32_t consumer, bool arm);
    // Whether an EQ takes async events and command completions.
    bool hasAsyncEq() const;
    // The completion of a command issued with PIB_CMD_CTRL_EVENT.
    void postCommandEvent(uint16_t token, uint8_t status, uint64_t result);

    unsigned logCqeBytes(const CompletionQueue &cq) const override;
    void encodeCqe(const Completion &c, uint32_t pass, std::span<uint8_t> cqe) const override;
    size_t cqeOwnerByte(const CompletionQueue &cq) const override;
    std::optional<uint32_t> readConsumer(uint64_t record, uint32_t producer) const override;
    void completionEvent(uint32_t eqn, uint32_t cqn) override;
    void asyncEvent(uint8_t event, uint32_t number) override;
    bool pageFault(const PageFaultReport &f) override;

  private:
    void postEqe(uint32_t eqn, EventQueue &eq, pib_eqe eqe);

    const Host &host_;
    const Mtt &mtt_;
    ObjectTable<EventQueue> &eqs_;
    EqEngine engine_; // the rings, as ConnectX's EQs run them too
};

} // namespace pib
