// SPDX-License-Identifier: GPL-2.0-or-later
// The addressing rules the device and the switch share (LIDs, LMC, P_Key
// membership), alone and as every transport of the device applies them:
// a datagram and a connected packet with the same P_Key get the same
// answer.
#include <catch2/catch.hpp>

#include "addressing.hh"
#include "connected_fixture.hh"

using namespace pib;
using namespace pib::testing;

TEST_CASE("multicast and unicast LIDs", "[addressing]") {
    CHECK_FALSE(iba::isMulticastLid(0xbfff));
    CHECK(iba::isMulticastLid(0xc000));
    CHECK(iba::isMulticastLid(0xfffe));
    CHECK_FALSE(iba::isMulticastLid(0xffff)); // permissive
    CHECK_FALSE(iba::isUnicastLid(0));
    CHECK(iba::isUnicastLid(1));
    CHECK(iba::isUnicastLid(0xbfff));
    CHECK_FALSE(iba::isUnicastLid(0xc000));
}

TEST_CASE("a port answers to the LIDs its LMC covers", "[addressing]") {
    CHECK(iba::portAnswersTo(0x10, 0, 0x10));
    CHECK_FALSE(iba::portAnswersTo(0x10, 0, 0x11));
    for (uint16_t lid = 0x10; lid < 0x14; ++lid) {
        CHECK(iba::portAnswersTo(0x10, 2, lid));
        CHECK(iba::pathBits(2, lid) == lid - 0x10);
    }
    CHECK_FALSE(iba::portAnswersTo(0x10, 2, 0x14));
    CHECK_FALSE(iba::portAnswersTo(0, 0, 0)); // no LID yet: nothing is ours
}

TEST_CASE("P_Keys match by partition, and two limited members do not", "[addressing]") {
    CHECK(iba::pkeysMatch(0xffff, 0xffff));
    CHECK(iba::pkeysMatch(0xffff, 0x7fff)); // full and limited
    CHECK(iba::pkeysMatch(0x7fff, 0xffff));
    CHECK_FALSE(iba::pkeysMatch(0x7fff, 0x7fff)); // limited and limited
    CHECK_FALSE(iba::pkeysMatch(0x8001, 0x8002)); // other partitions
    CHECK_FALSE(iba::pkeysMatch(0x0000, 0x0000)); // no P_Key at all
    CHECK_FALSE(iba::pkeysMatch(0x8000, 0x8000));
}

namespace {

// A node whose port's P_Key table holds only `pkey`, and a packet for its
// QP with `packetPkey`: whether the QP took it, and whether the port
// counted a P_Key violation.
struct Verdict {
    bool received;
    bool violation;
};

uint32_t pkeyViolations(Node &n) {
    pib_port_info info{};
    n.host.commandOut(PIB_CMD_QUERY_PORT, 1, &info);
    return info.bad_pkey_cntr;
}

Verdict deliver(uint8_t type, uint16_t tablePkey, uint16_t packetPkey) {
    Node n(type, 2);
    pib_mad_ifc response;
    n.host.mad(
        iba::kClassSmpLid, iba::kSet, iba::kAttrPkeyTable, 0,
        [&](iba::Mad &m) { m.set16(64, tablePkey); }, &response);
    const uint64_t buf = n.host.alloc(4096);
    iba::Packet k;
    k.lrh.dlid = n.lid;
    k.lrh.slid = 7;
    k.bth.pkey = packetPkey;
    k.bth.destQp = n.qpn;
    if (type == PIB_QPT_UD) {
        n.host.datagramToRts(n.qpn, PIB_QPT_UD, 0x1234);
        k.bth.opcode = iba::kUdSendOnly;
        k.deth = iba::Deth{0x1234, 99};
    } else {
        n.connectTo(7, 99, PIB_QPT_RC, {});
        k.bth.opcode = iba::kTransportRc | iba::kSendOnly;
        k.bth.psn = 200; // the fixture's receive PSN
    }
    n.postRecv(1, buf, 4096);
    k.payload.assign(32, 0x5a);
    const uint32_t before = pkeyViolations(n);
    const auto frame = wire::encode(PIB_WIRE_PACKET, iba::build(k));
    pib_core_port_receive(n.host.core, 1, frame.data(), frame.size());
    const auto done = n.poll();
    const bool received = std::any_of(done.begin(), done.end(),
                                      [](const pib_cqe &c) { return c.opcode == PIB_WC_RECV; });
    return {received, pkeyViolations(n) != before};
}

} // namespace

TEST_CASE("UD and RC apply the same P_Key rule", "[addressing]") {
    for (uint8_t type : {uint8_t{PIB_QPT_UD}, uint8_t{PIB_QPT_RC}}) {
        INFO("QP type " << int{type});
        const Verdict full = deliver(type, 0xffff, 0xffff);
        CHECK(full.received);
        CHECK_FALSE(full.violation);
        const Verdict mixed = deliver(type, 0x7fff, 0xffff);
        CHECK(mixed.received);
        CHECK_FALSE(mixed.violation);
        // Both limited: IBA 10.9.3 forbids it; before, UD took it and RC
        // did not.
        const Verdict limited = deliver(type, 0x7fff, 0x7fff);
        CHECK_FALSE(limited.received);
        CHECK(limited.violation);
        const Verdict other = deliver(type, 0xffff, 0x8005);
        CHECK_FALSE(other.received);
        CHECK(other.violation);
    }
}
