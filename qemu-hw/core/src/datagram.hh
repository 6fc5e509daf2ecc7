// SPDX-License-Identifier: GPL-2.0-or-later
// The datagram transport (UD and the special QPs QP0/QP1): send queues
// turned into packets, datagrams checked and turned into receive
// completions.
#pragma once

#include <cstdint>

#include "transport.hh"

namespace pib {

class Datagram final : TransportRole {
  public:
    explicit Datagram(const TransportParts &parts) : TransportRole(parts) {}

    // Sends what `qp`'s send queue holds, as the event's budget allows.
    void send(QueuePair &qp);
    // A datagram that arrived on `port` (or was sent to it by one of its
    // own QPs, `senderQpn`, which never receives its own multicast copy).
    void receive(unsigned port, const iba::Packet &packet, uint32_t senderQpn = 0);

  private:
    bool sendUd(QueuePair &qp, const Wqe &wqe, uint32_t *length, uint8_t *status);
    void receiveMulticast(unsigned port, const iba::Packet &packet, uint32_t senderQpn);
    void receiveDatagram(unsigned port, const iba::Packet &packet, QueuePair &qp,
                         uint16_t pkeyIndex);
    uint32_t wireQpn(const QueuePair &qp) const;
};

} // namespace pib
