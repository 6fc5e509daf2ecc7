// SPDX-License-Identifier: GPL-2.0-or-later
#include "host.hh"

#include <cstdio>

#include "invariant.hh"

namespace pib {

std::string Host::vformat(const char *fmt, va_list args) {
    char buf[256];
    std::vsnprintf(buf, sizeof(buf), fmt, args);
    return buf;
}

void Host::guestError(const err::Condition &error, const char *fmt, ...) const {
    va_list args;
    va_start(args, fmt);
    vguestError(error, fmt, args);
    va_end(args);
}

void Host::vguestError(const err::Condition &error, const char *fmt, va_list args) const {
    PIB_INVARIANT(error.isGuestError());
    if (captured_) {
        if (captured_->empty())
            *captured_ = vformat(fmt, args);
        return;
    }
    const unsigned token = error.guestError;
    if (!ops_.guest_error ||
        (ops_.guest_error_enabled && !ops_.guest_error_enabled(opaque_, token)))
        return;
    // Each detail names the rule it broke: "... (prm §4.2)".
    const std::string detail = vformat(fmt, args) + " (" + pib_guest_error_rule(token) + ")";
    ops_.guest_error(opaque_, token, detail.c_str());
}

} // namespace pib

namespace pib {

bool Host::dmaRead(uint64_t addr, void *buf, uint64_t len) const {
    if (addr + len < addr)
        return false; // wraps around the address space
    return ops_.dma_read && ops_.dma_read(opaque_, addr, buf, len) == 0;
}

bool Host::dmaWrite(uint64_t addr, const void *buf, uint64_t len) const {
    if (addr + len < addr)
        return false;
    return ops_.dma_write && ops_.dma_write(opaque_, addr, buf, len) == 0;
}

bool Host::dmaStore64(uint64_t addr, std::span<const uint8_t, 8> bytes) const {
    if (addr % 8 || !ops_.dma_store64)
        return dmaWrite(addr, bytes.data(), bytes.size());
    uint64_t value = 0;
    for (size_t i = 0; i < bytes.size(); ++i)
        value |= uint64_t{bytes[i]} << (8 * i);
    return ops_.dma_store64(opaque_, addr, value) == 0;
}

bool Host::dmaWriteOwnerLast(uint64_t addr, std::span<const uint8_t> entry,
                             size_t ownerByte) const {
    const std::span<const uint8_t> before = entry.first(ownerByte);
    const std::span<const uint8_t> after = entry.subspan(ownerByte + 1);
    return (before.empty() || dmaWrite(addr, before.data(), before.size())) &&
           (after.empty() || dmaWrite(addr + ownerByte + 1, after.data(), after.size())) &&
           dmaWrite(addr + ownerByte, &entry[ownerByte], 1);
}

const uint8_t *Host::mapForRead(uint64_t addr, uint64_t len) const {
    if (addr + len < addr || !ops_.dma_map_read || !ops_.dma_unmap_read)
        return nullptr;
    return static_cast<const uint8_t *>(ops_.dma_map_read(opaque_, addr, len));
}

void Host::unmapForRead(const uint8_t *ptr, uint64_t len) const {
    ops_.dma_unmap_read(opaque_, ptr, len);
}

bool Host::portSend(unsigned port, std::span<const uint8_t> bytes) const {
    return !ops_.port_send ||
           ops_.port_send(opaque_, port, bytes.data(), bytes.size()) == PIB_PORT_SEND_OK;
}

void Host::schedule() const {
    if (ops_.schedule)
        ops_.schedule(opaque_);
}

bool Host::portSendDescriptors(unsigned port, std::span<const uint8_t> bytes,
                               std::span<const int> fds) const {
    return passesDescriptors() && ops_.port_send_fds(opaque_, port, bytes.data(), bytes.size(),
                                                     fds.data(), fds.size()) == 0;
}

void Host::portWatch(unsigned port, int fd) const {
    if (ops_.port_watch)
        ops_.port_watch(opaque_, port, fd);
}

Host::StreamBacklog Host::portBacklog(unsigned port) const {
    StreamBacklog backlog;
    if (ops_.port_backlog)
        ops_.port_backlog(opaque_, port, &backlog.untaken, &backlog.unread);
    return backlog;
}

void Host::portDisconnect(unsigned port) const {
    if (ops_.port_disconnect)
        ops_.port_disconnect(opaque_, port);
}

uint64_t Host::clockNs() const {
    return ops_.clock_ns ? ops_.clock_ns(opaque_) : 0;
}

void Host::armTimer(uint64_t deadlineNs) const {
    if (ops_.timer_arm)
        ops_.timer_arm(opaque_, deadlineNs);
}

void Host::msixNotify(unsigned vector) const {
    if (ops_.msix_notify)
        ops_.msix_notify(opaque_, vector);
}

} // namespace pib
