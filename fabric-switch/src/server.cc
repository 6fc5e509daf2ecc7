// SPDX-License-Identifier: GPL-2.0-or-later
#include "server.hh"
#include "server_internal.hh"

#include <algorithm>
#include <arpa/inet.h>
#include <atomic>
#include <cerrno>
#include <cstdarg>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdexcept>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

namespace pib::fabric {

using namespace pib::iba;

uint64_t monotonicNs() {
    timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return static_cast<uint64_t>(ts.tv_sec) * 1'000'000'000 + static_cast<uint64_t>(ts.tv_nsec);
}

namespace {

std::atomic<bool> logging{true};

} // namespace

void setLogging(bool on) {
    logging = on;
}

void logLine(const char *text) {
    if (!logging)
        return;
    // Seconds since the switch started: a log read after a failed run
    // shows how long the SM took to answer a link that came back.
    static const uint64_t start = monotonicNs();
    const uint64_t ms = (monotonicNs() - start) / 1'000'000;
    std::fprintf(stderr, "pib-fabric-switch: [%5llu.%03llu] %s\n",
                 static_cast<unsigned long long>(ms / 1000),
                 static_cast<unsigned long long>(ms % 1000), text);
}

void log(const char *fmt, ...) {
    char text[512];
    va_list args;
    va_start(args, fmt);
    std::vsnprintf(text, sizeof(text), fmt, args);
    va_end(args);
    logLine(text);
}

namespace {

void setNonBlocking(int fd) {
    fcntl(fd, F_SETFL, fcntl(fd, F_GETFL) | O_NONBLOCK);
}

int tcpListener(const std::string &address) {
    const auto [host, port] = splitHostPort(address);
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    addrinfo *res = nullptr;
    if (getaddrinfo(host.empty() ? nullptr : host.c_str(), port.c_str(), &hints, &res) != 0)
        throw std::runtime_error("cannot resolve " + address);
    int fd = -1;
    for (addrinfo *ai = res; ai && fd < 0; ai = ai->ai_next) {
        fd = socket(ai->ai_family, ai->ai_socktype | SOCK_CLOEXEC, ai->ai_protocol);
        if (fd < 0)
            continue;
        const int one = 1;
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
        if (bind(fd, ai->ai_addr, ai->ai_addrlen) < 0 || ::listen(fd, 4) < 0) {
            close(fd);
            fd = -1;
        }
    }
    freeaddrinfo(res);
    if (fd < 0)
        throw std::runtime_error("cannot listen on " + address);
    // Packets leave at once, not when Nagle's algorithm lets them; the
    // connections accepted inherit the option.
    const int one = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    setNonBlocking(fd);
    return fd;
}

} // namespace

std::pair<std::string, std::string> splitHostPort(const std::string &address) {
    const auto colon = address.rfind(':');
    if (colon == std::string::npos)
        throw std::runtime_error("expected HOST:PORT, got " + address);
    return {address.substr(0, colon), address.substr(colon + 1)};
}

sockaddr_un unixAddress(const std::string &path) {
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    if (path.size() >= sizeof(addr.sun_path))
        throw std::runtime_error("socket path too long: " + path);
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    return addr;
}

int unixListener(const std::string &path) {
    const sockaddr_un addr = unixAddress(path);
    const int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0)
        throw std::runtime_error("socket: " + std::string(strerror(errno)));
    unlink(path.c_str());
    if (bind(fd, reinterpret_cast<const sockaddr *>(&addr), sizeof(addr)) < 0 ||
        ::listen(fd, 4) < 0) {
        const std::string err = strerror(errno);
        close(fd);
        throw std::runtime_error("cannot listen on " + path + ": " + err);
    }
    return fd;
}

Server::Server(Switch &sw, std::vector<PortEndpoint> endpoints)
    : Server(std::make_unique<SwitchElement>(sw), std::move(endpoints)) {}

Server::Server(std::unique_ptr<Element> element, std::vector<PortEndpoint> endpoints)
    : element_(std::move(element)), sw_(*element_), clock_(monotonicNs),
      endpoints_(std::move(endpoints)), dials_(endpoints_.size()),
      listeners_(endpoints_.size(), -1), conns_(endpoints_.size()), faults_(endpoints_.size()),
      moves_(endpoints_.size()), captures_(endpoints_.size()) {}

Server::~Server() {
    pumps_.reset(); // the threads first: they read rings the connections hold
    for (auto &c : conns_)
        if (c && c->fd >= 0)
            close(c->fd);
    for (const Dial &d : dials_)
        if (d.fd >= 0)
            close(d.fd);
    for (int fd : listeners_)
        if (fd >= 0)
            close(fd);
    for (auto &c : controlClients_)
        close(c->fd);
    if (control_ >= 0) {
        close(control_);
        unlink(controlPath_.c_str());
    }
    if (epoll_ >= 0)
        close(epoll_);
    if (wake_ >= 0)
        close(wake_);
}

void watchTag(int epoll, int fd, uint64_t tag, bool writable) {
    epoll_event ev{};
    ev.events = EPOLLIN | (writable ? EPOLLOUT : 0u);
    ev.data.u64 = tag;
    if (epoll_ctl(epoll, EPOLL_CTL_MOD, fd, &ev) < 0)
        epoll_ctl(epoll, EPOLL_CTL_ADD, fd, &ev);
}

void Server::watch(int fd, unsigned port, bool listener, bool writable) {
    watchTag(epoll_, fd, port | (listener ? kListenerTag : 0), writable);
}

void Server::open() {
    epoll_ = epoll_create1(EPOLL_CLOEXEC);
    wake_ = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (epoll_ < 0 || wake_ < 0)
        throw std::runtime_error("epoll/eventfd failed");
    epoll_event ev{};
    ev.events = EPOLLIN;
    ev.data.u64 = kWakeTag;
    epoll_ctl(epoll_, EPOLL_CTL_ADD, wake_, &ev);
    resolutions_ = std::make_shared<Resolutions>();
    resolutions_->wake = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (resolutions_->wake < 0)
        throw std::runtime_error("eventfd failed");
    watchTag(epoll_, resolutions_->wake, kResolvedTag, false);
    for (unsigned port = 1; port < endpoints_.size(); ++port) {
        const PortEndpoint &e = endpoints_[port];
        if (e.kind == PortEndpoint::Kind::kUnixListen)
            listeners_[port] = unixListener(e.address);
        else if (e.kind == PortEndpoint::Kind::kTcpListen)
            listeners_[port] = tcpListener(e.address);
        else if (e.kind == PortEndpoint::Kind::kUnixConnect)
            unixAddress(e.address); // a path too long is an error now, not at each attempt
        else
            splitHostPort(e.address); // as is an address without a port
        if (listeners_[port] >= 0)
            watch(listeners_[port], port, true, false);
        if (dials(port))
            dials_[port].backoff = RetryBackoff(dialPolicy_.firstRetryNs, dialPolicy_.maxRetryNs);
    }
    if (forwardingThreads_) {
        pumps_ = std::make_unique<RingPumps>(forwardingThreads_,
                                             static_cast<unsigned>(endpoints_.size()));
        watchTag(epoll_, pumps_->readyFd(), kPumpsTag, false);
    }
    if (!controlPath_.empty()) {
        control_ = unixListener(controlPath_);
        watchTag(epoll_, control_, kControlTag, false);
    }
}

void Server::stop() {
    const uint64_t one = 1;
    if (write(wake_, &one, sizeof(one)) < 0) {
        // Nothing to do: the loop is already waking up or gone.
    }
}

void Server::sendHello(unsigned port) {
    pib_wire_hello hello{};
    hello.node_guid = sw_.nodeGuid(port);
    hello.port_guid = sw_.nodeGuid(port); // a switch's port GUID is its node GUID
    hello.node_type = PIB_WIRE_NODE_SWITCH;
    hello.port = static_cast<uint8_t>(sw_.portNumber(port));
    hello.flags = takesRings(port) ? PIB_WIRE_HELLO_TAKES_RINGS : 0;
    if (moves_[port].pending) // it keeps a moved device's link: that device may resume it
        hello.flags |= PIB_WIRE_HELLO_RESUMES;
    sendFrame(port, PIB_WIRE_HELLO,
              std::span(reinterpret_cast<const uint8_t *>(&hello), sizeof(hello)));
}

void Server::accept(unsigned port) {
    const int fd = ::accept4(listeners_[port], nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    if (faults_[port].down) { // flapped down: as if no cable were there
        close(fd);
        return;
    }
    if (conns_[port] && conns_[port]->moved) {
        log("port %u: a new connection replaces the one whose device moves", port);
        detach(port);
    }
    if (conns_[port]) { // one cable per port
        log("port %u: refusing a second connection", port);
        close(fd);
        return;
    }
    conns_[port] = std::make_unique<Connection>();
    conns_[port]->fd = fd;
    watch(fd, port, false, false);
    log("port %u: connected", port);
    sendHello(port);
}

void Server::drop(unsigned port, const char *why) {
    Connection *c = conns_[port].get();
    if (!c)
        return;
    if (moves_[port].pending) { // the link waits for the device that moves
        log("port %u: connection closed (%s); the link waits for the device that moves", port, why);
        detach(port);
        return;
    }
    log("port %u: link down (%s)", port, why);
    const bool linkWasUp = c->helloReceived;
    detach(port);
    if (dials(port))
        retryAfterDrop(port, linkWasUp);
    for (auto &t : sw_.linkChanged(port, false))
        sendPacket(t.port, t.packet);
}

// The SM set the port DOWN: its cable closes and the link trains again
// when the peer connects. A link kept up for a device that moves, or for
// the peer of a restored switch, goes down too: the peer comes back to a
// new link, as it would have without the move.
void Server::resetLink(unsigned port) {
    if (!moves_[port].pending) {
        drop(port, "the SM set the port DOWN; the link trains again");
        return;
    }
    if (conns_[port])
        detach(port);
    endMove(port, "had its port set DOWN by the SM; the link trains again");
}

// Closes the port's connection; its link stays as it is.
void Server::detach(unsigned port) {
    Connection *c = conns_[port].get();
    epoll_ctl(epoll_, EPOLL_CTL_DEL, c->fd, nullptr);
    close(c->fd);
    closeRings(port);
    conns_[port].reset();
    outputGone(port);
}

void Server::run() {
    while (runOnce(1000)) {
    }
}

bool Server::runOnce(int maxWaitMs) {
    epoll_event events[32];
    const int n = epoll_wait(epoll_, events, 32, std::min(maxWaitMs, waitMs_));
    if (n < 0 && errno != EINTR)
        throw std::runtime_error("epoll_wait: " + std::string(strerror(errno)));
    for (int i = 0; i < n; ++i) {
        if (events[i].data.u64 == kWakeTag) {
            logFaultCounters(true);
            return false;
        }
        dispatch(events[i].data.u64, events[i].events);
    }
    resumeInputs();
    serviceBusyRings();
    // Cables the SM took down, closed here rather than inside the
    // packet handling that carried the SM's Set.
    for (const unsigned port : sw_.takeLinkResets())
        resetLink(port);
    for (auto &t : sw_.repeatTraps())
        sendPacket(t.port, t.packet);
    waitMs_ = std::min({serviceFaults(), serviceFlowControl(), serviceDials(), serviceMoves()});
    flushOutputs();
    // Rings with more to do than a turn takes, found by the services or by
    // the flush (an output the peer keeps making room in), go on at once.
    if (!ringsBusy_.empty())
        waitMs_ = 0;
    return true;
}

// An event of the socket that `tag` names (see server_internal.hh).
void Server::dispatch(uint64_t tag, uint32_t events) {
    const auto low = static_cast<unsigned>(tag & 0xffffffff); // a port, or a control client's fd
    if (tag == kControlTag)
        acceptControl();
    else if (tag & kControlClientTag)
        onControl(static_cast<int>(low), events);
    else if (tag == kResolvedTag)
        onResolved();
    else if (tag == kPumpsTag)
        onPumpsReady();
    else if (tag & kRingTag)
        onRingDoorbell(low);
    else if (tag & kDialTag)
        onDialReady(low);
    else if (tag & kListenerTag)
        accept(low);
    else {
        if (events & (EPOLLIN | EPOLLHUP | EPOLLERR))
            onReadable(low, events);
        if (events & EPOLLOUT)
            onWritable(low);
    }
}

} // namespace pib::fabric
