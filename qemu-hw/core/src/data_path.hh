// SPDX-License-Identifier: GPL-2.0-or-later
// The data path: every packet the device sends or receives. It owns the
// transport roles and dispatches to them (dispatch.cc): the datagram
// transport (datagram.*), the connected requester with its completer
// (requester.*) and the responder (responder.*), which share only the
// parts of transport.hh. Here are the ways in: the producer indices and
// CQ arms a front end decoded from its doorbells, and what a QP state
// change means for the transport (data_path.cc), received packets and the
// timer (dispatch.cc), and a QP's error flow (flush.cc). The objects it
// works on are created and destroyed by a front end's commands.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "datagram.hh"
#include "port_agents.hh"
#include "qp_timers.hh"
#include "receive_wqes.hh"
#include "requester.hh"
#include "responder.hh"
#include "state_archive.hh"
#include "transport.hh"

namespace pib {

class DataPath final : public SubnetSender, public ScheduledEngine, QpErrorFlow {
  public:
    DataPath(const Host &host, ObjectTables &objects, Ports &ports, EventWriter &events,
             MemoryAccess &memory, Scheduler &scheduler, ArmedInjections &injections,
             OutstandingMemory &outstanding)
        : host_(host), objects_(objects), ports_(ports), events_(events), wqes_(host),
          scheduler_(scheduler), outstanding_(outstanding),
          keys_(host, objects.mtt, objects.pds, objects.mrs, objects.mws), timers_(host, objects),
          // The roles read WQEs through the slot, so a front end's format
          // reaches them all.
          receives_(objects, wqes_, events), parts_{host,       objects,     ports,   events,
                                                    memory,     keys_,       wqes_,   scheduler,
                                                    injections, outstanding, timers_, receives_,
                                                    *this},
          datagram_(parts_), requester_(parts_), responder_(parts_) {
        shareTimer();
    }

    // A packet arrived on a port.
    // `head`: a private copy of the packet's first bytes when `packet`
    // lies in memory a peer shares (iba::parseShared), else empty.
    void portReceive(unsigned port, std::span<const uint8_t> packet,
                     std::span<const uint8_t> head = {});
    // The front end's WQEs are read with `format` (installed as the
    // device is built, before any QP exists).
    void useWqes(WqeFormat &format) { wqes_.use(format); }
    // The driver posted WQEs up to slot count `producer`: a front end
    // decoded its doorbell and checked the queue is that doorbell's to
    // ring. The index is checked here for both personalities (forward
    // only, never more than a ring ahead: doorbell-bad-index), then the
    // work starts. ConnectX's receive producers are doorbell records its
    // WqeFormat reads, so only pib-hca calls the last two.
    void sendProduced(QueuePair &qp, uint32_t producer);
    void receiveProduced(QueuePair &qp, uint32_t producer); // in ERR: flushed at once
    void srqProduced(SharedReceiveQueue &srq, uint32_t producer);
    // CQ `cqn` is armed for its next completion or next solicited one
    // (PIB_CQ_ARM_*); `pending`: CQEs wait past the driver's consumer, so
    // the event goes at once.
    void armCq(uint32_t cqn, CompletionQueue &cq, uint8_t kind, bool pending = false) {
        events_.arm(cqn, cq, kind, pending);
    }
    // The host's timer reached the deadline the data path asked for.
    void timerExpired();
    // The driver resumed page fault `token` (page_faults.hh): it mapped
    // the pages, or (`failed`) could not. False when no QP waits for it.
    bool resumePageFault(uint64_t token, bool failed);
    // The device has one timer: the data path arms it for the earliest of
    // its QPs' deadlines, the CQs' moderation and `other` (the links'
    // Polling retries, 0 for none), which rearmTimer() reads again after
    // it changed.
    void setOtherDeadline(std::function<uint64_t()> other) { otherDeadline_ = std::move(other); }
    void rearmTimer() { timers_.rearm(); }
    // `qp` is about to go to state `next` by MODIFY_QP, its attributes
    // still those of its current state: what its responder owes leaves
    // first if it stops answering (Responder::sendOwedAcks).
    void qpStateLeaving(QueuePair &qp, uint8_t next);
    // `qp` entered state `next` from `cur` by MODIFY_QP with `mask`: its
    // transport starts over, loads its PSNs, flushes or starts sending.
    void qpStateEntered(QueuePair &qp, uint8_t cur, uint8_t next, uint32_t mask);
    // `qp` is about to be destroyed: it has no timer any more, and a
    // receive WQE it took from an SRQ completes.
    void forgetQp(QueuePair &qp);
    // DCT `dct` is drained or destroyed: its connections close
    // (dc_targets.cc), and how many it has.
    void closeDcConnections(uint32_t dct, const char *why);
    size_t dcConnectionsOf(uint32_t dct) const;
    // Its connections in a saved state, after the DCT (dc_targets.cc).
    void saveDcConnections(uint32_t dct, StateWriter &w) const;
    void loadDcConnections(QueuePair &dct, StateReader &r);
    // XRC SRQ `srqn` is about to be destroyed: no message goes on into it.
    void forgetXrcSrq(uint32_t srqn) { responder_.forgetXrcSrq(srqn); }
    // Nothing in flight, no timer, no postponed work: the power-on state.
    void reset();
    // The work handed over before a command is done before it runs, as a
    // hardware's send engine is far ahead of its firmware: the postponed
    // send queues get their turn (within the event's budget).
    void settleBeforeCommand() { scheduler_.run(); }
    // Where completions and events go (the commands set CQ moderation).
    EventWriter &events() { return events_; }
    // A QP's transport in a saved state (transport_state.cc): its queues'
    // indices, where its requester starts again, where its responder is.
    void saveTransport(const QueuePair &qp, StateWriter &w) const;
    void loadTransport(QueuePair &qp, StateReader &r);
    // A loaded QP goes on: its requester resends what it had not
    // completed, its responder acknowledges what it took.
    void resumeLoaded(QueuePair &qp);
    // Port `port`'s link lost what was in flight: it is up again as it
    // was before its device moved (or the move failed), or the switch
    // discarded packets to it. Each reliable QP on it says at once what it
    // is missing, whatever its ACK timeout (transport_state.cc).
    void resendWhatWasLost(unsigned port);
    // The keys' registrations and bindings (a loaded state's are made
    // again by them).
    MemoryKeys &keys() { return keys_; }
    // From SubnetSender: a MAD the port's agents send from QP0.
    void sendSubnetPacket(unsigned port, iba::Packet &packet) override;
    void portActive(unsigned port) override;
    // From ScheduledEngine: postponed work goes on, a looped-back packet
    // arrives.
    void resume(QueuePair &qp) override;
    void receiveLooped(unsigned port, const iba::Packet &packet) override;
    void sendReplies(QueuePair &qp) override { responder_.sendReplies(qp); }

  private:
    const char *badResponder(const QueuePair &qp, const ResponderState &s) const;
    const char *badResponderPds(const QueuePair &qp, const ResponderState &s) const;
    // The CQs' moderation deadlines go on the QPs' host timer.
    void shareTimer();
    // From QpErrorFlow (flush.cc).
    void flushQp(QueuePair &qp) override;
    void watchReceiveRecord(QueuePair &qp, uint64_t waitNs);
    // Page faults of `qp` the driver did not resume in time fail.
    void expirePageFaults(QueuePair &qp);
    void receiveRecordDue(QueuePair &qp);
    // The record's reads in the error state: 100 us after a flush, the
    // wait doubling to at most 50 ms.
    static constexpr uint64_t kFirstRecordPollNs = 100'000;
    static constexpr uint64_t kMaxRecordPollNs = 50'000'000;

    // A send queue's doorbell: its work now or after the write.
    void ringSendQueue(QueuePair &qp);
    bool updateProducer(const char *what, uint32_t number, uint32_t &producer, uint32_t consumer,
                        uint32_t size, uint32_t value);
    // The send queue's work, by the QP's transport.
    void processSendQueue(QueuePair &qp);
    // A packet that arrived on `port`, or was sent to it by its own QP
    // `senderQpn`, goes to the role it is for.
    void deliver(unsigned port, const iba::Packet &packet, uint32_t senderQpn = 0);
    void deliverConnected(unsigned port, const iba::Packet &packet);
    // DC's targets (dc_targets.cc).
    void deliverToDct(unsigned port, QueuePair &dct, const iba::Packet &packet);
    QueuePair *dcConnection(QueuePair &dct, const DcPeer &peer, const iba::Packet &packet);
    QueuePair *openDcConnection(QueuePair &dct, const DcPeer &peer, const iba::Packet &packet);
    QueuePair *addDcConnection(QueuePair &dct, const DcPeer &peer, const pib_av &path,
                               uint32_t psn);
    bool closeIdlestDcConnection();
    void closeDcConnection(const DcPeer &peer, const char *why);

    const Host &host_;
    ObjectTables &objects_;
    Ports &ports_;
    EventWriter &events_;
    WqeFormatSlot wqes_; // what every role reads WQEs through
    Scheduler &scheduler_;
    OutstandingMemory &outstanding_;
    MemoryKeys keys_;
    QpTimers timers_;
    std::function<uint64_t()> otherDeadline_;
    ReceiveWqes receives_;
    const TransportParts parts_;
    Datagram datagram_;
    Requester requester_;
    Responder responder_;
};

} // namespace pib
