// SPDX-License-Identifier: GPL-2.0-or-later
// ConnectX user contexts (docs/mlx5.md §16): the uids CREATE_UCTX gives,
// one per process that opens the device, and the rules by which the uid
// a command carries decides what it may reach. mlx5_ib stamps the uid of
// the caller's context on every command it issues for a process, DEVX
// commands included, so the device alone keeps one process's objects from
// another's: an object belongs to the uid that made it; a command may
// change only its own uid's objects (the kernel, uid 0, any), and build
// only on objects its uid may hold.
#pragma once

#include <cstdint>
#include <optional>
#include <vector>

#include "conditions.hh"
#include "host.hh"
#include "object_table.hh"
#include "objects.hh"
#include "state_archive.hh"

namespace pib::mlx5 {

namespace uid {
inline constexpr Owner kKernel = 0;
// The kernel's objects every context may use (MLX5_SHARED_RESOURCE_UID):
// the completion EQs and Q counters mlx5_core makes when DEVX is offered.
inline constexpr Owner kShared = 0xffff;
} // namespace uid

// Whether a command of `caller` may change, destroy or query an object of
// `owner`: its own, or any for the kernel.
inline bool controls(Owner caller, Owner owner) {
    return caller == uid::kKernel || owner == caller;
}

// Whether a command of `caller` may build on an object of `owner` that
// every context may use as well: an XRC domain (mlx5_ib's are the
// kernel's, shared by file among processes), a UAR page, a Q counter, or
// a kernel CQ or SRQ the object never completes into or receives from
// (mlx5_ib's placeholders of a QP with no receive side, or of a basic
// SRQ's unused CQ).
inline bool mayShare(Owner caller, Owner owner) {
    return controls(caller, owner) || owner == uid::kKernel || owner == uid::kShared;
}

// The owner of object `number` of `table`; 0 for one that does not exist,
// which the command's own checks refuse first.
template <class T> Owner ownerIn(const ObjectTable<T> &table, uint64_t number) {
    const T *object = table.find(number);
    return object ? object->owner : uid::kKernel;
}

// Refuses a command of `caller` that would build on `what` `number`, of
// `owner` (mlx5-cmd-foreign-object): a guest error, the command's status.
const err::Condition *refuseForeign(const Host &host, const char *command, const char *what,
                                    uint64_t number, Owner owner, Owner caller);

class UserContexts {
  public:
    // uids 1 to `capacity` (2^log_max_uctx).
    explicit UserContexts(uint32_t capacity) : live_(capacity, false) {}

    // The lowest uid free, now given; nullopt when every one is.
    std::optional<Owner> create();
    void destroy(Owner uid);
    // Whether a command may carry `uid`: the kernel's, the shared one, or
    // a context that exists.
    bool admits(Owner uid) const {
        return uid == uid::kKernel || uid == uid::kShared || exists(uid);
    }
    bool exists(Owner uid) const { return uid >= 1 && uid <= live_.size() && live_[uid - 1]; }
    void reset() { live_.assign(live_.size(), false); }
    void save(StateWriter &w) const;
    void load(StateReader &r);

  private:
    std::vector<bool> live_; // by uid - 1
};

} // namespace pib::mlx5
