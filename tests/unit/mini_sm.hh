// SPDX-License-Identifier: GPL-2.0-or-later
// A small subnet manager for the simulated fabric's tests: from a guest's
// port it discovers the fabric by directed routes (NodeInfo, PortInfo),
// gives every switch and CA port a LID, writes minimum-hop LFTs, and
// activates every port, as opensm's heavy sweep does, with SMPs only. The
// guests behind the fabric's ports are the test's: they answer nothing,
// and get the LIDs `guestLid` says.
#pragma once

#include <array>
#include <cstdint>
#include <deque>
#include <map>
#include <optional>
#include <vector>

#include "mad.hh"
#include "packet.hh"
#include "sim_fabric.hh"
#include "smp.hh"
#include "smp_packets.hh"

namespace pib::testing {

class MiniSm {
  public:
    // The SM's guest is on the fabric's port `smPort`, with LID 1.
    MiniSm(fabric::SimulatedFabric &f, unsigned smPort) : f_(f), smPort_(smPort) {}

    struct Node {
        uint64_t guid = 0;
        bool isSwitch = false;
        unsigned ports = 0;
        std::vector<uint8_t> path; // the DR path that reaches it
        uint16_t lid = 0;          // a switch's, or a CA's (one port)
        // Per port: the neighbour's node index, or -1; a guest: -2 - its
        // fabric port.
        std::vector<int> neighbor;
    };
    std::vector<Node> nodes;
    unsigned smps = 0; // sent

    // The LID of the guest on the fabric's port `port`.
    static uint16_t guestLid(unsigned port) { return static_cast<uint16_t>(port); }

    // A Get or Set along `path`; the response's MAD, or nullopt when none
    // came back (the SMP left through another port of the fabric).
    std::optional<std::vector<uint8_t>> smp(uint8_t method, uint16_t attr, uint32_t mod,
                                            const std::vector<uint8_t> &path,
                                            const std::function<void(iba::Mad &)> &fill = {}) {
        auto mad = drSmpMad(method, attr, mod, path, ++tid_);
        if (fill) {
            iba::Mad m(mad);
            fill(m);
        }
        ++smps;
        std::optional<std::vector<uint8_t>> answer;
        const auto take = [&](unsigned port, std::span<const uint8_t> bytes) {
            iba::ParseError error;
            auto p = iba::parse(bytes, &error);
            if (port == smPort_ && p && p->payload.size() == iba::kMadSize &&
                iba::Mad(p->payload).get64(8) == tid_)
                answer = p->payload;
        };
        for (const fabric::Transmit &t : f_.receive(smPort_, drPacket(mad), take))
            take(t.port, t.packet);
        return answer;
    }

    // Discovers every node the SM's port reaches.
    void discover() {
        std::map<uint64_t, size_t> known;
        std::deque<std::pair<std::vector<uint8_t>, std::pair<int, unsigned>>> queue;
        queue.push_back({{1}, {-1, 0}});
        while (!queue.empty()) {
            auto [path, from] = queue.front();
            queue.pop_front();
            auto info = smp(iba::kGet, iba::kAttrNodeInfo, 0, path);
            if (!info) { // a guest's port: the SMP left the fabric
                link(from, -2 - static_cast<int>(lastExternal(path)), 0);
                continue;
            }
            const iba::NodeInfo n = iba::readNodeInfo(iba::Mad(*info));
            auto [it, fresh] = known.emplace(n.nodeGuid, nodes.size());
            if (fresh) {
                Node node{n.nodeGuid, n.nodeType == iba::kNodeTypeSwitch,  n.numPorts, path,
                          0,          std::vector<int>(n.numPorts + 1, -1)};
                nodes.push_back(node);
            }
            link(from, static_cast<int>(it->second), n.localPortNum);
            if (!fresh || !nodes[it->second].isSwitch)
                continue;
            for (unsigned port = 1; port <= n.numPorts; ++port) {
                if (port == n.localPortNum)
                    continue;
                auto pi = smp(iba::kGet, iba::kAttrPortInfo, port, path);
                if (pi && iba::readPortInfo(iba::Mad(*pi)).portPhysicalState == iba::kPhysLinkUp) {
                    auto next = path;
                    next.push_back(static_cast<uint8_t>(port));
                    queue.push_back({next, {static_cast<int>(it->second), port}});
                }
            }
        }
    }

    // LIDs after the guests' (1..fabric ports), then PortInfo with the
    // LID and the SM's LID.
    void assignLids() {
        uint16_t next = static_cast<uint16_t>(f_.ports() + 1);
        for (Node &n : nodes) {
            n.lid = next++;
            const unsigned port = n.isSwitch ? 0 : n.path.empty() ? 1 : arrival(n);
            smp(iba::kSet, iba::kAttrPortInfo, port, n.path, [&](iba::Mad &m) {
                iba::writePortInfo(m, {.lid = n.lid, .masterSmLid = guestLid(smPort_)});
            });
        }
    }

    // Minimum-hop routes to every LID, by a breadth-first search from
    // each destination.
    void route() {
        std::vector<std::array<uint8_t, 64 * 4>> lft(nodes.size());
        for (auto &t : lft)
            t.fill(0xff);
        auto routeTo = [&](uint16_t lid, size_t dest, unsigned destPort) {
            // dest: the switch the LID is behind (or is), out of destPort
            // (0: the switch itself).
            std::vector<bool> seen(nodes.size());
            std::deque<size_t> q{dest};
            seen[dest] = true;
            lft[dest][lid] = static_cast<uint8_t>(destPort);
            while (!q.empty()) {
                const size_t s = q.front();
                q.pop_front();
                for (unsigned p = 1; p <= nodes[s].ports; ++p) {
                    const int nb = nodes[s].neighbor[p];
                    if (nb < 0 || !nodes[nb].isSwitch || seen[nb])
                        continue;
                    seen[nb] = true;
                    lft[nb][lid] = static_cast<uint8_t>(portTowards(nb, s));
                    q.push_back(nb);
                }
            }
        };
        for (size_t s = 0; s < nodes.size(); ++s) {
            if (!nodes[s].isSwitch)
                continue;
            routeTo(nodes[s].lid, s, 0);
            for (unsigned p = 1; p <= nodes[s].ports; ++p) {
                const int nb = nodes[s].neighbor[p];
                if (nb <= -2)
                    routeTo(guestLid(static_cast<unsigned>(-2 - nb)), s, p);
                else if (nb >= 0 && !nodes[nb].isSwitch)
                    routeTo(nodes[nb].lid, s, p);
            }
        }
        for (size_t s = 0; s < nodes.size(); ++s)
            if (nodes[s].isSwitch)
                for (uint32_t block = 0; block < 4; ++block)
                    smp(iba::kSet, iba::kAttrLinearForwardingTable, block, nodes[s].path,
                        [&](iba::Mad &m) {
                            iba::writeBytes(m, std::span(lft[s]).subspan(block * 64, 64));
                        });
    }

    // Every port with a link ARMED, then ACTIVE.
    void activate() {
        for (uint8_t state : {iba::kPortStateArmed, iba::kPortStateActive})
            for (Node &n : nodes)
                for (unsigned p = 1; p <= n.ports; ++p)
                    if (n.neighbor[p] != -1 && (n.isSwitch || p == arrival(n)))
                        smp(iba::kSet, iba::kAttrPortInfo, p, n.path, [&](iba::Mad &m) {
                            // A Set writes every field: a CA's keeps its
                            // LID (a switch's external ports have none).
                            iba::writePortInfo(m, {.lid = n.isSwitch ? uint16_t{0} : n.lid,
                                                   .masterSmLid = guestLid(smPort_),
                                                   .portState = state});
                        });
    }

    void sweep() {
        discover();
        assignLids();
        route();
        activate();
    }

  private:
    // Records a cable: `from` (-1: the SM's guest) to node `to` (a guest:
    // -2 - its fabric port) at `toPort`.
    void link(std::pair<int, unsigned> from, int to, unsigned toPort) {
        if (from.first >= 0)
            nodes[from.first].neighbor[from.second] = to;
        if (to >= 0 && toPort)
            nodes[to].neighbor[toPort] =
                from.first >= 0 ? from.first : -2 - static_cast<int>(smPort_);
    }
    // The fabric port a path that left the fabric ends at: its last
    // switch's port.
    unsigned lastExternal(const std::vector<uint8_t> &path) {
        for (Node &n : nodes)
            if (n.path.size() + 1 == path.size() &&
                std::equal(n.path.begin(), n.path.end(), path.begin()))
                return externalOf(n, path.back());
        return 0;
    }
    unsigned externalOf(const Node &n, unsigned port) const {
        for (unsigned k = 1; k <= f_.ports(); ++k)
            if (f_.nodeGuid(k) == n.guid && f_.portNumber(k) == port)
                return k;
        return 0;
    }
    unsigned arrival(const Node &n) const {
        for (unsigned p = 1; p <= n.ports; ++p)
            if (n.neighbor[p] != -1)
                return p;
        return 1;
    }
    unsigned portTowards(size_t from, size_t to) const {
        for (unsigned p = 1; p <= nodes[from].ports; ++p)
            if (nodes[from].neighbor[p] == static_cast<int>(to))
                return p;
        return 0xff;
    }

    fabric::SimulatedFabric &f_;
    unsigned smPort_;
    uint64_t tid_ = 0x5000;
};

} // namespace pib::testing
