// SPDX-License-Identifier: GPL-2.0-or-later
// What the RC, UC and XRC requester and responder share: the headers of a
// connected QP's packets, the way out (the port, or straight back in when
// the destination is this port), and the way in.
#include <cinttypes>

#include "address_vector.hh"
#include "addressing.hh"
#include "data_path.hh"
#include "frame.hh"
#include "trace.hh"

namespace pib {

// Fills in the path of a packet of connected QP `qp` to its peer: the
// LRH, the GRH if the address vector has one, the BTH's P_Key and
// destination QP. The caller gives the opcode, the PSN and the extension
// headers. Returns false when the port cannot send (the packet is lost;
// RC resends when its timer runs out).
bool DataPath::addressConnected(QueuePair &qp, iba::Packet &packet) {
    PortState *p = ports_.find(qp.attr.port_num);
    if (!p)
        return false;
    const pib_av &av = qp.attr.av;
    packet.lrh.vl = 0;
    packet.lrh.sl = av.sl & 0xf;
    packet.lrh.dlid = av.dlid;
    packet.lrh.slid = static_cast<uint16_t>(p->info.lid | av.src_path_bits);
    packet.grh = grhFor(av, p->info.gid_prefix, p->guids);
    packet.bth.pkey = p->pkeys[qp.attr.pkey_index % PIB_PKEY_TABLE_LEN];
    packet.bth.destQp = qp.attr.dest_qp_num & 0xffffff;
    return p->info.state == PIB_PORT_ACTIVE && p->info.phys_state == PIB_PHYS_LINK_UP;
}

// Sends a built packet (with wire::kHeaderSize bytes of headroom) of
// connected QP `qp`.
void DataPath::transmitConnected(QueuePair &qp, std::vector<uint8_t> framed) {
    if (!injectedFate(qp, framed))
        return;
    const unsigned portNumber = qp.attr.port_num;
    const PortState &p = ports_.at(portNumber);
    if (iba::portAnswersTo(p.info.lid, p.info.lmc, qp.attr.av.dlid)) {
        scheduler_.loopBack(portNumber, std::move(framed));
        return;
    }
    scheduler_.send(portNumber, std::move(framed));
}

void DataPath::sendConnected(QueuePair &qp, iba::Packet &packet) {
    if (addressConnected(qp, packet))
        transmitConnected(qp, iba::build(packet, wire::kHeaderSize, scheduler_.packetBuffer()));
}

// A packet for a connected QP of this port.
void DataPath::deliverConnected(unsigned number, const iba::Packet &packet) {
    const uint32_t qpn = packet.bth.destQp;
    QueuePair *qp = qpn >= PIB_FIRST_QPN ? objects_.findQp(qpn) : nullptr;
    const uint8_t transport = packet.bth.opcode & 0xe0;
    const uint8_t op = packet.bth.opcode & 0x1f;
    const bool response = transport != iba::kTransportUc && op >= iba::kReadResponseFirst &&
                          op <= iba::kAtomicAcknowledge;
    // XRC requests go to the target half, responses to the initiator.
    const uint8_t wanted = transport == iba::kTransportRc ? PIB_QPT_RC
                           : transport == iba::kTransportUc
                               ? PIB_QPT_UC
                               : (response ? PIB_QPT_XRC_INI : PIB_QPT_XRC_TGT);
    if (!qp || qp->ctx.type != wanted || qp->attr.port_num != number ||
        qp->attr.qp_state < PIB_QPS_RTR) {
        trace::err_rc_no_qp(host_, number, qpn);
        return;
    }
    // IBA 9.6.1: a connected QP takes packets from its peer only, with the
    // P_Key it was given.
    PortState &p = ports_.at(number);
    const uint16_t pkey = p.pkeys[qp->attr.pkey_index % PIB_PKEY_TABLE_LEN];
    if (!iba::pkeysMatch(pkey, packet.bth.pkey)) {
        ++p.info.bad_pkey_cntr;
        return;
    }
    if (packet.lrh.slid != qp->attr.av.dlid) {
        trace::err_rc_wrong_peer(host_, qpn, packet.lrh.slid, qp->attr.av.dlid);
        return;
    }
    if (response)
        onResponse(*qp, packet);
    else
        onRequest(*qp, packet);
}

} // namespace pib
