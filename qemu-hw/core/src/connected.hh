// SPDX-License-Identifier: GPL-2.0-or-later
// The state of a connected QP (RC, UC) beyond its attributes: what the
// requester has sent and not yet completed, and where the responder is in
// the request stream (IBA 9.7).
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <memory>
#include <optional>
#include <vector>

#include "core_operations.hh"
#include "indirect_key.hh"
#include "key_update.hh"
#include "page_faults.hh"
#include "pib_hw.h"

namespace pib {

// AETH syndromes (IBA 9.3.5, table 43): the top three bits say ACK, RNR
// NAK or NAK; the low five the credit count, RNR timer or NAK code.
namespace aeth {
inline constexpr uint8_t kAck = 0;
inline constexpr uint8_t kRnrNak = 1;
inline constexpr uint8_t kNak = 3;
inline constexpr uint8_t kNoCredits = 0x1f; // ACK without end-to-end flow control
inline constexpr uint8_t kPsnSequence = 0;  // NAK codes
inline constexpr uint8_t kInvalidRequest = 1;
inline constexpr uint8_t kRemoteAccess = 2;
inline constexpr uint8_t kRemoteOperational = 3;
inline constexpr uint8_t syndrome(uint8_t kind, uint8_t low) {
    return static_cast<uint8_t>(kind << 5 | (low & 0x1f));
}
} // namespace aeth

// Bytes in an IBA MTU code (1: 256 … 5: 4096); an invalid code counts as 256.
inline uint32_t mtuBytes(uint8_t code) {
    return code >= 1 && code <= 5 ? 128u << code : 256;
}

// PSNs are 24-bit sequence numbers compared within half their space.
inline uint32_t psnAdd(uint32_t psn, uint32_t n) {
    return (psn + n) & 0xffffff;
}
// Negative when a comes before b.
inline int32_t psnDiff(uint32_t a, uint32_t b) {
    return static_cast<int32_t>((a - b) << 8) >> 8;
}

// Where a DCI's WQE goes: the DCT's path, number and access key.
struct DcAddress {
    pib_av av{};
    uint32_t dct = 0;
    uint64_t key = 0;
};

// A send WQE the requester has fetched, kept until it completes. The
// device copies what it needs from the WQE; the data stays in guest memory
// and is read again if a packet must be resent.
struct SendWqe {
    uint32_t index = 0; // SQ slot count at fetch: the CQE's wqe_index
    uint32_t slots = 1; // SQ slots it takes (wqe_format.hh)
    uint64_t wrId = 0;
    uint8_t opcode = 0; // PIB_WR_*
    uint8_t flags = 0;  // PIB_WQE_*
    uint32_t imm = 0;   // wire order
    uint64_t remoteAddr = 0;
    uint32_t rkey = 0;
    uint64_t swapAdd = 0;
    uint64_t compare = 0;
    uint8_t flushPlacement = 0;      // FLUSH: PIB_FLUSH_GLOBAL, PIB_FLUSH_PERSISTENT
    uint8_t flushSelectivity = 0;    // FLUSH: PIB_FLUSH_RANGE or PIB_FLUSH_MR
    pib_wqe_reg_mr reg{};            // REG_MR
    std::vector<uint64_t> pages;     // REG_MR: its page list, when the WQE held it (wqe_format.hh)
    std::optional<KeyUpdate> update; // REG_MR: a general key update (key_update.hh)
    std::optional<bool> remoteInvalidate;   // REG_MR: a peer may free the key (wqe_format.hh)
    std::optional<IndirectUpdate> indirect; // REG_MR: of an indirect key (indirect_key.hh)
    pib_wqe_bind_mw bind{};                 // BIND_MW
    uint32_t remoteSrqn = 0;                // XRC INI: the XRC SRQ its XRCETH names
    DcAddress dc;                           // DCI: the DCT it goes to
    uint16_t stream = 0;                    // DCI: its stream (dci_streams.hh)
    bool streamError = false;               // DCI: its error fails its stream only
    std::vector<pib_wqe_data> sges;
    std::vector<uint8_t> inlineData;
    uint32_t length = 0;                  // bytes of the message
    uint32_t firstPsn = 0;                // of its first request (READ: first response) packet
    uint32_t packets = 0;                 // PSNs it uses
    uint32_t sentPackets = 0;             // of `packets`, sent (since the last rewind)
    uint32_t received = 0;                // READ: response bytes placed so far
    uint32_t footprint = 0;               // bytes it holds of the device's budget
    bool acked = false;                   // RC: every packet acknowledged (or answered)
    uint8_t localStatus = PIB_WC_SUCCESS; // a local error completes it so
    uint8_t vendorErr = 0;                // with this vendor_err (an injected completion)
    // READ: where its last request asked the responder to answer from,
    // the PSN of the latest response, and whether a response since that
    // request came before the one ahead of it (the answer started over).
    uint32_t askedFrom = 0;
    uint32_t latestResponse = 0;
    bool answerRestarted = false;

    bool isAtomic() const {
        return opcode == PIB_WR_ATOMIC_CMP_AND_SWP || opcode == PIB_WR_ATOMIC_FETCH_AND_ADD;
    }
    // IBA 1.5's FLUSH and ATOMIC WRITE: answered by a READ response
    // without data.
    bool isAnsweredEmpty() const { return opcode == PIB_WR_FLUSH || opcode == PIB_WR_ATOMIC_WRITE; }
    // Answered by a response rather than an ACK: one request packet, and
    // one of max_rd_atomic while unanswered.
    bool isReadOrAtomic() const {
        return opcode == PIB_WR_RDMA_READ || isAtomic() || isAnsweredEmpty();
    }
    // The bytes its READ responses bring (none but a READ's).
    uint32_t responseBytes() const { return opcode == PIB_WR_RDMA_READ ? length : 0; }
    // Done by the device itself, in send queue order: no packets.
    bool isLocal() const {
        return opcode == PIB_WR_LOCAL_INV || opcode == PIB_WR_REG_MR || opcode == PIB_WR_BIND_MW ||
               opcode == kWrNop || opcode == kWrDmaCopy;
    }
    uint32_t lastPsn() const { return psnAdd(firstPsn, packets - 1); }
};

// What completing a send WQE needs of it, once it left the window.
struct FinishedWqe {
    uint32_t index = 0;
    uint64_t wrId = 0;
    uint8_t opcode = 0;
    uint8_t flags = 0;
    uint8_t vendorErr = 0;
    uint32_t length = 0;
    bool readOrAtomicSent = false; // a READ or atomic request that went out
    uint16_t stream = 0;           // DCI: its stream
    bool streamError = false;      // DCI: its error fails its stream only
};

// The send WQEs a requester fetched and has not completed, oldest first.
// Each lives in an object of its own, which stays where it is while the
// window changes (the completer keeps pointers into it) and goes back to
// the device's pool when the WQE completes (outstanding_memory.hh).
class OutstandingWqes {
    using Queue = std::deque<std::unique_ptr<SendWqe>>;

  public:
    // Walks the WQEs themselves, not their owners.
    template <class At, class Wqe> class Iterator {
      public:
        explicit Iterator(At at) : at_(at) {}
        Wqe &operator*() const { return **at_; }
        Iterator &operator++() {
            ++at_;
            return *this;
        }
        bool operator==(const Iterator &) const = default;

      private:
        At at_;
    };

    bool empty() const { return wqes_.empty(); }
    size_t size() const { return wqes_.size(); }
    SendWqe &front() const { return *wqes_.front(); }
    SendWqe &back() const { return *wqes_.back(); }
    void push(std::unique_ptr<SendWqe> w) { wqes_.push_back(std::move(w)); }
    std::unique_ptr<SendWqe> pop() {
        std::unique_ptr<SendWqe> w = std::move(wqes_.front());
        wqes_.pop_front();
        return w;
    }
    void clear() { wqes_.clear(); }
    auto begin() { return Iterator<Queue::iterator, SendWqe>(wqes_.begin()); }
    auto end() { return Iterator<Queue::iterator, SendWqe>(wqes_.end()); }
    auto begin() const { return Iterator<Queue::const_iterator, const SendWqe>(wqes_.begin()); }
    auto end() const { return Iterator<Queue::const_iterator, const SendWqe>(wqes_.end()); }

  private:
    Queue wqes_;
};

struct RequesterState {
    OutstandingWqes outstanding; // fetched, not completed; in order
    uint32_t psn = 0;            // PSN of the next new request packet
    uint32_t unackedPsn = 0;     // the oldest PSN not acknowledged: the send window's start
    unsigned readsInFlight = 0;  // READ and atomic requests unanswered
    unsigned retriesLeft = 0;    // for the local ACK timeout
    unsigned rnrRetriesLeft = 0; // 7 = infinite
    uint64_t ackDeadline = 0;    // local ACK timeout; 0 when not armed
    uint64_t cableStallFrom = 0; // first ACK timeout the cable excused since an answer; 0: none
    uint64_t retrySpentAt = 0;   // when an ACK timeout last spent a retry; 0: none since an answer
    uint64_t rnrDeadline = 0;    // resend after an RNR NAK; 0 when not waiting
    // The PSN the last RNR NAK refused, until the peer answers something
    // new: the requests sent behind it draw a sequence NAK naming it.
    std::optional<uint32_t> rnrNakedPsn;
    // Where the port's cable stood (Cables::sentMark): what the port had sent
    // when the ACK timer started, and what had arrived for it at the last
    // ACK timeout since an answer (Requester::cableStalled).
    uint64_t sentMark = 0;
    std::optional<uint64_t> arrivedMark;
    // An ACK timeout rewound requests that had gone out, and they are not
    // all answered: the timer runs on even while a full port holds their
    // resends back (timerRuns), or a port that never empties again would
    // hold the QP for ever.
    bool resending = false;
    uint64_t heldBytes = 0; // the footprints of `outstanding`
    // Some WQE of `outstanding` may have packets not sent: a rewind, a
    // full window or a full port. When false, every one went out, and a
    // doorbell need not walk them (it would, per message, the whole window).
    bool unsentHeld = false;
    // A loaded QP in SQD: the send queue index up to which it had started
    // WQEs before the save, which it fetches again and sends (and no
    // others); any MODIFY_QP ends it.
    std::optional<uint32_t> refetchUntil;
    // A WQE's buffer reached a page its key does not map: the send queue
    // fetches no new WQE until the driver resumes the fault (a saved state
    // has none: the WQE faults again once loaded).
    PageFaultWait fault;

    // The QP got a new retry_cnt (or the peer answered something new:
    // answered()): the timeout's retries start over, and so does the grace
    // a stalled cable gets.
    void startRetriesOver(unsigned retryCount) {
        retriesLeft = retryCount;
        cableStallFrom = 0;
        retrySpentAt = 0;
        arrivedMark.reset();
        rnrNakedPsn.reset();
    }

    // The peer answered something new: both retry counts start over. The
    // RNR retries, like the timeout's, count NAKs without progress between
    // them (IBA 9.7.5.2.8), not the connection's: a responder that is
    // sometimes late to post its receives (one that answers each message
    // and then posts the next receive) must not end a long connection.
    void answered(unsigned retryCount, unsigned rnrRetry) {
        startRetriesOver(retryCount);
        rnrRetriesLeft = rnrRetry;
    }

    // Everything up to `psn` was answered: the send window moves past it.
    // True when `psn` moves the window on.
    bool acknowledged(uint32_t psn) {
        const uint32_t next = psnAdd(psn, 1);
        if (psnDiff(next, unackedPsn) <= 0)
            return false;
        unackedPsn = next;
        return true;
    }
    // Whether a request that went out is still unanswered. Only then does
    // the local ACK timer run: it times packets on the wire (IBA
    // 9.7.6.1.3), and work a full port holds back has not left yet.
    bool awaitsAnswer() const {
        for (const SendWqe &w : outstanding) {
            if (w.packets == 0 || w.acked || w.localStatus != PIB_WC_SUCCESS)
                continue; // nothing, or nothing more, to answer
            if (w.sentPackets == 0)
                return false; // nothing from here on went out
            if (w.isReadOrAtomic() || psnDiff(psnAdd(w.firstPsn, w.sentPackets), unackedPsn) > 0)
                return true;
        }
        return false;
    }
    // Whether some work is not answered yet, sent or not.
    bool unanswered() const {
        for (const SendWqe &w : outstanding)
            if (w.packets != 0 && !w.acked && w.localStatus == PIB_WC_SUCCESS)
                return true;
        return false;
    }
    // Whether the local ACK timer runs.
    bool timerRuns() const { return awaitsAnswer() || (resending && unanswered()); }
};

// RC requesters keep at most this much data unacknowledged per QP (in
// packets at least kMinSendWindow), so that a doorbell for many long
// messages does not put all of them on the link at once: the link and the
// caches hold one window. It is larger than what a link carries in one
// round trip between two guests under TCG (several ms), so it never
// limits their bandwidth.
inline constexpr uint32_t kSendWindowBytes = 2 << 20;
inline constexpr uint32_t kMinSendWindow = 64;
inline uint32_t sendWindowPackets(uint32_t mtu) {
    return std::max(kMinSendWindow, kSendWindowBytes / mtu);
}
// Every this many PSNs a request packet asks for an ACK (besides the last
// of each message), so ACKs open the window before it is full.
inline uint32_t ackRequestInterval(uint32_t mtu) {
    return sendWindowPackets(mtu) / 4;
}

// No SRQ: the XRC SRQ number of an XRC TGT QP between messages.
inline constexpr uint32_t kNoSrq = UINT32_MAX;

// How a READ, atomic, FLUSH or ATOMIC WRITE was answered, and so how a
// duplicate of it is: from memory as it is now (a READ), or again
// without running it again.
enum class AnswerKind : uint8_t {
    kRead,   // READ responses with the data
    kAtomic, // an atomic ACK with the original value
    kEmpty,  // FLUSH, ATOMIC WRITE: one READ response without data
};
inline constexpr uint8_t kAnswerKinds = 3;

// A READ-like request the responder executed, kept so a duplicate of it
// is answered again (IBA 9.7.5.1.3).
struct ReplayEntry {
    uint32_t psn = 0;
    uint32_t packets = 0; // response PSNs
    AnswerKind answer = AnswerKind::kRead;
    uint64_t va = 0;
    uint32_t rkey = 0;
    uint32_t length = 0;
    uint32_t pdn = 0;          // READ: the PD its R_Key is checked in
    uint64_t original = 0;     // atomic: the value before the operation
    uint32_t xrcSrqn = kNoSrq; // XRC TGT: the XRC SRQ the request named (its PD is pdn)
};

// Something the responder owes the requester. Replies leave in the order
// of the requests that asked for them (IBA 9.7.5.2): READ responses from
// packet `next` on, an atomic's ACK, or an ACK or NAK with `syndrome`
// for `psn`.
struct Reply {
    enum class Kind : uint8_t { kRead, kAtomic, kAck } kind = Kind::kAck;
    ReplayEntry entry;  // kRead, kAtomic
    uint32_t next = 0;  // kRead: the next response packet, 0-based
    bool again = false; // kRead, kAtomic: the answer to a duplicate request
    // kRead: the response packets before this one went once already (all
    // of them for a duplicate's answer whose first was over).
    uint32_t answered = 0;
    uint32_t psn = 0; // kAck
    uint8_t syndrome = 0;
    // kAck: goes on its own, whatever is queued behind it (a positive ACK
    // is otherwise replaced by the ACK or NAK after it, which implies it).
    bool alone = false;

    bool readOrAtomic() const { return kind != Kind::kAck; }
};

struct ResponderState {
    uint32_t expectedPsn = 0;
    uint32_t msn = 0;         // messages completed (AETH)
    bool nakSent = false;     // a PSN sequence error NAK awaits the expected PSN
    bool established = false; // COMM_EST was raised
    // The message in progress.
    enum class InMessage : uint8_t { kNone, kSend, kWrite } in = InMessage::kNone;
    bool haveWqe = false; // SEND: a receive WQE is claimed
    uint64_t wrId = 0;
    uint16_t wqeIndex = 0;
    std::vector<pib_wqe_data> sges;
    uint32_t received = 0;           // bytes of this message so far
    uint8_t status = PIB_WC_SUCCESS; // UC: a local error drops the message
    uint64_t writeVa = 0;
    uint32_t writeRkey = 0;
    uint32_t writeLength = 0;
    // XRC TGT: the XRC SRQ the request in progress goes to, and its PD.
    uint32_t xrcSrqn = kNoSrq;
    uint32_t xrcPdn = 0;
    std::deque<ReplayEntry> replay; // at most max_dest_rd_atomic, oldest first
    // What is owed and not yet sent: at most max_dest_rd_atomic READs and
    // atomics, and one ACK (ACKs are cumulative: a later one replaces it).
    std::deque<Reply> replies;
    // A request reached a page its key does not map: RNR NAKed while the
    // driver maps it.
    PageFaultWait fault;
};

} // namespace pib
