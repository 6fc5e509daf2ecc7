// SPDX-License-Identifier: GPL-2.0-or-later
// The pib-hca personality (docs/prm.md): BAR0's registers and command
// interface, BAR2's doorbell pages. It owns its parts as the ConnectX
// front end owns its own: the command processor, the EQs and their EQE
// and CQE layouts (the core's EventCodec), the WQE reader (the core's
// WqeFormat), and installs the last two into the core it is given.
#pragma once

#include <functional>

#include "core_parts.hh"
#include "front_end.hh"
#include "host.hh"
#include "pib_commands.hh"
#include "pib_doorbell_pages.hh"
#include "pib_event_queues.hh"
#include "pib_register_file.hh"
#include "pib_wqe_reader.hh"

namespace pib {

class PibFrontEnd final : public FrontEnd {
  public:
    // `requestReset` is the device's reset, which the reset register asks for.
    PibFrontEnd(const pib_core_config &config, const Host &host, const CoreParts &core,
                std::function<void()> requestReset);

    pib_pci_identity pciIdentity() const override;
    uint64_t barSize(int bar) const override;
    uint64_t barRead(int bar, uint64_t offset, unsigned size) override;
    void barWrite(int bar, uint64_t offset, uint64_t value, unsigned size) override;
    bool initialized() const override { return commands_.initialized(); }
    void forEachEq(const std::function<void(const EqView &)> &each) const override;
    bool stopEq(uint32_t eqn, bool stop) override;
    size_t doorbellPages() const override { return objects_.uars.size(); }
    CommandWords commandWords() const override { return CommandProcessor::commandWords(); }
    void reset() override;
    void setFatal() override;
    void saveFunction(StateWriter &w) const override { w.boolean(commands_.initialized()); }
    void loadFunction(StateReader &r) override {
        commands_.restoreInitialized(r.boolean("INIT_HCA done"));
    }
    void saveObjects(StateWriter &w) const override { commands_.saveObjects(w); }
    void loadObjects(StateReader &r) override { commands_.loadObjects(r); }
    void save(StateWriter &w) const override { registers_.save(w); }
    void load(StateReader &r) override { registers_.load(r); }

  private:
    const Host &host_;
    ObjectTables &objects_;
    PibEventQueues events_;
    WqeReader wqes_;
    CommandProcessor commands_;
    RegisterFile registers_;
    DoorbellPages doorbells_;
    bool fatal_ = false; // doorbells do nothing until reset()
};

} // namespace pib
