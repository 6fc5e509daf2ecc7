// SPDX-License-Identifier: GPL-2.0-or-later
// The least of a subnet manager, for the fabric benchmark: on its own
// cable to a switch port, it sends directed-route SMPs as opensm's would
// to give each switch a route per LID and make its ports ACTIVE. The
// devices' ports are the benchmark's own, set through their MAD_IFC.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "frame.hh"
#include "socket_cable.hh"

namespace pib::bench {

class BenchSm {
  public:
    // Cables itself to the switch port listening at `path`.
    explicit BenchSm(const std::string &path);

    // The switch at directed route `path` (the switch ports from this
    // SM's): LID -> port for each of `routes`, then `ports` ARMED and
    // ACTIVE, once their links are up. Throws when a switch answers with
    // an error or not at all, or a link does not come up.
    void configureSwitch(const std::vector<uint8_t> &path,
                         const std::vector<std::pair<uint16_t, uint8_t>> &routes,
                         const std::vector<uint8_t> &ports);

  private:
    SocketCable cable_;
    wire::FrameReader reader_;
    uint64_t tid_ = 1;

    // Sends a SubnGet or SubnSet of `attr` along `path`, with `data` as
    // its attribute, and returns the GetResp's MAD; throws on an error.
    std::vector<uint8_t> request(uint8_t method, const std::vector<uint8_t> &path, uint16_t attr,
                                 uint32_t mod, const std::vector<uint8_t> &data = {});
    // Waits until each of `ports` of the switch at `path` has a live link.
    void awaitLinks(const std::vector<uint8_t> &path, const std::vector<uint8_t> &ports);
    void send(const std::vector<uint8_t> &bytes);
    // The GetResp with transaction ID `tid`.
    std::vector<uint8_t> awaitResponse(uint64_t tid);
};

} // namespace pib::bench
