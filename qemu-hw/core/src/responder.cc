// SPDX-License-Identifier: GPL-2.0-or-later
// The responder of the connected transports (IBA 9.7.5.2): request packets
// checked in PSN order, SEND data into receive WQEs, RDMA WRITE data into
// memory regions, READ responses and atomics, duplicates answered again,
// and the NAKs of IBA 9.7.5.2.
#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <optional>

#include "frame.hh"
#include "limits.hh"
#include "receive_wqes.hh"
#include "responder.hh"
#include "ring.hh"
#include "trace.hh"

namespace pib {

namespace {

// How a READ-like request is answered (connected.hh); nullopt for the
// requests an ACK answers.
std::optional<AnswerKind> answerOf(uint8_t op) {
    switch (op) {
    case iba::kReadRequest:
        return AnswerKind::kRead;
    case iba::kCompareSwap:
    case iba::kFetchAdd:
        return AnswerKind::kAtomic;
    case iba::kFlush:
    case iba::kAtomicWrite:
        return AnswerKind::kEmpty;
    default:
        return std::nullopt;
    }
}

bool answeredByResponse(uint8_t op) {
    return answerOf(op).has_value();
}

} // namespace

namespace {

using namespace aeth;
constexpr uint8_t kAckSyndrome = syndrome(kAck, kNoCredits);
// Segment lists up to this long keep their room for the next request.
constexpr size_t kKeptSegments = 64;

bool isFirstOrOnly(uint8_t op) {
    return op == iba::kSendFirst || op == iba::kSendOnly || op == iba::kSendOnlyImm ||
           op == iba::kSendOnlyInv || op == iba::kWriteFirst || op == iba::kWriteOnly ||
           op == iba::kWriteOnlyImm;
}
bool isSend(uint8_t op) {
    return op <= iba::kSendOnlyImm || op == iba::kSendLastInv || op == iba::kSendOnlyInv;
}
bool isWrite(uint8_t op) {
    return op >= iba::kWriteFirst && op <= iba::kWriteOnlyImm;
}
bool endsMessage(uint8_t op) {
    return op == iba::kSendLast || op == iba::kSendLastImm || op == iba::kSendOnly ||
           op == iba::kSendOnlyImm || op == iba::kSendLastInv || op == iba::kSendOnlyInv ||
           op == iba::kWriteLast || op == iba::kWriteLastImm || op == iba::kWriteOnly ||
           op == iba::kWriteOnlyImm;
}

} // namespace

// The transport a responder answers on: XRC for an XRC TGT QP, DC for a
// DCT's connection.
static uint8_t responseTransport(const QueuePair &qp) {
    return qp.ctx.type == PIB_QPT_XRC_TGT ? iba::kTransportXrc
           : isDcConnection(qp)           ? iba::kTransportDc
                                          : iba::kTransportRc;
}

void Responder::sendAck(QueuePair &qp, uint32_t psn, uint8_t syndrome) {
    iba::Packet p;
    p.bth.opcode = responseTransport(qp) | iba::kAcknowledge;
    p.bth.psn = psn;
    p.aeth = iba::Aeth{syndrome, qp.resp.msn};
    sendConnected(qp, p);
}

// Queues an ACK or NAK behind whatever the responder still owes.
void Responder::acknowledge(QueuePair &qp, uint32_t psn, uint8_t syndrome, bool alone) {
    Reply r;
    r.kind = Reply::Kind::kAck;
    r.psn = psn;
    r.syndrome = syndrome;
    r.alone = alone;
    reply(qp, r);
}

// Whether the responder took a request since its QP came to RTR: its
// expected PSN moved on, or a message completed (each wraps only after
// 2^24). Not COMM_EST, which a QP in RTS before its first request never
// raises: pib-traffic's, rdma_cm's.
static bool tookRequests(const QueuePair &qp) {
    return qp.resp.expectedPsn != qp.attr.rq_psn || qp.resp.msn != 0;
}

// A responder that took nothing yet says nothing: an ACK of the PSN
// before its first would mean nothing.
void Responder::acknowledgeAll(QueuePair &qp, bool alone) {
    if (tookRequests(qp))
        acknowledge(qp, psnAdd(qp.resp.expectedPsn, 0xffffff), kAckSyndrome, alone);
}

// The ACK goes first and on its own: a peer that lost no request but only
// its ACK hears it, and drops the NAK as beyond what it sent. So the NAK
// may not replace it when it cannot go at once (found in CI: the port's
// budget spent by the other QPs' resends after a move, the ACK waited, the
// NAK took its place, and the peer's WRITE waited for its ACK timer). For
// a READ or an atomic whose answer was lost, that ACK is an implied NAK:
// the peer asks again, and the answer comes from the replay. One that
// lost requests resends from the NAK's PSN. Said once while it waits: a
// port that cannot send (a switch that reads nothing and says DISCARDED
// again and again) queues no more than the first pair.
void Responder::sayWhereAfterLoss(QueuePair &qp) {
    ResponderState &s = qp.resp;
    const uint8_t nak = syndrome(kNak, kPsnSequence);
    const auto &q = s.replies;
    if (!q.empty() && q.back().kind == Reply::Kind::kAck && q.back().syndrome == nak &&
        q.back().psn == s.expectedPsn)
        return; // said already, and still waiting to go
    acknowledgeAll(qp, /*alone*/ true);
    sendReplies(qp);
    acknowledge(qp, s.expectedPsn, nak);
    s.nakSent = true; // one NAK for this gap, as for any other
    trace::rc_told_after_loss(host_, qp.number, s.expectedPsn);
}

// Replies leave in request order: a new one goes behind those still owed.
// An ACK or NAK replaces a positive ACK queued last, which it implies
// (the PSNs only grow); nothing replaces a NAK, which the requester must
// hear. An ACK waits for the end of the event, for those after it to
// replace it; a READ response or an atomic's ACK goes at once, with the
// ACKs before it.
void Responder::reply(QueuePair &qp, const Reply &r) {
    auto &q = qp.resp.replies;
    const bool positive = !q.empty() && q.back().kind == Reply::Kind::kAck &&
                          q.back().syndrome >> 5 == aeth::kAck && !q.back().alone;
    if (r.kind == Reply::Kind::kAck && positive)
        q.back() = r;
    else
        q.push_back(r);
    if (r.kind == Reply::Kind::kAck)
        scheduler_.acknowledgeAtEventEnd(qp);
    else
        sendReplies(qp);
}

void Responder::sendReplies(QueuePair &qp) {
    auto &q = qp.resp.replies;
    while (!q.empty()) {
        if (!scheduler_.mayTransmit(qp.attr.port_num)) {
            scheduler_.postpone(qp.number, qp);
            return;
        }
        Reply &r = q.front();
        switch (r.kind) {
        case Reply::Kind::kAck:
            sendAck(qp, r.psn, r.syndrome);
            break;
        case Reply::Kind::kAtomic:
            sendAtomicAck(qp, r.entry);
            break;
        case Reply::Kind::kRead:
            if (!sendReadResponse(qp, r))
                return; // the QP went to the error state: nothing is owed
            if (r.next < r.entry.packets)
                continue;
            break;
        }
        q.pop_front();
    }
}

// Hardware sends an ACK as it takes the request, long before the driver
// could see the receive's completion and move or destroy the QP; here an
// ACK waits for the event's end, or for room on its port, and a QP the
// driver took out of RTS before then would leave its peer's WQE
// unacknowledged, to complete flushed when the peer disconnects, under an
// application that closes as soon as its last message arrived (what a
// ConnectX failure of fabtests' pingpong over ofi_rxm looked like,
// docs/peers.md). So the ACKs and atomic answers owed go now, whatever
// the event's budget and the port's room (a ring that is full loses them,
// as a wire would): a few packets, since a positive ACK replaces the one
// queued before it. READ responses are cut short, as the error state cuts
// them, and an ACK queued behind one would imply it done.
void Responder::sendOwedAcks(QueuePair &qp) {
    auto &q = qp.resp.replies;
    if (q.empty())
        return;
    unsigned sent = 0;
    for (; !q.empty() && q.front().kind != Reply::Kind::kRead && sent < kMaxOwedSent; ++sent) {
        if (q.front().kind == Reply::Kind::kAck)
            sendAck(qp, q.front().psn, q.front().syndrome);
        else
            sendAtomicAck(qp, q.front().entry);
        q.pop_front();
    }
    trace::qp_owed_replies(host_, qp.number, sent, static_cast<unsigned>(q.size()));
    q.clear();
}

// READs and atomics owed and not yet answered whole.
static size_t repliesOwed(const ResponderState &s) {
    return static_cast<size_t>(std::count_if(s.replies.begin(), s.replies.end(),
                                             [](const Reply &r) { return r.readOrAtomic(); }));
}

// Translates an R_Key range for this QP: its PD, its access flags and the
// region's (IBA 10.6.3.2). False when the responder must NAK.
// With `out` null, checks only: a whole message's range, of any length.
bool Responder::remoteRange(const QueuePair &qp, uint32_t pdn, uint32_t rkey, uint64_t va,
                            uint64_t len, uint32_t access, std::vector<Segment> *out) {
    if (out)
        out->clear();
    memory_.takeFault(); // only this translation's counts (answerPageFault)
    if ((qp.attr.qp_access_flags & access) != access)
        return false;
    // A zero-length RDMA WRITE or READ names no memory: its R_Key and VA
    // are not checked (IBA C9-88).
    if (len == 0)
        return true;
    const uint8_t status =
        out ? memory_.translateRemote(rkey, pdn, qp.number, va, len, access, *out)
            : memory_.checkRemote(rkey, pdn, qp.number, va, len, access);
    return status == PIB_WC_SUCCESS;
}

// The PD a request's memory is checked in: the QP's, or for an XRC TGT QP
// the PD of the XRC SRQ the request names (IBA A14.5.2).
uint32_t Responder::requestPd(const QueuePair &qp) const {
    return qp.ctx.type == PIB_QPT_XRC_TGT ? qp.resp.xrcPdn : qp.ctx.pdn;
}

// The XRC SRQ a request of an XRC TGT QP named; kNoSrq for other QPs.
uint32_t Responder::requestSrq(const QueuePair &qp) const {
    return qp.ctx.type == PIB_QPT_XRC_TGT ? qp.resp.xrcSrqn : kNoSrq;
}

// An XRC request names the XRC SRQ it goes to (XRCETH): it must be one of
// the TGT QP's domain (else a remote access error, as rxe and IBA A14.5.3
// have it), and every packet of a message must name the same one.
bool Responder::selectXrcSrq(QueuePair &qp, const iba::Packet &packet, bool startsMessage) {
    ResponderState &s = qp.resp;
    const uint32_t srqn = packet.xrceth.value_or(UINT32_MAX);
    if (!startsMessage) {
        if (srqn == s.xrcSrqn)
            return true;
        responderError(qp, packet.bth.psn, err::kXrcSrqChanged);
        return false;
    }
    const SharedReceiveQueue *srq = objects_.srqs.find(srqn);
    if (!srq || !srq->isXrc() || srq->ctx.xrcdn != qp.ctx.xrcdn) {
        responderError(qp, packet.bth.psn, err::kXrcSrqForeign);
        return false;
    }
    s.xrcSrqn = srqn;
    s.xrcPdn = srq->ctx.pdn;
    return true;
}

// A fatal responder error: NAK it, complete the receive WQE in use, and
// move the QP to the error state with its async event.
void Responder::responderError(QueuePair &qp, uint32_t psn, const err::Condition &why,
                               uint8_t localStatus, const char *detail) {
    const uint8_t nakCode = why.nak;
    const uint8_t wcStatus = why.wcStatus != PIB_WC_SUCCESS ? why.wcStatus : localStatus;
    trace::err_rc_request_refused(host_, qp.number, psn, detail ? detail : why.cause);
    count(qp, &pib_port_counters::invalid_requests);
    ResponderState &s = qp.resp;
    if (isReliableType(qp.ctx.type))
        sendAck(qp, psn, syndrome(kNak, nakCode));
    receives_.completeClaimedWqe(qp, wcStatus);
    s.in = ResponderState::InMessage::kNone;
    s.replies.clear(); // a QP in the error state answers nothing more
    qp.attr.qp_state = PIB_QPS_ERR;
    // A DCT goes on: only this DCI's connection failed, and it holds
    // nothing more to flush. The DCI's next CONNECT replaces it.
    if (isDcConnection(qp))
        return;
    events_.postAsyncEvent(
        nakCode == kRemoteAccess ? PIB_ASYNC_QP_ACCESS_ERR : PIB_ASYNC_QP_REQ_ERR, qp.number);
    flushQp(qp);
}

// XRC SRQ `srqn` is about to be destroyed. A message an XRC TGT QP
// started into it ends here: its claimed WQE completes, flushed, on the
// SRQ's CQ while both still exist, and the rest of the message is out of
// sequence. What the QP owes or remembers through the SRQ (READ answers
// checked in its PD) is forgotten. So nothing that arrives later reaches
// the SRQ, CQ or PD that take over these numbers (IBA A14.5.3).
void Responder::forgetXrcSrq(uint32_t srqn) {
    objects_.qps.forEach([&](uint32_t qpn, QueuePair &qp) {
        if (qp.ctx.type != PIB_QPT_XRC_TGT)
            return;
        ResponderState &s = qp.resp;
        if (s.xrcSrqn == srqn) {
            if (s.haveWqe || s.in != ResponderState::InMessage::kNone)
                trace::xrc_message_cut(host_, qpn, srqn);
            receives_.completeClaimedWqe(qp, PIB_WC_WR_FLUSH_ERR);
            s.in = ResponderState::InMessage::kNone;
            s.xrcSrqn = kNoSrq;
        }
        std::erase_if(s.replies,
                      [&](const Reply &r) { return r.readOrAtomic() && r.entry.xrcSrqn == srqn; });
        std::erase_if(s.replay, [&](const ReplayEntry &e) { return e.xrcSrqn == srqn; });
    });
}

void Responder::completeReceive(QueuePair &qp, const iba::Packet &packet, uint8_t opcode,
                                uint32_t length) {
    ResponderState &s = qp.resp;
    Completion c;
    c.wrId = s.wrId;
    c.qpn = reportedQpn(qp);
    c.byteLen = length;
    c.srcQp = qp.attr.dest_qp_num;
    c.slid = packet.lrh.slid;
    c.sl = packet.lrh.sl;
    c.wqeIndex = s.wqeIndex;
    c.opcode = opcode;
    c.status = s.status;
    c.srqn = receives_.receiveSrq(qp);
    c.immediate = packet.imm;
    c.invalidate = packet.ieth;
    s.haveWqe = false;
    events_.postCqe(receives_.receiveCq(qp), c, packet.bth.solicited);
}

// UC drops a message it cannot take and waits for the next one to start
// (IBA 9.8.3).
void Responder::dropUcMessage(QueuePair &qp, uint32_t psn) {
    qp.resp.in = ResponderState::InMessage::kNone;
    qp.resp.expectedPsn = psnAdd(psn, 1);
}

// A request the responder cannot carry out: RC NAKs it and the QP goes to
// the error state; UC drops the message.
void Responder::refuseRequest(QueuePair &qp, uint32_t psn, const err::Condition &why) {
    if (isReliableType(qp.ctx.type))
        responderError(qp, psn, why);
    else
        dropUcMessage(qp, psn);
}

// A message that needs a receive WQE when none is posted: RC answers with
// an RNR NAK and the requester tries again later (IBA 9.7.5.2.8); UC loses
// the message.
void Responder::noReceiveWqe(QueuePair &qp, uint32_t psn) {
    if (isReliableType(qp.ctx.type)) {
        acknowledge(qp, psn, syndrome(kRnrNak, qp.attr.min_rnr_timer));
        count(qp, &pib_port_counters::rnr_naks_sent);
    } else {
        count(qp, &pib_port_counters::receives_dropped);
        dropUcMessage(qp, psn);
    }
}

// After a refused range or receive buffer: whether it was refused for a
// page its key does not map now, which the driver is asked to map
// (page_faults.hh). RC answers with an RNR NAK, so that the peer sends the
// packet again once the page is there; UC drops the message. The packet
// is not taken: the message stays where it was.
bool Responder::answerPageFault(QueuePair &qp, uint32_t psn) {
    const std::optional<FaultSite> site = memory_.takeFault();
    if (!site || !waitForPage(qp, FaultSide::kResponder, *site))
        return false;
    if (isReliableType(qp.ctx.type)) {
        acknowledge(qp, psn, syndrome(kRnrNak, qp.attr.min_rnr_timer));
        count(qp, &pib_port_counters::rnr_naks_sent);
    } else {
        dropUcMessage(qp, psn);
    }
    return true;
}

// A request packet passes these checks in turn, as in IBA 9.7.5.2 (and
// rxe's responder): the QP's state, the PSN, the opcode's place in the
// message and the packet's length; then the operation runs, and the
// message ends.
void Responder::onRequest(QueuePair &qp, const iba::Packet &packet) {
    memory_.takeFault(); // a fault left by earlier work is not this packet's
    const uint8_t state = qp.attr.qp_state;
    if (state != PIB_QPS_RTR && state != PIB_QPS_RTS && state != PIB_QPS_SQD)
        return;
    if (state == PIB_QPS_RTR && !qp.resp.established) {
        qp.resp.established = true; // IBA 11.6.3: the first packet in RTR
        events_.postAsyncEvent(PIB_ASYNC_COMM_EST, qp.number);
    }
    if (!checkRequestPsn(qp, packet) || !checkRequestSequence(qp, packet))
        return;
    const uint8_t op = packet.bth.opcode & 0x1f;
    if (qp.ctx.type == PIB_QPT_XRC_TGT &&
        !selectXrcSrq(qp, packet, qp.resp.in == ResponderState::InMessage::kNone))
        return;
    if (answeredByResponse(op)) {
        readOrAtomicRequest(qp, packet);
        return;
    }
    const bool taken = isSend(op) ? receiveSend(qp, packet) : receiveWrite(qp, packet);
    if (taken)
        endRequest(qp, packet);
}

// The PSN check: false when the packet went no further. RC replays a
// duplicate and NAKs a gap; UC drops the message a gap cut short.
bool Responder::checkRequestPsn(QueuePair &qp, const iba::Packet &packet) {
    ResponderState &s = qp.resp;
    const bool rc = isReliableType(qp.ctx.type);
    const uint32_t psn = packet.bth.psn;
    const int32_t d = psnDiff(psn, s.expectedPsn);
    if (rc && d < 0) {
        duplicateRequest(qp, packet);
        return false;
    }
    if (rc && d > 0) {
        // IBA 9.7.5.2.2: one NAK per gap, until the expected PSN arrives.
        if (!s.nakSent) {
            acknowledge(qp, s.expectedPsn, syndrome(kNak, kPsnSequence));
            count(qp, &pib_port_counters::out_of_seq_requests);
        }
        s.nakSent = true;
        return false;
    }
    if (!rc && d != 0) {
        // UC: packets were lost. The message in progress is dropped; a new
        // one may start here (IBA 9.8.3).
        s.in = ResponderState::InMessage::kNone;
        s.received = 0;
        s.expectedPsn = psn;
        if (!isFirstOrOnly(packet.bth.opcode & 0x1f)) {
            s.expectedPsn = psnAdd(psn, 1);
            return false;
        }
    }
    s.nakSent = false;
    return true;
}

// The opcode must continue the message in progress, or start one; a
// first or middle packet carries exactly a path MTU, others at most one.
bool Responder::checkRequestSequence(QueuePair &qp, const iba::Packet &packet) {
    const ResponderState &s = qp.resp;
    const uint8_t op = packet.bth.opcode & 0x1f;
    const bool continues = op == iba::kSendMiddle || op == iba::kSendLast ||
                           op == iba::kSendLastImm || op == iba::kSendLastInv ||
                           op == iba::kWriteMiddle || op == iba::kWriteLast ||
                           op == iba::kWriteLastImm;
    const bool inPlace = continues ? (s.in == ResponderState::InMessage::kSend && isSend(op)) ||
                                         (s.in == ResponderState::InMessage::kWrite && isWrite(op))
                                   : s.in == ResponderState::InMessage::kNone;
    const uint32_t mtu = pathMtu(qp);
    const size_t len = packet.data().size();
    const bool middleSized = op == iba::kSendFirst || op == iba::kSendMiddle ||
                             op == iba::kWriteFirst || op == iba::kWriteMiddle;
    if (inPlace && (middleSized ? len == mtu : len <= mtu))
        return true;
    refuseRequest(qp, packet.bth.psn, err::kRequestOutOfSequence);
    return false;
}

// A new READ or atomic has come while the answers to duplicates of
// earlier ones are still owed. The requester completes them in order and
// keeps at most its max_rd_atomic outstanding, this one included, so when
// the answers would break that limit the oldest duplicates' are stale: it
// completed those requests (the duplicate was the fabric's copy, or its
// original answer arrived late) and would discard the answers.
void Responder::dropStaleAnswers(QueuePair &qp, uint32_t psn) {
    auto &q = qp.resp.replies;
    const size_t limit = std::max<size_t>(1, qp.attr.max_dest_rd_atomic);
    while (repliesOwed(qp.resp) >= limit) {
        auto oldest = q.end();
        for (auto it = q.begin(); it != q.end(); ++it) {
            if (it->again && (oldest == q.end() ||
                              psnDiff(psn, it->entry.psn) > psnDiff(psn, oldest->entry.psn)))
                oldest = it;
        }
        if (oldest == q.end())
            return;
        trace::rc_duplicate(host_, qp.number, oldest->entry.psn, "stale answer dropped");
        q.erase(oldest);
    }
}

void Responder::readOrAtomicRequest(QueuePair &qp, const iba::Packet &packet) {
    if (!isReliableType(qp.ctx.type)) // UC has neither (the layout table already refuses them)
        return;
    // A READ stays outstanding at the requester until its last response
    // arrives: one more than max_dest_rd_atomic owed means the requester
    // broke its limit (IBA 9.7.5.2.5).
    dropStaleAnswers(qp, packet.bth.psn);
    // A FLUSH counts as the READ it is answered as; an ATOMIC WRITE as an atomic.
    const uint8_t op = packet.bth.opcode & 0x1f;
    const bool read = op == iba::kReadRequest || op == iba::kFlush;
    count(qp, read ? &pib_port_counters::read_requests : &pib_port_counters::atomic_requests);
    if (repliesOwed(qp.resp) >= std::max<size_t>(1, qp.attr.max_dest_rd_atomic)) {
        responderError(qp, packet.bth.psn, err::kTooManyReads);
        return;
    }
    switch (op) {
    case iba::kReadRequest:
        readRequest(qp, packet);
        break;
    case iba::kFlush:
        flushRequest(qp, packet);
        break;
    case iba::kAtomicWrite:
        atomicWriteRequest(qp, packet);
        break;
    default:
        atomicRequest(qp, packet);
    }
}

// A SEND packet into the receive WQE, which the first packet claims.
bool Responder::receiveSend(QueuePair &qp, const iba::Packet &packet) {
    ResponderState &s = qp.resp;
    const uint32_t psn = packet.bth.psn;
    if (s.in == ResponderState::InMessage::kNone) {
        if (!receives_.claimReceiveWqe(qp)) {
            noReceiveWqe(qp, psn);
            return false;
        }
        s.in = ResponderState::InMessage::kSend;
        s.received = 0;
    }
    const size_t len = packet.data().size();
    if (s.status == PIB_WC_SUCCESS && len) {
        const uint8_t status = memory_.scatter(requestPd(qp), s.sges, packet.data(), s.received);
        if (status != PIB_WC_SUCCESS && answerPageFault(qp, psn)) {
            // The packet comes again; a first one claims the WQE it holds.
            if (s.received == 0 && s.in == ResponderState::InMessage::kSend)
                s.in = ResponderState::InMessage::kNone;
            return false;
        }
        s.status = status;
    }
    // UC completes the WQE with the error at the message's end instead.
    // IBA 9.7.5.2: a message too long for the receive WQE is the
    // requester's fault (Invalid Request); a receive WQE whose L_Key does
    // not cover its buffer, or memory the device cannot reach, is the
    // responder's (Remote Operational Error).
    if (s.status != PIB_WC_SUCCESS && isReliableType(qp.ctx.type)) {
        if (s.status == PIB_WC_LOC_LEN_ERR)
            responderError(qp, psn, err::kSendTooLong);
        else
            responderError(qp, psn, err::kReceiveWqeUnusable, s.status);
        return false;
    }
    s.received += static_cast<uint32_t>(len);
    return true;
}

// An RDMA WRITE packet: the first one's RETH is checked whole, then each
// packet's part again as it lands.
bool Responder::receiveWrite(QueuePair &qp, const iba::Packet &packet) {
    ResponderState &s = qp.resp;
    const uint8_t op = packet.bth.opcode & 0x1f;
    const uint32_t psn = packet.bth.psn;
    // A message of one packet lands where its RETH was just checked.
    bool translated = false;
    if (s.in == ResponderState::InMessage::kNone) {
        if (!startWrite(qp, packet, &translated))
            return false;
        translated = translated && endsMessage(op);
    }
    if (op == iba::kWriteLastImm && !receives_.claimReceiveWqe(qp)) {
        noReceiveWqe(qp, psn);
        return false;
    }
    const size_t len = packet.data().size();
    if (s.received + len > s.writeLength ||
        (endsMessage(op) && s.received + len != s.writeLength)) {
        refuseRequest(qp, psn, err::kWriteLength);
        return false;
    }
    if (len && !landWrite(qp, packet, translated))
        return false;
    s.received += static_cast<uint32_t>(len);
    return true;
}

// The first packet of a WRITE: its RETH is checked whole. *translated
// says the whole message's segments are left in writeSegments_: when
// the packet is the whole message (a longer one's packets are each
// translated as they land).
bool Responder::startWrite(QueuePair &qp, const iba::Packet &packet, bool *translated) {
    ResponderState &s = qp.resp;
    const uint32_t psn = packet.bth.psn;
    const iba::Reth &reth = *packet.reth;
    count(qp, &pib_port_counters::write_requests);
    std::vector<Segment> &whole = writeSegments_;
    const bool single = reth.length == packet.data().size();
    const bool granted = reth.length <= limits::kMaxMsgSize &&
                         remoteRange(qp, requestPd(qp), reth.rkey, reth.va, reth.length,
                                     PIB_ACCESS_REMOTE_WRITE, single ? &whole : nullptr);
    // The list is needed once, and can be long: a long one is not kept.
    *translated = single && whole.capacity() <= kKeptSegments;
    if (!*translated)
        std::vector<Segment>().swap(whole);
    if (!granted) {
        if (!answerPageFault(qp, psn))
            refuseRequest(qp, psn, err::kWriteRkey);
        return false;
    }
    if ((packet.bth.opcode & 0x1f) == iba::kWriteOnlyImm && !receives_.claimReceiveWqe(qp)) {
        noReceiveWqe(qp, psn);
        return false;
    }
    s.in = ResponderState::InMessage::kWrite;
    s.received = 0;
    s.writeVa = reth.va;
    s.writeRkey = reth.rkey;
    s.writeLength = reth.length;
    return true;
}

// In order, packet by packet: the last byte lands last. The region may
// have gone, or lost its rights, since the RETH; unless the packet is
// the whole message and its segments were `translated` just now.
bool Responder::landWrite(QueuePair &qp, const iba::Packet &packet, bool translated) {
    ResponderState &s = qp.resp;
    const uint32_t psn = packet.bth.psn;
    std::vector<Segment> &segments = writeSegments_;
    if (!translated && !remoteRange(qp, requestPd(qp), s.writeRkey, s.writeVa + s.received,
                                    packet.data().size(), PIB_ACCESS_REMOTE_WRITE, &segments)) {
        if (!answerPageFault(qp, psn))
            refuseRequest(qp, psn, err::kWriteRkeyGone);
        return false;
    }
    size_t at = 0;
    for (const Segment &seg : segments) {
        if (!host_.dmaWrite(seg.addr, packet.data().data() + at, seg.len)) {
            responderError(qp, psn, err::kWriteDma);
            return false;
        }
        at += seg.len;
    }
    return true;
}

// The packet is taken: the next PSN is due, a last packet completes its
// message (and the receive WQE a SEND or a WRITE with immediate used),
// and RC acknowledges when asked.
void Responder::endRequest(QueuePair &qp, const iba::Packet &packet) {
    ResponderState &s = qp.resp;
    const uint8_t op = packet.bth.opcode & 0x1f;
    s.expectedPsn = psnAdd(packet.bth.psn, 1);
    if (endsMessage(op)) {
        if (packet.ieth && !invalidateForPeer(qp, packet))
            return;
        ++s.msn;
        s.in = ResponderState::InMessage::kNone;
        if (isSend(op))
            completeReceive(qp, packet, PIB_WC_RECV, s.received);
        else if (op == iba::kWriteLastImm || op == iba::kWriteOnlyImm)
            completeReceive(qp, packet, PIB_WC_RECV_RDMA_WITH_IMM, s.writeLength);
    }
    if (isReliableType(qp.ctx.type) && packet.bth.ackReq)
        acknowledge(qp, packet.bth.psn, kAckSyndrome);
}

// A SEND with invalidate has arrived whole: the R_Key its IETH names
// becomes free before the receive completes (IBA 9.4.1.1). A key that
// cannot be invalidated fails the receive and the QP, and is NAKed.
bool Responder::invalidateForPeer(QueuePair &qp, const iba::Packet &packet) {
    const char *why = keys_.invalidateRemote(qp.number, requestPd(qp), *packet.ieth);
    if (!why) {
        trace::mr_invalidated(host_, qp.number, *packet.ieth, "by the peer");
        return true;
    }
    responderError(qp, packet.bth.psn, err::kInvalidate, PIB_WC_SUCCESS, why);
    return false;
}

// An RDMA READ request: its responses, one PSN each, are owed from now
// on; they go out as the event budget and the port allow (sendReplies).
void Responder::readRequest(QueuePair &qp, const iba::Packet &packet) {
    const iba::Reth &reth = *packet.reth;
    if (reth.length > limits::kMaxMsgSize ||
        !remoteRange(qp, requestPd(qp), reth.rkey, reth.va, reth.length, PIB_ACCESS_REMOTE_READ,
                     nullptr)) {
        if (!answerPageFault(qp, packet.bth.psn))
            responderError(qp, packet.bth.psn, err::kReadRkey);
        return;
    }
    ReplayEntry e;
    e.psn = packet.bth.psn;
    e.va = reth.va;
    e.rkey = reth.rkey;
    e.length = reth.length;
    e.pdn = requestPd(qp);
    e.xrcSrqn = requestSrq(qp);
    const uint32_t mtu = pathMtu(qp);
    e.packets = std::max<uint32_t>(1, (reth.length + mtu - 1) / mtu);
    takeAnswered(qp, e, Reply::Kind::kRead);
}

// Whether response packet `i` of `r`, whose region has lost its rights
// since, answers a stale duplicate: the packet went once already, and the
// requester has sent requests after the READ, which this side took. Such
// a duplicate was mostly delayed by the fabric past what followed it: the
// SEND that told this side to invalidate (an NVMe-oF host's region), which
// the requester sent once it had the data. A duplicate of a READ that is
// still the last request taken is the requester asking for data it lacks:
// that is NAKed.
static bool staleAnswer(const QueuePair &qp, const Reply &r, uint32_t i) {
    const ReplayEntry &e = r.entry;
    return i < r.answered && psnDiff(qp.resp.expectedPsn, psnAdd(e.psn, e.packets)) > 0;
}

// Sends response packet r.next of READ r.entry. False when the QP went to
// the error state instead.
bool Responder::sendReadResponse(QueuePair &qp, Reply &r) {
    const ReplayEntry &e = r.entry;
    const uint32_t mtu = pathMtu(qp);
    const uint32_t i = r.next++;
    iba::Packet p;
    const uint32_t offset = i * mtu;
    const uint32_t len = std::min(mtu, e.length - offset);
    p.bth.psn = psnAdd(e.psn, i);
    const uint8_t op = e.packets == 1       ? iba::kReadResponseOnly
                       : i == 0             ? iba::kReadResponseFirst
                       : i == e.packets - 1 ? iba::kReadResponseLast
                                            : iba::kReadResponseMiddle;
    p.bth.opcode = responseTransport(qp) | op;
    if (iba::layoutOf(p.bth.opcode).aeth)
        p.aeth = iba::Aeth{kAckSyndrome, qp.resp.msn};
    if (!addressConnected(qp, p)) {
        scheduler_.charge(); // lost: the requester asks again; it costs what a sent one does
        return true;
    }
    if (e.answer == AnswerKind::kEmpty) { // a FLUSH's or an ATOMIC WRITE's: no data, no memory
        transmitConnected(qp, startPacket(qp, p, 0));
        r.answered = std::max(r.answered, r.next);
        return true;
    }
    // A duplicate READ is answered from memory as it is now: the region
    // may have gone, or lost its rights, since the first time.
    std::vector<Segment> &segments = readSegments_;
    if (!remoteRange(qp, e.pdn, e.rkey, e.va + offset, len, PIB_ACCESS_REMOTE_READ, &segments)) {
        if (staleAnswer(qp, r, i))
            return endStaleAnswer(qp, r, p.bth.psn);
        responderError(qp, p.bth.psn, err::kReadRkeyGone);
        return false;
    }
    // The data goes by DMA straight into the packet.
    iba::PacketWriter writer = startPacket(qp, p, len);
    for (const Segment &seg : segments) {
        if (!memory_.readIntoPacket(seg, writer)) {
            responderError(qp, p.bth.psn, err::kReadDma);
            return false;
        }
    }
    transmitConnected(qp, std::move(writer));
    r.answered = std::max(r.answered, r.next);
    return true;
}

// A stale duplicate's answer ends, unsent (the memory may be someone
// else's now), and the QP goes on: NAKing it would fail a connection
// whose every request succeeded. A requester that did lack the data gets
// no more of it, and ends in its retries.
bool Responder::endStaleAnswer(QueuePair &qp, Reply &r, uint32_t psn) {
    trace::rc_duplicate(host_, qp.number, psn,
                        "its READ's region no longer allows it, and later requests came: "
                        "not answered again");
    r.next = r.entry.packets;
    return true;
}

void Responder::atomicRequest(QueuePair &qp, const iba::Packet &packet) {
    const iba::AtomicEth &a = *packet.atomicEth;
    const uint32_t psn = packet.bth.psn;
    if (a.va % 8) {
        responderError(qp, psn, err::kAtomicUnaligned);
        return;
    }
    std::vector<Segment> segments;
    if (!remoteRange(qp, requestPd(qp), a.rkey, a.va, 8, PIB_ACCESS_REMOTE_ATOMIC, &segments)) {
        if (!answerPageFault(qp, psn))
            responderError(qp, psn, err::kAtomicRkey);
        return;
    }
    if (segments.size() != 1) {
        responderError(qp, psn, err::kAtomicRkey);
        return;
    }
    // One aligned 8-byte word never crosses a page, but it may cross the
    // entries of an indirect key: it must be one segment. The
    // device runs one operation at a time, so this is atomic against
    // every other access through the device (IBV_ATOMIC_HCA).
    uint64_t value = 0;
    if (!host_.dmaRead(segments[0].addr, value)) {
        responderError(qp, psn, err::kAtomicDma);
        return;
    }
    const uint64_t original = value;
    if ((packet.bth.opcode & 0x1f) == iba::kCompareSwap) {
        if (value == a.compare)
            value = a.swapAdd;
    } else {
        value += a.swapAdd;
    }
    if (value != original && !host_.dmaWrite(segments[0].addr, value)) {
        responderError(qp, psn, err::kAtomicDma);
        return;
    }
    ReplayEntry e;
    e.psn = psn;
    e.packets = 1;
    e.answer = AnswerKind::kAtomic;
    e.original = original;
    e.xrcSrqn = requestSrq(qp);
    takeAnswered(qp, e, Reply::Kind::kAtomic);
}

// IBA 1.5's FLUSH: every request this QP took before it has placed its
// data in guest memory already (the device lands a packet's data as it
// takes it, and the host lands DMA writes in order), where every CPU sees
// it: global visibility holds when the FLUSH arrives. What remains is
// the check: the QP takes FLUSHes, and the R_Key grants the placement
// type over the range, or over its region whole (selectivity MR).
// Persistence is not offered: no region grants it.
void Responder::flushRequest(QueuePair &qp, const iba::Packet &packet) {
    const uint32_t psn = packet.bth.psn;
    if (!wqes_.answersPlacementOps() || !(qp.attr.qp_access_flags & PIB_ACCESS_FLUSH_GLOBAL)) {
        responderError(qp, psn, err::kPlacementNotOffered);
        return;
    }
    const iba::Feth &f = *packet.feth;
    if (!f.placement || f.placement & ~(PIB_FLUSH_GLOBAL | PIB_FLUSH_PERSISTENT) ||
        f.selectivity > PIB_FLUSH_MR) {
        responderError(qp, psn, err::kFlushBadHeader);
        return;
    }
    const iba::Reth &reth = *packet.reth;
    const bool wholeRegion = f.selectivity == PIB_FLUSH_MR;
    // A length of 0 checks the key and its rights alone, as a whole region.
    const uint8_t status =
        memory_.checkRemote(reth.rkey, requestPd(qp), qp.number, wholeRegion ? 0 : reth.va,
                            wholeRegion ? 0 : reth.length, PIB_ACCESS_FLUSH_GLOBAL);
    if (f.placement & PIB_FLUSH_PERSISTENT ||
        (status != PIB_WC_SUCCESS && !answerPageFault(qp, psn))) {
        responderError(qp, psn, err::kFlushRkey);
        return;
    }
    if (status != PIB_WC_SUCCESS)
        return; // RNR NAKed: the range's pages are not mapped yet
    answerEmpty(qp, psn);
}

// IBA 1.5's ATOMIC WRITE: its 8 bytes land in one store (Host::dmaStore64),
// so a CPU reads the old value or the new, never a mix.
void Responder::atomicWriteRequest(QueuePair &qp, const iba::Packet &packet) {
    const uint32_t psn = packet.bth.psn;
    if (!wqes_.answersPlacementOps() || !(qp.attr.qp_access_flags & PIB_ACCESS_REMOTE_WRITE)) {
        responderError(qp, psn, err::kPlacementNotOffered);
        return;
    }
    const iba::Reth &reth = *packet.reth;
    const std::span<const uint8_t> data = packet.data();
    if (reth.length != 8 || data.size() != 8) {
        responderError(qp, psn, err::kAtomicWriteLength);
        return;
    }
    if (reth.va % 8) {
        responderError(qp, psn, err::kAtomicUnaligned);
        return;
    }
    std::vector<Segment> segments;
    if (memory_.translateRemote(reth.rkey, requestPd(qp), qp.number, reth.va, 8,
                                PIB_ACCESS_REMOTE_WRITE, segments) != PIB_WC_SUCCESS) {
        if (!answerPageFault(qp, psn))
            responderError(qp, psn, err::kAtomicRkey);
        return;
    }
    if (segments.size() != 1) {
        responderError(qp, psn, err::kAtomicRkey);
        return;
    }
    if (!host_.dmaStore64(segments[0].addr, data.first<8>())) {
        responderError(qp, psn, err::kAtomicDma);
        return;
    }
    answerEmpty(qp, psn);
}

// A FLUSH or ATOMIC WRITE done: one READ response without data answers
// it, and answers a duplicate of it again without doing it again.
void Responder::answerEmpty(QueuePair &qp, uint32_t psn) {
    ReplayEntry e;
    e.psn = psn;
    e.packets = 1;
    e.answer = AnswerKind::kEmpty;
    e.xrcSrqn = requestSrq(qp);
    takeAnswered(qp, e, Reply::Kind::kRead);
}

// A READ-like request `e` done: the message ends, it is remembered for
// its duplicates, and its answer is owed.
void Responder::takeAnswered(QueuePair &qp, const ReplayEntry &e, Reply::Kind kind) {
    qp.resp.expectedPsn = psnAdd(e.psn, e.packets);
    ++qp.resp.msn;
    remember(qp, e);
    Reply r;
    r.kind = kind;
    r.entry = e;
    reply(qp, r);
}

void Responder::sendAtomicAck(QueuePair &qp, const ReplayEntry &e) {
    iba::Packet p;
    p.bth.opcode = responseTransport(qp) | iba::kAtomicAcknowledge;
    p.bth.psn = e.psn;
    p.aeth = iba::Aeth{kAckSyndrome, qp.resp.msn};
    p.atomicAck = e.original;
    sendConnected(qp, p);
}

void Responder::remember(QueuePair &qp, const ReplayEntry &e) {
    auto &replay = qp.resp.replay;
    replay.push_back(e);
    while (replay.size() > std::max<size_t>(1, qp.attr.max_dest_rd_atomic))
        replay.pop_front();
}

// IBA 9.7.5.2.1-3: a duplicate SEND or WRITE is acknowledged again (its
// ACK may have been lost); a duplicate READ is answered again from the
// memory as it is now; a duplicate atomic gets its saved result, never a
// second execution.
void Responder::duplicateRequest(QueuePair &qp, const iba::Packet &packet) {
    count(qp, &pib_port_counters::duplicate_requests);
    const uint8_t op = packet.bth.opcode & 0x1f;
    const uint32_t psn = packet.bth.psn;
    ResponderState &s = qp.resp;
    if (const std::optional<AnswerKind> answer = answerOf(op)) {
        for (const ReplayEntry &e : s.replay) {
            if (psnDiff(psn, e.psn) < 0 || psnDiff(psn, e.psn) >= static_cast<int32_t>(e.packets))
                continue;
            if (e.answer != *answer)
                break;
            // One reply per READ or atomic owed at a time. A duplicate of
            // a READ still being answered asks for responses from its PSN
            // on: those already sent were lost, so the answer goes on from
            // there (IBA 9.7.5.2.2: the requester asks from the first
            // response it lacks); for one not yet sent, or an atomic, or
            // beyond what may be owed, it adds no work.
            const auto owed = std::find_if(s.replies.begin(), s.replies.end(), [&](const Reply &r) {
                return r.readOrAtomic() && r.entry.psn == e.psn;
            });
            const uint32_t from = static_cast<uint32_t>(psnDiff(psn, e.psn));
            if (owed != s.replies.end() && owed->kind == Reply::Kind::kRead && from < owed->next) {
                trace::rc_duplicate(host_, qp.number, psn, "READ answered again from there");
                owed->next = from;
                return;
            }
            if (owed != s.replies.end() ||
                repliesOwed(s) >= std::max<size_t>(1, qp.attr.max_dest_rd_atomic)) {
                trace::rc_duplicate(host_, qp.number, psn, "already being answered");
                return;
            }
            trace::rc_duplicate(host_, qp.number, psn,
                                e.answer == AnswerKind::kAtomic ? "atomic answered again"
                                : e.answer == AnswerKind::kEmpty
                                    ? "FLUSH or ATOMIC WRITE answered again"
                                    : "READ answered again");
            Reply r;
            r.kind = e.answer == AnswerKind::kAtomic ? Reply::Kind::kAtomic : Reply::Kind::kRead;
            r.entry = e;
            r.next = static_cast<uint32_t>(psnDiff(psn, e.psn));
            r.again = true;
            r.answered = e.packets;
            reply(qp, r);
            return;
        }
        trace::rc_duplicate(host_, qp.number, psn, "no longer known");
        return;
    }
    acknowledge(qp, psnAdd(s.expectedPsn, 0xffffff), kAckSyndrome);
}

} // namespace pib
