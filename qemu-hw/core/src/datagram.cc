// SPDX-License-Identifier: GPL-2.0-or-later
// The datagram transport (UD and the special QPs QP0/QP1): send queues
// turned into packets, packets turned into receive completions.
#include <cinttypes>
#include <cstring>

#include "address_vector.hh"
#include "addressing.hh"
#include "datagram.hh"
#include "frame.hh"
#include "receive_wqes.hh"
#include "ring.hh"
#include "trace.hh"

namespace pib {

namespace {

constexpr size_t kGrhRoom = 40; // a UD receive buffer starts with room for a GRH
constexpr uint32_t kMadSize = 256;

} // namespace

uint32_t Datagram::wireQpn(const QueuePair &qp) const {
    if (qp.ctx.type == PIB_QPT_SMI)
        return 0;
    if (qp.ctx.type == PIB_QPT_GSI)
        return 1;
    return qp.number;
}

void Datagram::send(QueuePair &qp) {
    Wqe wqe;
    const unsigned portNumber = sendPort(qp);
    while (qp.sq.consumer != qp.sq.producer && qp.attr.qp_state == PIB_QPS_RTS &&
           !qp.req.fault.waiting()) {
        if (!scheduler_.mayTransmit(portNumber)) {
            scheduler_.postpone(qp.number, qp);
            return;
        }
        uint32_t length = 0;
        uint8_t status = wqes_.readSend(qp, qp.sq.consumer, wqe);
        uint8_t vendorErr = 0;
        if (status == PIB_WC_SUCCESS)
            status = injectedCompletion(qp, qp.sq.consumer, &vendorErr);
        if (status == PIB_WC_SUCCESS && !sendUd(qp, wqe, &length, &status) &&
            status == PIB_WC_LOC_PROT_ERR) {
            // Its data reached a page its key does not map: the WQE waits
            // for the driver, and the queue behind it (page_faults.hh).
            const std::optional<FaultSite> fault = memory_.takeFault();
            if (fault && waitForPage(qp, FaultSide::kRequester, *fault))
                return;
        }
        const pib_wqe_ctrl &ctrl = wqe.ctrl;
        const bool signaled = (ctrl.flags & PIB_WQE_SIGNALED) || (qp.ctx.flags & PIB_QP_SIGNAL_ALL);
        events_.completeSend(qp, qp.sq.consumer, ctrl.wr_id, PIB_WC_SEND, status, length, signaled,
                             vendorErr);
        qp.sq.consume(wqe.slots);
        if (status != PIB_WC_SUCCESS) {
            // IBA 10.8.3: a send error moves the QP to the error state.
            qp.attr.qp_state = PIB_QPS_ERR;
            events_.postAsyncEvent(PIB_ASYNC_QP_FATAL, qp.number);
            flushQp(qp);
            return;
        }
    }
}

// Builds and sends the packet of one well-formed UD WQE. Returns false
// with *status set when its data cannot be sent.
bool Datagram::sendUd(QueuePair &qp, const Wqe &wqe, uint32_t *length, uint8_t *status) {
    const pib_wqe_ctrl &ctrl = wqe.ctrl;
    const pib_wqe_ud &ud = wqe.ud;
    const unsigned portNumber = sendPort(qp);
    PortState *p = ports_.find(portNumber);
    if (!p) {
        *status = PIB_WC_LOC_QP_OP_ERR;
        return false;
    }
    const bool smi = qp.ctx.type == PIB_QPT_SMI;
    // A datagram is one packet: its length is checked before it sizes
    // anything (the guest controls every byte_count).
    const uint32_t maxLength = smi ? kMadSize : mtuBytes(p->info.active_mtu);
    std::vector<uint8_t> payload;
    if (wqe.isInline) { // a prefix, perhaps followed by data segments
        if (wqe.inlineData.size() > maxLength) {
            *status = PIB_WC_LOC_LEN_ERR;
            return false;
        }
        payload.assign(wqe.inlineData.begin(), wqe.inlineData.end());
    }
    if (!wqe.sges.empty()) {
        *status = memory_.gather(qp.ctx.pdn, wqe.sges, maxLength - payload.size(), payload);
        if (*status == PIB_WC_LOC_PROT_ERR && !memory_.pendingFault())
            host_.guestError(err::kWqeBadKey, "UD QP %u WQE %u: an L_Key does not cover its buffer",
                             qp.number, qp.sq.consumer);
        else if (*status == PIB_WC_LOC_ACCESS_ERR)
            host_.guestError(err::kWqeDma, "UD QP %u WQE %u: cannot read its data", qp.number,
                             qp.sq.consumer);
        if (*status != PIB_WC_SUCCESS)
            return false;
    }
    *length = static_cast<uint32_t>(payload.size());

    iba::Packet packet;
    packet.lrh.vl = smi ? 15 : 0;
    packet.lrh.sl = ud.av.sl;
    packet.lrh.dlid = ud.av.dlid;
    packet.lrh.slid = p->info.lid ? static_cast<uint16_t>(p->info.lid | ud.av.src_path_bits)
                                  : iba::kPermissiveLid;
    packet.grh = grhFor(ud.av, p->info.gid_prefix, p->guids);
    packet.bth.opcode = ctrl.opcode == PIB_WR_SEND_IMM ? iba::kUdSendOnlyImm : iba::kUdSendOnly;
    packet.bth.solicited = ctrl.flags & PIB_WQE_SOLICITED;
    packet.bth.pkey = p->pkeys[qp.attr.pkey_index % PIB_PKEY_TABLE_LEN];
    packet.bth.destQp = ud.remote_qpn & 0xffffff;
    packet.bth.psn = qp.nextPsn++ & 0xffffff;
    // IBA 10.2.4.2: a Q_Key with the top bit set means "use the QP's own".
    const uint32_t qkey = ud.remote_qkey & 0x80000000u ? qp.attr.qkey : ud.remote_qkey;
    packet.deth = iba::Deth{qkey, wireQpn(qp)};
    if (ctrl.opcode == PIB_WR_SEND_IMM)
        packet.imm = __builtin_bswap32(ctrl.imm); // stored in wire order
    packet.payload = std::move(payload);

    // A multicast packet also goes to the port's other QPs in the group:
    // the switch never sends a packet back out of the port it came in by.
    if (iba::isMulticastLid(ud.av.dlid) && p->info.state == PIB_PORT_ACTIVE)
        receive(portNumber, packet, qp.number);
    // Packets to our own LID never leave the device.
    if (iba::portAnswersTo(p->info.lid, p->info.lmc, ud.av.dlid)) {
        scheduler_.charge();
        receive(portNumber, packet);
        return true;
    }
    // Subnet management may use a trained link; everything else needs ACTIVE.
    const bool open = p->info.phys_state == PIB_PHYS_LINK_UP &&
                      (smi ? p->info.state >= PIB_PORT_INIT : p->info.state == PIB_PORT_ACTIVE);
    if (open) {
        std::vector<uint8_t> framed =
            iba::build(packet, wire::kHeaderSize, scheduler_.packetBuffer());
        if (injectedFate(qp, framed))
            scheduler_.send(portNumber, std::move(framed));
    }
    // UD is unreliable: a packet the link cannot take is lost, not an error.
    return true;
}

namespace {

// The index of the first entry of a port's table that `pkey` matches
// (IBA 10.9.3, limited members included), or -1.
int findPkey(const PortState &p, uint16_t pkey) {
    for (uint16_t i = 0; i < PIB_PKEY_TABLE_LEN; ++i)
        if (iba::pkeysMatch(p.pkeys[i], pkey))
            return i;
    return -1;
}

bool receivesDatagrams(const QueuePair &qp) {
    return isDatagramType(qp.ctx.type) &&
           (qp.attr.qp_state == PIB_QPS_RTR || qp.attr.qp_state == PIB_QPS_RTS ||
            qp.attr.qp_state == PIB_QPS_SQD);
}

} // namespace

// A datagram for this port: to the QP it names (QP0 and QP1 are the
// port's own), or to the multicast group's members.
void Datagram::receive(unsigned number, const iba::Packet &packet, uint32_t senderQpn) {
    PortState *p = &ports_.at(number);
    const uint32_t destQp = packet.bth.destQp;
    const bool vl15 = packet.lrh.vl == 15;
    // QP0 traffic travels on VL15 and nothing else does (IBA 7.6.4).
    if (vl15 != (destQp == 0) || !packet.deth)
        return;
    const uint16_t dlid = packet.lrh.dlid;
    if (iba::isMulticastLid(dlid)) {
        receiveMulticast(number, packet, senderQpn);
        return;
    }
    const bool forUs = dlid == iba::kPermissiveLid
                           ? destQp == 0
                           : iba::portAnswersTo(p->info.lid, p->info.lmc, dlid);
    if (!forUs)
        return;
    uint32_t qpn = destQp;
    if (destQp <= 1)
        qpn = PIB_SPECIAL_QPN(number, destQp);
    QueuePair *qp = objects_.findQp(qpn);
    if (!qp || !receivesDatagrams(*qp))
        return;
    if (qp->ctx.type == PIB_QPT_UD && qp->attr.port_num != number)
        return;
    // P_Key (not for QP0) and Q_Key checks (IBA 10.9, 10.2.4.2).
    uint16_t pkeyIndex = 0;
    if (destQp != 0) {
        const int found = findPkey(*p, packet.bth.pkey);
        if (found < 0) {
            ++p->info.bad_pkey_cntr;
            return;
        }
        pkeyIndex = static_cast<uint16_t>(found);
        const uint32_t qkey = destQp == 1 ? iba::kQp1Qkey : qp->attr.qkey;
        if (packet.deth->qkey != qkey) {
            ++p->info.qkey_viol_cntr;
            return;
        }
    }
    receiveDatagram(number, packet, *qp, pkeyIndex);
}

// A packet to a multicast LID goes to every QP of the port attached to the
// group its GRH names (IBA 10.5.2.4), each with its own receive WQE and
// completion; a copy a QP of this port sent skips the sender.
void Datagram::receiveMulticast(unsigned number, const iba::Packet &packet, uint32_t senderQpn) {
    PortState *p = &ports_.at(number);
    // IBA 8.3.1: multicast packets carry a GRH and go to QP 0xFFFFFF.
    if (!packet.grh || packet.bth.destQp != iba::kMulticastQpn || packet.lrh.vl == 15) {
        trace::err_mcast_drop(host_, number, packet.grh ? "QP 0xFFFFFF" : "a GRH");
        return;
    }
    const auto *members = objects_.multicast.members(number, packet.grh->dgid);
    if (!members)
        return; // no QP of ours is in the group: not for us
    const int pkeyIndex = findPkey(*p, packet.bth.pkey);
    if (pkeyIndex < 0) {
        ++p->info.bad_pkey_cntr;
        return;
    }
    // Delivery only completes receive WQEs: no command runs meanwhile, so
    // the member list stays as it is while it is walked.
    for (uint32_t qpn : *members) {
        QueuePair *qp = objects_.findQp(qpn);
        if (qpn == senderQpn || !qp || !receivesDatagrams(*qp) || qp->attr.port_num != number)
            continue;
        if (packet.deth->qkey != qp->attr.qkey) {
            ++p->info.qkey_viol_cntr;
            continue;
        }
        receiveDatagram(number, packet, *qp, static_cast<uint16_t>(pkeyIndex));
    }
}

// Puts a datagram that passed the checks into `qp`'s next receive WQE.
void Datagram::receiveDatagram(unsigned number, const iba::Packet &packet, QueuePair &qp,
                               uint16_t pkeyIndex) {
    PortState *p = &ports_.at(number);
    const uint16_t dlid = packet.lrh.dlid;
    Wqe wqe;
    uint16_t index = 0;
    uint8_t status = PIB_WC_SUCCESS;
    if (!receives_.takeReceiveWqe(qp, wqe, &index, &status)) {
        count(qp, &pib_port_counters::receives_dropped);
        return; // no receive posted: a datagram is simply dropped
    }

    Completion cqe;
    cqe.wrId = wqe.ctrl.wr_id;
    cqe.qpn = qp.number;
    cqe.srcQp = packet.deth->srcQp;
    cqe.slid = packet.lrh.slid;
    cqe.sl = packet.lrh.sl;
    cqe.dlidPathBits = iba::isMulticastLid(dlid) ? 0 : iba::pathBits(p->info.lmc, dlid);
    cqe.pkeyIndex = pkeyIndex;
    cqe.pkey = packet.bth.pkey;
    cqe.wqeIndex = index;
    cqe.opcode = PIB_WC_RECV;
    cqe.byteLen = static_cast<uint32_t>(kGrhRoom + packet.data().size());
    cqe.status = status;
    if (status == PIB_WC_SUCCESS) {
        if (packet.grh) {
            // The GRH as it was on the wire, in the buffer's first 40 bytes.
            const iba::Grh &g = *packet.grh;
            uint8_t grh[kGrhRoom] = {};
            const uint32_t w = 6u << 28 | uint32_t{g.tclass} << 20 | g.flowLabel;
            for (int i = 0; i < 4; ++i)
                grh[i] = static_cast<uint8_t>(w >> (24 - 8 * i));
            grh[4] = static_cast<uint8_t>(g.payLen >> 8);
            grh[5] = static_cast<uint8_t>(g.payLen);
            grh[6] = g.nextHeader;
            grh[7] = g.hopLimit;
            std::memcpy(grh + 8, g.sgid.data(), 16);
            std::memcpy(grh + 24, g.dgid.data(), 16);
            cqe.status = memory_.scatter(qp.ctx.pdn, wqe.sges, grh, 0);
            cqe.grh = true;
        }
        if (cqe.status == PIB_WC_SUCCESS)
            cqe.status = memory_.scatter(qp.ctx.pdn, wqe.sges, packet.data(), kGrhRoom);
    }
    cqe.immediate = packet.imm;
    cqe.srqn = receives_.receiveSrq(qp);
    events_.postCqe(qp.ctx.recv_cqn, cqe, packet.bth.solicited);
}

} // namespace pib
