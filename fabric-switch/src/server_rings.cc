// SPDX-License-Identifier: GPL-2.0-or-later
// Ring cables (docs/wire.md): a peer on a UNIX socket port may offer two
// rings of shared memory and a doorbell line; once the switch
// accepts, packets travel in the rings and the socket carries only HELLOs.
// A port that dials another switch's UNIX socket offers them itself.
// The peer may write anything into the rings at any time: each frame is
// copied out before it is looked at (wire::RingReader), a broken ring
// drops the link, and the work per doorbell is bounded as a socket read's.
// No call on the doorbell line waits (wire::ringDoorbell): the peer holds
// the other end, and one peer must not stall the switch for every other.
#include <algorithm>
#include <cerrno>
#include <cstring>
#include <sys/epoll.h>
#include <unistd.h>

#include "server.hh"
#include "server_internal.hh"

namespace pib::fabric {

namespace {

// Frames taken from one ring per turn of the event loop: about one socket
// read's worth (64 KiB) of 4 KiB packets.
constexpr unsigned kRingFramesPerTurn = 16;
// The rings a switch offers another: as a device's (link_rings.hh).
constexpr uint32_t kOfferedRingSize = 1 << 20;

} // namespace

Server::RingLink::~RingLink() {
    close(bell);
}

bool Server::takesRings(unsigned port) const {
    return endpoints_[port].kind == PortEndpoint::Kind::kUnixListen;
}

void Server::keepPassedFds(unsigned port, std::vector<int> &fds) {
    Connection *c = conns_[port].get();
    for (int fd : fds) {
        // An offer carries two; more waiting means the peer sends junk.
        if (c->passedFds.size() >= 2) {
            close(c->passedFds.front());
            c->passedFds.erase(c->passedFds.begin());
        }
        c->passedFds.push_back(fd);
    }
    fds.clear();
}

std::unique_ptr<Server::RingLink> Server::adoptRings(std::span<const uint8_t> payload,
                                                     std::vector<int> &fds, std::string *why) {
    pib_wire_rings offer{};
    if (payload.size() != sizeof(offer)) {
        *why = "an offer of the wrong size";
        return nullptr;
    }
    std::memcpy(&offer, payload.data(), sizeof(offer));
    if (offer.flags != 0) {
        *why = "an offer with flags set";
        return nullptr;
    }
    if (fds.size() != 2) {
        *why = "an offer without its two descriptors";
        return nullptr;
    }
    if (!wire::isDoorbellLine(fds[1])) {
        *why = "a doorbell line that is not a connected UNIX stream socket";
        return nullptr;
    }
    auto memory = wire::RingMemory::adopt(fds[0], offer.ring_size, why);
    fds[0] = -1; // adopt took it
    if (!memory)
        return nullptr;
    auto rings = std::make_unique<RingLink>(std::move(memory), false);
    rings->bell = fds[1];
    fds.clear();
    return rings;
}

bool Server::offersRings(unsigned port) const {
    return endpoints_[port].kind == PortEndpoint::Kind::kUnixConnect;
}

// The peer's HELLO said it takes rings: a port that dials offers them,
// once per connection. The offer's descriptors go with its frame, so it
// goes only once the stream has sent everything queued before it.
void Server::offerRings(unsigned port) {
    Connection *c = conns_[port].get();
    if (!offersRings(port) || c->ringsOffered)
        return;
    c->ringsOffered = true;
    onWritable(port);
    if (conns_[port].get() != c)
        return;
    std::string why;
    auto memory = wire::RingMemory::create(kOfferedRingSize, &why);
    int ours = -1, theirs = -1;
    auto rings = memory && wire::makeDoorbellLine(&ours, &theirs, &why)
                     ? std::make_unique<RingLink>(std::move(memory), true)
                     : nullptr;
    if (rings)
        rings->bell = ours;
    const pib_wire_rings offer{kOfferedRingSize, 0};
    const std::vector<uint8_t> frame = wire::encode(
        PIB_WIRE_RINGS, std::span(reinterpret_cast<const uint8_t *>(&offer), sizeof(offer)));
    if (!rings)
        why = "no ring cable: " + why;
    else if (c->queuedInStream())
        why = "the stream is busy";
    else if (const int fds[] = {rings->memory->fd(), theirs}; !wire::sendWithFds(c->fd, frame, fds))
        why = std::string("the offer did not go: ") + strerror(errno);
    if (theirs >= 0)
        close(theirs); // only the peer holds its end from now on
    if (!why.empty()) {
        log("port %u: no ring cable offered: %s; packets stay on the stream", port, why.c_str());
        return;
    }
    c->offered = std::move(rings);
}

// The answer to our offer: from it on, packets take the rings.
void Server::ringAnswer(unsigned port, std::span<const uint8_t> payload) {
    Connection *c = conns_[port].get();
    std::unique_ptr<RingLink> rings = std::move(c->offered);
    pib_wire_rings answer{};
    if (payload.size() == sizeof(answer))
        std::memcpy(&answer, payload.data(), sizeof(answer));
    if (!(answer.flags & PIB_WIRE_RINGS_ACCEPTED)) {
        log("port %u: the peer refused our ring cable; packets stay on the stream", port);
        return;
    }
    log("port %u: ring cable of 2 x %u bytes (offered)", port, kOfferedRingSize);
    c->rings = std::move(rings);
    startRingInput(port, *c->rings);
}

// From now on the peer's frames are read from the ring: by the loop when
// its doorbell rings, or by a forwarding thread.
void Server::startRingInput(unsigned port, RingLink &rings) {
    if (pumps_) {
        pumps_->attach(port, &rings.in, rings.bell);
        return;
    }
    watchTag(epoll_, rings.bell, kRingTag | port, false);
    if (!rings.in.armDoorbell())
        ringsBusy_.push_back(port); // frames came already: read them next turn
}

// A RINGS frame: the peer's offer, or its answer to ours. The answer goes
// on the stream, after whatever the stream still had to say; packets go
// in the ring after it.
void Server::ringOffer(unsigned port, std::span<const uint8_t> payload) {
    Connection *c = conns_[port].get();
    if (c->offered) {
        ringAnswer(port, payload);
        return;
    }
    std::vector<int> fds = std::move(c->passedFds);
    c->passedFds.clear();
    std::string why;
    std::unique_ptr<RingLink> rings;
    if (!takesRings(port))
        why = "this port takes no rings";
    else if (c->rings)
        why = "the rings were set up already";
    else
        rings = adoptRings(payload, fds, &why);
    for (int fd : fds)
        if (fd >= 0)
            close(fd);
    pib_wire_rings answer{};
    if (payload.size() == sizeof(answer))
        std::memcpy(&answer, payload.data(), sizeof(answer));
    answer.flags = rings ? PIB_WIRE_RINGS_ACCEPTED : 0;
    sendFrame(port, PIB_WIRE_RINGS,
              std::span(reinterpret_cast<const uint8_t *>(&answer), sizeof(answer)));
    if (!rings) {
        log("port %u: ring cable refused: %s; packets stay on the stream", port, why.c_str());
        return;
    }
    log("port %u: ring cable of 2 x %u bytes", port, answer.ring_size);
    c->rings = std::move(rings);
    startRingInput(port, *c->rings);
}

void Server::closeRings(unsigned port) {
    Connection *c = conns_[port].get();
    for (int fd : c->passedFds)
        close(fd);
    c->passedFds.clear();
    c->offered.reset();
    if (c->rings && pumps_)
        pumps_->detach(port); // returns once its thread reads the ring no more
    else if (c->rings)
        epoll_ctl(epoll_, EPOLL_CTL_DEL, c->rings->bell, nullptr);
    c->rings.reset();
}

void Server::onRingDoorbell(unsigned port) {
    Connection *c = conns_[port].get();
    if (!c || !c->rings)
        return;
    if (!wire::clearDoorbell(c->rings->bell)) {
        drop(port, "the peer closed the ring cable's doorbell line");
        return;
    }
    ringTurn(port);
}

// The peer rings for frames it wrote and for room it made; a ring with
// more than one turn's share comes back next turn (ringsBusy_).
void Server::ringTurn(unsigned port) {
    Connection *c = conns_[port].get();
    processRing(port);
    if (conns_[port].get() == c && c->queuedInRing())
        onWritable(port);
}

// Passes on the ring's frames, as processInput does a stream's, until none
// is left, an output fills or this turn's share is used.
void Server::processRing(unsigned port) {
    Connection *c = conns_[port].get();
    if (c->moved) // a device that moves says nothing more in its ring
        return;
    if (pumps_) {
        processPumped(port);
        return;
    }
    RingLink *r = c->rings.get();
    for (unsigned taken = 0; !c->blockedOn; ++taken) {
        if (taken == kRingFramesPerTurn) {
            ringsBusy_.push_back(port); // the rest next turn, after the others
            break;
        }
        wire::RingReader::Error error;
        const auto frame = r->in.next(&error);
        if (!frame) {
            if (error != wire::RingReader::Error::kNone) {
                drop(port, wire::RingReader::toString(error));
                return;
            }
            if (r->in.release())
                wire::ringDoorbell(r->bell);
            if (r->in.armDoorbell())
                return; // empty: the peer rings when it writes
            continue;
        }
        if (!c->helloReceived) // packets before HELLO: the link is not up
            continue;
        congested_ = 0;
        receivePacket(port, frame->payload);
        if (conns_[port].get() != c)
            return;
        if (congested_)
            block(port, congested_);
    }
    if (r->in.release())
        wire::ringDoorbell(r->bell);
}

// The same for a ring a forwarding thread reads: its packets as the
// thread read them, their VCRC checked; a ring it found broken drops the
// link once the packets before the break went.
void Server::processPumped(unsigned port) {
    Connection *c = conns_[port].get();
    for (unsigned taken = 0; !c->blockedOn; ++taken) {
        if (taken == kRingFramesPerTurn) {
            ringsBusy_.push_back(port);
            return;
        }
        const auto packet = pumps_->next(port);
        if (!packet) {
            if (const std::string why = pumps_->broken(port); !why.empty())
                drop(port, why.c_str());
            return;
        }
        if (!c->helloReceived)
            continue;
        congested_ = 0;
        receivePacket(port, packet->bytes, packet->vcrcGood);
        if (conns_[port].get() != c)
            return;
        if (congested_)
            block(port, congested_);
    }
}

// The forwarding threads read packets, or a peer rang for room in the
// ring the loop writes, or broke its ring.
void Server::onPumpsReady() {
    for (const unsigned port : pumps_->takeReady())
        if (Connection *c = conns_[port].get(); c && c->rings)
            ringTurn(port);
}

void Server::serviceBusyRings() {
    std::vector<unsigned> ports;
    ports.swap(ringsBusy_);
    for (unsigned port : ports)
        if (Connection *c = conns_[port].get(); c && c->rings)
            ringTurn(port);
}

// Writes a packet's frame into the ring's room, unpublished; false when
// the room is short or would wrap (the frame then waits in ringOutput).
bool Server::putInRing(RingLink &r, std::span<const uint8_t> packet) {
    const std::span<uint8_t> room = r.out.reserve(wire::kHeaderSize + packet.size());
    if (room.empty())
        return false;
    std::copy(packet.begin(), packet.end(), room.begin() + wire::kHeaderSize);
    wire::frameInPlace(room, PIB_WIRE_PACKET);
    r.out.commit(room.size());
    return true;
}

// The frames waiting for the ring go in as far as there is room. Returns
// the bytes that went; a peer whose index is impossible loses its link.
size_t Server::flushRing(unsigned port) {
    Connection *c = conns_[port].get();
    RingLink *r = c->rings.get();
    size_t moved = 0;
    for (int attempt = 0; attempt < 2; ++attempt) {
        while (c->ringSent < c->ringOutput.size()) {
            const size_t bytes = c->ringHeadBytes();
            if (!r->out.put(std::span(c->ringOutput.data() + c->ringSent, bytes)))
                break;
            c->ringSent += bytes;
            moved += bytes;
        }
        if (r->out.corrupt()) {
            drop(port, "the peer's ring index is impossible");
            return moved;
        }
        if (r->out.publish())
            wire::ringDoorbell(r->bell);
        // Frames wait for room: the peer rings when it makes some, unless
        // it made some meanwhile (then try again now).
        if (c->ringSent == c->ringOutput.size() || r->out.armRoomDoorbell(c->ringHeadBytes()))
            break;
        if (attempt == 1) // room keeps coming: the next turn goes on
            ringsBusy_.push_back(port);
    }
    if (c->ringSent == c->ringOutput.size()) {
        c->ringOutput.clear();
        c->ringSent = 0;
    } else if (c->ringSent > c->ringOutput.size() / 2) {
        c->ringOutput.erase(c->ringOutput.begin(),
                            c->ringOutput.begin() + static_cast<long>(c->ringSent));
        c->ringSent = 0;
    }
    return moved;
}

} // namespace pib::fabric
