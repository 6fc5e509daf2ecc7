// SPDX-License-Identifier: GPL-2.0-or-later
// The reader of pib-hca's work queue entries (docs/prm.md §7.2), the pib
// personality's WqeFormat. Every queue's WQEs, send and receive, datagram
// and connected, are read and checked here, so the transports, the
// responder and the flusher agree on what a well-formed WQE is and report
// a malformed one the same way.
#pragma once

#include <cstdint>
#include <cstring>
#include <vector>

#include "host.hh"
#include "mtt.hh"
#include "objects.hh"
#include "pib_hw.h"
#include "wqe_format.hh"

namespace pib {

// A ring of WQEs: 2^logCount slots of 2^logStride bytes.
struct WqeRing {
    const pib_buf_desc &buf;
    uint8_t logCount;
    uint8_t logStride;
};

inline WqeRing sendRing(const QueuePair &qp) {
    return {qp.ctx.sq_buf, qp.ctx.sq_log_wqe_count, qp.ctx.sq_log_wqe_stride};
}
inline WqeRing receiveRing(const QueuePair &qp) {
    return {qp.ctx.rq_buf, qp.ctx.rq_log_wqe_count, qp.ctx.rq_log_wqe_stride};
}
inline WqeRing receiveRing(const SharedReceiveQueue &srq) {
    return {srq.ctx.buf, srq.ctx.log_wqe_count, srq.ctx.log_wqe_stride};
}

class WqeReader final : public WqeFormat {
  public:
    WqeReader(const Host &host, const Mtt &mtt, uint32_t maxInlineData)
        : host_(host), mtt_(mtt), maxInlineData_(maxInlineData) {}

    // Send WQE `index` of QP `qpn`, of QP type `qpType`. Returns
    // PIB_WC_SUCCESS, or the status the WQE completes with: it could not
    // be read (`wqe-dma`), its opcode is not one the QP type has or its
    // segments do not fit (`wqe-bad`).
    uint8_t readSend(uint32_t qpn, uint8_t qpType, const WqeRing &ring, uint32_t index, Wqe &out);
    // Receive WQE `index` (of the QP's RQ or its SRQ). False when it could
    // not be read; otherwise *status is PIB_WC_SUCCESS or what a malformed
    // WQE completes with.
    bool readReceive(uint32_t qpn, const WqeRing &ring, uint32_t index, Wqe &out, uint8_t *status);
    // Only the control segment (a flushed WQE needs its wr_id), zeros when
    // it cannot be read.
    pib_wqe_ctrl readControl(const WqeRing &ring, uint32_t index);

    // The QP's rings, as its pib_qp_context and its SRQ's give them.
    uint8_t readSend(const QueuePair &qp, uint32_t index, Wqe &out) override {
        return readSend(qp.number, qp.ctx.type, sendRing(qp), index, out);
    }
    bool readReceive(const QueuePair &qp, SharedReceiveQueue *srq, uint32_t index, Wqe &out,
                     uint8_t *status) override {
        return readReceive(qp.number, srq ? receiveRing(*srq) : receiveRing(qp), index, out,
                           status);
    }
    uint64_t sendWrId(const QueuePair &qp, uint32_t index) override {
        return readControl(sendRing(qp), index).wr_id;
    }
    uint64_t receiveWrId(const QueuePair &qp, uint32_t index) override {
        return readControl(receiveRing(qp), index).wr_id;
    }
    // A WQE per slot; receive WQEs are posted by doorbells.
    uint32_t sendSlots(const QueuePair &, uint32_t) override { return 1; }
    void pollReceiveProducer(QueuePair &) override {}
    void pollSrqProducer(SharedReceiveQueue &) override {}
    bool receivesPostedByRecord() const override { return false; }
    // pib-hca's page lists are little-endian addresses (docs/prm.md §6.2).
    void pageListEntries(std::span<const uint8_t> bytes,
                         std::vector<uint64_t> &pages) const override {
        pages.resize(bytes.size() / sizeof(uint64_t));
        std::memcpy(pages.data(), bytes.data(), pages.size() * sizeof(uint64_t));
    }
    // pib-hca has no indirect keys: its reader makes no such REG_MR.
    const char *indirectEntries(std::span<const uint8_t>, IndirectUpdate &) const override {
        return "pib-hca has no indirect keys";
    }
    // PIB_DEV_CAP_ATOMIC_WRITE and PIB_DEV_CAP_FLUSH_GLOBAL.
    bool answersPlacementOps() const override { return true; }

  private:
    // Which segments follow the control segment.
    struct Layout {
        bool raddr = false;
        bool atomic = false;
        bool ud = false;
        bool reg = false;
        bool bind = false;
        bool flush = false;
        bool xrc = false;   // XRC INI QPs: pib_wqe_xrc after the control segment
        bool local = false; // a local operation: no data segments
        bool bare = false;  // FLUSH, ATOMIC WRITE: its segments alone, no data
        bool mayInline = false;
        bool isReceive = false;
    };
    static bool sendLayout(uint8_t qpType, uint8_t opcode, Layout &layout);
    static void clear(Wqe &out);
    bool fetch(const WqeRing &ring, uint32_t index);
    uint8_t decode(uint32_t qpn, uint32_t index, const Layout &layout, Wqe &out);

    const Host &host_;
    const Mtt &mtt_;
    const uint32_t maxInlineData_;
    std::vector<uint8_t> raw_; // the last WQE read, reused
};

} // namespace pib
