// SPDX-License-Identifier: GPL-2.0-or-later
// A simulated channel adapter: a CA of a simulated fabric that no guest
// backs. It answers subnet management at each of its ports as an HCA's
// SMA does (NodeInfo, NodeDescription, PortInfo Get and Set, P_KeyTable,
// GUIDInfo, SLtoVL and VLArb) and the PMA's counters, so that an SM
// sweeps, configures and activates it. It has no queue pairs: every other
// packet addressed to it is dropped and counted (dataDropped()), as a CA
// silently drops a packet for a QP it does not have.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "mad.hh"
#include "mkey.hh"
#include "state_archive.hh"
#include "switch.hh"
#include "vl.hh"

namespace pib::fabric {

struct CaConfig {
    uint64_t guid = 0; // the node's; port N's is guid + N
    unsigned ports = 1;
    std::string description = "pib-hca simulated CA";
    uint8_t vlCap = kVlsVl0; // its ports' data VLs, as SwitchConfig's
};

struct CaPort {
    bool linkUp = false;
    uint8_t state = iba::kPortStateDown;
    uint16_t lid = 0;
    uint8_t lmc = 0;
    uint16_t smLid = 0;
    uint8_t smSl = 0;
    uint64_t gidPrefix = 0xfe80000000000000ull;
    uint8_t subnetTimeout = 0;
    uint8_t neighborMtu = 5; // 4096
    uint8_t operationalVls = 1;
    uint8_t hoqLife = 0;
    uint8_t vlHighLimit = 0;
    iba::MkeyProtection mkey;
    std::array<uint16_t, 32> pkeys{}; // one block, as PartitionCap says
    SlToVlTable slToVl{};
    VlArbTables vlArb;
    PortCounters counters;
};

class SimulatedCa {
  public:
    static constexpr unsigned kMaxPorts = 2;

    explicit SimulatedCa(CaConfig config);

    // A packet arrived on `port`: what the CA answers, each out of the
    // port it names (the port the request came in on).
    std::vector<Transmit> receive(unsigned port, std::span<const uint8_t> bytes);
    // The link on `port` came up (it trains to INIT, with the data VLs
    // both ends offer operational) or went down.
    void linkChanged(unsigned port, bool up, uint8_t neighborVlCap = kVlsVl0);

    const CaConfig &config() const { return config_; }
    const CaPort &port(unsigned n) const { return ports_.at(n); }
    uint64_t portGuid(unsigned n) const { return config_.guid + n; }
    // Packets that were not management for this CA: data for QPs it does
    // not have, and MADs of classes it has no agent for.
    uint64_t dataDropped() const { return dataDropped_; }
    // The M_Key lease's clock, in nanoseconds (tests set their own).
    void setClock(uint64_t (*clock)()) { clock_ = clock; }

    // Its part of a simulated fabric's saved state (sim_fabric_state.cc):
    // what the SM set at each port, and the counters. load() checks every
    // value as the SMA checks a Set, and fails `r` on the first it
    // refuses; the CA is then left half loaded (the fabric loads a copy).
    void save(StateWriter &w) const;
    void load(StateReader &r);

  private:
    std::vector<Transmit> directedRoute(unsigned in, iba::Packet &packet);
    std::vector<Transmit> lidRouted(unsigned in, iba::Packet &packet);
    // Answers the SMP in place; false when it is dropped unanswered (an
    // M_Key violation).
    bool sma(unsigned in, iba::Mad &mad);
    uint16_t smaGet(unsigned in, iba::Mad &mad, bool hideMkey) const;
    uint16_t smaSet(unsigned in, iba::Mad &mad);
    uint16_t setPortInfo(CaPort &p, const iba::Mad &mad);
    iba::PortInfo portInfo(unsigned n, bool hideMkey) const;
    std::vector<Transmit> send(unsigned port, iba::Packet &packet);
    uint64_t now() const;

    CaConfig config_;
    std::vector<CaPort> ports_; // index 0 unused: a CA's ports are 1..N
    uint64_t dataDropped_ = 0;
    uint64_t (*clock_)() = nullptr;
};

} // namespace pib::fabric
