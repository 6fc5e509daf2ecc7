// SPDX-License-Identifier: GPL-2.0-or-later
// The requester of the connected transports (RC, UC, XRC INI) and its
// completer: send WQEs fetched and cut into request packets
// (requester.cc); ACKs, NAKs, READ responses and atomic ACKs completing
// them in order, the local ACK timeout and RNR waits (completer.cc).
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "outstanding_memory.hh"
#include "qp_timers.hh"
#include "transport.hh"

namespace pib {

class Requester final : TransportRole {
  public:
    explicit Requester(const TransportParts &parts) : TransportRole(parts) {}

    // Resends what a rewind asked for, then sends new work, as far as the
    // window, the budget and the port allow.
    void send(QueuePair &qp);
    // A response packet for `qp` (ACK, NAK, READ response, atomic ACK).
    void onResponse(QueuePair &qp, const iba::Packet &packet);
    // `qp`'s ACK timer or RNR wait ran out.
    void timerExpired(QueuePair &qp);
    // The link lost what was in flight, a move or the switch's discards
    // (DataPath::resendWhatWasLost): sends again
    // from the oldest PSN not answered, spending no retry.
    void resendAfterLoss(QueuePair &qp);
    // Raises SQ drained once nothing `qp` started is in flight.
    void notifyIfSqDrained(QueuePair &qp);
    // The outstanding WQEs, whose memory the device's budget counts
    // (outstanding_memory.hh): the head leaves, or all go.
    FinishedWqe takeHeadWqe(QueuePair &qp);
    void releaseWqes(QueuePair &qp);

  private:
    uint8_t fetchSendWqe(QueuePair &qp, uint32_t index, SendWqe &w);
    uint8_t checkLocalBuffers(QueuePair &qp, SendWqe &w, uint64_t *length);
    uint8_t readTranslationList(const QueuePair &qp, SendWqe &w, const pib_wqe_data &list);
    uint8_t takeEmptyAnswered(const QueuePair &qp, SendWqe &w, const Wqe &wqe);
    void runLocalOperation(QueuePair &qp, SendWqe &w);
    uint8_t copyLocal(const QueuePair &qp, SendWqe &w);
    SendWqe &spareWqe();
    void holdWqe(QueuePair &qp);
    void armAckTimerIfIdle(QueuePair &qp);
    // kPageFault: a packet's data reached a page its key no longer maps
    // (on-demand paging): the WQE waits, from that packet, for the fault.
    enum class SendProgress { kAllSent, kWindowFull, kPaused, kFailed, kPageFault };
    SendProgress sendRequestPackets(QueuePair &qp, SendWqe &w);
    bool sendAll(QueuePair &qp, SendWqe &w);
    SendProgress sendRequestPacket(QueuePair &qp, SendWqe &w, iba::Packet &p, uint32_t offset,
                                   uint32_t len);
    void stopSending(QueuePair &qp, SendProgress why);
    static bool fetchesNew(const QueuePair &qp);
    // DCIs (docs/mlx5.md §15).
    static bool reachesDct(const QueuePair &qp, const DcAddress &to);
    void connectDci(QueuePair &qp, const DcAddress &to);
    uint8_t streamStatus(QueuePair &qp, SendWqe &w, uint8_t status);
    void restartAfterStreamError(QueuePair &qp, uint16_t stream);
    std::optional<uint16_t> nakedStream(QueuePair &qp, uint32_t psn, uint8_t status);
    void disconnectDci(QueuePair &qp, const char *why);
    void rewind(QueuePair &qp, uint32_t psn);
    uint32_t resendFrom(const QueuePair &qp) const;

    // The completer (completer.cc).
    uint64_t ackTimeoutNs(const QueuePair &qp) const;
    static uint64_t rnrDelayNs(uint8_t code);
    void restartAckTimer(QueuePair &qp);
    // restartAckTimer() times what the port sent by now; rearmAckTimer()
    // starts the timer again for what it timed already.
    void rearmAckTimer(QueuePair &qp);
    // How long ACK timeouts may be excused while the switch has not taken
    // the port's packets (cableStalled): a host that stalls the switch
    // process longer than this is broken, not busy.
    static constexpr uint64_t kCableStallGraceNs = 2'000'000'000;
    bool cableStalled(QueuePair &qp, uint64_t now);
    // ACK timeouts closer together than this resend but spend no retry
    // (spendsRetry): RETRY_EXC_ERR takes retry_cnt x this at the least.
    static constexpr uint64_t kRetrySpacingNs = 500'000'000;
    bool spendsRetry(QueuePair &qp, uint64_t now);
    void completeInOrder(QueuePair &qp);
    void completeHead(QueuePair &qp, uint8_t status);
    void ackUpTo(QueuePair &qp, uint32_t psn);
    bool onAcknowledge(QueuePair &qp, const iba::Packet &packet);
    bool staleNak(const QueuePair &qp, uint32_t psn);
    void onRnrNak(QueuePair &qp, uint32_t psn, uint8_t timerCode);
    bool onNak(QueuePair &qp, uint32_t psn, uint8_t code);
    bool onAtomicAcknowledge(QueuePair &qp, const iba::Packet &packet);
    void readResponse(QueuePair &qp, const iba::Packet &packet);

    std::vector<uint8_t> translationBytes_; // a UMR's translation list, read
    std::vector<uint8_t> copyBuffer_;       // a DMA copy's bytes on their way
    // The last WQE fetched reached a page its key does not map, and the
    // QP waits for the driver (page_faults.hh): it stays in the queue.
    bool fetchFaulted_ = false;
    SendWqePool pool_;
    std::unique_ptr<SendWqe> spare_; // fetched into, not yet outstanding
};

} // namespace pib
