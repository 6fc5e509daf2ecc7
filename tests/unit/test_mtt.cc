// SPDX-License-Identifier: GPL-2.0-or-later
// The MTT's ranges, and the budget of the entries keys keep with
// themselves (ConnectX keys), a capacity of its own.
#include <catch2/catch.hpp>

#include "mtt.hh"

TEST_CASE("the MTT gives ranges first fit and keys their own budget", "[mtt]") {
    pib::Mtt mtt(64, 96);
    const auto a = mtt.allocate(16);
    const auto b = mtt.allocate(48);
    REQUIRE(a == 0u);
    REQUIRE(b == 16u);
    CHECK_FALSE(mtt.allocate(1)); // full
    REQUIRE(mtt.release(*a));
    CHECK(mtt.allocate(8) == 0u);

    // Key entries are counted apart from the ranges, up to their capacity.
    CHECK(mtt.takeKeyEntries(40));
    CHECK(mtt.takeKeyEntries(56));
    CHECK_FALSE(mtt.takeKeyEntries(1));
    mtt.returnKeyEntries(10);
    CHECK(mtt.takeKeyEntries(10));
    CHECK_FALSE(mtt.takeKeyEntries(1));
    mtt.returnKeyEntries(1000); // more than taken: none is left, no wrap
    CHECK(mtt.takeKeyEntries(96));
    mtt.clear();
    CHECK(mtt.takeKeyEntries(96));
}
