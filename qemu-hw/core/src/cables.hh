// SPDX-License-Identifier: GPL-2.0-or-later
// The narrow port between the scheduler and the links: how a packet
// leaves the device.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

namespace pib {

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
    // Positions on the port's cable, in bytes from its start (the ACK
    // timer's, Requester::cableStalled). sentMark(): past everything the
    // port sent on it so far; takenUpTo(): the switch took everything
    // before `mark` (else the wire, not the peer, holds those packets
    // up). arrivedMark(): past everything the switch had put on it for
    // the port; readUpTo(): the device read everything before `mark` (else
    // its own receive, not the wire, holds those up). sentMark() is asked
    // whenever the timer starts, so it is cheap; the others only when it
    // runs out. A cable that cannot tell has everything taken and read.
    virtual uint64_t sentMark(unsigned port) const = 0;
    virtual bool takenUpTo(unsigned port, uint64_t mark) const = 0;
    virtual uint64_t arrivedMark(unsigned port) const = 0;
    virtual bool readUpTo(unsigned port, uint64_t mark) const = 0;

  protected:
    ~Cables() = default;
};

} // namespace pib
