// SPDX-License-Identifier: GPL-2.0-or-later
// One pib-hca adapter: the components of the core, composed, and the
// host's calls routed to the one that owns each (docs/architecture.md).
#pragma once

#include <bitset>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "core_parts.hh"
#include "data_path.hh"
#include "event_writer.hh"
#include "front_end.hh"
#include "host.hh"
#include "injection.hh"
#include "inspect.hh"
#include "link.hh"
#include "memory.hh"
#include "object_tables.hh"
#include "pib_core.h"
#include "port_agents.hh"
#include "ports.hh"
#include "scheduler.hh"

namespace pib {

class Device {
  public:
    Device(const pib_core_config &config, const pib_host_ops &ops, void *opaque);
    Device(const Device &) = delete;
    Device &operator=(const Device &) = delete;

    void reset(const char *reason);
    uint64_t barRead(int bar, uint64_t offset, unsigned size);
    void barWrite(int bar, uint64_t offset, uint64_t value, unsigned size);
    uint64_t barSize(int bar) const;
    pib_pci_identity pciIdentity() const { return front_->pciIdentity(); }
    FrontEnd &frontEnd() { return *front_; }
    const FrontEnd &frontEnd() const { return *front_; }
    void portConnected(unsigned port, bool connected);
    void portReceive(unsigned port, std::span<const uint8_t> bytes);
    void timerExpired();
    void run();
    void portWritable(unsigned port);
    void portBell(unsigned port);
    // An internal error (an exception or a broken invariant in the core):
    // the device stops until the driver resets it. STATUS reads FATAL,
    // the driver gets one DEVICE_FATAL event, and commands, doorbells,
    // packets and timers do nothing meanwhile (docs/prm.md, "Fatal
    // errors"). Safe to call in any state.
    void fatal(const char *reason);
    bool isFatal() const { return fatal_; }

    // Host-side management (docs/user-guide.md): the device's state, see
    // Inspector; packet capture on a port (`path` null: stop). False with
    // the reason in `answer` when it cannot.
    std::optional<Json> inspect(std::string_view what, std::string *error) const;
    bool capture(unsigned port, const char *path, uint64_t limit, std::string *answer);
    // A test facility (injection.hh): arms it or does it at once.
    bool inject(std::string_view line, std::string *answer);

    // The device's state for migration and snapshots (device_state.cc,
    // docs/migration.md), while the VM is stopped. save() is false with
    // the reason in *why when the device holds state this version does
    // not save yet. load() replaces the state of a device of the same
    // configuration with a saved one; bytes it cannot trust are refused
    // (false, the reason in *why) and leave the device as after reset.
    bool save(std::vector<uint8_t> *state, std::string *why) const;
    bool load(std::span<const uint8_t> state, std::string *why);
    // The VM stops to move, or runs here again after its move failed
    // (Link::moving, docs/wire.md "A device that moves").
    void moving();
    void moveFailed();

  private:
    // Every call from the host is one event of bounded work (scheduler.cc).
    template <class Work> auto event(Work &&work);

    const pib_core_config config_;
    const Host host_;
    // State the components share, then the components, each given only
    // what it works with (in construction order).
    ObjectTables objects_;
    Ports ports_;
    ArmedInjections injections_;
    OutstandingMemory outstanding_;
    EventWriter events_;
    MemoryAccess memory_;
    // The data path sends through the scheduler, which resumes the data
    // path's work; the data path is built first, so that the scheduler
    // sees it as its ScheduledEngine only once it exists.
    DataPath dataPath_;
    Scheduler scheduler_;
    PortAgents agents_;
    // The personality the driver talks to (config_.personality).
    std::unique_ptr<FrontEnd> front_;
    std::vector<std::unique_ptr<Link>> links_; // index: port - 1
    PortLinks cables_{links_};
    bool fatal_ = false;
    Inspector inspector_{
        {config_, objects_, ports_, links_, *front_, injections_, outstanding_, fatal_}};

    CoreParts coreParts();
    std::unique_ptr<FrontEnd> makeFrontEnd();
    // The one reset path of both personalities' core parts (a device
    // reset, CLOSE_HCA, TEARDOWN_HCA's objects): every object ends, and
    // the data path holds none; the ports go back to power-on, and the
    // links of those the SM had configured train again.
    void resetCore();
    void endObjects();
    void resetPorts();
    // Port numbers 1..PIB_MAX_PORTS.
    using PortSet = std::bitset<PIB_MAX_PORTS + 1>;
    void retrainLinks(const PortSet &configured);
    void linkEvent(unsigned port, Link::Event e);
    void packetReceived(unsigned port, std::span<const uint8_t> packet,
                        std::span<const uint8_t> head);
    bool raiseEvent(const Injection &injection, std::string *answer);
    const char *unsaved() const;
    void loadState(StateReader &r);
    bool stopOrResume(const Injection &injection, std::string *answer);
};

} // namespace pib
