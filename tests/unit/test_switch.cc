// SPDX-License-Identifier: GPL-2.0-or-later
// The fabric switch's logic: SMA attributes, directed-route forwarding,
// LFT/MFT forwarding, the PMA and untrusted input.
#include <algorithm>
#include <array>
#include <string>

#include <catch2/catch.hpp>

#include "mad.hh"
#include "server_internal.hh"
#include "smp.hh"
#include "smp_packets.hh"
#include "switch.hh"

using namespace pib;
using namespace pib::fabric;
using namespace pib::iba;
using pib::testing::drSmp;
using pib::testing::smpMad;

namespace {

constexpr uint64_t kGuid = 0x0250494253570001ull;

Switch makeSwitch(unsigned ports = 8, uint64_t guid = kGuid) {
    Switch sw(SwitchConfig{guid, ports, "test switch"});
    for (unsigned p = 1; p <= ports; ++p)
        sw.linkChanged(p, true);
    return sw;
}

std::vector<uint8_t> lidPacket(uint16_t dlid, uint32_t qp, std::vector<uint8_t> payload,
                               uint16_t slid = 99, uint16_t pkey = 0xffff) {
    iba::Packet p;
    p.bth.pkey = pkey;
    p.lrh.dlid = dlid;
    p.lrh.slid = slid;
    p.lrh.vl = qp == 0 ? 15 : 0;
    p.bth.opcode = iba::kUdSendOnly;
    p.bth.destQp = qp;
    p.deth = iba::Deth{qp == 1 ? iba::kQp1Qkey : 0x1111, 7};
    p.payload = std::move(payload);
    return iba::build(p);
}

std::vector<uint8_t> madOf(const std::vector<uint8_t> &packet) {
    iba::ParseError error;
    auto p = iba::parse(packet, &error);
    REQUIRE(p);
    return p->payload;
}

uint16_t statusOf(std::vector<uint8_t> mad) {
    return Mad(mad).status();
}

// Sends a Set through DR at hop 1 on port 1 and returns the response MAD.
std::vector<uint8_t> drSet(Switch &sw, uint16_t attr, uint32_t mod,
                           std::function<void(Mad &)> fill) {
    iba::ParseError error;
    auto p = *iba::parse(drSmp(kSet, attr, mod, {1}), &error);
    Mad mad(p.payload);
    fill(mad);
    auto out = sw.receive(1, iba::build(p));
    REQUIRE(out.size() == 1);
    return madOf(out[0].packet);
}

// Gets an attribute through DR at hop 1 on port 1 and returns the response MAD.
std::vector<uint8_t> drGet(Switch &sw, uint16_t attr, uint32_t mod) {
    auto out = sw.receive(1, drSmp(kGet, attr, mod, {1}));
    REQUIRE(out.size() == 1);
    return madOf(out[0].packet);
}

// A PortInfo Set's fill: `info` as the whole attribute.
std::function<void(Mad &)> portInfo(const PortInfo &info) {
    return [info](Mad &m) { writePortInfo(m, info); };
}

// A PortInfo Set's fill that asks for `state` and changes nothing else.
std::function<void(Mad &)> portState(uint8_t state) {
    return portInfo({.portState = state});
}

PortInfo portInfoOf(std::vector<uint8_t> mad) {
    return readPortInfo(Mad(mad));
}

SwitchInfo switchInfoOf(std::vector<uint8_t> mad) {
    return readSwitchInfo(Mad(mad));
}

// Sets LFT block 0 (DLIDs 0 to 63): the port `routes` gives each DLID,
// port 0 for the DLIDs it does not name.
void setRoutes(Switch &sw, const std::vector<std::pair<uint16_t, uint8_t>> &routes) {
    std::array<uint8_t, Mad::kSmpDataSize> block{};
    for (auto [dlid, port] : routes)
        block.at(dlid) = port;
    drSet(sw, kAttrLinearForwardingTable, 0, [&](Mad &m) { writeBytes(m, block); });
}

// Sets MFT block 0, position 0 (MLIDs 0xc000 to 0xc01f, ports 0 to 15):
// the ports of `mlid`, none for the other MLIDs.
void setMulticastPorts(Switch &sw, uint16_t mlid, uint16_t ports) {
    std::array<uint16_t, kMftEntriesPerBlock> masks{};
    masks.at(mlid - 0xc000) = ports;
    drSet(sw, kAttrMulticastForwardingTable, 0, [&](Mad &m) { writeBlock16(m, masks); });
}

// The SM's SwitchInfo Set that clears PortStateChange (by writing 1).
void clearPortStateChange(Switch &sw) {
    drSet(sw, kAttrSwitchInfo, 0, [](Mad &m) { writeSwitchInfo(m, {.portStateChange = true}); });
}

} // namespace

TEST_CASE("the SMA answers NodeInfo through a one-hop directed route", "[switch]") {
    Switch sw = makeSwitch();
    auto out = sw.receive(3, drSmp(kGet, kAttrNodeInfo, 0, {3}));
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == 3); // back the way it came
    auto m = madOf(out[0].packet);
    Mad mad(m);
    CHECK(mad.method() == kGetResp);
    CHECK(mad.status() == kStatusOk);
    CHECK(mad.returning());
    CHECK(mad.hopPointer() == 1);
    CHECK(mad.get64(8) == 0x1234); // transaction ID kept
    const NodeInfo node = readNodeInfo(mad);
    CHECK(node.nodeType == kNodeTypeSwitch);
    CHECK(node.numPorts == 8);
    CHECK(node.nodeGuid == kGuid);
    CHECK(node.portGuid == kGuid);
    CHECK(node.localPortNum == 3); // the ingress
}

TEST_CASE("directed routes cross a chain of switches and come back", "[switch]") {
    Switch a = makeSwitch(8, kGuid);
    Switch b = makeSwitch(8, kGuid + 1);
    // The SM hangs off a's port 3; a's port 5 is cabled to b's port 2.
    auto hop1 = a.receive(3, drSmp(kGet, kAttrNodeInfo, 0, {3, 5}));
    REQUIRE(hop1.size() == 1);
    CHECK(hop1[0].port == 5);
    auto hop2 = b.receive(2, hop1[0].packet);
    REQUIRE(hop2.size() == 1);
    CHECK(hop2[0].port == 2);
    auto back = a.receive(5, hop2[0].packet);
    REQUIRE(back.size() == 1);
    CHECK(back[0].port == 3);
    auto m = madOf(back[0].packet);
    Mad mad(m);
    CHECK(mad.hopPointer() == 1); // what the SM's HCA expects
    CHECK(readNodeInfo(mad).nodeGuid == kGuid + 1);
    CHECK(readNodeInfo(mad).localPortNum == 2);
    CHECK(mad.returnPath(1) == 3);
    CHECK(mad.returnPath(2) == 2);
}

namespace {

// Gives a switch its LID and unicast routes (all in LFT block 0).
void configure(Switch &sw, uint16_t lid, std::vector<std::pair<uint16_t, uint8_t>> routes) {
    drSet(sw, kAttrPortInfo, 0, portInfo({.lid = lid}));
    setRoutes(sw, routes);
}

// Rewrites a DR SMP's DR LIDs, hop pointer and LRH LIDs.
std::vector<uint8_t> withLids(std::vector<uint8_t> packet, uint16_t drSlid, uint16_t drDlid,
                              uint8_t hop, uint16_t lrhDlid, uint16_t lrhSlid) {
    iba::ParseError error;
    auto p = *iba::parse(packet, &error);
    Mad mad(p.payload);
    mad.set16(32, drSlid);
    mad.set16(34, drDlid);
    mad.setHopPointer(hop);
    p.lrh.dlid = lrhDlid;
    p.lrh.slid = lrhSlid;
    return iba::build(p);
}

iba::Packet parsed(const std::vector<uint8_t> &bytes) {
    iba::ParseError error;
    auto p = iba::parse(bytes, &error);
    REQUIRE(p);
    return *p;
}

} // namespace

// Switch a (LID 10) has the SM (LID 1) on port 3 and is cabled from its
// port 5 to port 2 of switch b (LID 20), which has a CA (LID 30) on port 4.
TEST_CASE("directed routes with LID-routed parts (IBA 14.2.2)", "[switch]") {
    Switch a = makeSwitch(8, kGuid);
    Switch b = makeSwitch(8, kGuid + 1);
    configure(a, 10, {{1, 3}, {20, 5}, {30, 5}});
    configure(b, 20, {{1, 2}, {10, 2}, {30, 4}});

    SECTION("a LID-routed head: the directed part starts at a, the answer returns by LID") {
        auto request =
            withLids(drSmp(kGet, kAttrNodeInfo, 0, {5}), 1, iba::kPermissiveLid, 0, 10, 1);
        auto hop1 = a.receive(3, request);
        REQUIRE(hop1.size() == 1);
        CHECK(hop1[0].port == 5);
        auto p = parsed(hop1[0].packet);
        CHECK(p.lrh.dlid == iba::kPermissiveLid);
        CHECK(Mad(p.payload).hopPointer() == 1);
        auto answer = b.receive(2, hop1[0].packet);
        REQUIRE(answer.size() == 1);
        CHECK(answer[0].port == 2);
        auto back = a.receive(5, answer[0].packet);
        REQUIRE(back.size() == 1);
        CHECK(back[0].port == 3);
        auto r = parsed(back[0].packet);
        CHECK(r.lrh.dlid == 1);
        CHECK(r.lrh.slid == 10);
        CHECK(r.lrh.vl == 15);
        Mad mad(r.payload);
        CHECK(mad.returning());
        CHECK(mad.hopPointer() == 0);
        CHECK(readNodeInfo(mad).nodeGuid == kGuid + 1);
    }
    SECTION("a LID-routed tail to a CA: a hands it to LID routing, the answer comes back by LID") {
        auto request = drSmp(kGet, kAttrNodeInfo, 0, {3});
        request =
            withLids(request, iba::kPermissiveLid, 30, 1, iba::kPermissiveLid, iba::kPermissiveLid);
        auto tail = a.receive(3, request);
        REQUIRE(tail.size() == 1);
        CHECK(tail[0].port == 5);
        auto t = parsed(tail[0].packet);
        CHECK(t.lrh.dlid == 30);
        CHECK(t.lrh.slid == 10);
        CHECK(Mad(t.payload).hopPointer() == 2);
        CHECK(Mad(t.payload).returnPath(1) == 3);
        auto toCa = b.receive(2, tail[0].packet); // b only forwards it by its LFT
        REQUIRE(toCa.size() == 1);
        CHECK(toCa[0].port == 4);
        CHECK(toCa[0].packet == tail[0].packet);
        // The CA answers by LID to the switch that sent it.
        auto resp = parsed(toCa[0].packet);
        Mad(resp.payload).setReturning(true);
        Mad(resp.payload).set8(3, kGetResp);
        resp.lrh.dlid = 10;
        resp.lrh.slid = 30;
        auto respBytes = iba::build(resp);
        auto viaB = b.receive(4, respBytes);
        REQUIRE(viaB.size() == 1);
        CHECK(viaB[0].port == 2);
        auto back = a.receive(5, viaB[0].packet);
        REQUIRE(back.size() == 1);
        CHECK(back[0].port == 3);
        auto r = parsed(back[0].packet);
        CHECK(r.lrh.dlid == iba::kPermissiveLid);
        CHECK(Mad(r.payload).hopPointer() == 1);
    }
    SECTION("a LID-routed tail that ends at a switch: its SMA answers by LID") {
        auto request = withLids(drSmp(kGet, kAttrNodeInfo, 0, {3}), iba::kPermissiveLid, 20, 1,
                                iba::kPermissiveLid, iba::kPermissiveLid);
        auto tail = a.receive(3, request);
        REQUIRE(tail.size() == 1);
        auto answer = b.receive(2, tail[0].packet);
        REQUIRE(answer.size() == 1);
        CHECK(answer[0].port == 2);
        auto ans = parsed(answer[0].packet);
        CHECK(ans.lrh.dlid == 10);
        CHECK(ans.lrh.slid == 20);
        CHECK(Mad(ans.payload).hopPointer() == 2);
        auto back = a.receive(5, answer[0].packet);
        REQUIRE(back.size() == 1);
        CHECK(back[0].port == 3);
        auto r = parsed(back[0].packet);
        Mad mad(r.payload);
        CHECK(mad.method() == kGetResp);
        CHECK(mad.hopPointer() == 1);
        CHECK(readNodeInfo(mad).nodeGuid == kGuid + 1);
        // b's local port: where the LID-routed tail came in.
        CHECK(readNodeInfo(mad).localPortNum == 2);
    }
    SECTION("inconsistent hop pointers and missing routes are dropped and counted") {
        // By LID, outgoing, in the middle of the directed part.
        CHECK(a.receive(3, withLids(drSmp(kGet, kAttrNodeInfo, 0, {5, 2}), 1, iba::kPermissiveLid,
                                    1, 10, 1))
                  .empty());
        // By LID, returning, anywhere but the end of the directed part.
        auto ret =
            withLids(drSmp(kGet, kAttrNodeInfo, 0, {5, 2}), 1, iba::kPermissiveLid, 1, 10, 1);
        auto p = parsed(ret);
        Mad(p.payload).setReturning(true);
        CHECK(a.receive(3, iba::build(p)).empty());
        // A tail to a LID the LFT does not know.
        CHECK(a.receive(3, withLids(drSmp(kGet, kAttrNodeInfo, 0, {3}), iba::kPermissiveLid, 44, 1,
                                    iba::kPermissiveLid, iba::kPermissiveLid))
                  .empty());
        CHECK(a.port(3).counters.vl15Dropped == 3);
        // A switch without a LID cannot start LID routing.
        Switch c = makeSwitch();
        CHECK(c.receive(1, withLids(drSmp(kGet, kAttrNodeInfo, 0, {1}), iba::kPermissiveLid, 30, 1,
                                    iba::kPermissiveLid, iba::kPermissiveLid))
                  .empty());
        CHECK(c.port(1).counters.vl15Dropped == 1);
    }
}

TEST_CASE("bad directed routes are dropped and counted", "[switch]") {
    Switch sw = makeSwitch();
    SECTION("hop pointer beyond the hop count") {
        iba::ParseError error;
        auto p = *iba::parse(drSmp(kGet, kAttrNodeInfo, 0, {3}), &error);
        p.payload[6] = 5;
        CHECK(sw.receive(3, iba::build(p)).empty());
    }
    SECTION("an initial path through a port that does not exist") {
        CHECK(sw.receive(3, drSmp(kGet, kAttrNodeInfo, 0, {3, 40})).empty());
    }
    SECTION("a returning SMP at hop 1 (the SM is not here)") {
        iba::ParseError error;
        auto p = *iba::parse(drSmp(kGet, kAttrNodeInfo, 0, {3, 4}), &error);
        p.payload[4] |= 0x80;
        CHECK(sw.receive(3, iba::build(p)).empty());
    }
    CHECK(sw.port(3).counters.vl15Dropped == 1);
}

TEST_CASE("PortInfo sets the LID and walks the port states", "[switch]") {
    Switch sw = makeSwitch();
    auto r = drSet(sw, kAttrPortInfo, 0, portInfo({.lid = 0x42}));
    CHECK(Mad(r).status() == kStatusOk);
    CHECK(portInfoOf(r).lid == 0x42);
    CHECK(sw.lid() == 0x42);
    // LocalPortNum is the port the SMP came in by, whichever port it asks about.
    auto info = drSet(sw, kAttrPortInfo, 5, [](Mad &) {});
    CHECK(portInfoOf(info).localPortNum == 1);

    auto setState = [&](unsigned port, uint8_t state) {
        return statusOf(drSet(sw, kAttrPortInfo, port, portState(state)));
    };
    CHECK(sw.port(4).state == kPortStateInit);
    CHECK(setState(4, kPortStateActive) == kStatusBadField); // INIT -> ACTIVE skips ARMED
    CHECK(sw.port(4).state == kPortStateInit);
    CHECK(setState(4, kPortStateArmed) == kStatusOk);
    CHECK(setState(4, kPortStateActive) == kStatusOk);
    CHECK(sw.port(4).state == kPortStateActive);
    CHECK(setState(77, kPortStateArmed) == kStatusBadField);
}

namespace {

// LID 5 behind port 2; ports 1 and 2 ARMED, then `active` of them ACTIVE:
// a link the SM is half way through activating.
void activateOneEnd(Switch &sw, unsigned active) {
    setRoutes(sw, {{5, 2}});
    for (unsigned p : {1u, 2u})
        drSet(sw, kAttrPortInfo, p, portState(kPortStateArmed));
    drSet(sw, kAttrPortInfo, active, portState(kPortStateActive));
}

} // namespace

// What made every fresh fabric's switch count PortRcvErrors: the SM sets
// the HCA's port ACTIVE before the switch port facing it, and the HCA's
// first data found that port ARMED.
TEST_CASE("an ARMED port goes ACTIVE with its neighbour's first data packet", "[switch]") {
    Switch sw = makeSwitch();
    activateOneEnd(sw, 2);
    CHECK(sw.port(1).state == kPortStateArmed);
    // Subnet management leaves it ARMED.
    CHECK(sw.receive(1, drSmp(kGet, kAttrNodeInfo, 0, {1})).size() == 1);
    CHECK(sw.port(1).state == kPortStateArmed);
    auto out = sw.receive(1, lidPacket(5, 0x99, std::vector<uint8_t>(64, 1)));
    CHECK(sw.port(1).state == kPortStateActive);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == 2);
    CHECK(sw.port(1).counters.rcvErrors == 0);
}

// The other side: the SM activated the HCA behind port 1, whose data is
// for a neighbour behind port 2, which is still ARMED.
TEST_CASE("data for an ARMED port waits for the SM to activate it", "[switch]") {
    Switch sw = makeSwitch();
    activateOneEnd(sw, 1);
    const auto data = lidPacket(5, 0x99, std::vector<uint8_t>(64, 1));
    for (size_t i = 0; i < Switch::kHeldWhileArmed + 2; ++i)
        CHECK(sw.receive(1, data).empty());
    CHECK(sw.port(2).held.size() == Switch::kHeldWhileArmed);
    CHECK(sw.port(2).counters.xmitDiscards == 2); // beyond what a port holds
    // The SM's Set that activates port 2 sends them, after its answer.
    auto out = sw.receive(1, [&] {
        iba::ParseError error;
        auto p = *iba::parse(drSmp(kSet, kAttrPortInfo, 2, {1}), &error);
        Mad smp(p.payload);
        writePortInfo(smp, {.portState = kPortStateActive});
        return iba::build(p);
    }());
    REQUIRE(out.size() == 1 + Switch::kHeldWhileArmed);
    CHECK(out[0].port == 1); // the GetResp
    CHECK(std::all_of(out.begin() + 1, out.end(),
                      [&](const Transmit &t) { return t.port == 2 && t.packet == data; }));
    CHECK(sw.port(2).counters.xmitPackets == Switch::kHeldWhileArmed);

    // A port that goes down instead discards what it held.
    drSet(sw, kAttrPortInfo, 3, portState(kPortStateArmed));
    setRoutes(sw, {{6, 3}});
    CHECK(sw.receive(1, lidPacket(6, 0x99, {1, 2, 3, 4})).empty());
    CHECK(sw.port(3).held.size() == 1);
    sw.linkChanged(3, false);
    CHECK(sw.port(3).held.empty());
    CHECK(sw.port(3).counters.xmitDiscards == 1);
}

TEST_CASE("unknown attributes and methods get an error status", "[switch]") {
    Switch sw = makeSwitch();
    auto out = sw.receive(1, drSmp(kGet, 0x7777, 0, {1}));
    REQUIRE(out.size() == 1);
    CHECK(statusOf(madOf(out[0].packet)) == kStatusBadAttribute);
    out = sw.receive(1, drSmp(0x06, kAttrNodeInfo, 0, {1}));
    REQUIRE(out.size() == 1);
    CHECK(statusOf(madOf(out[0].packet)) == kStatusBadMethod);
}

TEST_CASE("the LFT routes unicast between ACTIVE ports", "[switch]") {
    Switch sw = makeSwitch();
    setRoutes(sw, {{5, 2}});
    CHECK(sw.lftEntry(5) == 2);
    auto data = lidPacket(5, 0x99, std::vector<uint8_t>(100, 1));
    CHECK(sw.receive(1, data).empty()); // ports not ACTIVE yet
    for (unsigned p : {1u, 2u}) {
        drSet(sw, kAttrPortInfo, p, portState(kPortStateArmed));
        drSet(sw, kAttrPortInfo, p, portState(kPortStateActive));
    }
    auto out = sw.receive(1, data);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == 2);
    CHECK(out[0].packet == data);
    CHECK(sw.receive(1, lidPacket(6, 0x99, {1, 2, 3, 4})).empty()); // no route
    CHECK(sw.port(2).counters.xmitPackets >= 1);
    // Forwarding copies nothing: the server's sink sees the bytes it gave.
    std::vector<std::pair<unsigned, const uint8_t *>> forwarded;
    const auto built = sw.receive(1, data, [&](unsigned port, std::span<const uint8_t> packet) {
        CHECK(packet.size() == data.size());
        forwarded.emplace_back(port, packet.data());
    });
    CHECK(built.empty());
    REQUIRE(forwarded.size() == 1);
    CHECK(forwarded[0].first == 2);
    CHECK(forwarded[0].second == data.data());
}

TEST_CASE("the MFT copies multicast to its ports but never back", "[switch]") {
    Switch sw = makeSwitch();
    for (unsigned p = 1; p <= 4; ++p) {
        drSet(sw, kAttrPortInfo, p, portState(kPortStateArmed));
        drSet(sw, kAttrPortInfo, p, portState(kPortStateActive));
    }
    setMulticastPorts(sw, 0xc001, 0b1110); // ports 1, 2 and 3
    auto out = sw.receive(1, lidPacket(0xc001, 0xffffff, std::vector<uint8_t>(64, 9)));
    REQUIRE(out.size() == 2);
    CHECK(out[0].port == 2);
    CHECK(out[1].port == 3);
}

// Regression (issue 13, defect 1): every DLID from 0xC000 to 0xFFFE used
// to index the 1024-entry MFT; one QP0-addressed packet (which skips the
// ACTIVE check) to 0xD000 from a peer that had only said HELLO aborted
// the switch.
TEST_CASE("multicast LIDs beyond the MFT are dropped, not indexed", "[switch]") {
    Switch sw = makeSwitch();
    CHECK(sw.receive(1, lidPacket(0xd000, 0, std::vector<uint8_t>(kMadSize, 0))).empty());
    CHECK(sw.port(1).counters.xmitDiscards == 1);
    for (unsigned p = 1; p <= 2; ++p) {
        drSet(sw, kAttrPortInfo, p, portState(kPortStateArmed));
        drSet(sw, kAttrPortInfo, p, portState(kPortStateActive));
    }
    for (uint32_t dlid = 0xc000 + Switch::kMftCap; dlid < 0xffff; dlid += 97) {
        CHECK(
            sw.receive(1, lidPacket(static_cast<uint16_t>(dlid), 0xffffff, {1, 2, 3, 4})).empty());
        CHECK(
            sw.receive(1, lidPacket(static_cast<uint16_t>(dlid), 0, std::vector<uint8_t>(kMadSize)))
                .empty());
    }
    CHECK(sw.receive(1, lidPacket(0xfffe, 0xffffff, {1, 2, 3, 4})).empty());
}

TEST_CASE("the PMA counts traffic in IBA units", "[switch]") {
    Switch sw = makeSwitch();
    drSet(sw, kAttrPortInfo, 0, portInfo({.lid = 0x10}));
    drSet(sw, kAttrPortInfo, 1, portState(kPortStateArmed));
    drSet(sw, kAttrPortInfo, 1, portState(kPortStateActive));
    auto request = smpMad(kClassPerfMgt, kGet, kAttrPortCounters, 0);
    request[Mad::kPmaData + 1] = 1; // PortSelect
    auto out = sw.receive(1, lidPacket(0x10, 1, request, 0x21));
    REQUIRE(out.size() == 1);
    auto m = madOf(out[0].packet);
    Mad mad(m);
    CHECK(mad.status() == kStatusOk);
    CHECK(mad.get32(Mad::kPmaData + 36) == sw.port(1).counters.rcvPackets); // PortRcvPkts
    CHECK(mad.get32(Mad::kPmaData + 28) == sw.port(1).counters.rcvData);    // PortRcvData
    CHECK(sw.port(1).counters.rcvData > 0);
    iba::ParseError error;
    auto reply = iba::parse(out[0].packet, &error);
    CHECK(reply->lrh.dlid == 0x21);
    CHECK(reply->bth.destQp == 7);
    CHECK(reply->deth->srcQp == 1);
}

TEST_CASE("link changes set PortStateChange until the SM clears it", "[switch]") {
    Switch sw = makeSwitch();
    clearPortStateChange(sw);
    CHECK_FALSE(sw.portStateChange());
    sw.linkChanged(6, false);
    CHECK(sw.port(6).state == kPortStateDown);
    CHECK(sw.portStateChange());
    clearPortStateChange(sw);
    CHECK_FALSE(sw.portStateChange());
}

TEST_CASE("the SM setting a port DOWN takes its link down to train again", "[switch]") {
    Switch sw = makeSwitch();
    std::vector<std::string> events;
    sw.setEventLogger([&](const std::string &line) { events.push_back(line); });
    drSet(sw, kAttrPortInfo, 6, portState(kPortStateArmed));
    drSet(sw, kAttrPortInfo, 6, portState(kPortStateActive));
    CHECK(sw.takeLinkResets().empty());
    clearPortStateChange(sw);

    auto m = drSet(sw, kAttrPortInfo, 6, portState(kPortStateDown));
    CHECK(Mad(m).status() == kStatusOk);
    // DOWN, not INIT at once: the peer's end must see the link go too.
    CHECK(sw.port(6).state == kPortStateDown);
    drSet(sw, kAttrPortInfo, 6, portState(kPortStateDown));
    CHECK(sw.takeLinkResets() == std::vector<unsigned>{6}); // once, however often set
    CHECK(sw.takeLinkResets().empty());
    // Until the cable is closed nothing but DOWN may be set.
    m = drSet(sw, kAttrPortInfo, 6, portState(kPortStateArmed));
    CHECK(Mad(m).status() == kStatusBadField);
    // The server closes it, the peer comes back: INIT, and the SM hears.
    sw.linkChanged(6, false);
    sw.linkChanged(6, true);
    CHECK(sw.port(6).state == kPortStateInit);
    CHECK(sw.portStateChange());
    CHECK(events == std::vector<std::string>{"port 6: the SM set it ARMED (was INIT)",
                                             "port 6: the SM set it ACTIVE (was ARMED)",
                                             "port 6: the SM set it DOWN (was ACTIVE)"});
}

TEST_CASE("garbage from a port is counted, never forwarded", "[switch]") {
    Switch sw = makeSwitch();
    uint32_t x = 7;
    for (int i = 0; i < 500; ++i) {
        std::vector<uint8_t> junk(x % 400);
        for (auto &b : junk)
            b = static_cast<uint8_t>((x = x * 1664525u + 1013904223u) >> 24);
        CHECK(sw.receive(1, junk).empty());
    }
    CHECK(sw.port(1).counters.rcvErrors == 500);
    CHECK(sw.receive(0, drSmp(kGet, kAttrNodeInfo, 0, {1})).empty()); // no such port
    CHECK(sw.receive(99, drSmp(kGet, kAttrNodeInfo, 0, {1})).empty());
}

TEST_CASE("every SMA table reads back what a Set wrote", "[switch]") {
    Switch sw = makeSwitch();
    auto pattern = [](size_t bytes, uint8_t seed) {
        std::vector<uint8_t> data(bytes);
        for (size_t i = 0; i < bytes; ++i)
            data[i] = static_cast<uint8_t>(seed + i);
        return data;
    };
    // The first `bytes` bytes of a MAD's attribute.
    auto dataOf = [](std::vector<uint8_t> mad, size_t bytes) {
        std::vector<uint8_t> data(bytes);
        readBytes(Mad(mad), data);
        return data;
    };
    struct Table {
        const char *name;
        uint16_t attr;
        uint32_t mod;
        size_t bytes;
    };
    const Table tables[] = {
        {"P_KeyTable port 3 block 0", kAttrPkeyTable, 3u << 16, 64},
        {"P_KeyTable of the management port", kAttrPkeyTable, 0, 64},
        {"SLtoVLMappingTable port 2", kAttrSlToVlTable, 2, 8},
        {"VLArbitrationTable port 1 high priority", kAttrVlArbTable, 3u << 16 | 1, 32},
        {"VLArbitrationTable port 4 low priority", kAttrVlArbTable, 1u << 16 | 4, 32},
        {"LinearForwardingTable block 5", kAttrLinearForwardingTable, 5, 64},
        {"MulticastForwardingTable block 2 position 0", kAttrMulticastForwardingTable, 2, 64},
    };
    for (const Table &t : tables) {
        INFO(t.name);
        const std::vector<uint8_t> expected = pattern(t.bytes, 0x30);
        auto set = drSet(sw, t.attr, t.mod, [&](Mad &m) { writeBytes(m, expected); });
        CHECK(statusOf(set) == kStatusOk);
        auto get = drGet(sw, t.attr, t.mod);
        CHECK(statusOf(get) == kStatusOk);
        CHECK(dataOf(get, t.bytes) == expected);
        CHECK(dataOf(set, t.bytes) == expected); // a Set answers with the new value
    }
    // The LFT block landed where the forwarding uses it.
    CHECK(sw.lftEntry(5 * 64 + 2) == 0x32);
}

TEST_CASE("SwitchInfo, GUIDInfo and NodeDescription describe the switch", "[switch]") {
    Switch sw = makeSwitch();
    auto set = drSet(sw, kAttrSwitchInfo, 0, [](Mad &m) {
        writeSwitchInfo(m, {.linearFdbTop = 0x40,
                            .defaultPort = 3,
                            .lifeTimeValue = 0x11,
                            .multicastFdbTop = 0xc003});
    });
    CHECK(statusOf(set) == kStatusOk);
    const SwitchInfo info = switchInfoOf(set);
    CHECK(info.linearFdbCap == Switch::kLftCap);
    CHECK(info.multicastFdbCap == Switch::kMftCap);
    CHECK(info.linearFdbTop == 0x40);
    CHECK(info.defaultPort == 3);
    CHECK(info.lifeTimeValue == 0x11);
    CHECK(info.multicastFdbTop == 0xc003);

    // A LinearFDBTop beyond the table is clamped, not trusted.
    auto huge =
        drSet(sw, kAttrSwitchInfo, 0, [](Mad &m) { writeSwitchInfo(m, {.linearFdbTop = 0xffff}); });
    CHECK(switchInfoOf(huge).linearFdbTop == Switch::kLftCap - 1);

    auto guid = drGet(sw, kAttrGuidInfo, 0);
    CHECK(statusOf(guid) == kStatusOk);
    std::array<uint64_t, kGuidsPerBlock> guids{};
    readBlock64(Mad(guid), guids);
    CHECK(guids[0] == kGuid);
    CHECK(guids[1] == 0);

    auto desc = drGet(sw, kAttrNodeDescription, 0);
    CHECK(statusOf(desc) == kStatusOk);
    CHECK(std::string(reinterpret_cast<const char *>(desc.data() + 64)) == "test switch");
}

TEST_CASE("out-of-range ports and blocks are refused and change nothing", "[switch]") {
    Switch sw = makeSwitch();
    struct Bad {
        const char *name;
        uint16_t attr;
        uint32_t mod;
    };
    const Bad bad[] = {
        {"PortInfo of port 9 on an 8-port switch", kAttrPortInfo, 9},
        {"P_KeyTable beyond the partition cap", kAttrPkeyTable, 1},
        {"P_KeyTable of port 9", kAttrPkeyTable, 9u << 16},
        {"SLtoVL of port 9", kAttrSlToVlTable, 9},
        {"VLArb block 0", kAttrVlArbTable, 1},
        {"VLArb block 5", kAttrVlArbTable, 5u << 16 | 1},
        {"LFT block beyond LinearFDBCap", kAttrLinearForwardingTable, Switch::kLftCap / 64},
        {"MFT block beyond MulticastFDBCap", kAttrMulticastForwardingTable, Switch::kMftCap / 32},
        {"MFT position 1 on an 8-port switch", kAttrMulticastForwardingTable, 1u << 28},
        {"GUIDInfo block 1", kAttrGuidInfo, 1},
    };
    std::array<uint8_t, Mad::kSmpDataSize> stray{};
    stray[5] = 0x77; // in LFT block 0: DLID 5's port
    for (const Bad &b : bad) {
        INFO(b.name);
        CHECK(statusOf(drGet(sw, b.attr, b.mod)) == kStatusBadField);
        if (b.attr != kAttrGuidInfo) // GUIDInfo is read-only here
            CHECK(statusOf(drSet(sw, b.attr, b.mod, [&](Mad &m) { writeBytes(m, stray); })) ==
                  kStatusBadField);
    }
    // A PortInfo Set with a bad field leaves every field as it was.
    const PortInfo before = portInfoOf(drGet(sw, kAttrPortInfo, 2));
    // NeighborMTU 7 does not exist; HOQLife would change if applied.
    auto r = drSet(sw, kAttrPortInfo, 2, portInfo({.neighborMtu = 7, .hoqLife = 0x13}));
    CHECK(statusOf(r) == kStatusBadField);
    const PortInfo after = portInfoOf(drGet(sw, kAttrPortInfo, 2));
    CHECK(after.vlStallCount == before.vlStallCount); // HOQLife's byte
    CHECK(after.hoqLife == before.hoqLife);
    CHECK(sw.lftEntry(5) == 0xff); // no stray write reached the LFT
}

TEST_CASE("every truncation of a valid SMP is counted, never forwarded", "[switch]") {
    Switch sw = makeSwitch();
    const auto smp = drSmp(kGet, kAttrNodeInfo, 0, {1});
    for (size_t len = 0; len < smp.size(); ++len)
        CHECK(sw.receive(1, std::vector<uint8_t>(smp.begin(), smp.begin() + static_cast<long>(len)))
                  .empty());
    CHECK(sw.port(1).counters.rcvErrors == smp.size());
    CHECK(sw.receive(1, smp).size() == 1); // and the whole one still works
}

TEST_CASE("a link change sends Trap 128 to the SM once it configured the switch", "[switch]") {
    Switch sw = makeSwitch();
    CHECK(sw.linkChanged(7, false).empty()); // no LID, no SM yet: nobody to tell
    drSet(sw, kAttrPortInfo, 0, portInfo({.lid = 0x10, .masterSmLid = 0x20}));
    setRoutes(sw, {{0x20, 2}});

    auto out = sw.linkChanged(7, true);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == 2);
    iba::ParseError error;
    auto p = iba::parse(out[0].packet, &error);
    REQUIRE(p);
    CHECK(p->lrh.dlid == 0x20);
    CHECK(p->lrh.slid == 0x10);
    CHECK(p->lrh.vl == 15);
    CHECK(p->bth.destQp == 0);
    Mad trap(p->payload);
    CHECK(trap.mgmtClass() == kClassSmpLid);
    CHECK(trap.method() == kTrap);
    CHECK(trap.attributeId() == 0x0002); // Notice
    constexpr size_t kNotice = Mad::kSmpData;
    CHECK(trap.get8(kNotice) == 0x81);      // generic, urgent
    CHECK(trap.get16(kNotice + 4) == 128);  // link state changed
    CHECK(trap.get16(kNotice + 6) == 0x10); // issuer
    CHECK(sw.portStateChange());

    // The SM's TrapRepress is consumed silently, not answered.
    auto repress = smpMad(kClassSmpLid, kTrapRepress, 0x0002, 0);
    CHECK(sw.receive(2, lidPacket(0x10, 0, repress, 0x20)).empty());
    // A second change traps again, with a new transaction ID.
    auto again = sw.linkChanged(7, false);
    REQUIRE(again.size() == 1);
    CHECK(Mad(iba::parse(again[0].packet, &error)->payload).get64(8) != trap.get64(8));
}

TEST_CASE("Trap 128 is repeated until the SM represses it", "[switch]") {
    Switch sw = makeSwitch();
    uint64_t now = 1'000'000'000;
    sw.setClock([&] { return now; });
    // SubnetTimeOut: 4.096 us x 2^18 = 1.07 s.
    drSet(sw, kAttrPortInfo, 0, portInfo({.lid = 0x10, .masterSmLid = 0x20, .subnetTimeout = 18}));
    setRoutes(sw, {{0x20, 2}});
    iba::ParseError error;
    const auto tidOf = [&](const Transmit &t) {
        return Mad(iba::parse(t.packet, &error)->payload).get64(8);
    };
    const auto repress = [&](uint64_t tid) {
        auto mad = smpMad(kClassSmpLid, kTrapRepress, 0x0002, 0);
        Mad(mad).set64(8, tid);
        CHECK(sw.receive(2, lidPacket(0x10, 0, mad, 0x20)).empty());
    };

    auto first = sw.linkChanged(7, false);
    REQUIRE(first.size() == 1);
    const uint64_t tid = tidOf(first[0]);
    CHECK(sw.repeatTraps().empty()); // not yet due
    now += 1'100'000'000;
    auto again = sw.repeatTraps();
    REQUIRE(again.size() == 1); // the same trap, the same TID
    CHECK(again[0].port == 2);
    CHECK(tidOf(again[0]) == tid);
    repress(tid + 1); // another trap's repress stops nothing
    now += 1'100'000'000;
    CHECK(sw.repeatTraps().size() == 1);
    repress(tid);
    now += 1'100'000'000;
    CHECK(sw.repeatTraps().empty());

    // An SM that never represses hears a trap 1 + 8 times, then no more.
    auto next = sw.linkChanged(7, true);
    REQUIRE(next.size() == 1);
    CHECK(tidOf(next[0]) != tid);
    unsigned repeats = 0;
    for (int i = 0; i < 20; ++i) {
        now += 1'100'000'000;
        repeats += static_cast<unsigned>(sw.repeatTraps().size());
    }
    CHECK(repeats == 8);
}

TEST_CASE("port 0's M_Key guards the whole switch", "[switch][mkey]") {
    Switch sw = makeSwitch();
    uint64_t now = 1'000'000'000;
    sw.setClock([&] { return now; });
    constexpr uint64_t kKey = 0xfeed;
    // The SM (LID 1 behind port 1) gives the switch LID 2 and a key,
    // protect bits 2, a lease of 1 s.
    setRoutes(sw, {{1, 1}});
    drSet(sw, kAttrPortInfo, 0,
          portInfo({.mkey = kKey,
                    .lid = 2,
                    .masterSmLid = 1,
                    .mkeyLeasePeriod = 1,
                    .mkeyProtectBits = 2}));
    auto smp = [&](uint8_t method, uint64_t key, uint16_t attr = kAttrPortInfo) {
        auto bytes = drSmp(method, attr, 0, {1});
        iba::ParseError error;
        auto p = *iba::parse(bytes, &error);
        Mad(p.payload).set64(24, key);
        return sw.receive(1, iba::build(p));
    };
    auto out = smp(kGet, 0);
    REQUIRE(out.size() == 1); // no GetResp: the Trap 256 alone
    std::vector<uint8_t> trap = madOf(out[0].packet);
    CHECK(Mad(trap).method() == kTrap);
    constexpr size_t kNotice = Mad::kSmpData;
    CHECK(Mad(trap).get16(kNotice + 4) == iba::kTrapBadMkey);
    CHECK(Mad(trap).get8(kNotice + 33) & 0x80); // it came by directed route
    CHECK(sw.mkey().violations() == 1);
    CHECK(smp(kSet, 0x1, kAttrSwitchInfo).size() == 1); // a Set: trapped too
    out = smp(kGet, kKey);
    REQUIRE(out.size() == 1);
    auto answer = madOf(out[0].packet);
    CHECK(Mad(answer).method() == kGetResp);
    CHECK(portInfoOf(answer).mkey == kKey);
    CHECK(portInfoOf(answer).mkeyViolations == 2);
    // A violation starts the lease; 1 s later the protection is gone.
    CHECK(smp(kGet, 0).size() == 1);
    now += 1'500'000'000;
    out = smp(kGet, 0);
    REQUIRE(out.size() == 1);
    answer = madOf(out[0].packet);
    CHECK(Mad(answer).method() == kGetResp);
    CHECK(portInfoOf(answer).mkeyProtectBits == 0);
}

TEST_CASE("an output is stuck after its port's head-of-queue lifetime, bounded both ways",
          "[switch]") {
    using fabric::stallLimitNs;
    // opensm's defaults: ports to CAs, then links between switches.
    CHECK(stallLimitNs(0x10) == 4096ull << 16); // 268 ms
    CHECK(stallLimitNs(0x12) == 4096ull << 18); // 1.07 s
    // Before the SM sets it (0), and short lifetimes: a TCG pause is not a
    // stuck peer.
    CHECK(stallLimitNs(0) == fabric::kMinStallNs);
    CHECK(stallLimitNs(0x0e) == fabric::kMinStallNs);
    // IBA's "infinite" (20 and above) still ends.
    CHECK(stallLimitNs(20) == 4096ull << 20);
    CHECK(stallLimitNs(31) == 4096ull << 20);
}

namespace {

// A field of a MAD the switch answered.
uint8_t field8(std::vector<uint8_t> mad, size_t at) {
    return Mad(mad).get8(at);
}

// Ports `ports` ACTIVE, as the SM leaves them.
void activate(Switch &sw, std::initializer_list<unsigned> ports) {
    for (unsigned p : ports) {
        drSet(sw, kAttrPortInfo, p, portState(kPortStateArmed));
        drSet(sw, kAttrPortInfo, p, portState(kPortStateActive));
    }
}

std::vector<uint8_t> setPkeys(Switch &sw, unsigned port, std::vector<uint16_t> keys) {
    return drSet(sw, kAttrPkeyTable, port << 16, [&](Mad &m) { writeBlock16(m, keys); });
}

std::array<uint16_t, kPkeysPerBlock> pkeysOf(std::vector<uint8_t> mad) {
    std::array<uint16_t, kPkeysPerBlock> keys{};
    readBlock16(Mad(mad), keys);
    return keys;
}

void setEnforcement(Switch &sw, unsigned port, uint8_t bits) {
    drSet(sw, kAttrPortInfo, port, portInfo({.partitionEnforcement = bits}));
}

} // namespace

TEST_CASE("switch ports enforce their partitions in and out (IBA 10.9.2)", "[switch][partition]") {
    Switch sw = makeSwitch();
    // What opensm reads before it programs switch ports: a table of 32
    // entries per external port, inbound and outbound enforcement, no raw
    // filtering.
    auto info = drGet(sw, kAttrSwitchInfo, 0);
    CHECK(switchInfoOf(info).partitionEnforcementCap == 32);
    CHECK(switchInfoOf(info).enforcementBits == 0xc); // Inbound and OutboundEnforcementCap

    setRoutes(sw, {{5, 2}});
    activate(sw, {1, 2});
    // Port 1 (ingress): full member of 0x0001 and 0x0003; port 2
    // (egress): limited member of 0x0001, none of 0x0003.
    CHECK(statusOf(setPkeys(sw, 1, {0xffff, 0x8001, 0x8003})) == kStatusOk);
    CHECK(pkeysOf(setPkeys(sw, 2, {0xffff, 0x0001}))[1] == 0x0001); // read back
    auto send = [&](uint16_t pkey, uint32_t qp = 0x99) {
        return sw.receive(1,
                          lidPacket(5, qp, std::vector<uint8_t>(qp ? 64 : kMadSize, 1), 99, pkey));
    };
    // Not enforced yet: anything goes.
    CHECK(send(0x8002).size() == 1);

    setEnforcement(sw, 1, kEnforceInbound);
    setEnforcement(sw, 2, kEnforceOutbound | 0x3); // the FilterRaw bits are not offered
    CHECK(portInfoOf(drGet(sw, kAttrPortInfo, 1)).partitionEnforcement == kEnforceInbound);
    CHECK(portInfoOf(drGet(sw, kAttrPortInfo, 2)).partitionEnforcement == kEnforceOutbound);

    CHECK(send(0xffff).size() == 1); // the default partition, both sides
    CHECK(send(0x8001).size() == 1); // the partition both ports are in
    // Membership is the end nodes' business: a limited member's packet
    // to a limited member's port passes the switch.
    CHECK(send(0x0001).size() == 1);
    CHECK(sw.port(1).counters.rcvConstraintErrors == 0);
    CHECK(sw.port(2).counters.xmitConstraintErrors == 0);

    CHECK(send(0x8003).empty()); // not in the egress port's table
    CHECK(sw.port(2).counters.xmitConstraintErrors == 1);
    CHECK(send(0x8002).empty()); // in no table of the ingress port
    CHECK(send(0x0000).empty()); // the invalid P_Key is a member of nothing
    CHECK(send(0x8000).empty());
    CHECK(sw.port(1).counters.rcvConstraintErrors == 3);
    CHECK(sw.port(2).counters.xmitConstraintErrors == 1);
    CHECK(send(0x8002, 0).size() == 1); // subnet management (QP0) is exempt

    // The PMA reports both counters.
    drSet(sw, kAttrPortInfo, 0, portInfo({.lid = 0x10}));
    auto counters = [&](unsigned port) {
        auto request = smpMad(kClassPerfMgt, kGet, kAttrPortCounters, 0);
        request[Mad::kPmaData + 1] = static_cast<uint8_t>(port); // PortSelect
        auto out = sw.receive(1, lidPacket(0x10, 1, request, 0x21));
        REQUIRE(out.size() == 1);
        return madOf(out[0].packet);
    };
    CHECK(field8(counters(1), Mad::kPmaData + 17) == 3); // PortRcvConstraintErrors
    CHECK(field8(counters(2), Mad::kPmaData + 16) == 1); // PortXmitConstraintErrors

    // A Set clears the counters its CounterSelect names, and only those
    // (ibqueryerrors -k selects the error counters, not the data).
    auto clear = [&](unsigned port, uint16_t select) {
        auto request = smpMad(kClassPerfMgt, kSet, kAttrPortCounters, 0);
        Mad pma(request);
        pma.set8(Mad::kPmaData + 1, static_cast<uint8_t>(port)); // PortSelect
        pma.set16(Mad::kPmaData + 2, select);                    // CounterSelect
        REQUIRE(sw.receive(1, lidPacket(0x10, 1, request, 0x21)).size() == 1);
    };
    const uint64_t rcvPackets = sw.port(1).counters.rcvPackets;
    clear(1, kSelXmitConstraintErrors);
    CHECK(sw.port(1).counters.rcvConstraintErrors == 3);
    clear(1, kSelRcvConstraintErrors | kSelRcvErrors);
    CHECK(sw.port(1).counters.rcvConstraintErrors == 0);
    CHECK(sw.port(1).counters.rcvPackets >= rcvPackets);
    clear(2, 0x0fff);
    CHECK(sw.port(2).counters.xmitConstraintErrors == 0);
    CHECK(sw.port(2).counters.xmitPackets > 0);
    clear(2, 0xf000);
    CHECK(sw.port(2).counters.xmitPackets == 0);

    // Enforcement off again: the foreign key passes.
    setEnforcement(sw, 1, 0);
    setEnforcement(sw, 2, 0);
    CHECK(send(0x8002).size() == 1);
}

TEST_CASE("port 0's M_Key guards the switch ports' partition tables", "[switch][partition][mkey]") {
    Switch sw = makeSwitch();
    // The SM (LID 1 behind port 1) gives the switch LID 2, a key, and
    // protect bits 2: a Set needs the key.
    setRoutes(sw, {{1, 1}});
    drSet(sw, kAttrPortInfo, 0,
          portInfo({.mkey = 0xfeed, .lid = 2, .masterSmLid = 1, .mkeyProtectBits = 2}));
    auto bytes = drSmp(kSet, kAttrPkeyTable, 3 << 16, {1});
    iba::ParseError error;
    auto p = *iba::parse(bytes, &error);
    Mad smp(p.payload);
    const uint16_t pkeys[] = {0x8123};
    writeBlock16(smp, pkeys);
    smp.set64(24, 0xbad);
    const auto out = sw.receive(1, iba::build(p));
    REQUIRE(out.size() == 1); // the Trap 256, no answer
    CHECK(field8(madOf(out[0].packet), 3) == kTrap);
    CHECK(sw.port(3).pkeys[0] == 0);
    Mad(p.payload).set64(24, 0xfeed);
    sw.receive(1, iba::build(p));
    CHECK(sw.port(3).pkeys[0] == 0x8123);
}

TEST_CASE("a state saved before a port the SM set DOWN trained again trains it once loaded",
          "[switch][switch-state]") {
    Switch sw = makeSwitch();
    drSet(sw, kAttrPortInfo, 6, portState(kPortStateArmed));
    drSet(sw, kAttrPortInfo, 6, portState(kPortStateDown));
    REQUIRE(sw.port(6).linkUp);
    pib::StateWriter w;
    sw.save(w); // before the server took the link reset
    const std::vector<uint8_t> state = w.take();

    Switch loaded(SwitchConfig{kGuid, 8, "test switch"});
    pib::StateReader r(state);
    REQUIRE(loaded.load(r));
    CHECK(loaded.port(6).state == kPortStateDown);
    // Its link trains again, as it would have without the snapshot.
    CHECK(loaded.takeLinkResets() == std::vector<unsigned>{6});
    loaded.linkChanged(6, false);
    loaded.linkChanged(6, true);
    CHECK(loaded.port(6).state == kPortStateInit);
}

TEST_CASE("a switch's saved state loads into a new switch that forwards as it did",
          "[switch][switch-state]") {
    Switch sw = makeSwitch();
    configure(sw, 7, {{5, 2}, {6, 3}});
    activate(sw, {1, 2, 3});
    setPkeys(sw, 2, {0xffff, 0x8001});
    setEnforcement(sw, 2, kEnforceOutbound);
    setMulticastPorts(sw, 0xc001, 0b1110);
    const auto data = lidPacket(5, 0x99, std::vector<uint8_t>(100, 1));
    REQUIRE(sw.receive(1, data).size() == 1);
    pib::StateWriter w;
    sw.save(w);
    const std::vector<uint8_t> state = w.take();

    Switch loaded(SwitchConfig{kGuid, 8, "test switch"});
    pib::StateReader r(state);
    REQUIRE(loaded.load(r));
    CHECK(r.atEnd());
    CHECK(loaded.lid() == 7);
    for (unsigned p = 0; p <= 8; ++p) {
        INFO("port " << p);
        CHECK(loaded.port(p).state == sw.port(p).state);
        CHECK(loaded.port(p).linkUp == sw.port(p).linkUp);
        CHECK(loaded.port(p).pkeys == sw.port(p).pkeys);
        CHECK(loaded.port(p).enforcement == sw.port(p).enforcement);
        CHECK(loaded.port(p).counters.xmitPackets == sw.port(p).counters.xmitPackets);
        CHECK(loaded.port(p).counters.rcvPackets == sw.port(p).counters.rcvPackets);
    }
    CHECK(loaded.lftEntry(5) == 2);
    CHECK(loaded.lftEntry(6) == 3);
    // It forwards by what it loaded: unicast by the LFT, multicast by the MFT.
    auto out = loaded.receive(1, data);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == 2);
    out = loaded.receive(1, lidPacket(0xc001, 0xffffff, std::vector<uint8_t>(64, 9)));
    REQUIRE(out.size() == 2);
    CHECK(out[0].port == 2);
    CHECK(out[1].port == 3);
    // Its counters went on from what it loaded.
    CHECK(loaded.port(1).counters.rcvPackets == sw.port(1).counters.rcvPackets + 2);
}

TEST_CASE("a switch state with a value no SM could set is refused and changes nothing",
          "[switch][switch-state]") {
    Switch sw = makeSwitch(2);
    configure(sw, 7, {{5, 2}});
    pib::StateWriter w;
    sw.save(w);
    const std::vector<uint8_t> state = w.take();
    // The ports section follows the SMA's: port 0's link, then its state.
    // Find port 1's state by saving a switch whose port 1 differs.
    Switch other = makeSwitch(2);
    configure(other, 7, {{5, 2}});
    activate(other, {1});
    pib::StateWriter w2;
    other.save(w2);
    const std::vector<uint8_t> active = w2.take();
    REQUIRE(active.size() == state.size());
    size_t at = 0;
    while (at < state.size() && state[at] == active[at])
        ++at;
    REQUIRE(at < state.size());
    REQUIRE(active[at] == kPortStateActive);
    for (uint8_t bad : {0, 5, 200}) {
        std::vector<uint8_t> changed = state;
        changed[at] = bad;
        Switch fresh(SwitchConfig{kGuid, 2, "test switch"});
        pib::StateReader r(changed);
        CHECK_FALSE(fresh.load(r));
        CHECK_THAT(r.error(), Catch::Contains("port 1: port state"));
        CHECK(fresh.lid() == 0);
    }
    std::vector<uint8_t> downWithState = state;
    downWithState[at - 1] = 0; // port 1's link down, its state INIT
    Switch fresh(SwitchConfig{kGuid, 2, "test switch"});
    pib::StateReader r(downWithState);
    CHECK_FALSE(fresh.load(r));
    CHECK_THAT(r.error(), Catch::Contains("without a link"));
}

namespace {

// A switch of 4 ports offering VL0-7: ports 1 and 2 cabled to neighbours
// that offer as many, port 3 to one with VL0 only (a pib-hca port).
Switch vlSwitch() {
    Switch sw(SwitchConfig{kGuid, 4, "test switch", Switch::kHeldWhileArmed, kVlsMost});
    sw.linkChanged(1, true, kVlsMost);
    sw.linkChanged(2, true, kVlsMost);
    sw.linkChanged(3, true);
    return sw;
}

// A data packet of service level `sl` on virtual lane `vl` to `dlid`.
std::vector<uint8_t> slPacket(uint16_t dlid, uint8_t sl, uint8_t vl) {
    return testing::udDataPacket(dlid, 99, std::vector<uint8_t>(300, 0x5a), sl, vl);
}

// An SL-to-VL table that puts SL n on VL vls[n].
std::function<void(Mad &)> slToVl(std::array<uint8_t, 16> vls) {
    return [vls](Mad &m) {
        SlToVlTable t{};
        for (unsigned sl = 0; sl < 16; ++sl)
            t[sl / 2] |= static_cast<uint8_t>(sl % 2 ? vls[sl] : vls[sl] << 4);
        writeBytes(m, t);
    };
}

} // namespace

TEST_CASE("a link comes up with the VLs both ends offer, and the SM may set no more",
          "[switch][vl]") {
    Switch sw = vlSwitch();
    const PortInfo wide = portInfoOf(drGet(sw, kAttrPortInfo, 1));
    CHECK(wide.vlCap == kVlsMost);
    CHECK(wide.operationalVls == kVlsMost);
    CHECK(wide.vlArbitrationLowCap == VlArbTables::kEntries);
    CHECK(wide.vlArbitrationHighCap == VlArbTables::kEntries);
    CHECK(portInfoOf(drGet(sw, kAttrPortInfo, 3)).operationalVls == kVlsVl0);
    // Port 0 says so: an SM writes SL-to-VL tables only to a switch that does.
    CHECK(portInfoOf(drGet(sw, kAttrPortInfo, 0)).capabilityMask == kIsSlMappingSupported);
    CHECK(statusOf(drSet(sw, kAttrPortInfo, 1, portInfo({.operationalVls = 2}))) == kStatusOk);
    CHECK(sw.port(1).operationalVls == 2);
    CHECK(statusOf(drSet(sw, kAttrPortInfo, 1, portInfo({.operationalVls = 5}))) ==
          kStatusBadField);
    CHECK(sw.port(1).operationalVls == 2);
    // A switch of VL0 only (the default) refuses more.
    Switch narrow = makeSwitch(2);
    CHECK(portInfoOf(drGet(narrow, kAttrPortInfo, 1)).vlCap == kVlsVl0);
    CHECK(portInfoOf(drGet(narrow, kAttrPortInfo, 0)).capabilityMask == 0);
    CHECK(statusOf(drSet(narrow, kAttrPortInfo, 1, portInfo({.operationalVls = 2}))) ==
          kStatusBadField);
}

TEST_CASE("SL-to-VL tables are kept per pair of ports (IBA 14.2.5.8)", "[switch][vl]") {
    Switch sw = vlSwitch();
    std::array<uint8_t, 16> vls{};
    vls[0] = 1;
    vls[1] = 15;
    vls[2] = 7;
    const std::vector<uint8_t> set = drSet(sw, kAttrSlToVlTable, 1 << 8 | 2, slToVl(vls));
    CHECK(statusOf(set) == kStatusOk);
    CHECK(sw.vlFor(1, 2, 0) == 1);
    CHECK(sw.vlFor(1, 2, 1) == 15);
    CHECK(sw.vlFor(1, 2, 2) == 7);
    CHECK(sw.vlFor(2, 1, 0) == 0); // the other direction is another table
    CHECK(sw.vlFor(3, 2, 0) == 0);
    std::vector<uint8_t> back = drGet(sw, kAttrSlToVlTable, 1 << 8 | 2);
    CHECK(Mad(back).get8(Mad::kSmpData) == 0x1f); // SL0 on VL1, SL1 on VL15
    back = drGet(sw, kAttrSlToVlTable, 2 << 8 | 1);
    CHECK(Mad(back).get8(Mad::kSmpData) == 0);
    // No port 5; the optimized forms (bits 16, 17) are not offered.
    for (uint32_t mod : {5u << 8 | 1, 1u << 8 | 5, 1u << 16 | 2, 3u << 16})
        CHECK(statusOf(drSet(sw, kAttrSlToVlTable, mod, slToVl(vls))) == kStatusBadField);
}

TEST_CASE("a forwarded packet goes on the VL its SL maps to, with a VCRC for it", "[switch][vl]") {
    Switch sw = vlSwitch();
    setRoutes(sw, {{5, 2}, {6, 3}});
    activate(sw, {1, 2, 3});
    std::array<uint8_t, 16> vls{};
    vls[0] = 3;
    vls[1] = 15;
    vls[2] = 9; // beyond port 2's VL0-7
    drSet(sw, kAttrSlToVlTable, 1 << 8 | 2, slToVl(vls));
    drSet(sw, kAttrSlToVlTable, 1 << 8 | 3, slToVl(vls));

    const std::vector<uint8_t> in = slPacket(5, 0, 0);
    auto out = sw.receive(1, in);
    REQUIRE(out.size() == 1);
    CHECK(out[0].port == 2);
    iba::ParseError error;
    const auto moved = iba::parse(out[0].packet, &error); // both CRCs checked
    REQUIRE(moved);
    CHECK(moved->lrh.vl == 3);
    CHECK(moved->lrh.sl == 0);
    CHECK(moved->payload == std::vector<uint8_t>(300, 0x5a));
    CHECK(std::equal(in.begin() + 1, in.end() - 2, out[0].packet.begin() + 1));

    // SL1 on VL15, SL2 on a VL port 2 does not run: discarded at the output.
    const uint64_t discards = sw.port(2).counters.xmitDiscards;
    CHECK(sw.receive(1, slPacket(5, 1, 0)).empty());
    CHECK(sw.receive(1, slPacket(5, 2, 0)).empty());
    CHECK(sw.port(2).counters.xmitDiscards == discards + 2);
    // Port 3 runs VL0 only: SL0's VL3 is beyond it.
    CHECK(sw.receive(1, slPacket(6, 0, 0)).empty());
    CHECK(sw.port(3).counters.xmitDiscards == 1);

    // A packet already on its VL goes as it came, not copied.
    const std::vector<uint8_t> onVl3 = slPacket(5, 0, 3);
    const uint8_t *where = nullptr;
    sw.receive(1, onVl3, [&](unsigned, std::span<const uint8_t> p) { where = p.data(); });
    CHECK(where == onVl3.data());

    // Data that comes in on a VL its port does not run is an error of it.
    setRoutes(sw, {{5, 1}});
    const uint64_t errors = sw.port(3).counters.rcvErrors;
    CHECK(sw.receive(3, slPacket(5, 0, 1)).empty());
    CHECK(sw.port(3).counters.rcvErrors == errors + 1);
}

TEST_CASE("VL arbitration tables hold 16 entries of each priority, blocks apart", "[switch][vl]") {
    Switch sw = vlSwitch();
    std::array<uint8_t, 64> entries;
    for (size_t i = 0; i < entries.size(); ++i)
        entries[i] = static_cast<uint8_t>(i + 1);
    for (uint32_t block : {1u, 2u, 3u, 4u})
        CHECK(statusOf(drSet(sw, kAttrVlArbTable, block << 16 | 1,
                             [&](Mad &m) { writeBytes(m, entries); })) == kStatusOk);
    for (uint32_t block : {1u, 2u, 3u, 4u}) {
        std::vector<uint8_t> got = drGet(sw, kAttrVlArbTable, block << 16 | 1);
        // Blocks 2 and 4 are entries 32-63, beyond the cap: they read 0.
        for (unsigned i = 0; i < 64; ++i)
            CHECK(Mad(got).get8(Mad::kSmpData + i) == (block % 2 && i < 32 ? i + 1 : 0));
    }
}

TEST_CASE("a switch's SL-to-VL tables and VLs are in its saved state",
          "[switch][vl][switch-state]") {
    Switch sw = vlSwitch();
    std::array<uint8_t, 16> vls{};
    vls[4] = 6;
    drSet(sw, kAttrSlToVlTable, 3 << 8 | 1, slToVl(vls));
    drSet(sw, kAttrPortInfo, 2, portInfo({.operationalVls = 3}));
    pib::StateWriter w;
    sw.save(w);
    const std::vector<uint8_t> state = w.take();
    Switch fresh(SwitchConfig{kGuid, 4, "test switch", Switch::kHeldWhileArmed, kVlsMost});
    pib::StateReader r(state);
    REQUIRE(fresh.load(r));
    CHECK(fresh.vlFor(3, 1, 4) == 6);
    CHECK(fresh.vlFor(1, 3, 4) == 0);
    CHECK(fresh.port(2).operationalVls == 3);
    // A switch of VL0 only cannot take ports running VL0-3.
    Switch narrow(SwitchConfig{kGuid, 4, "test switch"});
    pib::StateReader r2(state);
    CHECK_FALSE(narrow.load(r2));
    CHECK_THAT(r2.error(), Catch::Contains("beyond its VLCap"));
}

TEST_CASE("the forwarding tables take memory for the blocks the SM wrote", "[switch]") {
    Switch sw = makeSwitch();
    CHECK(sw.tables().lftEntries() == 0);
    CHECK(sw.tables().mftEntries() == 0);
    // A block never written reads as no port, and reading it takes nothing.
    std::vector<uint8_t> block = drGet(sw, kAttrLinearForwardingTable, 700);
    CHECK(Mad(block).get8(Mad::kSmpData + 63) == ForwardingTables::kNoPort);
    CHECK(sw.tables().lftEntries() == 0);
    std::array<uint8_t, 64> ports;
    ports.fill(2);
    drSet(sw, kAttrLinearForwardingTable, 2, [&](Mad &m) { writeBytes(m, ports); });
    CHECK(sw.tables().lftEntries() == 3 * 64);
    CHECK(sw.lftEntry(130) == 2);
    CHECK(sw.lftEntry(5) == ForwardingTables::kNoPort); // the blocks before it
    CHECK(sw.lftEntry(40000) == ForwardingTables::kNoPort);
    setMulticastPorts(sw, 0xc001, 0b110);
    CHECK(sw.tables().mftEntries() == 32);
    // A saved state holds the whole tables; a switch that loads it keeps
    // the blocks written, no more.
    pib::StateWriter w;
    sw.save(w);
    const std::vector<uint8_t> state = w.take();
    Switch fresh = makeSwitch();
    pib::StateReader r(state);
    REQUIRE(fresh.load(r));
    CHECK(fresh.tables().lftEntries() == 3 * 64);
    CHECK(fresh.tables().mftEntries() == 32);
    CHECK(fresh.lftEntry(130) == 2);
    CHECK(fresh.tables().masks(1)[0] == 0b110);
}
