// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX commands this device executes (docs/mlx5.md §4): a table
// of opcodes, each with its name, the input and output it needs, the
// function state it runs in and its handler. A handler checks its input
// and either answers or names the condition that refuses it; the table
// turns that into the status and syndrome of the output.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "core_parts.hh"
#include "data_path.hh"
#include "event_writer.hh"
#include "host.hh"
#include "injection.hh"
#include "limits.hh"
#include "memory_regions.hh"
#include "mlx5_completion_queues.hh"
#include "mlx5_dc_targets.hh"
#include "mlx5_event_queues.hh"
#include "mlx5_general_objects.hh"
#include "mlx5_hca_caps.hh"
#include "mlx5_pages.hh"
#include "mlx5_queue_pairs.hh"
#include "mlx5_registers.hh"
#include "mlx5_shared_receive_queues.hh"
#include "mlx5_uars.hh"
#include "mlx5_user_contexts.hh"
#include "mlx5_user_memories.hh"
#include "object_tables.hh"
#include "pib_core.h"
#include "port_agents.hh"
#include "ports.hh"
#include "state_archive.hh"

namespace pib::mlx5 {

class Commands {
  public:
    // Besides the core's parts, the front end's UAR pages, EQs, CQs and
    // QPs, which doorbells reach too.
    Commands(const pib_core_config &config, const Host &host, Uars &uars, EventQueues &eqs,
             CompletionQueues &cqs, QueuePairs &qps, CoreParts core)
        : config_(config), host_(host), caps_(config.num_ports), pages_(host), uars_(uars),
          eqs_(eqs), cqs_(cqs), qps_(qps), core_(std::move(core)),
          regions_(host, core_.objects, kRefusals), srqs_(host, core_.objects, core_.srqEnds),
          dcts_(host, core_.objects, core_.ports, core_.dataPath, eqs), registers_(core_.ports) {
        core_.dataPath.keys().requireBindRight(false); // no mkc bit for it (docs/mlx5.md §10.5)
    }

    // Runs the command whose input is `in`; its output (status and
    // syndrome included) goes to `out`.
    void execute(unsigned slot, std::span<const uint8_t> in, std::span<uint8_t> out);
    void reset();
    // Refuses every command until reset().
    void setFatal() { fatal_ = true; }
    // The device's state (mlx5_state.cc): the objects the commands made,
    // each made again on loading by the command that made it, and the
    // function's own (its life, capabilities, pages, registers).
    void saveObjects(StateWriter &w) const;
    void loadObjects(StateReader &r);
    void save(StateWriter &w) const;
    void load(StateReader &r);
    // The name of `opcode` ("unknown" for one the table does not have).
    static const char *name(uint16_t opcode);
    // The opcode of the command named `name` ("CREATE_CQ"), if the table
    // has it.
    static std::optional<uint16_t> opcodeOf(std::string_view name);
    // What `inject command` names: these commands and MLX5_CMD_STAT_*.
    static CommandWords commandWords();
    // The least input `opcode` takes, its header included (0 for one the
    // table does not have): a saved state's create inputs are held to it.
    static uint32_t inputBytes(uint16_t opcode);
    // A create command's input from a saved state: refused (*r fails) when
    // shorter than the command takes, as the command queue refuses it.
    static std::vector<uint8_t> savedInput(StateReader &r, uint16_t opcode);
    // INIT_HCA ran, and no TEARDOWN_HCA since.
    bool initialized() const { return state_ == State::kInitialized; }

  private:
    // The function's life: ENABLE_HCA, INIT_HCA, TEARDOWN_HCA, DISABLE_HCA.
    enum class State : uint8_t { kDisabled, kEnabled, kInitialized };
    // What a handler is given.
    struct Request {
        std::span<const uint8_t> in;
        std::span<uint8_t> out;
        uint16_t opMod;
        uint16_t opcode;
    };
    using Handler = const err::Condition *(Commands::*)(const Request &);
    struct Spec {
        uint16_t opcode;
        const char *name;
        uint32_t inBytes;  // at least this much input, header included
        uint32_t outBytes; // and output
        State needs;       // the least state it runs in
        Handler handler;   // nullptr: known by name, not executed
    };
    static const Spec *find(uint16_t opcode);
    // Whether the kernel (uid 0) issued `r`: a query shows it alone the
    // guest physical addresses of an object (docs/mlx5.md §16).
    static bool fromKernel(const Request &r) { return get(r.in, kUid) == uid::kKernel; }
    static const std::array<Spec, 69> kTable;

    [[gnu::format(printf, 3, 4)]] const err::Condition *fail(const err::Condition &why,
                                                             const char *fmt, ...) const;
    const err::Condition *admit(const Spec *spec, uint16_t opcode, const Request &r) const;
    void answerFailed(unsigned slot, const Request &r, uint8_t status, uint32_t syndrome);
    const err::Condition *notThisFunction(const Request &r, const char *command) const;
    // User contexts (mlx5_commands_uctx.cc): whether the command's uid may
    // issue it, and may touch the object it names.
    const err::Condition *admitCaller(const Spec &spec, const Request &r) const;
    // The owner of the object of `kind` that `field` of input `in` names.
    std::optional<Owner> ownerOf(uint8_t kind, std::span<const uint8_t> in, Field field) const;
    void forEachOwned(
        const std::function<void(const char *what, uint64_t number, Owner owner)> &f) const;
    uint32_t objectsOf(Owner uid) const;
    const err::Condition *createUctx(const Request &r);
    const err::Condition *destroyUctx(const Request &r);
    const err::Condition *createUmem(const Request &r);
    const err::Condition *destroyUmem(const Request &r);
    const err::Condition *createGeneralObject(const Request &r);
    const err::Condition *modifyGeneralObject(const Request &r);
    const err::Condition *queryGeneralObject(const Request &r);
    const err::Condition *destroyGeneralObject(const Request &r);
    // Rings and doorbell records in UMEMs (mlx5_commands_umem.cc): where
    // a create command's input names them.
    struct UmemFields {
        Field ringValid, ringId, ringOffset;
        Field recordValid, recordId, record; // record: the offset in its UMEM
        Field logPageSize, pageOffset;       // the ring's, as the page list places it
        bool deviceWritesRing;               // a CQ's: its UMEM must be writable
    };
    static const UmemFields kCqUmemFields, kQpUmemFields;
    const err::Condition *usableUmem(const Request &r, Field id, const char *what,
                                     const UserMemory **umem) const;
    const err::Condition *placeInUmems(const Request &r, const UmemFields &f,
                                       std::vector<uint8_t> *placed, UmemHold *held) const;
    // A key over a UMEM (mlx5_commands_umem.cc): made as a key with its
    // pages, the UMEM's, which it holds.
    const err::Condition *createUmemMkey(const Request &r);
    const err::Condition *placeKeyInUmem(const Request &r, std::vector<uint8_t> *placed) const;

    const err::Condition *queryHcaCap(const Request &r);
    const err::Condition *setHcaCap(const Request &r);
    const err::Condition *queryAdapter(const Request &r);
    const err::Condition *initHca(const Request &r);
    const err::Condition *teardownHca(const Request &r);
    const err::Condition *enableHca(const Request &r);
    const err::Condition *disableHca(const Request &r);
    const err::Condition *queryPages(const Request &r);
    const err::Condition *managePages(const Request &r);
    const err::Condition *queryIssi(const Request &r);
    const err::Condition *setIssi(const Request &r);
    const err::Condition *accessRegister(const Request &r);
    const err::Condition *allocUar(const Request &r);
    const err::Condition *deallocUar(const Request &r);
    const err::Condition *createEq(const Request &r);
    const err::Condition *destroyEq(const Request &r);
    const err::Condition *createCq(const Request &r);
    const err::Condition *destroyCq(const Request &r);
    const err::Condition *queryCq(const Request &r);
    const err::Condition *modifyCq(const Request &r);
    const err::Condition *createSrq(const Request &r);
    const err::Condition *destroySrq(const Request &r);
    const err::Condition *querySrq(const Request &r);
    const err::Condition *armRq(const Request &r);
    const err::Condition *createQp(const Request &r);
    const err::Condition *destroyQp(const Request &r);
    const err::Condition *changeQpState(const Request &r);
    const err::Condition *queryQp(const Request &r);
    const err::Condition *createDct(const Request &r);
    const err::Condition *destroyDct(const Request &r);
    const err::Condition *drainDct(const Request &r);
    const err::Condition *queryDct(const Request &r);
    const err::Condition *armDct(const Request &r);
    const err::Condition *attachToMcg(const Request &r);
    const err::Condition *detachFromMcg(const Request &r);
    const err::Condition *madIfc(const Request &r);
    const err::Condition *queryHcaVportContext(const Request &r);
    const err::Condition *createMkey(const Request &r);
    const err::Condition *checkKeyOwners(const Request &r) const;
    const err::Condition *createPhysicalMkey(const Request &r);
    const err::Condition *createFreeMkey(const Request &r);
    const err::Condition *createIndirectMkey(const Request &r);
    bool isWindow(const Request &r) const;
    const err::Condition *createWindowMkey(const Request &r);
    const err::Condition *createMttMkey(const Request &r);
    const err::Condition *createKsmMkey(const Request &r);
    const err::Condition *freeKeyContext(const Request &r, pib_mr_context *ctx) const;
    const err::Condition *querySpecialContexts(const Request &r);
    const err::Condition *destroyMkey(const Request &r);
    const err::Condition *pageFaultResume(const Request &r);
    std::vector<uint8_t> mkeyInput(const MemoryRegion &mr) const;
    void saveKeys(StateWriter &w) const;
    void checkLoadedOwners(StateReader &r) const;
    void loadKey(StateReader &r, uint32_t number);
    void loadWindow(StateReader &r, uint32_t number);
    void saveIndirectLayout(StateWriter &w, const MemoryRegion &mr) const;
    std::optional<IndirectLayout> loadIndirectLayout(StateReader &r) const;
    bool restoreIndirect(StateReader &r, MemoryRegion &mr, const pib_mr_context &ctx, bool valid,
                         std::optional<IndirectLayout> layout);
    const err::Condition *allocPd(const Request &r);
    const err::Condition *deallocPd(const Request &r);
    const err::Condition *allocXrcd(const Request &r);
    const err::Condition *deallocXrcd(const Request &r);
    const err::Condition *allocQCounter(const Request &r);
    const err::Condition *deallocQCounter(const Request &r);
    const err::Condition *queryQCounter(const Request &r);
    // An object other objects hold by number (PD, XRC domain, Q counter),
    // its number in `number` of the output, and of the input to release.
    template <class T>
    const err::Condition *allocHeld(ObjectTable<T> &table, const Request &r, const char *what,
                                    Field number);
    template <class T>
    const err::Condition *releaseHeld(ObjectTable<T> &table, const Request &r, const char *what,
                                      Field number);

    const pib_core_config &config_;
    const Host &host_;
    HcaCaps caps_;
    FunctionPages pages_;
    Uars &uars_;
    EventQueues &eqs_;
    CompletionQueues &cqs_;
    QueuePairs &qps_;
    CoreParts core_;
    MemoryRegions regions_;
    SharedReceiveQueues srqs_;
    DcTargets dcts_;
    Registers registers_; // ACCESS_REG's
    UserContexts uctxs_{limits::kMaxUserContexts};
    UserMemories umems_{host_};
    GeneralObjects generalObjects_{host_, core_.objects};
    static const Refusals kRefusals;
    State state_ = State::kDisabled;
    bool fatal_ = false;
};

} // namespace pib::mlx5
