// SPDX-License-Identifier: GPL-2.0-or-later
// Forwarding threads for ring cables (docs/wire.md, "Forwarding threads").
// What a packet costs per byte on its way into the switch, copying it out
// of the memory its peer shares and checking its VCRC, is done on one of
// a few threads, each serving the ring ports given to it; the event loop
// takes each port's checked packets in the order they came and does only
// what needs the switch's state (the forwarding decision, the counters,
// the copy into the output). A port's packets pass one thread and then
// the loop, so the order IBA requires on a path is kept.
//
// A thread reads no more of a ring than kReadAhead bytes before the loop
// takes them: the loop's flow control (an input whose output is full is
// not read) still holds the peer back, its ring filling as before.
//
// The peer rings the doorbell line for packets it wrote and for room it
// made in the ring the loop writes: the thread that owns the line clears
// it and tells the loop either way.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "ring_cable.hh"

namespace pib::fabric {

class RingPumps {
  public:
    // `threads` threads (at least 1) for ports 1..ports - 1; port p is
    // served by thread p % threads. Throws std::runtime_error when the
    // threads' descriptors cannot be made.
    RingPumps(unsigned threads, unsigned ports);
    ~RingPumps();
    RingPumps(const RingPumps &) = delete;
    RingPumps &operator=(const RingPumps &) = delete;

    unsigned threads() const { return static_cast<unsigned>(threads_.size()); }
    // Readable when ports have news for the loop (takeReady()).
    int readyFd() const { return ready_; }
    // The ports with packets, room rung or an error since the last call.
    std::vector<unsigned> takeReady();

    // Port `port` reads ring `in`, its doorbell line `bell`: from now on
    // only its thread touches either (the loop still writes the other
    // ring, and rings the line). The ring is read at once.
    void attach(unsigned port, wire::RingReader *in, int bell);
    // The port's thread lets go of its ring; returns once it touches it
    // no more. What it read and the loop did not take is dropped.
    void detach(unsigned port);

    // While `held`, the port's thread reads nothing of its ring (its peer
    // moves, docs/wire.md), and clears its doorbell line only.
    void hold(unsigned port, bool held);

    // The port's next packet, and whether its VCRC is good; valid until
    // the next call for the port. Nothing when the loop took all the
    // thread read (it reads on, and the port is ready again).
    struct Packet {
        std::span<const uint8_t> bytes;
        bool vcrcGood = false;
    };
    std::optional<Packet> next(unsigned port);
    // Why the thread gave up on the port's ring (the peer broke it, or
    // closed its doorbell line); empty while it did not. Only once next()
    // has nothing more: the packets before the break go first.
    std::string broken(unsigned port);
    // Bytes of the port's ring not yet forwarded: in the ring, or read.
    uint64_t waiting(unsigned port);

  private:
    // Read packets, each a record: its length (4 bytes), whether its VCRC
    // is good (1 byte), its bytes.
    struct Buffer {
        std::unique_ptr<uint8_t[]> data;
        size_t used = 0;
        size_t at = 0; // the loop's: where the next record starts
    };
    struct Port {
        std::mutex mutex; // the thread's reading against the loop's attach/detach/take
        wire::RingReader *in = nullptr;
        int bell = -1;
        Buffer filling;     // the thread writes it
        bool full = false;  // the thread stopped reading: filling is full
        bool held = false;  // the thread reads nothing (hold())
        std::string broken; // why the thread stopped for good
        Buffer draining;    // the loop's, taken from filling
    };
    struct Thread;

    void run(Thread &t);
    void pump(unsigned port, bool rang);
    bool fill(Port &p);
    void markReady(unsigned port);
    void poke(unsigned port);

    std::vector<std::unique_ptr<Port>> ports_; // index = port number
    std::vector<std::unique_ptr<Thread>> threads_;
    std::mutex readyMutex_;            // the threads' news against the loop's taking it
    std::vector<unsigned> readyPorts_; // in the order they had news
    std::vector<bool> readyQueued_;    // index = port number: in readyPorts_
    int ready_ = -1;                   // an eventfd
};

} // namespace pib::fabric
