// SPDX-License-Identifier: GPL-2.0-or-later
// The scheduler and the way out of the data path: bounded work per
// event. Every call from the host (a BAR access, bytes from a port, the
// timer, a bottom half) is one event, which may put at most
// limits::kPacketsPerEvent packets on the ports or the loopback. An
// engine that has more to send, or whose port's host queue is full, stops
// where it is and its QP waits: in the ready list for the next
// pib_core_run() (which the host runs from its main loop), or in the
// port's waiting list until the host says the port has room again. So a
// guest's 2 GiB READ, or a peer's stream of duplicate READ requests, costs
// each event the same bounded time and memory, and a peer that stops
// reading stalls only the QPs that send to it.
#pragma once

#include <cstdint>
#include <deque>
#include <span>
#include <utility>
#include <vector>

#include "cables.hh"
#include "host.hh"
#include "object_tables.hh"
#include "packet.hh"
#include "ports.hh"

namespace pib {

// What the scheduler asks of the engines whose work it bounds: to go on
// with a QP's postponed work, and to take a packet a QP sent to its own
// port. The scheduler needs nothing else of the data path.
class ScheduledEngine {
  public:
    virtual void resume(QueuePair &qp) = 0;
    virtual void receiveLooped(unsigned port, const iba::Packet &packet) = 0;
    // The responder's replies owed by `qp` go out.
    virtual void sendReplies(QueuePair &qp) = 0;

  protected:
    ~ScheduledEngine() = default;
};

class Scheduler {
  public:
    Scheduler(const Host &host, const ObjectTables &objects, Ports &ports, ScheduledEngine &engine)
        : host_(host), objects_(objects), ports_(ports), engine_(engine) {}

    // The Device brackets every call from the host with beginEvent() and
    // endEvent(); run() goes on with postponed work (pib_core_run),
    // portWritable() with the work a full port held back.
    void beginEvent();
    void endEvent();
    void run();
    void portWritable(unsigned port);
    // Nothing postponed, nothing looped back: the power-on state.
    void reset();

    // Whether this event may still send a packet on `port`.
    bool mayTransmit(unsigned port) const;
    // Whether `qp` waits for its port to have room (it said full).
    bool waitsForRoom(const QueuePair &qp) const;
    // Where the cable of `qp`'s port stands, and whether the switch took
    // and the device read up to a mark of it (Cables::sentMark).
    uint64_t cableSentMark(const QueuePair &qp) const;
    bool cableTakenUpTo(const QueuePair &qp, uint64_t mark) const;
    uint64_t cableArrivedMark(const QueuePair &qp) const;
    bool cableReadUpTo(const QueuePair &qp, uint64_t mark) const;
    // Whether this event may still do work that sends nothing.
    bool mayWork() const { return budget_ > 0; }
    // `qp`'s responder owes an ACK: it goes when the event ends, so that
    // one ACK answers every request of `qp` that the event brought
    // (IBA 9.7.5.1.1 lets a responder coalesce them). A batch of frames
    // from the port then costs one ACK, not one per message.
    void acknowledgeAtEventEnd(QueuePair &qp);
    // `qp` waits for the next run(), or for its port to have room; work
    // that sends nothing (a flush) waits for the next run only.
    void postpone(uint32_t qpn, QueuePair &qp, bool needsPort = true);
    // A built packet (wire::kHeaderSize bytes of headroom in front) to
    // the link of `port`, its buffer kept for a later packet.
    void send(unsigned port, std::vector<uint8_t> &&framed);
    // A packet a QP of `port` sent to the port itself: it comes back in
    // once the engine that sent it has returned, as if it had crossed a
    // wire, so no engine is re-entered.
    void loopBack(unsigned port, std::vector<uint8_t> &&framed);
    // A packet that reached no port (delivered within the device, or lost
    // on a port that cannot send), or a local operation of a send queue,
    // costs the event's budget all the same.
    void charge() { --budget_; }
    // Delivers the looped-back packets.
    void drainLoopback();
    // This event's looped-back packets wait for the next run(): a send
    // queue's doorbell must not see the answers to what it sent (their
    // completions) while the write is still under way.
    void holdLoopback() { holdLoopback_ = true; }

    // A buffer for the next packet, and one to reuse: the data path then
    // allocates no memory per packet.
    std::vector<uint8_t> packetBuffer();
    void recyclePacket(std::vector<uint8_t> &&framed);

    // Whether `port`'s cable may take a packet built in place at all.
    bool buildsOnCable(unsigned port) const {
        return cables_ && budget_ > 0 && cables_->buildsInPlace(port);
    }
    // After buildsOnCable() said yes (the caller asks it first, cheaply):
    // room to build a packet of `framedBytes` straight on `port`'s cable,
    // when this event may send on the port and nobody traces the packets
    // sent (the trace would read them back from memory the peer shares);
    // else empty, and the packet is built in a packetBuffer(). A packet
    // built there goes with sendBuilt(), before any other is sent.
    std::span<uint8_t> roomOnCable(unsigned port, size_t framedBytes);
    void sendBuilt(unsigned port, std::span<uint8_t> framed);

    // Where packets for the wire go: the Device's links.
    void setCables(Cables *cables) { cables_ = cables; }

  private:
    void transmit(unsigned port, std::vector<uint8_t> &framed);
    void sendDeferredAcks();

    const Host &host_;
    const ObjectTables &objects_;
    Ports &ports_;
    ScheduledEngine &engine_;
    Cables *cables_ = nullptr;
    std::vector<std::vector<uint8_t>> spentPackets_;
    std::deque<std::pair<unsigned, std::vector<uint8_t>>> loopback_;
    bool drainingLoopback_ = false;
    bool holdLoopback_ = false;
    // Packets the current event may still send, and the QPs whose work
    // waits for the next run().
    int budget_ = 0;
    std::deque<uint32_t> ready_;
    std::vector<uint32_t> acksDue_; // QPs whose ACKs go at the event's end
};

} // namespace pib
