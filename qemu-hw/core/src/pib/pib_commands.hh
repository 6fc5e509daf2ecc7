// SPDX-License-Identifier: GPL-2.0-or-later
// The command processor (docs/prm.md §4): one table of commands, each
// with its name, whether it runs before INIT_HCA, and its handler. The
// handlers check every field of their mailbox, then create, change or
// destroy objects in the object tables; what a QP's new state means for
// its transport is the data path's business, MADs the port agents'.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "core_parts.hh"
#include "data_path.hh"
#include "host.hh"
#include "injection.hh"
#include "memory_regions.hh"
#include "object_tables.hh"
#include "pib_core.h"
#include "pib_hw.h"
#include "port_agents.hh"
#include "ports.hh"
#include "qp_lifecycle.hh"
#include "state_archive.hh"

namespace pib {

struct Command {
    uint16_t opcode = 0;
    uint8_t opmod = 0;
    uint32_t modifier = 0;
    uint64_t in = 0;  // input mailbox address or immediate
    uint64_t out = 0; // output mailbox address
};

struct CommandOutcome {
    uint8_t status = PIB_CMD_STATUS_OK;
    uint64_t result = 0;
    uint32_t syndrome = 0; // of the condition that failed it (conditions.hh)

    static CommandOutcome failed(const err::Condition &why) {
        return {why.cmdStatus, 0, why.syndrome};
    }
};

class CommandProcessor {
  public:
    CommandProcessor(const pib_core_config &config, const Host &host, CoreParts core);

    CommandOutcome execute(const Command &cmd);
    // INIT_HCA is needed again (the device resets the core's parts).
    void reset() { initialized_ = false; }
    bool initialized() const { return initialized_; }
    // INIT_HCA as a loaded device's saved state has it.
    void restoreInitialized(bool initialized) { initialized_ = initialized; }
    // The objects in a saved state (pib_state.cc, docs/migration.md).
    // Each loaded object is created by the code of the command that
    // creates it, so a state passes every check a guest's command does,
    // and the references between objects are counted again, not loaded.
    void saveObjects(StateWriter &w) const;
    void loadObjects(StateReader &r);
    // The opcode of the command named `name` ("CREATE_QP"), if any.
    static std::optional<uint16_t> opcodeOf(std::string_view name);
    // What `inject command` names: these commands and PIB_CMD_STATUS_*.
    static CommandWords commandWords();

    const pib_dev_cap &caps() const { return caps_; }
    // The name of a command opcode ("QUERY_PORT"), "unknown" for none.
    static const char *commandName(uint16_t opcode);

  private:
    using Handler = CommandOutcome (CommandProcessor::*)(const Command &);
    struct CommandSpec {
        uint16_t opcode;
        const char *name;
        bool beforeInit; // accepted before INIT_HCA
        Handler handler;
    };
    static const CommandSpec kCommands[];
    static const CommandSpec *findCommand(uint16_t opcode);

    // Helpers shared by the handlers.
    // Fails the command for guest error `why`, with its status and
    // syndrome; the detail is printf-style.
    CommandOutcome fail(const err::Condition &why, const char *fmt, ...)
        __attribute__((format(printf, 3, 4)));
    // Mailboxes are 8-byte aligned guest memory (docs/prm.md §4.2). A
    // mailbox that is not, or that DMA cannot reach, is reported (cmd-dma,
    // with which rule it broke); the handler then returns mailboxFailed().
    template <class T> bool readMailbox(const Command &cmd, T &obj) {
        static_assert(sizeof(T) <= PIB_MAILBOX_SIZE);
        return mailboxUsable(cmd, cmd.in, "input") &&
               (host_.dmaRead(cmd.in, obj) || mailboxUnreachable(cmd, cmd.in, "read"));
    }
    template <class T> bool writeMailbox(const Command &cmd, const T &obj) {
        static_assert(sizeof(T) <= PIB_MAILBOX_SIZE);
        return mailboxUsable(cmd, cmd.out, "output") &&
               (host_.dmaWrite(cmd.out, obj) || mailboxUnreachable(cmd, cmd.out, "written"));
    }
    bool mailboxUsable(const Command &cmd, uint64_t addr, const char *which) const;
    bool mailboxUnreachable(const Command &cmd, uint64_t addr, const char *how) const;
    static CommandOutcome mailboxFailed() { return CommandOutcome::failed(err::kCmdDma); }
    bool validRing(const pib_buf_desc &buf, uint64_t pages) const;

    // Handlers, one per opcode (commands*.cc).
    CommandOutcome queryDevCap(const Command &);
    CommandOutcome queryPort(const Command &);
    CommandOutcome initHca(const Command &);
    CommandOutcome closeHca(const Command &);
    CommandOutcome modifyPort(const Command &);
    CommandOutcome queryPkeys(const Command &);
    CommandOutcome queryGuids(const Command &);
    CommandOutcome setNodeDesc(const Command &);
    CommandOutcome madIfc(const Command &);
    CommandOutcome allocUar(const Command &);
    CommandOutcome freeUar(const Command &);
    CommandOutcome allocPd(const Command &);
    CommandOutcome deallocPd(const Command &);
    CommandOutcome allocXrcd(const Command &);
    CommandOutcome deallocXrcd(const Command &);
    template <class T> CommandOutcome allocHeld(ObjectTable<T> &table, const char *what);
    template <class T>
    CommandOutcome deallocHeld(ObjectTable<T> &table, const Command &cmd, const char *what);
    CommandOutcome allocMtt(const Command &);
    CommandOutcome freeMtt(const Command &);
    CommandOutcome writeMtt(const Command &);
    CommandOutcome createEq(const Command &);
    CommandOutcome createEq(const pib_eq_context &ctx);
    CommandOutcome destroyEq(const Command &);
    CommandOutcome queryEq(const Command &);
    CommandOutcome createCq(const Command &);
    CommandOutcome createCq(const pib_cq_context &ctx);
    CommandOutcome destroyCq(const Command &);
    CommandOutcome queryCq(const Command &);
    CommandOutcome resizeCq(const Command &);
    CommandOutcome modifyCq(const Command &);
    CommandOutcome createMr(const Command &);
    CommandOutcome createMr(const pib_mr_context &ctx);
    CommandOutcome createFastRegMr(const pib_mr_context &ctx);
    CommandOutcome insertMr(const pib_mr_context &ctx);
    std::optional<CommandOutcome> checkCqRing(const char *name, const pib_cq_context &ctx);
    CommandOutcome reregMr(const Command &);
    CommandOutcome pageFaultResume(const Command &);
    CommandOutcome createMw(const Command &);
    CommandOutcome createMw(const pib_mw_context &ctx);
    CommandOutcome destroyMw(const Command &);
    CommandOutcome queryMw(const Command &);
    CommandOutcome destroyMr(const Command &);
    CommandOutcome queryMr(const Command &);
    CommandOutcome createSrq(const Command &);
    CommandOutcome createSrq(pib_srq_context ctx);
    CommandOutcome destroySrq(const Command &);
    CommandOutcome querySrq(const Command &);
    CommandOutcome armSrq(const Command &);
    CommandOutcome resizeSrq(const Command &);
    CommandOutcome queryCounters(const Command &);
    CommandOutcome createQp(const Command &);
    CommandOutcome createQp(const pib_qp_context &ctx);
    CommandOutcome checkQpRings(const pib_qp_context &ctx, bool useSrq);
    CommandOutcome checkQpObjects(const pib_qp_context &ctx);
    CommandOutcome checkXrcSrq(const pib_srq_context &ctx);
    void holdQpObjects(const pib_qp_context &ctx, int delta);
    CommandOutcome destroyQp(const Command &);
    CommandOutcome modifyQp(const Command &);
    CommandOutcome modifyQp(QueuePair &qp, const pib_qp_attr &in);
    CommandOutcome queryQp(const Command &);
    CommandOutcome attachOrDetachMcast(const Command &);
    CommandOutcome attachOrDetachMcast(const Command &cmd, const pib_mcast &m);

    void releaseQp(QueuePair &qp);

    // Loading a saved state (pib_state.cc).
    template <class T>
    bool restore(StateReader &r, const char *what, ObjectTable<T> &table, uint32_t number,
                 const std::function<CommandOutcome()> &create);
    void loadEq(StateReader &r, uint32_t number);
    void loadCq(StateReader &r, uint32_t number);
    // An on-demand region loaded without the implicit region it was
    // linked to (docs/prm.md §6.10).
    struct SavedChild {
        uint32_t number;
        uint32_t parentKey;
    };
    void loadMr(StateReader &r, uint32_t number, std::vector<SavedChild> &children);
    void relinkChildren(StateReader &r, const std::vector<SavedChild> &children);
    void loadMw(StateReader &r, uint32_t number);
    void loadSrq(StateReader &r, uint32_t number);
    void loadQp(StateReader &r, QueuePair &qp, const pib_qp_attr &attr);
    void loadSpecialQp(StateReader &r, uint32_t qpn);
    std::string attachLoaded(const SavedAttachment &a);

    const pib_core_config &config_;
    const Host &host_;
    const pib_dev_cap caps_;
    bool initialized_ = false;
    ObjectTables &objects_; // core_.objects, which every command works on
    MemoryRegions regions_;
    CoreParts core_; // the shared core's parts, and CLOSE_HCA's device-wide steps
};

} // namespace pib
