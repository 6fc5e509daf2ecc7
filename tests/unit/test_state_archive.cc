// SPDX-License-Identifier: GPL-2.0-or-later
// The device state's bytes (state_archive.hh): what a writer puts a reader
// takes back, and a stream cut, lengthened or rewritten anywhere is refused
// with a reason, never read past its end or beyond a section.
#include <catch2/catch.hpp>

#include "pib_hw.h"
#include "state_archive.hh"

using namespace pib;

namespace {

constexpr uint32_t kOuter = stateTag("OUTR");
constexpr uint32_t kInner = stateTag("INNR");

std::vector<uint8_t> sample() {
    StateWriter w;
    w.beginSection(kOuter);
    w.u8(0xab);
    w.u16(0xbeef);
    w.beginSection(kInner);
    w.u32(0xdeadbeef);
    w.u64(0x0123456789abcdefull);
    w.boolean(true);
    w.endSection();
    w.bytes(std::vector<uint8_t>{1, 2, 3});
    pib_cq_context cq{};
    cq.log_size = 7;
    w.record(cq);
    w.u32(3); // a count of the u16s that follow
    for (uint16_t thing : {7, 8, 9})
        w.u16(thing);
    w.endSection();
    return w.take();
}

// Reads sample() back; the reader's verdict.
StateReader readSample(std::span<const uint8_t> bytes, bool *matched) {
    StateReader r(bytes);
    r.enterSection(kOuter, "outer");
    bool same = r.u8() == 0xab;
    same &= r.u16() == 0xbeef;
    r.enterSection(kInner, "inner");
    same &= r.u32() == 0xdeadbeef;
    same &= r.u64() == 0x0123456789abcdefull;
    same &= r.boolean("flag");
    r.leaveSection("inner");
    same &= r.bytes(16, "bytes") == std::vector<uint8_t>{1, 2, 3};
    pib_cq_context cq{};
    r.record(cq, "cq");
    same &= cq.log_size == 7;
    const uint32_t things = r.count(8, 2, "things");
    same &= things == 3;
    for (uint32_t i = 0; i < things; ++i)
        same &= r.u16() == 7 + i;
    r.leaveSection("outer");
    *matched = same;
    return r;
}

} // namespace

TEST_CASE("state written is read back field for field", "[state]") {
    const auto bytes = sample();
    bool matched = false;
    const StateReader r = readSample(bytes, &matched);
    CHECK(r.ok());
    CHECK(r.error().empty());
    CHECK(matched);
    CHECK(r.atEnd());
}

TEST_CASE("state cut anywhere is refused, with a reason", "[state]") {
    const auto bytes = sample();
    for (size_t cut = 0; cut < bytes.size(); ++cut) {
        bool matched = true;
        const StateReader r = readSample(std::span(bytes).first(cut), &matched);
        CAPTURE(cut);
        CHECK_FALSE(r.ok());
        CHECK_FALSE(r.error().empty());
    }
}

TEST_CASE("state with bytes left in a section, or rewritten, is refused", "[state]") {
    SECTION("a section longer than what its reader takes") {
        StateWriter w;
        w.beginSection(kOuter);
        w.u32(1);
        w.u32(2);
        w.endSection();
        const auto bytes = w.take();
        StateReader r(bytes);
        r.enterSection(kOuter, "outer");
        r.u32();
        r.leaveSection("outer");
        CHECK_FALSE(r.ok());
        CHECK(r.error() == "outer: 4 bytes left unread");
    }
    SECTION("a section that claims more than the stream holds") {
        auto bytes = sample();
        bytes[4] = 0xff; // the outer length's low byte
        bool matched = true;
        const StateReader r = readSample(bytes, &matched);
        CHECK_FALSE(r.ok());
    }
    SECTION("an inner section that reaches past its outer one") {
        auto bytes = sample();
        bytes[8 + 3 + 4] += 1; // the inner length: one byte more than it has
        bool matched = true;
        const StateReader r = readSample(bytes, &matched);
        CHECK_FALSE(r.ok());
    }
    SECTION("another section where one belongs") {
        auto bytes = sample();
        bytes[0] = 'X';
        bool matched = true;
        const StateReader r = readSample(bytes, &matched);
        CHECK(r.error() == "outer: section 'XUTR' where 'OUTR' belongs");
    }
    SECTION("a record of another size") {
        StateWriter w;
        w.record(uint32_t{5});
        const auto bytes = w.take();
        StateReader r(bytes);
        pib_cq_context cq{};
        cq.log_size = 9;
        r.record(cq, "cq");
        CHECK_FALSE(r.ok());
        CHECK(cq.log_size == 0); // what was refused is not half-read
    }
    SECTION("a count, an index or a length out of bounds") {
        StateWriter w;
        w.u32(9);
        w.u32(9);
        w.u32(17);
        w.u32(4); // four things of 4 bytes: more than the 0 bytes after it
        const auto bytes = w.take();
        for (int which = 0; which < 4; ++which) {
            StateReader r(bytes);
            for (int i = 0; i < which; ++i)
                r.u32();
            if (which == 0)
                CHECK(r.count(8, 1, "things") == 0);
            else if (which == 3)
                CHECK(r.count(8, 4, "things") == 0);
            else if (which == 1)
                CHECK(r.below(9, "index") == 0);
            else
                CHECK(r.bytes(16, "bytes").empty());
            CHECK_FALSE(r.ok());
        }
    }
    SECTION("a truth value that is neither 0 nor 1") {
        const std::vector<uint8_t> bytes{2};
        StateReader r(bytes);
        CHECK_FALSE(r.boolean("flag"));
        CHECK(r.error() == "flag: 2 is not a truth value");
    }
    SECTION("the first reason sticks, and later reads give zeros") {
        const std::vector<uint8_t> bytes{1, 2};
        StateReader r(bytes);
        CHECK(r.u32() == 0);
        const std::string first = r.error();
        CHECK(r.u8() == 0);
        r.fail("later");
        CHECK(r.error() == first);
    }
}
