// SPDX-License-Identifier: GPL-2.0-or-later
#include "invariant.hh"

#include <string>

namespace pib {

void invariantBroken(const char *condition, const char *file, int line) {
    throw InvariantBroken(std::string("invariant broken at ") + file + ":" + std::to_string(line) +
                          ": " + condition);
}

} // namespace pib
