// SPDX-License-Identifier: GPL-2.0-or-later
// Fault injection on the links inside a simulated fabric (docs/user-guide.md,
// "Fault injection"): a link end takes the faults a process port takes
// (fault.hh), on what its node sends there and what it receives there. A
// packet crosses the sender's `out` injector, then the receiver's `in`;
// what an injector holds back (delay, reordering) goes on when the server
// services the fabric's timers, with the hop count it had, so a routing
// loop through a faulty link is still cut off after kMaxHops. A flap takes
// the link down at both ends, as a cable pulled, and the switches trap.
#include <chrono>
#include <stdexcept>
#include <utility>

#include "sim_fabric.hh"

namespace pib::fabric {

namespace {

uint64_t steadyNs() {
    return static_cast<uint64_t>(std::chrono::duration_cast<std::chrono::nanoseconds>(
                                     std::chrono::steady_clock::now().time_since_epoch())
                                     .count());
}

} // namespace

uint64_t SimulatedFabric::now() const {
    return clock_ ? clock_() : steadyNs();
}

SimulatedFabric::EndFaults *SimulatedFabric::faultsAt(uint32_t node, unsigned port) {
    const auto it = faults_.find(portBase_[node] + port);
    return it == faults_.end() ? nullptr : &it->second;
}

std::pair<uint32_t, unsigned> SimulatedFabric::innerEnd(uint64_t guid, unsigned port) const {
    const uint32_t node = nodeByGuid(guid);
    if (node == kNone || port < 1 || port > portsOf(node))
        throw std::invalid_argument("no port " + std::to_string(port) + " of " + guidText(guid));
    const Peer to = peer(node, port);
    if (to.node == kNone || to.node == kExternal)
        throw std::invalid_argument("port " + std::to_string(port) + " of " + guidText(guid) +
                                    " has no link inside the fabric");
    return {node, port};
}

bool SimulatedFabric::linkIsUp(uint32_t node, unsigned port) const {
    return slots_[node].isSwitch ? switchOf(node).port(port).linkUp
                                 : cas_[slots_[node].index]->port(port).linkUp;
}

// A hand on a cable a flap holds: `link up` waits for the flap (or its
// clear); `link down` keeps it pulled when the flap is over.
void SimulatedFabric::handOnFlappedLink(uint32_t node, unsigned port, bool up) {
    const Peer to = peer(node, port);
    for (EndFaults *f : {faultsAt(node, port), faultsAt(to.node, to.port)}) {
        if (!f || !f->down)
            continue;
        if (up)
            throw std::invalid_argument("a flap holds the link down: clear its fault first");
        f->pulledByFlap = false;
    }
}

std::string SimulatedFabric::endName(uint32_t node, unsigned port) const {
    return guidText(guids_[node]) + " port " + std::to_string(port);
}

// Where the injectors of the end on `port` of `node` deliver, with the hop
// count each packet was offered with: what it sent goes on into the far
// end; what it received, into it from the far end.
FaultInjector::Deliver SimulatedFabric::outward(uint32_t node, unsigned port, EndFaults &f) {
    return [this, node, port, &f](std::span<const uint8_t> b) {
        intoFarEnd(node, port, b, f.out.tag());
    };
}

FaultInjector::Deliver SimulatedFabric::inward(uint32_t node, unsigned port, EndFaults &f) {
    const Peer from = peer(node, port);
    return
        [this, from, &f](std::span<const uint8_t> b) { pass(from.node, from.port, b, f.in.tag()); };
}

bool SimulatedFabric::crossFaults(uint32_t node, unsigned port, std::span<const uint8_t> bytes,
                                  unsigned hops) {
    const Peer to = peer(node, port);
    EndFaults *from = faultsAt(node, port);
    EndFaults *into = faultsAt(to.node, to.port);
    if (!from && !into)
        return false;
    // A packet sent into a link a flap holds down is lost with it.
    if ((from && from->down) || (into && into->down))
        return true;
    if (from && from->out.active()) {
        from->out.offer(bytes, now(), outward(node, port, *from), hops);
        return true;
    }
    intoFarEnd(node, port, bytes, hops);
    return true;
}

// Past the sender's injector: the receiver's, then the cable's far end.
void SimulatedFabric::intoFarEnd(uint32_t node, unsigned port, std::span<const uint8_t> bytes,
                                 unsigned hops) {
    const Peer to = peer(node, port);
    EndFaults *into = faultsAt(to.node, to.port);
    EndFaults *from = faultsAt(node, port);
    // What was held back while the link went down is lost with it.
    if ((from && from->down) || (into && into->down))
        return;
    if (into && into->in.active()) {
        into->in.offer(bytes, now(), inward(to.node, to.port, *into), hops);
        return;
    }
    pass(node, port, bytes, hops);
}

std::string SimulatedFabric::setLinkFault(uint64_t guid, unsigned port,
                                          const FaultSetting &setting) {
    const auto [node, p] = innerEnd(guid, port);
    const size_t key = portBase_[node] + p;
    if (!faults_.contains(key) && faults_.size() >= kMaxFaultedEnds)
        throw std::invalid_argument("faults on " + std::to_string(kMaxFaultedEnds) +
                                    " link ends already: clear one first");
    EndFaults &f = faults_[key];
    // Each end and direction its own PRNG stream; the process ports' streams
    // are 2 and up per port, these start beyond them.
    const std::string dirs = setting.apply(f.in, inward(node, p, f), f.out, outward(node, p, f),
                                           f.flap, 1024 + 2 * key, now());
    if (f.down && !f.flap.active())
        flapLink(node, p, f, false);
    f.flaps = 0;
    const std::string line =
        "link " + endName(node, p) + " " + dirs + ": fault " + setting.spec.toString();
    if (faultLog_)
        faultLog_(line);
    return line;
}

std::string SimulatedFabric::clearLinkFault(uint64_t guid, unsigned port) {
    const auto [node, p] = innerEnd(guid, port);
    const auto it = faults_.find(portBase_[node] + p);
    const std::string name = endName(node, p);
    if (it == faults_.end())
        return "link " + name + ": no faults";
    EndFaults &f = it->second;
    const std::string counted = faultCounters(f);
    f.in.clear(inward(node, p, f));
    f.out.clear(outward(node, p, f));
    if (f.down)
        flapLink(node, p, f, false);
    faults_.erase(it);
    const std::string line = "link " + name + ": faults cleared (" + counted + ")";
    if (faultLog_)
        faultLog_(line);
    return line;
}

// As a cable pulled and plugged in again: both ends go down, and train
// when the flap is over; their switches trap each time. What the ends'
// injectors held is lost with the link. A cable already pulled (by hand,
// or saved so) stays pulled when the flap is over.
void SimulatedFabric::flapLink(uint32_t node, unsigned port, EndFaults &f, bool down) {
    const Peer to = peer(node, port);
    f.down = down;
    bool moves; // whether the flap moves the cable
    if (down) {
        ++f.flaps;
        moves = f.pulledByFlap = linkIsUp(node, port);
        for (EndFaults *end : {&f, faultsAt(to.node, to.port)})
            if (end) {
                end->in.discardHeld();
                end->out.discardHeld();
            }
    } else {
        moves = std::exchange(f.pulledByFlap, false);
    }
    if (moves) {
        linkEnd(node, port, !down);
        linkEnd(to.node, to.port, !down);
    }
    if (faultLog_)
        faultLog_("link " + endName(node, port) +
                  (down ? ": flap " + std::to_string(f.flaps) + ": down" : ": flap over: up") +
                  (moves ? "" : " (a cable pulled by hand: it stays pulled)"));
}

std::vector<Transmit> SimulatedFabric::serviceTimers(uint64_t *waitNs) {
    *waitNs = UINT64_MAX;
    if (faults_.empty())
        return {};
    const uint64_t t = now();
    // Each injector's release is moved through the fabric before the next:
    // the budgets of a packet in (kMaxDeliveries, kMaxBytesOut) apply to
    // what one injector releases at once.
    for (auto &[key, f] : faults_) {
        const auto [node, port] = endOf(key);
        if (f.in.nextRelease().value_or(UINT64_MAX) <= t) {
            f.in.release(t, inward(node, port, f));
            pump();
        }
        if (f.out.nextRelease().value_or(UINT64_MAX) <= t) {
            f.out.release(t, outward(node, port, f));
            pump();
        }
        if (f.flap.active() && f.flap.down(t) != f.down)
            flapLink(node, port, f, !f.down);
    }
    pump();
    // Released packets may have been held again further on: ask afterwards.
    uint64_t next = UINT64_MAX;
    for (const auto &[key, f] : faults_)
        next = std::min(next, nextFaultEvent(f.in, f.out, f.flap, t));
    if (next != UINT64_MAX)
        *waitNs = next > t ? next - t : 0;
    return takeOut();
}

// The node and port of an end's index into peers_.
std::pair<uint32_t, unsigned> SimulatedFabric::endOf(size_t key) const {
    const auto after = std::upper_bound(portBase_.begin(), portBase_.end(), key);
    const auto node = static_cast<uint32_t>(after - portBase_.begin() - 1);
    return {node, static_cast<unsigned>(key - portBase_[node])};
}

std::string SimulatedFabric::faultCounters(const EndFaults &f) {
    std::string s = "in: " + f.in.counters().toString() + "; out: " + f.out.counters().toString();
    if (f.flaps)
        s += "; flaps=" + std::to_string(f.flaps);
    return s;
}

// A line per faulty end: "link 0x... port 3 in: loss=5% | packets=... ;
// out: ...", and its flaps.
std::string SimulatedFabric::faultStatus() const {
    std::string s;
    for (const auto &[key, f] : faults_) {
        const auto [node, port] = endOf(key);
        const std::string name = "link " + endName(node, port);
        for (const auto &[dir, inj] : {std::pair{"in", &f.in}, std::pair{"out", &f.out}})
            if (inj->active())
                s += name + " " + dir + ": " + inj->spec().toString() + " | " +
                     inj->counters().toString() + "\n";
        if (f.flap.active())
            s += name + " flap: " + std::to_string(f.flaps) + " flaps, link " +
                 (f.down ? "down" : "up") + "\n";
    }
    return s;
}

} // namespace pib::fabric
