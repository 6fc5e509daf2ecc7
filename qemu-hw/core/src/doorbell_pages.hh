// SPDX-License-Identifier: GPL-2.0-or-later
// BAR2: the doorbell (UAR) pages (docs/prm.md, "BAR2 doorbell pages").
#pragma once

#include <cstdint>

#include "data_path.hh"
#include "host.hh"

namespace pib {

class DoorbellPages {
  public:
    DoorbellPages(uint32_t pages, const Host &host, DataPath &dataPath)
        : pages_(pages), host_(host), dataPath_(dataPath) {}

    uint64_t size() const;
    uint64_t read(uint64_t offset, unsigned size);
    void write(uint64_t offset, uint64_t value, unsigned size);

  private:
    uint32_t pages_;
    const Host &host_;
    DataPath &dataPath_;
};

} // namespace pib
