// SPDX-License-Identifier: GPL-2.0-or-later
#include "ports.hh"

#include "limits.hh"
#include "packet.hh"

namespace pib {

void Ports::reset() {
    for (uint32_t i = 0; i < PIB_MAX_PORTS; ++i) {
        PortState &p = ports_[i];
        p = PortState{};
        // Until a link exists the port is down and polling for a peer.
        p.info.state = PIB_PORT_DOWN;
        p.info.phys_state = PIB_PHYS_POLLING;
        p.info.max_mtu = PIB_MTU_4096;
        p.info.active_mtu = PIB_MTU_256;
        p.info.gid_prefix = 0xfe80000000000000ull;
        p.info.port_guid = config_.node_guid + 1 + i;
        p.info.max_msg_sz = limits::kMaxMsgSize;
        p.info.pkey_tbl_len = PIB_PKEY_TABLE_LEN;
        p.info.gid_tbl_len = PIB_GUID_TABLE_LEN;
        // IsClientReregistrationSupported: the SMA honours ClientReregister.
        p.info.cap_mask = 1u << 25;
        p.info.max_vl_num = 1;
        p.info.subnet_timeout = 0;
        p.info.active_width = iba::kLinkWidth4x;
        p.info.active_speed = iba::kLinkSpeedQdr;
        p.pkeys[0] = 0xffff; // the default partition, full member
        p.guids[0] = p.info.port_guid;
    }
}

namespace {

void savePort(StateWriter &w, const PortState &p) {
    w.record(p.info);
    for (uint64_t c : {p.rcvPackets, p.rcvWords, p.rcvErrors, p.xmitPackets, p.xmitWords})
        w.u64(c);
    w.record(p.transport);
    const iba::MkeyProtection::Saved m = p.mkey.saved();
    w.u64(m.key);
    w.u8(m.protectBits);
    w.u16(m.leasePeriod);
    w.u64(m.leaseEndsNs);
    w.u16(m.violations);
    w.u64(p.trapsHeldUntilNs);
    w.u8(p.hoqLife);
    w.u8(p.vlHighLimit);
    w.record(p.slToVl);
    w.record(p.vlArb);
    w.record(p.pkeys);
    w.record(p.guids);
}

// Port `p` as saved, over its power-on state `fresh`: what the device
// itself fixes (its GUID, MTU and table sizes, width and speed) stays as
// `fresh` has it; what the SM and the traffic set is checked as an SMA
// Set would check it.
void loadPort(StateReader &r, PortState &p, const PortState &fresh) {
    pib_port_info info{};
    r.record(info, "port attributes");
    if (info.state < PIB_PORT_DOWN || info.state > PIB_PORT_ACTIVE)
        r.fail("a port state of " + std::to_string(info.state));
    if (info.phys_state < PIB_PHYS_SLEEP || info.phys_state > 7)
        r.fail("a port physical state of " + std::to_string(info.phys_state));
    if (info.active_mtu < PIB_MTU_256 || info.active_mtu > PIB_MTU_4096)
        r.fail("an active MTU of " + std::to_string(info.active_mtu));
    if (info.lmc > 7 || info.sm_sl > 15 || info.subnet_timeout > 31)
        r.fail("a port's LMC, SM SL or subnet timeout out of range");
    p.info = fresh.info;
    p.info.lid = info.lid;
    p.info.sm_lid = info.sm_lid;
    p.info.state = info.state;
    p.info.phys_state = info.phys_state;
    p.info.active_mtu = info.active_mtu;
    p.info.lmc = info.lmc;
    p.info.sm_sl = info.sm_sl;
    p.info.subnet_timeout = info.subnet_timeout;
    p.info.init_type_reply = info.init_type_reply;
    p.info.gid_prefix = info.gid_prefix;
    p.info.cap_mask = info.cap_mask;
    p.info.bad_pkey_cntr = info.bad_pkey_cntr;
    p.info.qkey_viol_cntr = info.qkey_viol_cntr;
    for (uint64_t *c : {&p.rcvPackets, &p.rcvWords, &p.rcvErrors, &p.xmitPackets, &p.xmitWords})
        *c = r.u64();
    r.record(p.transport, "transport counters");
    iba::MkeyProtection::Saved m{};
    m.key = r.u64();
    m.protectBits = r.u8();
    m.leasePeriod = r.u16();
    m.leaseEndsNs = r.u64();
    m.violations = r.u16();
    if (r.ok() && !p.mkey.restore(m))
        r.fail("M_Key protect bits of " + std::to_string(m.protectBits));
    p.trapsHeldUntilNs = r.u64();
    p.hoqLife = r.u8();
    p.vlHighLimit = r.u8();
    r.record(p.slToVl, "SL to VL table");
    for (uint8_t vl : p.slToVl)
        if (vl > 15)
            r.fail("an SL to VL entry of " + std::to_string(vl));
    r.record(p.vlArb, "VL arbitration table");
    r.record(p.pkeys, "P_Key table");
    r.record(p.guids, "GUID table");
    if (r.ok() && p.guids[0] != fresh.guids[0])
        r.fail("the saved port GUID is not this port's");
}

} // namespace

void Ports::save(StateWriter &w) const {
    w.beginSection(stateTag("PRTS"));
    w.record(nodeDesc);
    for (uint32_t port = 1; port <= config_.num_ports; ++port)
        savePort(w, ports_[port - 1]);
    w.endSection();
}

void Ports::load(StateReader &r) {
    std::array<char, PIB_NODE_DESC_LEN> desc{};
    std::array<PortState, PIB_MAX_PORTS> loaded{};
    r.enterSection(stateTag("PRTS"), "ports");
    r.record(desc, "node description");
    for (uint32_t port = 1; port <= config_.num_ports; ++port)
        loadPort(r, loaded[port - 1], ports_[port - 1]);
    r.leaveSection("ports");
    if (!r.ok())
        return;
    nodeDesc = desc;
    for (uint32_t port = 1; port <= config_.num_ports; ++port)
        ports_[port - 1] = std::move(loaded[port - 1]);
}

} // namespace pib
