// SPDX-License-Identifier: GPL-2.0-or-later
// The device's end of a ring cable (docs/wire.md, "Ring cables"). When the
// switch's HELLO says it takes rings and the host can pass descriptors, the
// link offers a memfd with two rings and one end of a doorbell line; from the
// switch's answer on, the port's packets travel in shared memory and the
// stream carries only HELLOs. The switch may write anything into the
// memory at any time: frames are copied out before they are looked at and
// every index is checked (wire::RingReader, wire::RingWriter).
#pragma once

#include <cstdint>
#include <deque>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "host.hh"
#include "packet.hh"
#include "ring_cable.hh"

namespace pib {

class LinkRings {
  public:
    static constexpr uint32_t kRingSize = 1 << 20;
    // Frames one doorbell delivers; more wait for the next turn of the
    // host's main loop (the link asks for a pib_core_run() to come back).
    static constexpr unsigned kFramesPerBell = 64;
    // Packets the ring had no room for wait here, in order. The link is
    // "full" while any wait; beyond this many bytes the rest are lost, as
    // on a congested link (the host's limit for a stream, pib_core.h).
    static constexpr size_t kBacklogLimit = 4 << 20;

    // Sends the offer on the port's stream; nullptr and why when the
    // memory, the doorbells or the offer could not be made.
    static std::unique_ptr<LinkRings> offer(const Host &host, unsigned port, std::string *why);
    ~LinkRings();
    LinkRings(const LinkRings &) = delete;
    LinkRings &operator=(const LinkRings &) = delete;

    // The switch's answer: true when it took the rings (the host then
    // watches the doorbell), false when packets stay on the stream.
    bool answered(std::span<const uint8_t> payload);
    bool up() const { return up_; }

    enum class Sent { kOk, kFull, kLost };
    // A whole PACKET frame into the ring, or behind it in the backlog
    // (kFull: start no new work on the port), or lost past the backlog.
    Sent send(std::span<const uint8_t> frame);

    // Room in the ring for a frame of `bytes` built in place (nothing
    // waits in the backlog, the frame would not wrap), or empty; then
    // sendBuilt() once it is built. Nothing else is sent in between.
    std::span<uint8_t> room(size_t bytes);
    void sendBuilt(size_t bytes);
    // Positions on the cable, counted in bytes from its start (Cables):
    // past everything sent (in the ring, taken or not, or behind it), and
    // past everything the switch published to this end.
    uint64_t sentMark() const { return out_.total() + backlogBytes_; }
    bool takenUpTo(uint64_t mark) const { return out_.total() - out_.inFlight() >= mark; }
    uint64_t arrivedMark() const { return in_.total() + in_.waiting(); }
    bool readUpTo(uint64_t mark) const { return in_.total() >= mark; }
    // It asked for a turn of its own (comeBack): the host's next
    // pib_core_run() serves it as a doorbell would.
    bool wantsTurn() const { return up_ && wantsTurn_; }

    struct Rang {
        bool writable = false;        // the backlog went into the ring: new work may start
        const char *broken = nullptr; // what the switch broke; the link is to drop
    };
    // The doorbell rang: frames to read, or room to write. Delivers at
    // most kFramesPerBell packets (each frame's payload) to `deliver`, which
    // returns false to stop (the link dropped; the rings are not freed
    // before this returns). A long packet is delivered where it lies in the
    // ring, with a private copy of its headers (Link::PacketSink): its
    // payload goes from the ring to guest memory in one copy.
    template <class Deliver> Rang rang(Deliver &&deliver);

  private:
    LinkRings(const Host &host, unsigned port, std::unique_ptr<wire::RingMemory> memory, int bell);
    const Host &host_;
    unsigned port_;
    std::unique_ptr<wire::RingMemory> memory_;
    wire::RingWriter out_; // ring 0: to the switch
    wire::RingReader in_;  // ring 1: from it
    int bell_;             // our end of the doorbell line; the host watches it
    bool up_ = false;
    bool wantsTurn_ = false;
    std::deque<std::vector<uint8_t>> backlog_;
    size_t backlogBytes_ = 0;

    bool flushBacklog();
    void finishReading(bool more);
    void comeBack();
};

template <class Deliver> LinkRings::Rang LinkRings::rang(Deliver &&deliver) {
    Rang result;
    if (!up_)
        return result;
    wantsTurn_ = false;
    if (!wire::clearDoorbell(bell_))
        return {false, "the switch closed the ring cable's doorbell line"};
    const bool wasFull = !backlog_.empty();
    if (wasFull && flushBacklog())
        result.writable = true;
    if (out_.corrupt())
        return {false, "the switch broke the index of the device's ring"};
    wire::RingReader::Error error = wire::RingReader::Error::kNone;
    unsigned frames = 0;
    while (frames < kFramesPerBell) {
        const auto frame = in_.nextInPlace(iba::kMaxHeaderBytes, &error);
        if (!frame)
            break;
        ++frames;
        const bool shared = frame->payload.data() != frame->head.data();
        if (!deliver(frame->payload, shared ? frame->head : std::span<const uint8_t>{}))
            return result; // the link dropped: nothing more is read
    }
    if (error != wire::RingReader::Error::kNone)
        return {false, wire::RingReader::toString(error)};
    finishReading(frames == kFramesPerBell);
    return result;
}

} // namespace pib
