// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX event queues (docs/mlx5.md §7): rings of 64-byte EQEs in
// the pages CREATE_EQ lists, each with the event types it takes, the
// MSI-X vector it signals and the UAR page of its doorbell. An EQE's
// owner bit flips on every pass of the ring, which is how the driver
// tells new entries from old; a doorbell moves the consumer counter and
// may arm the EQ, and an armed EQ signals its vector once for the next
// EQE (or at once, for EQEs already waiting).
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "eq_engine.hh"
#include "front_end.hh"
#include "host.hh"
#include "mlx5_page_list.hh"
#include "mlx5_uars.hh"
#include "object_table.hh"
#include "page_faults.hh"
#include "state_archive.hh"

namespace pib::mlx5 {

// The EQE types the device posts (device.h, MLX5_EVENT_TYPE_*).
namespace event {
inline constexpr uint8_t kCompletion = 0x00;
inline constexpr uint8_t kPortChange = 0x09;
inline constexpr uint8_t kCommand = 0x0a;
inline constexpr uint8_t kPageRequest = 0x0b;
inline constexpr uint8_t kPageFault = 0x0c;
inline constexpr uint8_t kMemoryPageFault = 2; // its sub-type in the memory scheme
} // namespace event

class EventQueues {
  public:
    static constexpr uint32_t kEqeBytes = 64;
    // An EQE's event data: its bytes 0x20 to 0x3b.
    using Data = std::array<uint8_t, 28>;
    // The doorbells in a UAR page: consumer counter and arm, or the
    // counter alone (lib/eq.h's MLX5_EQ_DOORBEL_OFFSET and the one after).
    static constexpr uint32_t kDoorbellArm = 0x40;
    static constexpr uint32_t kDoorbellNoArm = 0x48;

    EventQueues(const Host &host, const Uars &uars, uint32_t vectors);

    // CREATE_EQ: `in` is create_eq_in with its page list. Sets `eqn` to
    // the new EQ's number, or returns the condition that refuses it.
    const err::Condition *create(std::span<const uint8_t> in, uint32_t &eqn);
    // DESTROY_EQ; false when EQ `eqn` does not exist.
    bool destroy(uint32_t eqn);
    bool exists(uint32_t eqn) const { return eqs_.find(eqn) != nullptr; }
    // CQs report to an EQ, which stays while any does.
    void hold(uint32_t eqn) { ++eqs_.at(eqn).cqs; }
    void unhold(uint32_t eqn) { --eqs_.at(eqn).cqs; }
    uint32_t holders(uint32_t eqn) const { return eqs_.find(eqn) ? eqs_.at(eqn).cqs : 0; }
    bool usesUar(uint32_t uar) const;
    // A write of `value` (eq_number 31:24, consumer counter 23:0) to the
    // EQ doorbell of UAR page `uar`; `arm` for the arming one.
    void doorbell(uint32_t uar, uint32_t value, bool arm);
    // Whether an EQ takes events of `type`.
    bool takes(uint8_t type) const;
    // An event to the lowest-numbered EQ that takes its type; `about` is
    // the object it is about, as its trace names it.
    void post(uint8_t type, uint8_t subType, const Data &data, uint32_t about);
    // The core's async event (PIB_ASYNC_*) about object `number`, as
    // ConnectX reports it: CQ_ERROR, a QP's or SRQ's event, PORT_CHANGE
    // with its sub-type (docs/mlx5.md §8).
    void postAsync(uint8_t event, uint32_t number);
    // A page fault (page_faults.hh) as the memory scheme reports it, to
    // the EQ that takes them: false when the driver did not choose that
    // scheme (SET_HCA_CAP of the ODP page) or no EQ takes them.
    bool postPageFault(const PageFaultReport &f);
    void useMemoryPageFaults(bool chosen) { memoryPageFaults_ = chosen; }
    // An event to EQ `eqn`, whatever types it takes (a CQ's completions).
    void postTo(uint32_t eqn, uint8_t type, uint8_t subType, const Data &data, uint32_t about);
    void reset() {
        eqs_.clear();
        memoryPageFaults_ = false;
    }
    // The EQs as the host's tools see them; the host stops one or lets
    // it go on (false: no such EQ). A stopped EQ is not saved: its
    // device refuses to save.
    void forEachView(const std::function<void(const EqView &)> &each) const;
    bool stop(uint32_t eqn, bool stop);
    bool anyStopped() const;
    // The EQs in the device's state (mlx5_state_queues.cc): each as the
    // CREATE_EQ input that makes it as it is, then its counters and arm.
    void save(StateWriter &w) const;
    void load(StateReader &r);

  private:
    struct Eq : EqRing {
        uint32_t logSize;
        uint32_t uar;
        uint32_t vector;
        std::array<uint64_t, 4> types; // event_bitmask: bit n of word n / 64
        PageList ring;
        uint32_t cqs = 0; // CQs reporting to it

        bool takes(uint8_t type) const { return (types[type / 64] >> type % 64) & 1; }
    };
    std::vector<uint8_t> createInput(const Eq &eq) const;
    void write(uint32_t eqn, Eq &eq, uint8_t type, uint8_t subType, const Data &data,
               uint32_t about);

    const Host &host_;
    const Uars &uars_;
    const uint32_t vectors_;
    ObjectTable<Eq> eqs_;
    EqEngine engine_; // the rings, as pib-hca's EQs run them too
    bool memoryPageFaults_ = false;
};

} // namespace pib::mlx5
