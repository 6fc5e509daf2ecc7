// SPDX-License-Identifier: GPL-2.0-or-later
// A simulated fabric: switches (each a whole Switch: SMA, PMA, LFT and
// MFT forwarding, partitions, traps) and CAs (SimulatedCa: management
// only) cabled to each other inside one process, and switch ports left
// free for guests: those are the process's ports, served by the server
// as a single switch's are. A packet from a guest crosses the simulated
// switches hop by hop by the tables the SM wrote into them, to another
// guest, a simulated CA, or nowhere.
#pragma once

#include <cstdint>
#include <deque>
#include <istream>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "element.hh"
#include "fault.hh"
#include "sim_ca.hh"
#include "switch.hh"

namespace pib::fabric {

// What a simulated fabric is made of (docs/wire.md, "Simulated fabrics").
struct FabricDescription {
    struct Node {
        bool isSwitch = false;
        uint64_t guid = 0;
        unsigned ports = 0;
        std::string description;
    };
    // A port of a node, by the node's index in `nodes`.
    struct End {
        uint32_t node = 0;
        unsigned port = 0;
    };
    std::vector<Node> nodes;
    std::vector<std::pair<End, End>> links;
    // The process's port N is attachments[N - 1]: a switch port that a
    // guest's cable plugs into, in place of a CA.
    std::vector<End> attachments;
    // The data VLs every simulated port offers (PortInfo's VLCap code).
    uint8_t vlCap = kVlsVl0;
};

// A GUID as the fabric's messages name it: 0x and 16 hex digits.
std::string guidText(uint64_t v);

// A number of a fabric file or control command: decimal, or hexadecimal
// after 0x; nothing else around it, at most `max`.
std::optional<uint64_t> fabricNumber(std::string_view word, uint64_t max);

// Reads a fabric file: one statement a line, `#` starts a comment.
//   switch GUID PORTS "DESCRIPTION"
//   ca GUID PORTS "DESCRIPTION"
//   link GUID PORT GUID PORT
//   attach GUID PORT
//   vls N                 (the data VLs of every simulated port: 1, 2, 4 or 8)
// Throws std::runtime_error naming the line of the first error.
FabricDescription readFabric(std::istream &in);

class SimulatedFabric final : public Element {
  public:
    // Up to 48K nodes: each takes a LID of the 48K unicast LIDs.
    static constexpr size_t kMaxNodes = 48 * 1024;
    // A packet that has crossed this many switches inside the fabric is
    // dropped (a routing loop: on hardware it would circulate until a
    // switch's head-of-queue lifetime discards it), counted as a discard
    // of the port that would have sent it on.
    static constexpr unsigned kMaxHops = 64;
    // Packets moved for one packet in (multicast fans out), inside the
    // fabric and out of it, and the bytes in flight at once: beyond either, packets are
    // dropped as a loop's are. A broadcast over a fabric of 10,000 nodes
    // crosses some 1,500 switches; this bounds what one packet from a
    // guest costs the process (and every other guest) in time and memory.
    static constexpr size_t kMaxDeliveries = 1 << 14;
    static constexpr size_t kMaxBytesInFlight = 16 << 20;
    // And the bytes that leave for the guests' ports, which the server
    // queues (a broadcast to 250 guests of 4 KiB packets is 1 MiB).
    static constexpr size_t kMaxBytesOut = 4 << 20;

    // Validates `d` (throws std::invalid_argument saying what is wrong)
    // and brings every internal link up.
    explicit SimulatedFabric(const FabricDescription &d);

    unsigned ports() const override { return static_cast<unsigned>(attachments_.size()); }
    uint64_t nodeGuid(unsigned port) const override;
    unsigned portNumber(unsigned port) const override { return attachments_.at(port - 1).port; }
    const SwitchPort &port(unsigned n) const override;
    std::vector<Transmit> receive(unsigned port, std::span<const uint8_t> bytes,
                                  const Forwarder &send) override;
    std::vector<Transmit> linkChanged(unsigned port, bool up) override;
    std::vector<unsigned> takeLinkResets() override;
    std::vector<Transmit> repeatTraps() override;
    void discarded(unsigned port, size_t bytes) override;
    // "link GUID PORT up|down": setLink(); "link GUID PORT fault SPEC..."
    // and "link GUID PORT clear": setLinkFault(), clearLinkFault();
    // "fabric": its numbers.
    std::optional<std::string> command(std::string_view verb, std::string_view args,
                                       std::vector<Transmit> &out) override;
    std::string commandNames() const override { return ", link, fabric"; }
    // Every switch's and CA's state, for a snapshot of the fabric
    // (sim_fabric_state.cc); load() refuses a state of another fabric, or
    // one whose two ends of a link disagree, and leaves the fabric as it
    // was.
    bool saves() const override { return true; }
    void save(StateWriter &w) const override;
    bool load(StateReader &r) override;

    // Takes the link on port `port` of the node `guid` down or up, at
    // both ends, as a cable pulled or plugged in: the switches at its
    // ends send Trap 128. Returns what leaves the fabric; throws
    // std::invalid_argument for a port that has no internal link.
    std::vector<Transmit> setLink(uint64_t guid, unsigned port, bool up);

    // Fault injection on a link inside the fabric (sim_fabric_faults.cc),
    // at its end on port `port` of the node `guid`: what that node
    // receives there (`in`) and sends there (`out`) crosses an injector as
    // a process port's does (fault.hh); a flap takes the link down at both
    // ends, as setLink() does. Replaces what the end had. Returns the line
    // it logs; throws std::invalid_argument for a port with no link inside
    // the fabric, or a fault on more than kMaxFaultedEnds link ends.
    std::string setLinkFault(uint64_t guid, unsigned port, const FaultSetting &setting);
    // Stops it; what it held back goes on at once.
    std::string clearLinkFault(uint64_t guid, unsigned port);
    // Link ends with faults at once: each holds up to
    // FaultInjector::kMaxHeldBytes back each way.
    static constexpr size_t kMaxFaultedEnds = 16;
    std::vector<Transmit> serviceTimers(uint64_t *waitNs) override;
    std::string faultStatus() const override;

    // For every switch, and each CA.
    void setDropLogger(std::function<void(const std::string &)> log);
    void setEventLogger(std::function<void(const std::string &)> log);
    // Where the faults on links inside say what they did (set, cleared,
    // flaps): the switch process's log.
    void setFaultLogger(std::function<void(const std::string &)> log) {
        faultLog_ = std::move(log);
    }
    // The nodes' clock and the faults' (a steady clock unless set).
    void setClock(uint64_t (*clock)());

    size_t switchCount() const { return switches_.size(); }
    size_t caCount() const { return cas_.size(); }
    // The node `guid`, or nullptr.
    const Switch *switchByGuid(uint64_t guid) const;
    const SimulatedCa *caByGuid(uint64_t guid) const;

    struct Stats {
        uint64_t hops = 0;        // packets moved from node to node inside
        uint64_t loopDrops = 0;   // dropped after kMaxHops
        uint64_t budgetDrops = 0; // dropped beyond kMaxDeliveries or kMaxBytesInFlight
    };
    const Stats &stats() const { return stats_; }
    // Packets to simulated CAs that were not management for them.
    uint64_t caDataDropped() const;

  private:
    // Whom a node's port is cabled to: another node's port, a process
    // port (node kExternal, port: its number), or nothing (kNone).
    struct Peer {
        uint32_t node = kNone;
        uint32_t port = 0;
    };
    static constexpr uint32_t kNone = UINT32_MAX;
    static constexpr uint32_t kExternal = UINT32_MAX - 1;
    struct InFlight {
        uint32_t node;
        uint32_t port;
        unsigned hops;
        std::vector<uint8_t> bytes;
    };
    // A node: the index into switches_ or cas_.
    struct Slot {
        bool isSwitch;
        uint32_t index;
    };
    // The faults on one end of a link inside, and the flaps they made.
    struct EndFaults {
        FaultInjector in, out;
        FlapSchedule flap;
        bool down = false;         // flapped down right now
        bool pulledByFlap = false; // and the link was up until it did
        uint64_t flaps = 0;
    };

    void build(const FabricDescription &d);
    Peer &peer(uint32_t node, unsigned port) { return peers_[portBase_[node] + port]; }
    const Peer &peer(uint32_t node, unsigned port) const { return peers_[portBase_[node] + port]; }
    unsigned portsOf(uint32_t node) const {
        const size_t end = node + 1 < portBase_.size() ? portBase_[node + 1] : peers_.size();
        return static_cast<unsigned>(end - portBase_[node] - 1);
    }
    Switch &switchOf(uint32_t node) { return *switches_[slots_[node].index]; }
    const Switch &switchOf(uint32_t node) const { return *switches_[slots_[node].index]; }
    uint32_t nodeByGuid(uint64_t guid) const;
    // A packet into `node` at `port`; what it sends goes on by emit().
    void visit(uint32_t node, unsigned port, std::span<const uint8_t> bytes, unsigned hops);
    // A packet out of `node` at `port`, to whatever is cabled there.
    void emit(uint32_t node, unsigned port, std::span<const uint8_t> bytes, unsigned hops);
    // Then onto the cable, within the budgets, to the node at its far end.
    void pass(uint32_t node, unsigned port, std::span<const uint8_t> bytes, unsigned hops);
    // The faults on the cable's ends, when it has any: the sender's `out`,
    // the receiver's `in`, then pass(). False when the cable has none.
    bool crossFaults(uint32_t node, unsigned port, std::span<const uint8_t> bytes, unsigned hops);
    void intoFarEnd(uint32_t node, unsigned port, std::span<const uint8_t> bytes, unsigned hops);
    EndFaults *faultsAt(uint32_t node, unsigned port);
    FaultInjector::Deliver outward(uint32_t node, unsigned port, EndFaults &f);
    FaultInjector::Deliver inward(uint32_t node, unsigned port, EndFaults &f);
    std::pair<uint32_t, unsigned> endOf(size_t key) const;
    static std::string faultCounters(const EndFaults &f);
    // The node and port of a fault command's GUID and PORT, which must
    // have a link inside the fabric (throws std::invalid_argument).
    std::pair<uint32_t, unsigned> innerEnd(uint64_t guid, unsigned port) const;
    std::string endName(uint32_t node, unsigned port) const;
    bool linkIsUp(uint32_t node, unsigned port) const;
    void handOnFlappedLink(uint32_t node, unsigned port, bool up);
    void flapLink(uint32_t node, unsigned port, EndFaults &f, bool down);
    uint64_t now() const;
    // Moves what is in flight until nothing is; what leaves the fabric
    // goes to send_, or into out_ when there is none.
    void pump();
    void linkEnd(uint32_t node, unsigned port, bool up);
    std::vector<Transmit> takeOut();

    std::vector<Slot> slots_;
    std::vector<std::unique_ptr<Switch>> switches_;
    std::vector<std::unique_ptr<SimulatedCa>> cas_;
    std::vector<uint64_t> guids_;  // per node
    std::vector<size_t> portBase_; // per node: where its ports start in peers_
    std::vector<Peer> peers_;      // per node, per port 0..N
    std::vector<FabricDescription::End> attachments_;
    uint8_t vlCap_ = kVlsVl0; // every simulated port's
    std::deque<InFlight> inFlight_;
    size_t deliveries_ = 0; // for the packet in
    size_t bytesInFlight_ = 0;
    size_t bytesOut_ = 0; // for the packet in
    const Forwarder *send_ = nullptr;
    std::vector<Transmit> out_;
    std::vector<Transmit> pending_; // traps of links retrained, for repeatTraps()
    // The switches that may have links to reset or a trap to repeat: what
    // takeLinkResets() and repeatTraps(), which the server runs at every
    // turn of its loop, look at. Walking every switch there cost more than
    // the SMP the turn carried at 10,000 nodes.
    std::vector<uint32_t> attention_;
    std::vector<bool> inAttention_; // per node
    void noteAttention(uint32_t node);
    void settleAttention();
    void attendAll();
    Stats stats_;
    // By the end's index into peers_ (ordered: the status lists them so).
    std::map<size_t, EndFaults> faults_;
    std::function<void(const std::string &)> faultLog_;
    uint64_t (*clock_)() = nullptr;
};

} // namespace pib::fabric
