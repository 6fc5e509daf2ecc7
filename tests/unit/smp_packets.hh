// SPDX-License-Identifier: GPL-2.0-or-later
// Subnet management packets as an SM sends them, for the switch's unit
// tests and fuzzers: a MAD of any class, and that MAD in a directed-route
// packet with permissive LIDs.
#pragma once

#include <cstdint>
#include <vector>

#include "mad.hh"
#include "packet.hh"

namespace pib::testing {

inline std::vector<uint8_t> smpMad(uint8_t cls, uint8_t method, uint16_t attr, uint32_t mod,
                                   uint64_t tid = 0x1234) {
    std::vector<uint8_t> m(iba::kMadSize, 0);
    iba::Mad mad(m);
    mad.set8(0, 1);
    mad.set8(1, cls);
    mad.set8(2, 1);
    mad.set8(3, method);
    mad.set64(8, tid);
    mad.set16(16, attr);
    mad.set32(20, mod);
    return m;
}

// A DR SMP's MAD as the SM's HCA sends it along `path` (initial path
// 1..n): the hop pointer already at 1, or 0 with no path at all.
inline std::vector<uint8_t> drSmpMad(uint8_t method, uint16_t attr, uint32_t mod,
                                     const std::vector<uint8_t> &path, uint64_t tid = 0x1234) {
    auto m = smpMad(iba::kClassSmpDirected, method, attr, mod, tid);
    iba::Mad mad(m);
    mad.set8(6, path.empty() ? 0 : 1);
    mad.set8(7, static_cast<uint8_t>(path.size()));
    mad.set16(32, iba::kPermissiveLid);
    mad.set16(34, iba::kPermissiveLid);
    for (size_t i = 0; i < path.size(); ++i)
        mad.set8(128 + 1 + i, path[i]);
    return m;
}

// A directed-route MAD in its packet: VL 15, permissive LIDs, QP0.
inline std::vector<uint8_t> drPacket(std::vector<uint8_t> mad) {
    iba::Packet p;
    p.lrh.vl = 15;
    p.lrh.dlid = iba::kPermissiveLid;
    p.lrh.slid = iba::kPermissiveLid;
    p.bth.opcode = iba::kUdSendOnly;
    p.deth = iba::Deth{0, 0};
    p.payload = std::move(mad);
    return iba::build(p);
}

// A UD SEND of `payload` to QP 0x99 of `dlid`, as the switch tests
// forward data: default partition, service level `sl` on lane `vl`.
inline std::vector<uint8_t> udDataPacket(uint16_t dlid, uint16_t slid, std::vector<uint8_t> payload,
                                         uint8_t sl = 0, uint8_t vl = 0) {
    iba::Packet p;
    p.bth.pkey = 0xffff;
    p.lrh.dlid = dlid;
    p.lrh.slid = slid;
    p.lrh.sl = sl;
    p.lrh.vl = vl;
    p.bth.opcode = iba::kUdSendOnly;
    p.bth.destQp = 0x99;
    p.deth = iba::Deth{0x1111, 7};
    p.payload = std::move(payload);
    return iba::build(p);
}

inline std::vector<uint8_t> drSmp(uint8_t method, uint16_t attr, uint32_t mod,
                                  const std::vector<uint8_t> &path) {
    return drPacket(drSmpMad(method, attr, mod, path));
}

} // namespace pib::testing
