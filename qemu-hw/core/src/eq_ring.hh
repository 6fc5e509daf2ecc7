// SPDX-License-Identifier: GPL-2.0-or-later
// The state of an event queue's ring that both personalities' EQs have
// (eq_engine.hh runs it).
#pragma once

#include <cstdint>

namespace pib {

// What an EQ's ring holds, beside the personality's context.
struct EqRing {
    uint32_t producer = 0; // EQEs written since the EQ was made
    uint32_t consumer = 0; // as the driver's last doorbell wrote it
    bool armed = false;
    bool overrun = false;
    bool stopped = false; // by the host: takes no EQEs
};

} // namespace pib
