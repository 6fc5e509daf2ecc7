// SPDX-License-Identifier: GPL-2.0-or-later
// The addressing rules that the device and the switch both apply: which
// LIDs are multicast, which LIDs a port with an LMC answers to, and when
// two P_Keys are of the same partition. One definition of each, so that
// no transport or role can drift from the others.
#pragma once

#include <cstdint>

namespace pib::iba {

// IBA 4.1.1: multicast LIDs are 0xC000..0xFFFE; 0xFFFF is the permissive LID.
inline constexpr uint16_t kMulticastLidFirst = 0xc000;
inline constexpr uint16_t kMulticastLidLast = 0xfffe;

constexpr bool isMulticastLid(uint16_t lid) {
    return lid >= kMulticastLidFirst && lid <= kMulticastLidLast;
}

// 0x0001..0xBFFF: a port's LID (0 is none yet).
constexpr bool isUnicastLid(uint16_t lid) {
    return lid != 0 && lid < kMulticastLidFirst;
}

// IBA 7.11.1: a port with base LID `base` (its low `lmc` bits 0, as the
// SM assigns it) and LID Mask Control `lmc` answers to the 2^lmc LIDs
// that differ from `base` only in those bits, the path bits. A port
// without a LID answers to none.
constexpr uint16_t lidMask(uint8_t lmc) {
    return static_cast<uint16_t>(~((1u << (lmc & 7)) - 1));
}

constexpr bool portAnswersTo(uint16_t base, uint8_t lmc, uint16_t dlid) {
    return base != 0 && (dlid & lidMask(lmc)) == base;
}

constexpr uint8_t pathBits(uint8_t lmc, uint16_t dlid) {
    return static_cast<uint8_t>(dlid & ~lidMask(lmc));
}

// IBA 10.9.3: bit 15 of a P_Key is its membership (1 full, 0 limited),
// the low 15 bits its partition; a partition of 0 is no P_Key at all.
// Two keys match when their partitions are equal and at least one of them
// is a full member: two limited members may not talk to each other.
inline constexpr uint16_t kPkeyFullMember = 0x8000;
inline constexpr uint16_t kPkeyPartitionMask = 0x7fff;

constexpr bool pkeysMatch(uint16_t mine, uint16_t theirs) {
    return (mine & kPkeyPartitionMask) != 0 &&
           (mine & kPkeyPartitionMask) == (theirs & kPkeyPartitionMask) &&
           ((mine | theirs) & kPkeyFullMember) != 0;
}

} // namespace pib::iba
