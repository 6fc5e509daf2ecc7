// SPDX-License-Identifier: GPL-2.0-or-later
// One page sent from a to b over a connected pair's RC QPs, and its
// arrival checked: the cable tests' probe of whether traffic got through.
#pragma once

#include <catch2/catch.hpp>

#include <cstring>
#include <utility>

#include "connected_fixture.hh"

namespace pib::testing {

// A SEND of one page of random bytes from a to b, its receive posted:
// (source, destination).
inline std::pair<uint64_t, uint64_t> postPageSend(Pair &pair, uint64_t seed) {
    const uint64_t src = pair.a.host.allocRandom(4096, seed);
    const uint64_t dst = pair.b.host.alloc(4096);
    pair.b.postRecv(1, dst, 4096);
    pair.a.postSend(1, {.local = src, .length = 4096});
    return {src, dst};
}

// That SEND completed at a, and arrived whole.
inline void checkPageArrived(Pair &pair, uint64_t src, uint64_t dst) {
    const auto done = pair.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(std::memcmp(pair.a.host.at(src), pair.b.host.at(dst), 4096) == 0);
}

} // namespace pib::testing
