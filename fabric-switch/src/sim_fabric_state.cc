// SPDX-License-Identifier: GPL-2.0-or-later
// A simulated fabric's state for a fabric snapshot (docs/migration.md,
// "A simulated fabric's state"): every simulated switch's state as a
// switch saves its own (switch_state.cc) and every simulated CA's, so
// that a restored fabric forwards by the tables its SM wrote and its
// ports are as the SM left them, without a sweep. A state file is
// untrusted input: every value is checked, a state of another fabric
// (its nodes, in their order) is refused, and so is one whose two ends
// of a link inside disagree. A refused state leaves the fabric as it was.
#include <cstdio>
#include <memory>
#include <string>

#include "sim_fabric.hh"
#include "state_parts.hh"

namespace pib::fabric {

using namespace pib::iba;

namespace {

constexpr uint32_t kTagFabric = stateTag("PSIM");
constexpr uint32_t kTagNodes = stateTag("SNOD");
constexpr uint32_t kTagCa = stateTag("SSCA");
constexpr uint32_t kFabricVersion = 1;
constexpr uint16_t kFirstMulticastLid = 0xc000;
using state::kMaxLmc;
using state::kMaxMtu;
using state::kMaxSubnetTimeout;

} // namespace

// ---- a simulated CA ------------------------------------------------------

void SimulatedCa::save(StateWriter &w) const {
    w.beginSection(kTagCa);
    w.u64(config_.guid);
    w.u32(config_.ports);
    w.u64(dataDropped_);
    const uint64_t t = now();
    for (unsigned n = 1; n <= config_.ports; ++n) {
        const CaPort &p = ports_[n];
        w.boolean(p.linkUp);
        w.u8(p.state);
        w.u16(p.lid);
        w.u8(p.lmc);
        w.u16(p.smLid);
        w.u8(p.smSl);
        w.u64(p.gidPrefix);
        w.u8(p.subnetTimeout);
        w.u8(p.neighborMtu);
        w.u8(p.operationalVls);
        w.u8(p.hoqLife);
        w.u8(p.vlHighLimit);
        state::saveMkey(w, p.mkey, t);
        for (uint16_t key : p.pkeys)
            w.u16(key);
        w.bytes(p.slToVl);
        w.bytes(p.vlArb.bytes);
        state::saveCounters(w, p.counters);
    }
    w.endSection();
}

void SimulatedCa::load(StateReader &r) {
    r.enterSection(kTagCa, "a simulated CA's state");
    const uint64_t guid = r.u64();
    const uint32_t ports = r.u32();
    if (r.ok() && (guid != config_.guid || ports != config_.ports))
        r.fail("the state of CA " + guidText(guid) + " of " + std::to_string(ports) +
               " ports, where the fabric has CA " + guidText(config_.guid));
    dataDropped_ = r.u64();
    const uint64_t t = now();
    for (unsigned n = 1; n <= config_.ports && r.ok(); ++n) {
        CaPort &p = ports_[n];
        const std::string port = "CA " + guidText(guid) + " port " + std::to_string(n);
        p.linkUp = r.boolean((port + ": link up").c_str());
        p.state = r.u8();
        p.lid = r.u16();
        p.lmc = r.u8();
        p.smLid = r.u16();
        p.smSl = r.u8();
        p.gidPrefix = r.u64();
        p.subnetTimeout = r.u8();
        p.neighborMtu = r.u8();
        p.operationalVls = r.u8();
        p.hoqLife = r.u8();
        p.vlHighLimit = r.u8();
        state::loadMkey(r, p.mkey, t);
        for (uint16_t &key : p.pkeys)
            key = r.u16();
        state::loadTable(r, p.slToVl, (port + ": SL-to-VL table").c_str());
        state::loadTable(r, p.vlArb.bytes, (port + ": VL arbitration tables").c_str());
        state::loadCounters(r, p.counters);
        if (!r.ok())
            break;
        if (p.state < kPortStateDown || p.state > kPortStateActive)
            r.fail(port + ": port state " + std::to_string(p.state));
        else if (!p.linkUp && p.state != kPortStateDown)
            r.fail(port + ": " + stateName(p.state) + " without a link");
        else if (p.lid >= kFirstMulticastLid || p.smLid >= kFirstMulticastLid)
            r.fail(port + ": LID " + std::to_string(p.lid) + " or SM LID " +
                   std::to_string(p.smLid) + " not unicast");
        else if (p.lmc > kMaxLmc || p.subnetTimeout > kMaxSubnetTimeout || p.smSl > 15)
            r.fail(port + ": LMC, subnet timeout or SM SL out of range");
        else if (p.neighborMtu < 1 || p.neighborMtu > kMaxMtu)
            r.fail(port + ": neighbour MTU " + std::to_string(p.neighborMtu));
        else if (p.operationalVls < kVlsVl0 || p.operationalVls > config_.vlCap)
            r.fail(port + ": OperationalVLs " + std::to_string(p.operationalVls) +
                   " beyond its VLCap " + std::to_string(config_.vlCap));
    }
    r.leaveSection("a simulated CA's state");
}

// ---- the fabric ----------------------------------------------------------

void SimulatedFabric::save(StateWriter &w) const {
    w.beginSection(kTagFabric);
    w.u32(kFabricVersion);
    w.beginSection(kTagNodes);
    w.u32(static_cast<uint32_t>(slots_.size()));
    for (uint32_t node = 0; node < slots_.size(); ++node) {
        w.u64(guids_[node]);
        w.boolean(slots_[node].isSwitch);
    }
    w.endSection();
    for (const auto &sw : switches_)
        sw->save(w);
    for (const auto &ca : cas_)
        ca->save(w);
    w.endSection();
}

bool SimulatedFabric::load(StateReader &r) {
    r.enterSection(kTagFabric, "the simulated fabric's state");
    const uint32_t version = r.u32();
    if (r.ok() && version != kFabricVersion)
        r.fail("the simulated fabric's state is of version " + std::to_string(version) +
               "; this switch reads version " + std::to_string(kFabricVersion));
    r.enterSection(kTagNodes, "the simulated fabric's nodes");
    const uint32_t nodes = r.u32();
    if (r.ok() && nodes != slots_.size())
        r.fail("the state of a fabric of " + std::to_string(nodes) + " nodes; this one has " +
               std::to_string(slots_.size()));
    for (uint32_t node = 0; node < slots_.size() && r.ok(); ++node) {
        const uint64_t guid = r.u64();
        const bool isSwitch = r.boolean("a node's kind");
        if (r.ok() && (guid != guids_[node] || isSwitch != slots_[node].isSwitch))
            r.fail("node " + std::to_string(node) + " of the state is " + guidText(guid) +
                   "; of this fabric " + guidText(guids_[node]));
    }
    r.leaveSection("the simulated fabric's nodes");
    // Loaded into copies, taken only when all of it was good.
    std::vector<std::unique_ptr<Switch>> switches;
    std::vector<std::unique_ptr<SimulatedCa>> cas;
    for (size_t i = 0; i < switches_.size() && r.ok(); ++i) {
        switches.push_back(std::make_unique<Switch>(*switches_[i]));
        switches.back()->load(r);
    }
    for (size_t i = 0; i < cas_.size() && r.ok(); ++i) {
        cas.push_back(std::make_unique<SimulatedCa>(*cas_[i]));
        cas.back()->load(r);
    }
    r.leaveSection("the simulated fabric's state");
    if (!r.ok())
        return false;
    const auto linkUp = [&](uint32_t node, unsigned port) {
        const Slot s = slots_[node];
        return s.isSwitch ? switches[s.index]->port(port).linkUp : cas[s.index]->port(port).linkUp;
    };
    for (uint32_t node = 0; node < slots_.size() && r.ok(); ++node)
        for (unsigned port = 1; port <= portsOf(node) && r.ok(); ++port) {
            const Peer to = peer(node, port);
            if (to.node == kExternal) // a guest's: the server checks it
                continue;
            const bool other = to.node != kNone && linkUp(to.node, to.port);
            if (linkUp(node, port) != other)
                r.fail("port " + std::to_string(port) + " of " + guidText(guids_[node]) +
                       (to.node == kNone ? " has no cable, but its link is up"
                                         : ": the two ends of its link disagree"));
        }
    if (!r.ok())
        return false;
    switches_ = std::move(switches);
    attendAll();
    cas_ = std::move(cas);
    inFlight_.clear();
    pending_.clear();
    return true;
}

} // namespace pib::fabric
