// SPDX-License-Identifier: GPL-2.0-or-later
// Management datagrams (IBA 13.4): 256-byte MADs
// with the SMP layouts of IBA 14.2.1, read and written in place.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

namespace pib::iba {

inline constexpr size_t kMadSize = 256;

// A counter clipped to the width of its MAD field, as IBA counters stop at
// their maximum rather than wrap.
template <class T> T saturate(uint64_t v) {
    return static_cast<T>(std::min<uint64_t>(v, std::numeric_limits<T>::max()));
}

enum MgmtClass : uint8_t {
    kClassSmpLid = 0x01,
    kClassPerfMgt = 0x04,
    kClassSmpDirected = 0x81,
};

enum Method : uint8_t {
    kGet = 0x01,
    kSet = 0x02,
    kGetResp = 0x81,
    kTrap = 0x05,
    kTrapRepress = 0x07,
};

// MAD status values (IBA 13.4.7); the top bit of a DR SMP's status word is
// the direction bit D, kept apart.
enum Status : uint16_t {
    kStatusOk = 0,
    kStatusBadVersion = 0x0004,
    kStatusBadMethod = 0x0008,
    kStatusBadAttribute = 0x000c, // method/attribute combination not supported
    kStatusBadField = 0x001c,     // invalid value in an attribute field
};

// PortInfo's link width and speed fields (IBA 14.2.5.6).
inline constexpr uint8_t kLinkWidth4x = 2;
inline constexpr uint8_t kLinkWidth1x4x = 3; // supported or enabled: 1x and 4x
inline constexpr uint8_t kLinkSpeedQdr = 4;  // 10.0 Gb/s a lane
inline constexpr uint8_t kLinkSpeedSdrDdrQdr = 7;

enum AttributeId : uint16_t {
    kAttrClassPortInfo = 0x0001,
    kAttrNodeDescription = 0x0010,
    kAttrNodeInfo = 0x0011,
    kAttrSwitchInfo = 0x0012,
    kAttrGuidInfo = 0x0014,
    kAttrPortInfo = 0x0015,
    kAttrPkeyTable = 0x0016,
    kAttrSlToVlTable = 0x0017,
    kAttrVlArbTable = 0x0018,
    kAttrLinearForwardingTable = 0x0019,
    kAttrMulticastForwardingTable = 0x001b,
    kAttrPortCounters = 0x0012,         // PerfMgt class
    kAttrPortCountersExtended = 0x001d, // PerfMgt class
};

// A MAD in a buffer, with big-endian accessors at byte offsets.
class Mad {
  public:
    explicit Mad(std::span<uint8_t> bytes) : b_(bytes) {}

    uint8_t get8(size_t off) const { return b_[off]; }
    uint16_t get16(size_t off) const { return static_cast<uint16_t>(b_[off] << 8 | b_[off + 1]); }
    uint32_t get32(size_t off) const { return uint32_t{get16(off)} << 16 | get16(off + 2); }
    uint64_t get64(size_t off) const { return uint64_t{get32(off)} << 32 | get32(off + 4); }
    void set8(size_t off, uint8_t v) { b_[off] = v; }
    void set16(size_t off, uint16_t v) {
        b_[off] = static_cast<uint8_t>(v >> 8);
        b_[off + 1] = static_cast<uint8_t>(v);
    }
    void set32(size_t off, uint32_t v) {
        set16(off, static_cast<uint16_t>(v >> 16));
        set16(off + 2, static_cast<uint16_t>(v));
    }
    void set64(size_t off, uint64_t v) {
        set32(off, static_cast<uint32_t>(v >> 32));
        set32(off + 4, static_cast<uint32_t>(v));
    }
    std::span<uint8_t> bytes() { return b_; }

    // The common header (IBA 13.4.3).
    uint8_t baseVersion() const { return get8(0); }
    uint8_t mgmtClass() const { return get8(1); }
    uint8_t classVersion() const { return get8(2); }
    uint8_t method() const { return get8(3); }
    void setMethod(uint8_t m) { set8(3, m); }
    uint16_t status() const { return get16(4) & 0x7fff; }
    void setStatus(uint16_t s) { set16(4, static_cast<uint16_t>((get16(4) & 0x8000) | s)); }
    uint16_t attributeId() const { return get16(16); }
    uint32_t attributeModifier() const { return get32(20); }

    // Directed-route SMP fields (IBA 14.2.1.2).
    bool returning() const { return get16(4) & 0x8000; }
    void setReturning(bool d) { set16(4, static_cast<uint16_t>((get16(4) & 0x7fff) | d << 15)); }
    uint8_t hopPointer() const { return get8(6); }
    void setHopPointer(uint8_t h) { set8(6, h); }
    uint8_t hopCount() const { return get8(7); }
    uint16_t drSlid() const { return get16(32); }
    uint16_t drDlid() const { return get16(34); }
    uint8_t initialPath(unsigned hop) const { return get8(128 + hop); }
    uint8_t returnPath(unsigned hop) const { return get8(192 + hop); }
    void setReturnPath(unsigned hop, uint8_t port) { set8(192 + hop, port); }

    // Where the SMP's attribute data starts: offset 64 in both SMP kinds.
    static constexpr size_t kSmpData = 64;
    static constexpr size_t kSmpDataSize = 64;
    // PerfMgt MADs carry their data after a 40-byte reserved area.
    static constexpr size_t kPmaData = 64;

  private:
    std::span<uint8_t> b_;
};

// A port's traffic as a PMA reports it; the device and the switch keep
// their own counters and fill this in to answer.
struct PortCounterValues {
    uint64_t xmitData = 0; // 4-byte words
    uint64_t rcvData = 0;
    uint64_t xmitPackets = 0;
    uint64_t rcvPackets = 0;
    uint64_t rcvErrors = 0;
    uint64_t xmitDiscards = 0;
    uint64_t vl15Dropped = 0;
    uint64_t linkDowned = 0;
    uint64_t xmitConstraintErrors = 0; // P_Key outbound enforcement
    uint64_t rcvConstraintErrors = 0;  // P_Key inbound enforcement
};

// The PortSelect field of a PortCounters or PortCountersExtended MAD.
// Whether an agent answers a MAD of method `method`: a request. A
// response (the R bit, 0x80: GetResp, TrapRepress's kin) or a
// TrapRepress is never answered, so that two agents cannot keep
// answering each other's answers.
inline bool answerable(uint8_t method) {
    return !(method & 0x80) && method != kTrapRepress;
}

inline uint8_t pmaPortSelect(const Mad &mad) {
    return mad.get8(Mad::kPmaData + 1);
}

// The counters a PortCounters Set clears (its CounterSelect, IBA 16.1.3.5),
// in that attribute's bit order. PortCountersExtended's own CounterSelect
// (data and packet counters only) is mapped onto the same bits.
enum CounterSelect : uint16_t {
    kSelLinkDowned = 1u << 2,
    kSelRcvErrors = 1u << 3,
    kSelXmitDiscards = 1u << 6,
    kSelXmitConstraintErrors = 1u << 7,
    kSelRcvConstraintErrors = 1u << 8,
    kSelVl15Dropped = 1u << 11,
    kSelXmitData = 1u << 12,
    kSelRcvData = 1u << 13,
    kSelXmitPackets = 1u << 14,
    kSelRcvPackets = 1u << 15,
};

inline uint16_t pmaCounterSelect(const Mad &mad) {
    const uint16_t select = mad.get16(Mad::kPmaData + 2);
    if (mad.attributeId() == kAttrPortCounters)
        return select;
    uint16_t mapped = 0; // Extended: data, data, packets, packets, unicast x2
    mapped |= (select & 1u) ? kSelXmitData : 0;
    mapped |= (select & 2u) ? kSelRcvData : 0;
    mapped |= (select & (4u | 16u)) ? kSelXmitPackets : 0;
    mapped |= (select & (8u | 32u)) ? kSelRcvPackets : 0;
    return mapped;
}

// Zeroes the counters a Set's CounterSelect names.
template <typename T> inline void clearIfSelected(uint16_t select, uint16_t bit, T &counter) {
    if (select & bit)
        counter = 0;
}

// The PMA's ClassPortInfo (IBA 13.4.8.1) that the device and the switch
// both answer: base and class version 1, PortCountersExtended supported
// (IsExtendedWidthSupported), response time value 18 (about 1 s).
inline void writePmaClassPortInfo(Mad &mad) {
    constexpr size_t d = Mad::kPmaData;
    constexpr uint16_t kCapExtendedCounters = 1u << 9;
    std::memset(mad.bytes().data() + d, 0, kMadSize - d);
    mad.set8(d + 0, 1);
    mad.set8(d + 1, 1);
    mad.set16(d + 2, kCapExtendedCounters);
    mad.set8(d + 7, 18);
}

// Writes PortCounters (narrow fields that saturate) or PortCountersExtended
// (64-bit) after the PortSelect byte, which the caller has set.
inline void writePortCounters(Mad &mad, const PortCounterValues &c) {
    constexpr size_t d = Mad::kPmaData;
    std::memset(mad.bytes().data() + d + 2, 0, 190);
    if (mad.attributeId() == kAttrPortCounters) {
        mad.set8(d + 7, saturate<uint8_t>(c.linkDowned));
        mad.set16(d + 8, saturate<uint16_t>(c.rcvErrors));
        mad.set16(d + 14, saturate<uint16_t>(c.xmitDiscards));
        mad.set8(d + 16, saturate<uint8_t>(c.xmitConstraintErrors));
        mad.set8(d + 17, saturate<uint8_t>(c.rcvConstraintErrors));
        mad.set16(d + 22, saturate<uint16_t>(c.vl15Dropped));
        mad.set32(d + 24, saturate<uint32_t>(c.xmitData));
        mad.set32(d + 28, saturate<uint32_t>(c.rcvData));
        mad.set32(d + 32, saturate<uint32_t>(c.xmitPackets));
        mad.set32(d + 36, saturate<uint32_t>(c.rcvPackets));
    } else {
        mad.set64(d + 8, c.xmitData);
        mad.set64(d + 16, c.rcvData);
        mad.set64(d + 24, c.xmitPackets);
        mad.set64(d + 32, c.rcvPackets);
        mad.set64(d + 40, c.xmitPackets); // all unicast so far
        mad.set64(d + 48, c.rcvPackets);
    }
}

// A trap (IBA 14.2.5.1, 13.4.8.2): a LID-routed SubnTrap carrying a
// generic Notice of `type` (1 urgent, 2 security, ...) and trap `number`
// from `issuerLid`, with an M_Key of 0 (o14-1). The caller adds the data
// details, from byte 10 of the Notice on.
inline constexpr uint16_t kAttrNotice = 0x0002;
inline std::vector<uint8_t> trapMad(uint64_t tid, uint8_t type, uint32_t producerType,
                                    uint16_t number, uint16_t issuerLid) {
    std::vector<uint8_t> bytes(kMadSize, 0);
    Mad mad(bytes);
    mad.set8(0, 1); // base version
    mad.set8(1, kClassSmpLid);
    mad.set8(2, 1); // class version
    mad.setMethod(kTrap);
    mad.set64(8, tid);
    mad.set16(16, kAttrNotice);
    const size_t d = Mad::kSmpData;
    mad.set8(d + 0, static_cast<uint8_t>(0x80 | type)); // IsGeneric
    mad.set8(d + 1, static_cast<uint8_t>(producerType >> 16));
    mad.set16(d + 2, static_cast<uint16_t>(producerType));
    mad.set16(d + 4, number);
    mad.set16(d + 6, issuerLid);
    return bytes;
}

} // namespace pib::iba
