// SPDX-License-Identifier: GPL-2.0-or-later
#include "link_rings.hh"

#include <cerrno>
#include <cstring>
#include <sys/eventfd.h>
#include <unistd.h>

namespace pib {

LinkRings::LinkRings(const Host &host, unsigned port, std::unique_ptr<wire::RingMemory> memory,
                     int bellIn, int bellOut)
    : host_(host), port_(port), memory_(std::move(memory)),
      out_(memory_->ctrl(0), memory_->data(0), kRingSize),
      in_(memory_->ctrl(1), memory_->data(1), kRingSize), bellIn_(bellIn), bellOut_(bellOut) {}

LinkRings::~LinkRings() {
    if (up_)
        host_.portWatch(port_, -1);
    close(bellIn_);
    close(bellOut_);
}

std::unique_ptr<LinkRings> LinkRings::offer(const Host &host, unsigned port, std::string *why) {
    if (!host.passesDescriptors()) {
        *why = "the host passes no descriptors";
        return nullptr;
    }
    auto memory = wire::RingMemory::create(kRingSize, why);
    if (!memory)
        return nullptr;
    const int bellIn = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    const int bellOut = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (bellIn < 0 || bellOut < 0) {
        *why = std::string("eventfd: ") + std::strerror(errno);
        if (bellIn >= 0)
            close(bellIn);
        if (bellOut >= 0)
            close(bellOut);
        return nullptr;
    }
    const int memfd = memory->fd();
    std::unique_ptr<LinkRings> rings(new LinkRings(host, port, std::move(memory), bellIn, bellOut));
    const pib_wire_rings offer{kRingSize, 0};
    const std::vector<uint8_t> frame = wire::encode(
        PIB_WIRE_RINGS, std::span(reinterpret_cast<const uint8_t *>(&offer), sizeof(offer)));
    // The memory, the doorbell we ring for the switch, the one it rings for us.
    const int fds[] = {memfd, bellOut, bellIn};
    if (!host.portSendDescriptors(port, frame, fds)) {
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
    host_.portWatch(port_, bellIn_);
    if (!in_.armDoorbell())
        wire::ringDoorbell(bellIn_); // frames came already: read them next turn
    return true;
}

LinkRings::Sent LinkRings::send(std::span<const uint8_t> frame) {
    if (backlog_.empty() && out_.put(frame)) {
        if (out_.publish())
            wire::ringDoorbell(bellOut_);
        return Sent::kOk;
    }
    if (out_.corrupt()) {
        wire::ringDoorbell(bellIn_); // the next turn drops the link
        return Sent::kLost;
    }
    if (backlogBytes_ + frame.size() > kBacklogLimit)
        return Sent::kLost;
    const bool first = backlog_.empty();
    backlog_.emplace_back(frame.begin(), frame.end());
    backlogBytes_ += frame.size();
    if (first && !out_.armRoomDoorbell(frame.size()))
        wire::ringDoorbell(bellIn_); // room came meanwhile: flush next turn
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
        wire::ringDoorbell(bellOut_);
}

// True when the whole backlog went into the ring.
bool LinkRings::flushBacklog() {
    for (int attempt = 0; attempt < 2; ++attempt) {
        while (!backlog_.empty() && out_.put(backlog_.front())) {
            backlogBytes_ -= backlog_.front().size();
            backlog_.pop_front();
        }
        if (out_.publish())
            wire::ringDoorbell(bellOut_);
        if (backlog_.empty() || out_.corrupt() || out_.armRoomDoorbell(backlog_.front().size()))
            return backlog_.empty(); // done, or the switch rings once it made room
    }
    wire::ringDoorbell(bellIn_); // room keeps coming: the next turn goes on
    return false;
}

// Gives the space read back, and asks for the next doorbell; a ring with
// more frames than one doorbell delivers rings its own to come back.
void LinkRings::finishReading(bool more) {
    if (in_.release())
        wire::ringDoorbell(bellOut_);
    if (more || !in_.armDoorbell())
        wire::ringDoorbell(bellIn_);
}

} // namespace pib
