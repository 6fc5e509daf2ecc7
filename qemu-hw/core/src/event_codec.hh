// SPDX-License-Identifier: GPL-2.0-or-later
// What the core's EventWriter asks of a personality: how its CQEs look,
// where its driver says how far it has read a CQ, and its event queues.
// The CQ rings themselves (producer, overrun, arming) are the core's.
#pragma once

#include <cstdint>
#include <optional>
#include <span>

#include "completion.hh"
#include "page_faults.hh"

namespace pib {

struct CompletionQueue;

class EventCodec {
  public:
    virtual ~EventCodec() = default;

    // Every CQE of `cq` is 2^logCqeBytes(cq) bytes.
    virtual unsigned logCqeBytes(const CompletionQueue &cq) const = 0;
    // The CQE saying `c`, for the ring's pass `pass` (producer count >>
    // log size), which its owner or phase bit shows.
    virtual void encodeCqe(const Completion &c, uint32_t pass, std::span<uint8_t> cqe) const = 0;
    // The byte of a CQE of `cq` that holds its owner or phase bit: the
    // device writes it last.
    virtual size_t cqeOwnerByte(const CompletionQueue &cq) const = 0;
    // The consumer count in the CQ's record at guest address `record`;
    // the device's `producer` count widens a record narrower than 32 bits.
    virtual std::optional<uint32_t> readConsumer(uint64_t record, uint32_t producer) const = 0;
    // CQ `cqn`, which reports to EQ `eqn`, was armed and has a new CQE.
    virtual void completionEvent(uint32_t eqn, uint32_t cqn) = 0;
    // An async event (PIB_ASYNC_*) about object `number`.
    virtual void asyncEvent(uint8_t event, uint32_t number) = 0;
    // A page fault (page_faults.hh), as the personality's driver takes
    // them: false when it takes none (no EQ for them), and the transfer
    // fails instead.
    virtual bool pageFault(const PageFaultReport &) { return false; }
};

} // namespace pib
