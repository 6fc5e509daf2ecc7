// SPDX-License-Identifier: GPL-2.0-or-later
// A saved device state's sections, for tests that compare two states
// but for a section that changes on its own (a port's counters).
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdint>
#include <vector>

namespace pib::testing {

// `state` without its section `tag` (tag, length, then that many bytes).
inline std::vector<uint8_t> withoutSection(std::vector<uint8_t> state, const char (&tag)[5]) {
    const auto at = std::search(state.begin(), state.end(), tag, tag + 4);
    REQUIRE(at != state.end());
    REQUIRE(state.end() - at >= 8);
    uint32_t length = 0;
    for (int i = 0; i < 4; ++i)
        length |= uint32_t{at[4 + i]} << (8 * i);
    REQUIRE(static_cast<size_t>(state.end() - at) >= 8 + size_t{length});
    state.erase(at, at + 8 + length);
    return state;
}

} // namespace pib::testing
