// SPDX-License-Identifier: GPL-2.0-or-later
#include "link.hh"
#include "trace.hh"

#include <algorithm>
#include <cinttypes>
#include <cstring>
#include <utility>

namespace pib {

Link::Event Link::connected(bool connected) {
    const bool wasUp = up_;
    connected_ = connected;
    up_ = false;
    helloDue_ = 0;
    streamSent_ = streamReceived_ = 0; // a new stream
    reader_.reset();
    rings_.reset(); // a new cable offers its own
    ringsOffered_ = false;
    if (moved_) { // a moved link's cable is gone: the next cable resumes it
        moved_ = false;
        resumes_ = true;
    }
    if (connected) {
        sendHello(resumes_ ? PIB_WIRE_HELLO_RESUMES : 0);
        trace::link_connected(host_, port_);
    } else {
        trace::link_disconnected(host_, port_);
    }
    return wasUp ? Event::kDown : Event::kNone;
}

// Every HELLO we send starts (or restarts) the Polling retry clock; the
// link coming up stops it.
void Link::sendHello(uint16_t flags) {
    helloDue_ = host_.clockNs() + kHelloRetryNs;
    pib_wire_hello hello{};
    hello.flags = flags | PIB_WIRE_HELLO_TAKES_DISCARDS;
    hello.node_guid = nodeGuid_;
    hello.port_guid = portGuid_;
    hello.node_type = PIB_WIRE_NODE_CA;
    hello.port = static_cast<uint8_t>(port_);
    sendOnStream(wire::encode(PIB_WIRE_HELLO,
                              std::span(reinterpret_cast<const uint8_t *>(&hello), sizeof(hello))));
}

bool Link::sendOnStream(std::span<const uint8_t> bytes) {
    streamSent_ += bytes.size();
    return host_.portSend(port_, bytes);
}

void Link::moving() {
    if (!up_)
        return;
    sendOnStream(wire::encode(PIB_WIRE_MOVING, {}));
    up_ = false;
    moved_ = true;
    helloDue_ = 0;
    trace::link_moving(host_, port_);
}

Link::Event Link::moveFailed() {
    if (!moved_)
        return Event::kNone;
    moved_ = false;
    sendHello(PIB_WIRE_HELLO_RESUMES);
    helloDue_ = 0;
    up_ = true;
    upSinceNs_ = 0; // a HELLO from the switch now means it did not keep the link
    trace::link_resumed(host_, port_);
    return Event::kResumed;
}

bool Link::retrain() {
    if (!up_)
        return false;
    up_ = false;
    sendHello();
    trace::link_retrain(host_, port_);
    return true;
}

void Link::retryHello(uint64_t now) {
    if (!connected_ || up_ || moved_)
        helloDue_ = 0; // nothing to poll for: the timer must not fire again
    if (!helloDue_ || helloDue_ > now)
        return;
    trace::link_polling(host_, port_);
    sendHello();
}

// A HELLO on a link that is up: the peer reset its port and trains the
// link again, or polls because it never heard ours. As a switch port
// does (docs/wire.md), the link goes down and comes up, and the peer
// hears our HELLO. Within kMinRetrainNs of the link coming up a HELLO is
// one that crossed ours (both ends sent one at once, or the peer's
// answer to it): it is dropped, not answered, or two ends that both
// answer would send HELLOs back and forth for ever. A peer that really
// polls sends its HELLO again a second later.
void Link::peerHello(const std::function<void(Event)> &onEvent) {
    const uint64_t now = host_.clockNs();
    if (now - upSinceNs_ < kMinRetrainNs) {
        trace::link_hello_crossed(host_, port_);
        return;
    }
    trace::link_peer_retrain(host_, port_);
    up_ = false;
    onEvent(Event::kDown);
    if (!connected_)
        return; // the handler dropped the link
    sendHello();
    helloDue_ = 0;
    up_ = true;
    upSinceNs_ = now;
    onEvent(Event::kUp);
}

void Link::receive(std::span<const uint8_t> bytes, const std::function<void(Event)> &onEvent,
                   const PacketSink &onPacket) {
    if (!connected_)
        return;
    streamReceived_ += bytes.size();
    // Packets are read where the stream put them; only a frame cut off at
    // the end of `bytes` is copied, to wait for the rest.
    reader_.lend(bytes);
    wire::FrameReader::Error error;
    while (auto frame = reader_.nextView(&error)) {
        if (moved_) // the VM stopped to move: nothing reaches it
            continue;
        if (frame->type == PIB_WIRE_HELLO)
            helloReceived(frame->payload, onEvent);
        else if (frame->type == PIB_WIRE_RINGS)
            ringsAnswered(frame->payload);
        else if (frame->type == PIB_WIRE_PACKET)
            packetReceived(frame->payload, {}, onPacket);
        else if (frame->type == PIB_WIRE_DISCARDED)
            discardsTold(onEvent);
        if (!connected_) {
            reader_.reset();
            return; // a handler dropped the link
        }
    }
    reader_.keepRest();
    if (error != wire::FrameReader::Error::kNone)
        drop(wire::FrameReader::toString(error), onEvent);
}

void Link::helloReceived(std::span<const uint8_t> payload,
                         const std::function<void(Event)> &onEvent) {
    pib_wire_hello hello;
    if (payload.size() < sizeof(hello))
        return; // too short to be a HELLO: ignored
    std::memcpy(&hello, payload.data(), sizeof(hello));
    // The offer goes before the link's events: a port that resumes after
    // its device moved resends at once what the move lost, and a host
    // passes the offer's descriptors only with nothing queued before them
    // (a stream full of resends would keep the port off its ring).
    if (connected_ && !ringsOffered_ && (hello.flags & PIB_WIRE_HELLO_TAKES_RINGS)) {
        ringsOffered_ = true;
        offerRings();
    }
    if (!up_) {
        up_ = true;
        helloDue_ = 0;
        upSinceNs_ = host_.clockNs();
        const bool resumed = std::exchange(resumes_, false);
        if (resumed && (hello.flags & PIB_WIRE_HELLO_RESUMES)) { // the switch kept it
            trace::link_resumed(host_, port_);
            onEvent(Event::kResumed);
        } else {
            trace::link_up(host_, port_);
            if (resumed) // the port's saved state belonged to the link that ended
                onEvent(Event::kDown);
            onEvent(Event::kUp);
        }
    } else {
        peerHello(onEvent);
    }
}

// The switch discarded packets to the port: its output to us took nothing
// for its head-of-queue lifetime (a QEMU the host did not run). What
// either end had in flight is handled as after a move (kLost).
void Link::discardsTold(const std::function<void(Event)> &onEvent) {
    if (!up_)
        return; // a link that comes up starts afresh anyway
    const uint64_t now = host_.clockNs();
    if (discardsToldNs_ && now - discardsToldNs_ < kMinDiscardsToldNs) {
        trace::link_discards_too_often(host_, port_);
        return;
    }
    discardsToldNs_ = now;
    trace::link_discards_told(host_, port_);
    onEvent(Event::kLost);
}

// Once per cable: a refused or failed offer leaves the stream as it was.
void Link::offerRings() {
    std::string why;
    rings_ = LinkRings::offer(host_, port_, &why);
    if (rings_)
        trace::link_rings_offered(host_, port_, LinkRings::kRingSize);
    else
        trace::link_rings_not_offered(host_, port_, why.c_str());
}

void Link::ringsAnswered(std::span<const uint8_t> payload) {
    if (!rings_ || rings_->up())
        return; // no offer was made, or it was answered: ignored
    if (rings_->answered(payload)) {
        trace::link_rings_up(host_, port_);
    } else {
        trace::link_rings_refused(host_, port_);
        rings_.reset();
    }
}

void Link::packetReceived(std::span<const uint8_t> packet, std::span<const uint8_t> head,
                          const PacketSink &onPacket) {
    if (!up_) {
        ++framesDropped_; // packets before HELLO: the link is not up
        return;
    }
    record(packet, wire::PacketCapture::Direction::kReceived);
    onPacket(packet, head);
}

bool Link::bell(const std::function<void(Event)> &onEvent, const PacketSink &onPacket) {
    if (!connected_ || !ringsUp())
        return false;
    const LinkRings::Rang rang =
        rings_->rang([&](std::span<const uint8_t> packet, std::span<const uint8_t> head) {
            if (!head.empty())
                ++readInRing_;
            packetReceived(packet, head, onPacket);
            return connected_;
        });
    if (rang.broken)
        drop(rang.broken, onEvent);
    return rang.writable && connected_;
}

void Link::drop(const char *reason, const std::function<void(Event)> &onEvent) {
    // The fabric is untrusted too: a corrupt stream or ring drops the link.
    trace::err_link(host_, port_, reason);
    const bool wasUp = up_;
    up_ = false;
    connected_ = false;
    helloDue_ = 0;
    reader_.reset();
    rings_.reset();
    host_.portDisconnect(port_);
    if (wasUp)
        onEvent(Event::kDown);
}

bool Link::sendFramed(std::vector<uint8_t> &framed) {
    if (!up_ || framed.size() < wire::kHeaderSize)
        return true; // lost on a link that is down; nothing queues up
    wire::frameInPlace(framed, PIB_WIRE_PACKET);
    record(std::span(framed).subspan(wire::kHeaderSize), wire::PacketCapture::Direction::kSent);
    if (!ringsUp())
        return sendOnStream(framed);
    const LinkRings::Sent sent = rings_->send(framed);
    if (sent == LinkRings::Sent::kLost)
        ++framesDropped_;
    return sent == LinkRings::Sent::kOk;
}

// A stream's bytes in the host's queue or its socket: those the switch
// has not taken, and those not given to the core yet. Only counted once
// the host says (pib_host_ops.port_backlog); one that cannot tell has
// everything taken and read.
bool Link::takenUpTo(uint64_t mark) const {
    if (ringsUp())
        return rings_->takenUpTo(mark);
    const uint64_t untaken = host_.portBacklog(port_).untaken;
    return streamSent_ - std::min(untaken, streamSent_) >= mark;
}

uint64_t Link::arrivedMark() const {
    if (ringsUp())
        return rings_->arrivedMark();
    return streamReceived_ + host_.portBacklog(port_).unread;
}

bool Link::readUpTo(uint64_t mark) const {
    return ringsUp() ? rings_->readUpTo(mark) : streamReceived_ >= mark;
}

std::span<uint8_t> Link::room(size_t framedBytes) {
    if (!buildsInPlace() || framedBytes < wire::kHeaderSize)
        return {};
    return rings_->room(framedBytes);
}

void Link::sendBuilt(std::span<uint8_t> framed) {
    wire::frameInPlace(framed, PIB_WIRE_PACKET);
    rings_->sendBuilt(framed.size());
    ++builtInRing_;
}

bool Link::startCapture(const std::string &path, uint64_t limit, std::string *error) {
    auto capture = wire::PacketCapture::open(path, limit, error);
    if (!capture)
        return false;
    capture_ = std::move(capture);
    trace::capture_start(host_, port_, path.c_str(), limit);
    return true;
}

std::string Link::stopCapture() {
    if (!capture_)
        return {};
    std::string what = capture_->describe();
    capture_.reset();
    trace::capture_stop(host_, port_, what.c_str());
    return what;
}

bool PortLinks::send(unsigned port, std::vector<uint8_t> &framed) {
    Link *link = find(port);
    return !link || link->sendFramed(framed);
}

std::span<uint8_t> PortLinks::room(unsigned port, size_t framedBytes) {
    Link *link = find(port);
    return link ? link->room(framedBytes) : std::span<uint8_t>{};
}

void PortLinks::sendBuilt(unsigned port, std::span<uint8_t> framed) {
    find(port)->sendBuilt(framed); // room() found it
}

} // namespace pib
