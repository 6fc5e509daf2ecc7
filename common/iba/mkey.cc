// SPDX-License-Identifier: GPL-2.0-or-later
#include "mkey.hh"

#include <algorithm>

namespace pib::iba {

namespace {

constexpr uint64_t kNsPerSecond = 1'000'000'000;
constexpr size_t kSmpMkey = 24; // the M_Key in an SMP's header (IBA 14.2.1.1)
constexpr uint8_t kNoticeTypeSecurity = 2;
constexpr unsigned kMaxNoticePath = 30; // return path bytes a notice holds

} // namespace

MkeyProtection::Verdict MkeyProtection::check(const Mad &smp, uint64_t nowNs) {
    if (leaseEndsNs_ && nowNs >= leaseEndsNs_) {
        leaseEndsNs_ = 0;
        protectBits_ = 0; // the key stays; the protection goes
    }
    const uint8_t method = smp.method();
    const bool checked = method == kGet || method == kSet || method == kTrapRepress;
    if (!checked)
        return Verdict::kPass;
    const bool valid = key_ == 0 || smp.get64(kSmpMkey) == key_;
    if (valid) {
        leaseEndsNs_ = 0;
        return Verdict::kPass;
    }
    if (method == kGet && protectBits_ < 2)
        return protectBits_ == 1 ? Verdict::kPassHideKey : Verdict::kPass;
    if (violations_ != 0xffff)
        ++violations_;
    if (!leaseEndsNs_ && leasePeriod_)
        leaseEndsNs_ = std::max<uint64_t>(1, nowNs + uint64_t{leasePeriod_} * kNsPerSecond);
    return Verdict::kViolation;
}

void MkeyProtection::fillPortInfo(PortInfo &info, bool hideKey) const {
    info.mkey = hideKey ? 0 : key_;
    info.mkeyLeasePeriod = leasePeriod_;
    info.mkeyProtectBits = protectBits_;
    info.mkeyViolations = violations_;
}

void MkeyProtection::setFromPortInfo(const PortInfo &info) {
    key_ = info.mkey;
    leasePeriod_ = info.mkeyLeasePeriod;
    protectBits_ = info.mkeyProtectBits;
    if (info.mkeyViolations == 0)
        violations_ = 0;
}

std::vector<uint8_t> badMkeyTrap(const Mad &smp, uint16_t issuerLid, uint32_t producerType,
                                 uint64_t tid) {
    std::vector<uint8_t> bytes =
        trapMad(tid, kNoticeTypeSecurity, producerType, kTrapBadMkey, issuerLid);
    Mad mad(bytes);
    const size_t d = Mad::kSmpData;
    // Data details: who was asked, what, by which key and by what route.
    mad.set16(d + 12, issuerLid); // LIDADDR
    const bool directed = smp.mgmtClass() == kClassSmpDirected;
    if (directed)
        mad.set16(d + 14, smp.drSlid());
    mad.set8(d + 16, smp.method());
    mad.set16(d + 18, smp.attributeId());
    mad.set32(d + 20, smp.attributeModifier());
    mad.set64(d + 24, smp.get64(kSmpMkey));
    if (directed) {
        const unsigned hops = std::min<unsigned>(smp.hopCount(), 63);
        const unsigned kept = std::min(hops, kMaxNoticePath);
        mad.set8(d + 33, static_cast<uint8_t>(0x80 | (hops > kMaxNoticePath ? 0x40 : 0) | kept));
        for (unsigned i = 0; i < kept; ++i)
            mad.set8(d + 34 + i, smp.returnPath(i));
    }
    return bytes;
}

} // namespace pib::iba
