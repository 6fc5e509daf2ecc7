// SPDX-License-Identifier: GPL-2.0-or-later
// The device's multicast groups: which UD QPs of which port are attached
// to which MGID (IBA 10.5), within the limits pib_dev_cap reports.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <utility>
#include <vector>

#include "addressing.hh"
#include "pib_hw.h"

namespace pib {

class MulticastGroups {
  public:
    using Gid = std::array<uint8_t, 16>;
    struct Limits {
        uint32_t groups;           // max_mcast_grp
        uint32_t qpsPerGroup;      // max_mcast_qp_attach
        uint32_t totalAttachments; // max_total_mcast_qp_attach
    };

    explicit MulticastGroups(Limits limits) : limits_(limits) {}

    // PIB_CMD_STATUS_OK, or why not: a limit reached (NO_RESOURCES), or
    // detaching what is not attached (BAD_PARAM). Attaching twice is not
    // an error and counts once.
    uint8_t attach(unsigned port, const Gid &mgid, uint16_t mlid, uint32_t qpn);
    uint8_t detach(unsigned port, const Gid &mgid, uint32_t qpn);
    // Takes a QP out of every group (it is being destroyed).
    void detachAll(uint32_t qpn);
    // The QPs attached to `mgid` on `port`, in the order they attached.
    const std::vector<uint32_t> *members(unsigned port, const Gid &mgid) const;
    void clear() { groups_.clear(), attachments_ = 0; }

    // Each attachment: f(port, mgid, mlid, qpn), by group.
    template <class F> void forEach(F &&f) const {
        for (const auto &[at, group] : groups_)
            for (uint32_t qpn : group.qpns)
                f(at.first, at.second, group.mlid, qpn);
    }
    size_t groups() const { return groups_.size(); }
    uint32_t attachments() const { return attachments_; }

  private:
    struct Group {
        uint16_t mlid = 0;
        std::vector<uint32_t> qpns;
    };
    Limits limits_;
    std::map<std::pair<unsigned, Gid>, Group> groups_;
    uint32_t attachments_ = 0;
};

// The hardware header's multicast LID range is IBA's (4.1.1).
static_assert(PIB_MULTICAST_LID_FIRST == iba::kMulticastLidFirst &&
              PIB_MULTICAST_LID_LAST == iba::kMulticastLidLast);

} // namespace pib
