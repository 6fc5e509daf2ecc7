// SPDX-License-Identifier: GPL-2.0-or-later
// Flow control between the switch's ports. An InfiniBand link loses no
// packet to congestion: credits hold a sender back until the receiver has
// room. Here the socket is the link: when an output's queue is full, the
// switch stops reading the input whose packet filled it, the input's
// socket fills, and its sender (a QEMU port's transmit queue, another
// switch) waits. IBA's head-of-queue lifetime keeps one peer from holding
// the others forever: an output that takes no byte for its port's HOQLife
// is stalled, the inputs waiting for it go on, and packets to it are
// discarded (PortXmitDiscards) until it drains.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/epoll.h>
#include <sys/socket.h>

#include "server.hh"
#include "server_internal.hh"

namespace pib::fabric {

namespace {

// A HELLO's payload; zeros where a short one ends.
pib_wire_hello helloOf(std::span<const uint8_t> payload) {
    pib_wire_hello hello{};
    std::memcpy(&hello, payload.data(), std::min(payload.size(), sizeof(hello)));
    return hello;
}

// An output queue this full holds back the inputs that feed it...
// (as a QEMU port's transmit queue does: a switch buffers what a link in
// flight holds, not more, for every queued byte delays the packets behind
// it, and RC's ACK timer counts the delay; see wire::kRingFillLimit)
constexpr size_t kFullOutput = 1u << 20;
// ...until it is down to this.
constexpr size_t kResumeOutput = 256u << 10;
// Beyond this nothing is queued at all: packets that could not be held
// back (delayed by a fault, or many copies of one multicast) are lost.
constexpr size_t kMaxOutput = 16u << 20;
// Bytes read from a socket but not yet framed: a peer may not make us
// buffer more.
constexpr size_t kMaxInput = 1u << 20;

} // namespace

void Server::sendFrame(unsigned port, uint8_t type, std::span<const uint8_t> payload) {
    Connection *c = conns_[port].get();
    if (type == PIB_WIRE_PACKET && moves_[port].pending) { // nobody takes it yet
        sw_.discarded(port, payload.size());
        return;
    }
    if (!c)
        return;
    if (c->stalled || c->queued() >= kMaxOutput) {
        if (type == PIB_WIRE_PACKET) {
            sw_.discarded(port, payload.size());
            c->discarded |= c->stalled;
        }
        return;
    }
    if (c->queued() == 0)
        c->lastDrain = now(); // an idle output is not a stuck one
    if (type == PIB_WIRE_PACKET)
        capture(port, payload, true);
    // On a ring cable packets take the ring; HELLOs and RINGS the stream.
    // A packet goes straight into the ring when none waits before it and
    // it fits; flushOutputs() publishes it with the others of this turn.
    if (c->rings && type == PIB_WIRE_PACKET) {
        if (c->queuedInRing() || !putInRing(*c->rings, payload))
            wire::appendFrame(c->ringOutput, type, payload);
    } else {
        wire::appendFrame(c->output, type, payload);
    }
    if (!c->unflushed) {
        c->unflushed = true;
        unflushed_.push_back(port);
    }
    if (c->queued() >= kFullOutput)
        congested_ = port;
}

// The frames each output gained in this turn of the event loop, in as few
// send() calls as the sockets take them: the packets one read brought in
// leave together. (A failed send drops that link here, not inside the
// packet handling that queued the frame.)
void Server::flushOutputs() {
    while (!unflushed_.empty()) {
        const unsigned port = unflushed_.back();
        unflushed_.pop_back();
        if (Connection *c = conns_[port].get(); c && c->unflushed) {
            c->unflushed = false;
            onWritable(port);
        }
    }
}

void Server::onWritable(unsigned port) {
    Connection *c = conns_[port].get();
    size_t moved = 0;
    while (c && c->sent < c->output.size()) {
        const ssize_t n =
            ::send(c->fd, c->output.data() + c->sent, c->output.size() - c->sent, MSG_NOSIGNAL);
        if (n < 0) {
            if (errno == EAGAIN || errno == EWOULDBLOCK)
                break;
            drop(port, strerror(errno));
            return;
        }
        c->sent += static_cast<size_t>(n);
        moved += static_cast<size_t>(n);
    }
    if (c && c->rings) {
        moved += flushRing(port);
        c = conns_[port].get(); // a broken ring drops the link
    }
    if (!c)
        return;
    if (moved)
        c->lastDrain = now();
    // What was sent is dropped all at once, not bytes moved on every send.
    if (c->sent == c->output.size()) {
        c->output.clear();
        c->sent = 0;
    } else if (c->sent > c->output.size() / 2) {
        c->output.erase(c->output.begin(), c->output.begin() + static_cast<long>(c->sent));
        c->sent = 0;
    }
    if (c->queued() < kResumeOutput) {
        if (c->stalled)
            log("port %u: draining again; packets to it pass again", port);
        c->stalled = false;
        outputGone(port); // not gone, but no longer in anyone's way
        if (c->discarded)
            tellDiscarded(port);
    }
    rewatch(port);
}

// The port drains again after the switch discarded packets to it: a peer
// that takes it hears so (PIB_WIRE_DISCARDED), and its RC QPs resend at
// once what they had in flight, and NAK what they expect, instead of
// waiting for ACK timers that may be minutes long (docs/wire.md, "Stalls").
// A stall is the host's doing (a QEMU not run for HOQLife), not the
// fabric's; faults injected on purpose are not told.
void Server::tellDiscarded(unsigned port) {
    Connection *c = conns_[port].get();
    c->discarded = false;
    if (!(c->peer.flags & PIB_WIRE_HELLO_TAKES_DISCARDS))
        return;
    log("port %u: told its peer that packets to it were discarded", port);
    sendFrame(port, PIB_WIRE_DISCARDED, {});
}

// What epoll should tell of a connection: its input unless held back, its
// output while bytes wait.
void Server::rewatch(unsigned port) {
    Connection *c = conns_[port].get();
    epoll_event ev{};
    ev.events = (c->blockedOn ? 0u : EPOLLIN) | (c->queuedInStream() ? EPOLLOUT : 0u);
    if (ev.events == c->watched)
        return;
    c->watched = ev.events;
    ev.data.u64 = port;
    epoll_ctl(epoll_, EPOLL_CTL_MOD, c->fd, &ev);
}

void Server::onReadable(unsigned port, uint32_t events) {
    Connection *c = conns_[port].get();
    if (!c)
        return;
    if (c->blockedOn) {
        // Not read while held back; a peer that hung up is gone, though.
        if (events & (EPOLLHUP | EPOLLERR))
            drop(port, "peer closed");
        return;
    }
    uint8_t buf[65536];
    std::vector<int> fds; // a ring offer's descriptors (server_rings.cc)
    const ssize_t n = wire::receiveWithFds(c->fd, buf, &fds);
    if (!fds.empty())
        keepPassedFds(port, fds);
    if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
        drop(port, n == 0 ? "peer closed" : strerror(errno));
        return;
    }
    if (n < 0)
        return;
    // Frames are read in place from `buf`; keepRest() saves what is left.
    c->reader.lend(std::span(buf, static_cast<size_t>(n)));
    if (c->reader.buffered() > kMaxInput) {
        drop(port, "peer floods without framing");
        return;
    }
    processInput(port);
}

// A HELLO from the peer. The first brings the link up. A later one means
// the peer reset its port and trains the link again (docs/wire.md): the
// link goes down and comes up, and the peer hears our HELLO. A peer that
// retrains more often than kMinRetrainNs gets the HELLO without the
// bounce, so that it cannot flood the SM with traps. False when sending
// dropped the link.
bool Server::helloReceived(unsigned port) {
    Connection *c = conns_[port].get();
    const uint64_t nowNs = now();
    const bool retrain = c->helloReceived;
    if (retrain && nowNs - c->lastRetrainNs < kMinRetrainNs) {
        sendHello(port);
        return conns_[port].get() == c;
    }
    auto send = [&](const std::vector<Transmit> &out) {
        for (auto &t : out)
            sendPacket(t.port, t.packet);
        return conns_[port].get() == c;
    };
    if (retrain) {
        log("port %u: the peer retrains the link", port);
        c->lastRetrainNs = nowNs;
        if (!send(sw_.linkChanged(port, false)))
            return false;
        sendHello(port);
        if (conns_[port].get() != c)
            return false;
    }
    c->helloReceived = true;
    log("port %u: link up", port);
    return send(sw_.linkChanged(port, true));
}

// Passes on the input's frames until none is left or an output fills.
void Server::processInput(unsigned port) {
    Connection *c = conns_[port].get();
    wire::FrameReader::Error error = wire::FrameReader::Error::kNone;
    while (!c->blockedOn) {
        const auto frame = c->reader.nextView(&error);
        if (!frame)
            break;
        if (frame->type == PIB_WIRE_HELLO) {
            const pib_wire_hello hello = helloOf(frame->payload);
            if (!helloContinuesMove(port, hello) &&
                (!helloReceived(port) || conns_[port].get() != c))
                return;
            c->peer = hello;
            // A device whose move failed goes on on this connection: its
            // ring was not read while it moved (nor its doorbell asked
            // for again), so it is read now, from the event loop.
            if (c->moved && c->rings)
                ringsBusy_.push_back(port);
            if (c->moved && c->rings && pumps_)
                pumps_->hold(port, false);
            c->moved = false;
            if (hello.flags & PIB_WIRE_HELLO_TAKES_RINGS)
                offerRings(port);
            if (conns_[port].get() != c)
                return;
            continue;
        }
        if (c->moved) // a device that moves says nothing more but HELLO
            continue;
        if (frame->type == PIB_WIRE_MOVING) {
            deviceMoving(port);
            continue;
        }
        if (frame->type == PIB_WIRE_DISCARDED) // a switch's word, meaningless to one
            continue;
        if (frame->type == PIB_WIRE_RINGS) {
            ringOffer(port, frame->payload);
            if (conns_[port].get() != c)
                return;
            continue;
        }
        if (!c->helloReceived) // packets before HELLO: the link is not up
            continue;
        congested_ = 0;
        receivePacket(port, frame->payload);
        if (conns_[port].get() != c) // a failed send dropped this very link
            return;
        if (congested_)
            block(port, congested_);
    }
    if (error != wire::FrameReader::Error::kNone)
        drop(port, wire::FrameReader::toString(error));
    else
        c->reader.keepRest();
}

void Server::block(unsigned port, unsigned output) {
    Connection *c = conns_[port].get();
    c->blockedOn = output;
    c->blockedSince = now();
    rewatch(port);
}

// Output `port` drained, or went away: the inputs it held back go on
// (from the event loop, so no input runs inside another's sending).
void Server::outputGone(unsigned port) {
    for (unsigned in = 1; in < conns_.size(); ++in)
        if (conns_[in] && conns_[in]->blockedOn == port)
            resume_.push_back(in);
}

void Server::resumeInputs() {
    while (!resume_.empty()) {
        const unsigned port = resume_.back();
        resume_.pop_back();
        Connection *c = conns_[port].get();
        if (!c || !c->blockedOn)
            continue;
        c->blockedOn = 0;
        rewatch(port);
        processInput(port); // what it had read already
        if (conns_[port].get() == c && c->rings && !c->blockedOn)
            processRing(port);
    }
}

// Inputs held back longer than its stall limit by an output that took
// nothing in that time: the output is stuck, and stops holding anyone back.
int Server::serviceFlowControl() {
    const uint64_t nowNs = now();
    int timeout = 1000;
    for (unsigned in = 1; in < conns_.size(); ++in) {
        Connection *c = conns_[in].get();
        if (!c || !c->blockedOn)
            continue;
        Connection *out = conns_[c->blockedOn].get();
        const uint64_t since = std::max(c->blockedSince, out ? out->lastDrain : 0);
        const uint64_t limit = stallLimitNs(sw_.port(c->blockedOn).hoqLife);
        if (out && nowNs - since < limit) {
            timeout = std::min(timeout, static_cast<int>((since + limit - nowNs) / 1'000'000) + 1);
            continue;
        }
        if (out && !out->stalled) {
            out->stalled = true;
            log("port %u: took nothing for %llu ms; packets to it are discarded until it drains",
                c->blockedOn, static_cast<unsigned long long>(limit / 1'000'000));
        }
        outputGone(c->blockedOn);
    }
    resumeInputs();
    return timeout;
}

} // namespace pib::fabric
