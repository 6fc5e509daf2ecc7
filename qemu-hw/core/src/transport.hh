// SPDX-License-Identifier: GPL-2.0-or-later
// What the transport roles share. The datagram transport (datagram.*),
// the connected requester with its completer (requester.*) and the
// responder (responder.*) are each a TransportRole over the same parts:
// the components they work through, and the way out of a connected QP
// (transport.cc). The DataPath owns the parts and dispatches to the roles;
// the roles never call one another.
#pragma once

#include <cstdint>
#include <vector>

#include "addressing.hh"
#include "event_writer.hh"
#include "host.hh"
#include "injection.hh"
#include "memory.hh"
#include "memory_keys.hh"
#include "object_tables.hh"
#include "outstanding_memory.hh"
#include "packet.hh"
#include "pib_hw.h"
#include "ports.hh"
#include "scheduler.hh"
#include "wqe_format.hh"

namespace pib {

class QpTimers;
class ReceiveWqes;

// What a role asks of the data path for a whole QP: it entered the error
// state, and everything it holds is to complete flushed (IBA 10.8.3.3;
// flush.cc), on both its sides.
class QpErrorFlow {
  public:
    virtual void flushQp(QueuePair &qp) = 0;

  protected:
    ~QpErrorFlow() = default;
};

// The components the roles work through.
struct TransportParts {
    const Host &host;
    ObjectTables &objects;
    Ports &ports;
    EventWriter &events;
    MemoryAccess &memory;
    MemoryKeys &keys;
    WqeFormat &wqes;
    Scheduler &scheduler;
    ArmedInjections &injections;
    OutstandingMemory &outstanding;
    QpTimers &timers;
    ReceiveWqes &receives;
    QpErrorFlow &errors;
};

class TransportRole {
  protected:
    explicit TransportRole(const TransportParts &parts)
        : host_(parts.host), objects_(parts.objects), ports_(parts.ports), events_(parts.events),
          memory_(parts.memory), keys_(parts.keys), wqes_(parts.wqes), scheduler_(parts.scheduler),
          outstanding_(parts.outstanding), timers_(parts.timers), receives_(parts.receives),
          injections_(parts.injections), errors_(parts.errors) {}
    ~TransportRole() = default;

    // Counts one transport event of `qp`'s port (QUERY_COUNTERS) and of
    // its counter set, if it has one.
    void count(const QueuePair &qp, uint64_t pib_port_counters::*counter);
    // Test facilities (injection.hh): the status an armed injection gives
    // send WQE `index` of `qp` (PIB_WC_SUCCESS: none), and whether a
    // packet of `qp` leaves (false: dropped; a corrupted one leaves).
    uint8_t injectedCompletion(const QueuePair &qp, uint32_t index, uint8_t *vendorErr);
    bool injectedFate(const QueuePair &qp, std::vector<uint8_t> &framed);
    // A transfer of `qp`'s `side` reached a page its key does not map
    // (page_faults.hh). True when the side waits for the driver: the
    // fault is reported now, or one is outstanding. False when the
    // transfer fails instead: the side's last fault failed (which this
    // spends), or the driver takes no faults.
    bool waitForPage(QueuePair &qp, FaultSide side, const FaultSite &site);
    // `qp` entered the error state: everything it holds completes flushed.
    void flushQp(QueuePair &qp) { errors_.flushQp(qp); }

    // The way out of a connected QP: its packets' path headers, and the
    // port (or this very port, when the peer is on it).
    uint32_t pathMtu(const QueuePair &qp) const;
    bool addressConnected(QueuePair &qp, iba::Packet &packet);
    void transmitConnected(QueuePair &qp, std::vector<uint8_t> framed);
    // A packet of `qp` with `len` payload bytes to fill: built straight
    // on the cable when it goes out as built (no injection is armed, it
    // does not loop back, the cable is a ring with room), else in a
    // buffer. transmitConnected() then sends it; a packet not sent (its
    // data could not be read) leaves nothing behind either way.
    iba::PacketWriter startPacket(const QueuePair &qp, const iba::Packet &headers, uint32_t len);
    void transmitConnected(QueuePair &qp, iba::PacketWriter &&packet) {
        if (const auto place = packet.place(); !place.empty()) {
            std::move(packet).finish();
            scheduler_.sendBuilt(qp.attr.port_num, place);
            return;
        }
        transmitConnected(qp, std::move(packet).finish());
    }
    void sendConnected(QueuePair &qp, iba::Packet &packet);
    // Whether `qp`'s packets come back in at its own port.
    bool loopsBack(const QueuePair &qp) const {
        const PortState &p = ports_.at(qp.attr.port_num);
        return iba::portAnswersTo(p.info.lid, p.info.lmc, qp.attr.av.dlid);
    }

    const Host &host_;
    ObjectTables &objects_;
    Ports &ports_;
    EventWriter &events_;
    MemoryAccess &memory_;
    MemoryKeys &keys_;
    WqeFormat &wqes_;
    Scheduler &scheduler_;
    OutstandingMemory &outstanding_;
    QpTimers &timers_;
    ReceiveWqes &receives_;

  private:
    ArmedInjections &injections_;
    QpErrorFlow &errors_;
};

} // namespace pib
