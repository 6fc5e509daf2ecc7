// SPDX-License-Identifier: GPL-2.0-or-later
#include "fake_host.hh"

#include <stdexcept>

static void recordGuestError(void *opaque, const char *what, const char *detail) {
    static_cast<FakeHost *>(opaque)->errors.push_back({what, detail});
}

static void recordTrace(void *opaque, const char *what, const char *detail) {
    static_cast<FakeHost *>(opaque)->traceLines.push_back({what, detail});
}

pib_core_config FakeHost::defaultConfig() {
    return pib_core_config{
        .node_guid = 0x0002c90300001234ull,
        .doorbell_pages = 16,
        .msix_vectors = 8,
        .num_ports = 1,
    };
}

FakeHost::FakeHost() : FakeHost(defaultConfig()) {}

FakeHost::FakeHost(const pib_core_config &config) {
    static const pib_host_ops ops = {
        .guest_error = recordGuestError,
        .trace = recordTrace,
    };
    core = pib_core_new(&config, &ops, this);
    if (!core)
        throw std::runtime_error("pib_core_new rejected the configuration");
}

FakeHost::~FakeHost() {
    pib_core_free(core);
}

size_t FakeHost::guestErrors(const std::string &what) const {
    size_t n = 0;
    for (const auto &e : errors)
        n += what.empty() || e.what == what;
    return n;
}

size_t FakeHost::traces(const std::string &what) const {
    size_t n = 0;
    for (const auto &t : traceLines)
        n += t.what == what;
    return n;
}
