// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_init_segment.hh"

#include "mlx5_ifc.hh"
#include "version.hh"

namespace pib::mlx5 {

namespace {

// The firmware revision the driver prints and ibstat shows: the core's.
constexpr uint32_t kFwMajor = kFirmwareMajor, kFwMinor = kFirmwareMinor,
                   kFwSubminor = kFirmwarePatch;
// The health syndrome a fatal device reports, with reset requested.
constexpr uint32_t kFatalSyndrome = 0x1;
constexpr uint32_t kResetRequested = 0x80;

} // namespace

uint32_t InitSegment::readDword(uint32_t offset) {
    switch (offset) {
    case iseg::kFwRev:
        return kFwMinor << 16 | kFwMajor;
    case iseg::kCmdifRevFwSub:
        return uint32_t{iseg::kCmdifRevision} << 16 | kFwSubminor;
    case iseg::kCmdqAddrHigh:
        return cmdqHigh_;
    case iseg::kCmdqAddrLowSize:
        return static_cast<uint32_t>(cmdqAddress_ & 0xfffff000u) |
               nicInterface_ << iseg::kNicInterfaceShift | cmdq::kLogSize << 4 | cmdq::kLogStride;
    case iseg::kHealthFwVer:
        return kFwMajor << 24 | kFwMinor << 16 | kFwSubminor;
    case iseg::kHealthRfrSeverity:
        return fatal_ ? kResetRequested << 24 : 0;
    case iseg::kHealthSynd & ~3u: // irisc_index, synd, ext_synd
        return fatal_ ? kFatalSyndrome << 16 : 0;
    case iseg::kInternalTimerHigh:
        return static_cast<uint32_t>(host_.clockNs() >> 32);
    case iseg::kInternalTimerLow:
        return static_cast<uint32_t>(host_.clockNs());
    case iseg::kHealthCounter:
        // Firmware that runs counts; the driver's poll sees it move.
        return fatal_ ? healthCounter_ : ++healthCounter_;
    default:
        // initializing (ready at once), the timeouts (0: the driver's
        // own), and the rest of the health buffer read 0.
        return 0;
    }
}

uint32_t InitSegment::writeDword(uint32_t offset, uint32_t value) {
    switch (offset) {
    case iseg::kCmdqAddrHigh:
        cmdqHigh_ = value;
        return 0;
    case iseg::kCmdqAddrLowSize:
        // The low half latches the address the high half began.
        cmdqAddress_ = uint64_t{cmdqHigh_} << 32 | (value & 0xfffff000u);
        nicInterface_ = value >> iseg::kNicInterfaceShift & iseg::kNicInterfaceMask;
        return 0;
    case iseg::kCmdDoorbell:
        return value;
    default:
        host_.guestError(err::kMlx5IsegReadOnly,
                         "write of 0x%08x to initialization segment offset 0x%x", value, offset);
        return 0;
    }
}

void InitSegment::reset() {
    cmdqHigh_ = 0;
    cmdqAddress_ = 0;
    nicInterface_ = 0;
    fatal_ = false;
}

} // namespace pib::mlx5
