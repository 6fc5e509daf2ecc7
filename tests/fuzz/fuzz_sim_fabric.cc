// SPDX-License-Identifier: GPL-2.0-or-later
// libFuzzer harness of a simulated fabric (sim_fabric.hh): two leaves and
// two spines, simulated CAs (one of two ports, cabled to a leaf and a
// spine), a spine cabled to itself, and two guests' ports that may send
// anything. The input is a sequence of steps: an SM behind a guest's port
// that sweeps, routes and activates the fabric; directed-route SMPs along
// any path, LID-routed SMPs, PMA queries and data to any LID; guests'
// cables and the fabric's own pulled and plugged in, or made faulty (by
// the control socket's command, with any words), and what the faults held
// back released; the SM setting ports DOWN; traps repeated. Whatever leaves the fabric must be a
// packet that parses, out of a guest's port; every step must end (libFuzzer's timeout).
#include <fuzzer/FuzzedDataProvider.h>

#include <cstdio>
#include <cstdlib>

#include "fuzz_switch_checks.hh"
#include "mad.hh"
#include "mini_sm.hh"
#include "packet.hh"
#include "sim_fabric.hh"
#include "smp_packets.hh"

using namespace pib;
using namespace pib::fabric;

namespace {

constexpr unsigned kGuests = 2;
constexpr uint64_t kGuid = 0x0250494253500000ull;

void check(bool ok, const char *what) {
    fuzzing::check(ok, "fuzz-sim-fabric", what);
}

void checkOutput(const std::vector<Transmit> &out) {
    fuzzing::checkOutput(out, kGuests, "fuzz-sim-fabric");
}

// Leaves A, B (nodes 0, 1) and spines X, Y (2, 3), of 5 ports; CAs c1 (4,
// one port) and c2 (5, two ports). A1 and B2 are the guests' places.
FabricDescription smallFabric() {
    FabricDescription d;
    for (uint32_t i = 0; i < 4; ++i)
        d.nodes.push_back({true, kGuid + i, 5, "switch " + std::to_string(i)});
    d.nodes.push_back({false, kGuid + 0x10, 1, "c1"});
    d.nodes.push_back({false, kGuid + 0x20, 2, "c2"});
    d.links = {{{0, 2}, {4, 1}}, {{1, 1}, {5, 1}}, {{2, 3}, {5, 2}}, {{0, 3}, {2, 1}},
               {{0, 4}, {3, 1}}, {{1, 3}, {2, 2}}, {{1, 4}, {3, 2}}, {{3, 3}, {3, 4}}};
    d.attachments = {{0, 1}, {1, 2}};
    d.vlCap = kVlsMost; // so that SL-to-VL tables move packets between VLs inside
    return d;
}

std::vector<uint8_t> madOf(FuzzedDataProvider &in, uint8_t cls) {
    std::vector<uint8_t> m = in.ConsumeBytes<uint8_t>(iba::kMadSize);
    m.resize(iba::kMadSize);
    iba::Mad mad(m);
    mad.set8(0, 1);
    mad.set8(1, cls);
    mad.set8(2, 1);
    const uint8_t methods[] = {iba::kGet, iba::kSet, iba::kTrapRepress, 0x81};
    mad.set8(3, methods[in.ConsumeIntegralInRange<size_t>(0, std::size(methods) - 1)]);
    mad.set16(16, cls == iba::kClassPerfMgt
                      ? (in.ConsumeBool() ? iba::kAttrPortCounters : iba::kAttrClassPortInfo)
                      : fuzzing::kSmpAttributes[in.ConsumeIntegralInRange<size_t>(
                            0, std::size(fuzzing::kSmpAttributes) - 1)]);
    mad.set32(20, in.ConsumeBool() ? in.ConsumeIntegralInRange<uint32_t>(0, 7)
                                   : in.ConsumeIntegral<uint32_t>());
    if (cls == iba::kClassSmpDirected) {
        const uint8_t hops = in.ConsumeIntegralInRange<uint8_t>(0, 8);
        mad.set8(6, in.ConsumeIntegralInRange<uint8_t>(0, 9));
        mad.set8(7, in.ConsumeBool() ? hops : in.ConsumeIntegral<uint8_t>());
        mad.set16(32, in.ConsumeBool() ? iba::kPermissiveLid : in.ConsumeIntegral<uint16_t>());
        mad.set16(34, in.ConsumeBool() ? iba::kPermissiveLid : in.ConsumeIntegral<uint16_t>());
        for (unsigned i = 1; i <= hops; ++i)
            mad.set8(128 + i, in.ConsumeIntegralInRange<uint8_t>(0, 6));
    }
    return m;
}

std::vector<uint8_t> packet(FuzzedDataProvider &in) {
    iba::Packet p;
    p.lrh.slid = in.ConsumeIntegralInRange<uint16_t>(0, 20);
    p.lrh.dlid =
        in.ConsumeBool() ? iba::kPermissiveLid : in.ConsumeIntegralInRange<uint16_t>(0, 24);
    p.bth.pkey = in.ConsumeBool() ? 0xffff : in.ConsumeIntegral<uint16_t>();
    switch (in.ConsumeIntegralInRange(0, 3)) {
    case 0:
        p.lrh.vl = 15;
        p.payload = madOf(in, iba::kClassSmpDirected);
        break;
    case 1:
        p.lrh.vl = 15;
        p.payload = madOf(in, iba::kClassSmpLid);
        break;
    case 2:
        p.bth.destQp = 1;
        p.payload = madOf(in, iba::kClassPerfMgt);
        break;
    default:
        p.lrh.dlid =
            in.ConsumeBool() ? in.ConsumeIntegralInRange<uint16_t>(0xc000, 0xc004) : p.lrh.dlid;
        p.bth.destQp = in.ConsumeIntegralInRange<uint32_t>(0, 0xffffff);
        p.payload = in.ConsumeBytes<uint8_t>(in.ConsumeIntegralInRange(0, 300));
        break;
    }
    p.bth.opcode = iba::kUdSendOnly;
    p.deth =
        iba::Deth{p.bth.destQp == 1 ? iba::kQp1Qkey : 0, in.ConsumeIntegralInRange<uint32_t>(0, 2)};
    std::vector<uint8_t> bytes = iba::build(p);
    if (in.ConsumeIntegralInRange(0, 15) == 0)
        bytes[in.ConsumeIntegralInRange<size_t>(0, bytes.size() - 1)] ^= 1;
    return bytes;
}

// A LID-routed PortCounters Get from the guest of LID `slid` to `dlid`,
// as perfquery and ibqueryerrors send once the fabric is up.
std::vector<uint8_t> portCountersQuery(uint16_t slid, uint16_t dlid) {
    std::vector<uint8_t> m(iba::kMadSize);
    iba::Mad mad(m);
    mad.set8(0, 1);
    mad.set8(1, iba::kClassPerfMgt);
    mad.set8(2, 1);
    mad.set8(3, iba::kGet);
    mad.set16(16, iba::kAttrPortCounters);
    iba::Packet p;
    p.lrh.slid = slid;
    p.lrh.dlid = dlid;
    p.bth.pkey = 0xffff;
    p.bth.opcode = iba::kUdSendOnly;
    p.bth.destQp = 1;
    p.deth = iba::Deth{iba::kQp1Qkey, 1};
    p.payload = std::move(m);
    return iba::build(p);
}

// Fault words for a cable inside the fabric: each kind, with values up to
// always (loss=100%) and times the clock's steps reach.
std::string faultWords(FuzzedDataProvider &in) {
    static const char *const kWords[] = {"loss=",    "corrupt=", "dup=",  "reorder=", "loss-every=",
                                         "burst=2/", "delay=",   "flap=", "window=",  "dir="};
    std::string words;
    for (unsigned n = in.ConsumeIntegralInRange(1, 4); n; --n) {
        const std::string word =
            kWords[in.ConsumeIntegralInRange<size_t>(0, std::size(kWords) - 1)];
        words += " " + word;
        if (word == "delay=")
            words += std::to_string(in.ConsumeIntegralInRange(0, 3000)) + "ms";
        else if (word == "flap=")
            words += std::to_string(in.ConsumeIntegralInRange(1, 1000)) + "ms/" +
                     std::to_string(in.ConsumeIntegralInRange(1, 5000)) + "ms";
        else if (word == "dir=")
            words += in.ConsumeBool() ? "in" : "out";
        else if (word.back() == '=' && word != "loss-every=" && word != "window=")
            words += std::to_string(in.ConsumeIntegralInRange(0, 100)) + "%";
        else
            words += std::to_string(in.ConsumeIntegralInRange(1, 9));
    }
    return words;
}

// The control socket's link command with words from the input.
void pullOrPlug(FuzzedDataProvider &in, SimulatedFabric &f) {
    const uint64_t guid = in.ConsumeBool() ? kGuid + in.ConsumeIntegralInRange(0, 0x21)
                                           : in.ConsumeIntegral<uint64_t>();
    std::string words =
        std::to_string(guid) + " " + std::to_string(in.ConsumeIntegralInRange(0, 7));
    switch (in.ConsumeIntegralInRange(0, 4)) {
    case 0:
        words += " down";
        break;
    case 1:
        words += " up";
        break;
    case 2:
        words += " clear";
        break;
    case 3:
        words += " fault" + faultWords(in);
        break;
    default:
        words += " sideways";
        break;
    }
    if (in.ConsumeIntegralInRange(0, 7) == 0)
        words = in.ConsumeRandomLengthString(40);
    std::vector<Transmit> out;
    const auto answer = f.command("link", words, out);
    check(answer.has_value(), "the link command went unanswered");
    checkOutput(out);
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    FuzzedDataProvider in(data, size);
    SimulatedFabric f(smallFabric());
    static uint64_t clock = 0;
    clock = 0;
    f.setClock([] { return clock; });
    for (int steps = 0; steps < 200 && in.remaining_bytes(); ++steps) {
        clock += in.ConsumeIntegralInRange<uint64_t>(0, 2'000'000'000);
        // Ports 0 and kGuests + 1 are not the fabric's: refused.
        const unsigned port = in.ConsumeIntegralInRange<unsigned>(0, kGuests + 1);
        const auto discard = [](unsigned, std::span<const uint8_t>) {};
        switch (in.ConsumeIntegralInRange(0, 9)) {
        case 0: // a guest's cable
            checkOutput(f.linkChanged(port, in.ConsumeBool()));
            break;
        case 1: { // an SM behind a guest's port sweeps the fabric
            if (port < 1 || port > kGuests)
                break;
            checkOutput(f.linkChanged(port, true));
            testing::MiniSm sm(f, port);
            sm.sweep();
            // A monitor's PMA queries to every CA the SM gave a LID: the
            // LID-routed part of a simulated CA, which only a sweep opens.
            for (const testing::MiniSm::Node &n : sm.nodes)
                if (!n.isSwitch && n.lid)
                    checkOutput(f.receive(
                        port, portCountersQuery(testing::MiniSm::guestLid(port), n.lid), discard));
            break;
        }
        case 2:
            pullOrPlug(in, f);
            break;
        case 4: { // what faults on cables inside held back, and flaps
            uint64_t waitNs = 0;
            checkOutput(f.serviceTimers(&waitNs));
            break;
        }
        case 3: { // the SM's DOWN, retrained; traps repeated
            for (const unsigned p : f.takeLinkResets())
                check(p >= 1 && p <= kGuests, "a link reset of a port that is not the fabric's");
            checkOutput(f.repeatTraps());
            break;
        }
        default: {
            std::vector<Transmit> left;
            const auto take = [&](unsigned p, std::span<const uint8_t> b) {
                left.push_back({p, {b.begin(), b.end()}});
            };
            const Forwarder send = in.ConsumeBool() ? Forwarder(take) : Forwarder(discard);
            for (Transmit &t : f.receive(port, packet(in), send))
                left.push_back(std::move(t));
            checkOutput(left);
            break;
        }
        }
    }
    return 0;
}
