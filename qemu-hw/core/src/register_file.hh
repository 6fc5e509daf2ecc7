// SPDX-License-Identifier: GPL-2.0-or-later
// BAR0: the control registers (docs/prm.md, "BAR0 registers").
#pragma once

#include <cstdint>
#include <functional>

#include "host.hh"
#include "pib_core.h"

namespace pib {

class RegisterFile {
  public:
    // `requestReset` is called when the guest writes the reset register.
    RegisterFile(const pib_core_config &config, const Host &host,
                 std::function<void()> requestReset);

    uint64_t read(uint64_t offset, unsigned size);
    void write(uint64_t offset, uint64_t value, unsigned size);
    void reset();

  private:
    // Checks width and alignment; reports and returns false on a bad access.
    bool validAccess(const char *dir, uint64_t offset, unsigned size) const;

    const pib_core_config &config_;
    const Host &host_;
    std::function<void()> requestReset_;
    uint32_t scratch_ = 0;
};

} // namespace pib
