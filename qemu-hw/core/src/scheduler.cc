// SPDX-License-Identifier: GPL-2.0-or-later
#include "scheduler.hh"

#include "frame.hh"
#include "limits.hh"
#include "trace.hh"

namespace pib {

// A framed packet leaving port `port`, traced with its headers; they are
// parsed only when someone reads the event.
static void traceSent(const Host &host, unsigned port, std::span<const uint8_t> framed) {
    if (!host.eventEnabled(PIB_EVENT_PACKET_SENT))
        return;
    const auto bytes = framed.subspan(wire::kHeaderSize);
    iba::ParseError error;
    if (const auto packet = iba::parse(bytes, &error, false, /*copyPayload=*/false))
        trace::packet_sent(host, port, packet->bth.opcode, packet->bth.psn, packet->bth.destQp,
                           static_cast<unsigned>(bytes.size()));
}

void Scheduler::beginEvent() {
    budget_ = static_cast<int>(limits::kPacketsPerEvent);
    holdLoopback_ = false;
}

void Scheduler::endEvent() {
    sendDeferredAcks();
    if (holdLoopback_ && !loopback_.empty()) {
        host_.schedule(); // the run's own end drains it
    } else {
        // Requests that come back on the loopback owe ACKs, which come
        // back too; the budget bounds the rounds (a QP out of it waits
        // for run()).
        do {
            drainLoopback();
            sendDeferredAcks();
        } while (!loopback_.empty() && budget_ > 0);
    }
    if (!ready_.empty() || !loopback_.empty())
        host_.schedule();
}

void Scheduler::acknowledgeAtEventEnd(QueuePair &qp) {
    if (qp.acksAtEventEnd)
        return;
    qp.acksAtEventEnd = true;
    acksDue_.push_back(qp.number);
}

// What is owed goes as the budget and the port allow; the rest waits
// for run() as any postponed work.
void Scheduler::sendDeferredAcks() {
    for (size_t i = 0; i < acksDue_.size(); ++i) { // a loopback may add to it
        QueuePair *qp = objects_.findTransportQp(acksDue_[i]);
        if (!qp || !qp->acksAtEventEnd)
            continue; // destroyed since
        qp->acksAtEventEnd = false;
        engine_.sendReplies(*qp);
    }
    acksDue_.clear();
}

bool Scheduler::mayTransmit(unsigned portNumber) const {
    const PortState *p = ports_.find(portNumber);
    return budget_ > 0 && (!p || !p->txFull);
}

bool Scheduler::waitsForRoom(const QueuePair &qp) const {
    const PortState *p = ports_.find(sendPort(qp));
    return qp.postponed && p && p->txFull;
}

uint64_t Scheduler::cableSentMark(const QueuePair &qp) const {
    return cables_ ? cables_->sentMark(sendPort(qp)) : 0;
}

uint64_t Scheduler::cableArrivedMark(const QueuePair &qp) const {
    return cables_ ? cables_->arrivedMark(sendPort(qp)) : 0;
}

bool Scheduler::cableTakenUpTo(const QueuePair &qp, uint64_t mark) const {
    return !cables_ || cables_->takenUpTo(sendPort(qp), mark);
}

bool Scheduler::cableReadUpTo(const QueuePair &qp, uint64_t mark) const {
    return !cables_ || cables_->readUpTo(sendPort(qp), mark);
}

void Scheduler::postpone(uint32_t qpn, QueuePair &qp, bool needsPort) {
    if (qp.postponed)
        return;
    qp.postponed = true;
    const unsigned portNumber = sendPort(qp);
    PortState *p = ports_.find(portNumber);
    if (needsPort && p && p->txFull)
        p->waiting.push_back(qpn);
    else
        ready_.push_back(qpn);
}

// Hands a built packet to the link of `portNumber`, counting it against
// the event's budget; a full host queue holds back the port's new work.
void Scheduler::transmit(unsigned portNumber, std::vector<uint8_t> &framed) {
    --budget_;
    PortState *p = ports_.find(portNumber);
    if (!p || !cables_)
        return;
    ++p->xmitPackets;
    p->xmitWords += (framed.size() - wire::kHeaderSize) / 4;
    traceSent(host_, portNumber, framed);
    if (!cables_->send(portNumber, framed) && !p->txFull) {
        p->txFull = true;
        trace::port_queue_full(host_, portNumber);
    }
}

std::span<uint8_t> Scheduler::roomOnCable(unsigned portNumber, size_t framedBytes) {
    // Room asked for and not used is no harm: nothing is committed.
    const std::span<uint8_t> room = cables_->room(portNumber, framedBytes);
    if (room.empty() || !mayTransmit(portNumber) || !ports_.find(portNumber) ||
        host_.eventEnabled(PIB_EVENT_PACKET_SENT))
        return {};
    return room;
}

void Scheduler::sendBuilt(unsigned portNumber, std::span<uint8_t> framed) {
    --budget_;
    PortState &p = *ports_.find(portNumber); // roomOnCable() found it
    ++p.xmitPackets;
    p.xmitWords += (framed.size() - wire::kHeaderSize) / 4;
    cables_->sendBuilt(portNumber, framed);
}

void Scheduler::portWritable(unsigned portNumber) {
    PortState *p = ports_.find(portNumber);
    if (!p || !p->txFull)
        return;
    p->txFull = false;
    trace::port_queue_room(host_, portNumber, static_cast<unsigned>(p->waiting.size()));
    ready_.insert(ready_.end(), p->waiting.begin(), p->waiting.end());
    p->waiting.clear();
    run();
}

// Continues postponed work, oldest first, within this event's budget.
void Scheduler::run() {
    // Each QP in the list now gets one turn; those that postpone again go
    // to the back, so one busy QP cannot keep the others waiting.
    for (size_t turns = ready_.size(); turns && budget_ > 0 && !ready_.empty(); --turns) {
        const uint32_t qpn = ready_.front();
        ready_.pop_front();
        QueuePair *qp = objects_.findTransportQp(qpn);
        if (!qp || !qp->postponed)
            continue; // destroyed or reset since
        qp->postponed = false;
        engine_.resume(*qp);
        drainLoopback();
    }
}

void Scheduler::send(unsigned portNumber, std::vector<uint8_t> &&framed) {
    transmit(portNumber, framed);
    recyclePacket(std::move(framed));
}

void Scheduler::loopBack(unsigned portNumber, std::vector<uint8_t> &&framed) {
    // It costs the event's budget like any packet: the loopback stays short.
    --budget_;
    if (PortState *p = ports_.find(portNumber)) {
        ++p->xmitPackets;
        p->xmitWords += (framed.size() - wire::kHeaderSize) / 4;
    }
    traceSent(host_, portNumber, framed);
    loopback_.push_back({portNumber, std::move(framed)});
}

void Scheduler::reset() {
    loopback_.clear();
    acksDue_.clear();
    ready_.clear(); // the ports' waiting lists go with the ports
}

std::vector<uint8_t> Scheduler::packetBuffer() {
    if (spentPackets_.empty())
        return {};
    std::vector<uint8_t> buffer = std::move(spentPackets_.back());
    spentPackets_.pop_back();
    return buffer;
}

void Scheduler::recyclePacket(std::vector<uint8_t> &&framed) {
    // A few are enough: one engine sends one packet at a time.
    constexpr size_t kSpares = 8;
    if (spentPackets_.size() < kSpares)
        spentPackets_.push_back(std::move(framed));
}

void Scheduler::drainLoopback() {
    if (drainingLoopback_)
        return;
    // Cleared however this returns: an exception must not leave the
    // loopback stuck for good.
    struct Draining {
        bool &flag;
        explicit Draining(bool &f) : flag(f) { flag = true; }
        ~Draining() { flag = false; }
    } draining(drainingLoopback_);
    while (!loopback_.empty()) {
        auto [portNumber, framed] = std::move(loopback_.front());
        loopback_.pop_front();
        const auto bytes = std::span<const uint8_t>(framed).subspan(wire::kHeaderSize);
        if (PortState *p = ports_.find(portNumber)) {
            ++p->rcvPackets;
            p->rcvWords += bytes.size() / 4;
        }
        iba::ParseError error;
        if (auto packet = iba::parse(bytes, &error, true, /*copyPayload=*/false)) {
            trace::packet_received(host_, portNumber, packet->bth.opcode, packet->bth.psn,
                                   packet->bth.destQp, static_cast<unsigned>(bytes.size()));
            engine_.receiveLooped(portNumber, *packet);
        }
        recyclePacket(std::move(framed));
    }
}

} // namespace pib
