// SPDX-License-Identifier: GPL-2.0-or-later
// BAR2: the doorbell (UAR) pages (docs/prm.md, "BAR2 doorbell pages").
#pragma once

#include <cstdint>

#include "firmware.hh"
#include "host.hh"

namespace pib {

class DoorbellPages {
  public:
    DoorbellPages(uint32_t pages, const Host &host, Firmware &firmware)
        : pages_(pages), host_(host), firmware_(firmware) {}

    uint64_t size() const;
    uint64_t read(uint64_t offset, unsigned size);
    void write(uint64_t offset, uint64_t value, unsigned size);

  private:
    uint32_t pages_;
    const Host &host_;
    Firmware &firmware_;
};

} // namespace pib
