// SPDX-License-Identifier: GPL-2.0-or-later
// The data path's dispatch: a send queue's work to its QP's transport,
// every received packet to the role it is for, the timer to the QPs whose
// deadline passed.
#include "data_path.hh"

#include "addressing.hh"
#include "frame.hh"
#include "trace.hh"

namespace pib {

void DataPath::processSendQueue(QueuePair &qp) {
    const uint8_t state = qp.attr.qp_state;
    if (state == PIB_QPS_ERR) {
        flushQp(qp);
        return;
    }
    // WQEs posted before RTS wait there; SQD holds new ones too.
    if (state != PIB_QPS_RTS)
        return;
    if (isDatagramType(qp.ctx.type))
        datagram_.send(qp);
    else
        requester_.send(qp);
}

void DataPath::portReceive(unsigned number, std::span<const uint8_t> bytes,
                           std::span<const uint8_t> head) {
    PortState *p = ports_.find(number);
    if (!p)
        return;
    iba::ParseError error;
    // The payload stays in the link's buffer, or in the ring: it goes from
    // there to guest memory.
    const auto packet = head.empty() ? iba::parse(bytes, &error, true, /*copyPayload=*/false)
                                     : iba::parseShared(bytes, head, &error);
    if (!packet) {
        ++p->rcvErrors;
        trace::err_port_drop(host_, number, iba::toString(error));
        return;
    }
    ++p->rcvPackets;
    p->rcvWords += bytes.size() / 4;
    trace::packet_received(host_, number, packet->bth.opcode, packet->bth.psn, packet->bth.destQp,
                           static_cast<unsigned>(bytes.size()));
    deliver(number, *packet);
}

// A packet goes by its transport: a datagram to the datagram transport,
// anything else to the connected QP it names, if this port is its LID's
// and active.
void DataPath::deliver(unsigned number, const iba::Packet &packet, uint32_t senderQpn) {
    if ((packet.bth.opcode & 0xe0) == iba::kTransportUd) {
        datagram_.receive(number, packet, senderQpn);
        return;
    }
    const PortState &p = ports_.at(number);
    if (packet.lrh.vl != 15 && iba::portAnswersTo(p.info.lid, p.info.lmc, packet.lrh.dlid) &&
        p.info.state == PIB_PORT_ACTIVE)
        deliverConnected(number, packet);
}

// The QP type a connected packet is for: XRC requests go to the target
// half, responses to the initiator; DC requests to a DCT, responses to a
// DCI.
static uint8_t wantedType(uint8_t transport, bool response) {
    switch (transport) {
    case iba::kTransportRc:
        return PIB_QPT_RC;
    case iba::kTransportUc:
        return PIB_QPT_UC;
    case iba::kTransportXrc:
        return response ? PIB_QPT_XRC_INI : PIB_QPT_XRC_TGT;
    default:
        return response ? kQptDci : kQptDct;
    }
}

// A packet for a connected QP of this port.
void DataPath::deliverConnected(unsigned number, const iba::Packet &packet) {
    const uint32_t qpn = packet.bth.destQp;
    QueuePair *qp = qpn >= PIB_FIRST_QPN ? objects_.findQp(qpn) : nullptr;
    const uint8_t transport = packet.bth.opcode & 0xe0;
    const uint8_t op = packet.bth.opcode & 0x1f;
    const bool response = transport != iba::kTransportUc && op >= iba::kReadResponseFirst &&
                          op <= iba::kAtomicAcknowledge;
    if (!qp || qp->ctx.type != wantedType(transport, response) || qp->attr.port_num != number ||
        qp->attr.qp_state < PIB_QPS_RTR) {
        trace::err_rc_no_qp(host_, number, qpn);
        return;
    }
    // IBA 9.6.1: a connected QP takes packets from its peer only, with the
    // P_Key it was given. A DCT takes them from any DCI (dc_targets.cc).
    PortState &p = ports_.at(number);
    const uint16_t pkey = p.pkeys[qp->attr.pkey_index % PIB_PKEY_TABLE_LEN];
    if (!iba::pkeysMatch(pkey, packet.bth.pkey)) {
        ++p.info.bad_pkey_cntr;
        return;
    }
    if (qp->ctx.type == kQptDct) {
        deliverToDct(number, *qp, packet);
        return;
    }
    if (packet.lrh.slid != qp->attr.av.dlid) {
        trace::err_rc_wrong_peer(host_, qpn, packet.lrh.slid, qp->attr.av.dlid);
        return;
    }
    if (response)
        requester_.onResponse(*qp, packet);
    else
        responder_.onRequest(*qp, packet);
}

// A MAD the port's agents originate goes out as a packet of QP0; to an SM
// behind this very port, through its QP0.
void DataPath::sendSubnetPacket(unsigned number, iba::Packet &packet) {
    const PortState *p = ports_.find(number);
    if (!p)
        return;
    if ((packet.lrh.dlid & iba::lidMask(p->info.lmc)) == p->info.lid) {
        deliver(number, packet);
        return;
    }
    scheduler_.send(number, iba::build(packet, wire::kHeaderSize, scheduler_.packetBuffer()));
}

void DataPath::resume(QueuePair &qp) {
    responder_.sendReplies(qp);
    processSendQueue(qp);
}

void DataPath::receiveLooped(unsigned port, const iba::Packet &packet) {
    deliver(port, packet);
}

void DataPath::timerExpired() {
    events_.moderation().expire(host_.clockNs());
    timers_.expire([this](QueuePair &qp) {
        expirePageFaults(qp);
        if (qp.recordPollAt && qp.recordPollAt <= host_.clockNs())
            receiveRecordDue(qp);
        else
            requester_.timerExpired(qp);
        scheduler_.drainLoopback();
    });
}

} // namespace pib
