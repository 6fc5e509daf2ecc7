// SPDX-License-Identifier: GPL-2.0-or-later
// The HCA's SMA and PMA behind MAD_IFC.
#include <catch2/catch.hpp>

#include <cstring>

#include "fake_host.hh"
#include "frame.hh"
#include "mad.hh"

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
        // Cable port 1 so that it can be armed.
        pib_core_port_connected(host.core, 1, 1);
        pib_wire_hello hello{};
        const auto frame = wire::encode(
            PIB_WIRE_HELLO, std::span(reinterpret_cast<const uint8_t *>(&hello), sizeof(hello)));
        pib_core_port_receive(host.core, 1, frame.data(), frame.size());
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

uint8_t portState(pib_mad_ifc &r) {
    return iba::Mad(r.mad).get8(64 + 32) & 0xf;
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
    CHECK(m.get8(64 + 2) == 1);
    CHECK(m.get64(64 + 12) == FakeHost::defaultConfig().node_guid);
    CHECK(m.get64(64 + 20) == FakeHost::defaultConfig().node_guid + 1);
    CHECK(m.get8(64 + 36) == 1);
    auto nd = f.mad(iba::kClassSmpLid, iba::kGet, iba::kAttrNodeDescription, 0).second;
    CHECK(std::string(reinterpret_cast<char *>(nd.mad + 64)) == "vm1 pib_hca");
}

TEST_CASE("PortInfo Sets configure the port and raise events", "[sma]") {
    SmaFixture f;
    auto set = [&](uint16_t lid, uint8_t state) {
        return f.mad(iba::kClassSmpDirected, iba::kSet, iba::kAttrPortInfo, 1, [&](iba::Mad &m) {
            m.set16(64 + 16, lid);
            m.set16(64 + 18, 1);
            m.set8(64 + 32, state);
            m.set8(64 + 36, 4 << 4); // NeighborMTU 2048
        });
    };
    auto [result, r] = set(5, 0);
    CHECK(iba::Mad(r.mad).status() == iba::kStatusOk);
    CHECK(iba::Mad(r.mad).get16(64 + 16) == 5);
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
                  m.set16(64, 0xffff);
                  m.set16(66, 0x8001);
              }).second;
    CHECK(iba::Mad(r.mad).get16(66) == 0x8001);
    uint16_t pkeys[PIB_PKEY_TABLE_LEN];
    f.host.commandOut(PIB_CMD_QUERY_PKEYS, 1, &pkeys);
    CHECK(pkeys[1] == 0x8001);
    r = f.mad(iba::kClassSmpLid, iba::kSet, iba::kAttrGuidInfo, 0, [](iba::Mad &m) {
             m.set64(64, 0x1234);
             m.set64(72, 0x5678);
         }).second;
    CHECK(iba::Mad(r.mad).get64(64) == FakeHost::defaultConfig().node_guid + 1);
    CHECK(iba::Mad(r.mad).get64(72) == 0x5678);
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
    auto r = f.mad(iba::kClassPerfMgt, iba::kGet, iba::kAttrPortCounters, 0,
                   [](iba::Mad &m) { m.set8(64 + 1, 1); });
    CHECK(r.first == 1);
    CHECK(iba::Mad(r.second.mad).status() == iba::kStatusOk);
    r = f.mad(iba::kClassPerfMgt, iba::kGet, iba::kAttrPortCounters, 0,
              [](iba::Mad &m) { m.set8(64 + 1, 9); });
    CHECK(iba::Mad(r.second.mad).status() == iba::kStatusBadField);
    r = f.mad(iba::kClassPerfMgt, iba::kGet, iba::kAttrClassPortInfo, 0);
    CHECK(iba::Mad(r.second.mad).get16(64 + 2) & (1u << 9));
}
