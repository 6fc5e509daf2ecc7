// SPDX-License-Identifier: GPL-2.0-or-later
// Validation of a device instance's static configuration.
#pragma once

#include "pib_core.h"

namespace pib {

// Returns nullptr when `config` is usable, else why it is not.
const char *configError(const pib_core_config &config);

} // namespace pib
