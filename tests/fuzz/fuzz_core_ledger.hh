// SPDX-License-Identifier: GPL-2.0-or-later
// fuzz-core's completion oracle: every WQE the harness posts carries a
// wr_id naming its queue and its sequence number there, and every CQE it
// polls is booked against that WQE. A CQE must name a WQE that was posted,
// on the CQ and QP of that WQE's queue, and no WQE completes twice; once
// every QP has been flushed at the end, each WQE the device consumed has
// exactly one CQE (an unsignaled send that succeeded none).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

#include "pib_hw.h"

namespace pib::fuzz {

// The attacker's work queues.
enum class Queue : uint8_t {
    kRcSend,
    kRcRecv,
    kUcSend,
    kUcRecv,
    kSrqQpSend,
    kXrcIniSend,
    kUdSend,
    kUdRecv,
    kSmiSend,
    kSmiRecv,
    kGsiSend,
    kGsiRecv,
    kSrq,
    kXrcSrq,
    kCount
};

class Ledger {
  public:
    // Queue `q` completes on CQ `cqn`, its CQEs naming QP `qpn`; its ring
    // has `ringSize` slots.
    void open(Queue q, uint32_t cqn, uint32_t qpn, uint32_t ringSize);

    // A new WQE of `q`: its wr_id. A signaled one (any receive) must
    // complete once consumed; an unsignaled send completes only in error.
    uint64_t post(Queue q, bool mustComplete);
    // Whether `q`'s ring has a free slot: the device has taken the WQE
    // that was last in it.
    bool hasRoom(Queue q) const;
    // The producer count the device keeps for `q` (its next WQE's slot).
    uint32_t producerCount(Queue q) const;
    uint64_t posted(Queue q) const { return books_[index(q)].cqes.size(); }
    // The device counts `q` from 0 again (its QP was reset, empty).
    void restartRing(Queue q);
    // A reset dropped the WQEs of `q` so far without completions: each may
    // now have no CQE (IBA 10.3.1, a QP reset straight from RTS).
    void excuseUncompleted(Queue q);
    // `q` (an SRQ) was destroyed, and its CQ polled since: the WQEs from
    // sequence number `consumed` on were never taken, and must never
    // complete; those before it have completed already (a message in
    // progress is cut, its WQE flushed), and none may complete again.
    void abandon(Queue q, uint64_t consumed);
    // RESIZE_SRQ: the device counts `q` from WQE `base` (a sequence
    // number) in a ring of `ringSize` slots.
    void rebase(Queue q, uint64_t base, uint32_t ringSize);
    // The oldest WQE of `q` without a CQE (the base of an SRQ's resize).
    uint64_t oldestUncompleted(Queue q) const;

    // A CQE polled from CQ `cqn`.
    void onCqe(uint32_t cqn, const pib_cqe &cqe);
    // At the end, with every QP flushed: the first `consumed` WQEs of `q`
    // have their CQEs, the others none.
    void checkSettled(Queue q, uint64_t consumed) const;

    // Completions may legitimately be lost from now on (a CQ overran, the
    // input rang a doorbell with a count of its own): the books stop.
    void stopChecking() { checking_ = false; }
    bool checking() const { return checking_; }

  private:
    enum class Due : uint8_t { kOne, kAtMostOne, kNone };
    struct Book {
        const char *name = "";
        bool send = false;
        uint32_t cqn = UINT32_MAX;
        uint32_t qpn = UINT32_MAX;
        uint32_t ringSize = 0;
        uint64_t ringStart = 0;    // the WQE the device counts as 0
        uint64_t retired = 0;      // the device has taken every WQE before it
        uint64_t sealed = 0;       // WQEs before it belong to a destroyed SRQ
        std::vector<uint8_t> cqes; // per WQE: CQEs seen
        std::vector<Due> due;      // per WQE: CQEs it must have once consumed
    };
    static size_t index(Queue q) { return static_cast<size_t>(q); }
    void book(Book &b, uint64_t seq, uint32_t cqn, const pib_cqe &cqe);

    std::array<Book, static_cast<size_t>(Queue::kCount)> books_{};
    bool checking_ = true;
};

} // namespace pib::fuzz
