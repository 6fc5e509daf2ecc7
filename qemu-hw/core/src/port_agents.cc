// SPDX-License-Identifier: GPL-2.0-or-later
// The SMA answers NodeInfo, NodeDescription, PortInfo, P_KeyTable,
// GUIDInfo, SLtoVL and VLArb; the PMA ClassPortInfo, PortCounters and
// PortCountersExtended.
#include <algorithm>
#include <cinttypes>

#include "addressing.hh"
#include "frame.hh"
#include "limits.hh"
#include "port_agents.hh"
#include "smp.hh"
#include "trace.hh"

namespace pib {

using iba::Mad;

PortAgents::MadOutcome PortAgents::answerMad(unsigned number, std::span<uint8_t> bytes,
                                             bool ignoreMkey) {
    Mad mad(bytes);
    const uint8_t cls = mad.mgmtClass();
    const uint8_t method = mad.method();
    const bool smp = cls == iba::kClassSmpLid || cls == iba::kClassSmpDirected;
    bool hideMkey = false;
    if (smp && !ignoreMkey && mad.baseVersion() == 1) {
        // IBA 14.2.4: every SMP, local or from the fabric, is checked.
        PortState &p = ports_.at(number);
        const auto verdict = p.mkey.check(mad, host_.clockNs());
        if (verdict == iba::MkeyProtection::Verdict::kViolation) {
            trace::err_mkey_violation(host_, number, method, mad.attributeId());
            sendTrap(number, iba::badMkeyTrap(mad, p.info.lid, iba::kProducerCa, ++trapTid_));
            return MadOutcome::kDropped;
        }
        hideMkey = verdict == iba::MkeyProtection::Verdict::kPassHideKey;
    }
    if (mad.baseVersion() != 1 || (method != iba::kGet && method != iba::kSet))
        return MadOutcome::kNotOurs;
    uint16_t status;
    if (smp) {
        status = method == iba::kGet ? smaGet(number, mad, hideMkey) : smaSet(number, mad);
        if (status == iba::kStatusBadAttribute)
            return MadOutcome::kNotOurs; // SMInfo and the like go to the SM
        if (cls == iba::kClassSmpDirected)
            mad.setReturning(true);
    } else if (cls == iba::kClassPerfMgt) {
        pma(number, mad);
        return MadOutcome::kAnswered;
    } else {
        return MadOutcome::kNotOurs;
    }
    mad.setMethod(iba::kGetResp);
    mad.setStatus(status);
    return MadOutcome::kAnswered;
}

// Sends trap `mad` to the SM (LID-routed, QP0 to QP0), at most one per
// 4.096 us * 2^SubnetTimeout (IBA o14-2), and only on an ACTIVE port that
// knows its SM. An SM behind this very port gets it through QP0.
void PortAgents::sendTrap(unsigned number, std::vector<uint8_t> mad) {
    PortState &p = ports_.at(number);
    const pib_port_info &i = p.info;
    const uint64_t now = host_.clockNs();
    if (i.state != PIB_PORT_ACTIVE || !iba::isUnicastLid(i.sm_lid) || now < p.trapsHeldUntilNs)
        return;
    p.trapsHeldUntilNs = now + (uint64_t{4096} << std::min<unsigned>(i.subnet_timeout, 31));
    iba::Packet packet;
    packet.lrh.vl = 15;
    packet.lrh.sl = i.sm_sl;
    packet.lrh.dlid = i.sm_lid;
    packet.lrh.slid = i.lid;
    packet.bth.opcode = iba::kUdSendOnly;
    packet.bth.destQp = 0;
    packet.deth = iba::Deth{0, 0};
    packet.payload = std::move(mad);
    sender_.sendSubnetPacket(number, packet);
}

uint16_t PortAgents::smaGet(unsigned number, Mad &mad, bool hideMkey) {
    PortState &p = ports_.at(number);
    const uint32_t mod = mad.attributeModifier();
    switch (mad.attributeId()) {
    case iba::kAttrNodeInfo:
        iba::writeNodeInfo(mad, iba::NodeInfo{.nodeType = iba::kNodeTypeCa,
                                              .numPorts = static_cast<uint8_t>(config_.num_ports),
                                              .systemImageGuid = config_.node_guid,
                                              .nodeGuid = config_.node_guid,
                                              .portGuid = p.info.port_guid,
                                              .partitionCap = PIB_PKEY_TABLE_LEN,
                                              .deviceId = ports_.identity.deviceId,
                                              .revision = ports_.identity.revision,
                                              .localPortNum = static_cast<uint8_t>(number),
                                              .vendorId = ports_.identity.vendorId});
        return iba::kStatusOk;
    case iba::kAttrNodeDescription:
        iba::writeBytes(mad, {reinterpret_cast<const uint8_t *>(ports_.nodeDesc.data()),
                              ports_.nodeDesc.size()});
        return iba::kStatusOk;
    case iba::kAttrPortInfo:
        if (mod != 0 && mod != number)
            return iba::kStatusBadField;
        iba::writePortInfo(mad, portInfo(number, hideMkey));
        return iba::kStatusOk;
    case iba::kAttrPkeyTable: {
        const unsigned block = mod & 0xffff;
        if (block >= PIB_PKEY_TABLE_LEN / iba::kPkeysPerBlock)
            return iba::kStatusBadField;
        iba::writeBlock16(
            mad, std::span(p.pkeys).subspan(block * iba::kPkeysPerBlock, iba::kPkeysPerBlock));
        return iba::kStatusOk;
    }
    case iba::kAttrGuidInfo:
        if (mod != 0)
            return iba::kStatusBadField;
        iba::writeBlock64(mad, p.guids);
        return iba::kStatusOk;
    case iba::kAttrSlToVlTable:
        iba::writeBytes(mad, p.slToVl);
        return iba::kStatusOk;
    case iba::kAttrVlArbTable: {
        const unsigned block = mod >> 16;
        if (block < 1 || block > 4)
            return iba::kStatusBadField;
        iba::writeBytes(mad, std::span(p.vlArb).subspan(block <= 2 ? 0 : 32, 32));
        return iba::kStatusOk;
    }
    default:
        return iba::kStatusBadAttribute;
    }
}

// The port's PortInfo as an SMA answers a Get.
iba::PortInfo PortAgents::portInfo(unsigned number, bool hideMkey) {
    const PortState &p = ports_.at(number);
    const pib_port_info &i = p.info;
    iba::PortInfo info{
        .gidPrefix = i.gid_prefix,
        .lid = i.lid,
        .masterSmLid = i.sm_lid,
        .capabilityMask = i.cap_mask,
        .localPortNum = static_cast<uint8_t>(number),
        // 4x QDR, as the links a real fabric of this kind runs: an SM then
        // finds every rate it asks of a multicast group (IPoIB's is 10 Gb/s).
        .linkWidthEnabled = iba::kLinkWidth1x4x,
        .linkWidthSupported = iba::kLinkWidth1x4x,
        .linkWidthActive = i.active_width,
        .linkSpeedSupported = iba::kLinkSpeedSdrDdrQdr,
        .portState = i.state,
        .portPhysicalState = i.phys_state,
        .linkDownDefaultState = PIB_PHYS_POLLING,
        .lmc = i.lmc,
        .linkSpeedActive = i.active_speed,
        .linkSpeedEnabled = iba::kLinkSpeedSdrDdrQdr,
        .neighborMtu = i.active_mtu,
        .masterSmSl = i.sm_sl,
        .vlCap = i.max_vl_num,
        .vlHighLimit = p.vlHighLimit,
        .vlArbitrationLowCap = 1,
        .initTypeReply = i.init_type_reply,
        .mtuCap = i.max_mtu,
        .hoqLife = p.hoqLife,
        .operationalVls = 1, // VL0
        .pkeyViolations = iba::saturate<uint16_t>(i.bad_pkey_cntr),
        .qkeyViolations = iba::saturate<uint16_t>(i.qkey_viol_cntr),
        .guidCap = PIB_GUID_TABLE_LEN,
        .subnetTimeout = i.subnet_timeout,
    };
    p.mkey.fillPortInfo(info, hideMkey);
    return info;
}

uint16_t PortAgents::setPortInfo(unsigned number, Mad &mad) {
    PortState &p = ports_.at(number);
    pib_port_info &i = p.info;
    const iba::PortInfo set = iba::readPortInfo(mad);
    const uint16_t lid = set.lid;
    const uint16_t smLid = set.masterSmLid;
    const uint8_t newState = set.portState;
    const uint8_t lmc = set.lmc;
    const uint8_t mtu = set.neighborMtu;
    const uint8_t smSl = set.masterSmSl;
    const uint8_t vls = set.operationalVls;
    const bool reregister = set.clientReregister;
    // Validate all, then apply all (a failed Set changes nothing).
    if (mtu > i.max_mtu || vls > i.max_vl_num || lid >= iba::kMulticastLidFirst)
        return iba::kStatusBadField;
    const bool stateOk =
        newState == PIB_PORT_DOWN - 1 /* NOP */ || newState == PIB_PORT_DOWN ||
        (newState == PIB_PORT_ARMED && i.state == PIB_PORT_INIT) ||
        (newState == PIB_PORT_ACTIVE && (i.state == PIB_PORT_ARMED || i.state == PIB_PORT_ACTIVE));
    if (!stateOk)
        return iba::kStatusBadField;

    const bool lidChanged = lid != i.lid || lmc != i.lmc;
    const bool smChanged = smLid != i.sm_lid || smSl != i.sm_sl;
    const bool gidChanged = set.gidPrefix != i.gid_prefix;
    p.mkey.setFromPortInfo(set);
    i.gid_prefix = set.gidPrefix;
    i.lid = lid;
    i.sm_lid = smLid;
    i.lmc = lmc;
    i.sm_sl = smSl;
    i.subnet_timeout = set.subnetTimeout;
    p.hoqLife = set.hoqLife;
    p.vlHighLimit = set.vlHighLimit;
    if (mtu)
        i.active_mtu = std::min(mtu, i.max_mtu);
    const bool toActive = newState == PIB_PORT_ACTIVE && i.state != PIB_PORT_ACTIVE;
    if (newState == PIB_PORT_ARMED || newState == PIB_PORT_ACTIVE)
        i.state = newState;
    // DOWN on an emulated cable retrains at once: back to INIT.
    if (newState == PIB_PORT_DOWN && i.phys_state == PIB_PHYS_LINK_UP) {
        if (i.state == PIB_PORT_ACTIVE)
            events_.postAsyncEvent(PIB_ASYNC_PORT_ERR, number);
        i.state = PIB_PORT_INIT;
    }
    if (lidChanged)
        events_.postAsyncEvent(PIB_ASYNC_LID_CHANGE, number);
    if (smChanged)
        events_.postAsyncEvent(PIB_ASYNC_SM_CHANGE, number);
    if (gidChanged)
        events_.postAsyncEvent(PIB_ASYNC_GID_CHANGE, number);
    if (reregister)
        events_.postAsyncEvent(PIB_ASYNC_CLIENT_REREGISTER, number);
    if (toActive) {
        events_.postAsyncEvent(PIB_ASYNC_PORT_ACTIVE, number);
        sender_.portActive(number);
    }
    trace::sma_port_info(host_, number, i.lid, i.sm_lid, i.state, i.active_mtu);
    return iba::kStatusOk;
}

uint16_t PortAgents::smaSet(unsigned number, Mad &mad) {
    PortState &p = ports_.at(number);
    const uint32_t mod = mad.attributeModifier();
    uint16_t status;
    switch (mad.attributeId()) {
    case iba::kAttrPortInfo:
        if (mod != 0 && mod != number)
            return iba::kStatusBadField;
        status = setPortInfo(number, mad);
        break;
    case iba::kAttrPkeyTable: {
        const unsigned block = mod & 0xffff;
        if (block >= PIB_PKEY_TABLE_LEN / iba::kPkeysPerBlock)
            return iba::kStatusBadField;
        iba::readBlock16(
            mad, std::span(p.pkeys).subspan(block * iba::kPkeysPerBlock, iba::kPkeysPerBlock));
        events_.postAsyncEvent(PIB_ASYNC_PKEY_CHANGE, number);
        status = iba::kStatusOk;
        break;
    }
    case iba::kAttrGuidInfo:
        if (mod != 0)
            return iba::kStatusBadField;
        {
            // Entry 0 is the port GUID, which the SM cannot change.
            std::array<uint64_t, PIB_GUID_TABLE_LEN> guids;
            iba::readBlock64(mad, guids);
            std::copy(guids.begin() + 1, guids.end(), p.guids.begin() + 1);
        }
        events_.postAsyncEvent(PIB_ASYNC_GID_CHANGE, number);
        status = iba::kStatusOk;
        break;
    case iba::kAttrSlToVlTable:
        iba::readBytes(mad, p.slToVl);
        status = iba::kStatusOk;
        break;
    case iba::kAttrVlArbTable: {
        const unsigned block = mod >> 16;
        if (block < 1 || block > 4)
            return iba::kStatusBadField;
        iba::readBytes(mad, std::span(p.vlArb).subspan(block <= 2 ? 0 : 32, 32));
        status = iba::kStatusOk;
        break;
    }
    case iba::kAttrNodeInfo:
    case iba::kAttrNodeDescription:
        return iba::kStatusBadMethod; // read-only attributes
    default:
        return iba::kStatusBadAttribute;
    }
    if (status == iba::kStatusOk)
        smaGet(number, mad); // a Set answers with the new value
    return status;
}

void PortAgents::pma(unsigned number, Mad &mad) {
    PortState &p = ports_.at(number);
    const bool set = mad.method() == iba::kSet;
    uint16_t status = iba::kStatusOk;
    const unsigned portSelect = iba::pmaPortSelect(mad);
    switch (mad.attributeId()) {
    case iba::kAttrClassPortInfo:
        iba::writePmaClassPortInfo(mad);
        if (set)
            status = iba::kStatusBadMethod;
        break;
    case iba::kAttrPortCounters:
    case iba::kAttrPortCountersExtended:
        if (portSelect != number) {
            status = iba::kStatusBadField;
            break;
        }
        if (set) {
            const uint16_t select = iba::pmaCounterSelect(mad);
            iba::clearIfSelected(select, iba::kSelRcvErrors, p.rcvErrors);
            iba::clearIfSelected(select, iba::kSelXmitData, p.xmitWords);
            iba::clearIfSelected(select, iba::kSelRcvData, p.rcvWords);
            iba::clearIfSelected(select, iba::kSelXmitPackets, p.xmitPackets);
            iba::clearIfSelected(select, iba::kSelRcvPackets, p.rcvPackets);
        }
        iba::writePortCounters(mad, {.xmitData = p.xmitWords,
                                     .rcvData = p.rcvWords,
                                     .xmitPackets = p.xmitPackets,
                                     .rcvPackets = p.rcvPackets,
                                     .rcvErrors = p.rcvErrors});
        break;
    default:
        status = iba::kStatusBadAttribute;
        break;
    }
    mad.setMethod(iba::kGetResp);
    mad.setStatus(status);
}

void PortAgents::linkChanged(unsigned number, bool up) {
    PortState *p = ports_.find(number);
    if (!p)
        return;
    const bool wasActive = p->info.state == PIB_PORT_ACTIVE;
    if (up) {
        // A trained link leaves the port in INIT until the SM arms it.
        p->info.phys_state = PIB_PHYS_LINK_UP;
        p->info.state = PIB_PORT_INIT;
    } else {
        p->info.phys_state = PIB_PHYS_POLLING;
        p->info.state = PIB_PORT_DOWN;
        if (wasActive)
            events_.postAsyncEvent(PIB_ASYNC_PORT_ERR, number);
    }
    trace::port_state(host_, number, p->info.state, p->info.phys_state);
}

} // namespace pib
