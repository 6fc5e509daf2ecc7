// SPDX-License-Identifier: GPL-2.0-or-later
// Outgoing links (--connect, --connect-tcp): the switch dials another
// switch's port, and dials again whenever the link goes away. The event
// loop that dials serves every other port too, so nothing here waits for
// the peer: a host that drops SYNs would otherwise hold the whole switch
// for the kernel's SYN retries, minutes, at every attempt.
//
// - A numeric address is used as it is. A host name is resolved on a
//   thread of its own for each attempt, which leaves the answer in
//   Resolutions and wakes the loop. Not getaddrinfo_a: a request of it
//   that runs cannot be cancelled, so the server could not go away before
//   a slow name server answered; a detached thread shares the mailbox
//   instead and may outlive the server. Not once at startup: the switch
//   would fail to start on a name server that is not up yet, and never
//   see a peer's address change.
// - The socket connects without blocking; the loop hears of the outcome
//   by EPOLLOUT and reads it from SO_ERROR.
// - An attempt (the name, then each of its addresses) not connected
//   after DialPolicy::attemptTimeoutNs is abandoned. Attempts are spaced
//   by a back-off (1 s doubling to 30 s), which starts again once a link
//   came up. An abandoned resolver thread ends when getaddrinfo gives up
//   (the resolver's own timeouts, some seconds); an abandoned attempt is
//   followed by the next one no sooner than 6 s later (the 5 s limit, then
//   at least 1 s of back-off): a few such threads per port at most.
#include <cerrno>
#include <cstring>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/epoll.h>
#include <system_error>
#include <thread>

#include "server.hh"
#include "server_internal.hh"

namespace pib::fabric {

namespace {

Lookup lookUp(const std::string &host, const std::string &service, int flags) {
    addrinfo hints{};
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = flags;
    addrinfo *res = nullptr;
    Lookup found;
    found.status =
        getaddrinfo(host.empty() ? nullptr : host.c_str(), service.c_str(), &hints, &res);
    if (found.status != 0) {
        found.error = gai_strerror(found.status);
        return found;
    }
    for (const addrinfo *ai = res; ai; ai = ai->ai_next) {
        DialAddress a;
        std::memcpy(&a.storage, ai->ai_addr, ai->ai_addrlen);
        a.length = ai->ai_addrlen;
        found.addresses.push_back(a);
    }
    freeaddrinfo(res);
    return found;
}

DialAddress dialAddress(const sockaddr_un &addr) {
    DialAddress a;
    std::memcpy(&a.storage, &addr, sizeof(addr));
    a.length = sizeof(addr);
    return a;
}

std::string milliseconds(uint64_t ns) {
    return std::to_string(ns / 1'000'000) + " ms";
}

} // namespace

bool Server::dials(unsigned port) const {
    const auto kind = endpoints_[port].kind;
    return kind == PortEndpoint::Kind::kUnixConnect || kind == PortEndpoint::Kind::kTcpConnect;
}

// Starts an attempt now, unless one is under way or the link is there.
void Server::connectOut(unsigned port) {
    Dial &d = dials_[port];
    if (conns_[port] || faults_[port].down || d.stage != Dial::Stage::kWaiting)
        return;
    ++d.attempt;
    d.giveUpNs = now() + dialPolicy_.attemptTimeoutNs;
    d.addresses.clear();
    d.nextAddress = 0;
    const PortEndpoint &e = endpoints_[port];
    if (e.kind == PortEndpoint::Kind::kUnixConnect) {
        d.addresses.push_back(dialAddress(unixAddress(e.address)));
        connectNext(port, "no address");
        return;
    }
    const auto [host, service] = splitHostPort(e.address);
    // Numeric addresses are parsed here and now: no name service is asked.
    Lookup numeric = lookUp(host, service, AI_NUMERICHOST | AI_NUMERICSERV);
    if (numeric.status == EAI_NONAME)
        startResolving(port, host, service);
    else if (numeric.status != 0)
        dialFailed(port, "cannot resolve " + e.address + ": " + numeric.error);
    else {
        d.addresses = std::move(numeric.addresses);
        connectNext(port, "no address");
    }
}

void Server::startResolving(unsigned port, const std::string &host, const std::string &service) {
    Dial &d = dials_[port];
    d.stage = Dial::Stage::kResolving;
    try {
        std::thread([mailbox = resolutions_, port, attempt = d.attempt, host, service] {
            Lookup found = lookUp(host, service, 0);
            {
                const std::lock_guard lock(mailbox->mutex);
                mailbox->answers.push_back({port, attempt, std::move(found)});
            }
            const uint64_t one = 1;
            if (write(mailbox->wake, &one, sizeof(one)) < 0) {
                // Cannot happen short of 2^64 answers: the loop reads the count.
            }
        }).detach();
    } catch (const std::system_error &e) {
        dialFailed(port, std::string("cannot start a thread to resolve the name: ") + e.what());
    }
}

// Resolver threads answered: each attempt still waiting for its answer
// goes on to connect.
void Server::onResolved() {
    uint64_t count;
    if (read(resolutions_->wake, &count, sizeof(count)) < 0) {
        // EAGAIN: the answers were taken at the previous wake-up already.
    }
    std::vector<Resolutions::Answer> answers;
    {
        const std::lock_guard lock(resolutions_->mutex);
        answers.swap(resolutions_->answers);
    }
    for (Resolutions::Answer &a : answers) {
        Dial &d = dials_[a.port];
        if (d.stage != Dial::Stage::kResolving || d.attempt != a.attempt)
            continue; // the attempt was abandoned meanwhile
        if (a.found.addresses.empty()) {
            dialFailed(a.port,
                       "cannot resolve " + endpoints_[a.port].address + ": " + a.found.error);
            continue;
        }
        d.addresses = std::move(a.found.addresses);
        connectNext(a.port, "no address");
    }
}

// Connects to the attempt's addresses in turn until one connects or is
// connecting; when none is left the attempt failed, the last one for
// `error`.
void Server::connectNext(unsigned port, std::string error) {
    Dial &d = dials_[port];
    while (d.nextAddress < d.addresses.size()) {
        const DialAddress &a = d.addresses[d.nextAddress++];
        const int fd = socket(a.storage.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
        if (fd < 0) {
            error = strerror(errno);
            continue;
        }
        if (::connect(fd, reinterpret_cast<const sockaddr *>(&a.storage), a.length) == 0) {
            dialed(port, fd);
            return;
        }
        if (errno == EINPROGRESS) {
            d.stage = Dial::Stage::kConnecting;
            d.fd = fd;
            epoll_event ev{};
            ev.events = EPOLLOUT; // the connect's outcome; errors come anyway
            ev.data.u64 = kDialTag | port;
            epoll_ctl(epoll_, EPOLL_CTL_ADD, fd, &ev);
            return;
        }
        // A UNIX peer whose backlog is full says EAGAIN: it is busy, as a
        // host that refuses is absent. Both are a failed attempt.
        error = strerror(errno);
        close(fd);
    }
    dialFailed(port, error);
}

// The socket connecting has an outcome: connected, or SO_ERROR says why
// not.
void Server::onDialReady(unsigned port) {
    Dial &d = dials_[port];
    if (d.stage != Dial::Stage::kConnecting)
        return; // the attempt was abandoned earlier in this turn of the loop
    int error = 0;
    socklen_t length = sizeof(error);
    if (getsockopt(d.fd, SOL_SOCKET, SO_ERROR, &error, &length) < 0)
        error = errno;
    if (error != 0) {
        closeDialSocket(port);
        connectNext(port, strerror(error));
        return;
    }
    sockaddr_storage peer;
    length = sizeof(peer);
    if (getpeername(d.fd, reinterpret_cast<sockaddr *>(&peer), &length) < 0)
        return; // no error but not connected either: the outcome is still to come
    const int fd = d.fd;
    d.fd = -1;
    dialed(port, fd);
}

// The link's socket is connected: it becomes the port's connection.
void Server::dialed(unsigned port, int fd) {
    Dial &d = dials_[port];
    d.stage = Dial::Stage::kWaiting;
    d.addresses.clear();
    d.failures = 0;
    if (endpoints_[port].kind == PortEndpoint::Kind::kTcpConnect) {
        const int one = 1; // packets leave at once, not when Nagle's algorithm lets them
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    }
    conns_[port] = std::make_unique<Connection>();
    conns_[port]->fd = fd;
    watch(fd, port, false, false); // from the dial's tag to the connection's
    log("port %u: connected to %s", port, endpoints_[port].address.c_str());
    sendHello(port);
}

// The attempt failed: the next one waits for the back-off.
void Server::dialFailed(unsigned port, const std::string &why) {
    Dial &d = dials_[port];
    closeDialSocket(port);
    const uint64_t delay = d.backoff.next();
    d.stage = Dial::Stage::kWaiting;
    d.nextAttemptNs = now() + delay;
    d.addresses.clear();
    ++d.failures;
    d.lastError = why;
    log("port %u: cannot connect to %s (%s); trying again in %s", port,
        endpoints_[port].address.c_str(), why.c_str(), milliseconds(delay).c_str());
}

// The port's cable is pulled (a link flap): the attempt under way ends,
// and the flap's end starts the next one.
void Server::cancelDial(unsigned port) {
    Dial &d = dials_[port];
    closeDialSocket(port);
    d.stage = Dial::Stage::kWaiting;
    d.addresses.clear();
}

void Server::closeDialSocket(unsigned port) {
    Dial &d = dials_[port];
    if (d.fd < 0)
        return;
    epoll_ctl(epoll_, EPOLL_CTL_DEL, d.fd, nullptr);
    close(d.fd);
    d.fd = -1;
}

// An outgoing link went down: it is dialled again after the back-off,
// from its start if the link had come up (a peer that takes connections
// and closes them at once is not tried ever faster).
void Server::retryAfterDrop(unsigned port, bool linkWasUp) {
    Dial &d = dials_[port];
    if (linkWasUp)
        d.backoff.reset();
    d.nextAttemptNs = now() + d.backoff.next();
}

// Starts the attempts that are due and abandons those that took too
// long; returns how long the loop may sleep, in milliseconds.
int Server::serviceDials() {
    const uint64_t t = now();
    uint64_t next = t + 1'000'000'000;
    for (unsigned port = 1; port < dials_.size(); ++port) {
        if (!dials(port) || faults_[port].down) // a flap's end dials again
            continue;
        Dial &d = dials_[port];
        if (!conns_[port] && d.stage == Dial::Stage::kWaiting && d.nextAttemptNs <= t)
            connectOut(port);
        else if (d.stage != Dial::Stage::kWaiting && d.giveUpNs <= t)
            dialFailed(port, "timed out after " + milliseconds(dialPolicy_.attemptTimeoutNs));
        if (!conns_[port])
            next = std::min(next, d.stage == Dial::Stage::kWaiting ? d.nextAttemptNs : d.giveUpNs);
    }
    return next <= t ? 0 : static_cast<int>((next - t + 999'999) / 1'000'000);
}

// What the port's dialling does, for the control socket's "ports": empty
// for a port that does not dial or has its connection.
std::string Server::dialStatus(unsigned port) const {
    if (!dials(port) || conns_[port])
        return "";
    const Dial &d = dials_[port];
    std::string s = ", dialing " + endpoints_[port].address + ": ";
    if (faults_[port].down)
        s += "flapped down";
    else if (d.stage == Dial::Stage::kResolving)
        s += "resolving";
    else if (d.stage == Dial::Stage::kConnecting)
        s += "connecting";
    else
        s += "next attempt in " +
             milliseconds(d.nextAttemptNs > now() ? d.nextAttemptNs - now() : 0);
    if (d.failures)
        s +=
            " (attempts failed: " + std::to_string(d.failures) + ", the last: " + d.lastError + ")";
    return s;
}

} // namespace pib::fabric
