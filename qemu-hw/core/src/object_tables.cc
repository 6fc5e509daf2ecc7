// SPDX-License-Identifier: GPL-2.0-or-later
#include "object_tables.hh"

#include "limits.hh"

namespace pib {

ObjectTables::ObjectTables(const pib_core_config &config)
    : uars(config.doorbell_pages), pds(limits::kMaxPd), xrcds(limits::kMaxXrcd),
      counterSets(limits::kMaxCounterSets, 1), mtt(limits::kMaxMtt, limits::kMaxKeyEntries),
      eqs(limits::kMaxEq), cqs(limits::kMaxCq), mrs(limits::kMaxMr, 1),
      mws(limits::kMaxMw, limits::kMaxMr + 1), srqs(limits::kMaxSrq, 0, Numbering::kRotating),
      qps(limits::kMaxQp, PIB_FIRST_QPN, Numbering::kRotating),
      dcConnections(limits::kMaxDcConnections),
      multicast(
          {limits::kMaxMcastGroups, limits::kMaxMcastQpAttach, limits::kMaxTotalMcastQpAttach}) {}

void ObjectTables::clear() {
    uars.clear();
    pds.clear();
    xrcds.clear();
    counterSets.clear();
    mtt.clear();
    eqs.clear();
    cqs.clear();
    mrs.clear();
    mws.clear();
    srqs.clear();
    qps.clear();
    dcConnections.table.clear();
    dcConnections.byPeer.clear();
    dcConnections.nextSerial = 1;
    multicast.clear();
    for (auto &qp : specialQps)
        qp.reset();
}

} // namespace pib
