// SPDX-License-Identifier: GPL-2.0-or-later
// A personality: the part of the device its driver talks to. It decodes
// the BARs (registers, commands, doorbells) and turns what the driver
// asks for into the shared core's objects and work; transports, ports,
// memory protection and the fabric are the core's, whichever front end
// drives them (docs/architecture.md).
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>

#include "injection.hh"
#include "pib_core.h"
#include "state_archive.hh"

namespace pib {

// An event queue as the host's tools show it and stop it (`inspect`,
// `inject stop eq N`), whichever personality's it is.
struct EqView {
    uint32_t eqn = 0;
    uint32_t vector = 0;   // the MSI-X vector it signals
    uint32_t size = 0;     // EQEs in its ring
    uint32_t producer = 0; // EQEs written since it was made
    uint32_t consumer = 0; // EQEs consumed, as the driver's doorbell says
    bool async = false;    // it takes events besides completions
    bool armed = false;
    bool overrun = false;
    bool stopped = false; // by the host: it takes no EQEs (they overrun)
};

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
    // Whether the driver brought the function up (INIT_HCA) and has not
    // taken it down since.
    virtual bool initialized() const = 0;
    // The function's EQs, lowest number first.
    virtual void forEachEq(const std::function<void(const EqView &)> &each) const = 0;
    std::optional<EqView> findEq(uint32_t eqn) const {
        std::optional<EqView> found;
        forEachEq([&](const EqView &eq) {
            if (eq.eqn == eqn)
                found = eq;
        });
        return found;
    }
    // The host stops EQ `eqn` (its events are lost, as if it were full)
    // or lets it take EQEs again; false when there is no such EQ.
    virtual bool stopEq(uint32_t eqn, bool stop) = 0;
    // The doorbell pages (UARs) the driver holds.
    virtual size_t doorbellPages() const = 0;
    // What `inject command OPCODE STATUS` names on this personality: its
    // commands and its command statuses.
    virtual CommandWords commandWords() const = 0;
    // What the personality holds that a saved state cannot carry, or
    // nullptr (the device refuses to save then).
    virtual const char *unsaved() const { return nullptr; }

    // Power-on state: registers as after reset, no command in progress.
    virtual void reset() = 0;
    // The core had an internal error: say so the way this personality's
    // driver looks for it, and take no more work until reset().
    virtual void setFatal() = 0;
    // The device's saved state (docs/migration.md). The device section
    // holds one flag of the function's: pib-hca's INIT_HCA (a ConnectX
    // keeps its function's state with its commands, and writes false).
    virtual void saveFunction(StateWriter &w) const = 0;
    virtual void loadFunction(StateReader &r) = 0;
    // Then come the objects the personality's commands made, which the
    // core's tables hold, and then the personality's registers. Loading
    // makes each object again by the command that made it, so that it
    // passes that command's checks.
    virtual void saveObjects(StateWriter &w) const = 0;
    virtual void loadObjects(StateReader &r) = 0;
    virtual void save(StateWriter &w) const = 0;
    virtual void load(StateReader &r) = 0;
};

} // namespace pib
