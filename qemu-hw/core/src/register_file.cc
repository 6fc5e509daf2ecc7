// SPDX-License-Identifier: GPL-2.0-or-later
#include "register_file.hh"

#include <cinttypes>

#include "pib_hw.h"
#include "version.hh"

namespace pib {

RegisterFile::RegisterFile(const pib_core_config &config, const Host &host,
                           std::function<void()> requestReset)
    : config_(config), host_(host), requestReset_(std::move(requestReset)) {}

void RegisterFile::reset() {
    scratch_ = 0;
}

bool RegisterFile::validAccess(const char *dir, uint64_t offset, unsigned size) const {
    if (offset >= PIB_REGS_SIZE || size > PIB_REGS_SIZE - offset) {
        host_.guestError("regs-out-of-range", "%s of %u bytes at 0x%" PRIx64 " beyond BAR0", dir,
                         size, offset);
        return false;
    }
    if (size != 4) {
        host_.guestError("regs-bad-size", "%s of %u bytes at 0x%" PRIx64 " (registers are 32-bit)",
                         dir, size, offset);
        return false;
    }
    if (offset % 4 != 0) {
        host_.guestError("regs-unaligned", "%s at unaligned offset 0x%" PRIx64, dir, offset);
        return false;
    }
    return true;
}

uint64_t RegisterFile::read(uint64_t offset, unsigned size) {
    if (!validAccess("read", offset, size))
        return 0;
    switch (offset) {
    case PIB_REG_ID:
        return PIB_ID_MAGIC;
    case PIB_REG_IF_VERSION:
        return PIB_IF_VERSION_CURRENT;
    case PIB_REG_FW_VERSION:
        return PIB_FW_VERSION(kFirmwareMajor, kFirmwareMinor, kFirmwarePatch);
    case PIB_REG_RESET:
        return 0;
    case PIB_REG_STATUS:
        return PIB_STATUS_READY;
    case PIB_REG_SCRATCH:
        return scratch_;
    case PIB_REG_NODE_GUID_LO:
        return static_cast<uint32_t>(config_.node_guid);
    case PIB_REG_NODE_GUID_HI:
        return static_cast<uint32_t>(config_.node_guid >> 32);
    case PIB_REG_NUM_DOORBELL_PAGES:
        return config_.doorbell_pages;
    case PIB_REG_NUM_MSIX_VECTORS:
        return config_.msix_vectors;
    case PIB_REG_NUM_PORTS:
        return config_.num_ports;
    default:
        host_.guestError("regs-bad-offset", "read of undefined register 0x%" PRIx64, offset);
        return 0;
    }
}

void RegisterFile::write(uint64_t offset, uint64_t value, unsigned size) {
    if (!validAccess("write", offset, size))
        return;
    const auto value32 = static_cast<uint32_t>(value);
    switch (offset) {
    case PIB_REG_RESET:
        if (value32 != PIB_RESET_MAGIC) {
            host_.guestError(
                "regs-bad-reset",
                "reset register written with 0x%08" PRIx32 " instead of the reset magic", value32);
            return;
        }
        requestReset_();
        return;
    case PIB_REG_SCRATCH:
        scratch_ = value32;
        return;
    case PIB_REG_ID:
    case PIB_REG_IF_VERSION:
    case PIB_REG_FW_VERSION:
    case PIB_REG_STATUS:
    case PIB_REG_NODE_GUID_LO:
    case PIB_REG_NODE_GUID_HI:
    case PIB_REG_NUM_DOORBELL_PAGES:
    case PIB_REG_NUM_MSIX_VECTORS:
    case PIB_REG_NUM_PORTS:
        host_.guestError("regs-read-only",
                         "write of 0x%08" PRIx32 " to read-only register 0x%" PRIx64, value32,
                         offset);
        return;
    default:
        host_.guestError("regs-bad-offset",
                         "write of 0x%08" PRIx32 " to undefined register 0x%" PRIx64, value32,
                         offset);
        return;
    }
}

} // namespace pib
