// SPDX-License-Identifier: GPL-2.0-or-later
// The C ABI of the core. Nothing thrown below may cross into C: each entry
// point catches everything and degrades to what hardware would do.
#include <new>

#include "config.hh"
#include "device.hh"
#include "pib_core.h"

struct pib_core {
    explicit pib_core(const pib_core_config &config, const pib_host_ops &ops, void *opaque)
        : device(config, ops, opaque) {}
    pib::Device device;
};

extern "C" {

const char *pib_core_config_error(const pib_core_config *config) {
    if (!config)
        return "no configuration given";
    return pib::configError(*config);
}

pib_core *pib_core_new(const pib_core_config *config, const pib_host_ops *ops, void *opaque) {
    if (!ops || pib_core_config_error(config))
        return nullptr;
    try {
        return new pib_core(*config, *ops, opaque);
    } catch (...) {
        return nullptr;
    }
}

void pib_core_free(pib_core *core) {
    delete core;
}

void pib_core_reset(pib_core *core) {
    try {
        core->device.reset("host reset");
    } catch (...) {
    }
}

uint64_t pib_core_bar_read(pib_core *core, int bar, uint64_t offset, unsigned size) {
    try {
        return core->device.barRead(bar, offset, size);
    } catch (...) {
        return 0;
    }
}

void pib_core_bar_write(pib_core *core, int bar, uint64_t offset, uint64_t value, unsigned size) {
    try {
        core->device.barWrite(bar, offset, value, size);
    } catch (...) {
    }
}

uint64_t pib_core_bar_size(const pib_core *core, int bar) {
    return core->device.barSize(bar);
}

void pib_core_port_connected(pib_core *core, unsigned port, int connected) {
    try {
        core->device.portConnected(port, connected != 0);
    } catch (...) {
    }
}

void pib_core_port_receive(pib_core *core, unsigned port, const void *buf, size_t len) {
    try {
        core->device.portReceive(port, std::span(static_cast<const uint8_t *>(buf), len));
    } catch (...) {
    }
}

void pib_core_timer_expired(pib_core *core) {
    try {
        core->device.timerExpired();
    } catch (...) {
    }
}

} // extern "C"
