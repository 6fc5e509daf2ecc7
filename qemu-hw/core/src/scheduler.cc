// SPDX-License-Identifier: GPL-2.0-or-later
// Bounded work per event. Every call from the host (a BAR access, bytes
// from a port, the timer, a bottom half) is one event, which may put at
// most limits::kPacketsPerEvent packets on the ports or the loopback. An
// engine that has more to send, or whose port's host queue is full, stops
// where it is and its QP waits: in the ready list for the next
// pib_core_run() (which the host runs from its main loop), or in the
// port's waiting list until the host says the port has room again. So a
// guest's 2 GiB READ, or a peer's stream of duplicate READ requests, costs
// each event the same bounded time and memory, and a peer that stops
// reading stalls only the QPs that send to it.
#include "data_path.hh"
#include "frame.hh"
#include "limits.hh"

namespace pib {

void DataPath::beginEvent() {
    budget_ = static_cast<int>(limits::kPacketsPerEvent);
}

void DataPath::endEvent() {
    drainLoopback();
    if (!ready_.empty())
        host_.schedule();
}

bool DataPath::mayTransmit(unsigned portNumber) {
    const PortState *p = ports_.find(portNumber);
    return budget_ > 0 && (!p || !p->txFull);
}

void DataPath::postpone(uint32_t qpn, QueuePair &qp) {
    if (qp.postponed)
        return;
    qp.postponed = true;
    const unsigned portNumber = sendPort(qp);
    PortState *p = ports_.find(portNumber);
    if (p && p->txFull)
        p->waiting.push_back(qpn);
    else
        ready_.push_back(qpn);
}

// Hands a built packet to the link of `portNumber`, counting it against
// the event's budget; a full host queue holds back the port's new work.
void DataPath::transmit(unsigned portNumber, std::vector<uint8_t> &framed) {
    --budget_;
    PortState *p = ports_.find(portNumber);
    if (!p || !transmit_)
        return;
    ++p->xmitPackets;
    p->xmitWords += (framed.size() - wire::kHeaderSize) / 4;
    if (!transmit_(portNumber, framed) && !p->txFull) {
        p->txFull = true;
        host_.trace("port-full", "port %u: the host's queue is full; new work waits", portNumber);
    }
}

void DataPath::portWritable(unsigned portNumber) {
    PortState *p = ports_.find(portNumber);
    if (!p || !p->txFull)
        return;
    p->txFull = false;
    host_.trace("port-writable", "port %u: %zu QPs resume", portNumber, p->waiting.size());
    ready_.insert(ready_.end(), p->waiting.begin(), p->waiting.end());
    p->waiting.clear();
    run();
}

// Continues postponed work, oldest first, within this event's budget.
void DataPath::run() {
    // Each QP in the list now gets one turn; those that postpone again go
    // to the back, so one busy QP cannot keep the others waiting.
    for (size_t turns = ready_.size(); turns && budget_ > 0 && !ready_.empty(); --turns) {
        const uint32_t qpn = ready_.front();
        ready_.pop_front();
        QueuePair *qp = objects_.findQp(qpn);
        if (!qp || !qp->postponed)
            continue; // destroyed or reset since
        qp->postponed = false;
        sendReplies(qpn, *qp);
        processSendQueue(qpn, *qp);
        drainLoopback();
    }
}

} // namespace pib
