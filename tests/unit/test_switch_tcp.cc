// SPDX-License-Identifier: GPL-2.0-or-later
// The switch's outgoing links (fabric-switch/src/server_dial.cc), with a
// real server whose loop runs on a thread of its own: dialling a peer that
// does not answer never holds up the loop that serves the other ports; an
// attempt that hangs is abandoned and made again after a back-off; a peer
// that comes up late, or that is known by name only, is connected. Every
// peer is a socket of the test's own, on 127.0.0.1 or a UNIX path.
#include <catch2/catch.hpp>

#include <algorithm>
#include <arpa/inet.h>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <fstream>
#include <functional>
#include <netinet/in.h>
#include <optional>
#include <poll.h>
#include <pthread.h>
#include <random>
#include <string>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <thread>
#include <unistd.h>
#include <utility>
#include <vector>

#include "frame.hh"
#include "mad.hh"
#include "packet.hh"
#include "ring_cable.hh"
#include "server.hh"
#include "server_internal.hh"
#include "smp.hh"
#include "smp_packets.hh"
#include "switch.hh"

using namespace pib;
using namespace pib::fabric;
using namespace std::chrono_literals;
using std::chrono::milliseconds;
using std::chrono::steady_clock;

namespace {

// Far below the minutes a blocking connect waits out SYN retries, and
// still far above what a loaded machine takes to schedule the loop.
constexpr milliseconds kPromptly = 200ms;

// A file descriptor, closed with its owner.
class Fd {
  public:
    explicit Fd(int fd = -1) : fd_(fd) {}
    Fd(Fd &&other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
    Fd &operator=(Fd &&other) noexcept {
        reset(std::exchange(other.fd_, -1));
        return *this;
    }
    ~Fd() { reset(); }
    int get() const { return fd_; }
    explicit operator bool() const { return fd_ >= 0; }
    void reset(int fd = -1) {
        if (fd_ >= 0)
            close(fd_);
        fd_ = fd;
    }

  private:
    int fd_;
};

// Runs `f` when it goes out of scope.
template <class F> struct AtScopeExit {
    F f;
    ~AtScopeExit() { f(); }
};
template <class F> AtScopeExit(F) -> AtScopeExit<F>; // clang 14 deduces no aggregate's arguments

// A directory for the test's UNIX sockets, removed with what is in it.
class TempDir {
  public:
    TempDir() {
        char name[] = "/tmp/pib-switch-tcp-XXXXXX";
        REQUIRE(mkdtemp(name) != nullptr);
        path_ = name;
    }
    ~TempDir() { std::filesystem::remove_all(path_); }
    std::string file(const std::string &name) const { return path_ + "/" + name; }

  private:
    std::string path_;
};

sockaddr_in loopback(uint16_t port) {
    sockaddr_in addr{};
    addr.sin_family = AF_INET;
    addr.sin_port = htons(port);
    addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return addr;
}

// A TCP socket bound to a free port of 127.0.0.1, not listening yet: a
// connect to it is refused.
Fd boundTcpSocket() {
    Fd fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_in addr = loopback(0);
    REQUIRE(bind(fd.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) == 0);
    return fd;
}

uint16_t portOf(const Fd &fd) {
    sockaddr_in addr{};
    socklen_t length = sizeof(addr);
    REQUIRE(getsockname(fd.get(), reinterpret_cast<sockaddr *>(&addr), &length) == 0);
    return ntohs(addr.sin_port);
}

// Whether `fd` has something to read (or hung up) within `limit`.
bool readable(int fd, milliseconds limit) {
    pollfd p{fd, POLLIN, 0};
    return poll(&p, 1, static_cast<int>(limit.count())) == 1;
}

// A connection a listener takes within `limit`; none if none came.
Fd acceptWithin(const Fd &listener, milliseconds limit) {
    if (!readable(listener.get(), limit))
        return Fd();
    return Fd(accept4(listener.get(), nullptr, nullptr, SOCK_CLOEXEC));
}

// The first frame `fd` receives within `limit` whose type is `type`, or
// of any type if `type` is 0.
// The first frame of `type` (0: any) `fd` receives within `limit`; with
// `fds`, the descriptors that came with the bytes read are kept there.
std::optional<wire::Frame> frameOfType(const Fd &fd, uint8_t type, milliseconds limit,
                                       std::vector<int> *fds = nullptr) {
    wire::FrameReader reader;
    const auto deadline = steady_clock::now() + limit;
    while (true) {
        wire::FrameReader::Error error;
        while (auto frame = reader.next(&error))
            if (type == 0 || frame->type == type)
                return frame;
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
        if (left < 0ms || !readable(fd.get(), left))
            return std::nullopt;
        uint8_t buf[4096];
        std::vector<int> passed;
        const ssize_t n = fds ? wire::receiveWithFds(fd.get(), buf, &passed)
                              : recv(fd.get(), buf, sizeof(buf), 0);
        if (fds)
            fds->insert(fds->end(), passed.begin(), passed.end());
        if (n <= 0)
            return std::nullopt;
        reader.feed(std::span(buf, static_cast<size_t>(n)));
    }
}

// The type of the first frame `fd` receives within `limit`.
std::optional<uint8_t> firstFrame(const Fd &fd, milliseconds limit) {
    const auto frame = frameOfType(fd, 0, limit);
    return frame ? std::optional<uint8_t>(frame->type) : std::nullopt;
}

// Says HELLO as a switch's port 7 does: the link comes up.
void sayHello(const Fd &fd, uint32_t flags = 0) {
    pib_wire_hello hello{};
    hello.flags = flags;
    hello.node_guid = hello.port_guid = 0x0250494253570099ull;
    hello.node_type = PIB_WIRE_NODE_SWITCH;
    hello.port = 7;
    const auto frame = wire::encode(
        PIB_WIRE_HELLO, std::span(reinterpret_cast<const uint8_t *>(&hello), sizeof(hello)));
    REQUIRE(send(fd.get(), frame.data(), frame.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(frame.size()));
}

// A TCP port of 127.0.0.1 that drops SYNs, as a host behind a firewall
// that drops packets: its listener takes one connection into its queue
// and never accepts it, and the kernel drops every SYN that finds the
// queue full. A connect to it hangs.
class SynDroppingPeer {
  public:
    SynDroppingPeer() : listener_(boundTcpSocket()) {
        REQUIRE(listen(listener_.get(), 0) == 0); // a queue of one
        filler_ = Fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
        const sockaddr_in addr = loopback(port());
        REQUIRE(connect(filler_.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) ==
                0);
    }
    uint16_t port() const { return portOf(listener_); }
    std::string address() const { return "127.0.0.1:" + std::to_string(port()); }
    // Whether a connect to it really hangs here (the premise of the tests).
    bool dropsSyns() const {
        Fd probe(socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        const sockaddr_in addr = loopback(port());
        if (connect(probe.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) == 0 ||
            errno != EINPROGRESS)
            return false;
        pollfd p{probe.get(), POLLOUT, 0};
        return poll(&p, 1, 300) == 0;
    }
    // Takes the connection that filled the queue: the next SYN is answered.
    void makeRoom() { taken_ = Fd(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC)); }
    // A connection it takes from its queue within `limit`.
    Fd acceptWithin(milliseconds limit) { return ::acceptWithin(listener_, limit); }
    // Goes away: a connect still waiting for it fails at its next SYN.
    void close() {
        filler_.reset();
        taken_.reset();
        listener_.reset();
    }

  private:
    Fd listener_, filler_, taken_;
};

// A switch serving `endpoints` (index = port) on a thread of its own, as
// pib-fabric-switch serves them on its main thread (and its ring cables
// on `forwardingThreads` more). The test talks to it over its sockets only.
class RunningSwitch {
  public:
    RunningSwitch(std::vector<PortEndpoint> endpoints, const std::string &control,
                  const DialPolicy &policy = {}, uint64_t moveGraceNs = 5'000'000'000,
                  std::span<const uint8_t> restore = {}, unsigned forwardingThreads = 0)
        : switch_(SwitchConfig{0x0250494253570001ull, static_cast<unsigned>(endpoints.size() - 1),
                               "tcp test switch"}),
          server_(switch_, std::move(endpoints)) {
        server_.setControlSocket(control);
        server_.setDialPolicy(policy);
        server_.setMoveGrace(moveGraceNs);
        server_.setForwardingThreads(forwardingThreads);
        if (!restore.empty())
            server_.restoreState(restore, moveGraceNs);
        server_.open();
        loop_ = std::thread([this] { server_.run(); });
    }
    ~RunningSwitch() {
        server_.stop();
        loop_.join();
    }
    // CPU seconds the process has used: the switch's event loop and its
    // forwarding threads, and the test's own thread.
    static double cpuSeconds() {
        timespec ts{};
        REQUIRE(clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts) == 0);
        return static_cast<double>(ts.tv_sec) + static_cast<double>(ts.tv_nsec) / 1e9;
    }

  private:
    Switch switch_;
    Server server_;
    std::thread loop_;
};

// The control socket's answer to `command`; none if it gave none within
// `limit`.
std::optional<std::string> askControl(const std::string &path, const std::string &command,
                                      milliseconds limit) {
    // Non-blocking: a switch that takes no connection must not hold the
    // test up either.
    Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    const sockaddr_un addr = unixAddress(path);
    if (connect(fd.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) != 0)
        return std::nullopt;
    const std::string line = command + "\n";
    if (send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL) != static_cast<ssize_t>(line.size()))
        return std::nullopt;
    std::string answer;
    const auto deadline = steady_clock::now() + limit;
    while (true) {
        const auto left = std::chrono::duration_cast<milliseconds>(deadline - steady_clock::now());
        if (left < 0ms || !readable(fd.get(), left))
            return std::nullopt;
        char buf[1024];
        const ssize_t n = recv(fd.get(), buf, sizeof(buf), 0);
        if (n == 0)
            return answer; // the switch closes after its answer
        if (n < 0)
            return std::nullopt;
        answer.append(buf, static_cast<size_t>(n));
    }
}

// Asks "ports" until the answer contains `text`; false if it never did
// within `limit`.
bool portsSay(const std::string &control, const std::string &text, milliseconds limit) {
    const auto deadline = steady_clock::now() + limit;
    while (steady_clock::now() < deadline) {
        const auto answer = askControl(control, "ports", limit);
        if (answer && answer->find(text) != std::string::npos)
            return true;
        std::this_thread::sleep_for(20ms);
    }
    return false;
}

// Asks "ports" for `window` and checks that every answer comes promptly
// and that a new cable on `unixPort`'s socket hears the switch's HELLO
// promptly too; returns the last answer.
std::string checkTheSwitchAnswers(const std::string &control, const std::string &unixPort,
                                  milliseconds window) {
    std::string last;
    const auto end = steady_clock::now() + window;
    while (steady_clock::now() < end) {
        const auto asked = steady_clock::now();
        const auto answer = askControl(control, "ports", 2000ms);
        REQUIRE(answer); // the defect: the loop sat in connect() for minutes
        CHECK(steady_clock::now() - asked < kPromptly);
        last = *answer;
        std::this_thread::sleep_for(50ms);
    }
    Fd cable(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_un addr = unixAddress(unixPort);
    REQUIRE(connect(cable.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) == 0);
    CHECK(firstFrame(cable, kPromptly) == PIB_WIRE_HELLO);
    return last;
}

} // namespace

TEST_CASE("a TCP connect to a host that drops SYNs holds up no other port of the switch",
          "[switch-tcp]") {
    SynDroppingPeer peer;
    REQUIRE(peer.dropsSyns());
    TempDir dir;
    const std::string control = dir.file("control.sock");
    RunningSwitch sw({{},
                      {PortEndpoint::Kind::kUnixListen, dir.file("port1.sock")},
                      {PortEndpoint::Kind::kTcpConnect, peer.address()}},
                     control);
    // A loop stuck in connect() (the defect this guards against) comes
    // free at the next SYN after the peer is gone: it goes first.
    AtScopeExit peerGoesFirst{[&] { peer.close(); }};

    const std::string ports = checkTheSwitchAnswers(control, dir.file("port1.sock"), 1500ms);
    CHECK(ports.find("port 2: DOWN, link down, dialing " + peer.address() + ": connecting") !=
          std::string::npos);
}

TEST_CASE("a UNIX peer whose backlog is full holds up no other port of the switch",
          "[switch-tcp]") {
    TempDir dir;
    const std::string control = dir.file("control.sock");
    const std::string busy = dir.file("busy.sock");
    Fd listener(unixListener(busy));
    REQUIRE(listen(listener.get(), 0) == 0); // a queue of one...
    Fd filler(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_un addr = unixAddress(busy);
    REQUIRE(connect(filler.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) == 0);
    // ...that is full: a blocking connect would wait for room.
    RunningSwitch sw({{},
                      {PortEndpoint::Kind::kUnixListen, dir.file("port1.sock")},
                      {PortEndpoint::Kind::kUnixConnect, busy}},
                     control);
    AtScopeExit peerGoesFirst{[&] {
        filler.reset();
        listener.reset();
    }};

    checkTheSwitchAnswers(control, dir.file("port1.sock"), 500ms);
    CHECK(portsSay(control, "dialing " + busy + ": next attempt in", 1000ms));
}

TEST_CASE("a connect that hangs is abandoned after its time limit and made again", "[switch-tcp]") {
    SynDroppingPeer peer;
    REQUIRE(peer.dropsSyns());
    TempDir dir;
    const std::string control = dir.file("control.sock");
    DialPolicy quick;
    quick.firstRetryNs = 100'000'000;
    quick.maxRetryNs = 400'000'000;
    quick.attemptTimeoutNs = 200'000'000;
    RunningSwitch sw({{}, {PortEndpoint::Kind::kTcpConnect, peer.address()}}, control, quick);
    AtScopeExit peerGoesFirst{[&] { peer.close(); }};

    // Attempts end at about 0.2, 0.5 and 0.9 s.
    CHECK(portsSay(control, "attempts failed: 3, the last: timed out after 200 ms", 3000ms));
    peer.makeRoom();
    const Fd link = peer.acceptWithin(3000ms);
    REQUIRE(link);
    CHECK(firstFrame(link, 1000ms) == PIB_WIRE_HELLO);
    sayHello(link);
    CHECK(portsSay(control, "port 1: INIT, link up\n", 1000ms));
}

TEST_CASE("a peer that comes up late is connected by a retry and again after it hung up",
          "[switch-tcp]") {
    Fd peer = boundTcpSocket(); // bound but not listening: connects are refused
    const std::string address = "127.0.0.1:" + std::to_string(portOf(peer));
    TempDir dir;
    const std::string control = dir.file("control.sock");
    RunningSwitch sw({{}, {PortEndpoint::Kind::kTcpConnect, address}}, control);

    REQUIRE(portsSay(control, "attempts failed: 1, the last: Connection refused", 1000ms));
    REQUIRE(listen(peer.get(), 4) == 0);
    {
        const Fd link = acceptWithin(peer, 3000ms); // the retry, 1 s after the failure
        REQUIRE(link);
        CHECK(firstFrame(link, 1000ms) == PIB_WIRE_HELLO);
        sayHello(link);
        CHECK(portsSay(control, "port 1: INIT, link up\n", 1000ms));
    } // hangs up
    // The link had come up: the back-off starts again from 1 s.
    const Fd again = acceptWithin(peer, 3000ms);
    REQUIRE(again);
    CHECK(firstFrame(again, 1000ms) == PIB_WIRE_HELLO);
}

TEST_CASE("a peer known by name is resolved off the loop and connected", "[switch-tcp]") {
    Fd peer = boundTcpSocket();
    REQUIRE(listen(peer.get(), 4) == 0);
    TempDir dir;
    const std::string control = dir.file("control.sock");
    // localhost is 127.0.0.1 (and maybe ::1, which refuses: the switch
    // goes on to the next address).
    RunningSwitch sw(
        {{}, {PortEndpoint::Kind::kTcpConnect, "localhost:" + std::to_string(portOf(peer))}},
        control);

    const Fd link = acceptWithin(peer, 3000ms);
    REQUIRE(link);
    CHECK(firstFrame(link, 1000ms) == PIB_WIRE_HELLO);
}

TEST_CASE("the retry delay doubles up to its limit and starts over once a link came up",
          "[switch-tcp]") {
    RetryBackoff backoff(1'000'000'000, 30'000'000'000);
    std::vector<uint64_t> delays;
    for (int i = 0; i < 7; ++i)
        delays.push_back(backoff.next() / 1'000'000'000);
    CHECK(delays == std::vector<uint64_t>{1, 2, 4, 8, 16, 30, 30});
    backoff.reset();
    CHECK(backoff.next() == 1'000'000'000);
}

// ---- ring cables (server_rings.cc, docs/wire.md) -------------------------

namespace {

constexpr uint32_t kRingSize = PIB_WIRE_RING_MIN_SIZE;

Fd cableTo(const std::string &path) {
    Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
    const sockaddr_un addr = unixAddress(path);
    REQUIRE(connect(fd.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) == 0);
    return fd;
}

void sendFrame(const Fd &fd, uint8_t type, std::span<const uint8_t> payload) {
    const auto frame = wire::encode(type, payload);
    REQUIRE(send(fd.get(), frame.data(), frame.size(), MSG_NOSIGNAL) ==
            static_cast<ssize_t>(frame.size()));
}

// A device's end of a ring cable: the memory and its end of the doorbell
// line (`bell`: it rings the switch, and is readable when the switch rang),
// and the switch's end, which the offer passes.
struct OfferedRings {
    std::unique_ptr<wire::RingMemory> memory;
    Fd bell, switchEnd;
    OfferedRings() {
        std::string why;
        memory = wire::RingMemory::create(kRingSize, &why);
        REQUIRE(memory);
        int ours = -1, theirs = -1;
        REQUIRE(wire::makeDoorbellLine(&ours, &theirs, &why));
        bell = Fd(ours);
        switchEnd = Fd(theirs);
    }
    std::vector<int> fds() const { return {memory->fd(), switchEnd.get()}; }
};

constexpr uint64_t kDeviceGuid = 0x0250494200000100ull;

// Says HELLO as a device's port 1 does.
void deviceHello(const Fd &cable, uint16_t flags = 0, uint64_t guid = kDeviceGuid) {
    pib_wire_hello ours{};
    ours.node_guid = ours.port_guid = guid;
    ours.node_type = PIB_WIRE_NODE_CA;
    ours.port = 1;
    ours.flags = flags;
    sendFrame(cable, PIB_WIRE_HELLO,
              std::span(reinterpret_cast<const uint8_t *>(&ours), sizeof(ours)));
}

// The flags of the HELLO the switch sends first on `cable`.
decltype(pib_wire_hello::flags) helloFlags(const Fd &cable, milliseconds limit = 2000ms) {
    const auto hello = frameOfType(cable, PIB_WIRE_HELLO, limit);
    REQUIRE(hello);
    pib_wire_hello theirs{};
    std::memcpy(&theirs, hello->payload.data(), sizeof(theirs));
    return theirs.flags;
}

// Connects to `path` as a device does: the switch's HELLO, then ours.
Fd deviceCable(const std::string &path, uint16_t flags = 0, uint64_t guid = kDeviceGuid) {
    Fd cable = cableTo(path);
    CHECK(helloFlags(cable) & PIB_WIRE_HELLO_TAKES_RINGS);
    deviceHello(cable, flags, guid);
    return cable;
}

// Offers rings with `fds`; the answer's flags.
uint32_t offer(const Fd &cable, const std::vector<int> &fds, uint32_t ringSize = kRingSize) {
    const pib_wire_rings rings{ringSize, 0};
    const auto frame = wire::encode(
        PIB_WIRE_RINGS, std::span(reinterpret_cast<const uint8_t *>(&rings), sizeof(rings)));
    REQUIRE(wire::sendWithFds(cable.get(), frame, fds));
    const auto answer = frameOfType(cable, PIB_WIRE_RINGS, 2000ms);
    REQUIRE(answer);
    REQUIRE(answer->payload.size() == sizeof(pib_wire_rings));
    pib_wire_rings got{};
    std::memcpy(&got, answer->payload.data(), sizeof(got));
    return got.flags;
}

// A NodeInfo query to the switch itself (directed route, hop 1).
std::vector<uint8_t> nodeInfoSmp() {
    return testing::drSmp(iba::kGet, iba::kAttrNodeInfo, 0, {1});
}

bool isNodeInfoAnswer(std::span<const uint8_t> packet) {
    iba::ParseError error;
    auto parsed = iba::parse(packet, &error);
    return parsed && parsed->payload.size() == iba::kMadSize && parsed->payload[3] == iba::kGetResp;
}

// A switch with one port, and a device on it whose ring offer it took;
// the switch reads the ring on its event loop, or on `forwardingThreads`.
struct RingCabledDevice {
    TempDir dir;
    RunningSwitch sw;
    Fd cable = deviceCable(dir.file("port1.sock"));
    OfferedRings rings;
    wire::RingWriter out{rings.memory->ctrl(0), rings.memory->data(0), kRingSize};
    wire::RingReader in{rings.memory->ctrl(1), rings.memory->data(1), kRingSize};

    explicit RingCabledDevice(unsigned forwardingThreads = 0)
        : sw({{}, {PortEndpoint::Kind::kUnixListen, dir.file("port1.sock")}},
             dir.file("control.sock"), {}, 5'000'000'000, {}, forwardingThreads) {
        REQUIRE(offer(cable, rings.fds()) == PIB_WIRE_RINGS_ACCEPTED);
    }
    // `count` NodeInfo queries to the switch in our ring, after we asked
    // for a doorbell for the answers; the switch's rung if it asked.
    void askNodeInfo(int count) {
        REQUIRE(in.armDoorbell());
        for (int i = 0; i < count; ++i)
            REQUIRE(out.put(wire::encode(PIB_WIRE_PACKET, nodeInfoSmp())));
        if (out.publish())
            wire::ringDoorbell(rings.bell.get());
    }
    // How many NodeInfo answers came in our ring within 2 s, at most
    // `expected` (each checked to be one).
    int takeAnswers(int expected) {
        int answers = 0;
        const auto deadline = steady_clock::now() + 2000ms;
        while (answers < expected && steady_clock::now() < deadline) {
            readable(rings.bell.get(), 100ms);
            wire::clearDoorbell(rings.bell.get());
            wire::RingReader::Error error;
            while (auto frame = in.next(&error)) {
                CHECK(isNodeInfoAnswer(frame->payload));
                ++answers;
            }
            REQUIRE(error == wire::RingReader::Error::kNone);
            in.release();
            in.armDoorbell();
        }
        return answers;
    }
};

} // namespace

TEST_CASE("a device's ring offer is accepted and packets cross the rings both ways",
          "[switch-rings]") {
    const unsigned threads = GENERATE(0u, 2u); // on the loop, on forwarding threads
    INFO(threads << " forwarding threads");
    RingCabledDevice d(threads);
    // Three queries: the switch sleeps on the first doorbell, and answers
    // all three in the ring, ringing ours once we sleep.
    d.askNodeInfo(3);
    CHECK(d.takeAnswers(3) == 3);
    // Nothing came on the stream: packets take the ring now.
    CHECK_FALSE(frameOfType(d.cable, PIB_WIRE_PACKET, 100ms));
}

TEST_CASE("the control socket's queues show what waits in a ring its device does not read",
          "[switch-rings]") {
    const unsigned threads = GENERATE(0u, 2u); // on the loop, on forwarding threads
    INFO(threads << " forwarding threads");
    RingCabledDevice d(threads);
    d.askNodeInfo(3);
    // Three answers wait in the ring to the device, which reads nothing.
    REQUIRE(readable(d.rings.bell.get(), 2000ms));
    std::optional<std::string> queues;
    for (int i = 0; i < 50; ++i) {
        queues = askControl(d.dir.file("control.sock"), "queues", 2000ms);
        if (queues && d.in.waiting() >= 3 * (wire::kHeaderSize + iba::kMadSize))
            break;
        std::this_thread::sleep_for(20ms);
    }
    REQUIRE(queues);
    INFO(*queues);
    CHECK(queues->starts_with("ok\nport 1: queued 0 + 0 ring, ring out " +
                              std::to_string(d.in.waiting()) + " in 0\n"));
    CHECK(d.in.waiting() > 3 * iba::kMadSize);
}

TEST_CASE("a ring offer the switch cannot trust is refused, and packets stay on the stream",
          "[switch-rings]") {
    TempDir dir;
    RunningSwitch sw({{}, {PortEndpoint::Kind::kUnixListen, dir.file("port1.sock")}},
                     dir.file("control.sock"));
    Fd cable = deviceCable(dir.file("port1.sock"));
    OfferedRings rings;
    std::vector<int> fds = rings.fds();
    uint32_t ringSize = kRingSize;
    Fd other;
    SECTION("memory not sealed against shrinking") {
        other = Fd(memfd_create("unsealed", MFD_CLOEXEC));
        REQUIRE(ftruncate(other.get(), PIB_WIRE_RING_DATA + 2 * kRingSize) == 0);
        fds[0] = other.get();
    }
    SECTION("a doorbell line that is a file") {
        other = Fd(memfd_create("file", MFD_CLOEXEC));
        fds[1] = other.get();
    }
    SECTION("a doorbell line that is an eventfd (whose blocking the peer controls)") {
        other = Fd(eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
        fds[1] = other.get();
    }
    SECTION("a doorbell line that is a listening socket") {
        other = Fd(unixListener(dir.file("listening.sock")));
        REQUIRE(listen(other.get(), 1) == 0);
        fds[1] = other.get();
    }
    SECTION("one descriptor, not two") {
        fds.pop_back();
    }
    SECTION("three descriptors, not two") {
        fds.push_back(rings.bell.get());
    }
    SECTION("a ring size that is not the memory's") {
        ringSize = kRingSize * 2;
    }
    CHECK(offer(cable, fds, ringSize) == 0);
    const auto smp = nodeInfoSmp();
    sendFrame(cable, PIB_WIRE_PACKET, smp);
    const auto answer = frameOfType(cable, PIB_WIRE_PACKET, 2000ms);
    REQUIRE(answer);
    CHECK(isNodeInfoAnswer(answer->payload));
}

// Whether the switch closed `cable` within 2 s: its stream ends.
bool switchClosed(const Fd &cable) {
    if (!readable(cable.get(), 2000ms))
        return false;
    uint8_t buf[256];
    ssize_t n;
    while ((n = recv(cable.get(), buf, sizeof(buf), MSG_DONTWAIT)) > 0) {
    }
    return n == 0;
}

// Issue 57's defects 2 and 5: a ring peer holds the other end of the
// doorbell line (and, as here, may keep the switch's end too: the flags
// are the description's). It makes the switch's end blocking, fills the
// peer's own end so that the switch's rings find no room, and floods the
// switch's end with rings. The switch blocks on none of it, takes the
// flood a bounded share a turn, and answers another port at once.
TEST_CASE("a ring peer's doorbell line stalls the switch for no other port", "[switch-rings]") {
    TempDir dir;
    const unsigned threads = GENERATE(0u, 2u);
    INFO(threads << " forwarding threads");
    RunningSwitch sw({{},
                      {PortEndpoint::Kind::kUnixListen, dir.file("port1.sock")},
                      {PortEndpoint::Kind::kUnixListen, dir.file("port2.sock")}},
                     dir.file("control.sock"), {}, 5'000'000'000, {}, threads);
    Fd cable = deviceCable(dir.file("port1.sock"));
    OfferedRings rings;
    REQUIRE(offer(cable, rings.fds()) == PIB_WIRE_RINGS_ACCEPTED);
    const int theirs = rings.switchEnd.get(), ours = rings.bell.get();
    REQUIRE(fcntl(theirs, F_SETFL, fcntl(theirs, F_GETFL) & ~O_NONBLOCK) == 0);
    REQUIRE(fcntl(ours, F_SETFL, fcntl(ours, F_GETFL) & ~O_NONBLOCK) == 0);
    while (send(theirs, "x", 1, MSG_DONTWAIT) ==
           1) { // our end full: the switch's rings find no room
    }
    // Queries in our ring, our doorbell asked for: the switch answers into
    // the ring and rings a line that is full and blocking for it.
    wire::RingWriter out{rings.memory->ctrl(0), rings.memory->data(0), kRingSize};
    wire::RingReader in{rings.memory->ctrl(1), rings.memory->data(1), kRingSize};
    REQUIRE(in.armDoorbell());
    for (int i = 0; i < 8; ++i)
        REQUIRE(out.put(wire::encode(PIB_WIRE_PACKET, nodeInfoSmp())));
    out.publish();
    const double cpuBefore = sw.cpuSeconds();
    const uint8_t flood[4096] = {};
    for (int i = 0; i < 256; ++i) // rings without end, as a semaphore-mode eventfd would
        if (send(ours, flood, sizeof(flood), MSG_DONTWAIT) <= 0)
            break;
    // Another port's device is answered, and at once.
    Fd other = deviceCable(dir.file("port2.sock"), 0, kDeviceGuid + 0x100);
    const auto started = steady_clock::now();
    sendFrame(other, PIB_WIRE_PACKET, nodeInfoSmp());
    const auto answer = frameOfType(other, PIB_WIRE_PACKET, 2000ms);
    REQUIRE(answer);
    CHECK(isNodeInfoAnswer(answer->payload));
    CHECK(steady_clock::now() - started < 1000ms);
    // Our queries were answered in the ring too, despite the line.
    int answers = 0;
    for (auto deadline = steady_clock::now() + 2000ms;
         answers < 8 && steady_clock::now() < deadline; std::this_thread::sleep_for(10ms)) {
        wire::RingReader::Error error;
        while (auto frame = in.next(&error))
            answers += isNodeInfoAnswer(frame->payload);
        in.release();
    }
    CHECK(answers == 8);
    // The flood cost a bounded share a turn, not a spinning loop: over a
    // quiet second the switch used a small part of it.
    std::this_thread::sleep_for(1000ms);
    INFO("the switch's CPU seconds since the flood: " << sw.cpuSeconds() - cpuBefore);
    CHECK(sw.cpuSeconds() - cpuBefore < 0.5);
}

TEST_CASE("a ring peer that hangs up its doorbell line loses its link", "[switch-rings]") {
    const unsigned threads = GENERATE(0u, 2u); // on the loop, on forwarding threads
    INFO(threads << " forwarding threads");
    RingCabledDevice d(threads);
    d.rings.bell = Fd();
    d.rings.switchEnd = Fd();
    CHECK(switchClosed(d.cable));
}

TEST_CASE("a device that breaks its ring loses its link, and nothing else", "[switch-rings]") {
    const unsigned threads = GENERATE(0u, 2u); // on the loop, on forwarding threads
    INFO(threads << " forwarding threads");
    RingCabledDevice d(threads);
    d.rings.memory->ctrl(0)->produced = kRingSize + 1; // more than the ring holds
    wire::ringDoorbell(d.rings.bell.get());
    CHECK(switchClosed(d.cable));
    // The port takes a new cable.
    Fd again = deviceCable(d.dir.file("port1.sock"));
}

TEST_CASE("a switch that dials another's UNIX socket offers it a ring cable", "[switch-rings]") {
    TempDir dir;
    const std::string path = dir.file("peer.sock");
    Fd listener(unixListener(path));
    REQUIRE(listen(listener.get(), 4) == 0);
    const unsigned threads = GENERATE(0u, 2u);
    INFO(threads << " forwarding threads");
    RunningSwitch sw({{}, {PortEndpoint::Kind::kUnixConnect, path}}, dir.file("control.sock"), {},
                     5'000'000'000, {}, threads);
    const Fd link = acceptWithin(listener, 3000ms);
    REQUIRE(link);
    CHECK_FALSE(helloFlags(link, 1000ms) &
                PIB_WIRE_HELLO_TAKES_RINGS);    // a port that dials takes none
    sayHello(link, PIB_WIRE_HELLO_TAKES_RINGS); // as a listening port's HELLO

    std::vector<int> fds;
    const auto offered = frameOfType(link, PIB_WIRE_RINGS, 1000ms, &fds);
    AtScopeExit closeAll{[&] {
        for (int fd : fds)
            close(fd);
    }};
    REQUIRE(offered);
    pib_wire_rings offer{};
    REQUIRE(offered->payload.size() == sizeof(offer));
    std::memcpy(&offer, offered->payload.data(), sizeof(offer));
    CHECK(offer.flags == 0);
    REQUIRE(fds.size() == 2);
    CHECK(wire::isDoorbellLine(fds[1]));
    std::string why;
    auto memory = wire::RingMemory::adopt(dup(fds[0]), offer.ring_size, &why);
    REQUIRE(memory);
    const pib_wire_rings answer{offer.ring_size, PIB_WIRE_RINGS_ACCEPTED};
    sendFrame(link, PIB_WIRE_RINGS,
              std::span(reinterpret_cast<const uint8_t *>(&answer), sizeof(answer)));

    // We accepted: our frames go in ring 1, the switch's come in ring 0.
    wire::RingWriter out(memory->ctrl(1), memory->data(1), offer.ring_size);
    wire::RingReader in(memory->ctrl(0), memory->data(0), offer.ring_size);
    REQUIRE(in.armDoorbell());
    for (int i = 0; i < 3; ++i)
        REQUIRE(out.put(wire::encode(PIB_WIRE_PACKET, nodeInfoSmp())));
    out.publish();
    wire::ringDoorbell(fds[1]); // the accepter's end of the line
    int answers = 0;
    const auto deadline = steady_clock::now() + 2000ms;
    while (answers < 3 && steady_clock::now() < deadline) {
        readable(fds[1], 100ms);
        wire::clearDoorbell(fds[1]);
        wire::RingReader::Error error;
        while (auto frame = in.next(&error)) {
            CHECK(isNodeInfoAnswer(frame->payload));
            ++answers;
        }
        REQUIRE(error == wire::RingReader::Error::kNone);
        if (in.release())
            wire::ringDoorbell(fds[1]);
        in.armDoorbell();
    }
    CHECK(answers == 3);
    CHECK_FALSE(frameOfType(link, PIB_WIRE_PACKET, 100ms));
}

namespace {

// A switch with one port and a device on it whose link the SM made ARMED
// (a state a retrained link would leave: it comes up INIT).
struct ArmedDevice {
    TempDir dir;
    std::string control = dir.file("control.sock");
    std::string port = dir.file("port1.sock");
    RunningSwitch sw;
    Fd cable;

    explicit ArmedDevice(milliseconds grace)
        : sw({{}, {PortEndpoint::Kind::kUnixListen, port}}, control, {},
             static_cast<uint64_t>(grace.count()) * 1'000'000),
          cable(deviceCable(port)) {
        auto mad = testing::drSmpMad(iba::kSet, iba::kAttrPortInfo, 1, {1});
        iba::Mad smp(mad);
        iba::writePortInfo(smp, {.portState = iba::kPortStateArmed});
        sendFrame(cable, PIB_WIRE_PACKET, testing::drPacket(mad));
        REQUIRE(frameOfType(cable, PIB_WIRE_PACKET, 2000ms)); // the Set's answer
        REQUIRE(portsSay(control, "port 1: ARMED, link up", 2000ms));
    }
};

// Whether the switch answers a NodeInfo query on `cable`.
bool answersOn(const Fd &cable) {
    sendFrame(cable, PIB_WIRE_PACKET, nodeInfoSmp());
    const auto answer = frameOfType(cable, PIB_WIRE_PACKET, 2000ms);
    return answer && isNodeInfoAnswer(answer->payload);
}

// Whether the switch closed `fd` within `limit` (what it sent meanwhile
// is read and dropped).
bool closedWithin(const Fd &fd, milliseconds limit) {
    const auto deadline = steady_clock::now() + limit;
    while (steady_clock::now() < deadline) {
        if (!readable(fd.get(), 50ms))
            continue;
        uint8_t buf[4096];
        if (recv(fd.get(), buf, sizeof(buf), 0) <= 0)
            return true;
    }
    return false;
}

} // namespace

TEST_CASE("a device that moves keeps its link: its new connection's HELLO resumes it",
          "[switch-moves]") {
    ArmedDevice d(5000ms);
    sendFrame(d.cable, PIB_WIRE_MOVING, {});
    REQUIRE(portsSay(d.control, "its device moves", 2000ms));
    // The new QEMU's cable replaces the old one, which the switch closes.
    Fd moved = cableTo(d.port);
    // The switch's HELLO says it keeps a moved link on the port.
    CHECK(helloFlags(moved) & PIB_WIRE_HELLO_RESUMES);
    CHECK(closedWithin(d.cable, 2000ms));
    CHECK(portsSay(d.control, "port 1: ARMED, link up, its device moves", 1000ms));
    deviceHello(moved, PIB_WIRE_HELLO_RESUMES);
    // The link went on: still ARMED (a link that trained again is INIT).
    CHECK(portsSay(d.control, "port 1: ARMED, link up\n", 2000ms));
    CHECK(answersOn(moved));
}

TEST_CASE("a device whose move failed resumes on its old connection", "[switch-moves]") {
    ArmedDevice d(5000ms);
    sendFrame(d.cable, PIB_WIRE_MOVING, {});
    REQUIRE(portsSay(d.control, "its device moves", 2000ms));
    // What it sends while it moves is not read; its HELLO is.
    sendFrame(d.cable, PIB_WIRE_PACKET, nodeInfoSmp());
    CHECK_FALSE(frameOfType(d.cable, PIB_WIRE_PACKET, 300ms));
    deviceHello(d.cable, PIB_WIRE_HELLO_RESUMES);
    CHECK(portsSay(d.control, "port 1: ARMED, link up\n", 2000ms));
    CHECK(answersOn(d.cable));
}

TEST_CASE("a move that does not end with the device's HELLO takes the link down",
          "[switch-moves]") {
    SECTION("the grace runs out") {
        ArmedDevice d(300ms);
        sendFrame(d.cable, PIB_WIRE_MOVING, {});
        d.cable.reset(); // the old QEMU is gone: the link still waits
        CHECK(portsSay(d.control, "port 1: ARMED, link up, its device moves", 200ms));
        CHECK(portsSay(d.control, "port 1: DOWN, link down\n", 2000ms));
        // A device that comes later trains a new link.
        Fd late = deviceCable(d.port, PIB_WIRE_HELLO_RESUMES);
        CHECK(portsSay(d.control, "port 1: INIT, link up\n", 2000ms));
    }
    SECTION("another device takes the port") {
        ArmedDevice d(5000ms);
        sendFrame(d.cable, PIB_WIRE_MOVING, {});
        REQUIRE(portsSay(d.control, "its device moves", 2000ms));
        Fd other = deviceCable(d.port, PIB_WIRE_HELLO_RESUMES, kDeviceGuid + 1);
        CHECK(portsSay(d.control, "port 1: INIT, link up\n", 2000ms));
    }
    SECTION("the device resets its port instead") {
        ArmedDevice d(5000ms);
        sendFrame(d.cable, PIB_WIRE_MOVING, {});
        REQUIRE(portsSay(d.control, "its device moves", 2000ms));
        deviceHello(d.cable); // no PIB_WIRE_HELLO_RESUMES
        CHECK(portsSay(d.control, "port 1: INIT, link up\n", 2000ms));
        CHECK(answersOn(d.cable));
    }
}

TEST_CASE("a switch that says MOVING keeps no link", "[switch-moves]") {
    TempDir dir;
    RunningSwitch sw({{}, {PortEndpoint::Kind::kUnixListen, dir.file("port1.sock")}},
                     dir.file("control.sock"));
    Fd cable = cableTo(dir.file("port1.sock"));
    REQUIRE(frameOfType(cable, PIB_WIRE_HELLO, 2000ms));
    sayHello(cable); // a switch's port 7
    REQUIRE(portsSay(dir.file("control.sock"), "port 1: INIT, link up", 2000ms));
    sendFrame(cable, PIB_WIRE_MOVING, {});
    CHECK(answersOn(cable)); // nothing changed: it is still read
    cable.reset();
    CHECK(portsSay(dir.file("control.sock"), "port 1: DOWN, link down", 2000ms));
}

namespace {

// The state a switch saved through its control socket's "save FILE".
std::vector<uint8_t> savedState(const std::string &control, const std::string &file) {
    const auto answer = askControl(control, "save " + file, 2000ms);
    REQUIRE(answer);
    REQUIRE(answer->rfind("ok saved", 0) == 0);
    return readStateFile(file);
}

} // namespace

TEST_CASE("a switch restored from its saved state keeps each link up for its peer to resume",
          "[switch-state]") {
    TempDir saved;
    std::vector<uint8_t> state;
    {
        ArmedDevice d(5000ms);
        state = savedState(d.control, saved.file("switch.state"));
    }
    TempDir dir;
    const std::string control = dir.file("control.sock"), port = dir.file("port1.sock");
    const std::vector<PortEndpoint> endpoints{{}, {PortEndpoint::Kind::kUnixListen, port}};
    SECTION("the device restored from the same snapshot resumes the link") {
        RunningSwitch sw(endpoints, control, {}, 5'000'000'000, state);
        // The SM's state came back: ARMED, with the link kept for the device.
        CHECK(portsSay(control, "port 1: ARMED, link up, its device moves", 2000ms));
        Fd cable = cableTo(port);
        CHECK(helloFlags(cable) & PIB_WIRE_HELLO_RESUMES);
        deviceHello(cable, PIB_WIRE_HELLO_RESUMES);
        CHECK(portsSay(control, "port 1: ARMED, link up\n", 2000ms));
        CHECK(answersOn(cable));
    }
    SECTION("a device that boots afresh trains a new link") {
        RunningSwitch sw(endpoints, control, {}, 5'000'000'000, state);
        Fd cable = deviceCable(port); // no PIB_WIRE_HELLO_RESUMES
        CHECK(portsSay(control, "port 1: INIT, link up\n", 2000ms));
    }
    SECTION("another device is not the one the link was kept for") {
        RunningSwitch sw(endpoints, control, {}, 5'000'000'000, state);
        Fd cable = deviceCable(port, PIB_WIRE_HELLO_RESUMES, kDeviceGuid + 1);
        CHECK(portsSay(control, "port 1: INIT, link up\n", 2000ms));
    }
    SECTION("no device comes back within the grace") {
        RunningSwitch sw(endpoints, control, {}, 300'000'000, state);
        CHECK(portsSay(control, "port 1: DOWN, link down\n", 2000ms));
    }
}

TEST_CASE("a restored port the SM had set DOWN trains a new link with its peer", "[switch-state]") {
    // The SM set port 1 DOWN while its link was up, and the switch was
    // saved before its server closed the cable: the link reset pending.
    Switch before(SwitchConfig{0x0250494253570001ull, 1, "tcp test switch"});
    before.linkChanged(1, true);
    iba::ParseError error;
    auto smp = *iba::parse(testing::drSmp(iba::kSet, iba::kAttrPortInfo, 1, {1}), &error);
    iba::Mad mad(smp.payload);
    iba::writePortInfo(mad, {.portState = iba::kPortStateDown});
    before.receive(1, iba::build(smp));
    REQUIRE(before.port(1).state == iba::kPortStateDown);
    StateWriter w;
    before.save(w);
    w.beginSection(stateTag("SLNK")); // the server's: the link up, to the device
    w.boolean(true);
    w.u64(kDeviceGuid);
    w.endSection();
    const std::vector<uint8_t> state = w.take();

    TempDir dir;
    const std::string control = dir.file("control.sock"), port = dir.file("port1.sock");
    RunningSwitch sw({{}, {PortEndpoint::Kind::kUnixListen, port}}, control, {}, 5'000'000'000,
                     state);
    // Not kept up for the device to resume: the link goes down to train.
    CHECK(portsSay(control, "port 1: DOWN, link down\n", 2000ms));
    Fd cable = deviceCable(port, PIB_WIRE_HELLO_RESUMES);
    CHECK(portsSay(control, "port 1: INIT, link up\n", 2000ms));
}

TEST_CASE("a switch refuses a state that is not its own, cut or changed", "[switch-state]") {
    TempDir saved;
    std::vector<uint8_t> state;
    {
        ArmedDevice d(5000ms);
        state = savedState(d.control, saved.file("switch.state"));
    }
    TempDir dir;
    auto refusal = [&](std::span<const uint8_t> bytes, unsigned ports = 1) -> std::string {
        Switch sw(SwitchConfig{0x0250494253570001ull, ports, "tcp test switch"});
        std::vector<PortEndpoint> endpoints(ports + 1);
        for (unsigned p = 1; p <= ports; ++p)
            endpoints[p] = {PortEndpoint::Kind::kUnixListen, dir.file("p" + std::to_string(p))};
        Server server(sw, endpoints);
        try {
            server.restoreState(bytes, 1'000'000'000);
        } catch (const std::runtime_error &e) {
            CHECK(sw.lid() == 0); // a refused state changed nothing
            CHECK(sw.port(1).state == iba::kPortStateDown);
            return e.what();
        }
        return "";
    };
    CHECK(refusal(state).empty());
    CHECK_THAT(refusal(state, 2), Catch::Contains("the state is of another switch"));
    for (size_t cut = 0; cut < state.size(); cut += cut < 64 ? 1 : 997)
        CHECK_FALSE(refusal(std::span(state).first(cut)).empty());
    std::vector<uint8_t> longer = state;
    longer.push_back(0);
    CHECK_THAT(refusal(longer), Catch::Contains("bytes after"));
    std::vector<uint8_t> otherVersion = state;
    otherVersion[8] = 9; // the version, after the section's tag and length
    CHECK_THAT(refusal(otherVersion), Catch::Contains("of version 9"));
}

// Regression (32ab2c9): a ring-cabled device whose move failed goes on on
// its old connection, and what it put in its ring meanwhile was never
// read: the switch had stopped reading the ring at MOVING, and the
// device's doorbell had been rung before.
TEST_CASE("a ring-cabled device whose move failed has its ring read again", "[switch-moves]") {
    const unsigned threads = GENERATE(0u, 2u); // on the loop, on forwarding threads
    INFO(threads << " forwarding threads");
    RingCabledDevice d(threads);
    sendFrame(d.cable, PIB_WIRE_MOVING, {});
    REQUIRE(portsSay(d.dir.file("control.sock"), "its device moves", 2000ms));
    d.askNodeInfo(2); // not read while it moves
    REQUIRE(d.in.armDoorbell());
    wire::clearDoorbell(d.rings.bell.get());
    CHECK_FALSE(readable(d.rings.bell.get(), 300ms));
    wire::RingReader::Error error;
    CHECK_FALSE(d.in.next(&error));
    deviceHello(d.cable, PIB_WIRE_HELLO_RESUMES); // the move failed: the same connection resumes
    REQUIRE(portsSay(d.dir.file("control.sock"), "port 1: INIT, link up\n", 2000ms));
    CHECK(d.takeAnswers(2) == 2);
}

namespace {

// A Set of a switch attribute through `cable`, one hop away; returns when
// the switch answered.
void setThrough(const Fd &cable, uint16_t attr, uint32_t mod,
                const std::function<void(iba::Mad &)> &fill) {
    auto mad = testing::drSmpMad(iba::kSet, attr, mod, {1});
    iba::Mad smp(mad);
    fill(smp);
    sendFrame(cable, PIB_WIRE_PACKET, testing::drPacket(mad));
    REQUIRE(frameOfType(cable, PIB_WIRE_PACKET, 2000ms));
}

// The states fuzz-switch-state starts from: a switch of 4 ports with
// nothing on them, and one whose SM configured it with two devices
// cabled (a LID, routes, a multicast group, a partition, port 1 ARMED
// and port 2 INIT), as its control socket's "save" writes them.
std::vector<std::vector<uint8_t>> switchStateSeeds() {
    TempDir dir;
    std::vector<PortEndpoint> endpoints(5);
    for (unsigned p = 1; p <= 4; ++p)
        endpoints[p] = {PortEndpoint::Kind::kUnixListen, dir.file("port" + std::to_string(p))};
    const std::string control = dir.file("control.sock");
    RunningSwitch sw(endpoints, control);
    std::vector<std::vector<uint8_t>> seeds{savedState(control, dir.file("bare.state"))};
    Fd sm = deviceCable(dir.file("port1"));
    Fd other = deviceCable(dir.file("port2"), 0, kDeviceGuid + 0x100);
    REQUIRE(portsSay(control, "port 2: INIT, link up", 2000ms));
    setThrough(sm, iba::kAttrPortInfo, 0, [](iba::Mad &m) { iba::writePortInfo(m, {.lid = 7}); });
    setThrough(sm, iba::kAttrLinearForwardingTable, 0, [](iba::Mad &m) {
        const uint8_t ports[] = {0, 1, 2}; // LID 1 to port 1, LID 2 to port 2
        iba::writeBytes(m, ports);
    });
    setThrough(sm, iba::kAttrMulticastForwardingTable, 0, [](iba::Mad &m) {
        const uint16_t masks[] = {0, 0b110}; // MLID 0xc001: ports 1 and 2
        iba::writeBlock16(m, masks);
    });
    setThrough(sm, iba::kAttrPkeyTable, 2 << 16, [](iba::Mad &m) {
        const uint16_t pkeys[] = {0xffff, 0x8001};
        iba::writeBlock16(m, pkeys);
    });
    setThrough(sm, iba::kAttrPortInfo, 1,
               [](iba::Mad &m) { iba::writePortInfo(m, {.portState = iba::kPortStateArmed}); });
    REQUIRE(portsSay(control, "port 1: ARMED, link up", 2000ms));
    seeds.push_back(savedState(control, dir.file("configured.state")));
    return seeds;
}

std::filesystem::path switchSeedDir() {
    const char *root = std::getenv("PIB_SOURCE_ROOT");
    INFO("PIB_SOURCE_ROOT names the source tree: " << (root ? root : "(unset)"));
    REQUIRE(root != nullptr);
    return std::filesystem::path(root) / "tests/fuzz/inputs/switch-state";
}

} // namespace

// As fuzz-state's (test_device_state.cc): each checked-in seed is a state
// this version writes; PIB_WRITE_STATE_SEEDS=1 writes them instead.
TEST_CASE("fuzz-switch-state's seeds are the states this version saves", "[switch-state]") {
    const auto dir = switchSeedDir();
    auto seeds = switchStateSeeds();
    if (const char *write = std::getenv("PIB_WRITE_STATE_SEEDS"); write && *write == '1') {
        std::filesystem::create_directories(dir);
        for (size_t n = 0; n < seeds.size(); ++n) {
            std::ofstream out(dir / ("seed-" + std::to_string(n + 1)), std::ios::binary);
            out.write(reinterpret_cast<const char *>(seeds[n].data()),
                      static_cast<std::streamsize>(seeds[n].size()));
        }
    }
    std::vector<std::vector<uint8_t>> checkedIn;
    for (const auto &entry : std::filesystem::directory_iterator(dir))
        if (entry.path().filename().string().starts_with("seed-"))
            checkedIn.push_back(readStateFile(entry.path().string()));
    std::sort(checkedIn.begin(), checkedIn.end());
    std::sort(seeds.begin(), seeds.end());
    INFO("write them again: PIB_WRITE_STATE_SEEDS=1 core-tests '[switch-state]'");
    CHECK(checkedIn == seeds);
}

namespace {

// Queries the switch's SMA from `cable` for `window` and reads none of the
// answers: they fill the switch's output toward the cable until it stops
// reading the cable's input, finds the output stalled (it took nothing
// for its head-of-queue lifetime) and goes on, discarding the answers.
void queryWithoutReading(const Fd &cable, milliseconds window) {
    const auto query = wire::encode(PIB_WIRE_PACKET, nodeInfoSmp());
    std::vector<uint8_t> pending;
    const auto end = steady_clock::now() + window;
    while (steady_clock::now() < end) {
        if (pending.size() < query.size())
            pending.insert(pending.end(), query.begin(), query.end());
        const ssize_t n =
            send(cable.get(), pending.data(), pending.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0)
            pending.erase(pending.begin(), pending.begin() + n);
        else
            std::this_thread::sleep_for(5ms); // the switch reads no more of it, for now
    }
}

} // namespace

// Found in CI: at RC timeout 30, a QEMU the host did not run for 268 ms had
// the switch discard an ACK to it, and its QP waited for a timer of 73
// minutes. A port the switch discarded packets to is told so when it
// drains again, if its HELLO said it takes PIB_WIRE_DISCARDED (the device
// then resends what it had in flight, docs/wire.md "Stalls").
TEST_CASE("a port that drains after the switch discarded packets to it is told so",
          "[switch-flow]") {
    TempDir dir;
    const std::string control = dir.file("control.sock"), port = dir.file("port1.sock");
    RunningSwitch sw({{}, {PortEndpoint::Kind::kUnixListen, port}}, control);
    const bool takes = GENERATE(true, false);
    CAPTURE(takes);
    Fd cable = deviceCable(port, takes ? PIB_WIRE_HELLO_TAKES_DISCARDS : 0);
    REQUIRE(portsSay(control, "port 1: INIT, link up", 2000ms));
    queryWithoutReading(cable, 1500ms);
    const auto queues = askControl(control, "queues", 2000ms);
    REQUIRE(queues);
    CHECK(queues->find("port 1: queued") != std::string::npos);
    CHECK(queues->find(", stalled") != std::string::npos);
    // The cable is read again: the answers that were kept, then the word.
    const auto told = frameOfType(cable, PIB_WIRE_DISCARDED, takes ? 3000ms : 1500ms);
    CHECK(told.has_value() == takes);
    if (told)
        CHECK(told->payload.empty());
    const auto after = askControl(control, "queues", 2000ms);
    REQUIRE(after);
    CHECK(after->find(", stalled") == std::string::npos);
    CHECK(answersOn(cable)); // and the port goes on as before
}

// ---- forwarding threads (ring_pumps.hh) ----------------------------------

namespace {

// A UD packet to `dlid` whose payload starts with its sequence number
// (little-endian) and goes on with `length` - 4 random bytes.
std::vector<uint8_t> numberedPacket(uint16_t dlid, uint16_t slid, uint32_t seq, size_t length,
                                    std::mt19937 &random) {
    std::vector<uint8_t> payload(length);
    for (uint8_t &b : payload)
        b = static_cast<uint8_t>(random());
    std::memcpy(payload.data(), &seq, sizeof(seq));
    return testing::udDataPacket(dlid, slid, std::move(payload));
}

// A device on a ring cable that streams numbered packets to another
// through the switch, and checks what comes back from it.
struct Streamer {
    Fd cable;
    OfferedRings rings;
    wire::RingWriter out{rings.memory->ctrl(0), rings.memory->data(0), kRingSize};
    wire::RingReader in{rings.memory->ctrl(1), rings.memory->data(1), kRingSize};
    std::vector<std::vector<uint8_t>> toSend; // in order
    size_t sent = 0;
    std::vector<std::vector<uint8_t>> received;

    explicit Streamer(Fd c) : cable(std::move(c)) {
        REQUIRE(offer(cable, rings.fds()) == PIB_WIRE_RINGS_ACCEPTED);
    }
    // Puts what fits in the ring and takes what came; true when it did any.
    bool turn() {
        bool moved = false;
        while (sent < toSend.size() && out.put(wire::encode(PIB_WIRE_PACKET, toSend[sent]))) {
            ++sent;
            moved = true;
        }
        if (out.publish() || moved)
            wire::ringDoorbell(rings.bell.get());
        wire::clearDoorbell(rings.bell.get());
        wire::RingReader::Error error;
        while (auto frame = in.next(&error)) {
            received.emplace_back(frame->payload.begin(), frame->payload.end());
            moved = true;
        }
        REQUIRE(error == wire::RingReader::Error::kNone);
        if (in.release())
            wire::ringDoorbell(rings.bell.get());
        return moved;
    }
};

} // namespace

// Two devices on ring cables, on ports that two forwarding threads read,
// stream to each other at once: each packet arrives whole, in the order it
// was sent, and one with a bad VCRC is dropped, as on the event loop
// alone.
TEST_CASE("forwarding threads pass each ring's packets whole and in order", "[switch-rings]") {
    const unsigned threads = GENERATE(0u, 1u, 2u);
    INFO(threads << " forwarding threads");
    TempDir dir;
    const std::string control = dir.file("control.sock");
    RunningSwitch sw({{},
                      {PortEndpoint::Kind::kUnixListen, dir.file("port1.sock")},
                      {PortEndpoint::Kind::kUnixListen, dir.file("port2.sock")}},
                     control, {}, 5'000'000'000, {}, threads);
    Fd first = deviceCable(dir.file("port1.sock"));
    Fd second = deviceCable(dir.file("port2.sock"), 0, kDeviceGuid + 0x100);
    REQUIRE(portsSay(control, "port 2: INIT, link up", 2000ms));
    // As the SM would: LID 1 behind port 1, LID 2 behind port 2, both ACTIVE.
    setThrough(first, iba::kAttrLinearForwardingTable, 0, [](iba::Mad &m) {
        const uint8_t ports[] = {0, 1, 2};
        iba::writeBytes(m, ports);
    });
    for (const uint8_t state : {iba::kPortStateArmed, iba::kPortStateActive})
        for (const uint32_t port : {1u, 2u})
            setThrough(first, iba::kAttrPortInfo, port,
                       [state](iba::Mad &m) { iba::writePortInfo(m, {.portState = state}); });
    REQUIRE(portsSay(control, "port 2: ACTIVE", 2000ms));

    Streamer a(std::move(first)), b(std::move(second));
    std::mt19937 random(threads);
    constexpr uint32_t kPackets = 3000;
    constexpr uint32_t kSpoiled = 1234; // its VCRC wrong: never arrives
    for (uint32_t seq = 0; seq < kPackets; ++seq) {
        const size_t length = 4 + random() % 2048;
        a.toSend.push_back(numberedPacket(2, 1, seq, length, random));
        b.toSend.push_back(numberedPacket(1, 2, seq, length, random));
    }
    a.toSend[kSpoiled].back() ^= 1;
    const auto deadline = steady_clock::now() + 20s;
    while ((a.received.size() < kPackets || b.received.size() < kPackets - 1) &&
           steady_clock::now() < deadline) {
        const bool aMoved = a.turn(); // both sides take their turn
        const bool bMoved = b.turn();
        if (!aMoved && !bMoved)
            std::this_thread::sleep_for(1ms);
    }
    REQUIRE(b.received.size() == kPackets - 1);
    REQUIRE(a.received.size() == kPackets);
    for (uint32_t seq = 0, at = 0; seq < kPackets; ++seq) {
        CHECK(a.received[seq] == b.toSend[seq]);
        if (seq == kSpoiled)
            continue;
        CHECK(b.received[at++] == a.toSend[seq]);
    }
    // Nothing more came: the spoiled packet was dropped, not late.
    std::this_thread::sleep_for(100ms);
    b.turn();
    CHECK(b.received.size() == kPackets - 1);
}
