// SPDX-License-Identifier: GPL-2.0-or-later
// The physical link of one port: the byte stream to a switch port, framed
// by the pib wire protocol (docs/wire.md). Up once both ends said HELLO.
// A switch that takes rings gets a ring cable offered (link_rings.hh):
// then packets travel in shared memory and the stream carries HELLOs.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "cables.hh"
#include "frame.hh"
#include "host.hh"
#include "link_rings.hh"
#include "pcap.hh"

namespace pib {

class Link {
  public:
    // kResumed: the link is up again as it was before its device moved
    // (moving() below); the port keeps its state. kLost: the switch says
    // it discarded packets to the port (PIB_WIRE_DISCARDED): what was in
    // flight either way may be gone, as after a move.
    enum class Event { kNone, kUp, kDown, kResumed, kLost };
    // A packet the cable delivered, valid during the call: `bytes`, and
    // `head`, a private copy of their first bytes when they lie in memory
    // the switch shares and may rewrite (a ring cable: iba::parseShared),
    // else empty.
    using PacketSink =
        std::function<void(std::span<const uint8_t> bytes, std::span<const uint8_t> head)>;

    Link(const Host &host, unsigned port, uint64_t nodeGuid, uint64_t portGuid)
        : host_(host), port_(port), nodeGuid_(nodeGuid), portGuid_(portGuid) {}

    Event connected(bool connected);
    // The port was reset (a device reset, CLOSE_HCA): a link that is up
    // trains again. It sends HELLO and is down until the peer answers
    // with its own (docs/wire.md). False when the link was not up.
    bool retrain();
    // Feeds stream bytes. In stream order, calls onEvent when the link comes
    // up or goes down, and onPacket with each packet (valid during the call,
    // not copied).
    void receive(std::span<const uint8_t> bytes, const std::function<void(Event)> &onEvent,
                 const PacketSink &onPacket);
    // The ring cable's doorbell rang: delivers what came in the ring, as
    // receive() does. True when packets that waited for room went, so
    // that the port may start new work.
    bool bell(const std::function<void(Event)> &onEvent, const PacketSink &onPacket);
    bool ringsUp() const { return rings_ && rings_->up(); }
    // Sends a packet that has wire::kHeaderSize free bytes in front.
    // False when the host's queue for the link is full (the packet went).
    bool sendFramed(std::vector<uint8_t> &framed);
    bool up() const { return up_; }
    // A device that moves (docs/wire.md, "A device that moves"). moving():
    // the VM stops to move; a link that is up says MOVING to its switch
    // port and then sends and takes nothing, while its port keeps its
    // state (no Event). moveFailed(): the VM runs here again; the link
    // says HELLO with PIB_WIRE_HELLO_RESUMES and is up at once (kResumed).
    // resumeOnNextCable(): a loaded device whose saved link was up; the
    // next cable's HELLO resumes it, and the link comes up as it was when
    // the switch's HELLO says it kept it (kResumed), else as a new link.
    void moving();
    bool moved() const { return moved_; }
    Event moveFailed();
    void resumeOnNextCable() { resumes_ = true; }
    // Up, moving, or waiting for the cable that resumes it: a saved
    // device's link that its loaded copy resumes.
    bool resumable() const { return up_ || moved_ || resumes_; }
    // Room of `framedBytes` (wire::kHeaderSize of them for the frame
    // header) to build a packet in place, straight in the ring cable: when
    // the cable is a ring with room, and no capture needs a copy. Empty
    // otherwise (sendFramed() it). sendBuilt() then sends what was built.
    bool buildsInPlace() const { return up_ && ringsUp() && !capture_; }
    std::span<uint8_t> room(size_t framedBytes);
    void sendBuilt(std::span<uint8_t> framed);
    // Positions on the cable (Cables::sentMark): a ring cable reads its
    // own indexes; a stream counts what it gave and got, and asks the host
    // what its queue and socket still hold (a system call).
    uint64_t sentMark() const { return ringsUp() ? rings_->sentMark() : streamSent_; }
    bool takenUpTo(uint64_t mark) const;
    uint64_t arrivedMark() const;
    bool readUpTo(uint64_t mark) const;
    // Its ring cable asked for a turn of its own (LinkRings::wantsTurn).
    bool wantsTurn() const { return ringsUp() && rings_->wantsTurn(); }
    uint64_t framesBuiltInRing() const { return builtInRing_; }
    uint64_t framesReadInRing() const { return readInRing_; }
    // A port in Polling (connected, no HELLO from the peer yet) sends its
    // HELLO again every kHelloRetryNs, in case the first was lost (the
    // peer was not listening yet). pollingDeadline() is when; 0 when the
    // link is up or unplugged. retryHello() sends it if that time came.
    static constexpr uint64_t kHelloRetryNs = 1'000'000'000;
    uint64_t pollingDeadline() const { return helloDue_; }
    void retryHello(uint64_t now);
    uint64_t framesDropped() const { return framesDropped_; }

    // Records every packet the link sends and receives to a pcap file
    // (`limit` packets at most, 0 for no limit) until stopCapture();
    // false with the reason in `error` when the file cannot be written.
    bool startCapture(const std::string &path, uint64_t limit, std::string *error);
    // What was captured ("12 packets to FILE"), empty if nothing was.
    std::string stopCapture();
    const wire::PacketCapture *capture() const { return capture_.get(); }

  private:
    const Host &host_;
    unsigned port_;
    uint64_t nodeGuid_;
    uint64_t portGuid_;
    bool connected_ = false;
    bool up_ = false;
    wire::FrameReader reader_;
    uint64_t framesDropped_ = 0;
    uint64_t builtInRing_ = 0; // packets the device wrote straight into the ring
    uint64_t readInRing_ = 0;  // and those whose payload it read from there
    uint64_t helloDue_ = 0;    // Polling: when the HELLO goes again
    uint64_t upSinceNs_ = 0;   // when the link last came up
    // Bytes given to the stream and got from it since it connected (a
    // stream's marks; a ring cable counts its own).
    uint64_t streamSent_ = 0;
    uint64_t streamReceived_ = 0;
    bool moved_ = false;   // said MOVING: silent until it resumes
    bool resumes_ = false; // the next cable's HELLO resumes the link
    // A HELLO this soon after the link came up crossed ours: dropped.
    static constexpr uint64_t kMinRetrainNs = 100'000'000;
    // A switch stalls an output for 200 ms at least before it discards:
    // a DISCARDED sooner after the last one is a peer's flood, ignored (each
    // one costs a pass over the port's QPs).
    static constexpr uint64_t kMinDiscardsToldNs = 100'000'000;
    uint64_t discardsToldNs_ = 0; // when the last one was taken

    void sendHello(uint16_t flags = 0);
    void discardsTold(const std::function<void(Event)> &onEvent);
    bool sendOnStream(std::span<const uint8_t> bytes);
    void helloReceived(std::span<const uint8_t> payload, const std::function<void(Event)> &onEvent);
    void peerHello(const std::function<void(Event)> &onEvent);
    void offerRings();
    void ringsAnswered(std::span<const uint8_t> payload);
    void packetReceived(std::span<const uint8_t> packet, std::span<const uint8_t> head,
                        const PacketSink &onPacket);
    // The peer broke the wire protocol: the link drops, the host unplugs.
    void drop(const char *reason, const std::function<void(Event)> &onEvent);
    std::unique_ptr<LinkRings> rings_; // offered or up; none on a plain stream
    bool ringsOffered_ = false;        // once per cable, taken or not
    std::unique_ptr<wire::PacketCapture> capture_;

    void record(std::span<const uint8_t> packet, wire::PacketCapture::Direction direction) {
        if (capture_)
            capture_->record(packet, direction);
    }
};

// The scheduler's way to the wire: the link of each port.
class PortLinks final : public Cables {
  public:
    explicit PortLinks(std::vector<std::unique_ptr<Link>> &links) : links_(links) {}
    bool send(unsigned port, std::vector<uint8_t> &framed) override;
    bool buildsInPlace(unsigned port) const override {
        const Link *link = find(port);
        return link && link->buildsInPlace();
    }
    std::span<uint8_t> room(unsigned port, size_t framedBytes) override;
    void sendBuilt(unsigned port, std::span<uint8_t> framed) override;
    // A port without a link has sent nothing and has nothing to read.
    uint64_t sentMark(unsigned port) const override { return ask(port, &Link::sentMark, 0); }
    bool takenUpTo(unsigned port, uint64_t mark) const override {
        return ask(port, &Link::takenUpTo, true, mark);
    }
    uint64_t arrivedMark(unsigned port) const override { return ask(port, &Link::arrivedMark, 0); }
    bool readUpTo(unsigned port, uint64_t mark) const override {
        return ask(port, &Link::readUpTo, true, mark);
    }

  private:
    std::vector<std::unique_ptr<Link>> &links_; // index: port - 1
    Link *find(unsigned port) const {
        return port >= 1 && port <= links_.size() ? links_[port - 1].get() : nullptr;
    }
    // `question` of the port's link, or `none` for a port without one.
    template <class R, class... Args>
    R ask(unsigned port, R (Link::*question)(Args...) const, std::type_identity_t<R> none,
          std::type_identity_t<Args>... args) const {
        const Link *link = find(port);
        return link ? (link->*question)(args...) : none;
    }
};

} // namespace pib
