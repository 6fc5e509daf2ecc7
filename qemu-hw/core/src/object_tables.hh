// SPDX-License-Identifier: GPL-2.0-or-later
// Every object the command interface creates, in its numbered table, and
// the MTT they are built on. The command processor fills and empties the
// tables; the data path finds objects in them.
#pragma once

#include <array>
#include <cstdint>
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

struct ObjectTables {
    explicit ObjectTables(const pib_core_config &config);

    // QP `qpn`: one of the special QPs (numbers below 2 * PIB_MAX_PORTS)
    // or an ordinary one; nullptr if it does not exist.
    QueuePair *findQp(uint32_t qpn) const {
        if (qpn < specialQps.size())
            return specialQps[qpn].get();
        return qps.find(qpn);
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
    MulticastGroups multicast;
    // QP0 and QP1 of each port: numbers 2 * (port - 1) + type.
    std::array<std::unique_ptr<QueuePair>, 2 * PIB_MAX_PORTS> specialQps{};
};

} // namespace pib
