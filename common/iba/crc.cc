// SPDX-License-Identifier: GPL-2.0-or-later
#include "crc.hh"

#include <array>
#include <cstring>

namespace pib::iba {

namespace {

// Tables for "slicing by 8": table[0] is the classic byte-at-a-time table
// of a reflected CRC; table[k][b] is the CRC of byte b followed by k zero
// bytes. Eight bytes then cost eight lookups instead of eight dependent
// steps, which is what lets a CRC keep up with memcpy-sized packets.
template <class T, T kReflectedPoly> struct Tables {
    std::array<std::array<T, 256>, 8> t{};
    constexpr Tables() {
        for (unsigned i = 0; i < 256; ++i) {
            T value = static_cast<T>(i);
            for (int bit = 0; bit < 8; ++bit)
                value = static_cast<T>(value & 1 ? (value >> 1) ^ kReflectedPoly : value >> 1);
            t[0][i] = value;
        }
        for (unsigned k = 1; k < 8; ++k)
            for (unsigned i = 0; i < 256; ++i)
                t[k][i] = static_cast<T>((t[k - 1][i] >> 8) ^ t[0][t[k - 1][i] & 0xff]);
    }
};

constexpr Tables<uint32_t, 0xedb88320u> kCrc32; // 0x04C11DB7 reflected
constexpr Tables<uint16_t, 0xd008u> kCrc16;     // 0x100B reflected

// A reflected CRC of up to 64 bits over `bytes`, continuing `crc`.
template <class T, T P> T update(const Tables<T, P> &tab, T crc, std::span<const uint8_t> bytes) {
    const uint8_t *p = bytes.data();
    size_t n = bytes.size();
    const auto &t = tab.t;
    while (n >= 8) {
        uint64_t v;
        std::memcpy(&v, p, 8);
        static_assert(__BYTE_ORDER__ == __ORDER_LITTLE_ENDIAN__, "little-endian hosts only");
        v ^= crc; // the CRC so far lines up with the first bytes
        crc = static_cast<T>(t[7][v & 0xff] ^ t[6][(v >> 8) & 0xff] ^ t[5][(v >> 16) & 0xff] ^
                             t[4][(v >> 24) & 0xff] ^ t[3][(v >> 32) & 0xff] ^
                             t[2][(v >> 40) & 0xff] ^ t[1][(v >> 48) & 0xff] ^ t[0][v >> 56]);
        p += 8;
        n -= 8;
    }
    while (n--)
        crc = static_cast<T>(t[0][(crc ^ *p++) & 0xff] ^ (crc >> 8));
    return crc;
}

} // namespace

uint32_t crc32Update(uint32_t crc, std::span<const uint8_t> bytes) {
    return update(kCrc32, crc, bytes);
}

uint16_t crc16Update(uint16_t crc, std::span<const uint8_t> bytes) {
    return update(kCrc16, crc, bytes);
}

} // namespace pib::iba
