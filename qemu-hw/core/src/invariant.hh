// SPDX-License-Identifier: GPL-2.0-or-later
// Checked invariants of the core: conditions that no guest or peer input
// can make false, only a bug in the core. A broken one throws
// InvariantBroken, which every entry point of the C interface turns into
// the device's FATAL state (core_api.cc, docs/prm.md "Fatal errors"), as
// hardware whose firmware hit an assertion would stop: a bug is reported
// and contained instead of corrupting QEMU's memory.
#pragma once

#include <stdexcept>

namespace pib {

class InvariantBroken : public std::logic_error {
  public:
    using std::logic_error::logic_error;
};

// Throws InvariantBroken naming the condition and where it was checked.
[[noreturn]] void invariantBroken(const char *condition, const char *file, int line);

} // namespace pib

#define PIB_INVARIANT(condition)                                                                   \
    ((condition) ? static_cast<void>(0) : ::pib::invariantBroken(#condition, __FILE__, __LINE__))
