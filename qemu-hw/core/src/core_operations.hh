// SPDX-License-Identifier: GPL-2.0-or-later
// Operations of the core that pib-hca's interface does not name, beside
// pib_hw.h's PIB_WR_* and PIB_WC_* and out of their ranges: a ConnectX
// NOP, which does nothing and completes in send queue order (UCX asks for
// a CQE with one). Only a front end's WQE reader makes them, never from a
// value a guest wrote in a pib-hca WQE, which the pib reader checks.
#pragma once

#include <cstdint>

namespace pib {

constexpr uint8_t kWrNop = 0xf0; // beside PIB_WR_*
constexpr uint8_t kWcNop = 0x70; // beside PIB_WC_*: a NOP's completion

} // namespace pib
