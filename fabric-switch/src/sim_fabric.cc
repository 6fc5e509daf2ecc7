// SPDX-License-Identifier: GPL-2.0-or-later
// The simulated fabric's cabling and its packets in flight: a packet in
// from a guest is handed from node to node, in order, until nothing is in
// flight; what reaches a free port leaves for its guest.
#include "sim_fabric.hh"

#include <algorithm>
#include <stdexcept>
#include <unordered_map>

namespace pib::fabric {

namespace {

constexpr unsigned kMaxSwitchPorts = 254;

} // namespace

std::string guidText(uint64_t v) {
    char text[24];
    std::snprintf(text, sizeof(text), "0x%016llx", static_cast<unsigned long long>(v));
    return text;
}

SimulatedFabric::SimulatedFabric(const FabricDescription &d) {
    build(d);
    for (const auto &[a, b] : d.links) {
        linkEnd(a.node, a.port, true);
        linkEnd(b.node, b.port, true);
    }
}

// Checks everything about `d` before it makes anything of it.
void SimulatedFabric::build(const FabricDescription &d) {
    if (d.nodes.empty() || d.nodes.size() > kMaxNodes)
        throw std::invalid_argument("a fabric has 1 to " + std::to_string(kMaxNodes) +
                                    " nodes, not " + std::to_string(d.nodes.size()));
    std::unordered_map<uint64_t, uint32_t> seen;
    size_t total = 0;
    for (uint32_t n = 0; n < d.nodes.size(); ++n) {
        const FabricDescription::Node &node = d.nodes[n];
        const unsigned max = node.isSwitch ? kMaxSwitchPorts : SimulatedCa::kMaxPorts;
        if (node.ports < 1 || node.ports > max)
            throw std::invalid_argument("node " + guidText(node.guid) + ": 1 to " +
                                        std::to_string(max) + " ports, not " +
                                        std::to_string(node.ports));
        if (node.guid == 0 || !seen.emplace(node.guid, n).second)
            throw std::invalid_argument("node GUID " + guidText(node.guid) + " is 0 or not unique");
        // A CA's port N has GUID + N: no other node's GUID may be one.
        for (unsigned p = 1; !node.isSwitch && p <= node.ports; ++p)
            if (!seen.emplace(node.guid + p, n).second)
                throw std::invalid_argument("CA " + guidText(node.guid) + ": its port GUID " +
                                            guidText(node.guid + p) + " is another node's GUID");
        portBase_.push_back(total);
        total += node.ports + 1;
    }
    peers_.assign(total, Peer{});
    auto check = [&](const FabricDescription::End &e, const char *what) {
        if (e.node >= d.nodes.size() || e.port < 1 || e.port > d.nodes[e.node].ports)
            throw std::invalid_argument(
                std::string(what) + " names port " + std::to_string(e.port) + " of " +
                (e.node < d.nodes.size() ? guidText(d.nodes[e.node].guid) : "no node") +
                ", which does not exist");
        if (peer(e.node, e.port).node != kNone)
            throw std::invalid_argument(std::string(what) + ": port " + std::to_string(e.port) +
                                        " of " + guidText(d.nodes[e.node].guid) +
                                        " already has a cable");
    };
    for (const auto &[a, b] : d.links) {
        check(a, "a link");
        check(b, "a link");
        if (a.node == b.node && a.port == b.port)
            throw std::invalid_argument("a link from a port to itself");
        peer(a.node, a.port) = Peer{b.node, b.port};
        peer(b.node, b.port) = Peer{a.node, a.port};
    }
    for (uint32_t k = 0; k < d.attachments.size(); ++k) {
        const FabricDescription::End &e = d.attachments[k];
        check(e, "an attachment");
        if (!d.nodes[e.node].isSwitch)
            throw std::invalid_argument("an attachment on a CA: a guest plugs into a switch port");
        peer(e.node, e.port) = Peer{kExternal, k + 1};
    }
    attachments_ = d.attachments;
    if (!dataVls(d.vlCap))
        throw std::invalid_argument("a fabric's ports offer 1, 2, 4 or 8 data VLs");
    vlCap_ = d.vlCap;
    for (const FabricDescription::Node &node : d.nodes) {
        guids_.push_back(node.guid);
        if (node.isSwitch) {
            slots_.push_back({true, static_cast<uint32_t>(switches_.size())});
            switches_.push_back(std::make_unique<Switch>(SwitchConfig{
                node.guid, node.ports, node.description, /*heldWhileArmed=*/0, d.vlCap}));
        } else {
            slots_.push_back({false, static_cast<uint32_t>(cas_.size())});
            cas_.push_back(std::make_unique<SimulatedCa>(
                CaConfig{node.guid, node.ports, node.description, d.vlCap}));
        }
    }
    inAttention_.assign(slots_.size(), false);
}

uint32_t SimulatedFabric::nodeByGuid(uint64_t guid) const {
    for (uint32_t n = 0; n < guids_.size(); ++n)
        if (guids_[n] == guid)
            return n;
    return kNone;
}

const Switch *SimulatedFabric::switchByGuid(uint64_t guid) const {
    const uint32_t n = nodeByGuid(guid);
    return n != kNone && slots_[n].isSwitch ? &switchOf(n) : nullptr;
}

const SimulatedCa *SimulatedFabric::caByGuid(uint64_t guid) const {
    const uint32_t n = nodeByGuid(guid);
    return n != kNone && !slots_[n].isSwitch ? cas_[slots_[n].index].get() : nullptr;
}

uint64_t SimulatedFabric::nodeGuid(unsigned port) const {
    return guids_[attachments_.at(port - 1).node];
}

const SwitchPort &SimulatedFabric::port(unsigned n) const {
    const FabricDescription::End &e = attachments_.at(n - 1);
    return switchOf(e.node).port(e.port);
}

void SimulatedFabric::visit(uint32_t node, unsigned port, std::span<const uint8_t> bytes,
                            unsigned hops) {
    std::vector<Transmit> built;
    if (slots_[node].isSwitch) {
        built =
            switchOf(node).receive(port, bytes, [&](unsigned out, std::span<const uint8_t> packet) {
                emit(node, out, packet, hops);
            });
        noteAttention(node); // an SMP set a port DOWN, or a trap was repressed
    } else {
        built = cas_[slots_[node].index]->receive(port, bytes);
    }
    // What a node builds (an answer, a trap, a directed-route SMP passed
    // on) is a packet of its own: its hops count from here. Only what a
    // switch forwards as it came carries the count on; no agent answers
    // an answer, so built packets cannot keep each other going.
    for (const Transmit &t : built)
        emit(node, t.port, t.packet, 0);
}

void SimulatedFabric::emit(uint32_t node, unsigned port, std::span<const uint8_t> bytes,
                           unsigned hops) {
    const Peer &to = peer(node, port);
    if (to.node == kNone)
        return;
    if (to.node != kExternal && !faults_.empty() && crossFaults(node, port, bytes, hops))
        return;
    pass(node, port, bytes, hops);
}

void SimulatedFabric::pass(uint32_t node, unsigned port, std::span<const uint8_t> bytes,
                           unsigned hops) {
    const Peer &to = peer(node, port);
    const bool loop = hops >= kMaxHops;
    const bool out = to.node == kExternal;
    // What leaves for the guests counts too: the server queues it.
    if (loop || deliveries_ >= kMaxDeliveries ||
        (out ? bytesOut_ + bytes.size() > kMaxBytesOut
             : bytesInFlight_ + bytes.size() > kMaxBytesInFlight)) {
        ++(loop ? stats_.loopDrops : stats_.budgetDrops);
        if (slots_[node].isSwitch)
            switchOf(node).discarded(port, bytes.size());
        return;
    }
    ++deliveries_;
    if (out) {
        bytesOut_ += bytes.size();
        if (send_)
            (*send_)(to.port, bytes);
        else
            out_.push_back({to.port, {bytes.begin(), bytes.end()}});
        return;
    }
    bytesInFlight_ += bytes.size();
    ++stats_.hops;
    inFlight_.push_back({to.node, to.port, hops + 1, {bytes.begin(), bytes.end()}});
}

void SimulatedFabric::pump() {
    while (!inFlight_.empty()) {
        InFlight p = std::move(inFlight_.front());
        inFlight_.pop_front();
        bytesInFlight_ -= p.bytes.size();
        visit(p.node, p.port, p.bytes, p.hops);
    }
    deliveries_ = 0;
    bytesOut_ = 0;
}

std::vector<Transmit> SimulatedFabric::takeOut() {
    return std::exchange(out_, {});
}

std::vector<Transmit> SimulatedFabric::receive(unsigned port, std::span<const uint8_t> bytes,
                                               const Forwarder &send) {
    if (port < 1 || port > attachments_.size())
        return {};
    const FabricDescription::End &e = attachments_[port - 1];
    send_ = &send;
    visit(e.node, e.port, bytes, 0);
    pump();
    send_ = nullptr;
    return takeOut();
}

void SimulatedFabric::linkEnd(uint32_t node, unsigned port, bool up) {
    // Both ends of a link inside offer the fabric's VLs; a guest's, VL0.
    const uint8_t neighborVlCap = peer(node, port).node == kExternal ? kVlsVl0 : vlCap_;
    if (!slots_[node].isSwitch) {
        cas_[slots_[node].index]->linkChanged(port, up, neighborVlCap);
        return;
    }
    for (const Transmit &t : switchOf(node).linkChanged(port, up, neighborVlCap))
        emit(node, t.port, t.packet, 0);
    noteAttention(node); // its trap
}

void SimulatedFabric::noteAttention(uint32_t node) {
    Switch &s = switchOf(node);
    if (!inAttention_[node] && (s.linkResetsPending() || s.trapPending())) {
        inAttention_[node] = true;
        attention_.push_back(node);
    }
}

// Those with nothing left to do leave the list.
void SimulatedFabric::settleAttention() {
    std::erase_if(attention_, [&](uint32_t node) {
        const Switch &s = switchOf(node);
        const bool settled = !s.linkResetsPending() && !s.trapPending();
        if (settled)
            inAttention_[node] = false;
        return settled;
    });
}

// After a load, which may leave any switch with something to do.
void SimulatedFabric::attendAll() {
    attention_.clear();
    inAttention_.assign(slots_.size(), false);
    for (uint32_t node = 0; node < slots_.size(); ++node)
        if (slots_[node].isSwitch)
            noteAttention(node);
}

std::vector<Transmit> SimulatedFabric::linkChanged(unsigned port, bool up) {
    if (port < 1 || port > attachments_.size())
        return {};
    const FabricDescription::End &e = attachments_[port - 1];
    linkEnd(e.node, e.port, up);
    pump();
    return takeOut();
}

std::vector<Transmit> SimulatedFabric::setLink(uint64_t guid, unsigned port, bool up) {
    const uint32_t node = innerEnd(guid, port).first;
    const Peer to = peer(node, port);
    handOnFlappedLink(node, port, up);
    linkEnd(node, port, up);
    linkEnd(to.node, to.port, up);
    pump();
    return takeOut();
}

// Ports the SM set DOWN: a process port's cable is the server's to
// close; a link inside the fabric goes down at both ends and trains again
// at once, which the switches at its ends report with Trap 128.
std::vector<unsigned> SimulatedFabric::takeLinkResets() {
    std::vector<unsigned> external;
    for (size_t i = 0; i < attention_.size(); ++i) { // linkEnd() may add to it
        const uint32_t node = attention_[i];
        if (!switchOf(node).linkResetsPending())
            continue;
        for (const unsigned port : switchOf(node).takeLinkResets()) {
            const Peer to = peer(node, port);
            if (to.node == kExternal) {
                external.push_back(to.port);
            } else if (to.node != kNone) {
                linkEnd(node, port, false);
                linkEnd(to.node, to.port, false);
                linkEnd(node, port, true);
                linkEnd(to.node, to.port, true);
            }
        }
    }
    pump();
    for (Transmit &t : takeOut())
        pending_.push_back(std::move(t));
    return external;
}

std::vector<Transmit> SimulatedFabric::repeatTraps() {
    for (size_t i = 0; i < attention_.size(); ++i) {
        const uint32_t node = attention_[i];
        if (switchOf(node).trapPending())
            for (const Transmit &t : switchOf(node).repeatTraps())
                emit(node, t.port, t.packet, 0);
    }
    pump();
    settleAttention();
    std::vector<Transmit> out = std::exchange(pending_, {});
    for (Transmit &t : takeOut())
        out.push_back(std::move(t));
    return out;
}

void SimulatedFabric::discarded(unsigned port, size_t bytes) {
    if (port < 1 || port > attachments_.size())
        return;
    const FabricDescription::End &e = attachments_[port - 1];
    switchOf(e.node).discarded(e.port, bytes);
}

void SimulatedFabric::setDropLogger(std::function<void(const std::string &)> log) {
    for (uint32_t node = 0; node < slots_.size(); ++node)
        if (slots_[node].isSwitch)
            switchOf(node).setDropLogger(
                [log, name = guidText(guids_[node])](const std::string &line) {
                    log("switch " + name + ": " + line);
                });
}

void SimulatedFabric::setEventLogger(std::function<void(const std::string &)> log) {
    for (uint32_t node = 0; node < slots_.size(); ++node)
        if (slots_[node].isSwitch)
            switchOf(node).setEventLogger(
                [log, name = guidText(guids_[node])](const std::string &line) {
                    log("switch " + name + ": " + line);
                });
}

void SimulatedFabric::setClock(uint64_t (*clock)()) {
    clock_ = clock;
    for (auto &sw : switches_)
        sw->setClock(clock);
    for (auto &ca : cas_)
        ca->setClock(clock);
}

uint64_t SimulatedFabric::caDataDropped() const {
    uint64_t n = 0;
    for (const auto &ca : cas_)
        n += ca->dataDropped();
    return n;
}

namespace {

std::string_view nextWord(std::string_view &text) {
    while (!text.empty() && text.front() == ' ')
        text.remove_prefix(1);
    const size_t end = std::min(text.find(' '), text.size());
    const std::string_view word = text.substr(0, end);
    text.remove_prefix(end);
    return word;
}

} // namespace

std::optional<std::string> SimulatedFabric::command(std::string_view verb, std::string_view args,
                                                    std::vector<Transmit> &out) {
    if (verb == "fabric")
        return "ok " + std::to_string(switches_.size()) + " switches, " +
               std::to_string(cas_.size()) + " CAs, " + std::to_string(attachments_.size()) +
               " ports; hops " + std::to_string(stats_.hops) + ", loop drops " +
               std::to_string(stats_.loopDrops) + ", budget drops " +
               std::to_string(stats_.budgetDrops) + ", CA data dropped " +
               std::to_string(caDataDropped());
    if (verb != "link")
        return std::nullopt;
    const std::string_view guidText = nextWord(args), portText = nextWord(args);
    const std::string_view what = nextWord(args);
    const auto guid = fabricNumber(guidText, UINT64_MAX);
    const auto port = fabricNumber(portText, 254);
    const bool upDown = what == "up" || what == "down";
    if (!guid || !port || (!upDown && what != "clear" && what != "fault") ||
        ((upDown || what == "clear") && !nextWord(args).empty()))
        return "error: link GUID PORT up|down|clear|fault SPEC...";
    const unsigned p = static_cast<unsigned>(*port);
    try {
        if (what == "fault") {
            std::string error;
            const auto setting = FaultSetting::parse(args, &error);
            if (!setting)
                return "error: " + error;
            if (!setting->spec.any())
                return "error: no fault in '" + std::string(args) +
                       "' (link GUID PORT clear stops them)";
            // What the end held back goes on at once, and a flap's link
            // that is up again traps.
            std::string line = setLinkFault(*guid, p, *setting);
            pump();
            out = takeOut();
            return "ok " + line;
        }
        if (what == "clear") {
            std::string line = clearLinkFault(*guid, p);
            pump();
            out = takeOut();
            return "ok " + line;
        }
        out = setLink(*guid, p, what == "up");
    } catch (const std::invalid_argument &e) {
        return "error: " + std::string(e.what());
    }
    return "ok link " + std::string(guidText) + " " + std::string(portText) + " " +
           std::string(what);
}

} // namespace pib::fabric
