// SPDX-License-Identifier: GPL-2.0-or-later
// The data path: every packet the device sends or receives. The datagram
// transport (datagram.cc), the connected transports' requester
// (requester.cc), completer (completer.cc) and responder (responder.cc)
// with what they share (connected.cc), and the QP timers (completer.cc).
// It reads WQEs through the WqeReader, guest memory through MemoryAccess,
// reports through the EventWriter, and sends through the Scheduler, which
// bounds the work of each event; the objects it works on are created and
// destroyed by the command processor.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "event_writer.hh"
#include "host.hh"
#include "injection.hh"
#include "memory.hh"
#include "memory_keys.hh"
#include "object_tables.hh"
#include "outstanding_memory.hh"
#include "packet.hh"
#include "pib_core.h"
#include "pib_hw.h"
#include "port_agents.hh"
#include "ports.hh"
#include "scheduler.hh"
#include "wqe_reader.hh"

namespace pib {

class DataPath final : public SubnetSender, public ScheduledEngine {
  public:
    DataPath(const Host &host, ObjectTables &objects, Ports &ports, EventWriter &events,
             MemoryAccess &memory, WqeReader &wqes, Scheduler &scheduler,
             ArmedInjections &injections, OutstandingMemory &outstanding)
        : host_(host), objects_(objects), ports_(ports), events_(events), memory_(memory),
          wqes_(wqes), scheduler_(scheduler), injections_(injections), outstanding_(outstanding) {}

    // A packet arrived on a port.
    void portReceive(unsigned port, std::span<const uint8_t> packet);
    // A 64-bit write to doorbell page `page` at `offset` (BAR2).
    void doorbell(uint32_t page, uint32_t offset, uint64_t value);
    // The host's timer reached the deadline the data path asked for.
    void timerExpired();
    // The device has one timer: the data path arms it for the earliest of
    // its QPs' deadlines and `other` (the links' Polling retries, 0 for
    // none), which rearmTimer() reads again after it changed.
    void setOtherDeadline(std::function<uint64_t()> other) { otherDeadline_ = std::move(other); }
    void rearmTimer() { armDeviceTimer(); }
    // `qp` entered state `next` from `cur` by MODIFY_QP with `mask`:
    // its transport starts over, loads its PSNs, flushes or starts sending.
    void qpStateEntered(QueuePair &qp, uint8_t cur, uint8_t next, uint32_t mask);
    // `qp` is about to be destroyed: it has no timer any more, and a
    // receive WQE it took from an SRQ completes.
    void forgetQp(QueuePair &qp);
    // XRC SRQ `srqn` is about to be destroyed: no message goes on into it.
    void forgetXrcSrq(uint32_t srqn);
    // Nothing in flight, no timer, no postponed work: the power-on state.
    void reset();
    // From SubnetSender: a MAD the port's agents send from QP0.
    void sendSubnetPacket(unsigned port, iba::Packet &packet) override;
    // From ScheduledEngine: postponed work goes on, a looped-back packet
    // arrives.
    void resume(QueuePair &qp) override;
    void receiveLooped(unsigned port, const iba::Packet &packet) override;

  private:
    // Test facilities (injection.hh): the status an armed injection gives
    // send WQE `index` of `qp` (PIB_WC_SUCCESS: none), and whether a
    // packet of `qp` leaves (false: dropped; a corrupted one leaves).
    uint8_t injectedCompletion(const QueuePair &qp, uint32_t index, uint8_t *vendorErr);
    // Counts one transport event of `qp`'s port (QUERY_COUNTERS).
    void count(const QueuePair &qp, uint64_t pib_port_counters::*counter);
    bool injectedFate(const QueuePair &qp, std::vector<uint8_t> &framed);

    void processSendQueue(QueuePair &qp);
    // A send queue's doorbell: its work now or after the write (data_path.cc).
    void ringSendQueue(QueuePair &qp);
    bool updateProducer(const char *what, uint32_t number, uint32_t &producer, uint32_t consumer,
                        uint32_t size, uint32_t value);
    // The datagram transport (datagram.cc).
    void processDatagramSend(QueuePair &qp);
    bool sendUd(QueuePair &qp, const Wqe &wqe, uint32_t *length, uint8_t *status);
    // The way in, named by who acts: the port receives a packet
    // (portReceive), the data path delivers it to the QPs it is for
    // (deliver, deliverMulticast, deliverConnected), and a QP takes it
    // (receiveDatagram; the responder's onRequest, the completer's
    // onResponse).
    //
    // A packet that arrived on `port` (or was sent to it by one of its own
    // QPs, `senderQpn`, which never receives its own multicast copy).
    void deliver(unsigned port, const iba::Packet &packet, uint32_t senderQpn = 0);
    void deliverMulticast(unsigned port, const iba::Packet &packet, uint32_t senderQpn);
    void receiveDatagram(unsigned port, const iba::Packet &packet, QueuePair &qp,
                         uint16_t pkeyIndex);
    // Takes the next receive WQE of `qp` (RQ or SRQ; an XRC TGT QP's from
    // the XRC SRQ its request names).
    bool takeReceiveWqe(QueuePair &qp, Wqe &wqe, uint16_t *index, uint8_t *status);

    // The connected transports: requester.cc, completer.cc, responder.cc,
    // connected.cc.
    uint32_t pathMtu(const QueuePair &qp) const;
    uint8_t fetchSendWqe(QueuePair &qp, uint32_t index, SendWqe &w);
    uint8_t checkLocalBuffers(QueuePair &qp, SendWqe &w, uint64_t *length);
    void processConnectedSend(QueuePair &qp);
    void runLocalOperation(QueuePair &qp, SendWqe w);
    // The outstanding WQEs of a QP, whose memory the device's budget
    // counts (outstanding_memory.hh): one joins at the tail, the head
    // leaves, or all go (reset, destruction).
    void holdWqe(QueuePair &qp, SendWqe &&w);
    SendWqe takeHeadWqe(QueuePair &qp);
    void releaseWqes(QueuePair &qp);
    void armAckTimerIfIdle(QueuePair &qp);
    enum class SendProgress { kAllSent, kWindowFull, kPaused, kFailed };
    SendProgress sendRequestPackets(QueuePair &qp, SendWqe &w);
    bool sendRequestPacket(QueuePair &qp, SendWqe &w, iba::Packet &p, uint32_t offset,
                           uint32_t len);
    void stopSending(QueuePair &qp, SendProgress why);
    void rewind(QueuePair &qp, uint32_t psn);
    uint64_t ackTimeoutNs(const QueuePair &qp) const;
    static uint64_t rnrDelayNs(uint8_t code);
    void restartAckTimer(QueuePair &qp);
    void completeInOrder(QueuePair &qp);
    void completeHead(QueuePair &qp, uint8_t status);
    void notifyIfSqDrained(QueuePair &qp);
    void ackUpTo(QueuePair &qp, uint32_t psn);
    void onResponse(QueuePair &qp, const iba::Packet &packet);
    bool onAcknowledge(QueuePair &qp, const iba::Packet &packet);
    void onRnrNak(QueuePair &qp, uint32_t psn, uint8_t timerCode);
    bool onNak(QueuePair &qp, uint32_t psn, uint8_t code);
    bool onAtomicAcknowledge(QueuePair &qp, const iba::Packet &packet);
    void readResponse(QueuePair &qp, const iba::Packet &packet);
    void qpTimerExpired(QueuePair &qp);
    void scheduleQpTimer(QueuePair &qp);
    void armDeviceTimer();
    void sendAck(QueuePair &qp, uint32_t psn, uint8_t syndrome);
    bool remoteRange(const QueuePair &qp, uint32_t pdn, uint32_t rkey, uint64_t va, uint64_t len,
                     uint32_t access, std::vector<Segment> &out);
    uint32_t requestPd(const QueuePair &qp) const;
    uint32_t requestSrq(const QueuePair &qp) const;
    uint32_t receiveCq(const QueuePair &qp) const;
    bool selectXrcSrq(QueuePair &qp, const iba::Packet &packet, bool startsMessage);
    std::optional<uint32_t> receiveSrq(const QueuePair &qp) const;
    void markSrqReceive(const QueuePair &qp, pib_cqe &cqe) const;
    void responderError(QueuePair &qp, uint32_t psn, uint8_t nakCode, uint8_t wcStatus,
                        const char *why);
    bool claimReceiveWqe(QueuePair &qp);
    void completeClaimedWqe(QueuePair &qp, uint8_t status);
    void completeReceive(QueuePair &qp, const iba::Packet &packet, uint8_t opcode, uint32_t length);
    void onRequest(QueuePair &qp, const iba::Packet &packet);
    bool checkRequestPsn(QueuePair &qp, const iba::Packet &packet);
    bool checkRequestSequence(QueuePair &qp, const iba::Packet &packet);
    void dropStaleAnswers(QueuePair &qp, uint32_t psn);
    void readOrAtomicRequest(QueuePair &qp, const iba::Packet &packet);
    bool receiveSend(QueuePair &qp, const iba::Packet &packet);
    bool receiveWrite(QueuePair &qp, const iba::Packet &packet);
    bool startWrite(QueuePair &qp, const iba::Packet &packet);
    bool landWrite(QueuePair &qp, const iba::Packet &packet);
    void endRequest(QueuePair &qp, const iba::Packet &packet);
    bool invalidateForPeer(QueuePair &qp, const iba::Packet &packet);
    void dropUcMessage(QueuePair &qp, uint32_t psn);
    void refuseRequest(QueuePair &qp, uint32_t psn, uint8_t nakCode, uint8_t wcStatus,
                       const char *why);
    void noReceiveWqe(QueuePair &qp, uint32_t psn);
    void readRequest(QueuePair &qp, const iba::Packet &packet);
    bool sendReadResponse(QueuePair &qp, Reply &r);
    void atomicRequest(QueuePair &qp, const iba::Packet &packet);
    void sendAtomicAck(QueuePair &qp, const ReplayEntry &e);
    void acknowledge(QueuePair &qp, uint32_t psn, uint8_t syndrome);
    void remember(QueuePair &qp, const ReplayEntry &e);
    void duplicateRequest(QueuePair &qp, const iba::Packet &packet);
    bool addressConnected(QueuePair &qp, iba::Packet &packet);
    void transmitConnected(QueuePair &qp, std::vector<uint8_t> framed);
    void sendConnected(QueuePair &qp, iba::Packet &packet);
    void deliverConnected(unsigned port, const iba::Packet &packet);
    void flushQp(QueuePair &qp);
    uint32_t wireQpn(const QueuePair &qp) const;

    // Sends what the responder of `qp` still owes, as the budget allows.
    void sendReplies(QueuePair &qp);
    void reply(QueuePair &qp, const Reply &r);

    const Host &host_;
    ObjectTables &objects_;
    Ports &ports_;
    EventWriter &events_;
    MemoryAccess &memory_;
    WqeReader &wqes_;
    Scheduler &scheduler_;
    ArmedInjections &injections_;
    OutstandingMemory &outstanding_;
    MemoryKeys keys_{host_, objects_.mtt, objects_.mrs, objects_.mws};
    // Lists of guest memory segments, kept for the next packet too: one
    // per data path function, as none calls another while it holds its
    // list (checkLocalBuffers, onRequest, sendReadResponses).
    std::vector<Segment> localSegments_, writeSegments_, readSegments_;
    // Timers of the connected QPs: (deadline, QPN), earliest first, and
    // the deadline the host's timer is set to.
    std::set<std::pair<uint64_t, uint32_t>> timers_;
    std::function<uint64_t()> otherDeadline_;
    uint64_t armedAt_ = Host::kNever;
};

} // namespace pib
