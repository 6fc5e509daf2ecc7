// SPDX-License-Identifier: GPL-2.0-or-later
// Everything the device tells the driver through its rings: EQEs (async
// events, command completions, completion events) with their phase bit
// and MSI-X interrupt, and CQEs with overrun detection through the
// consumer's CI record (docs/prm.md §5, §7.3).
#pragma once

#include <cstdint>

#include "host.hh"
#include "mtt.hh"
#include "object_table.hh"
#include "objects.hh"
#include "pib_hw.h"

namespace pib {

class EventWriter {
  public:
    EventWriter(const Host &host, const Mtt &mtt, ObjectTable<EventQueue> &eqs,
                ObjectTable<CompletionQueue> &cqs)
        : host_(host), mtt_(mtt), eqs_(eqs), cqs_(cqs) {}

    // An EQ doorbell in BAR0: the driver consumed EQEs up to `consumer`,
    // and arms the EQ's interrupt if `arm`.
    void eqDoorbell(uint32_t eqn, uint32_t consumer, bool arm);
    // An async event (PIB_ASYNC_*) about object `number`, to the async EQ.
    void postAsyncEvent(uint8_t event, uint32_t number);
    // Whether an EQ takes async events and command completions.
    bool hasAsyncEq() const;
    // The completion of a command issued with PIB_CMD_CTRL_EVENT.
    void postCommandEvent(uint16_t token, uint8_t status, uint64_t result);
    // A CQE to CQ `cqn`, and a completion event if the CQ is armed for it.
    void postCqe(uint32_t cqn, pib_cqe cqe, bool solicited);
    // The CQE of send WQE `index` of `qp`, unless it succeeded unsignaled.
    void completeSend(uint32_t qpn, const QueuePair &qp, uint32_t index, uint64_t wrId,
                      uint8_t opcode, uint8_t status, uint32_t length, bool signaled,
                      uint8_t vendorErr = 0);

  private:
    void postEqe(uint32_t eqn, EventQueue &eq, pib_eqe eqe);

    const Host &host_;
    const Mtt &mtt_;
    ObjectTable<EventQueue> &eqs_;
    ObjectTable<CompletionQueue> &cqs_;
};

} // namespace pib
