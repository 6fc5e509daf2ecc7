// SPDX-License-Identifier: GPL-2.0-or-later
// Receive WQEs as every transport takes them: from the QP's receive queue
// or its SRQ (an XRC TGT QP's from the XRC SRQ its request names), and the
// one a connected QP claims for the message in progress, which completes
// exactly once whatever happens to the QP.
#pragma once

#include <cstdint>
#include <optional>

#include "event_writer.hh"
#include "object_tables.hh"
#include "wqe_format.hh"

namespace pib {

class ReceiveWqes {
  public:
    ReceiveWqes(ObjectTables &objects, WqeFormat &wqes, EventWriter &events)
        : objects_(objects), wqes_(wqes), events_(events) {}

    // Takes the next receive WQE of `qp`. False when none is posted or it
    // cannot be read; otherwise *status says whether it is well formed.
    bool takeReceiveWqe(QueuePair &qp, Wqe &wqe, uint16_t *index, uint8_t *status);
    // Claims the next receive WQE for `qp`'s incoming message (kept in its
    // responder state). False when none is posted.
    bool claimReceiveWqe(QueuePair &qp);
    // The claimed WQE, if any, completes with error `status`.
    void completeClaimedWqe(QueuePair &qp, uint8_t status);
    // The SRQ `qp` takes receive WQEs from, if any.
    std::optional<uint32_t> receiveSrq(const QueuePair &qp) const;
    // A receive that used an SRQ's WQE says which SRQ.
    // Where `qp`'s receives complete.
    uint32_t receiveCq(const QueuePair &qp) const;

  private:
    ObjectTables &objects_;
    WqeFormat &wqes_;
    EventWriter &events_;
};

} // namespace pib
