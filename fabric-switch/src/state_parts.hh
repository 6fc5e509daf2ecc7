// SPDX-License-Identifier: GPL-2.0-or-later
// What the saved states of a switch (switch_state.cc) and of a simulated
// CA (sim_fabric_state.cc) share: a port's counters, a table of bytes
// and an M_Key's protection, each written and read back the same way.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "mkey.hh"
#include "state_archive.hh"
#include "switch.hh"

namespace pib::fabric::state {

// What no SM can set, and a state is refused for: an MTU above 4096, an
// LMC or subnet timeout beyond their fields.
constexpr uint8_t kMaxMtu = 5; // 4096
constexpr uint8_t kMaxLmc = 7;
constexpr uint8_t kMaxSubnetTimeout = 31;

inline void saveCounters(StateWriter &w, const PortCounters &c) {
    for (uint64_t v :
         {c.xmitData, c.rcvData, c.xmitPackets, c.rcvPackets, c.rcvErrors, c.xmitDiscards,
          c.vl15Dropped, c.xmitConstraintErrors, c.rcvConstraintErrors})
        w.u64(v);
    w.u32(c.linkDowned);
}

inline void loadCounters(StateReader &r, PortCounters &c) {
    for (uint64_t *v :
         {&c.xmitData, &c.rcvData, &c.xmitPackets, &c.rcvPackets, &c.rcvErrors, &c.xmitDiscards,
          &c.vl15Dropped, &c.xmitConstraintErrors, &c.rcvConstraintErrors})
        *v = r.u64();
    c.linkDowned = r.u32();
}

// A table StateWriter::bytes wrote: exactly N bytes, or the state fails.
template <size_t N> void loadTable(StateReader &r, std::array<uint8_t, N> &t, const char *what) {
    const std::vector<uint8_t> b = r.bytes(N, what);
    if (r.ok() && b.size() != N)
        r.fail(std::string(what) + ": " + std::to_string(b.size()) + " bytes, not " +
               std::to_string(N));
    if (r.ok())
        std::copy(b.begin(), b.end(), t.begin());
}

// The M_Key and its protection at `nowNs`; a running lease as what is
// left of it, for the process that loads it runs another clock.
inline void saveMkey(StateWriter &w, const iba::MkeyProtection &mkey, uint64_t nowNs) {
    const iba::MkeyProtection::Saved m = mkey.saved();
    w.u64(m.key);
    w.u8(m.protectBits);
    w.u16(m.leasePeriod);
    w.u64(m.leaseEndsNs == 0
              ? 0
              : std::max<uint64_t>(m.leaseEndsNs - std::min(m.leaseEndsNs, nowNs), 1));
    w.u16(m.violations);
}

// Read back into `mkey` at `nowNs`; the state fails on protect bits IBA
// does not define.
inline void loadMkey(StateReader &r, iba::MkeyProtection &mkey, uint64_t nowNs) {
    iba::MkeyProtection::Saved m{};
    m.key = r.u64();
    m.protectBits = r.u8();
    m.leasePeriod = r.u16();
    const uint64_t leaseLeft = r.u64();
    m.violations = r.u16();
    m.leaseEndsNs = leaseLeft == 0 ? 0 : nowNs + leaseLeft;
    if (r.ok() && !mkey.restore(m))
        r.fail("M_Key protect bits " + std::to_string(m.protectBits));
}

} // namespace pib::fabric::state
