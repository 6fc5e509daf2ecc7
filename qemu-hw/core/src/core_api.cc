// SPDX-License-Identifier: GPL-2.0-or-later
// The C ABI of the core. Nothing thrown below may cross into C: each entry
// point catches everything, and the device goes FATAL as hardware whose
// firmware failed would.
#include <cstdlib>
#include <cstring>
#include <exception>
#include <new>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "config.hh"
#include "device.hh"
#include "pib_core.h"
#include "pib_hw.h"
#include "trace.hh"

struct pib_core {
    explicit pib_core(const pib_core_config &config, const pib_host_ops &ops, void *opaque)
        : device(config, ops, opaque), host(ops, opaque) {}
    pib::Device device;
    pib::Host host;
    // Set while an entry point runs. A call that arrives meanwhile came
    // from inside the core's own work: a host that let the device's DMA
    // reach its own BARs, or fired a callback synchronously. It is refused:
    // the core never runs a command or frees an object under a walk.
    bool busy = false;
    // Link changes that arrived so (a stream that failed while the core
    // wrote to it) are real: they are applied once the core is idle.
    std::vector<std::pair<unsigned, bool>> laterLinks;
};

namespace {

// Anything thrown inside the core is an internal error: the device goes
// FATAL (Device::fatal) and says why, instead of running on with a state
// nobody checked.
template <class Work> void guarded(pib_core *core, Work &&work) {
    try {
        work();
    } catch (const std::exception &e) {
        core->device.fatal(e.what());
    } catch (...) {
        core->device.fatal("an unknown exception");
    }
}

// Runs `work` as one entry point of `core`, unless another is running.
template <class Work> void enter(pib_core *core, const char *what, Work &&work) {
    if (core->busy) {
        core->host.guestError(pib::err::kDmaReentry, "%s while the device is busy: refused", what);
        return;
    }
    core->busy = true;
    guarded(core, work);
    while (!core->laterLinks.empty()) {
        const std::pair<unsigned, bool> link = core->laterLinks.front();
        core->laterLinks.erase(core->laterLinks.begin());
        guarded(core, [&] { core->device.portConnected(link.first, link.second); });
    }
    core->busy = false;
}

// Runs a management call that answers in text: 0 and the answer, or -1
// and the reason, in a string the host frees with free(). Nothing the call
// throws harms the device: the host gets the reason instead.
template <class Call> int answered(char **answer, Call &&call) {
    std::string text;
    bool ok = false;
    try {
        ok = call(&text);
    } catch (const std::exception &e) {
        text = e.what();
    } catch (...) {
        text = "an unknown exception";
    }
    *answer = strdup(text.c_str());
    return ok && *answer ? 0 : -1;
}

} // namespace

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
    enter(core, "reset", [&] { core->device.reset("host reset"); });
}

uint64_t pib_core_bar_read(pib_core *core, int bar, uint64_t offset, unsigned size) {
    uint64_t value = 0;
    enter(core, "BAR read", [&] { value = core->device.barRead(bar, offset, size); });
    return value;
}

void pib_core_bar_write(pib_core *core, int bar, uint64_t offset, uint64_t value, unsigned size) {
    enter(core, "BAR write", [&] { core->device.barWrite(bar, offset, value, size); });
}

uint64_t pib_core_bar_size(const pib_core *core, int bar) {
    return core->device.barSize(bar);
}

namespace {

bool inVsc(const pib_core *core, uint32_t offset) {
    return offset >= 4 && offset % 4 == 0 && offset < pib_core_vsc_size(core);
}

} // namespace

uint32_t pib_core_vsc_size(const pib_core *core) {
    return core->device.frontEnd().vendorCapabilitySize();
}

uint32_t pib_core_vsc_read(pib_core *core, uint32_t offset) {
    uint32_t value = 0;
    if (inVsc(core, offset))
        enter(core, "VSC read",
              [&] { value = core->device.frontEnd().vendorCapabilityRead(offset); });
    return value;
}

void pib_core_vsc_write(pib_core *core, uint32_t offset, uint32_t value) {
    if (inVsc(core, offset))
        enter(core, "VSC write",
              [&] { core->device.frontEnd().vendorCapabilityWrite(offset, value); });
}

void pib_core_pci_identity(const pib_core *core, pib_pci_identity *identity) {
    *identity = core->device.pciIdentity();
}

void pib_core_port_connected(pib_core *core, unsigned port, int connected) {
    if (core->busy) {
        if (core->laterLinks.size() < 2 * PIB_MAX_PORTS) // the last change of each port is enough
            guarded(core, [&] { core->laterLinks.emplace_back(port, connected != 0); });
        return;
    }
    enter(core, "link change", [&] { core->device.portConnected(port, connected != 0); });
}

void pib_core_port_receive(pib_core *core, unsigned port, const void *buf, size_t len) {
    enter(core, "port receive", [&] {
        core->device.portReceive(port, std::span(static_cast<const uint8_t *>(buf), len));
    });
}

void pib_core_timer_expired(pib_core *core) {
    enter(core, "timer", [&] { core->device.timerExpired(); });
}

void pib_core_run(pib_core *core) {
    enter(core, "run", [&] { core->device.run(); });
}

void pib_core_inject_fatal(pib_core *core, const char *reason) {
    enter(core, "fatal error injection", [&] { core->device.fatal(reason ? reason : "injected"); });
}

void pib_core_port_writable(pib_core *core, unsigned port) {
    enter(core, "port writable", [&] { core->device.portWritable(port); });
}

void pib_core_port_bell(pib_core *core, unsigned port) {
    enter(core, "port doorbell", [&] { core->device.portBell(port); });
}

int pib_core_inspect(pib_core *core, const char *what, int json, char **answer) {
    return answered(answer, [&](std::string *text) {
        std::optional<pib::Json> state = core->device.inspect(what ? what : "", text);
        if (!state)
            return false;
        *text = json ? state->dump(-1, ' ', false, pib::Json::error_handler_t::replace)
                     : pib::inspectionText(*state);
        return true;
    });
}

int pib_core_inject(pib_core *core, const char *injection, char **answer) {
    return answered(answer, [&](std::string *text) {
        bool ok = false;
        enter(core, "injection",
              [&] { ok = core->device.inject(injection ? injection : "", text); });
        return ok;
    });
}

int pib_core_save(pib_core *core, void **state, size_t *len, char **error) {
    *state = nullptr;
    *len = 0;
    std::vector<uint8_t> bytes;
    const int result = answered(error, [&](std::string *text) {
        bool ok = false;
        enter(core, "save", [&] { ok = core->device.save(&bytes, text); });
        if (!ok && text->empty())
            *text = "the device refused: busy, or an internal error";
        return ok;
    });
    if (result != 0)
        return -1;
    void *copy = std::malloc(bytes.size() ? bytes.size() : 1);
    if (!copy)
        return -1;
    std::memcpy(copy, bytes.data(), bytes.size());
    *state = copy;
    *len = bytes.size();
    return 0;
}

int pib_core_load(pib_core *core, const void *state, size_t len, char **error) {
    return answered(error, [&](std::string *text) {
        bool ok = false;
        const std::span bytes(static_cast<const uint8_t *>(state), state ? len : 0);
        enter(core, "load", [&] { ok = core->device.load(bytes, text); });
        if (!ok && text->empty())
            *text = "the device refused: busy, or an internal error";
        return ok;
    });
}

void pib_core_moving(pib_core *core) {
    enter(core, "moving", [&] { core->device.moving(); });
}

void pib_core_move_failed(pib_core *core) {
    enter(core, "move failed", [&] { core->device.moveFailed(); });
}

int pib_core_capture(pib_core *core, unsigned port, const char *path, uint64_t limit,
                     char **answer) {
    return answered(answer, [&](std::string *text) {
        bool ok = false;
        enter(core, "capture", [&] { ok = core->device.capture(port, path, limit, text); });
        return ok;
    });
}

} // extern "C"
