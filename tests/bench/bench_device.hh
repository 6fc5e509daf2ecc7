// SPDX-License-Identifier: GPL-2.0-or-later
// One device core of the fabric benchmark, in a process of its own as in
// a VM's QEMU: the unit tests' fake host is its RAM and driver, and its
// port is a socket to a switch port. pump() is one turn of QEMU's main
// loop for it: bytes in, bytes out, timers, the work the core postponed.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>

#include "connected_fixture.hh"
#include "socket_cable.hh"

namespace pib::bench {

class BenchDevice {
  public:
    static constexpr uint64_t kRamSize = 32 << 20;

    // An RC QP on a device whose port 1 is cabled to `switchPort`, by a
    // ring cable if `rings` (else the stream); returns once the link
    // trained, the rings are up, and the port is ACTIVE with `lid`.
    BenchDevice(uint16_t lid, const std::string &switchPort, bool rings);

    testing::Node &node() { return node_; }
    // Moves what there is to move; waits up to `waitMs` first when the
    // core has nothing scheduled and nothing waits to go out.
    void pump(int waitMs);

  private:
    testing::Node node_;
    SocketCable cable_;
    bool rings_;
    size_t sent_ = 0; // of the port's output, what the socket or the ring took
    std::chrono::steady_clock::time_point clock_ = std::chrono::steady_clock::now();

    uint8_t portState();
    void advanceClock();
    // The core asked its host to watch the ring cable's doorbell.
    bool ringsUp() { return node_.host.watchedFd[1] >= 0; }
    void receive();
    void transmit();
};

} // namespace pib::bench
