// SPDX-License-Identifier: GPL-2.0-or-later
// What the transport roles share (transport.hh): counters, the host's
// injections, and the way out of a connected QP.
#include "transport.hh"

#include "address_vector.hh"
#include "addressing.hh"
#include "crc.hh"
#include "frame.hh"
#include "trace.hh"

namespace pib {

void TransportRole::count(const QueuePair &qp, uint64_t pib_port_counters::*counter) {
    if (PortState *p = ports_.find(qp.attr.port_num))
        ++(p->transport.*counter);
    if (CounterSet *set = qp.counterSet ? objects_.counterSets.find(qp.counterSet) : nullptr)
        ++(set->counts.*counter);
}

uint8_t TransportRole::injectedCompletion(const QueuePair &qp, uint32_t index, uint8_t *vendorErr) {
    if (injections_.empty())
        return PIB_WC_SUCCESS;
    const std::optional<Injection> taken = injections_.takeWqe(qp.number);
    if (!taken)
        return PIB_WC_SUCCESS;
    trace::inject_completion(host_, qp.number, index, taken->status, taken->vendorErr);
    *vendorErr = taken->vendorErr;
    return taken->status;
}

bool TransportRole::injectedFate(const QueuePair &qp, std::vector<uint8_t> &framed) {
    if (injections_.empty() || framed.size() < wire::kHeaderSize + 6)
        return true;
    switch (injections_.takePacket(qp.number)) {
    case ArmedInjections::PacketFate::kSend:
        return true;
    case ArmedInjections::PacketFate::kDrop:
        trace::inject_packet(host_, qp.number, "dropped");
        scheduler_.charge(); // the same work as a packet sent
        return false;
    case ArmedInjections::PacketFate::kCorrupt:
        break;
    }
    // A bit of the ICRC flips and the VCRC is made right again: the switch
    // forwards the packet, and the receiver drops it as corrupt.
    trace::inject_packet(host_, qp.number, "corrupted");
    const size_t vcrc = framed.size() - 2;
    framed[vcrc - 1] ^= 0x01;
    const uint16_t crc = static_cast<uint16_t>(~iba::crc16Update(
        0xffff,
        std::span<const uint8_t>(framed).subspan(wire::kHeaderSize, vcrc - wire::kHeaderSize)));
    framed[vcrc] = static_cast<uint8_t>(crc);
    framed[vcrc + 1] = static_cast<uint8_t>(crc >> 8);
    return true;
}

uint32_t TransportRole::pathMtu(const QueuePair &qp) const {
    return mtuBytes(qp.attr.path_mtu);
}

// Fills in the path of a packet of connected QP `qp` to its peer: the
// LRH, the GRH if the address vector has one, the BTH's P_Key and
// destination QP. The caller gives the opcode, the PSN and the extension
// headers. Returns false when the port cannot send (the packet is lost;
// RC resends when its timer runs out).
bool TransportRole::addressConnected(QueuePair &qp, iba::Packet &packet) {
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
void TransportRole::transmitConnected(QueuePair &qp, std::vector<uint8_t> framed) {
    if (!injectedFate(qp, framed))
        return;
    const unsigned portNumber = qp.attr.port_num;
    if (loopsBack(qp)) {
        scheduler_.loopBack(portNumber, std::move(framed));
        return;
    }
    scheduler_.send(portNumber, std::move(framed));
}

iba::PacketWriter TransportRole::startPacket(const QueuePair &qp, const iba::Packet &headers,
                                             uint32_t len) {
    if (injections_.empty() && scheduler_.buildsOnCable(qp.attr.port_num)) {
        const size_t bytes = iba::PacketWriter::framedSize(headers, len, wire::kHeaderSize);
        if (const auto room = scheduler_.roomOnCable(qp.attr.port_num, bytes);
            !room.empty() && !loopsBack(qp))
            return iba::PacketWriter(headers, len, wire::kHeaderSize, room);
    }
    return iba::PacketWriter(headers, len, wire::kHeaderSize, scheduler_.packetBuffer());
}

void TransportRole::sendConnected(QueuePair &qp, iba::Packet &packet) {
    if (addressConnected(qp, packet))
        transmitConnected(qp, iba::build(packet, wire::kHeaderSize, scheduler_.packetBuffer()));
}

} // namespace pib
