// SPDX-License-Identifier: GPL-2.0-or-later
// A personality: the part of the device its driver talks to. It decodes
// the BARs (registers, commands, doorbells) and turns what the driver
// asks for into the shared core's objects and work; transports, ports,
// memory protection and the fabric are the core's, whichever front end
// drives them (docs/architecture.md).
#pragma once

#include <cstdint>

#include "pib_core.h"
#include "state_archive.hh"

namespace pib {

class FrontEnd {
  public:
    virtual ~FrontEnd() = default;

    // What the function says it is in PCI configuration space.
    virtual pib_pci_identity pciIdentity() const = 0;
    // The size of BAR `bar` (0: the personality does not have it).
    virtual uint64_t barSize(int bar) const = 0;
    // An access of 1, 2, 4 or 8 bytes (the device checked the width).
    virtual uint64_t barRead(int bar, uint64_t offset, unsigned size) = 0;
    virtual void barWrite(int bar, uint64_t offset, uint64_t value, unsigned size) = 0;
    // A vendor-specific capability in configuration space (a ConnectX's
    // VSC gateway): its size, 0 for none; dword accesses at offsets from
    // its start, past its header.
    virtual uint32_t vendorCapabilitySize() const { return 0; }
    virtual uint32_t vendorCapabilityRead(uint32_t) { return 0; }
    virtual void vendorCapabilityWrite(uint32_t, uint32_t) {}
    // Power-on state: registers as after reset, no command in progress.
    virtual void reset() = 0;
    // The core had an internal error: say so the way this personality's
    // driver looks for it, and take no more work until reset().
    virtual void setFatal() = 0;
    // The device's saved state (docs/migration.md): the objects the
    // personality's commands made, which the core's tables hold, and then
    // the personality's registers. Loading makes each object again by the
    // command that made it, so that it passes that command's checks.
    virtual void saveObjects(StateWriter &w) const = 0;
    virtual void loadObjects(StateReader &r) = 0;
    virtual void save(StateWriter &w) const = 0;
    virtual void load(StateReader &r) = 0;
};

} // namespace pib
