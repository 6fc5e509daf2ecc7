// SPDX-License-Identifier: GPL-2.0-or-later
// Operations and QP types of the core that pib-hca's interface does not
// name, beside pib_hw.h's PIB_WR_*, PIB_WC_* and PIB_QPT_* and out of their
// ranges: a ConnectX NOP, which does nothing and completes in send queue
// order (UCX asks for a CQE with one), a ConnectX DMA copy (its MMO
// opcode: the device copies between two local buffers, docs/mlx5.md
// §10.2), and the two ends of ConnectX's
// Dynamically Connected transport (docs/mlx5.md §15). Only a front end
// makes them, never from a value a guest wrote in a pib-hca WQE or
// context, which pib-hca's commands and reader check.
#pragma once

#include <cstdint>

namespace pib {

constexpr uint8_t kWrNop = 0xf0; // beside PIB_WR_*
constexpr uint8_t kWcNop = 0x70; // beside PIB_WC_*: a NOP's completion
// A copy from its first data segment's buffer into its second's, both
// local keys of the QP's PD, of one length.
constexpr uint8_t kWrDmaCopy = 0xf1;
constexpr uint8_t kWcDmaCopy = 0x71;

// Beside PIB_QPT_*: a DC initiator sends to any DCT its WQEs name, one
// at a time, with RC's reliability; a DC target takes requests from any
// DCI that knows its key, each through a connection of its own
// (dc_targets.hh), into its SRQ.
constexpr uint8_t kQptDci = 0x10;
constexpr uint8_t kQptDct = 0x11;

// Beside PIB_ASYNC_*: a DCT armed for it (ConnectX's
// ARM_DCT_FOR_KEY_VIOLATION) took a request with another access key.
// Only the ConnectX personality has DCTs, and its events.
constexpr uint8_t kAsyncDctKeyViolation = 0x30;

} // namespace pib
