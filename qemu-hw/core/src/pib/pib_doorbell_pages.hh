// SPDX-License-Identifier: GPL-2.0-or-later
// BAR2: pib-hca's doorbell (UAR) pages (docs/prm.md, "BAR2 doorbell
// pages"). A doorbell names its queue and the new index in one 64-bit
// write; it is decoded and checked against the page's objects here, and
// reaches the data path as one of its typed entries.
#pragma once

#include <cstdint>

#include "data_path.hh"
#include "host.hh"
#include "object_tables.hh"

namespace pib {

class DoorbellPages {
  public:
    DoorbellPages(uint32_t pages, const Host &host, ObjectTables &objects, DataPath &dataPath)
        : pages_(pages), host_(host), objects_(objects), dataPath_(dataPath) {}

    uint64_t size() const;
    uint64_t read(uint64_t offset, unsigned size);
    void write(uint64_t offset, uint64_t value, unsigned size);

  private:
    // The doorbell at `offset` of page `page`: queue `number`, index or
    // arm `arg`.
    void ring(uint32_t page, uint32_t offset, uint32_t number, uint32_t arg);
    void ringQp(uint32_t page, uint32_t offset, uint32_t number, uint32_t arg);
    void ringSrq(uint32_t page, uint32_t number, uint32_t arg);
    void armCq(uint32_t page, uint32_t number, uint32_t arg);

    uint32_t pages_;
    const Host &host_;
    ObjectTables &objects_;
    DataPath &dataPath_;
};

} // namespace pib
