// SPDX-License-Identifier: GPL-2.0-or-later
// A switch port that takes ring cables (docs/wire.md, "Ring cables"), for
// the unit tests and the core's fuzzer: it cables port 1 of a fake host's
// device, answers the device's offer, maps the offered memory as the
// switch does, and moves frames through the rings.
#pragma once

#include <fcntl.h>
#include <memory>
#include <poll.h>
#include <span>
#include <stdexcept>
#include <string>
#include <sys/socket.h>
#include <unistd.h>
#include <vector>

#include "fake_host.hh"
#include "frame.hh"
#include "ring_cable.hh"

namespace pib::testing {

class RingSwitch {
  public:
    static constexpr uint32_t kRingSize = 1 << 20; // the device's (LinkRings::kRingSize)

    // Plugs a cable into port 1 (pulling the one there), says HELLO with
    // rings taken (and `helloFlags`, such as PIB_WIRE_HELLO_RESUMES for a
    // device that moved): the device offers them.
    explicit RingSwitch(FakeHost &host, uint16_t helloFlags = 0) : host_(host) {
        host_.passesDescriptors = true;
        for (const FakeHost::PassedFds &old : host_.passedFds[1]) // earlier cables' offers
            for (int fd : old.fds)
                close(fd);
        host_.passedFds[1].clear();
        pib_core_port_connected(host_.core, 1, 0);
        host_.portOutput[1].clear();
        pib_core_port_connected(host_.core, 1, 1);
        pib_wire_hello hello{};
        hello.node_type = PIB_WIRE_NODE_SWITCH;
        hello.flags = PIB_WIRE_HELLO_TAKES_RINGS | helloFlags;
        feed(wire::encode(PIB_WIRE_HELLO, bytesOf(hello)));
    }

    template <class T> static std::span<const uint8_t> bytesOf(const T &v) {
        return std::span(reinterpret_cast<const uint8_t *>(&v), sizeof(v));
    }
    void feed(const std::vector<uint8_t> &bytes) {
        pib_core_port_receive(host_.core, 1, bytes.data(), bytes.size());
    }
    // Maps the offered memory and answers: accepted, or refused. False
    // when the device made no offer.
    bool answer(bool accept) {
        if (host_.passedFds[1].size() != 1 || host_.passedFds[1].front().fds.size() != 2)
            return false;
        const std::vector<int> &fds = host_.passedFds[1].front().fds;
        std::string why;
        memory_ = wire::RingMemory::adopt(dup(fds[0]), kRingSize, &why);
        if (!memory_)
            throw std::runtime_error("the offered memory: " + why);
        in_ = std::make_unique<wire::RingReader>(memory_->ctrl(0), memory_->data(0), kRingSize);
        out_ = std::make_unique<wire::RingWriter>(memory_->ctrl(1), memory_->data(1), kRingSize);
        bell_ = fds[1];
        const pib_wire_rings answer{kRingSize, accept ? PIB_WIRE_RINGS_ACCEPTED : 0u};
        feed(wire::encode(PIB_WIRE_RINGS, bytesOf(answer)));
        return true;
    }
    bool mapped() const { return memory_ != nullptr; }
    pib_wire_ring_ctrl *ctrl(unsigned ring) { return memory_->ctrl(ring); }
    wire::RingWriter &out() { return *out_; }

    // A whole frame into the device's ring; false when it has no room.
    bool put(std::span<const uint8_t> frame) { return out_->put(frame); }
    // What was put becomes visible; the device's doorbell rings if it
    // asked, or always with `ring`.
    void publish(bool ring = false) {
        if (out_->publish() || ring)
            wire::ringDoorbell(bell_);
    }
    // At most `max` frames the device put in its ring, each whole; the
    // room they took goes back. Throws if the device broke its ring.
    std::vector<std::vector<uint8_t>> take(unsigned max = UINT32_MAX) {
        std::vector<std::vector<uint8_t>> frames;
        wire::RingReader::Error error = wire::RingReader::Error::kNone;
        while (frames.size() < max && in_->next(&error)) {
            const auto frame = in_->lastFrame();
            frames.emplace_back(frame.begin(), frame.end());
        }
        if (error != wire::RingReader::Error::kNone)
            throw std::runtime_error(wire::RingReader::toString(error));
        if (in_->release())
            wire::ringDoorbell(bell_);
        return frames;
    }
    // What a hostile switch does to the doorbell line (docs/wire.md):
    // makes its end blocking (the flag is the open file description's,
    // which a peer may share), floods the device's end with rings, or
    // hangs up (then the device drops the link at its next doorbell).
    enum class LineAttack { kBlocking, kFlood, kHangUp };
    void attackLine(LineAttack attack) {
        if (bell_ < 0)
            return;
        switch (attack) {
        case LineAttack::kBlocking:
            fcntl(bell_, F_SETFL, fcntl(bell_, F_GETFL) & ~O_NONBLOCK);
            break;
        case LineAttack::kFlood: {
            const uint8_t rings[4096] = {};
            for (int i = 0; i < 64; ++i)
                if (::send(bell_, rings, sizeof(rings), MSG_DONTWAIT) <= 0)
                    break;
            break;
        }
        case LineAttack::kHangUp: // the host's record keeps (and closes) the descriptor
            ::shutdown(bell_, SHUT_RDWR);
            break;
        }
    }
    // The device's doorbell, if it rang, answered as a host's main loop
    // would. True when it had rung.
    bool answerBell() {
        const int fd = host_.watchedFd[1];
        pollfd p{fd, POLLIN, 0};
        if (fd < 0 || poll(&p, 1, 0) != 1)
            return false;
        pib_core_port_bell(host_.core, 1);
        return true;
    }

  private:
    FakeHost &host_;
    std::unique_ptr<wire::RingMemory> memory_;
    std::unique_ptr<wire::RingReader> in_;  // ring 0: from the device
    std::unique_ptr<wire::RingWriter> out_; // ring 1: to it
    int bell_ = -1; // the switch's end of the doorbell line (the host's record owns it)
};

} // namespace pib::testing
