// SPDX-License-Identifier: GPL-2.0-or-later
// The responder of the connected transports (RC, UC, XRC TGT): request
// packets through a pipeline of checks (IBA 9.7.5.2), then SEND, RDMA
// WRITE, READ, atomics, duplicates and NAKs; what it owes the requester
// goes out as the event's budget allows.
#pragma once

#include <cstdint>
#include <vector>

#include "transport.hh"

namespace pib {

class Responder final : TransportRole {
  public:
    explicit Responder(const TransportParts &parts) : TransportRole(parts) {}

    // A request packet for `qp`.
    void onRequest(QueuePair &qp, const iba::Packet &packet);
    // Sends what `qp` still owes (READ responses, atomic ACKs, an ACK).
    void sendReplies(QueuePair &qp);
    // An ACK of every request taken (a loaded QP's: what it owed was lost);
    // `alone`: one nothing queued behind it replaces (Reply::alone).
    void acknowledgeAll(QueuePair &qp, bool alone = false);
    // The link lost what was in flight, a move or the switch's discards
    // (DataPath::resendWhatWasLost): an ACK of
    // what it took, then a sequence error NAK of the next PSN.
    void sayWhereAfterLoss(QueuePair &qp);
    // `qp` leaves the states that answer requests (to RESET or the error
    // state, or destroyed): what it owes before its first READ response
    // goes now; no more than kMaxOwedSent packets.
    void sendOwedAcks(QueuePair &qp);
    static constexpr unsigned kMaxOwedSent = 16;
    // XRC SRQ `srqn` is about to be destroyed: no message goes on into it.
    void forgetXrcSrq(uint32_t srqn);

  private:
    bool checkRequestPsn(QueuePair &qp, const iba::Packet &packet);
    bool checkRequestSequence(QueuePair &qp, const iba::Packet &packet);
    bool selectXrcSrq(QueuePair &qp, const iba::Packet &packet, bool startsMessage);
    void readOrAtomicRequest(QueuePair &qp, const iba::Packet &packet);
    void dropStaleAnswers(QueuePair &qp, uint32_t psn);
    bool receiveSend(QueuePair &qp, const iba::Packet &packet);
    bool receiveWrite(QueuePair &qp, const iba::Packet &packet);
    bool startWrite(QueuePair &qp, const iba::Packet &packet, bool *translated);
    bool landWrite(QueuePair &qp, const iba::Packet &packet, bool translated);
    void endRequest(QueuePair &qp, const iba::Packet &packet);
    bool invalidateForPeer(QueuePair &qp, const iba::Packet &packet);
    void completeReceive(QueuePair &qp, const iba::Packet &packet, uint8_t opcode, uint32_t length);
    void readRequest(QueuePair &qp, const iba::Packet &packet);
    void atomicRequest(QueuePair &qp, const iba::Packet &packet);
    void flushRequest(QueuePair &qp, const iba::Packet &packet);
    void atomicWriteRequest(QueuePair &qp, const iba::Packet &packet);
    void answerEmpty(QueuePair &qp, uint32_t psn);
    void takeAnswered(QueuePair &qp, const ReplayEntry &e, Reply::Kind kind);
    void duplicateRequest(QueuePair &qp, const iba::Packet &packet);
    void remember(QueuePair &qp, const ReplayEntry &e);

    // Answers and refusals.
    void acknowledge(QueuePair &qp, uint32_t psn, uint8_t syndrome, bool alone = false);
    void reply(QueuePair &qp, const Reply &r);
    void sendAck(QueuePair &qp, uint32_t psn, uint8_t syndrome);
    bool sendReadResponse(QueuePair &qp, Reply &r);
    bool endStaleAnswer(QueuePair &qp, Reply &r, uint32_t psn);
    void sendAtomicAck(QueuePair &qp, const ReplayEntry &e);
    // A fatal responder error `why`: NAKed, the claimed receive WQE
    // completes with its status (or, when it names none, `localStatus`),
    // the QP goes to the error state. `detail` says more than its cause.
    void responderError(QueuePair &qp, uint32_t psn, const err::Condition &why,
                        uint8_t localStatus = PIB_WC_SUCCESS, const char *detail = nullptr);
    // RC: responderError(); UC: the message is dropped.
    void refuseRequest(QueuePair &qp, uint32_t psn, const err::Condition &why);
    void noReceiveWqe(QueuePair &qp, uint32_t psn);
    bool answerPageFault(QueuePair &qp, uint32_t psn);
    void dropUcMessage(QueuePair &qp, uint32_t psn);

    // Memory a request names (its segments into `out`, unless null).
    bool remoteRange(const QueuePair &qp, uint32_t pdn, uint32_t rkey, uint64_t va, uint64_t len,
                     uint32_t access, std::vector<Segment> *out);
    uint32_t requestPd(const QueuePair &qp) const;
    uint32_t requestSrq(const QueuePair &qp) const;

    // Segment lists kept for the next packet too, one per function that
    // needs one (none calls another while it holds its list).
    std::vector<Segment> writeSegments_, readSegments_;
};

} // namespace pib
