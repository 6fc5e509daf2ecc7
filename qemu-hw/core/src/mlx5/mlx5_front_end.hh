// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX personality (docs/mlx5.md): BAR0 holds the initialization
// segment and, from page 3, the UAR pages; commands go through the
// command queue in guest memory, and events come back in EQs.
#pragma once

#include <functional>

#include "front_end.hh"
#include "host.hh"
#include "mlx5_command_queue.hh"
#include "mlx5_commands.hh"
#include "mlx5_event_queues.hh"
#include "mlx5_init_segment.hh"
#include "mlx5_uars.hh"
#include "mlx5_vsc.hh"
#include "object_tables.hh"
#include "pib_core.h"

namespace pib::mlx5 {

class Mlx5FrontEnd final : public FrontEnd {
  public:
    Mlx5FrontEnd(const pib_core_config &config, const Host &host, CoreParts core);

    pib_pci_identity pciIdentity() const override;
    uint64_t barSize(int bar) const override;
    uint64_t barRead(int bar, uint64_t offset, unsigned size) override;
    void barWrite(int bar, uint64_t offset, uint64_t value, unsigned size) override;
    uint32_t vendorCapabilitySize() const override { return VendorCapability::kSize; }
    uint32_t vendorCapabilityRead(uint32_t offset) override { return vsc_.read(offset); }
    void vendorCapabilityWrite(uint32_t offset, uint32_t value) override {
        vsc_.write(offset, value);
    }
    bool initialized() const override { return commands_.initialized(); }
    void forEachEq(const std::function<void(const EqView &)> &each) const override {
        eqs_.forEachView(each);
    }
    bool stopEq(uint32_t eqn, bool stop) override { return eqs_.stop(eqn, stop); }
    size_t doorbellPages() const override { return uars_.givenCount(); }
    CommandWords commandWords() const override { return Commands::commandWords(); }
    const char *unsaved() const override { return eqs_.anyStopped() ? "a stopped EQ" : nullptr; }
    void reset() override;
    void setFatal() override;
    // The device section's INIT_HCA flag is pib-hca's: ConnectX saves
    // its function's state with its commands (mlx5_state.cc).
    void saveFunction(StateWriter &w) const override { w.boolean(false); }
    void loadFunction(StateReader &r) override { r.boolean("INIT_HCA done"); }
    void saveObjects(StateWriter &w) const override;
    void loadObjects(StateReader &r) override;
    void save(StateWriter &w) const override;
    void load(StateReader &r) override;

  private:
    uint64_t readInitSegment(uint64_t offset, unsigned size);
    void writeInitSegment(uint64_t offset, uint64_t value, unsigned size);
    void writeUar(uint32_t index, uint32_t offset, uint64_t value, unsigned size);
    void ringCommands(uint32_t slots);

    const Host &host_;
    uint64_t bar0Size_;
    InitSegment iseg_;
    Uars uars_;
    EventQueues eqs_;
    CompletionQueues cqs_;
    QueuePairs qps_;
    Commands commands_;
    CommandQueue queue_;
    VendorCapability vsc_;
};

} // namespace pib::mlx5
