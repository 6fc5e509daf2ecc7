// SPDX-License-Identifier: GPL-2.0-or-later
// An InfiniBand switch: the forwarding tables, the subnet management agent
// (SMA), the performance management agent (PMA) and directed-route SMP
// handling. Pure logic: packets in, packets out; the server wires it to
// sockets.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "forwarding_tables.hh"
#include "mad.hh"
#include "mkey.hh"
#include "packet.hh"
#include "smp.hh"
#include "state_archive.hh"
#include "vl.hh"

namespace pib::fabric {

struct SwitchConfig {
    uint64_t guid = 0;
    unsigned ports = 8; // external ports 1..ports (port 0 is the switch itself)
    std::string description = "pib-hca fabric switch";
    // Data packets an ARMED port holds until it goes ACTIVE (see
    // SwitchPort::held); a simulated fabric's switches hold none, so that
    // its thousands of ports bound nothing a guest could fill.
    size_t heldWhileArmed = 16;
    // The data VLs each port offers (PortInfo's VLCap: kVlsVl0 is VL0
    // only, kVlsMost VL0-7). The SM's SL-to-VL tables put each packet on
    // one of them, hop by hop.
    uint8_t vlCap = kVlsVl0;
};

struct PortCounters {
    uint64_t xmitData = 0; // 4-byte words, as IBA counts them
    uint64_t rcvData = 0;
    uint64_t xmitPackets = 0;
    uint64_t rcvPackets = 0;
    uint64_t rcvErrors = 0;
    uint64_t xmitDiscards = 0;
    uint64_t vl15Dropped = 0;
    uint32_t linkDowned = 0;
    uint64_t xmitConstraintErrors = 0; // dropped by the egress port's partitions
    uint64_t rcvConstraintErrors = 0;  // dropped by the ingress port's partitions
};

// PortInfo's partition enforcement bits (IBA 14.2.5.6), which SwitchInfo
// also offers as capabilities. Raw packets are not filtered: the switch
// forwards IBA packets only, so it offers neither FilterRaw bit.
inline constexpr uint8_t kEnforceInbound = 1 << 3;
inline constexpr uint8_t kEnforceOutbound = 1 << 2;

// Whether a packet's P_Key names a partition the table holds: the same
// 15-bit key. A switch does not look at the membership bit (IBA 10.9.2):
// opensm gives the switch port a limited member's own table, so two
// limited members are kept apart by their HCAs, not by the switch. A
// key whose 15 bits are 0 names no partition.
bool pkeyAdmitted(std::span<const uint16_t> table, uint16_t pkey);

// Answers a PerfMgt MAD in place (pma.cc): ClassPortInfo, and a port's
// PortCounters or PortCountersExtended, which `countersOf` gives for the
// MAD's PortSelect (nullptr: no such port).
void answerPma(iba::Mad mad, const std::function<PortCounters *(unsigned port)> &countersOf);

// "ACTIVE" for kPortStateActive; "?" for what IBA does not define.
const char *stateName(uint8_t state);

struct SwitchPort {
    bool linkUp = false;
    uint8_t state = iba::kPortStateDown;
    uint8_t neighborMtu = 5; // 4096
    uint8_t operationalVls = 1;
    uint8_t hoqLife = 0;
    uint8_t vlHighLimit = 0;
    VlArbTables vlArb;
    // Port 0's is the switch's own; an external port's filters what it
    // forwards when `enforcement` says so.
    std::array<uint16_t, 32> pkeys{};
    uint8_t enforcement = 0; // kEnforceInbound, kEnforceOutbound
    PortCounters counters;
    // Data for this port while it is ARMED: the SM activates the two ends
    // of a link one after the other, and what a neighbour already ACTIVE
    // sends through it in between waits (a few, see kHeldWhileArmed).
    struct Held {
        std::vector<uint8_t> packet;
        uint16_t pkey;
    };
    std::vector<Held> held;
};

struct Transmit {
    unsigned port;
    std::vector<uint8_t> packet;
};

// Where the switch passes on a packet it forwards as it came: the egress
// port and the bytes receive() was given, valid during the call only.
using Forwarder = std::function<void(unsigned port, std::span<const uint8_t> packet)>;

class Switch {
  public:
    explicit Switch(SwitchConfig config);

    // A packet arrived on external port `port`. What the switch forwards
    // goes to `send` as it came, not copied; what it builds or releases
    // (answers, traps, packets a port held while ARMED) is returned, to
    // go out after those. With `vcrcGood`, the caller checked the VCRC
    // already (iba::vcrcGood, on a forwarding thread).
    std::vector<Transmit> receive(unsigned port, std::span<const uint8_t> bytes,
                                  const Forwarder &send, bool vcrcGood = false);
    // The same, with the forwarded packets copied into what it returns.
    std::vector<Transmit> receive(unsigned port, std::span<const uint8_t> bytes);
    // The link on an external port came up (both ends said HELLO) or went
    // down; returns the Trap 128 that tells the SM, once it has configured us.
    // A link comes up with the data VLs both ends offer operational: the
    // neighbour's VLCap, when the switch knows it (a simulated fabric's
    // links), or VL0 only.
    std::vector<Transmit> linkChanged(unsigned port, bool up, uint8_t neighborVlCap = kVlsVl0);

    const SwitchConfig &config() const { return config_; }
    const SwitchPort &port(unsigned n) const { return ports_.at(n); }
    uint16_t lid() const { return lid_; }
    uint8_t lftEntry(uint16_t lid) const { return tables_.port(lid); }
    const ForwardingTables &tables() const { return tables_; }
    // The VL a packet of service level `sl` takes from port `in` to port
    // `out` (IBA 7.6.6), by the SM's SL-to-VL table of that pair.
    uint8_t vlFor(unsigned in, unsigned out, uint8_t sl) const;
    bool portStateChange() const { return portStateChange_; }

    // The server could not pass on a packet the switch sent out of `port`
    // (its peer takes nothing): counted as discarded, not as sent.
    void discarded(unsigned port, size_t bytes);

    // Receives a line for every packet the switch drops, and why.
    void setDropLogger(std::function<void(const std::string &)> log) { dropLog_ = std::move(log); }
    // Receives a line for every port state the SM sets.
    void setEventLogger(std::function<void(const std::string &)> log) {
        eventLog_ = std::move(log);
    }
    // A Trap 128 the SM has not repressed, sent again once its repeat
    // interval has passed (call this now and then).
    std::vector<Transmit> repeatTraps();
    // Ports the SM set DOWN since the last call: their links must go down
    // at both ends and train again (the server closes their cables).
    std::vector<unsigned> takeLinkResets() { return std::exchange(linkResets_, {}); }
    // Whether takeLinkResets() or repeatTraps() has anything to do: a
    // simulated fabric asks its thousands of switches every turn.
    bool linkResetsPending() const { return !linkResets_.empty(); }
    bool trapPending() const { return unrepressed_.has_value(); }
    // The clock of the M_Key lease, in nanoseconds (a steady clock unless
    // a test sets its own).
    void setClock(std::function<uint64_t()> clock) { clock_ = std::move(clock); }
    const iba::MkeyProtection &mkey() const { return mkey_; }

    // The switch's state for a fabric snapshot (switch_state.cc): what the
    // SM configured and what the ports counted. load() takes only a state
    // this switch's GUID and port count saved; one it refuses leaves the
    // switch as it was, and `r` says why.
    void save(StateWriter &w) const;
    bool load(StateReader &r);

    static constexpr unsigned kLftCap = ForwardingTables::kLftCap; // unicast LIDs
    static constexpr size_t kHeldWhileArmed = 16;                  // packets per port, by default
    static constexpr unsigned kMftCap = ForwardingTables::kMftCap; // multicast LIDs from 0xc000

  private:
    void loadFrom(StateReader &r);

    // Management.
    std::vector<Transmit> directedRoute(unsigned in, iba::Packet packet,
                                        std::span<const uint8_t> bytes, const Forwarder &send);
    void stepBack(std::vector<Transmit> &out, unsigned in, iba::Packet &packet, unsigned hop);
    void sendDirected(std::vector<Transmit> &out, unsigned in, iba::Packet &packet, unsigned port);
    void sendByLid(std::vector<Transmit> &out, unsigned in, iba::Packet &packet, uint16_t dlid);
    std::vector<Transmit> toSwitch(unsigned in, iba::Packet packet);
    // False when the SMP is dropped unanswered: a response, or an M_Key
    // violation (whose Trap 256 goes to `out`: mkeyAdmits()).
    bool sma(iba::Mad mad, unsigned in, std::vector<Transmit> &out);
    bool mkeyAdmits(const iba::Mad &mad, unsigned in, std::vector<Transmit> &out);
    void pma(iba::Mad mad);
    std::optional<size_t> slToVlPair(uint32_t mod) const; // its index in slToVl_
    uint16_t smaGet(iba::Mad &mad, unsigned in);
    uint16_t smaSet(iba::Mad &mad, unsigned in);
    void nodeInfo(iba::Mad &mad, unsigned in) const;
    void switchInfo(iba::Mad &mad) const;
    void portInfo(iba::Mad &mad, unsigned port, unsigned in) const;
    uint16_t setSwitchInfo(iba::Mad &mad);
    uint16_t setPortInfo(iba::Mad &mad, unsigned port);
    uint16_t applyPortInfo(iba::Mad &mad, unsigned port);
    std::vector<Transmit> trap128();
    uint64_t trapRepeatNs() const;
    void trapRepressed(const iba::Mad &repress);
    uint64_t now() const;
    void trapToSm(std::vector<Transmit> &out, std::vector<uint8_t> mad);
    std::vector<Transmit> reply(const iba::Packet &request, std::vector<uint8_t> mad, unsigned out);

    // Forwarding.
    // Whether port `out` may send a data packet that came in on `in`: its
    // VL by the SL-to-VL table of the pair is one `out` runs (a packet put
    // on VL15, or beyond the port's OperationalVLs, is discarded, IBA
    // 7.6.6). `bytes` is then what goes: the packet, or a copy on its new
    // VL (relabelled_).
    bool onVl(unsigned in, unsigned out, const iba::Packet &packet,
              std::span<const uint8_t> &bytes);
    void forward(unsigned in, const iba::Packet &packet, std::span<const uint8_t> bytes,
                 const Forwarder &send);
    std::vector<Transmit> receivePacket(unsigned in, std::span<const uint8_t> bytes,
                                        const Forwarder &send, bool vcrcGood);
    // A port left ARMED: to ACTIVE, what it held goes out with the
    // current call's packets; otherwise it is discarded.
    void portStateLeft(unsigned port, uint8_t before);
    void transmit(std::vector<Transmit> &out, unsigned port, std::vector<uint8_t> bytes,
                  bool management, uint16_t pkey);
    // Whether `port` sends the packet now (counted as sent). A port still
    // ARMED keeps a copy of a few data packets until it goes ACTIVE.
    bool admit(unsigned port, std::span<const uint8_t> bytes, bool management, uint16_t pkey);

    SwitchConfig config_;
    std::vector<SwitchPort> ports_; // index 0: the switch management port
    uint16_t lid_ = 0;
    uint16_t smLid_ = 0;
    uint8_t lmc_ = 0;
    iba::MkeyProtection mkey_; // port 0's, which protects the whole switch
    bool hideMkey_ = false;    // the Get being answered may not see the M_Key
    uint64_t gidPrefix_ = 0xfe80000000000000ull;
    uint8_t subnetTimeout_ = 0;
    uint16_t linearFdbTop_ = 0;
    uint16_t multicastFdbTop_ = 0;
    uint8_t defaultPort_ = 0;
    uint8_t lifeTime_ = 0;
    bool portStateChange_ = false;
    uint64_t trapTid_ = 0;
    ForwardingTables tables_;
    // The SL-to-VL table of each (input, output) pair of ports, (ports +
    // 1)^2 of them at [in * (ports + 1) + out]; empty, every SL on VL0,
    // until the SM writes one (a fabric of thousands of switches whose SM
    // runs no QoS never pays for them).
    std::vector<SlToVlTable> slToVl_;
    std::vector<uint8_t> relabelled_; // a forwarded packet on its new VL
    struct UnrepressedTrap {
        std::vector<uint8_t> mad;
        uint64_t tid;
        uint64_t dueNs; // when it goes again
        unsigned repeats;
    };
    std::optional<UnrepressedTrap> unrepressed_;
    std::vector<unsigned> linkResets_;
    std::vector<Transmit> released_; // held packets whose port went ACTIVE
    std::function<void(const std::string &)> dropLog_;
    std::function<void(const std::string &)> eventLog_;
    void event(const std::string &line) const {
        if (eventLog_)
            eventLog_(line);
    }
    std::function<uint64_t()> clock_;
    void dropped(unsigned port, const char *why, unsigned a = 0, unsigned b = 0);
};

} // namespace pib::fabric
