// SPDX-License-Identifier: GPL-2.0-or-later
// The wire framing (common/wire).
#include <algorithm>

#include <catch2/catch.hpp>

#include "frame.hh"

using pib::wire::encode;
using pib::wire::FrameReader;

TEST_CASE("frames are reassembled from any split of the stream", "[wire]") {
    const std::vector<uint8_t> a(100, 0xaa), b(3000, 0xbb);
    auto stream = encode(PIB_WIRE_PACKET, a);
    const auto second = encode(PIB_WIRE_HELLO, b);
    stream.insert(stream.end(), second.begin(), second.end());
    const size_t chunk = GENERATE(1, 7, 16, 1000, 10000);
    FrameReader reader;
    std::vector<pib::wire::Frame> frames;
    for (size_t off = 0; off < stream.size(); off += chunk) {
        reader.feed(std::span(stream).subspan(off, std::min(chunk, stream.size() - off)));
        FrameReader::Error error;
        while (auto f = reader.next(&error))
            frames.push_back(*f);
        REQUIRE(error == FrameReader::Error::kNone);
    }
    REQUIRE(frames.size() == 2);
    CHECK(frames[0].type == PIB_WIRE_PACKET);
    CHECK(frames[0].payload == a);
    CHECK(frames[1].type == PIB_WIRE_HELLO);
    CHECK(frames[1].payload == b);
    CHECK(reader.buffered() == 0);
}

TEST_CASE("lent pieces are read in place, and only a cut-off frame is copied", "[wire]") {
    // Ten frames of 1..10 x 300 bytes, each payload filled with its index.
    std::vector<uint8_t> stream;
    for (uint8_t i = 1; i <= 10; ++i) {
        const auto f = encode(PIB_WIRE_PACKET, std::vector<uint8_t>(300u * i, i));
        stream.insert(stream.end(), f.begin(), f.end());
    }
    const size_t piece = GENERATE(1, 5, 12, 13, 700, 4096, 100000);
    FrameReader reader;
    std::vector<std::vector<uint8_t>> payloads;
    size_t inPlace = 0;
    for (size_t off = 0; off < stream.size(); off += piece) {
        // A copy that dies after the call, as a socket's buffer would.
        std::vector<uint8_t> bytes(stream.begin() + static_cast<long>(off),
                                   stream.begin() +
                                       static_cast<long>(std::min(off + piece, stream.size())));
        reader.lend(bytes);
        FrameReader::Error error;
        while (auto v = reader.nextView(&error)) {
            payloads.emplace_back(v->payload.begin(), v->payload.end());
            inPlace += v->payload.data() >= bytes.data() &&
                       v->payload.data() < bytes.data() + bytes.size();
        }
        REQUIRE(error == FrameReader::Error::kNone);
        reader.keepRest();
        std::fill(bytes.begin(), bytes.end(), 0xee); // what was kept must be a copy
    }
    REQUIRE(payloads.size() == 10);
    for (uint8_t i = 1; i <= 10; ++i)
        CHECK(payloads[i - 1] == std::vector<uint8_t>(300u * i, i));
    CHECK(reader.buffered() == 0);
    if (piece == 100000)
        CHECK(inPlace == 10); // one piece: nothing copied
    if (piece == 4096)
        CHECK(inPlace >= 2);
}

TEST_CASE("malformed frames stop the stream", "[wire]") {
    auto frame = encode(PIB_WIRE_PACKET, std::vector<uint8_t>(10, 1));
    FrameReader::Error expected;
    SECTION("magic") {
        frame[0] ^= 1;
        expected = FrameReader::Error::kBadMagic;
    }
    SECTION("version") {
        frame[4] = 9;
        expected = FrameReader::Error::kBadVersion;
    }
    SECTION("type") {
        frame[5] = GENERATE(uint8_t{0}, uint8_t{PIB_WIRE_DISCARDED + 1}, uint8_t{77});
        expected = FrameReader::Error::kBadType;
    }
    SECTION("length") {
        frame[10] = 0x10; // 1 MiB
        expected = FrameReader::Error::kTooLong;
    }
    FrameReader reader;
    reader.feed(frame);
    FrameReader::Error error;
    CHECK_FALSE(reader.next(&error));
    CHECK(error == expected);
    // Nothing more is accepted until the connection is reset.
    reader.feed(encode(PIB_WIRE_PACKET, std::vector<uint8_t>(4, 2)));
    CHECK_FALSE(reader.next(&error));
    reader.reset();
    reader.feed(encode(PIB_WIRE_PACKET, std::vector<uint8_t>(4, 2)));
    CHECK(reader.next(&error));
}
