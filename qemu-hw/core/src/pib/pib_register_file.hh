// SPDX-License-Identifier: GPL-2.0-or-later
// BAR0: the control registers (docs/prm.md, "BAR0 registers").
#pragma once

#include <cstdint>
#include <functional>

#include "host.hh"
#include "pib_commands.hh"
#include "pib_core.h"
#include "pib_event_queues.hh"
#include "state_archive.hh"

namespace pib {

class RegisterFile {
  public:
    // `requestReset` is called when the guest writes the reset register.
    RegisterFile(const pib_core_config &config, const Host &host, CommandProcessor &commands,
                 PibEventQueues &events, std::function<void()> requestReset);

    uint64_t read(uint64_t offset, unsigned size);
    void write(uint64_t offset, uint64_t value, unsigned size);
    void reset();
    // The command registers, in the device's saved state.
    void save(StateWriter &w) const;
    void load(StateReader &r);
    // After an internal error STATUS reads FATAL, not READY; commands
    // complete with BAD_STATE and EQ doorbells are ignored until reset().
    void setFatal() { fatal_ = true; }

  private:
    // Checks width and alignment; reports and returns false on a bad access.
    bool validAccess(const char *dir, uint64_t offset, unsigned size) const;
    bool readCommandRegister(uint64_t offset, uint32_t *value) const;
    bool writeCommandRegister(uint64_t offset, uint32_t value);
    bool writeEqDoorbell(uint64_t offset, uint32_t value);
    void runCommand(uint32_t ctrl);
    // The command registers take a command's outcome.
    void finish(const CommandOutcome &outcome) {
        cmdStatus_ = outcome.status;
        cmdResult_ = outcome.result;
        cmdSyndrome_ = outcome.syndrome;
    }

    const pib_core_config &config_;
    const Host &host_;
    CommandProcessor &commands_;
    PibEventQueues &events_;
    std::function<void()> requestReset_;
    uint32_t scratch_ = 0;
    bool fatal_ = false;
    // The command interface (docs/prm.md §4).
    uint64_t cmdIn_ = 0;
    uint64_t cmdOut_ = 0;
    uint32_t cmdModifier_ = 0;
    uint32_t cmdToken_ = 0;
    uint32_t cmdCtrl_ = 0;
    uint32_t cmdStatus_ = 0;
    uint32_t cmdSyndrome_ = 0;
    uint64_t cmdResult_ = 0;
};

} // namespace pib
