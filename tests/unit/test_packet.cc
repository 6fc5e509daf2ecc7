// SPDX-License-Identifier: GPL-2.0-or-later
// IBA packet building and parsing (common/iba).
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "crc.hh"
#include "packet.hh"

using namespace pib::iba;

namespace {

Packet udPacket(size_t payload, bool grh, bool imm) {
    Packet p;
    p.lrh.vl = 0;
    p.lrh.sl = 3;
    p.lrh.dlid = 0x12;
    p.lrh.slid = 0x34;
    if (grh) {
        Grh g;
        g.tclass = 0x5a;
        g.flowLabel = 0x12345;
        g.hopLimit = 64;
        g.sgid[0] = 0xfe;
        g.dgid[15] = 7;
        p.grh = g;
    }
    p.bth.opcode = imm ? kUdSendOnlyImm : kUdSendOnly;
    p.bth.solicited = true;
    p.bth.pkey = 0xffff;
    p.bth.destQp = 0xabcdef;
    p.bth.psn = 0x123456;
    p.deth = Deth{0x11111111, 0x000123};
    if (imm)
        p.imm = 0xdeadbeef;
    for (size_t i = 0; i < payload; ++i)
        p.payload.push_back(static_cast<uint8_t>(i * 7));
    return p;
}

// The reflected CRCs of IBA 7.8, one bit at a time.
uint32_t crc32Bits(uint32_t crc, std::span<const uint8_t> bytes) {
    for (uint8_t b : bytes) {
        crc ^= b;
        for (int i = 0; i < 8; ++i)
            crc = crc & 1 ? (crc >> 1) ^ 0xedb88320u : crc >> 1;
    }
    return crc;
}

uint16_t crc16Bits(uint16_t crc, std::span<const uint8_t> bytes) {
    for (uint8_t b : bytes) {
        crc ^= b;
        for (int i = 0; i < 8; ++i)
            crc = static_cast<uint16_t>(crc & 1 ? (crc >> 1) ^ 0xd008u : crc >> 1);
    }
    return crc;
}

// Recomputes the VCRC after a test changed a byte on purpose.
void fixVcrc(std::vector<uint8_t> &bytes) {
    const size_t n = bytes.size() - 2;
    const auto vcrc = static_cast<uint16_t>(~crc16Update(0xffff, std::span(bytes).first(n)));
    bytes[n] = static_cast<uint8_t>(vcrc);
    bytes[n + 1] = static_cast<uint8_t>(vcrc >> 8);
}

} // namespace

TEST_CASE("the CRCs match their reference check values", "[packet]") {
    const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
    CHECK(~crc32Update(0xffffffffu, check) == 0xcbf43926u); // CRC-32/ISO-HDLC
}

TEST_CASE("UD packets survive a round trip", "[packet]") {
    const bool grh = GENERATE(false, true);
    const bool imm = GENERATE(false, true);
    const size_t size = GENERATE(0, 1, 2, 3, 4, 256, 4093, 4096);
    const Packet sent = udPacket(size, grh, imm);
    const auto bytes = build(sent);
    CHECK(bytes.size() % 4 == 2); // whole words plus the VCRC
    ParseError error;
    const auto got = parse(bytes, &error);
    REQUIRE(got);
    CHECK(error == ParseError::kNone);
    CHECK(got->payload == sent.payload);
    CHECK(got->lrh.dlid == 0x12);
    CHECK(got->lrh.slid == 0x34);
    CHECK(got->lrh.sl == 3);
    CHECK(got->lrh.pktlen * 4u == bytes.size() - 2);
    CHECK(got->bth.destQp == 0xabcdef);
    CHECK(got->bth.psn == 0x123456);
    CHECK(got->bth.solicited);
    CHECK(got->bth.padCount == (4 - size % 4) % 4);
    CHECK(got->deth->qkey == 0x11111111u);
    CHECK(got->deth->srcQp == 0x123u);
    CHECK(got->grh.has_value() == grh);
    if (grh) {
        CHECK(got->grh->tclass == 0x5a);
        CHECK(got->grh->flowLabel == 0x12345u);
        CHECK(got->grh->dgid[15] == 7);
    }
    CHECK(got->imm.has_value() == imm);
    if (imm)
        CHECK(*got->imm == 0xdeadbeefu);
}

TEST_CASE("built packets carry the ICRC and VCRC of their definitions", "[packet]") {
    // IBA 7.8.1 by the letter: the ICRC over the packet with the LRH, the
    // GRH's TClass, flow label and hop limit and the BTH's reserved byte
    // all ones; the VCRC over everything before it. Both are sent
    // least significant byte first.
    auto icrcOf = [](std::span<const uint8_t> packet, bool grh) {
        std::vector<uint8_t> masked(packet.begin(), packet.end() - 6);
        std::fill_n(masked.begin(), 8, 0xff);
        const size_t bth = grh ? 48 : 8;
        if (grh) {
            masked[8] |= 0x0f;
            std::fill_n(masked.begin() + 9, 3, 0xff);
            masked[15] = 0xff;
        }
        masked[bth + 4] = 0xff;
        return ~crc32Bits(0xffffffffu, masked);
    };
    auto trailer = [](std::span<const uint8_t> packet, size_t fromEnd, size_t size) {
        uint32_t v = 0;
        for (size_t i = 0; i < size; ++i)
            v |= uint32_t{packet[packet.size() - fromEnd + i]} << (8 * i);
        return v;
    };
    for (bool grh : {false, true})
        for (size_t payload : {0u, 60u, 256u, 300u, 4096u}) {
            CAPTURE(grh, payload);
            auto bytes = build(udPacket(payload, grh, false));
            CHECK(trailer(bytes, 6, 4) == icrcOf(bytes, grh));
            const auto vcrc =
                static_cast<uint16_t>(~crc16Bits(0xffff, std::span(bytes).first(bytes.size() - 2)));
            CHECK(trailer(bytes, 2, 2) == vcrc);
            // The BTH's reserved byte is variant: set in flight, it breaks
            // the VCRC only.
            bytes[(grh ? 48 : 8) + 4] = 0x5a;
            fixVcrc(bytes);
            ParseError error = ParseError::kNone;
            CHECK(parse(bytes, &error));
            CHECK(error == ParseError::kNone);
        }
}

TEST_CASE("a payload written piece by piece makes the same packet", "[packet]") {
    for (bool grh : {false, true})
        for (size_t payload : {0u, 3u, 100u, 4093u, 4096u}) {
            CAPTURE(grh, payload);
            const Packet p = udPacket(payload, grh, true);
            const auto whole = build(p, 8);
            PacketWriter writer(p, payload, 8);
            size_t at = 0, piece = 1;
            while (at < payload) { // appended and filled in place, by turns
                const size_t n = std::min(piece, payload - at);
                if (piece % 2)
                    writer.append(p.payload.data() + at, n);
                else
                    std::memcpy(writer.appendRoom(n).data(), p.payload.data() + at, n);
                at += n;
                piece = piece * 3 + 1;
            }
            CHECK(std::move(writer).finish() == whole);
        }
}

TEST_CASE("a packet in shared memory parses from its private head", "[packet]") {
    for (bool grh : {false, true})
        for (size_t payload : {0u, 100u, 4096u}) {
            CAPTURE(grh, payload);
            const Packet p = udPacket(payload, grh, true);
            const auto bytes = build(p);
            ParseError error;
            const auto copied = parse(bytes, &error, true, false);
            REQUIRE(copied);
            std::vector<uint8_t> head(bytes.begin(),
                                      bytes.begin() + std::min(bytes.size(), kMaxHeaderBytes));
            const auto shared = parseShared(bytes, head, &error);
            REQUIRE(shared);
            CHECK(shared->bth.psn == copied->bth.psn);
            CHECK(shared->deth->qkey == copied->deth->qkey);
            CHECK(shared->imm == copied->imm);
            CHECK(shared->view.data() == copied->view.data()); // in the shared bytes
            CHECK(shared->view.size() == payload);

            // The fields are the private copy's: a peer that rewrites the
            // headers after the copy changes what the CRCs see, not them.
            auto rewritten = bytes;
            rewritten[8 + (grh ? 40 : 0) + 2] ^= 0x40; // the BTH's P_Key, after the copy
            fixVcrc(rewritten);
            const auto seen = parseShared(rewritten, head, &error);
            CHECK_FALSE(seen); // the ICRC covers the P_Key
            CHECK(error == ParseError::kBadIcrc);

            // A head shorter than the headers could be is a caller's bug.
            if (bytes.size() > kMaxHeaderBytes)
                CHECK_THROWS(parseShared(bytes, std::span(head).first(64), &error));
        }
}

TEST_CASE("malformed packets are refused with a reason", "[packet]") {
    auto bytes = build(udPacket(64, false, false));
    ParseError error;
    SECTION("corrupted bits fail the VCRC") {
        bytes[20] ^= 1;
        CHECK_FALSE(parse(bytes, &error));
        CHECK(error == ParseError::kBadVcrc);
    }
    SECTION("an invariant field changed in flight fails the ICRC") {
        bytes[8 + 2] ^= 0x80; // BTH P_Key
        fixVcrc(bytes);
        CHECK_FALSE(parse(bytes, &error));
        CHECK(error == ParseError::kBadIcrc);
    }
    SECTION("variant fields may change: a switch rewrites the VL") {
        bytes[0] = 0xf0; // VL15
        fixVcrc(bytes);
        CHECK(parse(bytes, &error));
    }
    SECTION("truncation") {
        bytes.erase(bytes.end() - 8, bytes.end());
        fixVcrc(bytes);
        CHECK_FALSE(parse(bytes, &error));
        CHECK(error == ParseError::kBadLength);
        CHECK_FALSE(parse(std::span(bytes).first(10), &error));
        CHECK(error == ParseError::kTooShort);
    }
    SECTION("raw and IP packets are not transport packets") {
        bytes[1] = (bytes[1] & 0xfc) | kLnhRaw;
        fixVcrc(bytes);
        CHECK_FALSE(parse(bytes, &error));
        CHECK(error == ParseError::kBadLnh);
    }
    SECTION("an opcode this device does not speak") {
        for (uint8_t opcode : {0x44, 0x15, 0x2c, 0x66}) { // RD, reserved RC, UC READ, UD
            bytes[8] = opcode;
            fixVcrc(bytes);
            CHECK_FALSE(parse(bytes, &error));
            CHECK(error == ParseError::kUnsupportedOpcode);
        }
    }
    SECTION("oversized") {
        std::vector<uint8_t> huge(5000, 0);
        CHECK_FALSE(parse(huge, &error));
        CHECK(error == ParseError::kTooLong);
    }
}

TEST_CASE("every connected-transport header round-trips", "[packet]") {
    Packet p;
    p.lrh.dlid = 3;
    p.lrh.slid = 4;
    p.bth.destQp = 0x123456;
    p.bth.psn = 0xfffffe;
    p.bth.ackReq = true;
    ParseError error;
    SECTION("RDMA WRITE only with immediate: RETH, ImmDt, payload") {
        p.bth.opcode = kWriteOnlyImm;
        p.reth = Reth{0x1122334455667788ull, 0xabcdef01, 77};
        p.imm = 0xcafe;
        p.payload.assign(77, 0x5a);
        auto got = parse(build(p), &error);
        REQUIRE(got);
        CHECK(got->reth->va == 0x1122334455667788ull);
        CHECK(got->reth->rkey == 0xabcdef01);
        CHECK(got->reth->length == 77);
        CHECK(*got->imm == 0xcafe);
        CHECK(got->payload == p.payload);
        CHECK(got->bth.ackReq);
        CHECK(got->bth.psn == 0xfffffe);
    }
    SECTION("ACK: AETH with syndrome and MSN, no payload") {
        p.bth.opcode = kAcknowledge;
        p.aeth = Aeth{0x60 | 5, 0xabcdef};
        auto bytes = build(p);
        CHECK(bytes.size() == 8 + 12 + 4 + 4 + 2);
        auto got = parse(bytes, &error);
        REQUIRE(got);
        CHECK(got->aeth->syndrome == 0x65);
        CHECK(got->aeth->msn == 0xabcdef);
    }
    SECTION("atomics: AtomicETH out, AtomicAckETH back") {
        p.bth.opcode = kCompareSwap;
        p.atomicEth = AtomicEth{0x1000, 7, 0x1111222233334444ull, 0x5555666677778888ull};
        auto got = parse(build(p), &error);
        REQUIRE(got);
        CHECK(got->atomicEth->va == 0x1000);
        CHECK(got->atomicEth->rkey == 7);
        CHECK(got->atomicEth->swapAdd == 0x1111222233334444ull);
        CHECK(got->atomicEth->compare == 0x5555666677778888ull);
        p = Packet{};
        p.bth.opcode = kAtomicAcknowledge;
        p.aeth = Aeth{0x1f, 9};
        p.atomicAck = 0x0102030405060708ull;
        got = parse(build(p), &error);
        REQUIRE(got);
        CHECK(*got->atomicAck == 0x0102030405060708ull);
    }
    SECTION("UC uses the RC layouts; data where the opcode has none is refused") {
        p.bth.opcode = kTransportUc | kSendMiddle;
        p.payload.assign(256, 1);
        REQUIRE(parse(build(p), &error));
        p.bth.opcode = kReadRequest;
        p.reth = Reth{};
        auto bytes = build(p); // the layout has no payload: build leaves it out
        CHECK(parse(bytes, &error)->payload.empty());
        // A WRITE ONLY relabelled READ REQUEST: its data must be refused
        // (before the ICRC, which the relabelling also broke).
        Packet q = p;
        q.bth.opcode = kWriteOnly;
        q.payload.assign(64, 2);
        auto withData = build(q);
        withData[8] = kReadRequest;
        fixVcrc(withData);
        CHECK_FALSE(parse(withData, &error));
        CHECK(error == ParseError::kBadLength);
    }
}

TEST_CASE("random bytes never parse into a packet by accident", "[packet]") {
    uint32_t x = 12345;
    for (int round = 0; round < 2000; ++round) {
        std::vector<uint8_t> junk(static_cast<size_t>(x % 300));
        for (auto &b : junk) {
            x = x * 1103515245u + 12345u;
            b = static_cast<uint8_t>(x >> 16);
        }
        ParseError error;
        CHECK_FALSE(parse(junk, &error));
    }
}

TEST_CASE("the fast CRCs equal their bit-by-bit definitions", "[packet]") {
    std::vector<uint8_t> data(5000);
    uint32_t x = 99;
    for (auto &b : data) {
        x = x * 1103515245 + 12345;
        b = static_cast<uint8_t>(x >> 16);
    }
    // Every length 0..600 at every start 0..7 (the table path, and both
    // folding paths with every tail), and some long ones.
    for (size_t start = 0; start < 8; ++start)
        for (size_t len = 0; len <= 600; ++len) {
            auto s = std::span<const uint8_t>(data).subspan(start, len);
            REQUIRE(crc32Update(0xffffffffu, s) == crc32Bits(0xffffffffu, s));
            REQUIRE(crc16Update(0xffff, s) == crc16Bits(0xffff, s));
        }
    for (size_t len : {255u, 4096u, 4999u}) {
        auto s = std::span<const uint8_t>(data).subspan(1, len);
        CHECK(crc32Update(0x12345678u, s) == crc32Bits(0x12345678u, s));
        CHECK(crc16Update(0x4321, s) == crc16Bits(0x4321, s));
    }
    // Both at once (folded modulo the product of the polynomials), from
    // running values that change with every length.
    for (size_t start = 0; start < 8; start += 3)
        for (size_t len = 0; len <= 1100; ++len) {
            auto s = std::span<const uint8_t>(data).subspan(start, len);
            x = x * 1103515245 + 12345;
            uint32_t c32 = x;
            uint16_t c16 = static_cast<uint16_t>(x >> 7);
            const uint32_t want32 = crc32Bits(c32, s);
            const uint16_t want16 = crc16Bits(c16, s);
            crc32And16Update(&c32, &c16, s);
            REQUIRE(c32 == want32);
            REQUIRE(c16 == want16);
        }
    for (size_t len : {4096u, 4999u}) {
        auto s = std::span<const uint8_t>(data).subspan(1, len);
        uint32_t c32 = 0xffffffffu;
        uint16_t c16 = 0xffff;
        crc32And16Update(&c32, &c16, s);
        CHECK(c32 == crc32Bits(0xffffffffu, s));
        CHECK(c16 == crc16Bits(0xffff, s));
    }
    // The CRC-32 seeing byte 4 flipped, the CRC-16 not, on both paths.
    for (size_t len : {5u, 20u, 255u, 256u, 300u, 4112u})
        for (unsigned flip : {0x00u, 0x01u, 0x80u, 0xffu}) {
            CAPTURE(len, flip);
            auto s = std::span<const uint8_t>(data).subspan(3, len);
            std::vector<uint8_t> flipped(s.begin(), s.end());
            flipped[4] ^= static_cast<uint8_t>(flip);
            uint32_t c32 = 0x0badcafeu;
            uint16_t c16 = 0x1234;
            crc32And16Update(&c32, &c16, s, static_cast<uint8_t>(flip));
            CHECK(c32 == crc32Bits(0x0badcafeu, flipped));
            CHECK(c16 == crc16Bits(0x1234, s));
        }
    // The same in pieces of every kind, some copied on the way.
    uint32_t seed = 5;
    auto next = [&](uint32_t bound) {
        seed = seed * 1103515245 + 12345;
        return (seed >> 8) % bound;
    };
    for (size_t len : {0u, 4u, 5u, 20u, 127u, 128u, 129u, 300u, 4124u, 4999u})
        for (uint32_t maxPiece : {1u, 7u, 130u, 700u, 5000u}) {
            CAPTURE(len, maxPiece);
            const auto flip = static_cast<uint8_t>(next(256));
            const auto s = std::span<const uint8_t>(data).first(len);
            uint32_t want32 = 0x0badcafeu;
            uint16_t want16 = 0x1234;
            if (len > 4)
                crc32And16Update(&want32, &want16, s, flip);
            else
                crc32And16Update(&want32, &want16, s);
            JointCrcStream stream(0x0badcafeu, 0x1234, len > 4 ? flip : 0);
            std::vector<uint8_t> copy(len);
            for (size_t at = 0; at < len;) {
                const size_t n = std::min<size_t>(len - at, 1 + next(maxPiece));
                if (next(2)) {
                    stream.add(copy.data() + at, s.data() + at, n);
                } else {
                    std::memcpy(copy.data() + at, s.data() + at, n);
                    stream.add(copy.data() + at, copy.data() + at, n);
                }
                at += n;
            }
            uint32_t got32;
            uint16_t got16;
            stream.finish(&got32, &got16);
            CHECK(got32 == want32);
            CHECK(got16 == want16);
            CHECK(std::equal(copy.begin(), copy.end(), s.begin()));
        }
    // The standard check value of CRC-32: "123456789".
    const uint8_t check[] = {'1', '2', '3', '4', '5', '6', '7', '8', '9'};
    CHECK(~crc32Update(0xffffffffu, check) == 0xcbf43926u);
}
