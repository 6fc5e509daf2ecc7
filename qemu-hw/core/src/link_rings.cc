// SPDX-License-Identifier: GPL-2.0-or-later
#include "link_rings.hh"

#include <cerrno>
#include <cstring>
#include <unistd.h>

namespace pib {

LinkRings::LinkRings(const Host &host, unsigned port, std::unique_ptr<wire::RingMemory> memory,
                     int bell)
    : host_(host), port_(port), memory_(std::move(memory)),
      out_(memory_->ctrl(0), memory_->data(0), kRingSize),
      in_(memory_->ctrl(1), memory_->data(1), kRingSize), bell_(bell) {}

LinkRings::~LinkRings() {
    if (up_)
        host_.portWatch(port_, -1);
    close(bell_);
}

std::unique_ptr<LinkRings> LinkRings::offer(const Host &host, unsigned port, std::string *why) {
    if (!host.passesDescriptors()) {
        *why = "the host passes no descriptors";
        return nullptr;
    }
    auto memory = wire::RingMemory::create(kRingSize, why);
    int ours = -1, theirs = -1;
    if (!memory || !wire::makeDoorbellLine(&ours, &theirs, why))
        return nullptr;
    const int memfd = memory->fd();
    std::unique_ptr<LinkRings> rings(new LinkRings(host, port, std::move(memory), ours));
    const pib_wire_rings offer{kRingSize, 0};
    const std::vector<uint8_t> frame = wire::encode(
        PIB_WIRE_RINGS, std::span(reinterpret_cast<const uint8_t *>(&offer), sizeof(offer)));
    // The memory and the switch's end of the doorbell line, which only
    // the switch holds from now on.
    const int fds[] = {memfd, theirs};
    const bool sent = host.portSendDescriptors(port, frame, fds);
    close(theirs);
    if (!sent) {
        *why = "the port's stream carries no descriptors";
        return nullptr;
    }
    return rings;
}

bool LinkRings::answered(std::span<const uint8_t> payload) {
    pib_wire_rings answer;
    if (up_ || payload.size() != sizeof(answer))
        return false;
    std::memcpy(&answer, payload.data(), sizeof(answer));
    if (!(answer.flags & PIB_WIRE_RINGS_ACCEPTED))
        return false;
    up_ = true;
    host_.portWatch(port_, bell_);
    if (!in_.armDoorbell())
        comeBack(); // frames came already: read them next turn
    return true;
}

LinkRings::Sent LinkRings::send(std::span<const uint8_t> frame) {
    if (backlog_.empty() && out_.put(frame)) {
        if (out_.publish())
            wire::ringDoorbell(bell_);
        return Sent::kOk;
    }
    if (out_.corrupt()) {
        comeBack(); // the next turn drops the link
        return Sent::kLost;
    }
    if (backlogBytes_ + frame.size() > kBacklogLimit)
        return Sent::kLost;
    const bool first = backlog_.empty();
    backlog_.emplace_back(frame.begin(), frame.end());
    backlogBytes_ += frame.size();
    if (first && !out_.armRoomDoorbell(frame.size()))
        comeBack(); // room came meanwhile: flush next turn
    return Sent::kFull;
}

std::span<uint8_t> LinkRings::room(size_t bytes) {
    if (!up_ || !backlog_.empty())
        return {};
    return out_.reserve(bytes);
}

void LinkRings::sendBuilt(size_t bytes) {
    out_.commit(bytes);
    if (out_.publish())
        wire::ringDoorbell(bell_);
}

// True when the whole backlog went into the ring.
bool LinkRings::flushBacklog() {
    for (int attempt = 0; attempt < 2; ++attempt) {
        while (!backlog_.empty() && out_.put(backlog_.front())) {
            backlogBytes_ -= backlog_.front().size();
            backlog_.pop_front();
        }
        if (out_.publish())
            wire::ringDoorbell(bell_);
        if (backlog_.empty() || out_.corrupt() || out_.armRoomDoorbell(backlog_.front().size()))
            return backlog_.empty(); // done, or the switch rings once it made room
    }
    comeBack(); // room keeps coming: the next turn goes on
    return false;
}

// Gives the space read back, and asks for the next doorbell; a ring with
// more frames than one doorbell delivers comes back for them.
void LinkRings::finishReading(bool more) {
    if (in_.release())
        wire::ringDoorbell(bell_);
    if (more || !in_.armDoorbell())
        comeBack();
}

// The host's next pib_core_run() serves this cable as its doorbell would:
// the doorbell line rings only the other end, so a turn of our own is
// asked for this way (the work per call stays bounded).
void LinkRings::comeBack() {
    wantsTurn_ = true;
    host_.schedule();
}

} // namespace pib
