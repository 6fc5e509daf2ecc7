// SPDX-License-Identifier: GPL-2.0-or-later
#include "crc.hh"

#include <array>

namespace pib::iba {

namespace {

template <class T, T kReflectedPoly> constexpr std::array<T, 256> makeTable() {
    std::array<T, 256> table{};
    for (unsigned i = 0; i < 256; ++i) {
        T value = static_cast<T>(i);
        for (int bit = 0; bit < 8; ++bit)
            value = static_cast<T>(value & 1 ? (value >> 1) ^ kReflectedPoly : value >> 1);
        table[i] = value;
    }
    return table;
}

constexpr auto kCrc32Table = makeTable<uint32_t, 0xedb88320u>(); // 0x04C11DB7 reflected
constexpr auto kCrc16Table = makeTable<uint16_t, 0xd008u>();     // 0x100B reflected

} // namespace

uint32_t crc32Update(uint32_t crc, std::span<const uint8_t> bytes) {
    for (uint8_t b : bytes)
        crc = kCrc32Table[(crc ^ b) & 0xff] ^ (crc >> 8);
    return crc;
}

uint16_t crc16Update(uint16_t crc, std::span<const uint8_t> bytes) {
    for (uint8_t b : bytes)
        crc = static_cast<uint16_t>(kCrc16Table[(crc ^ b) & 0xff] ^ (crc >> 8));
    return crc;
}

} // namespace pib::iba
