// SPDX-License-Identifier: GPL-2.0-or-later
// The reader of ConnectX work queue entries (docs/mlx5.md §9, §10), the
// ConnectX personality's WqeFormat. A QP has one buffer: its RQ first,
// slots of 2^log_rq_stride bytes, then its SQ, 64-byte basic blocks a
// send WQE takes one or more of. The driver's WQE counters are in the
// QP's doorbell record: the device reads the RQ's there whenever it looks
// for a receive WQE, and the SQ's when a doorbell rings (mlx5_queue_pairs).
// An SRQ's WQEs are a free list: each names the slot of the next, and the
// device takes them in that order from slot 0; its counter is in the
// SRQ's doorbell record.
#pragma once

#include <cstdint>
#include <vector>

#include "host.hh"
#include "mlx5_umr.hh"
#include "mtt.hh"
#include "objects.hh"
#include "wqe_format.hh"

namespace pib::mlx5 {

namespace wqe {
// A send queue's basic block: counters, the CQE's wqe_counter and the
// driver's doorbell count these.
constexpr uint32_t kLogBasicBlock = 6;
constexpr uint32_t kBasicBlock = 1u << kLogBasicBlock;
// A send WQE takes at most 16 basic blocks.
constexpr uint32_t kMaxBlocks = 16;
// The 16-bit WQE counters of the doorbell record and the CQE.
constexpr uint32_t kCounterMask = 0xffff;
} // namespace wqe

class WqeReader final : public WqeFormat {
  public:
    WqeReader(const Host &host, const Mtt &mtt, uint32_t maxInlineData)
        : host_(host), mtt_(mtt), maxInlineData_(maxInlineData) {}

    uint8_t readSend(const QueuePair &qp, uint32_t index, Wqe &out) override;
    bool readReceive(const QueuePair &qp, SharedReceiveQueue *srq, uint32_t index, Wqe &out,
                     uint8_t *status) override;
    // A ConnectX CQE names a WQE by its counter, not a work request ID:
    // the driver keeps those.
    uint64_t sendWrId(const QueuePair &, uint32_t) override { return 0; }
    uint64_t receiveWrId(const QueuePair &, uint32_t) override { return 0; }
    uint32_t sendSlots(const QueuePair &qp, uint32_t index) override;
    void pollReceiveProducer(QueuePair &qp) override;
    void pollSrqProducer(SharedReceiveQueue &srq) override;
    bool receivesPostedByRecord() const override { return true; }
    // MTT entries: big-endian page addresses with enables in the low bits.
    void pageListEntries(std::span<const uint8_t> bytes,
                         std::vector<uint64_t> &pages) const override {
        umr::translationEntries(bytes, pages);
    }
    const char *indirectEntries(std::span<const uint8_t> bytes, IndirectUpdate &u) const override {
        return umr::indirectEntries(bytes, u);
    }
    // mlx5_ib and libmlx5 offer neither FLUSH nor ATOMIC WRITE (docs/mlx5.md §11).
    bool answersPlacementOps() const override { return false; }

    // The SQ's counter in `qp`'s doorbell record, as a slot count near
    // its consumer; nullopt when the record cannot be read or the count
    // is more than a ring ahead (the driver's error, reported).
    std::optional<uint32_t> sendProducer(const QueuePair &qp) const;

  private:
    // Which segments follow the control segment.
    struct Layout {
        uint8_t opcode = 0; // PIB_WR_*, or kWrNop
        bool raddr = false;
        bool atomic = false;
        bool datagram = false;
        bool umr = false; // a UMR WQE: mlx5_umr.hh
        bool xrc = false; // an XRC INI QP's: the XRC segment names the remote SRQ
    };
    static bool sendLayout(uint8_t qpType, uint8_t mlx5Opcode, Layout &layout);
    static bool connectedLayout(uint8_t mlx5Opcode, bool reliable, bool connected, Layout &layout);
    static void clear(Wqe &out);
    // Basic block `block` of the SQ (counted from the ring's start).
    bool fetchBlock(const QueuePair &qp, uint32_t block, uint8_t *to) const;
    // The control segment's DS count of send WQE `index`; 0 when its first
    // block cannot be read.
    uint32_t dsCount(const QueuePair &qp, uint32_t index);
    uint8_t decodeSend(const QueuePair &qp, uint32_t index, const Layout &layout, size_t used,
                       Wqe &out);
    // A counter of the doorbell record at `record` (of `owner`, its
    // `what`) as a slot count at most `size` ahead of `consumer`.
    struct Counter {
        const char *what;
        uint32_t owner;
        uint64_t record;
        uint32_t offset;
    };
    std::optional<uint32_t> counterAhead(const Counter &c, uint32_t consumer, uint32_t size) const;
    // A receive WQE's data segments from byte `from` of raw_, up to the
    // terminator.
    void scatterList(size_t from, Wqe &out) const;
    uint8_t decodeDmaCopy(const QueuePair &qp, uint32_t index, size_t used, Wqe &out) const;
    uint8_t dataSegments(const QueuePair &qp, uint32_t index, size_t from, size_t used,
                         Wqe &out) const;
    bool readSrqWqe(const QueuePair &qp, SharedReceiveQueue &srq, Wqe &out);

    const Host &host_;
    const Mtt &mtt_;
    const uint32_t maxInlineData_;
    std::vector<uint8_t> raw_; // the last WQE read, reused
};

} // namespace pib::mlx5
