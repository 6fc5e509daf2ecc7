// SPDX-License-Identifier: GPL-2.0-or-later
// What the server's source files share and nobody else needs.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "frame.hh"
#include "ring_cable.hh"
#include "server.hh"

namespace pib::fabric {

// A line to the switch's log (stderr), prefixed with the program's name
// and the seconds since it started.
void log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
uint64_t monotonicNs();
// The address of the UNIX socket at `path`; throws when it is too long.
sockaddr_un unixAddress(const std::string &path);
// A non-blocking UNIX stream socket listening at `path`; throws when it
// cannot listen.
int unixListener(const std::string &path);
// "HOST:PORT" cut at its last colon; throws when there is none.
std::pair<std::string, std::string> splitHostPort(const std::string &address);
// Adds `fd` to `epoll` (or changes it) with `tag` as its event data.
void watchTag(int epoll, int fd, uint64_t tag, bool writable);

// An output whose peer takes nothing for its port's head-of-queue
// lifetime, 4.096 us x 2^HOQLife as the SM sets it in PortInfo, is not
// slow but stuck (server_flow.cc). opensm gives ports to CAs 0x10 (268 ms)
// and links between switches 0x12 (1.07 s): a link's peer switch is itself
// held back by its slowest output until that drains. Never less than
// kMinStallNs (a QEMU under TCG may pause that long, and the SM may not have
// set HOQLife yet); IBA's "infinite" (20 and above) is 2^20, 4.3 s, so that
// nothing waits for ever.
constexpr uint64_t kMinStallNs = 200'000'000;
constexpr uint8_t kMaxHoqLife = 20;

constexpr uint64_t stallLimitNs(uint8_t hoqLife) {
    const uint64_t lifetime = uint64_t{4096} << std::min(hoqLife, kMaxHoqLife);
    return std::max(kMinStallNs, lifetime);
}

// A peer may retrain its link (send HELLO again) at most this often; a
// faster one is answered without taking the link down and up.
constexpr uint64_t kMinRetrainNs = 100'000'000;

constexpr uint64_t kListenerTag = 1ull << 32;
constexpr uint64_t kWakeTag = 1ull << 33;
constexpr uint64_t kControlTag = 1ull << 34;       // the control socket's listener
constexpr uint64_t kControlClientTag = 1ull << 35; // | the client's fd
constexpr uint64_t kDialTag = 1ull << 36;          // | the port: its socket connecting
constexpr uint64_t kResolvedTag = 1ull << 37;      // Resolutions::wake
constexpr uint64_t kRingTag = 1ull << 38;          // | the port: its ring cable's doorbell
constexpr uint64_t kPumpsTag = 1ull << 39;         // RingPumps::readyFd

// The delay before each attempt of an outgoing link to connect again: it
// doubles from `first` up to `max`, and starts from `first` again after
// reset().
class RetryBackoff {
  public:
    RetryBackoff() = default;
    RetryBackoff(uint64_t firstNs, uint64_t maxNs)
        : first_(firstNs), max_(std::max(firstNs, maxNs)), next_(firstNs) {}
    // The delay before the next attempt; the one after it is twice as long.
    uint64_t next() {
        const uint64_t delay = next_;
        next_ = next_ > max_ / 2 ? max_ : next_ * 2;
        return delay;
    }
    void reset() { next_ = first_; }

  private:
    uint64_t first_ = 0, max_ = 0, next_ = 0;
};

// A socket address of any family.
struct DialAddress {
    sockaddr_storage storage{};
    socklen_t length = 0;
};

// The addresses a host name resolved to, or why it did not.
struct Lookup {
    std::vector<DialAddress> addresses;
    int status = 0; // getaddrinfo's: 0 or an EAI_ code
    std::string error;
};

// An outgoing link while it has no connection: it waits for its next
// attempt, or an attempt resolves the peer's name or connects to it.
struct Server::Dial {
    enum class Stage { kWaiting, kResolving, kConnecting };
    Stage stage = Stage::kWaiting;
    uint64_t nextAttemptNs = 0; // kWaiting: when the next attempt starts
    uint64_t giveUpNs = 0;      // otherwise: when this one is abandoned
    RetryBackoff backoff;
    // Numbers the attempts, so that a resolver's late answer to an
    // abandoned one is not taken for the current one's.
    uint64_t attempt = 0;
    std::vector<DialAddress> addresses; // tried in turn by this attempt
    size_t nextAddress = 0;
    int fd = -1; // kConnecting: the socket connecting
    // Attempts that failed since the last connection, and why the last did.
    unsigned failures = 0;
    std::string lastError;
};

// Where resolver threads leave their answers for the loop: a thread adds
// its answer and signals `wake`, which the loop watches. The server and
// its threads share it, so that a thread that outlives the server still
// has somewhere to leave its answer.
struct Server::Resolutions {
    struct Answer {
        unsigned port = 0;
        uint64_t attempt = 0;
        Lookup found;
    };
    std::mutex mutex;
    std::vector<Answer> answers;
    int wake = -1; // an eventfd

    Resolutions() = default;
    Resolutions(const Resolutions &) = delete;
    Resolutions &operator=(const Resolutions &) = delete;
    ~Resolutions() {
        if (wake >= 0)
            close(wake);
    }
};

// A ring cable (server_rings.cc), once the switch accepted the peer's offer.
// Ring 0 carries the offerer's frames, ring 1 the accepter's: a switch
// port that accepted reads ring 0, one that offered (a port that dials
// another switch's UNIX socket) reads ring 1.
struct Server::RingLink {
    RingLink(std::unique_ptr<wire::RingMemory> m, bool offered)
        : memory(std::move(m)),
          in(memory->ctrl(offered ? 1 : 0), memory->data(offered ? 1 : 0), memory->ringSize()),
          out(memory->ctrl(offered ? 0 : 1), memory->data(offered ? 0 : 1), memory->ringSize()) {}
    ~RingLink();
    RingLink(const RingLink &) = delete;
    RingLink &operator=(const RingLink &) = delete;
    std::unique_ptr<wire::RingMemory> memory;
    wire::RingReader in;  // what the peer sends
    wire::RingWriter out; // what the switch sends it
    // The switch's end of the doorbell line: the peer rings it (frames to
    // read, or room to write), and the switch rings the peer through it.
    int bell = -1;
};

struct Server::Connection {
    int fd = -1;
    wire::FrameReader reader;
    std::vector<uint8_t> output; // frames to send; the first `sent` bytes are gone
    size_t sent = 0;
    bool helloReceived = false;
    pib_wire_hello peer{};      // its last HELLO
    bool moved = false;         // it said MOVING: only a HELLO of it is read
    uint64_t lastRetrainNs = 0; // the peer last retrained the link (a second HELLO)
    // As an input: not read while an output it filled drains.
    unsigned blockedOn = 0;
    uint64_t blockedSince = 0;
    // As an output: the last time its peer took bytes, and whether it took
    // none for so long that packets to it are discarded until it drains.
    uint64_t lastDrain = 0;
    bool stalled = false;
    // Packets to it were discarded while it was stalled: once it drains, a
    // peer that takes PIB_WIRE_DISCARDED hears so. (A queue at kMaxOutput
    // that was not stalled lost what a fault held back or multicast copied;
    // it is not told.)
    bool discarded = false;
    // What epoll watches on fd now (watch() starts it at EPOLLIN): a
    // rewatch to the same events makes no system call.
    uint32_t watched = EPOLLIN;
    // Frames appended since the last flush: sent once per turn of the
    // event loop, not one send() per packet.
    bool unflushed = false;
    // Descriptors that came with the stream, for a RINGS offer.
    std::vector<int> passedFds;
    // A ring cable: packets go in ringOutput until the ring has room.
    std::unique_ptr<RingLink> rings;
    // A port that dials: the rings it offered, until the peer answers.
    std::unique_ptr<RingLink> offered;
    bool ringsOffered = false; // once per connection, taken or not
    std::vector<uint8_t> ringOutput;
    size_t ringSent = 0;

    size_t queuedInStream() const { return output.size() - sent; }
    size_t queuedInRing() const { return ringOutput.size() - ringSent; }
    // The first frame waiting for the ring, header and payload (a frame
    // the switch built: its length field is ours).
    size_t ringHeadBytes() const {
        uint32_t length;
        std::memcpy(&length, ringOutput.data() + ringSent + 8, sizeof(length));
        return wire::kHeaderSize + length;
    }
    size_t queued() const { return queuedInStream() + queuedInRing(); }
};

// A client of the control socket: it sends one line and reads the answer.
struct Server::ControlClient {
    int fd = -1;
    std::string input;
    std::string output; // the answer; the first `sent` bytes are gone
    size_t sent = 0;
};

} // namespace pib::fabric
