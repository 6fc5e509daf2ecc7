// SPDX-License-Identifier: GPL-2.0-or-later
// The narrow port between the scheduler and the links: how a packet
// leaves the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pib {

// Positions on a port's cable, in bytes from the cable's start: past
// everything the port sent on it so far, and past everything the switch
// had put on it for the port. A cable that cannot tell (a stream: the
// socket's buffers are the kernel's) gives zeros, all taken and read.
struct CableMarks {
    uint64_t sent = 0;
    uint64_t arrived = 0;
};

// The way to the wire, as the scheduler sees the Device's links.
class Cables {
  public:
    // A built packet, with wire::kHeaderSize free bytes in front for the
    // frame header. The cable may change the bytes but keeps nothing: the
    // buffer is used again for a later packet. False when the port's host
    // queue is full.
    virtual bool send(unsigned port, std::vector<uint8_t> &framed) = 0;
    // Whether the port's cable takes packets built in place at all (a
    // ring cable that nobody captures): asked first, as it is cheap.
    virtual bool buildsInPlace(unsigned port) const = 0;
    // Room of `framedBytes` on the port's cable to build a packet in
    // place (a ring cable's, Link::room), or empty; sendBuilt() sends what
    // was built there, before anything else is sent.
    virtual std::span<uint8_t> room(unsigned port, size_t framedBytes) = 0;
    virtual void sendBuilt(unsigned port, std::span<uint8_t> framed) = 0;
    // Where the port's cable stands now (CableMarks). takenUpTo(): the
    // switch took everything the port had sent by `mark` (else the wire,
    // not the peer, holds those packets up). readUpTo(): the device read
    // everything that had arrived by `mark` (else its own receive, not the
    // wire, holds those up).
    virtual CableMarks marks(unsigned port) const = 0;
    virtual bool takenUpTo(unsigned port, uint64_t mark) const = 0;
    virtual bool readUpTo(unsigned port, uint64_t mark) const = 0;

  protected:
    ~Cables() = default;
};

} // namespace pib
