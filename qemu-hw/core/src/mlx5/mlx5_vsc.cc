// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_vsc.hh"

namespace pib::mlx5 {

namespace {

// CTRL: the space the driver selects (bits 15:0), and the status (31:29):
// nonzero when the device has that space. It has none.
constexpr uint32_t kSpaceMask = 0xffff;
// ADDRESS: an operation on the selected space, started by a write: a
// read with the flag (bit 31) clear, a write with it set; the device
// flips the flag when it is done, and sets the syndrome (bit 30) when it
// failed.
constexpr uint32_t kFlag = 1u << 31;
constexpr uint32_t kVscSyndrome = 1u << 30;
constexpr uint32_t kAddressMask = (1u << 30) - 1;

} // namespace

uint32_t VendorCapability::read(uint32_t offset) {
    switch (offset) {
    case kCtrl:
        return ctrl_ & kSpaceMask; // status 0: no such space
    case kCounter:
        // A unique value for each read (never 0: writing 0 frees the
        // semaphore), which the driver writes to the semaphore to take it.
        if (++counter_ == 0)
            ++counter_;
        return counter_;
    case kSemaphore:
        return owner_;
    case kAddress:
        return address_;
    default: // the data of an operation, which no space gives
        return 0;
    }
}

void VendorCapability::write(uint32_t offset, uint32_t value) {
    switch (offset) {
    case kCtrl:
        ctrl_ = value & kSpaceMask;
        break;
    case kSemaphore:
        // Taken only when free; 0 frees it.
        if (value == 0 || owner_ == 0)
            owner_ = value;
        break;
    case kAddress:
        // Any operation ends at once, failed: the space is not there.
        address_ = (value & kAddressMask) | (~value & kFlag) | kVscSyndrome;
        break;
    default: // the counter is read-only; data goes nowhere
        break;
    }
}

} // namespace pib::mlx5
