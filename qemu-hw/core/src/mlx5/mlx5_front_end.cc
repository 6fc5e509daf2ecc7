// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_front_end.hh"

#include <bit>

#include "mlx5_ifc.hh"
#include "pib_hw.h"

namespace pib::mlx5 {

Mlx5FrontEnd::Mlx5FrontEnd(const pib_core_config &config, const Host &host, CoreParts core)
    : host_(host), bar0Size_(std::bit_ceil(uint64_t{Uars::kFirstUar + config.doorbell_pages} *
                                           Uars::kPageBytes)),
      iseg_(host), uars_(config.doorbell_pages), eqs_(host, uars_, config.msix_vectors),
      cqs_(host, core.objects, uars_, eqs_, core.events),
      qps_(host, core.objects, core.ports, core.dataPath, uars_),
      commands_(config, host, uars_, eqs_, cqs_, qps_, core),
      queue_(host, [this](unsigned slot, std::span<const uint8_t> in, std::span<uint8_t> out) {
          commands_.execute(slot, in, out);
      }) {
    core.events.use(cqs_); // the data path's completions take this layout
    // NodeInfo names the node as a ConnectX-5's SMA does (ibv_devinfo's
    // vendor_id, ibnetdiscover's devid).
    core.ports.identity = {identity::kOui, identity::kConnectX5, 0};
}

// A ConnectX-5 (mlx5_core's table binds it), an InfiniBand controller; the
// subsystem says whose board it is: pib-hca's (docs/mlx5.md §1).
pib_pci_identity Mlx5FrontEnd::pciIdentity() const {
    return pib_pci_identity{identity::kPciVendorId,
                            identity::kConnectX5,
                            PIB_PCI_SUBSYSTEM_VENDOR_ID,
                            PIB_PCI_SUBSYSTEM_ID,
                            0,
                            PIB_PCI_CLASS};
}

// BAR0 only: the MSI-X table is the host's (PIB_BAR_MSIX).
uint64_t Mlx5FrontEnd::barSize(int bar) const {
    return bar == PIB_BAR_REGS ? bar0Size_ : 0;
}

uint64_t Mlx5FrontEnd::barRead(int bar, uint64_t offset, unsigned size) {
    if (bar != PIB_BAR_REGS || offset > bar0Size_ - size) {
        host_.guestError(err::kBarUnknown,
                         "read of BAR%d offset 0x%llx, which the device does "
                         "not decode",
                         bar, static_cast<unsigned long long>(offset));
        return 0;
    }
    if (offset < Uars::kFirstUar * Uars::kPageBytes)
        return readInitSegment(offset, size);
    const uint64_t page = offset / Uars::kPageBytes;
    // UAR pages hold doorbells, which are written only.
    host_.guestError(uars_.given(page) ? err::kMlx5UarBadDoorbell : err::kMlx5UarUnallocated,
                     "read of UAR page %llu", static_cast<unsigned long long>(page));
    return 0;
}

void Mlx5FrontEnd::barWrite(int bar, uint64_t offset, uint64_t value, unsigned size) {
    if (bar != PIB_BAR_REGS || offset > bar0Size_ - size) {
        host_.guestError(err::kBarUnknown,
                         "write to BAR%d offset 0x%llx, which the device does "
                         "not decode",
                         bar, static_cast<unsigned long long>(offset));
        return;
    }
    if (offset < Uars::kFirstUar * Uars::kPageBytes) {
        writeInitSegment(offset, value, size);
        return;
    }
    const auto page = static_cast<uint32_t>(offset / Uars::kPageBytes);
    if (!uars_.given(page)) {
        host_.guestError(err::kMlx5UarUnallocated, "write to UAR page %u", page);
        return;
    }
    writeUar(page, static_cast<uint32_t>(offset % Uars::kPageBytes), value, size);
}

// A doorbell in UAR page `index` (docs/mlx5.md §6).
void Mlx5FrontEnd::writeUar(uint32_t index, uint32_t offset, uint64_t value, unsigned size) {
    if (offset == CompletionQueues::kDoorbellArm && size == 8) {
        cqs_.armDoorbell(index, value);
        return;
    }
    if (offset == QueuePairs::kDoorbellLessSend && size == 8) {
        qps_.doorbellLessSend(index, value);
        return;
    }
    if (offset >= QueuePairs::kFirstBlueFlame && size == 8) {
        qps_.blueFlame(index, offset, value);
        return;
    }
    const bool eq = offset == EventQueues::kDoorbellArm || offset == EventQueues::kDoorbellNoArm;
    if (!eq || size != 4) {
        host_.guestError(err::kMlx5UarBadDoorbell, "UAR %u: write of %u bytes at 0x%x", index, size,
                         offset);
        return;
    }
    // The driver stores the doorbell's value big-endian.
    eqs_.doorbell(index, __builtin_bswap32(static_cast<uint32_t>(value)),
                  offset == EventQueues::kDoorbellArm);
}

// The segment's fields are big-endian: the driver reads them with
// ioread32be and the health buffer's bytes one at a time. A read of any
// width returns the bytes at its offset, as memory would.
uint64_t Mlx5FrontEnd::readInitSegment(uint64_t offset, unsigned size) {
    if (offset + size > iseg::kSize) {
        host_.guestError(err::kMlx5IsegBadAccess,
                         "read of %u bytes at 0x%llx, beyond the "
                         "initialization segment",
                         size, static_cast<unsigned long long>(offset));
        return 0;
    }
    // Each dword the access touches is read once: reading the health
    // counter moves it.
    uint64_t value = 0;
    uint32_t dword = 0;
    for (unsigned i = 0; i < size; ++i) {
        const uint64_t at = offset + i;
        if (i == 0 || at % 4 == 0)
            dword = iseg_.readDword(static_cast<uint32_t>(at & ~uint64_t{3}));
        const uint8_t byte = static_cast<uint8_t>(dword >> (8 * (3 - at % 4)));
        value |= uint64_t{byte} << (8 * i);
    }
    return value;
}

void Mlx5FrontEnd::writeInitSegment(uint64_t offset, uint64_t value, unsigned size) {
    if (size != 4 || offset % 4 || offset + size > iseg::kSize) {
        host_.guestError(err::kMlx5IsegBadAccess, "write of %u bytes at 0x%llx", size,
                         static_cast<unsigned long long>(offset));
        return;
    }
    // The bytes as the driver stored them, a big-endian dword.
    const uint32_t dword = __builtin_bswap32(static_cast<uint32_t>(value));
    if (const uint32_t slots = iseg_.writeDword(static_cast<uint32_t>(offset), dword))
        ringCommands(slots);
}

void Mlx5FrontEnd::ringCommands(uint32_t slots) {
    if (!iseg_.commandQueue()) {
        host_.guestError(err::kMlx5CmdqNoQueue, "doorbell 0x%08x before cmdq_addr was written",
                         slots);
        return;
    }
    // Completion events go to an EQ that took them before this doorbell:
    // the command creating the command EQ is still polled (docs/mlx5.md §7).
    const bool events = eqs_.takes(event::kCommand);
    const uint32_t done = queue_.ring(iseg_.commandQueue(), slots);
    if (!events || !done)
        return;
    EventQueues::Data data{};
    writeBe32(data.data(), done); // data.cmd.vector
    eqs_.post(event::kCommand, 0, data, done);
}

void Mlx5FrontEnd::reset() {
    iseg_.reset();
    commands_.reset();
    vsc_.reset();
}

void Mlx5FrontEnd::setFatal() {
    iseg_.setFatal();
    commands_.setFatal();
}

} // namespace pib::mlx5
