// SPDX-License-Identifier: GPL-2.0-or-later
// The state of the device's ports: what QUERY_PORT and the SMA report,
// the counters the PMA reads, the tables the SM writes, and whether the
// host's queue toward the switch has room.
#pragma once

#include <array>
#include <cstdint>
#include <deque>

#include "invariant.hh"
#include "mkey.hh"
#include "pib_core.h"
#include "pib_hw.h"
#include "state_archive.hh"

namespace pib {

struct PortState {
    pib_port_info info{};
    // IBA PortCounters, kept from the first link.
    uint64_t rcvPackets = 0;
    uint64_t rcvWords = 0;
    uint64_t rcvErrors = 0;
    uint64_t xmitPackets = 0;
    uint64_t xmitWords = 0;
    // The transport's counters (QUERY_COUNTERS); the packet counts above.
    pib_port_counters transport{};
    // SMA state beyond pib_port_info.
    iba::MkeyProtection mkey;
    uint64_t trapsHeldUntilNs = 0; // traps wait 4.096 us * 2^SubnetTimeout apart (IBA o14-2)
    uint8_t hoqLife = 0;
    uint8_t vlHighLimit = 0;
    std::array<uint8_t, 8> slToVl{};
    std::array<uint8_t, 64> vlArb{};
    std::array<uint16_t, PIB_PKEY_TABLE_LEN> pkeys{};
    std::array<uint64_t, PIB_GUID_TABLE_LEN> guids{};
    // The host said its queue for this port is full: QPs with work for
    // the port wait here until it has room (scheduler.cc).
    bool txFull = false;
    std::deque<uint32_t> waiting;
    // Its device moved, or tried to, since the port last became ACTIVE:
    // when the link resumes, and when the port is ACTIVE again on a new
    // link (a failed move's cable the switch did not keep), its QPs say
    // what was lost (DataPath::resendWhatWasLost).
    bool moved = false;
};

class Ports {
  public:
    explicit Ports(const pib_core_config &config) : config_(config) { reset(); }

    // Port `number` (1-based), or nullptr if the device has no such port.
    PortState *find(uint32_t number) {
        return number >= 1 && number <= config_.num_ports ? &ports_[number - 1] : nullptr;
    }
    const PortState *find(uint32_t number) const {
        return number >= 1 && number <= config_.num_ports ? &ports_[number - 1] : nullptr;
    }
    // Port `number`, which the caller knows the device has (a number
    // taken from a QP the commands checked, or from the device's own
    // loops): one it lacks is a bug in the core (invariant.hh).
    PortState &at(uint32_t number) {
        PortState *p = find(number);
        PIB_INVARIANT(p != nullptr);
        return *p;
    }
    // Every port back to its power-on state: down, polling for a peer,
    // with the default partition and its own GUID.
    void reset();
    // Every port's attributes, tables and counters, and the node
    // description, in the device's saved state. What a port's cable
    // carries now (txFull, the QPs waiting for room) is not: a loaded
    // device's cables are new. load() takes nothing unless all is valid.
    void save(StateWriter &w) const;
    void load(StateReader &r);

    // The NodeDescription the SMA reports (SET_NODE_DESC, or a ConnectX's
    // NODE_DESC register).
    std::array<char, PIB_NODE_DESC_LEN> nodeDesc{};
    // Who NodeInfo says made the node: IBA's VendorID is an IEEE OUI, the
    // DeviceID and Revision are the vendor's. A personality that is
    // another vendor's device says so (mlx5_front_end.cc).
    struct NodeIdentity {
        uint32_t vendorId = PIB_PCI_VENDOR_ID;
        uint16_t deviceId = PIB_PCI_DEVICE_ID;
        uint32_t revision = PIB_PCI_REVISION;
    };
    NodeIdentity identity;

  private:
    const pib_core_config &config_;
    std::array<PortState, PIB_MAX_PORTS> ports_{};
};

} // namespace pib
