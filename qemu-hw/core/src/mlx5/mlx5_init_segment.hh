// SPDX-License-Identifier: GPL-2.0-or-later
// The initialization segment at the start of BAR0 (docs/mlx5.md §2): the
// firmware and command-interface revisions, where the command queue is,
// its doorbell, and the health buffer and counter the driver polls.
#pragma once

#include <cstdint>

#include "host.hh"
#include "state_archive.hh"

namespace pib::mlx5 {

class InitSegment {
  public:
    explicit InitSegment(const Host &host) : host_(host) {}

    // The field at `offset` (4-aligned, < iseg::kSize) as the driver reads
    // it: a big-endian dword.
    uint32_t readDword(uint32_t offset);
    // A dword the driver writes. Returns the slots it rang when it is the
    // command doorbell, else 0.
    uint32_t writeDword(uint32_t offset, uint32_t value);
    void reset();
    // The health buffer says so (a syndrome with reset requested), and
    // the health counter stops: the driver's poll finds the device dead.
    void setFatal() { fatal_ = true; }

    // The command queue's address and the health counter, in the
    // device's state (mlx5_state.cc).
    void save(StateWriter &w) const;
    void load(StateReader &r);
    // The command queue's guest address (0 until the driver writes it).
    uint64_t commandQueue() const { return cmdqAddress_; }

  private:
    const Host &host_;
    uint32_t cmdqHigh_ = 0;
    uint64_t cmdqAddress_ = 0;
    uint32_t nicInterface_ = 0;
    uint32_t healthCounter_ = 0;
    bool fatal_ = false;
};

} // namespace pib::mlx5
