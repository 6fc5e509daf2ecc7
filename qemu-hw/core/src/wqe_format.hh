// SPDX-License-Identifier: GPL-2.0-or-later
// How a personality lays out its work queues: where a QP's or SRQ's WQEs
// are and what each says, decoded into the core's Wqe. The transports, the
// responder and the flusher take WQEs through this interface only, so a
// front end with other WQEs (a ConnectX's) brings its own reader
// (docs/architecture.md). pib-hca's is the WqeReader.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "objects.hh"
#include "pib_hw.h"

namespace pib {

// A WQE as decoded: the control segment, the segments its opcode carries,
// and its data, inline or as a scatter/gather list. The segments are in
// pib-hca's layout, which names every field a transport uses.
struct Wqe {
    pib_wqe_ctrl ctrl{};
    pib_wqe_raddr raddr{};   // RDMA and atomic operations
    pib_wqe_atomic atomic{}; // atomic operations
    pib_wqe_ud ud{};         // datagram sends
    pib_wqe_reg_mr reg{};    // fast registration
    pib_wqe_bind_mw bind{};  // memory window binding
    pib_wqe_xrc xrc{};       // XRC INI QPs: the remote XRC SRQ
    bool isInline = false;
    // Inline bytes: they point into the reader and last until its next read.
    std::span<const uint8_t> inlineData;
    std::vector<pib_wqe_data> sges;
};

class WqeFormat {
  public:
    virtual ~WqeFormat() = default;

    // Send WQE `index` of `qp`: PIB_WC_SUCCESS, or the status the WQE
    // completes with (it could not be read, or is malformed).
    virtual uint8_t readSend(const QueuePair &qp, uint32_t index, Wqe &out) = 0;
    // Receive WQE `index` of `srq`, or of the QP's RQ when `srq` is null.
    // False when it could not be read; otherwise *status is PIB_WC_SUCCESS
    // or what a malformed WQE completes with.
    virtual bool readReceive(const QueuePair &qp, const SharedReceiveQueue *srq, uint32_t index,
                             Wqe &out, uint8_t *status) = 0;
    // The work request ID of a WQE the QP's error flushes (0 when it
    // cannot be read).
    virtual uint64_t sendWrId(const QueuePair &qp, uint32_t index) = 0;
    virtual uint64_t receiveWrId(const QueuePair &qp, uint32_t index) = 0;
};

} // namespace pib
