// SPDX-License-Identifier: GPL-2.0-or-later
// A device reset runs one path whichever personality the driver talks
// to: the function is no longer initialised, every object and armed
// injection is gone, and a link the SM had configured trains again.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "frame.hh"
#include "mad.hh"
#include "management_calls.hh"
#include "mlx5_host.hh"

using pib::testing::inject;
using pib::testing::inspect;
namespace iba = pib::iba;

namespace {

nlohmann::json inspected(FakeHost &host, const char *what = "") {
    const auto a = inspect(host.core, what, true);
    REQUIRE(a.rc == 0);
    return nlohmann::json::parse(a.text);
}

// Port 1's link to a switch comes up (both HELLOs).
void trainLink(FakeHost &host) {
    pib_core_port_connected(host.core, 1, 1);
    pib_wire_hello hello{};
    hello.node_guid = 0x99;
    hello.node_type = PIB_WIRE_NODE_SWITCH;
    hello.port = 4;
    const auto frame = pib::wire::encode(
        PIB_WIRE_HELLO, std::span(reinterpret_cast<const uint8_t *>(&hello), sizeof(hello)));
    pib_core_port_receive(host.core, 1, frame.data(), frame.size());
    REQUIRE(inspected(host, "port 1")["state"] == "INIT");
}

// A SubnSet(PortInfo) of port 1 making it `state`, LID 7, as the SM sends.
void fillPortInfo(iba::Mad &m, uint8_t state) {
    m.set16(iba::Mad::kSmpData + 16, 7);
    m.set8(iba::Mad::kSmpData + 32, state);
}

// pib-hca: INIT_HCA, the SM's PortInfo through MAD_IFC, CREATE_EQ.
void bringUpPib(FakeHost &host) {
    host.initHca();
    trainLink(host);
    for (uint8_t state : {PIB_PORT_ARMED, PIB_PORT_ACTIVE}) {
        pib_mad_ifc response;
        REQUIRE(host.mad(
                        iba::kClassSmpLid, iba::kSet, iba::kAttrPortInfo, 1,
                        [&](iba::Mad &m) { fillPortInfo(m, state); }, &response)
                    .status == PIB_CMD_STATUS_OK);
    }
    host.createEq(2, PIB_EQ_ASYNC);
}

// ConnectX: ENABLE_HCA and INIT_HCA, the SM's PortInfo through MAD_IFC
// (op_mod 1: no M_Key check), ALLOC_UAR and CREATE_EQ.
void bringUpConnectX(Mlx5Host &host) {
    using namespace pib::mlx5;
    REQUIRE(host.bringUp());
    trainLink(host);
    for (uint8_t state : {PIB_PORT_ARMED, PIB_PORT_ACTIVE}) {
        auto in = Mlx5Host::input(0x50d, 1, 0x110);
        set(in, field(0x58, 8), 1);
        iba::Mad m(std::span<uint8_t>(in).subspan(0x10, 256));
        m.set8(0, 1);
        m.set8(1, iba::kClassSmpLid);
        m.set8(2, 1);
        m.set8(3, iba::kSet);
        m.set16(16, iba::kAttrPortInfo);
        m.set32(20, 1);
        fillPortInfo(m, state);
        REQUIRE(host.run(in, 0x110).status() == 0);
    }
    uint64_t ring = 0;
    const uint32_t uar = host.allocUar();
    REQUIRE(host.run(host.eqInput(2, 1u << 0x0a, 0, uar, &ring), 16).status() == 0);
}

void resetsAlike(FakeHost &host) {
    REQUIRE(inject(host.core, "drop 9 3").rc == 0);
    auto before = inspected(host);
    CHECK(before["state"] == "running");
    CHECK(before["eqs"].size() == 1);
    CHECK(before["objects"]["eqs"] == 1);
    CHECK(before["injections"].size() == 1);
    CHECK(before["ports"][0]["state"] == "ACTIVE");
    host.portOutput[1].clear();
    host.clear();

    pib_core_reset(host.core);

    const auto after = inspected(host);
    CHECK(after["state"] == "not initialised");
    CHECK(after["eqs"].empty());
    CHECK(after["cqs"].empty());
    CHECK(after["qps"].empty());
    CHECK(after["mrs"].empty());
    for (const auto &[name, count] : after["objects"].items())
        CHECK(count == 0);
    CHECK(after["injections"].empty());
    CHECK(host.traces("device_reset") == 1);
    // The link the SM had configured trains again: a HELLO goes out, and
    // the port is DOWN/Polling until the switch answers.
    pib::wire::FrameReader out;
    out.feed(host.portOutput[1]);
    pib::wire::FrameReader::Error error;
    const auto hello = out.next(&error);
    REQUIRE(hello);
    CHECK(hello->type == PIB_WIRE_HELLO);
    CHECK(after["ports"][0]["state"] == "DOWN");
    CHECK(after["ports"][0]["phys_state"] == "POLLING");
    CHECK(host.traces("link_retrain") == 1);
    CHECK(host.guestErrors() == 0);
}

} // namespace

TEST_CASE("a device reset of either personality runs one reset path", "[reset][mlx5]") {
    SECTION("pib-hca") {
        FakeHost host;
        bringUpPib(host);
        resetsAlike(host);
    }
    SECTION("ConnectX") {
        Mlx5Host host;
        bringUpConnectX(host);
        resetsAlike(host);
    }
}
