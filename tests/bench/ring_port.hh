// SPDX-License-Identifier: GPL-2.0-or-later
// The offering end of a ring cable (docs/wire.md), as a device's host
// runs it: it watches the switch's stream for a HELLO that takes rings,
// offers a memfd and two eventfds, and once the switch accepts, carries
// the port's packets in the rings while HELLOs stay on the stream.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "frame.hh"
#include "ring_cable.hh"

namespace pib::bench {

class RingPort {
  public:
    static constexpr uint32_t kRingSize = 1 << 20;

    RingPort();
    ~RingPort();
    RingPort(const RingPort &) = delete;
    RingPort &operator=(const RingPort &) = delete;

    // Bytes the switch sent on the stream: its HELLO, the offer's answer.
    void watchStream(std::span<const uint8_t> bytes);
    // The switch's HELLO took rings and no offer went yet.
    bool offerDue() const { return state_ == State::kOfferDue; }
    // Sends the offer on `socket`, with its three descriptors.
    void offer(int socket);
    bool up() const { return state_ == State::kUp; }
    // The eventfd the switch rings: frames to read, or room to write.
    int bell() const { return bellIn_; }

    // At most `maxFrames` frames from the switch, each whole as a stream
    // carries it. Throws if the switch broke the ring.
    void receive(const std::function<void(std::span<const uint8_t>)> &deliver, unsigned maxFrames);
    // The port's output from *offset: PACKETs into the ring while it has
    // room, anything else to `stream`. Moves *offset past what went.
    void send(const std::vector<uint8_t> &output, size_t *offset,
              const std::function<void(std::span<const uint8_t>)> &stream);
    // Before the host sleeps: true when nothing waits in the ring (the
    // switch rings when something comes).
    bool idle();

  private:
    enum class State { kStream, kOfferDue, kOffered, kUp };
    State state_ = State::kStream;
    wire::FrameReader stream_;
    std::unique_ptr<wire::RingMemory> memory_;
    std::unique_ptr<wire::RingWriter> out_; // ring 0, to the switch
    std::unique_ptr<wire::RingReader> in_;  // ring 1, from it
    int bellOut_ = -1;                      // we ring the switch's
    int bellIn_ = -1;                       // the switch rings ours
};

} // namespace pib::bench
