// SPDX-License-Identifier: GPL-2.0-or-later
#include "multicast.hh"

#include <algorithm>

namespace pib {

uint8_t MulticastGroups::attach(unsigned port, const Gid &mgid, uint16_t mlid, uint32_t qpn) {
    const auto key = std::make_pair(port, mgid);
    auto it = groups_.find(key);
    if (it != groups_.end()) {
        auto &qpns = it->second.qpns;
        if (std::find(qpns.begin(), qpns.end(), qpn) != qpns.end())
            return PIB_CMD_STATUS_OK;
        if (qpns.size() >= limits_.qpsPerGroup)
            return PIB_CMD_STATUS_NO_RESOURCES;
    } else if (groups_.size() >= limits_.groups) {
        return PIB_CMD_STATUS_NO_RESOURCES;
    }
    if (attachments_ >= limits_.totalAttachments)
        return PIB_CMD_STATUS_NO_RESOURCES;
    Group &group = groups_[key];
    // The SM may move a group to another MLID; the MGID is what matches.
    group.mlid = mlid;
    group.qpns.push_back(qpn);
    ++attachments_;
    return PIB_CMD_STATUS_OK;
}

uint8_t MulticastGroups::detach(unsigned port, const Gid &mgid, uint32_t qpn) {
    auto it = groups_.find(std::make_pair(port, mgid));
    if (it == groups_.end())
        return PIB_CMD_STATUS_BAD_PARAM;
    auto &qpns = it->second.qpns;
    auto at = std::find(qpns.begin(), qpns.end(), qpn);
    if (at == qpns.end())
        return PIB_CMD_STATUS_BAD_PARAM;
    qpns.erase(at);
    --attachments_;
    if (qpns.empty())
        groups_.erase(it);
    return PIB_CMD_STATUS_OK;
}

void MulticastGroups::detachAll(uint32_t qpn) {
    for (auto it = groups_.begin(); it != groups_.end();) {
        auto &qpns = it->second.qpns;
        const auto removed = std::erase(qpns, qpn);
        attachments_ -= static_cast<uint32_t>(removed);
        it = qpns.empty() ? groups_.erase(it) : std::next(it);
    }
}

const std::vector<uint32_t> *MulticastGroups::members(unsigned port, const Gid &mgid) const {
    auto it = groups_.find(std::make_pair(port, mgid));
    return it == groups_.end() ? nullptr : &it->second.qpns;
}

} // namespace pib
