// SPDX-License-Identifier: GPL-2.0-or-later
// A QP's transport in a saved state (docs/migration.md): its queues'
// indices, where its requester starts again and where its responder is.
//
// What the requester sent and had not completed is not saved: its WQEs
// are still in the send queue (the driver reuses a slot only once its
// WQE completed), so the loaded requester fetches them again from the
// oldest and sends them again under the same PSNs. A peer takes them as
// duplicates: a SEND or WRITE is acknowledged again, a READ answered again
// from memory, an atomic given its saved result, never run twice. That is
// RC's own recovery from lost packets, and a move loses the packets on
// the wire anyway. The responder keeps what the requests it took left
// (its PSN, MSN, the message in progress, the READs and atomics a
// duplicate is answered from); replies it still owed are dropped, as if
// lost, and an ACK of everything it took goes out when it runs again.
#include <algorithm>
#include <optional>
#include <span>
#include <vector>

#include "data_path.hh"
#include "limits.hh"

namespace pib {

namespace {

void saveSges(StateWriter &w, const std::vector<pib_wqe_data> &sges) {
    w.u32(static_cast<uint32_t>(sges.size()));
    for (const pib_wqe_data &s : sges)
        w.record(s);
}

void saveReplay(StateWriter &w, const ReplayEntry &e) {
    w.u32(e.psn);
    w.u32(e.packets);
    w.u8(static_cast<uint8_t>(e.answer));
    w.u64(e.va);
    w.u32(e.rkey);
    w.u32(e.length);
    w.u32(e.pdn);
    w.u64(e.original);
    w.u32(e.xrcSrqn);
}

// Where the requester starts again: the oldest WQE it had not completed,
// and the PSN of its first packet (the PSN of the next new one when none
// waits).
struct Restart {
    uint32_t index;
    uint32_t psn;
};

Restart restartOf(const QueuePair &qp) {
    const RequesterState &r = qp.req;
    Restart at{qp.sq.consumer, r.psn};
    if (r.outstanding.empty())
        return at;
    at.index = r.outstanding.front().index;
    for (const SendWqe &w : r.outstanding) {
        if (w.packets) {
            at.psn = w.firstPsn;
            break;
        }
    }
    return at;
}

} // namespace

void DataPath::saveTransport(const QueuePair &qp, StateWriter &w) const {
    const Restart at = restartOf(qp);
    w.u32(qp.sq.producer);
    w.u32(at.index);
    // Up to where it had started WQEs (a loaded QP in SQD that has not
    // fetched them again yet: up to where it will).
    w.u32(qp.req.refetchUntil ? *qp.req.refetchUntil : qp.sq.consumer);
    w.u32(qp.rq.producer);
    w.u32(qp.rq.consumer);
    w.u32(qp.nextPsn);
    w.boolean(qp.lastWqeReached);
    w.boolean(qp.sqDrainPending);
    w.u32(at.psn);
    const ResponderState &s = qp.resp;
    w.u32(s.expectedPsn);
    w.u32(s.msn);
    w.boolean(s.established);
    w.u8(static_cast<uint8_t>(s.in));
    w.boolean(s.haveWqe);
    w.u64(s.wrId);
    w.u16(s.wqeIndex);
    saveSges(w, s.sges);
    w.u32(s.received);
    w.u8(s.status);
    w.u64(s.writeVa);
    w.u32(s.writeRkey);
    w.u32(s.writeLength);
    w.u32(s.xrcSrqn);
    w.u32(s.xrcPdn);
    w.u32(static_cast<uint32_t>(s.replay.size()));
    for (const ReplayEntry &e : s.replay)
        saveReplay(w, e);
    // DC: a DCI's connection of the moment, a DC connection's opener.
    w.u64(qp.dc.key);
    w.u32(qp.dc.connectPsn);
    w.boolean(qp.dc.connected);
    w.u32(qp.dc.serial);
    // A DCI's streams in error (dci_streams.hh).
    w.u32(static_cast<uint32_t>(qp.streams.errored.size()));
    for (const uint16_t stream : qp.streams.errored)
        w.u16(stream);
    // Its page faults' serials, not the faults (page_faults.hh): a fault
    // raised anew after the load has a token no earlier fault had, so a
    // resume the driver meant for one before the move is stale.
    w.u32(qp.req.fault.serial);
    w.u32(qp.resp.fault.serial);
}

namespace {

// A queue's producer and consumer counts: never more than a ring apart,
// and none at all for a queue the QP does not have.
bool validQueue(uint32_t producer, uint32_t consumer, bool has, unsigned logCount) {
    if (!has)
        return producer == 0 && consumer == 0;
    return producer - consumer <= (1u << logCount);
}

// A DCI with streams keeps fewer than 2^logErrored in error, each once;
// any other QP none.
bool validErroredStreams(const DciStreams &streams, std::span<const uint16_t> errored) {
    if (errored.empty())
        return true;
    if (!streams.on() || errored.size() >= size_t{1} << streams.logErrored)
        return false;
    std::vector<uint16_t> sorted(errored.begin(), errored.end());
    std::ranges::sort(sorted);
    return std::ranges::adjacent_find(sorted) == sorted.end();
}

bool loadReplay(StateReader &r, ReplayEntry &e) {
    e.psn = r.u32();
    e.packets = r.u32();
    const uint8_t answer = r.u8();
    if (answer >= kAnswerKinds)
        r.fail("a replayed request's kind");
    e.answer = static_cast<AnswerKind>(answer);
    e.va = r.u64();
    e.rkey = r.u32();
    e.length = r.u32();
    e.pdn = r.u32();
    e.original = r.u64();
    e.xrcSrqn = r.u32();
    return r.ok();
}

} // namespace

// What a loaded responder holds must be what its requests could have
// left: the checks below are those the request packets passed.
const char *DataPath::badResponder(const QueuePair &qp, const ResponderState &s) const {
    if (s.expectedPsn > 0xffffff || s.msn > 0xffffff)
        return "a PSN or MSN beyond 24 bits";
    if (s.haveWqe && s.in != ResponderState::InMessage::kSend)
        return "a receive WQE claimed outside a SEND";
    uint64_t room = 0;
    for (const pib_wqe_data &sge : s.sges)
        room += sge.byte_count;
    if (s.in == ResponderState::InMessage::kSend && s.received > room)
        return "more of a SEND received than its receive WQE holds";
    if (s.in == ResponderState::InMessage::kWrite && s.received > s.writeLength)
        return "more of a WRITE received than it carries";
    if (s.status > PIB_WC_GENERAL_ERR)
        return "a completion status IBA does not define";
    if (s.replay.size() > std::max<size_t>(1, qp.attr.max_dest_rd_atomic))
        return "more READs and atomics remembered than max_dest_rd_atomic";
    const uint32_t mtu = mtuBytes(qp.attr.path_mtu);
    for (const ReplayEntry &e : s.replay) {
        const bool read = e.answer == AnswerKind::kRead;
        const uint32_t packets = read ? std::max<uint32_t>(1, (e.length + mtu - 1) / mtu) : 1;
        if (e.psn > 0xffffff || e.packets != packets || (read && e.length > limits::kMaxMsgSize))
            return "a READ or atomic whose PSNs its length does not make";
    }
    return badResponderPds(qp, s);
}

// The PDs a loaded responder answers in are those its requests' checks
// chose: the QP's own, or on an XRC TGT QP the PD of the XRC SRQ of its
// domain that the request named (Responder::selectXrcSrq). A duplicate
// READ is answered through the entry's PD, so a wrong one would read
// another PD's memory.
const char *DataPath::badResponderPds(const QueuePair &qp, const ResponderState &s) const {
    const bool xrc = qp.ctx.type == PIB_QPT_XRC_TGT;
    // The PD a request through XRC SRQ `srqn` was checked in; nullopt
    // when no request could have named it.
    const auto pdThrough = [&](uint32_t srqn) -> std::optional<uint32_t> {
        if (!xrc)
            return srqn == kNoSrq ? std::optional(qp.ctx.pdn) : std::nullopt;
        const SharedReceiveQueue *srq = srqn == kNoSrq ? nullptr : objects_.srqs.find(srqn);
        if (!srq || !srq->isXrc() || srq->ctx.xrcdn != qp.ctx.xrcdn)
            return std::nullopt;
        return srq->ctx.pdn;
    };
    if (s.xrcSrqn != kNoSrq || xrc) {
        const auto pd = s.xrcSrqn == kNoSrq ? std::optional<uint32_t>(0) : pdThrough(s.xrcSrqn);
        if (!pd || (xrc && s.xrcPdn != *pd))
            return "an XRC SRQ that is not one of the QP's domain, or not its PD";
    } else if (s.xrcPdn != 0) {
        return "an XRC SRQ's PD on a QP that has none";
    }
    for (const ReplayEntry &e : s.replay) {
        const auto pd = pdThrough(e.xrcSrqn);
        // Only a READ is answered from memory: the others name no PD.
        if (!pd || (e.answer == AnswerKind::kRead && e.pdn != *pd))
            return "a READ or atomic remembered in a PD its request was not checked in";
    }
    return nullptr;
}

void DataPath::loadTransport(QueuePair &qp, StateReader &r) {
    const uint32_t sqProducer = r.u32(), sqConsumer = r.u32(), sqStarted = r.u32();
    const uint32_t rqProducer = r.u32(), rqConsumer = r.u32();
    const uint32_t nextPsn = r.u32();
    const bool lastWqeReached = r.boolean("the last WQE reached");
    const bool drainPending = r.boolean("SQ drained pending");
    const uint32_t restartPsn = r.u32();
    ResponderState s;
    s.expectedPsn = r.u32();
    s.msn = r.u32();
    s.established = r.boolean("COMM_EST raised");
    const uint8_t in = r.u8();
    if (r.ok() && in > static_cast<uint8_t>(ResponderState::InMessage::kWrite))
        r.fail("QP " + std::to_string(qp.number) + ": a message in progress of no kind");
    s.in = static_cast<ResponderState::InMessage>(in);
    s.haveWqe = r.boolean("a receive WQE claimed");
    s.wrId = r.u64();
    s.wqeIndex = r.u16();
    const uint32_t sges = r.count(limits::kMaxSge, sizeof(pib_wqe_data), "SGEs");
    s.sges.resize(sges);
    for (pib_wqe_data &sge : s.sges)
        r.record(sge, "an SGE");
    s.received = r.u32();
    s.status = r.u8();
    s.writeVa = r.u64();
    s.writeRkey = r.u32();
    s.writeLength = r.u32();
    s.xrcSrqn = r.u32();
    s.xrcPdn = r.u32();
    const uint32_t replays = r.count(limits::kMaxRdAtom, 41, "READs and atomics remembered");
    s.replay.resize(replays);
    for (ReplayEntry &e : s.replay)
        loadReplay(r, e);
    const uint64_t dcKey = r.u64();
    const uint32_t connectPsn = r.u32();
    const bool connected = r.boolean("a DCI connected");
    const uint32_t serial = r.u32();
    std::vector<uint16_t> erroredStreams(
        r.count(1u << limits::kLogMaxDciErroredStreams, 2, "DCI streams in error"));
    for (uint16_t &stream : erroredStreams)
        stream = r.u16();
    const uint32_t requesterFaults = r.u32();
    const uint32_t responderFaults = r.u32();
    if (!r.ok())
        return;
    if (!validErroredStreams(qp.streams, erroredStreams)) {
        r.fail("QP " + std::to_string(qp.number) +
               ": streams in error it cannot have (more than its bound, twice, or no DCI streams)");
        return;
    }
    if (connected && (qp.ctx.type != kQptDci || connectPsn > 0xffffff)) {
        r.fail("QP " + std::to_string(qp.number) + ": a DC connection of a QP that is no DCI");
        return;
    }
    const pib_qp_context &c = qp.ctx;
    const bool hasRq = hasReceiveSide(c.type) && !(c.flags & PIB_QP_USE_SRQ);
    if (!validQueue(sqProducer, sqConsumer, hasSendQueue(c.type), c.sq_log_wqe_count) ||
        !validQueue(rqProducer, rqConsumer, hasRq, c.rq_log_wqe_count) ||
        sqStarted - sqConsumer > sqProducer - sqConsumer || restartPsn > 0xffffff ||
        nextPsn > 0xffffff) {
        r.fail("QP " + std::to_string(qp.number) + ": queue indices or PSNs out of range");
        return;
    }
    if (const char *why = badResponder(qp, s)) {
        r.fail("QP " + std::to_string(qp.number) + ": " + why);
        return;
    }
    // The WQEs it had started are fetched again; in SQD, no others.
    if (qp.attr.qp_state == PIB_QPS_SQD)
        qp.req.refetchUntil = sqStarted;
    qp.sq.producer = sqProducer;
    qp.sq.consumer = sqConsumer;
    qp.sqDrainPending = drainPending && qp.attr.qp_state == PIB_QPS_SQD;
    qp.rq.producer = rqProducer;
    qp.rq.consumer = rqConsumer;
    qp.nextPsn = nextPsn;
    qp.lastWqeReached = lastWqeReached;
    qp.req.psn = qp.req.unackedPsn = restartPsn;
    qp.req.answered(qp.attr.retry_cnt, qp.attr.rnr_retry);
    qp.resp = std::move(s);
    qp.streams.errored = std::move(erroredStreams);
    qp.req.fault.serial = requesterFaults;
    qp.resp.fault.serial = responderFaults;
    if (qp.ctx.type == kQptDci || isDcConnection(qp)) {
        qp.dc.key = dcKey;
        qp.dc.connectPsn = connectPsn;
        qp.dc.connected = connected;
        qp.dc.serial = serial;
    }
}

// The loaded QP goes on when the device runs: its requester sends again
// what it had not completed, its responder says what it took.
void DataPath::resumeLoaded(QueuePair &qp) {
    const uint8_t state = qp.attr.qp_state;
    if (isReliableType(qp.ctx.type) && qp.ctx.type != PIB_QPT_XRC_INI &&
        (state == PIB_QPS_RTR || state == PIB_QPS_RTS || state == PIB_QPS_SQD))
        responder_.acknowledgeAll(qp);
    if (qp.sq.consumer != qp.sq.producer && (state == PIB_QPS_RTS || state == PIB_QPS_SQD))
        scheduler_.postpone(qp.number, qp, /*needsPort*/ false);
}

// What either end had in flight when this device moved is lost: the
// switch discards what reaches a port whose device moves, and what this
// device sent before its link resumed went nowhere. So is what the switch
// discarded when its output to the port stalled (PIB_WIRE_DISCARDED). A
// requester would find out at its local ACK timeout, which IBA lets be
// 73 minutes. So each reliable QP of the port says it now, in IBA's terms:
// its requester sends again from the oldest PSN not answered, and its
// responder acknowledges what it took and NAKs the next PSN (a sequence
// error), on which the peer's requester resends from there at once.
// A port of a device that moved (or tried) came back ACTIVE on a link the
// switch did not keep: what was in flight is as lost as on a resumed link.
void DataPath::portActive(unsigned port) {
    if (PortState *p = ports_.find(port); p && p->moved) {
        p->moved = false;
        resendWhatWasLost(port);
    }
}

void DataPath::resendWhatWasLost(unsigned port) {
    const auto resume = [&](QueuePair &qp) {
        const uint8_t state = qp.attr.qp_state;
        if ((!isReliableType(qp.ctx.type) && qp.ctx.type != kQptDci) || qp.attr.port_num != port)
            return;
        if (isReliableType(qp.ctx.type) && qp.ctx.type != PIB_QPT_XRC_INI &&
            (state == PIB_QPS_RTR || state == PIB_QPS_RTS || state == PIB_QPS_SQD))
            responder_.sayWhereAfterLoss(qp);
        if (isReliableRequester(qp.ctx.type) && (state == PIB_QPS_RTS || state == PIB_QPS_SQD))
            requester_.resendAfterLoss(qp);
    };
    objects_.qps.forEach([&](uint32_t, QueuePair &qp) { resume(qp); });
    objects_.dcConnections.table.forEach([&](uint32_t, QueuePair &qp) { resume(qp); });
}

} // namespace pib
