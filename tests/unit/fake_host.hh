// SPDX-License-Identifier: GPL-2.0-or-later
// A host for the core in unit tests: records what the core reports.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "pib_core.h"

struct FakeHost {
    struct Report {
        std::string what;
        std::string detail;
    };

    FakeHost();
    explicit FakeHost(const pib_core_config &config);
    ~FakeHost();
    FakeHost(const FakeHost &) = delete;
    FakeHost &operator=(const FakeHost &) = delete;

    static pib_core_config defaultConfig();

    uint32_t read32(int bar, uint64_t offset) {
        return static_cast<uint32_t>(pib_core_bar_read(core, bar, offset, 4));
    }
    void write32(int bar, uint64_t offset, uint32_t value) {
        pib_core_bar_write(core, bar, offset, value, 4);
    }
    // Number of guest errors reported with token `what` (all when empty).
    size_t guestErrors(const std::string &what = "") const;
    size_t traces(const std::string &what) const;
    void clear() { errors.clear(), traceLines.clear(); }

    pib_core *core = nullptr;
    std::vector<Report> errors;
    std::vector<Report> traceLines;
};
