// SPDX-License-Identifier: GPL-2.0-or-later
#include "pib_front_end.hh"

#include "limits.hh"
#include "pib_hw.h"

namespace pib {

PibFrontEnd::PibFrontEnd(const pib_core_config &config, const Host &host, const CoreParts &core,
                         std::function<void()> requestReset)
    : host_(host), objects_(core.objects), events_(host, core.objects.mtt, core.objects.eqs),
      wqes_(host, core.objects.mtt, limits::kMaxInlineData), commands_(config, host, core),
      registers_(config, host, commands_, events_, std::move(requestReset)),
      doorbells_(config.doorbell_pages, host, core.objects, core.dataPath) {
    // The data path's completions, events and WQEs take this layout.
    core.events.use(events_);
    core.dataPath.useWqes(wqes_);
}

pib_pci_identity PibFrontEnd::pciIdentity() const {
    return pib_pci_identity{PIB_PCI_VENDOR_ID,    PIB_PCI_DEVICE_ID, PIB_PCI_SUBSYSTEM_VENDOR_ID,
                            PIB_PCI_SUBSYSTEM_ID, PIB_PCI_REVISION,  PIB_PCI_CLASS};
}

uint64_t PibFrontEnd::barSize(int bar) const {
    switch (bar) {
    case PIB_BAR_REGS:
        return PIB_REGS_SIZE;
    case PIB_BAR_DOORBELL:
        return doorbells_.size();
    default:
        return 0;
    }
}

uint64_t PibFrontEnd::barRead(int bar, uint64_t offset, unsigned size) {
    switch (bar) {
    case PIB_BAR_REGS:
        return registers_.read(offset, size);
    case PIB_BAR_DOORBELL:
        return doorbells_.read(offset, size);
    default:
        host_.guestError(err::kBarUnknown, "read from BAR%d, which the device does not decode",
                         bar);
        return 0;
    }
}

void PibFrontEnd::barWrite(int bar, uint64_t offset, uint64_t value, unsigned size) {
    switch (bar) {
    case PIB_BAR_REGS:
        registers_.write(offset, value, size);
        return;
    case PIB_BAR_DOORBELL:
        if (!fatal_)
            doorbells_.write(offset, value, size);
        return;
    default:
        host_.guestError(err::kBarUnknown, "write to BAR%d, which the device does not decode", bar);
        return;
    }
}

void PibFrontEnd::forEachEq(const std::function<void(const EqView &)> &each) const {
    objects_.eqs.forEach([&](uint32_t eqn, const EventQueue &eq) {
        each(EqView{.eqn = eqn,
                    .vector = eq.ctx.msix_vector,
                    .size = 1u << eq.ctx.log_size,
                    .producer = eq.producer,
                    .consumer = eq.consumer,
                    .async = (eq.ctx.flags & PIB_EQ_ASYNC) != 0,
                    .armed = eq.armed,
                    .overrun = eq.overrun,
                    .stopped = eq.stopped});
    });
}

bool PibFrontEnd::stopEq(uint32_t eqn, bool stop) {
    EventQueue *eq = objects_.eqs.find(eqn);
    if (eq)
        eq->stopped = stop;
    return eq != nullptr;
}

void PibFrontEnd::reset() {
    fatal_ = false;
    registers_.reset();
    commands_.reset();
}

void PibFrontEnd::setFatal() {
    fatal_ = true;
    registers_.setFatal();
}

} // namespace pib
