// SPDX-License-Identifier: GPL-2.0-or-later
// The core's view of its host: a thin, typed wrapper over pib_host_ops.
#pragma once

#include <bit>
#include <cstdarg>
#include <cstdint>
#include <initializer_list>
#include <span>
#include <string>
#include <type_traits>

#include "conditions.hh"
#include "pib_core.h"

namespace pib {

// The core reads and writes pib_hw.h's structures in guest memory by
// memcpy, without swapping: it models the device on little-endian hosts.
static_assert(std::endian::native == std::endian::little,
              "the device core uses pib_hw.h's little-endian layouts in place");

class Host {
  public:
    Host(const pib_host_ops &ops, void *opaque) : ops_(ops), opaque_(opaque) {}

    // Reports guest error `error` (an err:: condition of conditions.hh
    // that is the guest's), the detail printf-style: formatted only if the
    // host reports it.
    [[gnu::format(printf, 3, 4)]] void guestError(const err::Condition &error, const char *fmt,
                                                  ...) const;
    [[gnu::format(printf, 3, 0)]] void vguestError(const err::Condition &error, const char *fmt,
                                                   va_list args) const;
    // While a saved state is loaded, its objects are created by the code
    // of the commands that create them: what such code would report as
    // the guest's error is the stream's, and goes to *why (the first one
    // only) instead of the guest's log, until the capture ends.
    void captureGuestErrors(std::string *why) const { captured_ = why; }
    // Trace events: trace.hh's typed functions call these.
    bool eventEnabled(unsigned event) const {
        return ops_.event && (!ops_.event_enabled || ops_.event_enabled(opaque_, event));
    }
    void event(unsigned event, std::initializer_list<uint64_t> args) const {
        ops_.event(opaque_, event, args.begin());
    }
    static uint64_t eventArg(const char *s) { return reinterpret_cast<uintptr_t>(s); }
    static uint64_t eventArg(uint64_t v) { return v; }

    // DMA; false when the guest address range is not accessible.
    bool dmaRead(uint64_t addr, void *buf, uint64_t len) const;
    bool dmaWrite(uint64_t addr, const void *buf, uint64_t len) const;
    // Eight bytes stored at once at an 8-aligned address (pib_host_ops.dma_store64).
    bool dmaStore64(uint64_t addr, std::span<const uint8_t, 8> bytes) const;
    // A ring entry (CQE, EQE) whose owner or phase bit is in byte
    // `ownerByte`: every other byte first, then that byte alone. A driver
    // polling the bit never sees it flip before the rest of the entry,
    // since the host lands DMA writes in the order they are made
    // (pib_host_ops.dma_write); one write would leave the order to memcpy.
    bool dmaWriteOwnerLast(uint64_t addr, std::span<const uint8_t> entry, size_t ownerByte) const;
    template <class T> bool dmaRead(uint64_t addr, T &obj) const {
        static_assert(std::is_trivially_copyable_v<T>);
        return dmaRead(addr, &obj, sizeof(obj));
    }
    template <class T> bool dmaWrite(uint64_t addr, const T &obj) const {
        static_assert(std::is_trivially_copyable_v<T>);
        return dmaWrite(addr, &obj, sizeof(obj));
    }
    // Guest memory to read in place (see pib_host_ops.dma_map_read), or
    // nullptr: then dmaRead.
    const uint8_t *mapForRead(uint64_t addr, uint64_t len) const;
    void unmapForRead(const uint8_t *ptr, uint64_t len) const;
    void msixNotify(unsigned vector) const;
    // False when the host's queue for the port is full (PIB_PORT_SEND_FULL).
    bool portSend(unsigned port, std::span<const uint8_t> bytes) const;
    void portDisconnect(unsigned port) const;
    // Ring cables (link_rings.hh): whether the host can pass descriptors
    // on its streams and watch doorbells; sending bytes with descriptors,
    // after all the port's stream queued before (false when they cannot
    // go); asking for pib_core_port_bell() while `fd` is readable (-1:
    // no more).
    bool passesDescriptors() const { return ops_.port_send_fds && ops_.port_watch; }
    bool portSendDescriptors(unsigned port, std::span<const uint8_t> bytes,
                             std::span<const int> fds) const;
    void portWatch(unsigned port, int fd) const;
    // What a stream cable still carries each way (pib_host_ops.port_backlog):
    // bytes the switch has not taken, and bytes not yet given the core.
    struct StreamBacklog {
        uint64_t untaken = 0;
        uint64_t unread = 0;
    };
    StreamBacklog portBacklog(unsigned port) const;
    // The transport clock, and the one timer the core asks the host for.
    uint64_t clockNs() const;
    void armTimer(uint64_t deadlineNs) const;
    // Asks for a pib_core_run() call from the host's main loop.
    void schedule() const;
    static constexpr uint64_t kNever = UINT64_MAX;

  private:
    static std::string vformat(const char *fmt, va_list args);

    pib_host_ops ops_;
    void *opaque_;
    mutable std::string *captured_ = nullptr;
};

} // namespace pib
