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
    // Whether packets the port sent are still on its cable, not taken by
    // the switch yet (a ring cable's unread bytes or its backlog): the
    // wire, not the peer, is what holds them up.
    virtual bool holdsUntaken(unsigned port) const = 0;
    // Whether packets for the port wait on its cable that the device has
    // not read yet (a ring cable's bytes the switch published): the
    // device's own receive queue, not the wire, holds them.
    virtual bool holdsUnread(unsigned port) const = 0;

  protected:
    ~Cables() = default;
};

} // namespace pib
