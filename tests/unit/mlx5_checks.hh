// SPDX-License-Identifier: GPL-2.0-or-later
// What the ConnectX unit tests check again and again.
#pragma once

#include <catch2/catch.hpp>
#include <vector>

#include "conditions.hh"
#include "mlx5_host.hh"

// The device refuses command `in` with `status` and the syndrome of
// `why`, and reports one guest error of it.
inline void checkRefused(Mlx5Host &host, const std::vector<uint8_t> &in, uint8_t status,
                         const pib::err::Condition &why) {
    host.clear();
    const auto r = host.run(in, 16);
    CHECK(r.status() == status);
    CHECK(r.syndrome() == why.syndrome);
    CHECK(host.guestErrors(why.token) == 1);
}
