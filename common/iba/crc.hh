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

// Both CRCs as crc32And16Update(..., crc32Flip4) computes them, over bytes
// that come in pieces, each folded as it comes and copied on the way when
// it lands somewhere else: the device checksums a payload in the pass
// that reads it from guest memory.
class JointCrcStream {
  public:
    JointCrcStream(uint32_t crc32, uint16_t crc16, uint8_t crc32Flip4);
    // The next n bytes, at src; copied to dst as well unless dst == src.
    void add(uint8_t *dst, const uint8_t *src, size_t n);
    void finish(uint32_t *crc32, uint16_t *crc16);

  private:
    // With 256-bit carry-less multiplication the stream folds (modulo the
    // product of the polynomials, in groups of 128 bytes); without, the
    // first 128 bytes are gathered, and past them the running values go
    // on piece by piece.
    void addFolding(uint8_t *dst, const uint8_t *src, size_t n);
    void finishFolding(uint32_t *crc32, uint16_t *crc16);
    void foldGroups(uint8_t *dst, const uint8_t *src, size_t groups);
    void finishPending(uint32_t *crc32, uint16_t *crc16) const;
    void updateRunning(std::span<const uint8_t> bytes);

    uint32_t crc32_;
    uint16_t crc16_;
    uint8_t flip_;
    bool started_ = false;
    size_t seen_ = 0; // bytes added, when not folding
    // Folding: the bytes of a group not yet whole; else the first bytes
    // of a stream not yet 128 long.
    size_t pendingBytes_ = 0;
    alignas(32) uint8_t accumulators_[128]; // four 256-bit streams, once started
    alignas(32) uint8_t pending_[128];
};

} // namespace pib::iba
