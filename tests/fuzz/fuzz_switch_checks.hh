// SPDX-License-Identifier: GPL-2.0-or-later
// What the switch's fuzz harnesses share: the SMP attributes they ask
// for, and their oracles (a broken one aborts, which libFuzzer reports
// as a finding).
#pragma once

#include <cstdio>
#include <cstdlib>
#include <vector>

#include "mad.hh"
#include "packet.hh"
#include "switch.hh"

namespace pib::fuzzing {

// Every attribute a switch's or a CA's SMA knows, SMInfo (which only an
// SM answers), a vendor attribute, and Mellanox's extended PortInfo
// (0xff90, which opensm asks of some devices).
inline constexpr uint16_t kSmpAttributes[] = {
    iba::kAttrNodeDescription,
    iba::kAttrNodeInfo,
    iba::kAttrSwitchInfo,
    iba::kAttrGuidInfo,
    iba::kAttrPortInfo,
    iba::kAttrPkeyTable,
    iba::kAttrSlToVlTable,
    iba::kAttrVlArbTable,
    iba::kAttrLinearForwardingTable,
    iba::kAttrMulticastForwardingTable,
    iba::kAttrClassPortInfo,
    0x0020,
    0xff00,
    0xff90,
};

inline void check(bool ok, const char *harness, const char *what) {
    if (!ok) {
        std::fprintf(stderr, "%s: invariant broken: %s\n", harness, what);
        std::abort();
    }
}

// What a switch (or a simulated fabric) sent: packets that parse, out of
// ports 1..ports.
inline void checkOutput(const std::vector<fabric::Transmit> &out, unsigned ports,
                        const char *harness) {
    for (const fabric::Transmit &t : out) {
        check(t.port >= 1 && t.port <= ports, harness,
              "a packet sent out of a port that does not exist");
        iba::ParseError error;
        check(iba::parse(t.packet, &error, /*checkIcrc=*/false).has_value(), harness,
              "a packet sent that does not parse");
    }
}

} // namespace pib::fuzzing
