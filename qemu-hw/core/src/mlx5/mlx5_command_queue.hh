// SPDX-License-Identifier: GPL-2.0-or-later
// The command queue (docs/mlx5.md §3): 32 slots of 64 bytes in one guest
// page. A doorbell hands slots to the device; for each, the queue reads
// the input from the slot and its mailbox chain, has the command
// executed, writes the output back the same way and returns the slot to
// the driver with a delivery status. Checks that fail before execution
// answer with a delivery status instead: the command did not run.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "host.hh"

namespace pib::mlx5 {

class CommandQueue {
  public:
    // Runs one command: `in` is its input, `out` its output (as long as
    // the driver's, zeroed), whose status and syndrome it sets.
    using Executor =
        std::function<void(unsigned slot, std::span<const uint8_t> in, std::span<uint8_t> out)>;
    // What one message may hold: 2048 mailboxes each way.
    static constexpr uint32_t kMaxMessageBytes = 1u << 20;

    CommandQueue(const Host &host, Executor execute) : host_(host), execute_(std::move(execute)) {}

    // The driver rang `slots` of the queue at guest address `queue`.
    // Returns the slots completed (their ownership returned).
    uint32_t ring(uint64_t queue, uint32_t slots);

  private:
    bool runSlot(unsigned slot, uint64_t layoutAddress);
    // The data areas of a mailbox chain for `bytes` bytes beyond the
    // slot's 16, checked; a delivery status when it is unusable.
    uint8_t chain(uint64_t first, uint32_t bytes, bool input, std::vector<uint64_t> *blocks);
    // Mailbox data into `bytes` (a span of uint8_t) or out of them (of
    // const uint8_t); false when a block is unreachable.
    template <class Bytes> bool copyData(std::span<const uint64_t> blocks, Bytes bytes);
    void complete(uint64_t layoutAddress, uint8_t delivery);

    const Host &host_;
    Executor execute_;
};

} // namespace pib::mlx5
