// SPDX-License-Identifier: GPL-2.0-or-later
// The server's side of fault injection: packets pass through each port's
// injectors on their way in and out, delayed ones leave from the event
// loop, flaps close and reopen the port's cable, and the counters go to
// the log and to the control socket's status.
#include <algorithm>

#include <sys/epoll.h>

#include "server.hh"
#include "server_internal.hh"

namespace pib::fabric {

namespace {

// Fault counters that changed are logged this often.
constexpr uint64_t kFaultLogPeriodNs = 10'000'000'000;

bool counted(const FaultCounters &c) {
    return c.packets != 0;
}

} // namespace

// Where a port's injectors deliver: into the switch, or out on the wire.
FaultInjector::Deliver Server::inward(unsigned port) {
    return [this, port](std::span<const uint8_t> bytes) { toSwitch(port, bytes); };
}

FaultInjector::Deliver Server::outward(unsigned port) {
    return
        [this, port](std::span<const uint8_t> bytes) { sendFrame(port, PIB_WIRE_PACKET, bytes); };
}

void Server::receivePacket(unsigned port, std::span<const uint8_t> packet, bool vcrcGood) {
    FaultInjector &in = faults_[port].in;
    if (!in.active()) {
        toSwitch(port, packet, vcrcGood);
        return;
    }
    // (What an injector delivers may be corrupted on purpose: the switch
    // checks its VCRC again.)
    in.offer(packet, now(), inward(port));
}

void Server::toSwitch(unsigned port, std::span<const uint8_t> packet, bool vcrcGood) {
    // A packet held back by a fault is lost with the link it came over.
    if (!conns_[port] || !conns_[port]->helloReceived)
        return;
    capture(port, packet, false);
    const auto forwarded = [this](unsigned out, std::span<const uint8_t> bytes) {
        sendPacket(out, bytes);
    };
    for (auto &t : vcrcGood ? sw_.receiveVcrcGood(port, packet, forwarded)
                            : sw_.receive(port, packet, forwarded))
        sendPacket(t.port, t.packet);
}

void Server::sendPacket(unsigned port, std::span<const uint8_t> packet) {
    FaultInjector &out = faults_[port].out;
    if (!out.active()) {
        sendFrame(port, PIB_WIRE_PACKET, packet);
        return;
    }
    out.offer(packet, now(), outward(port));
}

std::string Server::setFault(unsigned port, const FaultSetting &setting) {
    PortFaults &f = faults_[port];
    const std::string dirs =
        setting.apply(f.in, inward(port), f.out, outward(port), f.flap, 2 * port, now());
    if (f.down && !f.flap.active())
        flap(port, false);
    f.flaps = 0;
    f.logged.clear();
    const std::string line =
        "port " + std::to_string(port) + " " + dirs + ": fault " + setting.spec.toString();
    log("%s", line.c_str());
    return line;
}

std::string Server::clearFault(unsigned port) {
    logFaultCounters(true);
    PortFaults &f = faults_[port];
    f.in.clear(inward(port));
    f.out.clear(outward(port));
    f.flap.clear();
    if (f.down)
        flap(port, false);
    // The counters stay for the status until the port's next fault.
    const std::string line = "port " + std::to_string(port) + ": faults cleared";
    log("%s", line.c_str());
    return line;
}

// The link goes down as if its cable were pulled: the connection closes
// and the port takes (or dials) no new one until the flap is over. The
// peer's QEMU reconnects once a second, so a link is down for at least
// that long.
void Server::flap(unsigned port, bool down) {
    PortFaults &f = faults_[port];
    f.down = down;
    if (down) {
        ++f.flaps;
        log("port %u: link flap %llu: down", port, static_cast<unsigned long long>(f.flaps));
        drop(port, "fault injection: link flap");
        if (listeners_[port] >= 0)
            epoll_ctl(epoll_, EPOLL_CTL_DEL, listeners_[port], nullptr);
        if (dials(port))
            cancelDial(port);
    } else {
        log("port %u: link flap over: taking a cable again", port);
        if (listeners_[port] >= 0)
            watch(listeners_[port], port, true, false);
        else if (dials(port))
            connectOut(port);
    }
}

int Server::serviceFaults() {
    const uint64_t t = now();
    for (unsigned port = 1; port < faults_.size(); ++port) {
        PortFaults &f = faults_[port];
        // Most ports hold nothing back: no delivery to set up for them.
        if (f.in.nextRelease().value_or(UINT64_MAX) <= t)
            f.in.release(t, inward(port));
        if (f.out.nextRelease().value_or(UINT64_MAX) <= t)
            f.out.release(t, outward(port));
        if (f.flap.active() && f.flap.down(t) != f.down)
            flap(port, !f.down);
    }
    // The element's own: faults on links inside a simulated fabric.
    uint64_t elementWait = UINT64_MAX;
    for (const Transmit &out : sw_.serviceTimers(&elementWait))
        sendPacket(out.port, out.packet);
    if (t - lastFaultLog_ >= kFaultLogPeriodNs) {
        lastFaultLog_ = t;
        logFaultCounters(false);
    }
    // Released packets may have been held again further on: ask afterwards.
    uint64_t next = t + std::min<uint64_t>(elementWait, 1'000'000'000);
    for (const PortFaults &f : faults_)
        next = std::min(next, nextFaultEvent(f.in, f.out, f.flap, t));
    return next <= t ? 0 : static_cast<int>((next - t + 999'999) / 1'000'000);
}

std::string Server::faultStatus() const {
    std::string s;
    for (unsigned port = 1; port < faults_.size(); ++port) {
        const PortFaults &f = faults_[port];
        const std::string name = "port " + std::to_string(port);
        for (const auto &[dir, inj] : {std::pair{"in", &f.in}, std::pair{"out", &f.out}}) {
            if (!inj->active() && !counted(inj->counters()))
                continue;
            s += name + " " + dir + ": " + (inj->active() ? inj->spec().toString() : "cleared") +
                 " | " + inj->counters().toString() + "\n";
        }
        if (f.flap.active() || f.flaps)
            s += name + " flap: " + std::to_string(f.flaps) + " flaps, link " +
                 (f.down ? "down" : "up") + (f.flap.active() ? "" : " (cleared)") + "\n";
    }
    s += sw_.faultStatus();
    return s.empty() ? "no faults\n" : s;
}

void Server::logFaultCounters(bool always) {
    for (unsigned port = 1; port < faults_.size(); ++port) {
        PortFaults &f = faults_[port];
        std::string line;
        if (counted(f.in.counters()))
            line += " in: " + f.in.counters().toString();
        if (counted(f.out.counters()))
            line += " out: " + f.out.counters().toString();
        if (f.flaps)
            line += " flaps=" + std::to_string(f.flaps);
        if (line.empty() || (!always && line == f.logged))
            continue;
        f.logged = line;
        log("port %u: fault counters%s", port, line.c_str());
    }
}

} // namespace pib::fabric
