// SPDX-License-Identifier: GPL-2.0-or-later
// Multicast (IBA 10.5): attaching UD QPs to groups within the advertised
// limits, and delivery of a packet to every attached QP of a port, with
// the sender's own port served by the device (a switch never sends a
// packet back where it came from).
#include <catch2/catch.hpp>

#include "connected_fixture.hh"
#include "multicast.hh"

using namespace pib;
using namespace pib::testing;

namespace {

constexpr uint16_t kMlid = 0xc001;
constexpr uint32_t kQkey = 0x0b1b0000;
const MulticastGroups::Gid kMgid = {0xff, 0x12, 0x40, 0x1b, 0xff, 0xff, 0,    0,
                                    0,    0,    0,    0,    0xff, 0xff, 0xff, 0xff};

pib_mcast group(const MulticastGroups::Gid &gid = kMgid, uint16_t mlid = kMlid) {
    pib_mcast m{};
    std::copy(gid.begin(), gid.end(), m.gid);
    m.mlid = mlid;
    return m;
}

uint8_t attach(Node &n, const pib_mcast &m, bool join = true) {
    return static_cast<uint8_t>(
        n.host.commandIn(join ? PIB_CMD_ATTACH_MCAST : PIB_CMD_DETACH_MCAST, n.qpn, m).status);
}

// RESET -> RTS for the current UD QP of `n`.
void udReady(Node &n, uint32_t qkey = kQkey) {
    n.host.datagramToRts(n.qpn, PIB_QPT_UD, qkey);
}

// A UD send from the current QP of `n` to the group (with a GRH unless
// told otherwise).
void sendToGroup(Node &n, uint64_t wrId, uint64_t buf, uint32_t len, bool grh = true,
                 uint32_t qkey = kQkey) {
    pib_wqe_ud ud{};
    ud.av.dlid = kMlid;
    ud.av.port = 1;
    if (grh) {
        ud.av.flags = PIB_AV_GRH;
        ud.av.hop_limit = 1;
        std::copy(kMgid.begin(), kMgid.end(), ud.av.dgid);
    }
    ud.remote_qpn = iba::kMulticastQpn;
    ud.remote_qkey = qkey;
    n.postDatagram(wrId, ud, buf, len);
}

std::vector<pib_cqe> receivesOf(const std::vector<pib_cqe> &cqes, uint32_t qpn) {
    std::vector<pib_cqe> out;
    for (const pib_cqe &c : cqes)
        if (c.qpn == qpn && c.opcode == PIB_WC_RECV)
            out.push_back(c);
    return out;
}

} // namespace

TEST_CASE("the group table keeps its limits", "[multicast]") {
    MulticastGroups g({2, 2, 3});
    auto gid = [](uint8_t last) {
        MulticastGroups::Gid x = kMgid;
        x[15] = last;
        return x;
    };
    CHECK(g.attach(1, gid(1), kMlid, 100) == PIB_CMD_STATUS_OK);
    CHECK(g.attach(1, gid(1), kMlid, 100) == PIB_CMD_STATUS_OK); // again: counts once
    CHECK(g.attachments() == 1);
    CHECK(g.attach(1, gid(1), kMlid, 101) == PIB_CMD_STATUS_OK);
    CHECK(g.attach(1, gid(1), kMlid, 102) == PIB_CMD_STATUS_NO_RESOURCES); // 2 per group
    CHECK(g.attach(2, gid(1), kMlid, 102) == PIB_CMD_STATUS_OK);           // same MGID, other port
    CHECK(g.groups() == 2);
    CHECK(g.attach(1, gid(2), kMlid, 100) == PIB_CMD_STATUS_NO_RESOURCES); // 2 groups
    CHECK(g.detach(2, gid(1), 102) == PIB_CMD_STATUS_OK);
    CHECK(g.detach(2, gid(1), 102) == PIB_CMD_STATUS_BAD_PARAM);
    CHECK(g.attach(1, gid(2), kMlid, 100) == PIB_CMD_STATUS_OK);
    CHECK(g.attach(1, gid(2), kMlid, 103) == PIB_CMD_STATUS_NO_RESOURCES); // 3 in all
    REQUIRE(g.members(1, gid(1)) != nullptr);
    CHECK(*g.members(1, gid(1)) == std::vector<uint32_t>{100, 101});
    g.detachAll(100);
    CHECK(*g.members(1, gid(1)) == std::vector<uint32_t>{101});
    CHECK(g.members(1, gid(2)) == nullptr); // its last member left
    CHECK(g.attachments() == 1);
}

TEST_CASE("ATTACH_MCAST and DETACH_MCAST check what they are given", "[multicast]") {
    Node n(PIB_QPT_UD, 0x11);
    pib_dev_cap caps;
    n.host.commandOut(PIB_CMD_QUERY_DEV_CAP, 0, &caps);
    CHECK(caps.max_mcast_grp == 256);
    CHECK(caps.max_mcast_qp_attach == 32);
    CHECK(caps.max_total_mcast_qp_attach == 1024);

    // In RESET the QP has no port to join on.
    CHECK(attach(n, group()) == PIB_CMD_STATUS_BAD_STATE);
    udReady(n);
    pib_mcast unicastGid = group();
    unicastGid.gid[0] = 0xfe;
    CHECK(attach(n, unicastGid) == PIB_CMD_STATUS_BAD_PARAM);
    CHECK(attach(n, group(kMgid, 0x0011)) == PIB_CMD_STATUS_BAD_PARAM); // a unicast LID
    CHECK(attach(n, group(kMgid, 0xffff)) == PIB_CMD_STATUS_BAD_PARAM); // the permissive LID
    CHECK(n.host.guestErrors("cmd-bad-param") == 3);
    CHECK(attach(n, group(), false) == PIB_CMD_STATUS_BAD_PARAM); // not attached
    CHECK(attach(n, group()) == PIB_CMD_STATUS_OK);
    CHECK(attach(n, group(), false) == PIB_CMD_STATUS_OK);
    CHECK(n.host.commandIn(PIB_CMD_ATTACH_MCAST, 0x7777, group()).status ==
          PIB_CMD_STATUS_BAD_INDEX);
    CHECK(n.host.commandIn(PIB_CMD_ATTACH_MCAST, 1, group()).status !=
          PIB_CMD_STATUS_OK); // QP1 is not the guest's to attach

    // 256 groups, then no more.
    for (unsigned i = 0; i < 256; ++i) {
        MulticastGroups::Gid gid = kMgid;
        gid[14] = static_cast<uint8_t>(i >> 8), gid[15] = static_cast<uint8_t>(i);
        REQUIRE(attach(n, group(gid)) == PIB_CMD_STATUS_OK);
    }
    MulticastGroups::Gid extra = kMgid;
    extra[13] = 1;
    CHECK(attach(n, group(extra)) == PIB_CMD_STATUS_NO_RESOURCES);
    // Destroying the QP leaves every group, so a new QP can join again.
    CHECK(n.host.command(PIB_CMD_DESTROY_QP, n.qpn).status == PIB_CMD_STATUS_OK);
    n.createQp(PIB_QPT_UD);
    udReady(n);
    CHECK(attach(n, group(extra)) == PIB_CMD_STATUS_OK);

    SECTION("only UD QPs join groups") {
        n.createQp(PIB_QPT_RC);
        CHECK(attach(n, group()) == PIB_CMD_STATUS_BAD_PARAM);
    }
}

TEST_CASE("a multicast send reaches every attached QP but its sender", "[multicast]") {
    Node a(PIB_QPT_UD, 0x11), b(PIB_QPT_UD, 0x22);
    Wire wire{a, b, {}, {}, {}, true, {}};
    // a1 sends and is attached; a2 is attached on the same port; b1 is
    // attached across the wire; b2 is not attached.
    udReady(a);
    const Node::Qp a1 = a.current();
    REQUIRE(attach(a, group()) == PIB_CMD_STATUS_OK);
    a.createQp(PIB_QPT_UD);
    udReady(a);
    REQUIRE(attach(a, group()) == PIB_CMD_STATUS_OK);
    const uint64_t a2Buf = a.host.alloc(4096);
    a.postRecv(0xa2, a2Buf, 4096);
    const Node::Qp a2 = a.current();
    udReady(b);
    REQUIRE(attach(b, group()) == PIB_CMD_STATUS_OK);
    const uint64_t b1Buf = b.host.alloc(4096);
    b.postRecv(0xb1, b1Buf, 4096);
    const Node::Qp b1 = b.current();
    b.createQp(PIB_QPT_UD);
    udReady(b);
    b.postRecv(0xb2, b.host.alloc(4096), 4096);
    const Node::Qp b2 = b.current();

    a.use(a1);
    a.postRecv(0xa1, a.host.alloc(4096), 4096);
    const uint64_t out = a.host.alloc(1000);
    a.fill(out, 1000, 9);

    SECTION("delivered with its GRH to the group's QPs, on both sides of the wire") {
        sendToGroup(a, 1, out, 1000);
        wire.run();
        const auto ca = a.poll(), cb = b.poll();
        REQUIRE(receivesOf(ca, a1.qpn).empty()); // never to the sender
        const auto toA2 = receivesOf(ca, a2.qpn), toB1 = receivesOf(cb, b1.qpn);
        REQUIRE(toA2.size() == 1);
        REQUIRE(toB1.size() == 1);
        CHECK(receivesOf(cb, b2.qpn).empty());
        for (const auto &[c, host, buf] :
             {std::tuple{toA2[0], &a.host, a2Buf}, std::tuple{toB1[0], &b.host, b1Buf}}) {
            CHECK(c.status == PIB_WC_SUCCESS);
            CHECK(c.byte_len == 40 + 1000);
            CHECK(c.flags & PIB_CQE_GRH);
            CHECK(c.src_qp == a1.qpn);
            CHECK(c.slid == a.lid);
            CHECK(c.dlid_path_bits == 0);
            CHECK(std::equal(a.host.at(out), a.host.at(out) + 1000, host->at(buf) + 40));
            CHECK(std::equal(kMgid.begin(), kMgid.end(), host->at(buf) + 24)); // DGID
        }
        // The one packet on the wire went to QP 0xFFFFFF at the MLID.
        REQUIRE(wire.seen.size() == 1);
        CHECK(wire.seen[0].lrh.dlid == kMlid);
        CHECK(wire.seen[0].bth.destQp == iba::kMulticastQpn);
    }
    SECTION("after a detach a QP receives no more") {
        b.use(b1);
        REQUIRE(attach(b, group(), false) == PIB_CMD_STATUS_OK);
        sendToGroup(a, 1, out, 1000);
        wire.run();
        CHECK(receivesOf(b.poll(), b1.qpn).empty());
        CHECK(receivesOf(a.poll(), a2.qpn).size() == 1);
    }
    SECTION("without a GRH or with another Q_Key nobody receives it") {
        sendToGroup(a, 1, out, 1000, /*grh=*/false);
        sendToGroup(a, 2, out, 1000, true, 0x1234);
        wire.run();
        const auto ca = a.poll();
        CHECK(receivesOf(ca, a2.qpn).empty());
        CHECK(receivesOf(b.poll(), b1.qpn).empty());
        CHECK(a.host.traces("err_mcast_drop") == 1);
        CHECK(b.host.traces("err_mcast_drop") == 1);
        // Both sends completed: UD does not know what became of them.
        CHECK(ca.size() == 2);
    }
}
