// SPDX-License-Identifier: GPL-2.0-or-later
// The pib-hca personality (docs/prm.md): BAR0's registers and command
// interface, BAR2's doorbell pages.
#pragma once

#include <functional>

#include "commands.hh"
#include "data_path.hh"
#include "doorbell_pages.hh"
#include "front_end.hh"
#include "host.hh"
#include "pib_event_queues.hh"
#include "register_file.hh"

namespace pib {

class PibFrontEnd final : public FrontEnd {
  public:
    PibFrontEnd(const pib_core_config &config, const Host &host, CommandProcessor &commands,
                PibEventQueues &events, ObjectTables &objects, DataPath &dataPath,
                std::function<void()> requestReset)
        : host_(host), objects_(objects), commands_(commands),
          registers_(config, host, commands, events, std::move(requestReset)),
          doorbells_(config.doorbell_pages, host, objects, dataPath) {}

    pib_pci_identity pciIdentity() const override;
    uint64_t barSize(int bar) const override;
    uint64_t barRead(int bar, uint64_t offset, unsigned size) override;
    void barWrite(int bar, uint64_t offset, uint64_t value, unsigned size) override;
    bool initialized() const override { return commands_.initialized(); }
    void forEachEq(const std::function<void(const EqView &)> &each) const override;
    bool stopEq(uint32_t eqn, bool stop) override;
    void reset() override;
    void setFatal() override;
    void saveObjects(StateWriter &w) const override { commands_.saveObjects(w); }
    void loadObjects(StateReader &r) override { commands_.loadObjects(r); }
    void save(StateWriter &w) const override { registers_.save(w); }
    void load(StateReader &r) override { registers_.load(r); }

  private:
    const Host &host_;
    ObjectTables &objects_;
    CommandProcessor &commands_;
    RegisterFile registers_;
    DoorbellPages doorbells_;
    bool fatal_ = false; // doorbells do nothing until reset()
};

} // namespace pib
