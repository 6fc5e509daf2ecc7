// SPDX-License-Identifier: GPL-2.0-or-later
// A ConnectX function with DEVX processes on it, for the unit tests of
// what a process's QPs (no fre) may do with keys and windows: each
// process its uid, PD, UAR page and CQ, and QPs of its own.
#pragma once

#include <vector>

#include "mlx5_function.hh"

namespace pib::testing {

struct Mlx5Processes : OwnedMlx5Host, Mlx5Function {
    Mlx5Processes() : Mlx5Function(owned) {
        REQUIRE(setUp());
        REQUIRE(activatePort());
    }
    static constexpr uint16_t kCreateUctx = 0xa04, kAllocPd = 0x800, kAllocUar = 0x802;

    uint32_t allocPd(uint16_t uid = 0) {
        auto in = Mlx5Host::input(kAllocPd);
        set(in, mlx5::kUid, uid);
        const auto r = host.run(in, 16);
        REQUIRE(r.status() == 0);
        return static_cast<uint32_t>(r.get(mlx5qp::kHeld));
    }
    // A DEVX process: its uid, PD, UAR page and CQ (its ring and record).
    struct Process {
        uint16_t uid = 0;
        uint32_t pd = 0, uar = 0, cq = 0, next = 0;
        uint64_t ring = 0, record = 0;
    };
    Process process() {
        Process p;
        const auto r = host.run(Mlx5Host::input(kCreateUctx, 0, 0x40), 16);
        REQUIRE(r.status() == 0);
        p.uid = static_cast<uint16_t>(r.get(mlx5::field(0x50, 16)));
        p.pd = allocPd(p.uid);
        auto uarIn = Mlx5Host::input(kAllocUar);
        set(uarIn, mlx5::kUid, p.uid);
        const auto page = host.run(uarIn, 16);
        REQUIRE(page.status() == 0);
        p.uar = static_cast<uint32_t>(page.get(mlx5qp::kHeld));
        auto cqIn = host.cqInput(kLogCq, eqn, p.uar, &p.ring, &p.record);
        set(cqIn, mlx5::kUid, p.uid);
        const auto cq = host.run(cqIn, 16);
        REQUIRE(cq.status() == 0);
        p.cq = static_cast<uint32_t>(cq.get(mlx5qp::kHeld));
        return p;
    }
    // The process's RC QP (no fre) in `pdn`, on its CQ and UAR page, in RTS
    // looped to itself.
    Qp qpOf(const Process &p, uint32_t pdn) {
        Qp qp = createdQpOf(p, pdn);
        REQUIRE(toRts(qp.qpn, {.qpn = qp.qpn}));
        return qp;
    }
    // Two of them, connected to each other.
    std::pair<Qp, Qp> pairOf(const Process &p, uint32_t pdn) {
        Qp a = createdQpOf(p, pdn), b = createdQpOf(p, pdn);
        REQUIRE(toRts(a.qpn, {.qpn = b.qpn}));
        REQUIRE(toRts(b.qpn, {.qpn = a.qpn}));
        return {a, b};
    }
    Qp createdQpOf(const Process &p, uint32_t pdn) {
        Qp qp;
        const uint32_t saved[] = {pd, cqn, uar};
        pd = pdn, cqn = p.cq, uar = p.uar;
        auto in = qpInput(mlx5qp::kRc, 1, 3, 4, qp);
        pd = saved[0], cqn = saved[1], uar = saved[2];
        set(in, mlx5qp::kFre, 0);
        set(in, mlx5::kUid, p.uid);
        const auto r = host.run(in, 16);
        REQUIRE(r.status() == 0);
        qp.qpn = static_cast<uint32_t>(r.get(mlx5qp::kHeld));
        return qp;
    }
    // Posts `wqe` on the process's `qp`: its CQE's opcode and syndrome.
    std::pair<uint8_t, uint8_t> postAs(Process &p, Qp &qp, std::vector<uint8_t> wqe) {
        blueFlame(postWqe(qp, std::move(wqe)), p.uar);
        std::vector<const uint8_t *> done;
        for (int poll = 0; poll < 100 && done.empty(); ++poll) {
            host.runScheduled();
            done = cqesOf(p.ring, p.record, &p.next);
        }
        REQUIRE(done.size() == 1);
        return {static_cast<uint8_t>(done[0][0x3f] >> 4), done[0][0x37]};
    }
};

} // namespace pib::testing
