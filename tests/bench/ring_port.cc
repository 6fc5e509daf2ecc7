// SPDX-License-Identifier: GPL-2.0-or-later
#include "ring_port.hh"

#include <cstring>
#include <stdexcept>
#include <string>
#include <sys/eventfd.h>
#include <unistd.h>

namespace pib::bench {

namespace {

void ring(int fd) {
    const uint64_t one = 1;
    [[maybe_unused]] const ssize_t n = write(fd, &one, sizeof(one));
}

} // namespace

RingPort::RingPort()
    : bellOut_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)),
      bellIn_(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)) {
    std::string why;
    memory_ = wire::RingMemory::create(kRingSize, &why);
    if (!memory_ || bellOut_ < 0 || bellIn_ < 0)
        throw std::runtime_error("ring cable: " + why);
    out_ = std::make_unique<wire::RingWriter>(memory_->ctrl(0), memory_->data(0), kRingSize);
    in_ = std::make_unique<wire::RingReader>(memory_->ctrl(1), memory_->data(1), kRingSize);
}

RingPort::~RingPort() {
    close(bellOut_);
    close(bellIn_);
}

void RingPort::watchStream(std::span<const uint8_t> bytes) {
    if (state_ == State::kUp)
        return; // the stream carries nothing for us any more
    stream_.feed(bytes);
    wire::FrameReader::Error error;
    while (auto frame = stream_.next(&error)) {
        if (frame->type == PIB_WIRE_HELLO && state_ == State::kStream &&
            frame->payload.size() >= sizeof(pib_wire_hello)) {
            pib_wire_hello hello;
            std::memcpy(&hello, frame->payload.data(), sizeof(hello));
            if (hello.flags & PIB_WIRE_HELLO_TAKES_RINGS)
                state_ = State::kOfferDue;
        } else if (frame->type == PIB_WIRE_RINGS && state_ == State::kOffered &&
                   frame->payload.size() == sizeof(pib_wire_rings)) {
            pib_wire_rings answer;
            std::memcpy(&answer, frame->payload.data(), sizeof(answer));
            if (!(answer.flags & PIB_WIRE_RINGS_ACCEPTED))
                throw std::runtime_error("the switch refused the ring cable");
            state_ = State::kUp;
            return;
        }
    }
}

void RingPort::offer(int socket) {
    const pib_wire_rings offer{kRingSize, 0};
    const auto frame = wire::encode(
        PIB_WIRE_RINGS, std::span(reinterpret_cast<const uint8_t *>(&offer), sizeof(offer)));
    const int fds[] = {memory_->fd(), bellOut_, bellIn_};
    if (!wire::sendWithFds(socket, frame, fds))
        throw std::runtime_error("the ring offer did not go");
    state_ = State::kOffered;
}

void RingPort::receive(const std::function<void(std::span<const uint8_t>)> &deliver,
                       unsigned maxFrames) {
    uint64_t count;
    [[maybe_unused]] const ssize_t n = read(bellIn_, &count, sizeof(count));
    wire::RingReader::Error error;
    for (unsigned i = 0; i < maxFrames; ++i) {
        if (!in_->next(&error))
            break;
        deliver(in_->lastFrame());
    }
    if (error != wire::RingReader::Error::kNone)
        throw std::runtime_error(wire::RingReader::toString(error));
    if (in_->release())
        ring(bellOut_);
}

void RingPort::send(const std::vector<uint8_t> &output, size_t *offset,
                    const std::function<void(std::span<const uint8_t>)> &stream) {
    for (int attempt = 0; attempt < 2; ++attempt) {
        while (*offset + wire::kHeaderSize <= output.size()) {
            const uint8_t *h = output.data() + *offset;
            uint32_t length;
            std::memcpy(&length, h + 8, sizeof(length)); // the core's own frame
            const std::span frame(h, wire::kHeaderSize + length);
            if (h[5] != PIB_WIRE_PACKET)
                stream(frame);
            else if (!out_->put(frame))
                break;
            *offset += frame.size();
        }
        if (out_->corrupt())
            throw std::runtime_error("the switch broke the ring's index");
        if (out_->publish())
            ring(bellOut_);
        if (*offset == output.size() || out_->armRoomDoorbell())
            return; // done, or the switch rings when it makes room
    }
}

bool RingPort::idle() {
    return in_->armDoorbell();
}

} // namespace pib::bench
