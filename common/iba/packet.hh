// SPDX-License-Identifier: GPL-2.0-or-later
// InfiniBand packets as they travel on a link (IBA chapter 9): the LRH,
// optional GRH, BTH, extension headers, payload, ICRC and VCRC. Builds
// them and parses untrusted bytes back, checking every length and CRC.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <vector>

namespace pib::iba {

inline constexpr uint16_t kPermissiveLid = 0xffff;
inline constexpr uint32_t kQp1Qkey = 0x80010000; // IBA 13.5.3.2

// LNH values (IBA 7.7.5).
enum Lnh : uint8_t { kLnhRaw = 0, kLnhIp = 1, kLnhIbaLocal = 2, kLnhIbaGlobal = 3 };

// BTH opcodes used so far (IBA 9.2): UD.
enum Opcode : uint8_t {
    kUdSendOnly = 0x64,
    kUdSendOnlyImm = 0x65,
};

struct Lrh {
    uint8_t vl = 0;
    uint8_t lver = 0;
    uint8_t sl = 0;
    uint8_t lnh = kLnhIbaLocal;
    uint16_t dlid = 0;
    uint16_t slid = 0;
    uint16_t pktlen = 0; // 4-byte words from LRH to ICRC; set by build()
};

struct Grh {
    uint8_t tclass = 0;
    uint32_t flowLabel = 0;
    uint16_t payLen = 0; // set by build()
    uint8_t nextHeader = 0x1b;
    uint8_t hopLimit = 0;
    std::array<uint8_t, 16> sgid{};
    std::array<uint8_t, 16> dgid{};
};

struct Bth {
    uint8_t opcode = 0;
    bool solicited = false;
    bool migReq = false;
    uint8_t padCount = 0; // set by build()
    uint8_t tver = 0;
    uint16_t pkey = 0xffff;
    uint32_t destQp = 0;
    bool ackReq = false;
    uint32_t psn = 0;
};

struct Deth {
    uint32_t qkey = 0;
    uint32_t srcQp = 0;
};

struct Packet {
    Lrh lrh;
    std::optional<Grh> grh;
    Bth bth;
    std::optional<Deth> deth;
    std::optional<uint32_t> imm; // immediate data (host order)
    std::vector<uint8_t> payload;
};

enum class ParseError {
    kNone,
    kTooShort,
    kTooLong,
    kBadLnh,
    kBadLength, // PktLen or PayLen disagree with the bytes received
    kBadVcrc,
    kBadIcrc,
    kBadVersion,
    kUnsupportedOpcode,
};

const char *toString(ParseError error);

// The bytes of `packet` on the wire; fills in PktLen, PayLen and PadCnt.
std::vector<uint8_t> build(Packet packet);

// Parses and checks `bytes`; nullopt with *error set when malformed.
std::optional<Packet> parse(std::span<const uint8_t> bytes, ParseError *error);

} // namespace pib::iba
