// SPDX-License-Identifier: GPL-2.0-or-later
// A work completion as the transports report it, in IBA's terms. A
// personality's codec (event_codec.hh) lays it out as its CQE: pib_cqe,
// or ConnectX's 64-byte CQE.
#pragma once

#include <cstdint>
#include <optional>

#include "pib_hw.h"

namespace pib {

struct Completion {
    uint64_t wrId = 0;               // the WQE's work request ID (a ConnectX CQE has none)
    uint32_t qpn = 0;                // the QP the WQE belongs to
    uint16_t wqeIndex = 0;           // producer count of the WQE, mod 2^16
    uint8_t opcode = 0;              // IBA's completion opcodes, as PIB_WC_* numbers them
    uint8_t status = PIB_WC_SUCCESS; // as PIB_WC_* numbers them
    uint8_t vendorErr = 0;           // 0: the codec says what the status implies
    uint32_t byteLen = 0;
    // Receives only: where the message came from and what it carried.
    uint32_t srcQp = 0;
    uint16_t slid = 0;
    uint16_t pkeyIndex = 0;
    uint16_t pkey = 0; // the packet's P_Key, as a ConnectX reports it for QP1
    uint8_t sl = 0;
    uint8_t dlidPathBits = 0;
    bool grh = false;                   // the buffer starts with the packet's GRH
    std::optional<uint32_t> immediate;  // ImmDt, as a number
    std::optional<uint32_t> invalidate; // the R_Key a SEND with Invalidate named
    std::optional<uint32_t> srqn;       // the SRQ whose WQE the receive used
};

} // namespace pib
