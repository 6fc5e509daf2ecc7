// SPDX-License-Identifier: GPL-2.0-or-later
// The core's host-side management calls (pib_core_capture, _inspect,
// _inject) as the unit tests make them: the return code and the answer.
#pragma once

#include <cstdlib>
#include <string>

#include "connected_fixture.hh"

namespace pib::testing {

struct Answer {
    int rc;
    std::string text;
};

// Takes the answer a management call gave, and frees it.
inline Answer answered(int rc, char *text) {
    Answer a{rc, text ? text : ""};
    std::free(text);
    return a;
}

inline Answer capture(Node &n, unsigned port, const char *path, uint64_t limit = 0) {
    char *text = nullptr;
    const int rc = pib_core_capture(n.host.core, port, path, limit, &text);
    return answered(rc, text);
}

inline Answer inspect(pib_core *core, const char *what, bool json) {
    char *text = nullptr;
    const int rc = pib_core_inspect(core, what, json, &text);
    return answered(rc, text);
}

inline Answer inspect(Node &n, const char *what, bool json) {
    return inspect(n.host.core, what, json);
}

inline Answer inject(pib_core *core, const std::string &line) {
    char *text = nullptr;
    const int rc = pib_core_inject(core, line.c_str(), &text);
    return answered(rc, text);
}

inline Answer inject(Node &n, const std::string &line) {
    return inject(n.host.core, line);
}

} // namespace pib::testing
