// SPDX-License-Identifier: GPL-2.0-or-later
// M_Key protection of a subnet management agent (IBA 14.2.4), shared by
// the HCA's SMA and the switch's: the check every SMP passes before the
// SMA acts on it, the lease after a violation, the PortInfo fields that
// carry it, and the Trap 256 (Bad M_Key) that tells the SM.
#pragma once

#include <cstdint>
#include <vector>

#include "mad.hh"
#include "smp.hh"

namespace pib::iba {

class MkeyProtection {
  public:
    enum class Verdict {
        kPass,        // the SMA answers
        kPassHideKey, // answers a Get, but PortInfo's M_Key reads as 0
        kViolation,   // dropped without an answer; counted; Trap 256 due
    };

    // Checks SMP `smp` at time `nowNs` (IBA 14.2.4.1-2): a port M_Key of
    // 0, or the SMP's matching it, passes; else a Get passes at protect
    // bits 0 and 1, and anything a Set or TrapRepress is a violation, as
    // is a Get at 2 and 3. Other methods (Trap, GetResp) are not checked.
    // A violation counts M_KeyViolations and starts the lease timer; a
    // valid Get, Set or TrapRepress stops it; at its end the protect bits
    // fall to 0 (IBA 14.2.4.3), which lets an SM that lost the key in.
    Verdict check(const Mad &smp, uint64_t nowNs);

    // PortInfo's M_Key fields: M_Key (0 when hidden), M_KeyLeasePeriod,
    // M_KeyProtectBits and M_KeyViolations.
    void fillPortInfo(PortInfo &info, bool hideKey) const;
    // A Set(PortInfo) takes the key, lease and protect bits; it clears
    // M_KeyViolations when its field is 0 (IBA 14.2.5.6).
    void setFromPortInfo(const PortInfo &info);
    // The port is reset: no protection.
    void clear() { *this = MkeyProtection{}; }

    // All of it, for a device's saved state; restore() refuses protect
    // bits IBA does not define.
    struct Saved {
        uint64_t key;
        uint8_t protectBits;
        uint16_t leasePeriod;
        uint64_t leaseEndsNs;
        uint16_t violations;
    };
    Saved saved() const { return {key_, protectBits_, leasePeriod_, leaseEndsNs_, violations_}; }
    bool restore(const Saved &s) {
        if (s.protectBits > 3)
            return false;
        key_ = s.key, protectBits_ = s.protectBits, leasePeriod_ = s.leasePeriod;
        leaseEndsNs_ = s.leaseEndsNs, violations_ = s.violations;
        return true;
    }

    uint64_t key() const { return key_; }
    uint8_t protectBits() const { return protectBits_; }
    uint16_t violations() const { return violations_; }
    bool leaseRunning() const { return leaseEndsNs_ != 0; }

  private:
    uint64_t key_ = 0;
    uint8_t protectBits_ = 0;
    uint16_t leasePeriod_ = 0; // seconds; 0: never expires
    uint64_t leaseEndsNs_ = 0; // 0: the lease timer is not running
    uint16_t violations_ = 0;
};

// The payload of the Trap 256 (Bad M_Key) an SMA sends the SM after a
// violation by `smp` (IBA 14.2.5.1, Notice with the data details of
// table 128): a LID-routed SubnTrap with an M_Key of 0, from `issuerLid`,
// of producer type `producerType` (1: CA, 2: switch).
std::vector<uint8_t> badMkeyTrap(const Mad &smp, uint16_t issuerLid, uint32_t producerType,
                                 uint64_t tid);

inline constexpr uint16_t kTrapBadMkey = 256;
inline constexpr uint32_t kProducerCa = 1;
inline constexpr uint32_t kProducerSwitch = 2;

} // namespace pib::iba
