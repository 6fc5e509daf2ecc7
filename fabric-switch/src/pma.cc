// SPDX-License-Identifier: GPL-2.0-or-later
// The switch's performance management agent (IBA 16.1): ClassPortInfo,
// PortCounters and PortCountersExtended per port, in IBA units.
#include <algorithm>
#include <cstring>
#include <limits>

#include "switch.hh"

namespace pib::fabric {

using namespace pib::iba;

namespace {

constexpr size_t D = Mad::kPmaData;
constexpr uint16_t kCapExtendedCounters = 1u << 9; // PortCountersExtended

} // namespace

void Switch::pma(Mad mad) {
    uint16_t status = kStatusOk;
    const uint8_t method = mad.method();
    const unsigned portSelect = mad.get8(D + 1);
    if (mad.baseVersion() != 1 || mad.classVersion() != 1) {
        status = kStatusBadVersion;
    } else if (method != kGet && method != kSet) {
        status = kStatusBadMethod;
    } else if (mad.attributeId() == kAttrClassPortInfo) {
        if (method == kSet)
            status = kStatusBadMethod;
        std::memset(mad.bytes().data() + D, 0, 192);
        mad.set8(D + 0, 1);
        mad.set8(D + 1, 1);
        mad.set16(D + 2, kCapExtendedCounters);
        mad.set8(D + 7, 18); // response time value
    } else if (mad.attributeId() == kAttrPortCounters ||
               mad.attributeId() == kAttrPortCountersExtended) {
        if (portSelect < 1 || portSelect > config_.ports) {
            status = kStatusBadField;
        } else {
            PortCounters &c = ports_[portSelect].counters;
            if (method == kSet) // a Set clears the counters it selects: all here
                c = PortCounters{};
            std::memset(mad.bytes().data() + D + 2, 0, 190);
            mad.set8(D + 1, static_cast<uint8_t>(portSelect));
            if (mad.attributeId() == kAttrPortCounters) {
                mad.set16(D + 8, iba::saturate<uint16_t>(c.rcvErrors));
                mad.set16(D + 14, iba::saturate<uint16_t>(c.xmitDiscards));
                mad.set8(D + 7, iba::saturate<uint8_t>(c.linkDowned));
                mad.set16(D + 22, iba::saturate<uint16_t>(c.vl15Dropped));
                mad.set32(D + 24, iba::saturate<uint32_t>(c.xmitData));
                mad.set32(D + 28, iba::saturate<uint32_t>(c.rcvData));
                mad.set32(D + 32, iba::saturate<uint32_t>(c.xmitPackets));
                mad.set32(D + 36, iba::saturate<uint32_t>(c.rcvPackets));
            } else {
                mad.set64(D + 8, c.xmitData);
                mad.set64(D + 16, c.rcvData);
                mad.set64(D + 24, c.xmitPackets);
                mad.set64(D + 32, c.rcvPackets);
                mad.set64(D + 40, c.xmitPackets); // all unicast so far
                mad.set64(D + 48, c.rcvPackets);
            }
        }
    } else {
        status = kStatusBadAttribute;
    }
    mad.setMethod(kGetResp);
    mad.setStatus(status);
}

} // namespace pib::fabric
