// SPDX-License-Identifier: GPL-2.0-or-later
// The port's link to a switch: HELLO, link state, bad streams.
#include <catch2/catch.hpp>

#include "connected_fixture.hh"
#include "fake_host.hh"
#include "frame.hh"
#include "mad.hh"
#include "packet.hh"
#include "page_send.hh"
#include "smp.hh"

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

// The SM configures port 1 (ARMED, then ACTIVE), as it does a trained link.
void configurePort(FakeHost &host) {
    for (uint8_t state : {PIB_PORT_ARMED, PIB_PORT_ACTIVE}) {
        pib_mad_ifc response;
        REQUIRE(host.mad(
                        pib::iba::kClassSmpLid, pib::iba::kSet, pib::iba::kAttrPortInfo, 1,
                        [&](pib::iba::Mad &m) {
                            pib::iba::writePortInfo(m, {.lid = 7, .portState = state});
                        },
                        &response)
                    .status == PIB_CMD_STATUS_OK);
    }
    REQUIRE(queryPort(host).state == PIB_PORT_ACTIVE);
    host.portOutput[1].clear();
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
    CHECK(h.flags == PIB_WIRE_HELLO_TAKES_DISCARDS); // a new link, and it hears DISCARDED
    CHECK(queryPort(host).state == PIB_PORT_DOWN);   // connected, not yet up
    // DISCARDED before the link is up is nothing to it.
    const auto early = encode(PIB_WIRE_DISCARDED, {});
    pib_core_port_receive(host.core, 1, early.data(), early.size());
    CHECK(host.traces("link_discards_told") == 0);
    CHECK(host.disconnects.empty());

    // The switch's HELLO may come in pieces.
    const auto reply = switchHello();
    pib_core_port_receive(host.core, 1, reply.data(), 5);
    pib_core_port_receive(host.core, 1, reply.data() + 5, reply.size() - 5);
    auto info = queryPort(host);
    CHECK(info.phys_state == PIB_PHYS_LINK_UP);
    CHECK(info.state == PIB_PORT_INIT);

    // A reset keeps the cable plugged in. A link the SM configured trains
    // again: HELLO goes out, the port is DOWN/Polling until the switch
    // answers, then INIT. The same for RESET and CLOSE_HCA (prm §2.1).
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
        configurePort(host);
        host.write32(PIB_BAR_REGS, PIB_REG_RESET, PIB_RESET_MAGIC);
        host.initHca();
        expectRetrained();
    }
    SECTION("CLOSE_HCA trains the link again, and INIT_HCA starts over") {
        configurePort(host);
        REQUIRE(host.command(PIB_CMD_CLOSE_HCA).status == PIB_CMD_STATUS_OK);
        REQUIRE(host.command(PIB_CMD_INIT_HCA).status == PIB_CMD_STATUS_OK);
        expectRetrained();
    }
    // The power-on link at the driver's first reset: the SM never used
    // it, so it stays trained and the switch sees no link go down.
    SECTION("a reset keeps a link the SM never configured") {
        host.portOutput[1].clear();
        host.write32(PIB_BAR_REGS, PIB_REG_RESET, PIB_RESET_MAGIC);
        host.initHca();
        CHECK(host.portOutput[1].empty()); // no HELLO
        CHECK(host.traces("link_retrain") == 0);
        CHECK(queryPort(host).state == PIB_PORT_INIT);
        CHECK(queryPort(host).phys_state == PIB_PHYS_LINK_UP);
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

namespace {

// Two devices cabled back to back, no switch: what one sends the other
// receives, while `plugged` (a peer not listening yet loses the bytes).
struct BackToBack {
    FakeHost a, b;
    bool aListens = true, bListens = true;

    BackToBack() {
        a.initHca();
        b.initHca();
    }
    void move() {
        for (int round = 0; round < 8; ++round) {
            std::vector<uint8_t> fromA, fromB;
            fromA.swap(a.portOutput[1]);
            fromB.swap(b.portOutput[1]);
            if (fromA.empty() && fromB.empty())
                return;
            if (bListens && !fromA.empty())
                feed(b, fromA);
            if (aListens && !fromB.empty())
                feed(a, fromB);
        }
    }
    void advance(uint64_t ns) {
        a.advance(ns);
        b.advance(ns);
        move();
    }
};

} // namespace

// Audit finding 7 (issue 27): a device does not care what it is cabled to.
// Its port answers a retraining HELLO as a switch port does (down, HELLO,
// up), and a port in Polling sends its HELLO again until the peer hears it.
TEST_CASE("back to back: a reset port trains again, and a lost HELLO is retried", "[link]") {
    BackToBack c;
    SECTION("the peer answers a retraining HELLO") {
        pib_core_port_connected(c.a.core, 1, 1);
        pib_core_port_connected(c.b.core, 1, 1);
        c.move();
        REQUIRE(queryPort(c.a).phys_state == PIB_PHYS_LINK_UP);
        REQUIRE(queryPort(c.b).phys_state == PIB_PHYS_LINK_UP);
        c.a.advance(200'000'000);
        c.b.advance(200'000'000);
        configurePort(c.a);
        // a resets its port (CLOSE_HCA), which sends HELLO and polls.
        REQUIRE(c.a.command(PIB_CMD_CLOSE_HCA).status == PIB_CMD_STATUS_OK);
        c.a.initHca();
        c.move();
        CHECK(queryPort(c.a).phys_state == PIB_PHYS_LINK_UP);
        CHECK(queryPort(c.b).phys_state == PIB_PHYS_LINK_UP);
        CHECK(c.b.traces("link_peer_retrain") == 1);
        // b saw its link go down and come up, as an SM would learn from a
        // switch: its port is INIT again.
        CHECK(queryPort(c.b).state == PIB_PORT_INIT);
    }
    SECTION("a HELLO that crossed ours is dropped: no HELLOs back and forth") {
        pib_core_port_connected(c.a.core, 1, 1);
        pib_core_port_connected(c.b.core, 1, 1);
        c.move();
        feed(c.a, switchHello()); // at once: it crossed a's own
        CHECK(c.a.traces("link_hello_crossed") == 1);
        CHECK(c.a.portOutput[1].empty());
        // Later a stray HELLO bounces a once and b once, then it ends.
        c.advance(200'000'000);
        feed(c.a, switchHello());
        c.move();
        CHECK(c.a.portOutput[1].empty());
        CHECK(c.b.portOutput[1].empty());
        CHECK(c.a.traces("link_peer_retrain") + c.b.traces("link_peer_retrain") <= 2);
        CHECK(queryPort(c.a).phys_state == PIB_PHYS_LINK_UP);
        CHECK(queryPort(c.b).phys_state == PIB_PHYS_LINK_UP);
    }
    SECTION("a port whose HELLO was lost polls until the peer hears it") {
        c.bListens = false; // b is not cabled yet: a's HELLO goes nowhere
        pib_core_port_connected(c.a.core, 1, 1);
        c.move();
        c.bListens = true;
        pib_core_port_connected(c.b.core, 1, 1);
        c.move(); // b's HELLO brings a up; b never heard a's
        CHECK(queryPort(c.a).phys_state == PIB_PHYS_LINK_UP);
        CHECK(queryPort(c.b).phys_state == PIB_PHYS_POLLING);
        c.advance(1'100'000'000); // b retries; a answers
        CHECK(c.b.traces("link_polling") >= 1);
        CHECK(queryPort(c.a).phys_state == PIB_PHYS_LINK_UP);
        CHECK(queryPort(c.b).phys_state == PIB_PHYS_LINK_UP);
        // Up, nobody polls any more.
        const size_t polled = c.a.traces("link_polling") + c.b.traces("link_polling");
        c.advance(3'000'000'000);
        CHECK(c.a.traces("link_polling") + c.b.traces("link_polling") == polled);
    }
}

// The ring cables' excuse (test_link_rings.cc), on a stream: a switch
// process waiting for a CPU leaves the port's packets in the device's
// socket, or a QEMU that is behind leaves the peer's answer in its own.
// The host says what the stream holds (pib_host_ops.port_backlog), the
// link counts what it gave and got: a timeout then spends no retry, for a
// while (kCableStallGraceNs).
TEST_CASE("ACK timeouts while a stream holds the port's packets spend no retries", "[link]") {
    using pib::testing::checkPageArrived;
    pib::testing::Pair pair;
    pair.a.host.reportsBacklog = true;
    const auto [src, dst] = pib::testing::postPageSend(pair, 23);
    auto timeouts = [&](int n) {
        for (int i = 0; i < n; ++i) // 4.2 ms each, five times the QP's retries
            pair.a.host.advance(4'200'000);
    };
    SECTION("the switch read nothing: the SEND waits in a's queue") {
        REQUIRE(!pair.a.host.portOutput[1].empty());
        timeouts(20);
        CHECK(pair.a.host.traces("rc_timeout_excused") >= 19);
        CHECK(pair.a.host.traces("rc_timeout") == 0);
        CHECK(pair.a.poll().empty());
        pair.wire.run(); // the switch runs again
        checkPageArrived(pair, src, dst);
    }
    SECTION("b's answer waits unread in a's socket") {
        REQUIRE(pair.wire.move(pair.a, pair.b, 0));
        REQUIRE(!pair.b.host.portOutput[1].empty()); // the ACK, not moved to a
        pair.a.host.portUnread[1] = pair.b.host.portOutput[1].size();
        timeouts(20);
        CHECK(pair.a.host.traces("rc_timeout_behind") >= 19);
        CHECK(pair.a.host.traces("rc_timeout") == 0);
        pair.a.host.portUnread[1] = 0;
        pair.wire.run(); // a reads its socket
        checkPageArrived(pair, src, dst);
    }
    SECTION("the switch took the SEND, its answer was lost, more waits behind: resent at once") {
        REQUIRE(pair.wire.move(pair.a, pair.b, 0));
        pair.b.host.portOutput[1].clear(); // the fabric lost b's answer
        const uint64_t src2 = pair.a.host.allocRandom(64, 24), dst2 = pair.b.host.alloc(64);
        pair.b.postRecv(2, dst2, 64);
        pair.a.postSend(2, {.local = src2, .length = 64});
        REQUIRE(!pair.a.host.portOutput[1].empty());
        timeouts(1);
        CHECK(pair.a.host.traces("rc_timeout_excused") == 0);
        CHECK(pair.a.host.traces("rc_timeout") == 1);
    }
    SECTION("a host that cannot tell: the timeouts spend retries") {
        pair.a.host.reportsBacklog = false;
        for (int i = 0; i < 600 && pair.a.qpState() != PIB_QPS_ERR; ++i)
            pair.a.host.advance(4'200'000);
        CHECK(pair.a.qpState() == PIB_QPS_ERR);
        CHECK(pair.a.host.traces("rc_timeout_excused") == 0);
    }
}
