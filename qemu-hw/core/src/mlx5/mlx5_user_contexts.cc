// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_user_contexts.hh"

#include <algorithm>
#include <string>

namespace pib::mlx5 {

namespace {
constexpr uint32_t kUserContextsTag = stateTag("M5UC");
} // namespace

const err::Condition *refuseForeign(const Host &host, const char *command, const char *what,
                                    uint64_t number, Owner owner, Owner caller) {
    host.guestError(err::kMlx5CmdForeignObject, "%s with uid %u: %s %llu is user context %u's",
                    command, caller, what, static_cast<unsigned long long>(number), owner);
    return &err::kMlx5CmdForeignObject;
}

std::optional<Owner> UserContexts::create() {
    const auto it = std::find(live_.begin(), live_.end(), false);
    if (it == live_.end())
        return std::nullopt;
    *it = true;
    return static_cast<Owner>(it - live_.begin() + 1);
}

void UserContexts::destroy(Owner uid) {
    if (exists(uid))
        live_[uid - 1] = false;
}

// The uids that exist, saved before the objects, whose owners they are.
void UserContexts::save(StateWriter &w) const {
    w.beginSection(kUserContextsTag);
    w.u32(static_cast<uint32_t>(std::count(live_.begin(), live_.end(), true)));
    for (size_t i = 0; i < live_.size(); ++i)
        if (live_[i])
            w.u16(static_cast<uint16_t>(i + 1));
    w.endSection();
}

void UserContexts::load(StateReader &r) {
    r.enterSection(kUserContextsTag, "the user contexts");
    reset();
    const uint32_t count = r.count(static_cast<uint32_t>(live_.size()), 2, "user contexts");
    for (uint32_t i = 0; i < count && r.ok(); ++i) {
        const Owner uid = r.u16();
        if (uid < 1 || uid > live_.size() || live_[uid - 1])
            r.fail("user context " + std::to_string(uid) + ": beyond the device's, or twice");
        else
            live_[uid - 1] = true;
    }
    r.leaveSection("the user contexts");
}

} // namespace pib::mlx5
