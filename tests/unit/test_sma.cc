// SPDX-License-Identifier: GPL-2.0-or-later
// The HCA's SMA and PMA behind MAD_IFC.
#include <catch2/catch.hpp>

#include <array>
#include <cstring>

#include "fake_host.hh"
#include "frame.hh"
#include "mad.hh"
#include "mkey.hh"
#include "packet.hh"
#include "smp.hh"

using namespace pib;

namespace {

struct SmaFixture {
    FakeHost host;
    uint64_t eqPage = 0;

    SmaFixture() {
        host.initHca();
        std::vector<uint64_t> pages;
        pib_eq_context eq{};
        eq.buf = host.ring(1, &pages);
        eqPage = pages.back();
        eq.log_size = 4;
        eq.flags = PIB_EQ_ASYNC;
        REQUIRE(host.commandIn(PIB_CMD_CREATE_EQ, 0, eq).status == PIB_CMD_STATUS_OK);
        host.cablePort1(); // so that it can be armed
    }

    // Runs a MAD through MAD_IFC; returns {result, response}.
    std::pair<uint64_t, pib_mad_ifc> mad(uint8_t cls, uint8_t method, uint16_t attr, uint32_t mod,
                                         std::function<void(iba::Mad &)> fill = {}) {
        pib_mad_ifc response;
        const auto r = host.mad(cls, method, attr, mod, fill, &response);
        REQUIRE(r.status == PIB_CMD_STATUS_OK);
        return {r.result, response};
    }

    std::vector<uint8_t> asyncEvents() { return host.asyncEvents(eqPage, 16); }
};

iba::PortInfo portInfo(pib_mad_ifc &r) {
    return iba::readPortInfo(iba::Mad(r.mad));
}

uint8_t portState(pib_mad_ifc &r) {
    return portInfo(r).portState;
}

} // namespace

TEST_CASE("the SMA answers NodeInfo and NodeDescription", "[sma]") {
    SmaFixture f;
    std::array<char, PIB_NODE_DESC_LEN> desc{};
    std::strcpy(desc.data(), "vm1 pib_hca");
    REQUIRE(f.host.commandIn(PIB_CMD_SET_NODE_DESC, 0, desc).status == PIB_CMD_STATUS_OK);
    auto [result, r] = f.mad(iba::kClassSmpDirected, iba::kGet, iba::kAttrNodeInfo, 0);
    CHECK(result == 1);
    iba::Mad m(r.mad);
    CHECK(m.method() == iba::kGetResp);
    CHECK(m.returning());
    const iba::NodeInfo node = iba::readNodeInfo(m);
    CHECK(node.nodeType == iba::kNodeTypeCa);
    CHECK(node.nodeGuid == FakeHost::defaultConfig().node_guid);
    CHECK(node.portGuid == FakeHost::defaultConfig().node_guid + 1);
    CHECK(node.localPortNum == 1);
    auto nd = f.mad(iba::kClassSmpLid, iba::kGet, iba::kAttrNodeDescription, 0).second;
    CHECK(std::string(reinterpret_cast<char *>(nd.mad + 64)) == "vm1 pib_hca");
}

TEST_CASE("PortInfo Sets configure the port and raise events", "[sma]") {
    SmaFixture f;
    auto set = [&](uint16_t lid, uint8_t state) {
        return f.mad(iba::kClassSmpDirected, iba::kSet, iba::kAttrPortInfo, 1, [&](iba::Mad &m) {
            // NeighborMTU 4: 2048 bytes.
            iba::writePortInfo(
                m, {.lid = lid, .masterSmLid = 1, .portState = state, .neighborMtu = 4});
        });
    };
    auto [result, r] = set(5, 0);
    CHECK(iba::Mad(r.mad).status() == iba::kStatusOk);
    CHECK(portInfo(r).lid == 5);
    CHECK(portState(r) == PIB_PORT_INIT);
    r = set(5, PIB_PORT_ACTIVE).second; // must pass through ARMED
    CHECK(iba::Mad(r.mad).status() == iba::kStatusBadField);
    r = set(5, PIB_PORT_ARMED).second;
    CHECK(portState(r) == PIB_PORT_ARMED);
    r = set(5, PIB_PORT_ACTIVE).second;
    CHECK(portState(r) == PIB_PORT_ACTIVE);
    pib_port_info info;
    f.host.commandOut(PIB_CMD_QUERY_PORT, 1, &info);
    CHECK(info.lid == 5);
    CHECK(info.sm_lid == 1);
    CHECK(info.state == PIB_PORT_ACTIVE);
    CHECK(info.active_mtu == 4);
    const auto events = f.asyncEvents();
    CHECK(std::count(events.begin(), events.end(), PIB_ASYNC_LID_CHANGE) == 1);
    CHECK(std::count(events.begin(), events.end(), PIB_ASYNC_SM_CHANGE) == 1);
    CHECK(std::count(events.begin(), events.end(), PIB_ASYNC_PORT_ACTIVE) == 1);
}

TEST_CASE("P_Key and GUID tables are settable, except the port GUID", "[sma]") {
    SmaFixture f;
    auto r = f.mad(iba::kClassSmpLid, iba::kSet, iba::kAttrPkeyTable, 0, [](iba::Mad &m) {
                  const uint16_t block[] = {0xffff, 0x8001};
                  iba::writeBlock16(m, block);
              }).second;
    std::array<uint16_t, iba::kPkeysPerBlock> pkeyBlock{};
    iba::readBlock16(iba::Mad(r.mad), pkeyBlock);
    CHECK(pkeyBlock[1] == 0x8001);
    uint16_t pkeys[PIB_PKEY_TABLE_LEN];
    f.host.commandOut(PIB_CMD_QUERY_PKEYS, 1, &pkeys);
    CHECK(pkeys[1] == 0x8001);
    r = f.mad(iba::kClassSmpLid, iba::kSet, iba::kAttrGuidInfo, 0, [](iba::Mad &m) {
             const uint64_t block[] = {0x1234, 0x5678};
             iba::writeBlock64(m, block);
         }).second;
    std::array<uint64_t, iba::kGuidsPerBlock> guids{};
    iba::readBlock64(iba::Mad(r.mad), guids);
    CHECK(guids[0] == FakeHost::defaultConfig().node_guid + 1);
    CHECK(guids[1] == 0x5678);
    auto bad = f.mad(iba::kClassSmpLid, iba::kGet, iba::kAttrPkeyTable, 5).second;
    CHECK(iba::Mad(bad.mad).status() == iba::kStatusBadField);
}

TEST_CASE("MADs the device does not own are left to the kernel", "[sma]") {
    SmaFixture f;
    CHECK(f.mad(iba::kClassSmpLid, iba::kGet, 0x0020 /* SMInfo */, 0).first == 0);
    CHECK(f.mad(0x03 /* SA */, iba::kGet, 0x0011, 0).first == 0);
    CHECK(f.mad(iba::kClassSmpLid, iba::kGetResp, iba::kAttrNodeInfo, 0).first == 0);
}

TEST_CASE("the PMA reports the port's counters", "[sma]") {
    SmaFixture f;
    constexpr size_t kPortSelect = iba::Mad::kPmaData + 1;
    auto r = f.mad(iba::kClassPerfMgt, iba::kGet, iba::kAttrPortCounters, 0,
                   [](iba::Mad &m) { m.set8(kPortSelect, 1); });
    CHECK(r.first == 1);
    CHECK(iba::Mad(r.second.mad).status() == iba::kStatusOk);
    r = f.mad(iba::kClassPerfMgt, iba::kGet, iba::kAttrPortCounters, 0,
              [](iba::Mad &m) { m.set8(kPortSelect, 9); });
    CHECK(iba::Mad(r.second.mad).status() == iba::kStatusBadField);
    r = f.mad(iba::kClassPerfMgt, iba::kGet, iba::kAttrClassPortInfo, 0);
    // ClassPortInfo's CapabilityMask: IsExtendedWidthSupported.
    CHECK(iba::Mad(r.second.mad).get16(iba::Mad::kPmaData + 2) & (1u << 9));
}

namespace {

// The Trap 256 packets among what port 1 sent.
std::vector<iba::Packet> badMkeyTraps(FakeHost &host) {
    std::vector<iba::Packet> traps;
    wire::FrameReader reader;
    reader.feed(host.portOutput[1]);
    wire::FrameReader::Error error;
    while (auto frame = reader.next(&error)) {
        iba::ParseError perr;
        auto p = iba::parse(frame->payload, &perr);
        if (p && p->payload.size() == iba::kMadSize) {
            iba::Mad m(p->payload);
            if (m.method() == iba::kTrap && m.get16(iba::Mad::kSmpData + 4) == iba::kTrapBadMkey)
                traps.push_back(*p);
        }
    }
    return traps;
}

} // namespace

TEST_CASE("M_Key guards the SMA: protect bits, violations, Trap 256, the lease", "[sma][mkey]") {
    SmaFixture f;
    constexpr uint64_t kKey = 0x1234;
    auto smp = [&](uint8_t method, uint64_t key, std::function<void(iba::Mad &)> fill = {}) {
        return f.mad(iba::kClassSmpLid, method, iba::kAttrPortInfo, 1, [&](iba::Mad &m) {
            m.set64(24, key);
            if (fill)
                fill(m);
        });
    };
    // An SM (LID 0x22) brings the port up as LID 0x11 and protects it.
    for (uint8_t state : {PIB_PORT_ARMED, PIB_PORT_ACTIVE})
        REQUIRE(smp(iba::kSet, 0, [&](iba::Mad &m) {
                    iba::writePortInfo(m, {.lid = 0x11, .masterSmLid = 0x22, .portState = state});
                }).first == 1);
    auto protect = [&](uint64_t oldKey, uint8_t bits, uint16_t lease) {
        return smp(iba::kSet, oldKey, [&](iba::Mad &m) {
            iba::writePortInfo(m, {.mkey = kKey,
                                   .lid = 0x11,
                                   .masterSmLid = 0x22,
                                   .mkeyLeasePeriod = lease,
                                   .mkeyProtectBits = bits});
        });
    };
    REQUIRE(protect(0, 2, 1).first == 1);
    f.host.portOutput[1].clear();

    SECTION("a Get with the wrong key is dropped, counted and trapped") {
        CHECK(smp(iba::kGet, 0x9999).first == 0);
        const auto traps = badMkeyTraps(f.host);
        REQUIRE(traps.size() == 1);
        CHECK(traps[0].lrh.dlid == 0x22);
        CHECK(traps[0].lrh.slid == 0x11);
        CHECK(traps[0].lrh.vl == 15);
        iba::Mad trap(const_cast<std::vector<uint8_t> &>(traps[0].payload));
        CHECK(trap.get64(24) == 0); // a trap's own M_Key
        constexpr size_t kNotice = iba::Mad::kSmpData;
        CHECK(trap.get8(kNotice) == 0x82);      // generic, security
        CHECK(trap.get16(kNotice + 6) == 0x11); // IssuerLID
        CHECK(trap.get8(kNotice + 16) == iba::kGet);
        CHECK(trap.get16(kNotice + 18) == iba::kAttrPortInfo);
        CHECK(trap.get64(kNotice + 24) == 0x9999); // the bad key
        auto [result, r] = smp(iba::kGet, kKey);
        REQUIRE(result == 1);
        CHECK(portInfo(r).mkey == kKey);
        CHECK(portInfo(r).mkeyViolations == 1);
        CHECK(portInfo(r).mkeyProtectBits == 2);
    }
    SECTION("a Set with the wrong key changes nothing") {
        const auto newLid = [](iba::Mad &m) { iba::writePortInfo(m, {.lid = 0x77}); };
        CHECK(smp(iba::kSet, 0, newLid).first == 0);
        pib_mad_ifc r = smp(iba::kGet, kKey).second;
        CHECK(portInfo(r).lid == 0x11);
    }
    SECTION("the driver's own MADs skip the check") {
        const uint64_t in = f.host.alloc(PIB_MAILBOX_SIZE), out = f.host.alloc(PIB_MAILBOX_SIZE);
        pib_mad_ifc ifc{};
        iba::Mad m(ifc.mad);
        m.set8(0, 1), m.set8(1, iba::kClassSmpLid), m.set8(2, 1), m.set8(3, iba::kGet);
        m.set16(16, iba::kAttrPortInfo);
        m.set32(20, 1);
        f.host.poke(in, ifc);
        const auto r = f.host.command(PIB_CMD_MAD_IFC, 1, in, out,
                                      PIB_MAD_IFC_IGNORE_MKEY << PIB_CMD_CTRL_OPMOD_SHIFT);
        CHECK(r.result == 1);
        CHECK(badMkeyTraps(f.host).empty());
    }
    SECTION("protect bits 1 answer a Get but hide the key") {
        REQUIRE(protect(kKey, 1, 0).first == 1);
        auto [result, r] = smp(iba::kGet, 0);
        REQUIRE(result == 1);
        CHECK(portInfo(r).mkey == 0);
        CHECK(portInfo(r).lid == 0x11);
    }
    SECTION("when the lease runs out the protection falls to 0") {
        CHECK(smp(iba::kSet, 0x5555).first == 0); // starts the 1 s lease
        f.host.advance(500'000'000);
        CHECK(smp(iba::kGet, 0x5555).first == 0);
        f.host.advance(600'000'000);
        auto [result, r] = smp(iba::kGet, 0x5555);
        REQUIRE(result == 1);
        CHECK(portInfo(r).mkey == kKey); // an SM that lost the key can read it
        CHECK(portInfo(r).mkeyProtectBits == 0);
        CHECK(portInfo(r).mkeyViolations == 2);
        // Traps go at most every 4.096 us * 2^SubnetTimeout: here, each.
        CHECK(badMkeyTraps(f.host).size() == 2);
    }
}
