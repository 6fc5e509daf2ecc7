// SPDX-License-Identifier: GPL-2.0-or-later
// What the server's source files share and nobody else needs.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "frame.hh"
#include "server.hh"

namespace pib::fabric {

// A line to the switch's log (stderr), prefixed with the program's name
// and the seconds since it started.
void log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t monotonicNs();
// A non-blocking UNIX stream socket, listening at or connected to `path`
// (-1 when there is nothing to connect to); throws when it cannot listen.
int unixSocket(const std::string &path, bool listen);
// Adds `fd` to `epoll` (or changes it) with `tag` as its event data.
void watchTag(int epoll, int fd, uint64_t tag, bool writable);

// A peer may retrain its link (send HELLO again) at most this often; a
// faster one is answered without taking the link down and up.
constexpr uint64_t kMinRetrainNs = 100'000'000;

constexpr uint64_t kListenerTag = 1ull << 32;
constexpr uint64_t kWakeTag = 1ull << 33;
constexpr uint64_t kControlTag = 1ull << 34;       // the control socket's listener
constexpr uint64_t kControlClientTag = 1ull << 35; // | the client's fd

struct Server::Connection {
    int fd = -1;
    wire::FrameReader reader;
    std::vector<uint8_t> output; // frames to send; the first `sent` bytes are gone
    size_t sent = 0;
    bool helloReceived = false;
    uint64_t lastRetrainNs = 0; // the peer last retrained the link (a second HELLO)
    // As an input: not read while an output it filled drains.
    unsigned blockedOn = 0;
    uint64_t blockedSince = 0;
    // As an output: the last time its peer took bytes, and whether it took
    // none for so long that packets to it are discarded until it drains.
    uint64_t lastDrain = 0;
    bool stalled = false;

    size_t queued() const { return output.size() - sent; }
};

// A client of the control socket: it sends one line and reads the answer.
struct Server::ControlClient {
    int fd = -1;
    std::string input;
    std::string output; // the answer; the first `sent` bytes are gone
    size_t sent = 0;
};

} // namespace pib::fabric
