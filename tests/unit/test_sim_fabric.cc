// SPDX-License-Identifier: GPL-2.0-or-later
// The simulated fabric: its file, its validation, simulated CAs' SMA and
// PMA, and a fabric an SM sweeps, routes and activates, then guests'
// packets across it hop by hop, a routing loop, and a link pulled.
#include <numeric>
#include <random>
#include <sstream>

#include <catch2/catch.hpp>

#include "mini_sm.hh"
#include "sim_fabric.hh"
#include "smp_packets.hh"

using namespace pib;
using namespace pib::fabric;
using namespace pib::iba;
using pib::testing::MiniSm;

namespace {

constexpr uint64_t kSwitchGuid = 0x0250494253500000ull;
constexpr uint64_t kCaGuid = 0x0250494243410000ull;

// A chain of `length` switches of 4 ports: port 1 to the one before,
// port 2 to the one after, a simulated CA on port 3, and fabric ports on
// port 4 of the first (fabric port 1) and of the last (port 2).
FabricDescription chain(unsigned length) {
    FabricDescription d;
    for (uint32_t i = 0; i < length; ++i) {
        d.nodes.push_back({true, kSwitchGuid + i, 4, "switch " + std::to_string(i)});
        d.nodes.push_back({false, kCaGuid + 4 * i, 1, "ca " + std::to_string(i)});
        d.links.push_back({{2 * i, 3}, {2 * i + 1, 1}});
        if (i)
            d.links.push_back({{2 * (i - 1), 2}, {2 * i, 1}});
    }
    d.attachments = {{0, 4}, {2 * (length - 1), 4}};
    return d;
}

std::vector<uint8_t> udPacket(uint16_t slid, uint16_t dlid, std::vector<uint8_t> payload) {
    Packet p;
    p.lrh.slid = slid;
    p.lrh.dlid = dlid;
    p.bth.opcode = kUdSendOnly;
    p.bth.pkey = 0xffff;
    p.bth.destQp = 0x42;
    p.deth = Deth{0x1111, 0x43};
    p.payload = std::move(payload);
    return build(p);
}

std::vector<uint8_t> randomBytes(size_t n, unsigned seed) {
    std::mt19937 rng(seed);
    std::vector<uint8_t> v(n);
    for (auto &b : v)
        b = static_cast<uint8_t>(rng());
    return v;
}

// Sends `bytes` into fabric port `port`; what leaves, by fabric port.
std::vector<Transmit> inject(SimulatedFabric &f, unsigned port, std::span<const uint8_t> bytes) {
    std::vector<Transmit> out;
    const auto take = [&](unsigned p, std::span<const uint8_t> b) {
        out.push_back({p, {b.begin(), b.end()}});
    };
    for (Transmit &t : f.receive(port, bytes, take))
        out.push_back(std::move(t));
    return out;
}

// A chain with both guests' cables in and the SM (on port 1) done.
struct SweptChain {
    explicit SweptChain(unsigned length) : f(chain(length)), sm(f, 1) {
        f.linkChanged(1, true);
        f.linkChanged(2, true);
        sm.sweep();
    }
    SimulatedFabric f;
    MiniSm sm;
};

} // namespace

TEST_CASE("a fabric file describes switches, CAs, links and attachments", "[sim-fabric]") {
    std::istringstream in(R"(# two switches and a CA
switch 0x10 8 "leaf one"
switch 0x20 36 "spine"   # a comment
ca 0x30 2 "node 1 HCA-1"
link 0x10 1 0x20 5
link 0x30 2 0x10 2
attach 0x10 8
vls 4
)");
    const FabricDescription d = readFabric(in);
    CHECK(d.vlCap == vlsCode(4));
    REQUIRE(d.nodes.size() == 3);
    CHECK(d.nodes[1].isSwitch);
    CHECK(d.nodes[1].ports == 36);
    CHECK(d.nodes[2].description == "node 1 HCA-1");
    REQUIRE(d.links.size() == 2);
    CHECK(d.links[1].first.node == 2);
    CHECK(d.links[1].second.port == 2);
    REQUIRE(d.attachments.size() == 1);
    CHECK(d.attachments[0].port == 8);
    SimulatedFabric f(d);
    CHECK(f.ports() == 1);
    CHECK(f.switchCount() == 2);
    CHECK(f.caCount() == 1);
}

TEST_CASE("a fabric file's errors name their line", "[sim-fabric]") {
    const auto error = [](const char *text) {
        std::istringstream in(text);
        try {
            readFabric(in);
        } catch (const std::runtime_error &e) {
            return std::string(e.what());
        }
        return std::string("no error");
    };
    CHECK(error("switch 0x1 8 \"a\"\nlink 0x1 1 0x2 1\n") ==
          "line 2: node 0x2 is not described before");
    CHECK(error("switch 0x1 8 \"a\"\nswitch 0x1 4 \"b\"\n") == "line 2: node 0x1 again");
    CHECK(error("switch 0x1 255 \"a\"\n").starts_with("line 1: \"255\" is not a number"));
    CHECK(error("switch 0x1 8 \"unterminated\n") == "line 1: a quote that does not end");
    CHECK(error("router 0x1 8 \"a\"\n") == "line 1: no statement \"router\"");
    CHECK(error("ca 0x1 1\n") == "line 1: ca takes 3 words");
    CHECK(error("switch -1 8 \"a\"\n").starts_with("line 1: \"-1\" is not a number"));
    CHECK(error("vls 3\n") == "line 1: vls is 1, 2, 4 or 8, not 3");
    CHECK(error("vls 16\n").starts_with("line 1: \"16\" is not a number"));
}

TEST_CASE("a fabric that cannot be built is refused whole", "[sim-fabric]") {
    FabricDescription d = chain(2);
    SECTION("a port with two cables") {
        d.links.push_back({{0, 3}, {2, 3}});
        CHECK_THROWS_WITH(SimulatedFabric(d), Catch::Contains("already has a cable"));
    }
    SECTION("a guest on a CA") {
        d.attachments.push_back({1, 1});
        CHECK_THROWS_WITH(SimulatedFabric(d), Catch::Contains("already has a cable"));
    }
    SECTION("a guest on a CA's free port") {
        d.nodes[1].ports = 2;
        d.attachments.push_back({1, 2});
        CHECK_THROWS_WITH(SimulatedFabric(d), Catch::Contains("a guest plugs into a switch"));
    }
    SECTION("a port beyond the node's") {
        d.links.push_back({{0, 5}, {2, 3}});
        CHECK_THROWS_WITH(SimulatedFabric(d), Catch::Contains("does not exist"));
    }
    SECTION("a CA of 3 ports") {
        d.nodes[1].ports = 3;
        CHECK_THROWS_WITH(SimulatedFabric(d), Catch::Contains("1 to 2 ports"));
    }
    SECTION("a GUID twice") {
        d.nodes[3].guid = d.nodes[1].guid;
        CHECK_THROWS_WITH(SimulatedFabric(d), Catch::Contains("not unique"));
    }
}

TEST_CASE("an SM discovers, routes and activates a simulated fabric", "[sim-fabric]") {
    SweptChain c(6);
    // 6 switches and 6 CAs, each found once, and the two guests.
    CHECK(c.sm.nodes.size() == 12);
    CHECK(std::count_if(c.sm.nodes.begin(), c.sm.nodes.end(),
                        [](const MiniSm::Node &n) { return n.isSwitch; }) == 6);
    for (const MiniSm::Node &n : c.sm.nodes) {
        if (n.isSwitch) {
            const Switch *sw = c.f.switchByGuid(n.guid);
            REQUIRE(sw);
            CHECK(sw->lid() == n.lid);
            for (unsigned p = 1; p <= 4; ++p)
                CHECK(sw->port(p).state ==
                      (sw->port(p).linkUp ? kPortStateActive : kPortStateDown));
        } else {
            const SimulatedCa *ca = c.f.caByGuid(n.guid);
            REQUIRE(ca);
            CHECK(ca->port(1).lid == n.lid);
            CHECK(ca->port(1).smLid == 1);
            CHECK(ca->port(1).state == kPortStateActive);
        }
    }
}

TEST_CASE("a simulated CA answers its SMA and PMA as an HCA does", "[sim-fabric]") {
    SweptChain c(3);
    const MiniSm::Node *ca = nullptr;
    for (const MiniSm::Node &n : c.sm.nodes)
        if (!n.isSwitch && n.guid == kCaGuid + 8)
            ca = &n;
    REQUIRE(ca);
    SECTION("NodeInfo, PortInfo, GUIDInfo and NodeDescription over a directed route") {
        auto info = c.sm.smp(kGet, kAttrNodeInfo, 0, ca->path);
        REQUIRE(info);
        Mad m(*info);
        CHECK(m.status() == kStatusOk);
        CHECK(m.returning());
        CHECK(m.hopPointer() == 1); // stepped back to the SM's own port
        const NodeInfo n = readNodeInfo(m);
        CHECK(n.nodeType == kNodeTypeCa);
        CHECK(n.nodeGuid == kCaGuid + 8);
        CHECK(n.portGuid == kCaGuid + 9);
        CHECK(n.localPortNum == 1);
        auto guids = c.sm.smp(kGet, kAttrGuidInfo, 0, ca->path);
        REQUIRE(guids);
        CHECK(Mad(*guids).get64(Mad::kSmpData) == kCaGuid + 9);
        auto desc = c.sm.smp(kGet, kAttrNodeDescription, 0, ca->path);
        REQUIRE(desc);
        CHECK(std::string(reinterpret_cast<const char *>(desc->data() + Mad::kSmpData)) == "ca 2");
        // No SM here: SMInfo is not supported.
        auto sminfo = c.sm.smp(kGet, 0x0020, 0, ca->path);
        REQUIRE(sminfo);
        CHECK(Mad(*sminfo).status() == kStatusBadAttribute);
    }
    SECTION("a PortInfo Set that is wrong changes nothing") {
        auto answer = c.sm.smp(kSet, kAttrPortInfo, 1, ca->path, [](Mad &m) {
            writePortInfo(m, {.lid = 0xc001}); // a multicast LID
        });
        REQUIRE(answer);
        CHECK(Mad(*answer).status() == kStatusBadField);
        CHECK(c.f.caByGuid(kCaGuid + 8)->port(1).lid == ca->lid);
        auto armed = c.sm.smp(kSet, kAttrPortInfo, 1, ca->path, [](Mad &m) {
            writePortInfo(m, {.lid = 7, .portState = kPortStateArmed}); // ACTIVE to ARMED
        });
        REQUIRE(armed);
        CHECK(Mad(*armed).status() == kStatusBadField);
        CHECK(c.f.caByGuid(kCaGuid + 8)->port(1).state == kPortStateActive);
    }
    SECTION("a PortInfo Set with bit 31 of its modifier names the port in the low bits") {
        // opensm sets bit 31 when it supports extended link speeds.
        auto answer = c.sm.smp(kSet, kAttrPortInfo, 0x80000001u, ca->path, [&](Mad &m) {
            writePortInfo(m, {.lid = ca->lid, .masterSmLid = 1, .subnetTimeout = 18});
        });
        REQUIRE(answer);
        CHECK(Mad(*answer).status() == kStatusOk);
        CHECK(c.f.caByGuid(kCaGuid + 8)->port(1).subnetTimeout == 18);
    }
    SECTION("the P_Key table is set and read back") {
        std::array<uint16_t, kPkeysPerBlock> keys{0xffff, 0x8001};
        auto set =
            c.sm.smp(kSet, kAttrPkeyTable, 0, ca->path, [&](Mad &m) { writeBlock16(m, keys); });
        REQUIRE(set);
        CHECK(Mad(*set).status() == kStatusOk);
        CHECK(c.f.caByGuid(kCaGuid + 8)->port(1).pkeys[1] == 0x8001);
        auto block1 = c.sm.smp(kGet, kAttrPkeyTable, 1, ca->path);
        REQUIRE(block1);
        CHECK(Mad(*block1).status() == kStatusBadField);
    }
    SECTION("the PMA answers PortCounters by LID, and data for a QP is dropped") {
        const auto counters = [&] {
            auto mad = testing::smpMad(kClassPerfMgt, kGet, kAttrPortCounters, 0, 77);
            Mad(mad).set8(Mad::kPmaData + 1, 1); // PortSelect
            Packet p;
            p.lrh.slid = 1;
            p.lrh.dlid = ca->lid;
            p.bth.opcode = kUdSendOnly;
            p.bth.pkey = 0xffff;
            p.bth.destQp = 1;
            p.deth = Deth{kQp1Qkey, 1};
            p.payload = mad;
            auto out = inject(c.f, 1, build(p));
            REQUIRE(out.size() == 1);
            CHECK(out[0].port == 1);
            ParseError e;
            auto reply = parse(out[0].packet, &e);
            REQUIRE(reply);
            CHECK(reply->lrh.slid == ca->lid);
            CHECK(reply->lrh.dlid == 1);
            Mad m(reply->payload);
            CHECK(m.method() == kGetResp);
            CHECK(m.status() == kStatusOk);
            return m.get32(Mad::kPmaData + 36); // PortRcvPkts
        };
        const uint32_t before = counters();
        CHECK(inject(c.f, 1, udPacket(1, ca->lid, randomBytes(256, 1))).empty());
        CHECK(c.f.caDataDropped() == 1);
        CHECK(counters() == before + 2); // the data packet and the first query
    }
}

TEST_CASE("guests' packets cross five simulated switches by the SM's routes, bit-exact",
          "[sim-fabric]") {
    SweptChain c(6);
    const uint64_t hopsBefore = c.f.stats().hops;
    // Each switch's ingress port on the way from guest 1 to guest 2.
    const auto ingress = [&](unsigned i) -> const PortCounters & {
        return c.f.switchByGuid(kSwitchGuid + i)->port(i == 0 ? 4 : 1).counters;
    };
    std::vector<uint64_t> before;
    for (unsigned i = 0; i < 6; ++i)
        before.push_back(ingress(i).rcvPackets);
    for (unsigned i = 0; i < 20; ++i) {
        const auto payload = randomBytes(64 + 200 * i, i);
        const auto packet = udPacket(MiniSm::guestLid(1), MiniSm::guestLid(2), payload);
        auto out = inject(c.f, 1, packet);
        REQUIRE(out.size() == 1);
        CHECK(out[0].port == 2);
        CHECK(out[0].packet == packet);
        // And back.
        const auto back = udPacket(MiniSm::guestLid(2), MiniSm::guestLid(1), payload);
        out = inject(c.f, 2, back);
        REQUIRE(out.size() == 1);
        CHECK(out[0].port == 1);
        CHECK(out[0].packet == back);
    }
    CHECK(c.f.stats().hops - hopsBefore == 40 * 5);
    // Every switch on the way took each of the 20 packets in.
    for (unsigned i = 0; i < 6; ++i)
        CHECK(ingress(i).rcvPackets - before[i] == 20);
}

TEST_CASE("a fabric's VLs: links inside run them all, SL-to-VL tables move packets hop by hop",
          "[sim-fabric][vl]") {
    FabricDescription d = chain(3);
    d.vlCap = kVlsMost;
    SimulatedFabric f(d);
    MiniSm sm(f, 1);
    f.linkChanged(1, true);
    f.linkChanged(2, true);
    sm.sweep();
    const Switch &middle = *f.switchByGuid(kSwitchGuid + 1);
    const Switch &last = *f.switchByGuid(kSwitchGuid + 2);
    CHECK(middle.port(1).operationalVls == kVlsMost); // to another simulated switch
    CHECK(middle.port(3).operationalVls == kVlsMost); // to a simulated CA
    CHECK(f.caByGuid(kCaGuid + 4)->port(1).operationalVls == kVlsMost);
    CHECK(last.port(4).operationalVls == kVlsVl0); // to a guest's pib-hca port
    for (const MiniSm::Node &n : sm.nodes) {
        auto info = sm.smp(kGet, kAttrPortInfo, n.isSwitch ? 0 : 1, n.path);
        REQUIRE(info);
        CHECK(readPortInfo(Mad(*info)).capabilityMask == kIsSlMappingSupported);
    }
    const auto setSlToVl = [&](const MiniSm::Node &sw, uint32_t pair, uint8_t byte0) {
        auto answer = sm.smp(kSet, kAttrSlToVlTable, pair, sw.path,
                             [&](Mad &m) { writeBytes(m, std::array<uint8_t, 1>{byte0}); });
        REQUIRE(answer);
        CHECK(Mad(*answer).status() == kStatusOk);
    };
    const auto node = [&](uint64_t guid) -> const MiniSm::Node & {
        for (const MiniSm::Node &n : sm.nodes)
            if (n.guid == guid)
                return n;
        FAIL("no node " << guid);
        return sm.nodes[0];
    };
    // SL0 leaves the middle switch on VL2 (port 1 in, port 2 out), and
    // the last switch puts it back on VL0 for the guest.
    setSlToVl(node(kSwitchGuid + 1), 1 << 8 | 2, 0x20);
    const auto packet = udPacket(MiniSm::guestLid(1), MiniSm::guestLid(2), randomBytes(500, 7));
    const uint64_t inOnLast = last.port(1).counters.rcvPackets;
    auto out = inject(f, 1, packet);
    REQUIRE(out.size() == 1);
    CHECK(out[0].packet == packet); // VL0 again, VCRC and all
    CHECK(last.port(1).counters.rcvPackets == inOnLast + 1);
    // The last switch puts SL0 on VL1 towards the guest, whose link runs
    // VL0 only: discarded there, and counted.
    setSlToVl(node(kSwitchGuid + 2), 1 << 8 | 4, 0x10);
    CHECK(inject(f, 1, packet).empty());
    CHECK(last.port(4).counters.xmitDiscards == 1);
}

namespace {

// The SM's LFTs of switches 2 and 3 send guest 2's LID to each other.
void loopGuest2(SweptChain &c) {
    for (unsigned i : {2u, 3u}) {
        const MiniSm::Node *n = nullptr;
        for (const MiniSm::Node &node : c.sm.nodes)
            if (node.guid == kSwitchGuid + i)
                n = &node;
        REQUIRE(n);
        std::array<uint8_t, 64> block{};
        block.fill(0xff);
        block[MiniSm::guestLid(2)] = i == 2 ? 2 : 1;
        c.sm.smp(kSet, kAttrLinearForwardingTable, 0, n->path,
                 [&](Mad &m) { writeBytes(m, block); });
    }
}

} // namespace

TEST_CASE("a routing loop drops the packet after 64 hops and counts it", "[sim-fabric]") {
    SweptChain c(6);
    loopGuest2(c);
    const Switch *three = c.f.switchByGuid(kSwitchGuid + 3);
    const uint64_t discardsBefore = three->port(1).counters.xmitDiscards;
    CHECK(inject(c.f, 1, udPacket(1, MiniSm::guestLid(2), randomBytes(100, 9))).empty());
    CHECK(c.f.stats().loopDrops == 1);
    CHECK(three->port(1).counters.xmitDiscards +
              c.f.switchByGuid(kSwitchGuid + 2)->port(2).counters.xmitDiscards >
          discardsBefore);
}

TEST_CASE("a link pulled inside the fabric sends Trap 128 to the SM's guest", "[sim-fabric]") {
    SweptChain c(4);
    std::vector<Transmit> out = c.f.setLink(kSwitchGuid + 2, 1, false);
    // Both ends' switches trap, to LID 1 by the routes the SM wrote; the
    // far end's route to it was the link that went down.
    REQUIRE(out.size() == 1);
    CHECK(c.f.switchByGuid(kSwitchGuid + 2)->port(1).counters.vl15Dropped == 1);
    for (const Transmit &t : out) {
        CHECK(t.port == 1);
        ParseError e;
        auto p = parse(t.packet, &e);
        REQUIRE(p);
        CHECK(p->lrh.dlid == 1);
        Mad m(p->payload);
        CHECK(m.method() == kTrap);
        CHECK(m.attributeId() == 0x0002); // Notice
        CHECK(p->lrh.slid == c.f.switchByGuid(kSwitchGuid + 1)->lid());
    }
    CHECK(c.f.switchByGuid(kSwitchGuid + 2)->port(1).state == kPortStateDown);
    CHECK(c.f.switchByGuid(kSwitchGuid + 1)->port(2).state == kPortStateDown);
    // Guest 2 is cut off now.
    CHECK(inject(c.f, 1, udPacket(1, MiniSm::guestLid(2), randomBytes(64, 3))).empty());
    // Plugged in again, the link trains to INIT and needs the SM.
    c.f.setLink(kSwitchGuid + 1, 2, true);
    CHECK(c.f.switchByGuid(kSwitchGuid + 2)->port(1).state == kPortStateInit);
    CHECK_THROWS_WITH(c.f.setLink(kSwitchGuid, 4, false), Catch::Contains("no link inside"));
    CHECK_THROWS_WITH(c.f.setLink(kSwitchGuid, 9, false), Catch::Contains("no port 9"));
    CHECK_THROWS_WITH(c.f.setLink(0x99, 1, false), Catch::Contains("no port 1"));
}

TEST_CASE("the SM setting a port DOWN inside the fabric retrains its link", "[sim-fabric]") {
    SweptChain c(3);
    const MiniSm::Node *middle = nullptr;
    for (const MiniSm::Node &n : c.sm.nodes)
        if (n.guid == kSwitchGuid + 1)
            middle = &n;
    REQUIRE(middle);
    c.sm.smp(kSet, kAttrPortInfo, 2, middle->path,
             [](Mad &m) { writePortInfo(m, {.portState = kPortStateDown}); });
    CHECK(c.f.takeLinkResets().empty()); // none of the process's ports
    CHECK(c.f.switchByGuid(kSwitchGuid + 1)->port(2).state == kPortStateInit);
    CHECK(c.f.switchByGuid(kSwitchGuid + 2)->port(1).state == kPortStateInit);
    CHECK(c.f.switchByGuid(kSwitchGuid + 2)->port(1).counters.linkDowned == 1);
}

TEST_CASE("a multicast storm through parallel links is cut off at the fabric's budget",
          "[sim-fabric]") {
    // Two switches joined by three cables, and an MFT that sends the
    // group out of every one of them: each arrival fans out twice.
    FabricDescription d;
    d.nodes = {{true, kSwitchGuid, 5, "a"}, {true, kSwitchGuid + 1, 5, "b"}};
    for (unsigned p = 1; p <= 3; ++p)
        d.links.push_back({{0, p}, {1, p}});
    d.attachments = {{0, 4}};
    SimulatedFabric f(d);
    f.linkChanged(1, true);
    MiniSm sm(f, 1);
    sm.sweep();
    REQUIRE(sm.nodes.size() == 2);
    for (const MiniSm::Node &n : sm.nodes) {
        std::array<uint16_t, kMftEntriesPerBlock> masks{};
        masks[0] = 0b11110; // MLID 0xc000: ports 1 to 4
        sm.smp(kSet, kAttrMulticastForwardingTable, 0, n.path,
               [&](Mad &m) { writeBlock16(m, masks); });
    }
    const uint64_t before = f.stats().hops;
    const auto out = inject(f, 1, udPacket(1, 0xc000, randomBytes(2000, 5)));
    CHECK(f.stats().budgetDrops > 0);
    // Every move counts, those back to the guest too, which the server
    // would queue: at most kMaxBytesOut of them.
    CHECK(f.stats().hops - before + out.size() == SimulatedFabric::kMaxDeliveries);
    CHECK(out.size() > 1);
    size_t bytesOut = 0;
    for (const Transmit &t : out)
        bytesOut += t.packet.size();
    CHECK(bytesOut <= SimulatedFabric::kMaxBytesOut);
    // Nothing is left in flight: the next SMP gets its answer alone.
    auto answer = sm.smp(kGet, kAttrNodeInfo, 0, sm.nodes[1].path);
    REQUIRE(answer);
    CHECK(readNodeInfo(Mad(*answer)).nodeGuid == kSwitchGuid + 1);
}

TEST_CASE("numbers, GUIDs and answers a fabric refuses", "[sim-fabric]") {
    CHECK(fabricNumber("010", 100) == 10); // decimal, not octal
    CHECK(fabricNumber("0x1f", 100) == 31);
    CHECK_FALSE(fabricNumber("0x", 100));
    CHECK_FALSE(fabricNumber("12abc", 100));
    CHECK_FALSE(fabricNumber("4294967297", 254)); // not port 1
    CHECK_FALSE(fabricNumber("-1", 100));
    FabricDescription d = chain(2);
    d.nodes[2].guid = d.nodes[1].guid + 1; // a switch with a CA's port GUID
    CHECK_THROWS_WITH(SimulatedFabric(d), Catch::Contains("not unique"));

    SweptChain c(2);
    std::vector<Transmit> out;
    CHECK(c.f.command("link", "0x0250494253500001 1 down extra", out) ==
          "error: link GUID PORT up|down|clear|fault SPEC...");
    CHECK(c.f.command("link", "0x0250494253500001 4294967297 down", out) ==
          "error: link GUID PORT up|down|clear|fault SPEC...");
    CHECK(out.empty());
    // An answer sent to an agent is not answered: two agents cannot keep
    // answering each other.
    for (const MiniSm::Node &n : c.sm.nodes) {
        auto mad = testing::smpMad(kClassSmpLid, kGetResp, kAttrNodeInfo, 0);
        Packet p;
        p.lrh.vl = 15;
        p.lrh.slid = 1;
        p.lrh.dlid = n.lid;
        p.bth.opcode = kUdSendOnly;
        p.deth = Deth{0, 0};
        p.payload = mad;
        CHECK(inject(c.f, 1, build(p)).empty());
        auto dr = c.sm.smp(kGetResp, kAttrNodeInfo, 0, n.path);
        CHECK_FALSE(dr);
    }
}

// ---- a simulated fabric's state (sim_fabric_state.cc) ---------------------

namespace {

std::vector<uint8_t> savedState(const SimulatedFabric &f) {
    StateWriter w;
    f.save(w);
    return w.take();
}

// A fresh chain that loads `state`: whether it took it, and why not.
std::pair<bool, std::string> loadInto(SimulatedFabric &f, std::span<const uint8_t> state) {
    StateReader r(state);
    const bool loaded = f.load(r);
    return {loaded && r.ok() && r.atEnd(), r.error()};
}

} // namespace

TEST_CASE("a simulated fabric's saved state loads into a new one that forwards as it did",
          "[sim-fabric][switch-state]") {
    SweptChain c(6);
    // Something counted and something pulled, to see them come back.
    const auto payload = randomBytes(300, 7);
    const auto packet = udPacket(MiniSm::guestLid(1), MiniSm::guestLid(2), payload);
    REQUIRE(inject(c.f, 1, packet).size() == 1);
    c.f.setLink(kSwitchGuid + 5, 3, false); // the last switch's CA
    const std::vector<uint8_t> state = savedState(c.f);

    SimulatedFabric fresh(chain(6));
    fresh.linkChanged(1, true);
    fresh.linkChanged(2, true);
    fresh.setLink(kSwitchGuid + 5, 3, false);
    const auto [loaded, why] = loadInto(fresh, state);
    INFO(why);
    REQUIRE(loaded);
    // Every node as the SM left it, without a sweep.
    for (uint32_t i = 0; i < 6; ++i) {
        const Switch &was = *c.f.switchByGuid(kSwitchGuid + i);
        const Switch &is = *fresh.switchByGuid(kSwitchGuid + i);
        CHECK(is.lid() == was.lid());
        for (unsigned p = 1; p <= 4; ++p) {
            CHECK(is.port(p).state == was.port(p).state);
            CHECK(is.port(p).counters.rcvPackets == was.port(p).counters.rcvPackets);
        }
        const SimulatedCa &caWas = *c.f.caByGuid(kCaGuid + 4 * i);
        const SimulatedCa &caIs = *fresh.caByGuid(kCaGuid + 4 * i);
        CHECK(caIs.port(1).lid == caWas.port(1).lid);
        CHECK(caIs.port(1).state == caWas.port(1).state);
        CHECK(caIs.port(1).smLid == caWas.port(1).smLid);
    }
    CHECK(fresh.caByGuid(kCaGuid + 20)->port(1).state == kPortStateDown);
    // It forwards by the restored tables, five switches through.
    for (unsigned i = 0; i < 5; ++i) {
        const auto bytes =
            udPacket(MiniSm::guestLid(2), MiniSm::guestLid(1), randomBytes(100 + 900 * i, i));
        const auto out = inject(fresh, 2, bytes);
        REQUIRE(out.size() == 1);
        CHECK(out[0].port == 1);
        CHECK(out[0].packet == bytes);
    }
    // What it saves loads again.
    SimulatedFabric copy(chain(6));
    copy.linkChanged(1, true);
    copy.linkChanged(2, true);
    copy.setLink(kSwitchGuid + 5, 3, false);
    REQUIRE(loadInto(copy, savedState(fresh)).first);
}

TEST_CASE("a simulated fabric refuses another fabric's state, or one whose links disagree",
          "[sim-fabric][switch-state]") {
    SweptChain c(4);
    const std::vector<uint8_t> state = savedState(c.f);
    const auto refused = [&](SimulatedFabric &f, std::span<const uint8_t> bytes,
                             const std::string &reason) {
        const Switch before = *f.switchByGuid(kSwitchGuid);
        const auto [loaded, why] = loadInto(f, bytes);
        INFO(why);
        CHECK_FALSE(loaded);
        CHECK(why.find(reason) != std::string::npos);
        // Left as it was.
        CHECK(f.switchByGuid(kSwitchGuid)->lid() == before.lid());
    };
    SECTION("another fabric: more nodes") {
        SimulatedFabric longer(chain(5));
        refused(longer, state, "nodes");
    }
    SECTION("the same nodes cabled otherwise") {
        // Switch 1's CA on its free port 4, not 3: the state's port 3 has
        // its link up, where this fabric has no cable.
        FabricDescription d = chain(4);
        for (auto &[a, b] : d.links)
            if (a.node == 2 && a.port == 3)
                a.port = 4;
        SimulatedFabric recabled(d);
        refused(recabled, state, "has no cable, but its link is up");
    }
    SECTION("every cut of the state") {
        SimulatedFabric fresh(chain(4));
        for (size_t cut = 0; cut < state.size(); cut += 97)
            CHECK_FALSE(loadInto(fresh, std::span(state).first(cut)).first);
        CHECK(fresh.switchByGuid(kSwitchGuid)->lid() == 0);
    }
}

// ---- faults on the links inside (sim_fabric_faults.cc) --------------------

namespace {

uint64_t g_fakeNs = 1'000'000'000;
uint64_t fakeClock() {
    return g_fakeNs;
}

std::string guidOf(unsigned switchIndex) {
    return guidText(kSwitchGuid + switchIndex);
}

// The fabric's answer to a control command; what it sends, into `out`.
std::string control(SimulatedFabric &f, std::string_view verb, std::string_view args,
                    std::vector<Transmit> &out) {
    return f.command(verb, args, out).value_or("no such command");
}

// What the timers release at the fake time `ns`.
std::vector<Transmit> timersAt(SimulatedFabric &f, uint64_t ns, uint64_t *wait = nullptr) {
    g_fakeNs = ns;
    uint64_t waitNs = 0;
    auto out = f.serviceTimers(&waitNs);
    if (wait)
        *wait = waitNs;
    return out;
}

} // namespace

TEST_CASE("a link inside the fabric loses, corrupts and delays what crosses it", "[sim-fabric]") {
    SweptChain c(4);
    c.f.setClock(fakeClock);
    const uint64_t t0 = g_fakeNs = 1'000'000'000;
    std::vector<Transmit> out;
    // Switch 1's port 2 is cabled to switch 2's port 1, on the guests' way.
    const std::string end = guidOf(1) + " 2";
    REQUIRE(control(c.f, "link", end + " fault loss-every=2 dir=out", out).starts_with("ok "));
    unsigned arrived = 0;
    for (unsigned i = 0; i < 10; ++i) {
        const auto packet = udPacket(1, MiniSm::guestLid(2), randomBytes(100 + i, i));
        const auto left = inject(c.f, 1, packet);
        if (!left.empty()) {
            CHECK(left[0].packet == packet);
            ++arrived;
        }
    }
    CHECK(arrived == 5);
    CHECK_THAT(c.f.faultStatus(),
               Catch::Contains("link " + guidOf(1) + " port 2 out: loss-every=2") &&
                   Catch::Contains("packets=10 dropped=5"));
    // The other way is not faulty.
    CHECK(inject(c.f, 2, udPacket(2, MiniSm::guestLid(1), randomBytes(64, 1))).size() == 1);

    // Corruption at switch 2's end is caught by its VCRC check.
    REQUIRE(control(c.f, "link", end + " clear", out).starts_with("ok link"));
    CHECK(c.f.faultStatus().empty());
    const std::string far = guidOf(2) + " 1";
    REQUIRE(control(c.f, "link", far + " fault corrupt=100% dir=in", out).starts_with("ok "));
    const uint64_t errorsBefore = c.f.switchByGuid(kSwitchGuid + 2)->port(1).counters.rcvErrors;
    CHECK(inject(c.f, 1, udPacket(1, MiniSm::guestLid(2), randomBytes(200, 7))).empty());
    CHECK(c.f.switchByGuid(kSwitchGuid + 2)->port(1).counters.rcvErrors == errorsBefore + 1);

    // A delay holds packets until the timers release them, in order.
    REQUIRE(control(c.f, "link", far + " fault delay=2ms", out).starts_with("ok "));
    std::vector<std::vector<uint8_t>> sent;
    for (unsigned i = 0; i < 3; ++i) {
        sent.push_back(udPacket(1, MiniSm::guestLid(2), randomBytes(300, 20 + i)));
        CHECK(inject(c.f, 1, sent.back()).empty());
    }
    uint64_t wait = 0;
    CHECK(timersAt(c.f, t0 + 1'000'000, &wait).empty());
    CHECK(wait == 1'000'000);
    const auto released = timersAt(c.f, t0 + 2'000'000, &wait);
    REQUIRE(released.size() == 3);
    for (unsigned i = 0; i < 3; ++i) {
        CHECK(released[i].port == 2);
        CHECK(released[i].packet == sent[i]);
    }
    CHECK(wait == UINT64_MAX);
    // Cleared, what it still held goes on at once.
    CHECK(inject(c.f, 1, sent[0]).empty());
    control(c.f, "link", far + " clear", out);
    REQUIRE(out.size() == 1);
    CHECK(out[0].packet == sent[0]);
}

TEST_CASE("a flapping link inside the fabric goes down and up, and its switches trap",
          "[sim-fabric]") {
    SweptChain c(4);
    c.f.setClock(fakeClock);
    const uint64_t t0 = g_fakeNs = 5'000'000'000;
    std::vector<Transmit> out;
    REQUIRE(control(c.f, "link", guidOf(2) + " 2 fault flap=1ms/10ms", out).starts_with("ok "));
    // Up for the first 9 ms of each period.
    uint64_t wait = 0;
    CHECK(timersAt(c.f, t0, &wait).empty());
    CHECK(wait == 9'000'000);
    const auto traps = timersAt(c.f, t0 + 9'000'000, &wait);
    CHECK(c.f.switchByGuid(kSwitchGuid + 2)->port(2).state == kPortStateDown);
    CHECK(c.f.switchByGuid(kSwitchGuid + 3)->port(1).state == kPortStateDown);
    // Switch 2's Trap 128 reaches the SM's guest on port 1.
    REQUIRE_FALSE(traps.empty());
    CHECK(traps[0].port == 1);
    CHECK(wait == 1'000'000);
    CHECK(inject(c.f, 1, udPacket(1, MiniSm::guestLid(2), randomBytes(64, 5))).empty());
    timersAt(c.f, t0 + 10'000'000);
    CHECK(c.f.switchByGuid(kSwitchGuid + 2)->port(2).state == kPortStateInit);
    CHECK_THAT(c.f.faultStatus(), Catch::Contains("flap: 1 flaps, link up"));
    // Cleared while down, the link comes back.
    timersAt(c.f, t0 + 19'500'000);
    CHECK(c.f.switchByGuid(kSwitchGuid + 3)->port(1).state == kPortStateDown);
    control(c.f, "link", guidOf(2) + " 2 clear", out);
    CHECK(c.f.switchByGuid(kSwitchGuid + 3)->port(1).state == kPortStateInit);
}

TEST_CASE("a routing loop through a delaying link is still cut off after 64 hops", "[sim-fabric]") {
    SweptChain c(6);
    c.f.setClock(fakeClock);
    g_fakeNs = 1'000'000'000;
    loopGuest2(c);
    std::vector<Transmit> out;
    REQUIRE(control(c.f, "link", guidOf(2) + " 2 fault delay=1us", out).starts_with("ok "));
    CHECK(inject(c.f, 1, udPacket(1, MiniSm::guestLid(2), randomBytes(100, 9))).empty());
    unsigned turns = 0;
    for (uint64_t wait = 0; wait != UINT64_MAX && turns < 1000; ++turns)
        CHECK(timersAt(c.f, g_fakeNs + 1000, &wait).empty());
    CHECK(turns <= 64);
    CHECK(c.f.stats().loopDrops == 1);
}

TEST_CASE("faults inside the fabric are refused where there is no inner link, or too many",
          "[sim-fabric]") {
    SimulatedFabric f(chain(10));
    std::vector<Transmit> out;
    // Port 4 of the first switch is a guest's: the process port's faults.
    CHECK_THAT(control(f, "link", guidOf(0) + " 4 fault loss=1%", out),
               Catch::Contains("no link inside"));
    CHECK_THAT(control(f, "link", guidOf(0) + " 2 fault loss=1% bogus=1", out),
               Catch::StartsWith("error: "));
    CHECK(control(f, "link", guidOf(0) + " 2 clear extra", out) ==
          "error: link GUID PORT up|down|clear|fault SPEC...");
    CHECK_THAT(control(f, "link", guidOf(0) + " 2 clear", out), Catch::Contains("no faults"));
    unsigned set = 0;
    for (unsigned i = 0; i < 10; ++i)
        for (unsigned port : {2u, 3u})
            if (control(f, "link", guidOf(i) + " " + std::to_string(port) + " fault loss=1%", out)
                    .starts_with("ok "))
                ++set;
    CHECK(set == SimulatedFabric::kMaxFaultedEnds);
    CHECK_THAT(control(f, "link", guidOf(9) + " 1 fault dup=1%", out),
               Catch::Contains("clear one first"));
    // One already faulty takes a new fault.
    CHECK_THAT(control(f, "link", guidOf(0) + " 2 fault dup=1%", out), Catch::StartsWith("ok "));
}

TEST_CASE("a hand on a flapping cable inside: up waits for the flap, down outlasts it; held "
          "packets are lost with the link",
          "[sim-fabric]") {
    SweptChain c(4);
    c.f.setClock(fakeClock);
    const uint64_t t0 = g_fakeNs = 7'000'000'000;
    std::vector<Transmit> out;
    const std::string end = guidOf(2) + " 2";
    CHECK_THAT(control(c.f, "link", end + " fault dir=in", out), Catch::Contains("no fault in"));
    REQUIRE(control(c.f, "link", end + " fault flap=1ms/10ms delay=500us dir=out", out)
                .starts_with("ok "));
    // A packet held by the delay when the flap takes the link down is lost.
    g_fakeNs = t0 + 8'800'000;
    CHECK(inject(c.f, 1, udPacket(1, MiniSm::guestLid(2), randomBytes(64, 8))).empty());
    CHECK(timersAt(c.f, t0 + 9'000'000).size() == 1); // switch 2's Trap 128 only
    CHECK_THAT(c.f.faultStatus(), Catch::Contains("dropped=1"));
    CHECK(timersAt(c.f, t0 + 9'600'000).empty());
    // Plugged in by hand while the flap holds it: refused.
    CHECK_THAT(control(c.f, "link", end + " up", out), Catch::Contains("a flap holds the link"));
    // Pulled by hand while flapped: it stays pulled when the flap is over.
    REQUIRE(control(c.f, "link", end + " down", out).starts_with("ok "));
    timersAt(c.f, t0 + 10'000'000);
    CHECK(c.f.switchByGuid(kSwitchGuid + 2)->port(2).state == kPortStateDown);
    control(c.f, "link", end + " clear", out);
    CHECK(c.f.switchByGuid(kSwitchGuid + 2)->port(2).state == kPortStateDown);
    REQUIRE(control(c.f, "link", end + " up", out).starts_with("ok "));
    CHECK(c.f.switchByGuid(kSwitchGuid + 2)->port(2).state == kPortStateInit);
}

// The server asks at every turn of its loop for traps to repeat and links
// to reset (SimulatedFabric keeps a list of the switches that have some):
// a switch's trap repeats until the SM represses it, in a loaded fabric
// too.
TEST_CASE("a trap inside the fabric repeats until the SM represses it", "[sim-fabric]") {
    SweptChain c(4);
    c.f.setClock(fakeClock);
    g_fakeNs = 1'000'000'000;
    ParseError e;
    const auto tidOf = [&](const Transmit &t) {
        return Mad(parse(t.packet, &e)->payload).get64(8);
    };
    // Past the longest wait between repeats, the traps repeated.
    const auto repeated = [&] {
        g_fakeNs += 11'000'000'000;
        return c.f.repeatTraps();
    };
    const auto repress = [&](const Transmit &trap) {
        auto mad = testing::smpMad(kClassSmpLid, kTrapRepress, 0x0002, 0);
        Mad(mad).set64(8, tidOf(trap));
        Packet p;
        p.lrh.vl = 15;
        p.lrh.slid = 1;
        p.lrh.dlid = parse(trap.packet, &e)->lrh.slid;
        p.bth.opcode = kUdSendOnly;
        p.deth = Deth{0, 0};
        p.payload = mad;
        CHECK(inject(c.f, 1, build(p)).empty());
    };
    const std::vector<Transmit> first = c.f.setLink(kSwitchGuid + 2, 1, false);
    REQUIRE(first.size() == 1);
    CHECK(c.f.repeatTraps().empty()); // not yet due
    for (int i = 0; i < 2; ++i) {
        const auto again = repeated();
        REQUIRE(again.size() == 1);
        CHECK(again[0].port == 1);
        CHECK(tidOf(again[0]) == tidOf(first[0]));
    }
    repress(first[0]);
    CHECK(repeated().empty());
    // A loaded fabric's switches trap and repeat as well.
    const std::vector<uint8_t> state = savedState(c.f);
    StateReader r(state);
    REQUIRE(c.f.load(r));
    const std::vector<Transmit> back = c.f.setLink(kSwitchGuid + 2, 1, true);
    REQUIRE_FALSE(back.empty());
    CHECK(repeated().size() == back.size());
    for (const Transmit &t : back)
        repress(t);
    CHECK(repeated().empty());
    CHECK(c.f.takeLinkResets().empty());
}
