// SPDX-License-Identifier: GPL-2.0-or-later
// The port's link to a switch: HELLO, link state, bad streams.
#include <catch2/catch.hpp>

#include "fake_host.hh"
#include "frame.hh"
#include "packet.hh"

using pib::wire::encode;

namespace {

std::vector<uint8_t> switchHello() {
    pib_wire_hello hello{};
    hello.node_guid = 0x99;
    hello.node_type = PIB_WIRE_NODE_SWITCH;
    hello.port = 4;
    return encode(PIB_WIRE_HELLO,
                  std::span(reinterpret_cast<const uint8_t *>(&hello), sizeof(hello)));
}

pib_port_info queryPort(FakeHost &host) {
    pib_port_info info;
    REQUIRE(host.commandOut(PIB_CMD_QUERY_PORT, 1, &info).status == PIB_CMD_STATUS_OK);
    return info;
}

void feed(FakeHost &host, const std::vector<uint8_t> &bytes) {
    pib_core_port_receive(host.core, 1, bytes.data(), bytes.size());
}

} // namespace

TEST_CASE("a port's link comes up after both HELLOs and goes down with the stream", "[link]") {
    FakeHost host;
    host.initHca();
    CHECK(queryPort(host).phys_state == PIB_PHYS_POLLING);

    pib_core_port_connected(host.core, 1, 1);
    pib::wire::FrameReader reader;
    reader.feed(host.portOutput[1]);
    pib::wire::FrameReader::Error error;
    auto hello = reader.next(&error);
    REQUIRE(hello);
    CHECK(hello->type == PIB_WIRE_HELLO);
    pib_wire_hello h;
    std::memcpy(&h, hello->payload.data(), sizeof(h));
    CHECK(h.node_guid == FakeHost::defaultConfig().node_guid);
    CHECK(h.port_guid == FakeHost::defaultConfig().node_guid + 1);
    CHECK(h.node_type == PIB_WIRE_NODE_CA);
    CHECK(queryPort(host).state == PIB_PORT_DOWN); // connected, not yet up

    // The switch's HELLO may come in pieces.
    const auto reply = switchHello();
    pib_core_port_receive(host.core, 1, reply.data(), 5);
    pib_core_port_receive(host.core, 1, reply.data() + 5, reply.size() - 5);
    auto info = queryPort(host);
    CHECK(info.phys_state == PIB_PHYS_LINK_UP);
    CHECK(info.state == PIB_PORT_INIT);

    // A reset keeps the cable plugged in; the link trains again: HELLO
    // goes out, the port is DOWN/Polling until the switch answers, then
    // INIT. The same for RESET and CLOSE_HCA (prm §2.1).
    auto expectRetrained = [&] {
        pib::wire::FrameReader out;
        out.feed(host.portOutput[1]);
        const auto again = out.next(&error);
        REQUIRE(again);
        CHECK(again->type == PIB_WIRE_HELLO);
        CHECK(queryPort(host).state == PIB_PORT_DOWN);
        CHECK(queryPort(host).phys_state == PIB_PHYS_POLLING);
        feed(host, switchHello());
        CHECK(queryPort(host).state == PIB_PORT_INIT);
        CHECK(queryPort(host).phys_state == PIB_PHYS_LINK_UP);
        CHECK(host.traces("link_retrain") == 1);
    };
    SECTION("a device reset trains the link again") {
        host.portOutput[1].clear();
        host.write32(PIB_BAR_REGS, PIB_REG_RESET, PIB_RESET_MAGIC);
        host.initHca();
        expectRetrained();
    }
    SECTION("CLOSE_HCA trains the link again, and INIT_HCA starts over") {
        host.portOutput[1].clear();
        REQUIRE(host.command(PIB_CMD_CLOSE_HCA).status == PIB_CMD_STATUS_OK);
        REQUIRE(host.command(PIB_CMD_INIT_HCA).status == PIB_CMD_STATUS_OK);
        expectRetrained();
    }
    SECTION("the stream closing takes the link down") {
        pib_core_port_connected(host.core, 1, 0);
        info = queryPort(host);
        CHECK(info.phys_state == PIB_PHYS_POLLING);
        CHECK(info.state == PIB_PORT_DOWN);
    }
    SECTION("a corrupt stream drops the connection") {
        feed(host, std::vector<uint8_t>(32, 0x5a));
        CHECK(host.disconnects == std::vector<unsigned>{1});
        CHECK(queryPort(host).state == PIB_PORT_DOWN);
    }
    SECTION("corrupt packets are dropped, the link stays up") {
        feed(host, encode(PIB_WIRE_PACKET, std::vector<uint8_t>(64, 1)));
        CHECK(host.disconnects.empty());
        CHECK(queryPort(host).state == PIB_PORT_INIT);
    }
}

TEST_CASE("streams for ports the device does not have are ignored", "[link]") {
    FakeHost host;
    pib_core_port_connected(host.core, 2, 1);
    pib_core_port_connected(host.core, 0, 1);
    const auto reply = switchHello();
    pib_core_port_receive(host.core, 7, reply.data(), reply.size());
    CHECK(host.portOutput[2].empty());
    CHECK(host.guestErrors() == 0);
}
