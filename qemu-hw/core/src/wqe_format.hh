// SPDX-License-Identifier: GPL-2.0-or-later
// How a personality lays out its work queues: where a QP's or SRQ's WQEs
// are and what each says, decoded into the core's Wqe. The transports, the
// responder and the flusher take WQEs through this interface only, so a
// front end with other WQEs (a ConnectX's) brings its own reader
// (docs/architecture.md). pib-hca's is the WqeReader.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <vector>

#include "core_operations.hh"
#include "host.hh"
#include "indirect_key.hh"
#include "key_update.hh"
#include "objects.hh"
#include "pib_hw.h"

namespace pib {

// A WQE as decoded: the control segment, the segments its opcode carries,
// and its data, inline or as a scatter/gather list. The segments are in
// pib-hca's layout, which names every field a transport uses.
struct Wqe {
    pib_wqe_ctrl ctrl{};
    pib_wqe_raddr raddr{};   // RDMA and atomic operations
    pib_wqe_atomic atomic{}; // atomic operations; ATOMIC WRITE: its 8 bytes in swap_add
    pib_wqe_flush flush{};   // FLUSH
    pib_wqe_ud ud{};         // datagram sends; a DCI's: the DCT's path and number
    uint64_t dcKey = 0;      // a DCI's sends: the DCT's access key
    uint16_t dciStream = 0;  // a DCI's: the stream it belongs to (dci_streams.hh)
    pib_wqe_reg_mr reg{};    // fast registration
    // A REG_MR's page addresses when the reader took them from the WQE
    // itself (a ConnectX UMR); empty: at reg.page_list.
    std::vector<uint64_t> pages;
    // A REG_MR that is a general key update (a ConnectX UMR QP's UMR):
    // `pages` are its translation entries.
    std::optional<KeyUpdate> update;
    // A REG_MR that says whether a peer's SEND with Invalidate may free
    // the key (a ConnectX UMR's en_rinval); unset: as it was.
    std::optional<bool> remoteInvalidate;
    // A REG_MR that lays out, or frees, an indirect key (a ConnectX UMR of
    // a KLM key, indirect_key.hh).
    std::optional<IndirectUpdate> indirect;
    pib_wqe_bind_mw bind{}; // memory window binding
    pib_wqe_xrc xrc{};      // XRC INI QPs: the remote XRC SRQ
    bool isInline = false;
    // Inline bytes: they point into the reader and last until its next read.
    // A ConnectX send WQE may follow them with data segments (UCX puts its
    // header inline and the payload behind pointers): the message is the
    // inline bytes, then what `sges` gather.
    std::span<const uint8_t> inlineData;
    std::vector<pib_wqe_data> sges;
    // Ring slots it takes, which its consumer moves past (a ConnectX send
    // WQE takes one 64-byte basic block or more; pib-hca's, one slot).
    uint32_t slots = 1;
    // The index a receive WQE's completion names: its queue's count
    // (pib-hca), or the slot a ConnectX SRQ's free list gave it.
    uint16_t completionIndex = 0;
};

class WqeFormat {
  public:
    virtual ~WqeFormat() = default;

    // Send WQE `index` of `qp`: PIB_WC_SUCCESS, or the status the WQE
    // completes with (it could not be read, or is malformed).
    virtual uint8_t readSend(const QueuePair &qp, uint32_t index, Wqe &out) = 0;
    // Receive WQE `index` (the queue's count of WQEs taken) of `srq`, or
    // of the QP's RQ when `srq` is null, which the caller takes when this
    // returns true: a format whose SRQ is a free list rather than a ring
    // (a ConnectX's) follows the list here. False when it could not be
    // read; otherwise *status is PIB_WC_SUCCESS or what a malformed WQE
    // completes with.
    virtual bool readReceive(const QueuePair &qp, SharedReceiveQueue *srq, uint32_t index, Wqe &out,
                             uint8_t *status) = 0;
    // The work request ID of a WQE the QP's error flushes (0 when it
    // cannot be read).
    virtual uint64_t sendWrId(const QueuePair &qp, uint32_t index) = 0;
    virtual uint64_t receiveWrId(const QueuePair &qp, uint32_t index) = 0;
    // The slots send WQE `index` takes, as a flush passes it (1 when it
    // cannot be read).
    virtual uint32_t sendSlots(const QueuePair &qp, uint32_t index) = 0;
    // Where the driver posts receive WQEs by writing a counter in memory
    // rather than ringing a doorbell (a ConnectX's doorbell record), the
    // counter is read here, before the queue is looked at.
    virtual void pollReceiveProducer(QueuePair &qp) = 0;
    // The same for an SRQ.
    virtual void pollSrqProducer(SharedReceiveQueue &srq) = 0;
    // True when receives are posted by that counter alone: nothing rings,
    // so a QP in the error state reads it again now and then to flush
    // what is posted there (flush.cc).
    virtual bool receivesPostedByRecord() const = 0;
    // The page addresses of a REG_MR page list read as `bytes`, from
    // where the WQE's one scatter/gather entry pointed (a ConnectX UMR's
    // translation list, which the requester reads through its L_Key).
    virtual void pageListEntries(std::span<const uint8_t> bytes,
                                 std::vector<uint64_t> &pages) const = 0;
    // The same for a REG_MR of an indirect key (a ConnectX KLM list), into
    // u.layout: null, or why the list makes none.
    virtual const char *indirectEntries(std::span<const uint8_t> bytes,
                                        IndirectUpdate &u) const = 0;
    // Whether the personality's responder takes IBA 1.5's FLUSH and ATOMIC
    // WRITE (pib-hca's does; the stock mlx5 drivers know neither, so a
    // ConnectX refuses them as opcodes it does not know).
    virtual bool answersPlacementOps() const = 0;
};

// The bytes a WQE's data amounts to: its inline data, or what its
// scatter/gather list names (room, for a receive).
uint64_t dataLength(const Wqe &wqe);

// The format the data path reads WQEs in: the front end's, which it
// installs (use()) as the device is built, before any QP exists. Every
// WQE the transports take passes here, whatever the personality, and is
// traced here (wqe_fetched, recv_wqe_fetched).
class WqeFormatSlot final : public WqeFormat {
  public:
    explicit WqeFormatSlot(const Host &host) : host_(host) {}
    void use(WqeFormat &format) { format_ = &format; }

    uint8_t readSend(const QueuePair &qp, uint32_t index, Wqe &out) override;
    bool readReceive(const QueuePair &qp, SharedReceiveQueue *srq, uint32_t index, Wqe &out,
                     uint8_t *status) override;
    uint64_t sendWrId(const QueuePair &qp, uint32_t index) override {
        return format_->sendWrId(qp, index);
    }
    uint64_t receiveWrId(const QueuePair &qp, uint32_t index) override {
        return format_->receiveWrId(qp, index);
    }
    bool answersPlacementOps() const override { return format_->answersPlacementOps(); }
    uint32_t sendSlots(const QueuePair &qp, uint32_t index) override {
        return format_->sendSlots(qp, index);
    }
    void pollReceiveProducer(QueuePair &qp) override { format_->pollReceiveProducer(qp); }
    void pollSrqProducer(SharedReceiveQueue &srq) override { format_->pollSrqProducer(srq); }
    bool receivesPostedByRecord() const override { return format_->receivesPostedByRecord(); }
    void pageListEntries(std::span<const uint8_t> bytes,
                         std::vector<uint64_t> &pages) const override {
        format_->pageListEntries(bytes, pages);
    }
    const char *indirectEntries(std::span<const uint8_t> bytes, IndirectUpdate &u) const override {
        return format_->indirectEntries(bytes, u);
    }

  private:
    const Host &host_;
    WqeFormat *format_ = nullptr;
};

} // namespace pib
