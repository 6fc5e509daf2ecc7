// SPDX-License-Identifier: GPL-2.0-or-later
// The two CRCs of an InfiniBand packet (IBA 7.8): the 32-bit invariant CRC
// and the 16-bit variant CRC.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace pib::iba {

// CRC-32 (polynomial 0x04C11DB7, reflected, as Ethernet), continuing `crc`.
// Start with 0xffffffff and complement the result.
uint32_t crc32Update(uint32_t crc, std::span<const uint8_t> bytes);

// CRC-16 (polynomial 0x100B, reflected), continuing `crc`. Start with
// 0xffff and complement the result.
uint16_t crc16Update(uint16_t crc, std::span<const uint8_t> bytes);

// Both of the above over the same bytes, in one pass: *crc32 and *crc16
// continue as crc32Update and crc16Update would continue them.
void crc32And16Update(uint32_t *crc32, uint16_t *crc16, std::span<const uint8_t> bytes);

// The same, except that the CRC-32 sees bytes[4] XORed with crc32Flip4
// (bytes.size() >= 5). Started at a BTH, this is the ICRC, which takes the
// BTH's reserved byte as all ones, and the VCRC, which takes it as it is,
// in one pass.
void crc32And16Update(uint32_t *crc32, uint16_t *crc16, std::span<const uint8_t> bytes,
                      uint8_t crc32Flip4);

} // namespace pib::iba
