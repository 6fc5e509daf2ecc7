// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX SRQs (docs/mlx5.md §9): CREATE_SRQ's context checked and
// made one of the core's SRQs, the objects it holds, ARM_RQ's limit,
// QUERY_SRQ and DESTROY_SRQ. A ConnectX SRQ always has an XRC domain and
// a CQ (mlx5_ib gives a basic SRQ its own), so the core keeps it as an
// XRC SRQ: a QP's receives still complete to the QP's CQ, an XRC target's
// to the SRQ's.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "conditions.hh"
#include "host.hh"
#include "object_tables.hh"
#include "state_archive.hh"

namespace pib::mlx5 {

class SharedReceiveQueues {
  public:
    // `ends` tells the data path an SRQ is gone (XRC targets name SRQs
    // by number and hold no reference).
    SharedReceiveQueues(const Host &host, ObjectTables &objects, std::function<void(uint32_t)> ends)
        : host_(host), objects_(objects), ends_(std::move(ends)) {}

    // CREATE_SRQ: `in` is create_srq_in with its page list.
    const err::Condition *create(std::span<const uint8_t> in, uint32_t &srqn);
    const err::Condition *destroy(uint32_t srqn);
    // QUERY_SRQ: the context into query_srq_out `out`.
    // (`addresses`: the doorbell record's, the kernel's alone to see.)
    const err::Condition *query(uint32_t srqn, std::span<uint8_t> out, bool addresses) const;
    // ARM_RQ of an SRQ: the limit below which SRQ_RQ_LIMIT is raised.
    const err::Condition *arm(uint32_t srqn, uint32_t limit);

    // The SRQs in the device's state (mlx5_state_queues.cc): each as the
    // CREATE_SRQ input that makes it as it is, then its counters.
    void save(StateWriter &w) const;
    void load(StateReader &r);

  private:
    std::vector<uint8_t> createInput(const SharedReceiveQueue &srq) const;
    const err::Condition *checkContext(std::span<const uint8_t> in) const;
    const err::Condition *checkOwners(std::span<const uint8_t> in) const;
    const err::Condition *missing(const char *command, uint32_t srqn) const;

    const Host &host_;
    ObjectTables &objects_;
    std::function<void(uint32_t)> ends_;
};

} // namespace pib::mlx5
