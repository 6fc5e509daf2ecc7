// SPDX-License-Identifier: GPL-2.0-or-later
// The switch's state for a fabric snapshot (docs/migration.md, "The
// switch's state"): what the SM configured (the SMA's fields, every
// port's PortInfo, P_Keys and VL arbitration tables, the SL-to-VL table
// of each pair of ports, the LFT and MFT) and what it counted. A state file is untrusted input:
// every field is read through a StateReader and every value checked, and a refused state leaves the
// switch as it was.
#include "state_archive.hh"
#include "state_parts.hh"
#include "switch.hh"

namespace pib::fabric {

using namespace pib::iba;
using state::loadCounters;
using state::loadTable;
using state::saveCounters;

namespace {

constexpr uint32_t kTagSwitch = stateTag("PSWI");
constexpr uint32_t kTagSma = stateTag("SSMA");
constexpr uint32_t kTagPorts = stateTag("SPRT");
constexpr uint32_t kTagTables = stateTag("SFDB");
constexpr uint32_t kTagSlToVl = stateTag("SSLV");
// 2: the SL-to-VL tables are of pairs of ports, not of output ports.
// 3: the LFT and MFT as far as the SM wrote them, not whole (a simulated
// fabric saves a thousand switches).
constexpr uint32_t kStateVersion = 3;
using state::kMaxLmc;
using state::kMaxMtu;
using state::kMaxSubnetTimeout;

void savePort(StateWriter &w, const SwitchPort &p) {
    w.boolean(p.linkUp);
    w.u8(p.state);
    w.u8(p.neighborMtu);
    w.u8(p.operationalVls);
    w.u8(p.hoqLife);
    w.u8(p.vlHighLimit);
    w.bytes(p.vlArb.bytes);
    for (uint16_t key : p.pkeys)
        w.u16(key);
    w.u8(p.enforcement);
    saveCounters(w, p.counters);
}

// Port `n` as saved, checked as the SMA checks a Set(PortInfo) of a
// switch whose ports offer `vlCap`.
void loadPort(StateReader &r, SwitchPort &p, unsigned n, uint8_t vlCap) {
    const std::string port = "port " + std::to_string(n);
    p.linkUp = r.boolean((port + ": link up").c_str());
    p.state = r.u8();
    p.neighborMtu = r.u8();
    p.operationalVls = r.u8();
    p.hoqLife = r.u8();
    p.vlHighLimit = r.u8();
    loadTable(r, p.vlArb.bytes, (port + ": VL arbitration tables").c_str());
    for (uint16_t &key : p.pkeys)
        key = r.u16();
    p.enforcement = r.u8();
    loadCounters(r, p.counters);
    p.held.clear(); // packets held while ARMED are not kept: the wire lost them
    if (!r.ok())
        return;
    if (p.state < kPortStateDown || p.state > kPortStateActive)
        r.fail(port + ": port state " + std::to_string(p.state));
    else if (n != 0 && !p.linkUp && p.state != kPortStateDown)
        r.fail(port + ": " + stateName(p.state) + " without a link");
    else if (n == 0 && (!p.linkUp || p.state == kPortStateDown))
        r.fail("port 0: the switch's own port is always up");
    else if (p.neighborMtu < 1 || p.neighborMtu > kMaxMtu)
        r.fail(port + ": neighbour MTU " + std::to_string(p.neighborMtu));
    else if (p.operationalVls < kVlsVl0 || p.operationalVls > vlCap)
        r.fail(port + ": OperationalVLs " + std::to_string(p.operationalVls) +
               " beyond its VLCap " + std::to_string(vlCap));
    else if (p.enforcement & ~(kEnforceInbound | kEnforceOutbound))
        r.fail(port + ": partition enforcement bits " + std::to_string(p.enforcement));
}

} // namespace

void Switch::save(StateWriter &w) const {
    w.beginSection(kTagSwitch);
    w.u32(kStateVersion);
    w.u64(config_.guid);
    w.u32(config_.ports);

    w.beginSection(kTagSma);
    w.u16(lid_);
    w.u16(smLid_);
    w.u8(lmc_);
    w.u64(gidPrefix_);
    w.u8(subnetTimeout_);
    w.u16(linearFdbTop_);
    w.u16(multicastFdbTop_);
    w.u8(defaultPort_);
    w.u8(lifeTime_);
    w.boolean(portStateChange_);
    w.u64(trapTid_);
    state::saveMkey(w, mkey_, now());
    w.endSection();

    w.beginSection(kTagPorts);
    for (const SwitchPort &p : ports_)
        savePort(w, p);
    w.endSection();

    w.beginSection(kTagTables);
    w.bytes(tables_.lft());
    w.u32(static_cast<uint32_t>(tables_.mft().size()));
    for (const auto &entry : tables_.mft())
        for (uint16_t mask : entry)
            w.u16(mask);
    w.endSection();

    w.beginSection(kTagSlToVl);
    w.boolean(!slToVl_.empty());
    for (const SlToVlTable &table : slToVl_)
        w.bytes(table);
    w.endSection();
    w.endSection();
}

bool Switch::load(StateReader &r) {
    Switch loaded = *this;
    loaded.loadFrom(r);
    if (!r.ok())
        return false;
    *this = std::move(loaded);
    return true;
}

void Switch::loadFrom(StateReader &r) {
    r.enterSection(kTagSwitch, "the switch's state");
    const uint32_t version = r.u32();
    const uint64_t guid = r.u64();
    const uint32_t ports = r.u32();
    if (r.ok() && version != kStateVersion)
        r.fail("the switch state is of version " + std::to_string(version) +
               "; this switch reads version " + std::to_string(kStateVersion));
    if (r.ok() && (guid != config_.guid || ports != config_.ports))
        r.fail("the state is of another switch (GUID " + std::to_string(guid) + ", " +
               std::to_string(ports) + " ports)");
    if (!r.ok())
        return;

    r.enterSection(kTagSma, "the switch's SMA");
    lid_ = r.u16();
    smLid_ = r.u16();
    lmc_ = r.u8();
    gidPrefix_ = r.u64();
    subnetTimeout_ = r.u8();
    linearFdbTop_ = r.u16();
    multicastFdbTop_ = r.u16();
    defaultPort_ = r.u8();
    lifeTime_ = r.u8();
    portStateChange_ = r.boolean("PortStateChange");
    trapTid_ = r.u64();
    state::loadMkey(r, mkey_, now());
    r.leaveSection("the switch's SMA");
    if (r.ok() && (lmc_ > kMaxLmc || subnetTimeout_ > kMaxSubnetTimeout))
        r.fail("LMC " + std::to_string(lmc_) + " or subnet timeout " +
               std::to_string(subnetTimeout_) + " out of range");
    if (r.ok() && linearFdbTop_ >= kLftCap)
        r.fail("LinearFDBTop " + std::to_string(linearFdbTop_) + " beyond the LFT");

    r.enterSection(kTagPorts, "the switch's ports");
    for (unsigned n = 0; n < ports_.size() && r.ok(); ++n)
        loadPort(r, ports_[n], n, config_.vlCap);
    r.leaveSection("the switch's ports");

    r.enterSection(kTagTables, "the forwarding tables");
    std::vector<uint8_t> lft = r.bytes(kLftCap, "the LFT");
    if (r.ok() && lft.size() % ForwardingTables::kLftBlock != 0)
        r.fail("the LFT: " + std::to_string(lft.size()) + " entries, not whole blocks");
    const uint32_t mftEntries = r.u32();
    if (r.ok() && (mftEntries > kMftCap || mftEntries % ForwardingTables::kMftBlock != 0))
        r.fail("the MFT: " + std::to_string(mftEntries) + " entries");
    std::vector<ForwardingTables::Masks> mft(r.ok() ? mftEntries : 0);
    for (auto &entry : mft)
        for (uint16_t &mask : entry)
            mask = r.u16();
    if (r.ok())
        tables_.load(std::move(lft), std::move(mft));
    r.leaveSection("the forwarding tables");

    r.enterSection(kTagSlToVl, "the SL-to-VL tables");
    slToVl_.clear();
    if (r.boolean("SL-to-VL tables written")) {
        slToVl_.resize(size_t{config_.ports + 1} * (config_.ports + 1));
        for (size_t i = 0; i < slToVl_.size() && r.ok(); ++i)
            loadTable(r, slToVl_[i], "an SL-to-VL table");
    }
    r.leaveSection("the SL-to-VL tables");
    r.leaveSection("the switch's state");
    // A trap that waited for the SM's repress is not kept: the SM sweeps
    // the subnet when it resumes, and finds what the trap said.
    unrepressed_.reset();
    released_.clear();
    // A port the SM set DOWN while its link was up was saved before its
    // link trained again: it does so now (takeLinkResets()), or it would
    // stay DOWN for ever and take no SMP.
    linkResets_.clear();
    for (unsigned n = 1; n < ports_.size(); ++n)
        if (ports_[n].linkUp && ports_[n].state == kPortStateDown)
            linkResets_.push_back(n);
}

} // namespace pib::fabric
