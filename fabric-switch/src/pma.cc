// SPDX-License-Identifier: GPL-2.0-or-later
// The performance management agent (IBA 16.1) of the switch and of the
// simulated CAs: ClassPortInfo, PortCounters and PortCountersExtended per
// port, in IBA units.
#include <algorithm>
#include <limits>

#include "switch.hh"

namespace pib::fabric {

using namespace pib::iba;

namespace {

void clearSelected(PortCounters &c, uint16_t select) {
    clearIfSelected(select, kSelLinkDowned, c.linkDowned);
    clearIfSelected(select, kSelRcvErrors, c.rcvErrors);
    clearIfSelected(select, kSelXmitDiscards, c.xmitDiscards);
    clearIfSelected(select, kSelXmitConstraintErrors, c.xmitConstraintErrors);
    clearIfSelected(select, kSelRcvConstraintErrors, c.rcvConstraintErrors);
    clearIfSelected(select, kSelVl15Dropped, c.vl15Dropped);
    clearIfSelected(select, kSelXmitData, c.xmitData);
    clearIfSelected(select, kSelRcvData, c.rcvData);
    clearIfSelected(select, kSelXmitPackets, c.xmitPackets);
    clearIfSelected(select, kSelRcvPackets, c.rcvPackets);
}

} // namespace

void answerPma(Mad mad, const std::function<PortCounters *(unsigned port)> &countersOf) {
    uint16_t status = kStatusOk;
    const uint8_t method = mad.method();
    if (mad.baseVersion() != 1 || mad.classVersion() != 1) {
        status = kStatusBadVersion;
    } else if (method != kGet && method != kSet) {
        status = kStatusBadMethod;
    } else if (mad.attributeId() == kAttrClassPortInfo) {
        if (method == kSet)
            status = kStatusBadMethod;
        writePmaClassPortInfo(mad);
    } else if (mad.attributeId() == kAttrPortCounters ||
               mad.attributeId() == kAttrPortCountersExtended) {
        PortCounters *counters = countersOf(pmaPortSelect(mad));
        if (!counters) {
            status = kStatusBadField;
        } else {
            PortCounters &c = *counters;
            if (method == kSet)
                clearSelected(c, pmaCounterSelect(mad));
            writePortCounters(mad, {.xmitData = c.xmitData,
                                    .rcvData = c.rcvData,
                                    .xmitPackets = c.xmitPackets,
                                    .rcvPackets = c.rcvPackets,
                                    .rcvErrors = c.rcvErrors,
                                    .xmitDiscards = c.xmitDiscards,
                                    .vl15Dropped = c.vl15Dropped,
                                    .linkDowned = c.linkDowned,
                                    .xmitConstraintErrors = c.xmitConstraintErrors,
                                    .rcvConstraintErrors = c.rcvConstraintErrors});
        }
    } else {
        status = kStatusBadAttribute;
    }
    mad.setMethod(kGetResp);
    mad.setStatus(status);
}

void Switch::pma(Mad mad) {
    answerPma(mad, [this](unsigned port) -> PortCounters * {
        return port >= 1 && port <= config_.ports ? &ports_[port].counters : nullptr;
    });
}

} // namespace pib::fabric
