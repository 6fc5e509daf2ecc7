// SPDX-License-Identifier: GPL-2.0-or-later
// How fuzz-core reports a broken rule: a message, then abort(), which
// libFuzzer records as a finding with the input that led to it.
#pragma once

#include <cstdarg>
#include <cstdio>
#include <cstdlib>

namespace pib::fuzz {

[[noreturn]] inline __attribute__((format(printf, 1, 2))) void fail(const char *format, ...) {
    std::va_list args;
    va_start(args, format);
    std::fputs("fuzz-core: invariant broken: ", stderr);
    std::vfprintf(stderr, format, args);
    std::fputc('\n', stderr);
    va_end(args);
    std::abort();
}

inline void check(bool ok, const char *what) {
    if (!ok)
        fail("%s", what);
}

} // namespace pib::fuzz
