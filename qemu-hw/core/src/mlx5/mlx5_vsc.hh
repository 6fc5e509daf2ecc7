// SPDX-License-Identifier: GPL-2.0-or-later
// A ConnectX's vendor-specific PCI capability (docs/mlx5.md §2.1): the
// gateway through which a driver reaches the device's internal address
// spaces from configuration space, behind a semaphore. mlx5_core looks
// for it at probe (and warns without it); it uses it only to dump the
// crspace after a fatal error and to lock a firmware reset, neither of
// which this device offers: it has the semaphore and the counter, and
// every address space it is asked for is one it does not have.
#pragma once

#include <cstdint>

#include "state_archive.hh"

namespace pib::mlx5 {

class VendorCapability {
  public:
    // Bytes of configuration space it takes, its header included.
    static constexpr uint32_t kSize = 0x18;
    // Dword registers, by offset from the capability's start.
    static constexpr uint32_t kCtrl = 0x4, kCounter = 0x8, kSemaphore = 0xc, kAddress = 0x10,
                              kData = 0x14;

    uint32_t read(uint32_t offset);
    void write(uint32_t offset, uint32_t value);
    void reset() { *this = VendorCapability{}; }
    void save(StateWriter &w) const;
    void load(StateReader &r);

  private:
    uint32_t ctrl_ = 0;
    uint32_t counter_ = 0;
    uint32_t owner_ = 0; // the semaphore: 0 free, else who took it
    uint32_t address_ = 0;
};

} // namespace pib::mlx5
