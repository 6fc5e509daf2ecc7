// SPDX-License-Identifier: GPL-2.0-or-later
// The firmware version the device reports (PIB_REG_FW_VERSION).
#pragma once

namespace pib {

inline constexpr unsigned kFirmwareMajor = 0;
inline constexpr unsigned kFirmwareMinor = 1;
inline constexpr unsigned kFirmwarePatch = 0;

} // namespace pib
