// SPDX-License-Identifier: GPL-2.0-or-later
// The SMP attribute codec both SMAs use: each field lands where IBA
// 14.2.5 puts it, and what is written reads back the same.
#include <catch2/catch.hpp>

#include <array>

#include "smp.hh"

using namespace pib::iba;

namespace {

constexpr size_t D = Mad::kSmpData;

} // namespace

TEST_CASE("PortInfo fields sit where IBA 14.2.5.6 puts them", "[smp]") {
    std::array<uint8_t, kMadSize> bytes{};
    Mad mad(bytes);
    writePortInfo(mad, PortInfo{.mkey = 0x0102030405060708,
                                .lid = 0x1234,
                                .masterSmLid = 0x0042,
                                .mkeyLeasePeriod = 60,
                                .portState = kPortStateArmed,
                                .portPhysicalState = kPhysLinkUp,
                                .linkDownDefaultState = kPhysPolling,
                                .mkeyProtectBits = 2,
                                .lmc = 3,
                                .neighborMtu = 5,
                                .masterSmSl = 7,
                                .hoqLife = 0x13,
                                .operationalVls = 1,
                                .mkeyViolations = 9,
                                .clientReregister = true,
                                .subnetTimeout = 18});
    CHECK(mad.get64(D + 0) == 0x0102030405060708);
    CHECK(mad.get16(D + 16) == 0x1234);
    CHECK(mad.get16(D + 18) == 0x0042);
    CHECK(mad.get16(D + 26) == 60);
    CHECK(mad.get8(D + 32) == kPortStateArmed);
    CHECK(mad.get8(D + 33) == (kPhysLinkUp << 4 | kPhysPolling));
    CHECK(mad.get8(D + 34) == (2 << 6 | 3));
    CHECK(mad.get8(D + 36) == 0x57);
    CHECK(mad.get8(D + 42) == 0x13);
    CHECK(mad.get8(D + 43) == 0x10);
    CHECK(mad.get16(D + 44) == 9);
    CHECK(mad.get8(D + 51) == (0x80 | 18));
}

TEST_CASE("every attribute reads back as written", "[smp]") {
    std::array<uint8_t, kMadSize> bytes{};
    Mad mad(bytes);
    // Every byte of the data set: a field the codec drops or misplaces
    // changes the bytes written back.
    for (size_t i = 0; i < Mad::kSmpDataSize; ++i)
        bytes[D + i] = static_cast<uint8_t>(0x5a + 37 * i);
    std::array<uint8_t, Mad::kSmpDataSize> sent;
    std::copy(bytes.begin() + D, bytes.begin() + D + Mad::kSmpDataSize, sent.begin());
    const auto same = [&] { return std::equal(sent.begin(), sent.end(), bytes.begin() + D); };
    writePortInfo(mad, readPortInfo(mad));
    // PortInfo has reserved bits (byte 34 bits 5:3, byte 52 bits 7:5,
    // byte 56, byte 63 bits 7:5) that read back as 0.
    sent[34] &= 0xc7;
    sent[52] &= 0x1f;
    sent[56] = 0;
    sent[63] &= 0x1f;
    CHECK(same());

    writeNodeInfo(mad, readNodeInfo(mad));
    CHECK(std::equal(sent.begin(), sent.begin() + 40, bytes.begin() + D)); // NodeInfo's 40 bytes

    std::copy(sent.begin(), sent.end(), bytes.begin() + D);
    std::array<uint16_t, 32> block16;
    readBlock16(mad, block16);
    writeBlock16(mad, block16);
    CHECK(same());
    std::array<uint64_t, 8> block64;
    readBlock64(mad, block64);
    writeBlock64(mad, block64);
    CHECK(same());
}

TEST_CASE("SwitchInfo fields and the PortStateChange bit", "[smp]") {
    std::array<uint8_t, kMadSize> bytes{};
    Mad mad(bytes);
    writeSwitchInfo(mad, SwitchInfo{.linearFdbCap = 0xc000,
                                    .multicastFdbCap = 1024,
                                    .linearFdbTop = 7,
                                    .lifeTimeValue = 0x11,
                                    .portStateChange = true,
                                    .lidsPerPort = 1,
                                    .multicastFdbTop = 0xc003});
    CHECK(mad.get16(D + 0) == 0xc000);
    CHECK(mad.get16(D + 4) == 1024);
    CHECK(mad.get16(D + 6) == 7);
    CHECK(mad.get8(D + 11) == (0x11 << 3 | 0x04));
    CHECK(mad.get16(D + 17) == 0xc003);
    const SwitchInfo back = readSwitchInfo(mad);
    CHECK(back.portStateChange);
    CHECK(back.lifeTimeValue == 0x11);
    CHECK(back.multicastFdbTop == 0xc003);
}
