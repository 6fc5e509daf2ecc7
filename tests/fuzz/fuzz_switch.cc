// SPDX-License-Identifier: GPL-2.0-or-later
// libFuzzer harness of the fabric switch's logic (everything but its
// sockets): every port is a peer that may send anything. The input is a
// sequence of steps: links coming up and going down, raw stream bytes cut
// into frames the way the server does, and packets built with valid CRCs:
// an SM one hop away that gives the switch a LID and makes a port ACTIVE,
// directed-route and LID-routed SMPs of every attribute and method the
// SMA knows (and others), PMA queries, and data to unicast and multicast
// LIDs. Whatever the switch answers must be a packet that parses, sent
// out of a port that exists.
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>

#include "frame.hh"
#include "fuzz_switch_checks.hh"
#include "mad.hh"
#include "packet.hh"
#include "smp.hh"
#include "smp_packets.hh"
#include "switch.hh"

using namespace pib;
using namespace pib::fabric;

namespace {

constexpr unsigned kPorts = 8;

void checkOutput(const std::vector<Transmit> &out) {
    fuzzing::checkOutput(out, kPorts, "fuzz-switch");
}

// A MAD of class `cls` with fields from the input.
std::vector<uint8_t> mad(FuzzedDataProvider &in, uint8_t cls) {
    std::vector<uint8_t> m = in.ConsumeBytes<uint8_t>(iba::kMadSize);
    m.resize(iba::kMadSize);
    iba::Mad mad(m);
    mad.set8(0, 1);
    mad.set8(1, cls);
    mad.set8(2, 1);
    const uint8_t methods[] = {iba::kGet, iba::kSet, 0x05, 0x07, 0x81};
    mad.set8(3, methods[in.ConsumeIntegralInRange<size_t>(0, std::size(methods) - 1)]);
    if (cls == iba::kClassPerfMgt)
        mad.set16(16, in.ConsumeBool() ? iba::kAttrPortCounters : iba::kAttrPortCountersExtended);
    else
        mad.set16(16, fuzzing::kSmpAttributes[in.ConsumeIntegralInRange<size_t>(
                          0, std::size(fuzzing::kSmpAttributes) - 1)]);
    mad.set32(20, in.ConsumeBool() ? in.ConsumeIntegralInRange<uint32_t>(0, 70)
                                   : in.ConsumeIntegral<uint32_t>());
    if (cls == iba::kClassSmpDirected) {
        const uint8_t hops = in.ConsumeIntegralInRange<uint8_t>(0, 8);
        mad.set8(6, in.ConsumeIntegralInRange<uint8_t>(0, 9)); // hop pointer
        mad.set8(7, hops);
        mad.set16(32, in.ConsumeBool() ? iba::kPermissiveLid : in.ConsumeIntegral<uint16_t>());
        mad.set16(34, in.ConsumeBool() ? iba::kPermissiveLid : in.ConsumeIntegral<uint16_t>());
        for (unsigned i = 1; i <= hops; ++i)
            mad.set8(128 + i, in.ConsumeIntegralInRange<uint8_t>(0, kPorts + 1));
    }
    return m;
}

std::vector<uint8_t> packet(FuzzedDataProvider &in) {
    iba::Packet p;
    p.lrh.slid = in.ConsumeIntegral<uint16_t>();
    p.lrh.sl = in.ConsumeIntegralInRange<uint8_t>(0, 15);
    switch (in.ConsumeIntegralInRange(0, 4)) {
    case 0: // directed-route SMP
        p.lrh.vl = 15;
        p.lrh.dlid = iba::kPermissiveLid;
        p.payload = mad(in, iba::kClassSmpDirected);
        break;
    case 1: // LID-routed SMP
        p.lrh.vl = 15;
        p.lrh.dlid = in.ConsumeIntegralInRange<uint16_t>(0, 16);
        p.payload = mad(in, iba::kClassSmpLid);
        break;
    case 2: // PMA query, to QP1
        p.lrh.dlid = in.ConsumeIntegralInRange<uint16_t>(0, 16);
        p.bth.destQp = 1;
        p.payload = mad(in, iba::kClassPerfMgt);
        break;
    default: // data, unicast or multicast, with a payload of any size
        p.lrh.vl = in.ConsumeIntegralInRange<uint8_t>(0, 15);
        p.lrh.dlid = in.ConsumeBool() ? in.ConsumeIntegralInRange<uint16_t>(0, 32)
                                      : in.ConsumeIntegral<uint16_t>();
        p.bth.destQp = in.ConsumeIntegralInRange<uint32_t>(0, 0xffffff);
        p.payload = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 4200));
        break;
    }
    p.bth.opcode = iba::kUdSendOnly;
    p.deth = iba::Deth{p.bth.destQp == 1 ? iba::kQp1Qkey : in.ConsumeIntegral<uint32_t>(), 1};
    if (in.ConsumeIntegralInRange(0, 7) == 0) {
        p.grh = iba::Grh{};
        p.lrh.lnh = iba::kLnhIbaGlobal;
    }
    std::vector<uint8_t> bytes = iba::build(p);
    if (in.ConsumeIntegralInRange(0, 15) == 0)
        bytes[in.ConsumeIntegralInRange<size_t>(0, bytes.size() - 1)] ^= 1;
    return bytes;
}

// The switch offers VL0-7; the neighbours on its odd ports as many (so
// that SL-to-VL tables move packets between VLs), on its even ports VL0
// only, as pib-hca's ports.
uint8_t neighborVls(unsigned port) {
    return port % 2 ? kVlsMost : kVlsVl0;
}

// A directed-route Set(PortInfo) of the switch's port `n` from an SM
// one hop away, as an SM configures a switch.
std::vector<uint8_t> setPortInfo(unsigned n, const iba::PortInfo &info) {
    std::vector<uint8_t> m = testing::drSmpMad(iba::kSet, iba::kAttrPortInfo, n, {1});
    iba::Mad mad(m);
    iba::writePortInfo(mad, info);
    return testing::drPacket(std::move(m));
}

// What an SM does first: the switch gets a LID and the SM's, and the
// port the SM is behind goes ARMED and ACTIVE; so LID-routed SMPs, PMA
// queries, replies and traps to the SM have somewhere to go.
void configureAsSm(FuzzedDataProvider &in, Switch &sw, unsigned port) {
    checkOutput(sw.linkChanged(port, true, neighborVls(port)));
    iba::PortInfo info;
    info.lid = in.ConsumeIntegralInRange<uint16_t>(1, 16);
    info.masterSmLid = in.ConsumeIntegralInRange<uint16_t>(1, 16);
    info.subnetTimeout = in.ConsumeIntegralInRange<uint8_t>(0, 31);
    checkOutput(sw.receive(port, setPortInfo(0, info)));
    for (uint8_t state : {iba::kPortStateArmed, iba::kPortStateActive}) {
        iba::PortInfo active;
        active.portState = state;
        checkOutput(sw.receive(port, setPortInfo(port, active)));
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzedDataProvider in(data, size);
    Switch sw(SwitchConfig{0x0250494253570001ull, kPorts, "fuzz switch", Switch::kHeldWhileArmed,
                           kVlsMost});
    wire::FrameReader readers[kPorts + 1];
    for (int steps = 0; steps < 300 && in.remaining_bytes(); ++steps) {
        // Ports 0 and kPorts + 1 do not exist: the switch must refuse them.
        const unsigned port = in.ConsumeIntegralInRange<unsigned>(0, kPorts + 1);
        switch (in.ConsumeIntegralInRange(0, 8)) {
        case 8: // an SM behind the port; or time passes, and traps are sent again
            if (in.ConsumeBool())
                configureAsSm(in, sw, port);
            else
                checkOutput(sw.repeatTraps());
            break;
        case 0: // a cable plugged or pulled
            checkOutput(sw.linkChanged(port, in.ConsumeBool(), neighborVls(port)));
            break;
        case 1: { // stream bytes, framed as the server frames them
            if (port < 1 || port > kPorts)
                break;
            const auto bytes = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 600));
            readers[port].feed(bytes);
            wire::FrameReader::Error error;
            while (auto frame = readers[port].next(&error))
                if (frame->type == PIB_WIRE_PACKET)
                    checkOutput(sw.receive(port, frame->payload));
            if (error != wire::FrameReader::Error::kNone)
                readers[port].reset(); // the server drops such a link
            break;
        }
        default:
            checkOutput(sw.receive(port, packet(in)));
            break;
        }
    }
    return 0;
}
