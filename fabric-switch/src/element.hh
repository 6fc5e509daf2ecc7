// SPDX-License-Identifier: GPL-2.0-or-later
// What a switch process's ports lead into: one switch, or a simulated
// fabric of many switches and CAs whose free switch ports are the
// process's ports. The server (server.hh) sees only this narrow port.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "state_archive.hh"
#include "switch.hh"

namespace pib::fabric {

class Element {
  public:
    virtual ~Element() = default;

    // The ports the server serves, 1..ports().
    virtual unsigned ports() const = 0;
    // The GUID of the node a port belongs to (the server's HELLO says it).
    virtual uint64_t nodeGuid(unsigned port) const = 0;
    // The number a server port has on its node.
    virtual unsigned portNumber(unsigned port) const = 0;
    // The switch port a server port is.
    virtual const SwitchPort &port(unsigned n) const = 0;

    // As Switch::receive, linkChanged, takeLinkResets, repeatTraps and
    // discarded, on the server's port numbers.
    virtual std::vector<Transmit> receive(unsigned port, std::span<const uint8_t> bytes,
                                          const Forwarder &send) = 0;
    // A packet whose VCRC a forwarding thread found good (iba::vcrcGood):
    // an element may skip that check.
    virtual std::vector<Transmit> receiveVcrcGood(unsigned port, std::span<const uint8_t> bytes,
                                                  const Forwarder &send) {
        return receive(port, bytes, send);
    }
    virtual std::vector<Transmit> linkChanged(unsigned port, bool up) = 0;
    virtual std::vector<unsigned> takeLinkResets() = 0;
    virtual std::vector<Transmit> repeatTraps() = 0;
    virtual void discarded(unsigned port, size_t bytes) = 0;

    // A control socket command of the element's own (docs/wire.md):
    // its answer, with what it sends into `out`; nullopt for a command it
    // does not have. commandNames() lists them for the error that names
    // every command (", link, fabric").
    virtual std::optional<std::string> command(std::string_view, std::string_view,
                                               std::vector<Transmit> &) {
        return std::nullopt;
    }
    virtual std::string commandNames() const { return ""; }

    // What an element does at times of its own (a simulated fabric's faults
    // on its inner links: held packets, flaps): whatever is due now. Returns
    // what leaves the element, and the nanoseconds until it is next due in
    // `*waitNs` (UINT64_MAX: nothing waits).
    virtual std::vector<Transmit> serviceTimers(uint64_t *waitNs) {
        *waitNs = UINT64_MAX;
        return {};
    }
    // The control socket's `status` lines of faults of the element's own.
    virtual std::string faultStatus() const { return ""; }

    // A fabric snapshot's part (switch_state.cc). saves() is false for an
    // element that has none; load() refuses a state it cannot take and
    // is then left as it was.
    virtual bool saves() const = 0;
    virtual void save(StateWriter &w) const = 0;
    virtual bool load(StateReader &r) = 0;
};

// One switch, its ports the server's.
class SwitchElement final : public Element {
  public:
    explicit SwitchElement(Switch &sw) : sw_(sw) {}
    // One it owns.
    explicit SwitchElement(std::unique_ptr<Switch> sw) : owned_(std::move(sw)), sw_(*owned_) {}

    unsigned ports() const override { return sw_.config().ports; }
    uint64_t nodeGuid(unsigned) const override { return sw_.config().guid; }
    unsigned portNumber(unsigned port) const override { return port; }
    const SwitchPort &port(unsigned n) const override { return sw_.port(n); }
    std::vector<Transmit> receive(unsigned port, std::span<const uint8_t> bytes,
                                  const Forwarder &send) override {
        return sw_.receive(port, bytes, send);
    }
    std::vector<Transmit> receiveVcrcGood(unsigned port, std::span<const uint8_t> bytes,
                                          const Forwarder &send) override {
        return sw_.receive(port, bytes, send, /*vcrcGood=*/true);
    }
    std::vector<Transmit> linkChanged(unsigned port, bool up) override {
        return sw_.linkChanged(port, up);
    }
    std::vector<unsigned> takeLinkResets() override { return sw_.takeLinkResets(); }
    std::vector<Transmit> repeatTraps() override { return sw_.repeatTraps(); }
    void discarded(unsigned port, size_t bytes) override { sw_.discarded(port, bytes); }
    bool saves() const override { return true; }
    void save(StateWriter &w) const override { sw_.save(w); }
    bool load(StateReader &r) override { return sw_.load(r); }

  private:
    std::unique_ptr<Switch> owned_;
    Switch &sw_;
};

} // namespace pib::fabric
