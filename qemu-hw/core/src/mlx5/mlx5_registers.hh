// SPDX-License-Identifier: GPL-2.0-or-later
// The registers ACCESS_REG reads and writes (docs/mlx5.md §4.4): each
// has an ID, a size and what a read or write of it does. The driver's
// HOST_ENDIANNESS, the node description the SMA reports (NODE_DESC), a
// port's IBA CapabilityMask (PCAP), and the firmware's management
// registers devlink reads (MCAM, MCQS, MCQI).
#pragma once

#include <array>
#include <cstdint>
#include <span>

#include "ports.hh"
#include "state_archive.hh"

namespace pib::mlx5 {

class Registers {
  public:
    explicit Registers(Ports &ports) : ports_(ports) {}

    // The size of register `id`; 0 for one the device does not have.
    static uint32_t size(uint16_t id);
    static const char *name(uint16_t id);
    // Reads register `id` into `out` (at least size(id) bytes), after
    // writing it from `in` (as many) when `write`. `in` names the register's
    // instance (a port) for a read too. Returns why the device refuses
    // it (BAD_PARAM), or nullptr.
    const char *access(uint16_t id, bool write, std::span<const uint8_t> in,
                       std::span<uint8_t> out);
    void reset() { hostEndianness_ = {}; }
    // What the driver wrote, in the device's state (mlx5_state.cc).
    void save(StateWriter &w) const;
    void load(StateReader &r);

  private:
    const char *portCapabilities(bool write, std::span<const uint8_t> in, std::span<uint8_t> out);
    static const char *firmware(uint16_t id, std::span<const uint8_t> in, std::span<uint8_t> out);

    Ports &ports_;
    std::array<uint8_t, 16> hostEndianness_{};
};

} // namespace pib::mlx5
