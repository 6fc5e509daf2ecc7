// SPDX-License-Identifier: GPL-2.0-or-later
// A ConnectX function ready for DC (docs/mlx5.md §15): port 1 ACTIVE, an
// SRQ of 16 receive WQEs for its DCTs, which it makes by key, and DCIs in
// RTS, with streams if asked (§15.4).
#pragma once

#include <catch2/catch.hpp>

#include <numeric>

#include "mlx5_function.hh"

namespace pib::testing {

struct DcFunction : OwnedMlx5Host, Mlx5Function {
    DcFunction() : Mlx5Function(owned) {
        REQUIRE(setUp());
        REQUIRE(activatePort());
        std::vector<uint16_t> order(16);
        std::iota(order.begin(), order.end(), 0);
        const auto made = createSrq(4, order);
        REQUIRE(made);
        srq = *made;
    }
    uint32_t dct(uint64_t key) {
        const auto r = host.run(dctInput(srq.srqn, key), 16);
        REQUIRE(r.status() == 0);
        return static_cast<uint32_t>(r.get(mlx5qp::kHeld));
    }
    // A DCI taken to RTS with an ACK timeout; 2^logStreams streams, failing
    // at 2^logErrored in error, if those are not 0.
    Qp dci(uint32_t logStreams = 0, uint32_t logErrored = 0) {
        const auto made = createDci(srq.srqn, 5, logStreams, logErrored);
        REQUIRE(made);
        REQUIRE(toRts(made->qpn, {.ackTimeout = 14, .retries = 2, .rnrRetries = 7}));
        return *made;
    }
    uint64_t dcSend(Qp &qp, uint32_t dctn, uint64_t key, const Send &s, uint64_t add = 0) {
        return writeDcSend(qp, dctn, key, s, add);
    }
    Mlx5Host::Reply queryDct(uint32_t dctn) {
        auto in = Mlx5Host::input(0x713); // QUERY_DCT
        set(in, mlx5qp::kHeld, dctn);
        return host.run(in, 0x80);
    }
    Srq srq;
};

} // namespace pib::testing
