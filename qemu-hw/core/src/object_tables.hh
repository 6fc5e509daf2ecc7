// SPDX-License-Identifier: GPL-2.0-or-later
// Every object the command interface creates, in its numbered table, and
// the MTT they are built on. The command processor fills and empties the
// tables; the data path finds objects in them.
#pragma once

#include <array>
#include <compare>
#include <cstdint>
#include <map>
#include <memory>

#include "mtt.hh"
#include "multicast.hh"
#include "object_table.hh"
#include "objects.hh"
#include "pib_core.h"
#include "pib_hw.h"

namespace pib {

// Objects other objects hold by number and nothing more (PDs, XRC
// domains, doorbell pages), for every personality's commands.
enum class Release { kReleased, kMissing, kHeld };
// Takes object `number` out of `table` unless it does not exist or
// another object holds it; *refs says how many do.
template <class T> Release release(ObjectTable<T> &table, uint64_t number, uint32_t *refs) {
    const T *object = table.find(number);
    *refs = object ? object->refs : 0;
    if (!object)
        return Release::kMissing;
    if (object->refs)
        return Release::kHeld;
    table.erase(number);
    return Release::kReleased;
}

// Where a DC connection's requests come from: the DCI behind a port's
// LID, to one DCT (dc_targets.hh).
struct DcPeer {
    uint32_t dct = 0;
    uint32_t dci = 0;
    uint16_t slid = 0;
    uint8_t port = 0;
    auto operator<=>(const DcPeer &) const = default;
};

// The DCTs' connections: hidden RC responders, numbered beyond the 24
// bits a packet or a guest's command can name, found by their peer.
struct DcConnections {
    static constexpr uint32_t kFirstNumber = 1u << 24;
    explicit DcConnections(uint32_t capacity)
        : table(capacity, kFirstNumber, Numbering::kRotating) {}
    ObjectTable<QueuePair> table;
    std::map<DcPeer, uint32_t> byPeer;
    // The serial the device's DCIs give their next connection (never 0).
    uint32_t nextSerial = 1;
    uint32_t takeSerial() {
        const uint32_t serial = nextSerial++;
        if (nextSerial == 0)
            nextSerial = 1;
        return serial;
    }
};

struct ObjectTables {
    explicit ObjectTables(const pib_core_config &config);

    // QP `qpn`: one of the special QPs (numbers below 2 * PIB_MAX_PORTS)
    // or an ordinary one; nullptr if it does not exist.
    QueuePair *findQp(uint32_t qpn) const {
        if (qpn < specialQps.size())
            return specialQps[qpn].get();
        return qps.find(qpn);
    }
    // The same, or a DC connection: for the data path's own lists (the
    // scheduler's, the timers'), which hold both by number. Never for a
    // number a guest gave.
    QueuePair *findTransportQp(uint32_t qpn) const {
        return qpn >= DcConnections::kFirstNumber ? dcConnections.table.find(qpn) : findQp(qpn);
    }
    // Every object gone, as after power-on.
    void clear();

    ObjectTable<DoorbellPage> uars;
    ObjectTable<ProtectionDomain> pds;
    ObjectTable<XrcDomain> xrcds;
    ObjectTable<CounterSet> counterSets;
    Mtt mtt;
    ObjectTable<EventQueue> eqs;
    ObjectTable<CompletionQueue> cqs;
    ObjectTable<MemoryRegion> mrs;
    ObjectTable<MemoryWindow> mws; // numbered above every MR: a key names one or the other
    ObjectTable<SharedReceiveQueue> srqs;
    ObjectTable<QueuePair> qps;
    DcConnections dcConnections;
    MulticastGroups multicast;
    // QP0 and QP1 of each port: numbers 2 * (port - 1) + type.
    std::array<std::unique_ptr<QueuePair>, 2 * PIB_MAX_PORTS> specialQps{};
};

} // namespace pib
