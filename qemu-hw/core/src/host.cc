// SPDX-License-Identifier: GPL-2.0-or-later
#include "host.hh"

#include <cstdio>

namespace pib {

std::string Host::vformat(const char *fmt, va_list args) {
    char buf[256];
    std::vsnprintf(buf, sizeof(buf), fmt, args);
    return buf;
}

void Host::guestError(const char *what, const char *fmt, ...) const {
    if (!ops_.guest_error)
        return;
    va_list args;
    va_start(args, fmt);
    const std::string detail = vformat(fmt, args);
    va_end(args);
    ops_.guest_error(opaque_, what, detail.c_str());
}

void Host::trace(const char *what, const char *fmt, ...) const {
    if (!ops_.trace)
        return;
    va_list args;
    va_start(args, fmt);
    const std::string detail = vformat(fmt, args);
    va_end(args);
    ops_.trace(opaque_, what, detail.c_str());
}

} // namespace pib
