// SPDX-License-Identifier: GPL-2.0-or-later
// The control socket: a client connects, writes one command line, reads
// the answer and the switch closes the connection. Commands:
//   fault PORT SPEC...   inject faults (fault.hh), replacing the port's
//   clear PORT           stop injecting on the port
//   status               what is injected where, and its counters
//   ports                each port's link and IBA port state
//   queues               each connected port's queues and flow control
//   capture PORT FILE [COUNT]
//                        record the port's packets to a pcap file
//   capture PORT stop    stop recording and close the file
//   captures             the captures running, and their packet counts
//   save FILE            write the switch's state to FILE (server_state.cc)
// The answer's first word is "ok" or "error:".
#include <algorithm>
#include <cerrno>
#include <charconv>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "server.hh"
#include "server_internal.hh"

namespace pib::fabric {

namespace {

constexpr size_t kMaxControlClients = 8;
constexpr size_t kMaxControlLine = 4096;

std::string_view firstWord(std::string_view *line) {
    const size_t start = line->find_first_not_of(' ');
    if (start == std::string_view::npos) {
        *line = {};
        return {};
    }
    const size_t end = std::min(line->find(' ', start), line->size());
    const std::string_view word = line->substr(start, end - start);
    line->remove_prefix(end);
    return word;
}

} // namespace

void Server::acceptControl() {
    const int fd = ::accept4(control_, nullptr, nullptr, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0)
        return;
    if (controlClients_.size() >= kMaxControlClients) {
        close(fd);
        return;
    }
    auto client = std::make_unique<ControlClient>();
    client->fd = fd;
    controlClients_.push_back(std::move(client));
    watchTag(epoll_, fd, kControlClientTag | static_cast<uint32_t>(fd), false);
}

void Server::onControl(int fd, uint32_t events) {
    auto it = std::find_if(controlClients_.begin(), controlClients_.end(),
                           [fd](const auto &c) { return c->fd == fd; });
    if (it == controlClients_.end())
        return;
    ControlClient &c = **it;
    bool done = false;
    if (c.output.empty() && events & (EPOLLIN | EPOLLHUP | EPOLLERR)) {
        char buf[1024];
        const ssize_t n = ::recv(fd, buf, sizeof(buf), 0);
        if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK))
            done = true;
        else if (n > 0)
            c.input.append(buf, static_cast<size_t>(n));
        const size_t newline = c.input.find('\n');
        if (newline != std::string::npos)
            c.output = controlCommand(std::string_view(c.input).substr(0, newline)) + "\n";
        else if (c.input.size() > kMaxControlLine)
            done = true;
    }
    while (!done && c.sent < c.output.size()) {
        const ssize_t n =
            ::send(fd, c.output.data() + c.sent, c.output.size() - c.sent, MSG_NOSIGNAL);
        if (n < 0) {
            done = errno != EAGAIN && errno != EWOULDBLOCK;
            break;
        }
        c.sent += static_cast<size_t>(n);
    }
    if (!c.output.empty() && c.sent == c.output.size())
        done = true;
    if (done) {
        epoll_ctl(epoll_, EPOLL_CTL_DEL, fd, nullptr);
        close(fd);
        controlClients_.erase(it);
        return;
    }
    watchTag(epoll_, fd, kControlClientTag | static_cast<uint32_t>(fd), !c.output.empty());
}

std::string Server::controlCommand(std::string_view line) {
    if (!line.empty() && line.back() == '\r')
        line.remove_suffix(1);
    const std::string_view command = firstWord(&line);
    if (command == "status")
        return "ok\n" + faultStatus();
    if (command == "ports")
        return "ok\n" + portStates();
    if (command == "captures")
        return "ok\n" + captureStatus();
    if (command == "queues")
        return "ok\n" + queueStates();
    if (command == "save")
        return saveCommand(firstWord(&line));
    std::vector<Transmit> out;
    if (auto answer = sw_.command(command, line, out)) {
        for (const Transmit &t : out)
            sendPacket(t.port, t.packet);
        return *answer;
    }
    if (command != "fault" && command != "clear" && command != "capture")
        return "error: unknown command '" + std::string(command) +
               "' (fault, clear, status, ports, queues, capture, captures, save" +
               sw_.commandNames() + ")";
    const std::string_view portText = firstWord(&line);
    unsigned port = 0;
    const auto [end, ec] =
        std::from_chars(portText.data(), portText.data() + portText.size(), port);
    if (ec != std::errc() || end != portText.data() + portText.size() || port < 1 ||
        port >= faults_.size())
        return "error: no port '" + std::string(portText) + "'";
    if (command == "clear")
        return "ok " + clearFault(port);
    if (command == "capture")
        return captureCommand(port, line);
    std::string error;
    const auto setting = FaultSetting::parse(line, &error);
    if (!setting)
        return "error: " + error;
    return "ok " + setFault(port, *setting);
}

// A line per external port: "port 2: ACTIVE, link up", and for one that
// dials its peer and has no connection, what the dialling does:
// "port 3: DOWN, link down, dialing HOST:PORT: connecting (attempts
// failed: 2, the last: timed out after 5000 ms)".
// Test harnesses wait on it: a host port can be ACTIVE while the switch
// port facing it is not yet, and data through that port is dropped.
std::string Server::portStates() const {
    std::string s;
    for (unsigned n = 1; n <= sw_.ports(); ++n) {
        const SwitchPort &p = sw_.port(n);
        s += "port " + std::to_string(n) + ": " + stateName(p.state) + ", link " +
             (p.linkUp ? "up" : "down") + dialStatus(n) + moveStatus(n) + "\n";
    }
    return s;
}

// A line per connected port, for finding where a fabric holds packets
// back: "port 7: queued 0 + 65536 ring, ring out 1048576 in 0, input
// blocked on 1 for 40 ms, drained 3 ms ago, stalled".
std::string Server::queueStates() const {
    const uint64_t nowNs = now();
    const auto ms = [nowNs](uint64_t since) { return std::to_string((nowNs - since) / 1'000'000); };
    std::string s;
    for (unsigned n = 1; n < conns_.size(); ++n) {
        const Connection *c = conns_[n].get();
        if (!c)
            continue;
        s += "port " + std::to_string(n) + ": queued " + std::to_string(c->queuedInStream());
        if (c->rings)
            s += " + " + std::to_string(c->queuedInRing()) + " ring, ring out " +
                 std::to_string(c->rings->out.inFlight()) + " in " +
                 std::to_string(pumps_ ? pumps_->waiting(n) : c->rings->in.waiting());
        if (c->blockedOn)
            s += ", input blocked on " + std::to_string(c->blockedOn) + " for " +
                 ms(c->blockedSince) + " ms";
        if (c->queued())
            s += ", drained " + ms(c->lastDrain) + " ms ago";
        s += c->stalled ? ", stalled\n" : "\n";
    }
    return s;
}

} // namespace pib::fabric
