// SPDX-License-Identifier: GPL-2.0-or-later
// Virtual lanes at a port of the switch or of a simulated CA (IBA 7.6):
// how PortInfo counts data VLs, the SL-to-VL table, and the VL
// arbitration tables the SM writes. Shared by the switch's SMA and the
// simulated CA's, which answer these attributes alike.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <utility>

#include "mad.hh"
#include "smp.hh"

namespace pib::fabric {

// PortInfo's VLCap and OperationalVLs: 1 is VL0, 2 VL0-1, 3 VL0-3, 4 VL0-7
// (5, VL0-14, is more than a port here offers).
inline constexpr uint8_t kVlsVl0 = 1;
inline constexpr uint8_t kVlsMost = 4;
inline constexpr uint8_t kVl15 = 15; // management only; an SL mapped to it is dropped
// PortInfo's CapabilityMask bit IsSLMappingSupported: an SM writes
// SL-to-VL tables only to a port (a switch's port 0) that says it. A port
// of VL0 only does not: every SL goes on VL0 whatever a table would say.
inline constexpr uint32_t kIsSlMappingSupported = 1u << 6;

constexpr uint32_t vlCapabilities(uint8_t vlCap) {
    return vlCap > kVlsVl0 ? kIsSlMappingSupported : 0;
}

// The data VLs of a VLCap or OperationalVLs code; 0 for a code a port
// here cannot have.
constexpr unsigned dataVls(uint8_t code) {
    return code >= kVlsVl0 && code <= kVlsMost ? 1u << (code - 1) : 0;
}

// The code of `vls` data VLs (1, 2, 4 or 8); 0 for another number.
constexpr uint8_t vlsCode(unsigned vls) {
    for (uint8_t code = kVlsVl0; code <= kVlsMost; ++code)
        if (dataVls(code) == vls)
            return code;
    return 0;
}

// An SL-to-VL table: 16 four-bit entries, SL0's in the high half of
// byte 0 (IBA 14.2.5.8). All zeros, every SL on VL0, until the SM writes it.
using SlToVlTable = std::array<uint8_t, 8>;

constexpr uint8_t vlOfSl(const SlToVlTable &table, uint8_t sl) {
    const uint8_t pair = table[(sl & 15) / 2];
    return sl & 1 ? pair & 15 : pair >> 4;
}

// The VL arbitration tables of a port (IBA 14.2.5.9): a low- and a
// high-priority table of kEntries (VL, weight) entries each, as PortInfo's
// VLArbitrationLowCap and HighCap say. The attribute's blocks 1 and 2 are
// the low table's entries 0-31 and 32-63, blocks 3 and 4 the high
// table's; entries beyond kEntries read as 0 and what is written to them
// is ignored. The tables are kept as the SM writes them; a port sends
// its packets in the order they came whatever their VL (docs/wire.md).
class VlArbTables {
  public:
    static constexpr unsigned kEntries = 16;
    static constexpr size_t kEntryBytes = 2;

    static bool validBlock(unsigned block) { return block >= 1 && block <= 4; }

    void get(unsigned block, iba::Mad &mad) const {
        const auto [at, length] = held(block);
        std::array<uint8_t, 32 * kEntryBytes> out{};
        std::copy_n(bytes.begin() + at, length, out.begin());
        iba::writeBytes(mad, out);
    }
    void set(unsigned block, const iba::Mad &mad) {
        const auto [at, length] = held(block);
        std::array<uint8_t, 32 * kEntryBytes> in{};
        iba::readBytes(mad, in);
        std::copy_n(in.begin(), length, bytes.begin() + at);
    }

    // Both tables, low then high: what a switch's saved state holds.
    std::array<uint8_t, 2 * kEntries * kEntryBytes> bytes{};

  private:
    // Where the entries of `block` that the tables hold are in `bytes`:
    // (offset, length); none of blocks 2 and 4.
    static std::pair<size_t, size_t> held(unsigned block) {
        constexpr size_t table = kEntries * kEntryBytes;
        if (block == 1 || block == 3)
            return {block == 1 ? 0 : table, table};
        return {0, 0};
    }
};

} // namespace pib::fabric
