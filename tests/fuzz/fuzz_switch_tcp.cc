// SPDX-License-Identifier: GPL-2.0-or-later
// libFuzzer harness of the switch's server around its links
// (fabric-switch/src/server*.cc): the event loop, turned one step at a
// time on real sockets, with a clock that only the input advances. Port 1
// dials a TCP peer on 127.0.0.1, port 2 dials a UNIX peer, port 3 takes a
// UNIX cable. The input makes each dialled peer refuse, drop SYNs (a full
// backlog) or listen; takes the switch's connections or cables port 3;
// sends raw bytes, frames cut in two, HELLOs and SMPs; hangs up; advances
// the clock past retries and time limits; flaps links and asks the
// control socket. On port 3 it offers ring cables (docs/wire.md), good and
// bad ones, then writes frames or anything at all into the shared memory,
// sets the indices to anything and rings the switch's doorbell; it may
// flood the switch with queries whose answers fill the switch's ring, and
// read them late or never. No byte leaves the machine: every peer is the
// harness's own, on loopback or a UNIX path.
//
// Invariants: a turn of the loop never waits (nothing blocks on a peer);
// a dialled peer that listens is connected once the longest back-off and
// the attempt time limit have passed; the control socket answers; and a
// server leaves no socket open behind it.
#include <fuzzer/FuzzedDataProvider.h>

#include <arpa/inet.h>
#include <chrono>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <dirent.h>
#include <fcntl.h>
#include <filesystem>
#include <memory>
#include <netinet/in.h>
#include <string>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>
#include <utility>
#include <vector>

#include "frame.hh"
#include "mad.hh"
#include "packet.hh"
#include "ring_cable.hh"
#include "server.hh"
#include "server_internal.hh"
#include "smp_packets.hh"
#include "switch.hh"

using namespace pib;
using namespace pib::fabric;

namespace {

constexpr unsigned kTcpDialPort = 1;
constexpr unsigned kUnixDialPort = 2;
constexpr unsigned kCabledPort = 3;
constexpr unsigned kPorts = 3;
constexpr DialPolicy kPolicy{}; // the switch's own: 1 s doubling to 30 s, 5 s per attempt

void check(bool ok, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "fuzz-switch-tcp: invariant broken: %s\n", what);
        std::abort();
    }
}

// The server's clock: it moves when the input says.
uint64_t fakeNowNs = 0;
uint64_t fakeClock() {
    return fakeNowNs;
}

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

unsigned openFds() {
    unsigned n = 0;
    DIR *dir = opendir("/proc/self/fd");
    while (readdir(dir))
        ++n;
    closedir(dir);
    return n;
}

// Where the harness's UNIX sockets live, for the whole run; removed when
// the process exits.
const std::string &socketDir() {
    static const std::string dir = [] {
        char name[] = "/tmp/pib-fuzz-switch-tcp-XXXXXX";
        check(mkdtemp(name) != nullptr, "mkdtemp");
        return std::string(name);
    }();
    // Registered once `dir` is made, so that it runs before `dir` is gone.
    static const bool removedAtExit =
        std::atexit([] { std::filesystem::remove_all(socketDir()); }) == 0;
    (void)removedAtExit;
    return dir;
}

enum class PeerMode { kRefusing, kDroppingSyns, kListening };

// The peer a dialling port reaches, in one of the modes. Each mode change
// makes a new listener at the same address; connections the old one had
// queued are lost with it, as with a peer that restarts.
class DialledPeer {
  public:
    explicit DialledPeer(bool tcp) : tcp_(tcp) {
        if (tcp_) {
            // The port stays ours for the whole input: bound, never
            // listening, by a socket of its own.
            reservation_ = Fd(socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0));
            const int one = 1;
            setsockopt(reservation_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
            sockaddr_in addr = loopback(0);
            check(bind(reservation_.get(), reinterpret_cast<sockaddr *>(&addr), sizeof(addr)) == 0,
                  "bind");
            socklen_t length = sizeof(addr);
            getsockname(reservation_.get(), reinterpret_cast<sockaddr *>(&addr), &length);
            port_ = ntohs(addr.sin_port);
        }
        setMode(PeerMode::kRefusing);
    }
    std::string address() const {
        return tcp_ ? "127.0.0.1:" + std::to_string(port_) : socketDir() + "/peer.sock";
    }
    PeerMode mode() const { return mode_; }

    void setMode(PeerMode mode) {
        mode_ = mode;
        filler_.reset();
        listener_.reset();
        if (!tcp_)
            unlink(address().c_str());
        if (mode == PeerMode::kRefusing)
            return; // nothing listens: refused (TCP), or no such socket (UNIX)
        listener_ =
            Fd(socket(tcp_ ? AF_INET : AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        const int one = 1;
        setsockopt(listener_.get(), SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (!bindTo(listener_.get()) ||
            listen(listener_.get(), mode == PeerMode::kDroppingSyns ? 0 : 128) < 0) {
            listener_.reset(); // the port was taken meanwhile: as good as refusing
            mode_ = PeerMode::kRefusing;
            return;
        }
        if (mode == PeerMode::kDroppingSyns) { // a queue of one, which this fills
            filler_ = Fd(socket(tcp_ ? AF_INET : AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0));
            if (!connectTo(filler_.get())) {
                // The loopback refused it (the switch's own dial took the
                // one place first, or no local port was free): nothing
                // will be accepted, as good as refusing.
                filler_.reset();
                listener_.reset();
                mode_ = PeerMode::kRefusing;
            }
        }
    }
    // A connection of the switch's from the listener's queue (the oldest).
    Fd accept() {
        if (!listener_ || mode_ == PeerMode::kDroppingSyns)
            return Fd();
        return Fd(accept4(listener_.get(), nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK));
    }

  private:
    static sockaddr_in loopback(uint16_t port) {
        sockaddr_in addr{};
        addr.sin_family = AF_INET;
        addr.sin_port = htons(port);
        addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        return addr;
    }
    bool bindTo(int fd) const {
        if (tcp_) {
            const sockaddr_in addr = loopback(port_);
            return bind(fd, reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) == 0;
        }
        const sockaddr_un addr = unixAddress(address());
        return bind(fd, reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) == 0;
    }
    bool connectTo(int fd) const {
        int rc;
        if (tcp_) {
            const sockaddr_in addr = loopback(port_);
            rc = connect(fd, reinterpret_cast<const sockaddr *>(&addr), sizeof(addr));
        } else {
            const sockaddr_un addr = unixAddress(address());
            rc = connect(fd, reinterpret_cast<const sockaddr *>(&addr), sizeof(addr));
        }
        return rc == 0;
    }

    bool tcp_;
    uint16_t port_ = 0;
    Fd reservation_, listener_, filler_;
    PeerMode mode_ = PeerMode::kRefusing;
};

// A Get(NodeInfo) the switch answers itself: it sends something back.
std::vector<uint8_t> nodeInfoQuery(uint64_t tid) {
    return testing::drPacket(testing::drSmpMad(iba::kGet, iba::kAttrNodeInfo, 0, {}, tid));
}

std::vector<uint8_t> hello(FuzzedDataProvider &in) {
    pib_wire_hello h{};
    h.node_guid = h.port_guid = in.ConsumeIntegral<uint64_t>();
    h.node_type = in.ConsumeBool() ? PIB_WIRE_NODE_SWITCH : PIB_WIRE_NODE_CA;
    h.port = in.ConsumeIntegral<uint8_t>();
    h.flags = in.ConsumeBool() ? PIB_WIRE_HELLO_TAKES_DISCARDS : 0; // then stalls are told
    return wire::encode(PIB_WIRE_HELLO,
                        std::span(reinterpret_cast<const uint8_t *>(&h), sizeof(h)));
}

// What a peer puts on its cable.
std::vector<uint8_t> streamBytes(FuzzedDataProvider &in) {
    switch (in.ConsumeIntegralInRange(0, 4)) {
    case 0:
        return hello(in);
    case 1:
        return wire::encode(PIB_WIRE_PACKET, nodeInfoQuery(in.ConsumeIntegral<uint64_t>()));
    case 2: { // a frame of any type and payload
        const uint8_t type = in.ConsumeIntegral<uint8_t>();
        return wire::encode(type, in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 300)));
    }
    default: // raw bytes, framed or not
        return in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 300));
    }
}

class Harness {
  public:
    explicit Harness(FuzzedDataProvider &in)
        : in_(in), tcpPeer_(true), unixPeer_(false),
          switch_(SwitchConfig{0x0250494253570001ull, kPorts, "fuzz switch"}),
          server_(switch_, endpoints()) {
        server_.setClock(fakeClock);
        server_.setControlSocket(socketDir() + "/control.sock");
        server_.open();
    }

    void step() {
        switch (in_.ConsumeIntegralInRange(0, 11)) {
        case 0: {
            DialledPeer &peer = dialledPeer();
            peer.setMode(static_cast<PeerMode>(in_.ConsumeIntegralInRange(0, 2)));
            break;
        }
        case 1:
            advanceClock();
            break;
        case 2:
            cable();
            break;
        case 3:
        case 4:
            send();
            break;
        case 5:
            drain(in_.ConsumeIntegralInRange<unsigned>(1, kPorts));
            break;
        case 6:
            hangUp();
            break;
        case 7:
            control(controlCommand());
            break;
        case 8:
            checkDialledPeersAreReached();
            break;
        case 9:
            rings();
            break;
        default:
            turn();
            break;
        }
    }

    // One turn of the loop, which must not wait on anything. A turn that
    // took a second and slept in the kernel (a voluntary context switch)
    // blocked; one that took as long runnable was starved of the CPU (the
    // fuzzer runs at idle priority beside guests in ./pib test): no fault.
    void turn() {
        const auto start = std::chrono::steady_clock::now();
        const long slept = voluntarySwitches();
        check(server_.runOnce(0), "the loop stopped");
        check(std::chrono::steady_clock::now() - start < std::chrono::seconds(1) ||
                  voluntarySwitches() == slept,
              "a turn of the loop took a second and slept: something in it blocks");
    }

  private:
    static long voluntarySwitches() {
        rusage usage{};
        getrusage(RUSAGE_THREAD, &usage);
        return usage.ru_nvcsw;
    }

    std::vector<PortEndpoint> endpoints() const {
        std::vector<PortEndpoint> e(kPorts + 1);
        e[kTcpDialPort] = {PortEndpoint::Kind::kTcpConnect, tcpPeer_.address()};
        e[kUnixDialPort] = {PortEndpoint::Kind::kUnixConnect, unixPeer_.address()};
        e[kCabledPort] = {PortEndpoint::Kind::kUnixListen, socketDir() + "/port3.sock"};
        return e;
    }
    DialledPeer &dialledPeer() { return in_.ConsumeBool() ? tcpPeer_ : unixPeer_; }

    void advanceClock() {
        static constexpr uint64_t kSteps[] = {1'000'000,      100'000'000,   999'999'999,
                                              1'000'000'000,  5'000'000'000, 5'000'000'001,
                                              30'000'000'000, 60'000'000'000};
        fakeNowNs += in_.ConsumeBool() ? in_.PickValueInArray(kSteps)
                                       : in_.ConsumeIntegralInRange<uint64_t>(0, 40'000'000'000);
    }

    // The peer's end of a port's cable: a connection the dialled peer
    // accepts, or a new one to port 3.
    void cable() {
        const unsigned port = in_.ConsumeIntegralInRange<unsigned>(1, kPorts);
        if (port == kTcpDialPort)
            cables_[port] = tcpPeer_.accept();
        else if (port == kUnixDialPort)
            cables_[port] = unixPeer_.accept();
        else {
            Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
            const sockaddr_un addr = unixAddress(socketDir() + "/port3.sock");
            if (connect(fd.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) == 0)
                cables_[port] = std::move(fd);
        }
    }

    // Bytes on a cable; sometimes a frame cut in two with a turn of the
    // loop between its halves.
    void send() {
        const Fd &fd = cables_[in_.ConsumeIntegralInRange<unsigned>(1, kPorts)];
        const std::vector<uint8_t> bytes = streamBytes(in_);
        if (!fd || bytes.empty())
            return;
        const size_t cut = in_.ConsumeIntegralInRange<size_t>(0, bytes.size());
        ::send(fd.get(), bytes.data(), cut, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (cut < bytes.size()) {
            turn();
            ::send(fd.get(), bytes.data() + cut, bytes.size() - cut, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
    }

    // Reads what the switch sent on the port's cable.
    void drain(unsigned port) {
        const Fd &fd = cables_[port];
        uint8_t buf[65536];
        for (int i = 0; fd && i < 64; ++i)
            if (recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT) <= 0)
                break;
    }

    // The peer hangs up, with a FIN or (SO_LINGER 0) a reset.
    void hangUp() {
        Fd &fd = cables_[in_.ConsumeIntegralInRange<unsigned>(1, kPorts)];
        if (fd && in_.ConsumeBool()) {
            const linger reset{1, 0};
            setsockopt(fd.get(), SOL_SOCKET, SO_LINGER, &reset, sizeof(reset));
        }
        fd.reset();
    }

    std::string controlCommand() {
        const std::string port = std::to_string(in_.ConsumeIntegralInRange<unsigned>(1, kPorts));
        switch (in_.ConsumeIntegralInRange(0, 4)) {
        case 0:
            return "fault " + port + " flap=" + std::to_string(in_.ConsumeIntegralInRange(1, 10)) +
                   "s/" + std::to_string(in_.ConsumeIntegralInRange(10, 60)) + "s";
        case 1:
            return "clear " + port;
        case 2:
            return "status";
        case 3: // what waits for each port, in its queue and ring
            return "queues";
        default:
            return "ports";
        }
    }

    // The control socket's answer, within a few turns of the loop.
    std::string control(const std::string &command) {
        Fd fd(socket(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
        const sockaddr_un addr = unixAddress(socketDir() + "/control.sock");
        check(connect(fd.get(), reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) == 0,
              "the control socket takes a client");
        const std::string line = command + "\n";
        check(::send(fd.get(), line.data(), line.size(), MSG_NOSIGNAL) ==
                  static_cast<ssize_t>(line.size()),
              "the control socket takes a command");
        std::string answer;
        for (int turns = 0; turns < 8; ++turns) {
            turn();
            char buf[4096];
            ssize_t n;
            while ((n = recv(fd.get(), buf, sizeof(buf), MSG_DONTWAIT)) > 0)
                answer.append(buf, static_cast<size_t>(n));
            if (n == 0)
                return answer;
        }
        check(false, "the control socket did not answer");
        return answer;
    }

    // Once the longest back-off and an attempt's time limit have passed, a
    // dialled peer that listens has been reached: the port has its
    // connection, unless a flap holds it down.
    void checkDialledPeersAreReached() {
        for (int i = 0; i < 3; ++i) // what the peers did (a hang-up, garbage) is seen to
            turn();
        fakeNowNs += kPolicy.attemptTimeoutNs + 1; // a hanging attempt is abandoned...
        turn();
        fakeNowNs += kPolicy.maxRetryNs + 1; // ...and the next one is due
        for (int i = 0; i < 3; ++i)
            turn();
        const std::string ports = control("ports");
        for (const unsigned port : {kTcpDialPort, kUnixDialPort}) {
            const DialledPeer &peer = port == kTcpDialPort ? tcpPeer_ : unixPeer_;
            const size_t at = ports.find("port " + std::to_string(port) + ": ");
            check(at != std::string::npos, "\"ports\" names every port");
            const std::string line = ports.substr(at, ports.find('\n', at) - at);
            if (peer.mode() == PeerMode::kListening &&
                line.find("flapped down") == std::string::npos &&
                line.find("dialing") != std::string::npos) {
                std::fprintf(stderr, "fuzz-switch-tcp: %s\n", line.c_str());
                check(false, "a dialled peer that listens was not reached");
            }
        }
    }

    // The peer's end of a ring cable on port 3.
    struct PeerRings {
        std::unique_ptr<wire::RingMemory> memory;
        // Its end of the doorbell line, and (a copy of) the switch's: a
        // hostile peer keeps it, to change the switch's view of it.
        Fd bell, switchEnd;
        std::unique_ptr<wire::RingWriter> writer; // ring 0
        std::unique_ptr<wire::RingReader> reader; // ring 1
    };
    std::unique_ptr<PeerRings> rings_;

    void rings() {
        switch (in_.ConsumeIntegralInRange(0, 6)) {
        case 6: // a doorbell line that would block the switch, if it let it
            return hostileLine();
        case 0:
            return offerRings();
        case 1: // frames as a peer writes them
            return writeFrames();
        case 5: // as many as its ring takes: the answers fill the switch's ring
            return floodFrames();
        case 2: // anything, anywhere in the shared memory
            return scribble();
        case 3: // the switch's frames, taken as a peer takes them
            return takeFrames();
        default:
            if (rings_)
                ring(rings_->bell.get());
        }
    }

    // What a peer can do to the doorbell line (docs/wire.md): make the
    // switch's end blocking (the flag is the description's, which the
    // peer shares), fill the switch's end with rings, leave its own end
    // unread so that the switch's rings find it full, or hang up. The
    // switch must go on serving: a call that blocked would hang the
    // fuzzer here, as one that spun would eat its time.
    void hostileLine() {
        if (!rings_)
            return;
        switch (in_.ConsumeIntegralInRange(0, 3)) {
        case 0:
            fcntl(rings_->switchEnd.get(), F_SETFL,
                  fcntl(rings_->switchEnd.get(), F_GETFL) & ~O_NONBLOCK);
            break;
        case 1: {
            const uint8_t flood[4096] = {};
            for (int i = 0; i < 64; ++i)
                if (::send(rings_->bell.get(), flood, sizeof(flood), MSG_DONTWAIT) <= 0)
                    break;
            break;
        }
        case 2: // its own end full: the switch's rings find no room
            fcntl(rings_->bell.get(), F_SETFL, fcntl(rings_->bell.get(), F_GETFL) & ~O_NONBLOCK);
            for (int i = 0; i < 4096; ++i)
                if (::send(rings_->switchEnd.get(), "x", 1, MSG_DONTWAIT) <= 0)
                    break;
            break;
        default:
            rings_->bell = Fd();
            rings_->switchEnd = Fd();
            return;
        }
        turn();
    }

    static void ring(int fd) {
        if (fd >= 0)
            wire::ringDoorbell(fd);
    }

    // An offer on port 3's cable: right (always when `good`), or wrong in
    // one of the ways a peer can get it wrong.
    void offerRings(bool good = false) {
        const Fd &cable = cables_[kCabledPort];
        if (!cable)
            return;
        std::string why;
        auto peer = std::make_unique<PeerRings>();
        peer->memory = wire::RingMemory::create(PIB_WIRE_RING_MIN_SIZE, &why);
        int ours = -1, theirs = -1;
        check(peer->memory != nullptr && wire::makeDoorbellLine(&ours, &theirs, &why),
              "a ring cable's memory and doorbell line");
        peer->bell = Fd(ours);
        peer->switchEnd = Fd(theirs);
        peer->writer = std::make_unique<wire::RingWriter>(
            peer->memory->ctrl(0), peer->memory->data(0), PIB_WIRE_RING_MIN_SIZE);
        peer->reader = std::make_unique<wire::RingReader>(
            peer->memory->ctrl(1), peer->memory->data(1), PIB_WIRE_RING_MIN_SIZE);
        pib_wire_rings offer{PIB_WIRE_RING_MIN_SIZE, 0};
        std::vector<int> fds = {peer->memory->fd(), peer->switchEnd.get()};
        Fd other; // a descriptor that is not what the offer says
        switch (good ? -1 : in_.ConsumeIntegralInRange(0, 6)) {
        case 0:
            offer.ring_size = in_.ConsumeIntegral<uint32_t>();
            break;
        case 1:
            offer.flags = in_.ConsumeIntegral<uint32_t>();
            break;
        case 2:
            fds.pop_back();
            break;
        case 3: // a memfd that is not sealed, in place of the rings
            other = Fd(memfd_create("unsealed", MFD_CLOEXEC));
            check(ftruncate(other.get(), 1 << 20) == 0, "ftruncate");
            fds[0] = other.get();
            break;
        case 4: // a file in place of the doorbell line
            other = Fd(memfd_create("not-a-doorbell", MFD_CLOEXEC));
            fds[1] = other.get();
            break;
        case 5: // an eventfd, whose blocking the peer would control
            other = Fd(eventfd(0, EFD_CLOEXEC));
            fds[1] = other.get();
            break;
        default:
            break;
        }
        const auto frame = wire::encode(
            PIB_WIRE_RINGS, std::span(reinterpret_cast<const uint8_t *>(&offer), sizeof(offer)));
        wire::sendWithFds(cable.get(), frame, fds);
        rings_ = std::move(peer);
    }

    void writeFrames() {
        if (!rings_)
            return;
        for (int i = in_.ConsumeIntegralInRange(1, 20); i > 0; --i)
            rings_->writer->put(
                wire::encode(PIB_WIRE_PACKET, nodeInfoQuery(in_.ConsumeIntegral<uint64_t>())));
        if (rings_->writer->publish() || in_.ConsumeBool())
            ring(rings_->bell.get());
    }

    // NodeInfo queries until the peer's ring is full, a few times over,
    // the switch taking them between. Their answers fill the ring the
    // switch writes, which the peer reads only when the input says so:
    // the switch queues the rest and asks for room.
    void floodFrames() {
        const Fd &cable = cables_[kCabledPort];
        if (!cable)
            return;
        if (!rings_) { // a peer that does it right: HELLO, then a good offer
            const std::vector<uint8_t> greeting = hello(in_);
            ::send(cable.get(), greeting.data(), greeting.size(), MSG_NOSIGNAL | MSG_DONTWAIT);
            offerRings(true);
            turn();
        }
        for (int round = 0; round < 4 && rings_; ++round) {
            for (int i = 0; i < 1024; ++i)
                if (!rings_->writer->put(wire::encode(PIB_WIRE_PACKET, nodeInfoQuery(i))))
                    break;
            rings_->writer->publish();
            ring(rings_->bell.get());
            turn();
        }
    }

    void scribble() {
        if (!rings_)
            return;
        const size_t bytes = PIB_WIRE_RING_DATA + 2 * size_t{PIB_WIRE_RING_MIN_SIZE};
        auto *base = reinterpret_cast<uint8_t *>(rings_->memory->ctrl(0)) -
                     offsetof(pib_wire_ring_layout, ring);
        const std::vector<uint8_t> junk =
            in_.ConsumeBytes<uint8_t>(in_.ConsumeIntegralInRange(1, 64));
        if (junk.empty()) // the input ran out
            return;
        // Half the time the indices and doorbell requests, which a few
        // bytes anywhere in 132 KiB would hardly ever hit.
        const size_t last = in_.ConsumeBool() ? sizeof(pib_wire_ring_layout) : bytes;
        const size_t at = in_.ConsumeIntegralInRange<size_t>(0, last - junk.size());
        std::memcpy(base + at, junk.data(), junk.size());
        ring(rings_->bell.get());
    }

    void takeFrames() {
        if (!rings_)
            return;
        wire::RingReader::Error error;
        for (int i = 0; i < 64 && rings_->reader->next(&error); ++i) {
        }
        if (rings_->reader->release() || in_.ConsumeBool())
            ring(rings_->bell.get());
    }

    FuzzedDataProvider &in_;
    DialledPeer tcpPeer_, unixPeer_;
    Switch switch_;
    Server server_;
    Fd cables_[kPorts + 1];
};

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    // PIB_FUZZ_LOG=1 shows the switch's log, to replay a finding.
    static const bool logged = std::getenv("PIB_FUZZ_LOG") != nullptr;
    setLogging(logged);
    const unsigned fdsBefore = openFds();
    {
        FuzzedDataProvider in(data, size);
        fakeNowNs = 1'000'000'000'000;
        Harness harness(in);
        for (int steps = 0; steps < 200 && in.remaining_bytes(); ++steps)
            harness.step();
        harness.turn();
    }
    check(openFds() == fdsBefore, "the server left a socket open");
    return 0;
}
