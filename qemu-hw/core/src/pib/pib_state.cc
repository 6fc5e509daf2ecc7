// SPDX-License-Identifier: GPL-2.0-or-later
// The objects of the command interface in a saved state (docs/migration.md):
// a section per table, in the order the objects may refer to each other.
// Each object is saved as what created it (its context, as the create
// command left it or a later command changed it) and what it has done
// since (its indices, its arm); loading creates it again by the create
// command's own code, at its saved number, then sets those. A stream is
// untrusted input: whatever it says passes the checks a guest's command
// passes, and no count of references is taken from it.
#include "pib_commands.hh"

#include <array>

#include <cinttypes>
#include <cstring>
#include <utility>
#include <vector>

#include "cq_state.hh"
#include "qp_lifecycle.hh"
#include "state_tables.hh"

namespace pib {

namespace {

constexpr uint32_t kUarsTag = stateTag("UARS");
constexpr uint32_t kPdsTag = stateTag("PDS ");
constexpr uint32_t kXrcdsTag = stateTag("XRCD");
constexpr uint32_t kCounterSetsTag = stateTag("CSET");
constexpr uint32_t kEqsTag = stateTag("EQS ");
constexpr uint32_t kCqsTag = stateTag("CQS ");
constexpr uint32_t kMrsTag = stateTag("MRS ");
constexpr uint32_t kMwsTag = stateTag("MWS ");
constexpr uint32_t kSrqsTag = stateTag("SRQS");
constexpr uint32_t kQpsTag = stateTag("QPS ");
constexpr uint32_t kSpecialQpsTag = stateTag("QP01");
constexpr uint32_t kMulticastTag = stateTag("MCST");

void saveNothing(const Referenced &) {}

} // namespace

void CommandProcessor::saveObjects(StateWriter &w) const {
    saveTable(w, kUarsTag, objects_.uars, saveNothing);
    saveTable(w, kPdsTag, objects_.pds, saveNothing);
    saveTable(w, kXrcdsTag, objects_.xrcds, saveNothing);
    saveTable(w, kCounterSetsTag, objects_.counterSets,
              [&](const CounterSet &set) { w.record(set.counts); });
    objects_.mtt.save(w);
    saveTable(w, kEqsTag, objects_.eqs, [&](const EventQueue &eq) {
        w.record(eq.ctx);
        w.u32(eq.producer);
        w.u32(eq.consumer);
        w.boolean(eq.armed);
        w.boolean(eq.overrun);
        w.boolean(eq.stopped);
    });
    saveTable(w, kCqsTag, objects_.cqs, [&](const CompletionQueue &cq) {
        w.record(cq.ctx);
        CqProgress::save(w, cq);
    });
    saveTable(w, kMrsTag, objects_.mrs, [&](const MemoryRegion &mr) {
        w.record(mr.ctx);
        w.u32(mr.key);
        w.boolean(mr.valid);
    });
    saveTable(w, kMwsTag, objects_.mws, [&](const MemoryWindow &mw) {
        w.record(mw.ctx);
        w.u32(mw.key);
    });
    saveTable(w, kSrqsTag, objects_.srqs, [&](const SharedReceiveQueue &srq) {
        w.record(srq.ctx);
        w.u32(srq.producer);
        w.u32(srq.consumer);
    });
    const auto saveQp = [&](const QueuePair &qp) {
        w.record(qp.ctx);
        w.record(qp.attr);
        core_.dataPath.saveTransport(qp, w);
    };
    saveTable(w, kQpsTag, objects_.qps, saveQp);
    saveSpecialQps(w, kSpecialQpsTag, objects_, saveQp);
    saveMulticast(w, kMulticastTag, objects_.multicast);
}

// Creates object `number` of `table` by `create` (a create command's
// code); false, and the stream refused saying why, when the command would
// have been refused.
template <class T>
bool CommandProcessor::restore(StateReader &r, const char *what, ObjectTable<T> &table,
                               uint32_t number, const std::function<CommandOutcome()> &create) {
    return restoreAt(r, host_, what, table, number,
                     [&] { return create().status == PIB_CMD_STATUS_OK; });
}

void CommandProcessor::loadEq(StateReader &r, uint32_t number) {
    pib_eq_context ctx;
    r.record(ctx, "an EQ's context");
    const uint32_t producer = r.u32(), consumer = r.u32();
    const bool armed = r.boolean("an EQ's arm"), overrun = r.boolean("an EQ's overrun");
    const bool stopped = r.boolean("an EQ stopped");
    if (!restore(r, "EQ", objects_.eqs, number, [&] { return createEq(ctx); }))
        return;
    EventQueue &eq = objects_.eqs.at(number);
    eq.producer = producer;
    eq.consumer = consumer;
    eq.armed = armed;
    eq.overrun = overrun;
    eq.stopped = stopped;
}

void CommandProcessor::loadCq(StateReader &r, uint32_t number) {
    pib_cq_context ctx;
    r.record(ctx, "a CQ's context");
    const CqProgress progress = CqProgress::read(r, number);
    if (restore(r, "CQ", objects_.cqs, number, [&] { return createCq(ctx); }))
        progress.apply(objects_.cqs.at(number), number, core_.dataPath.events().moderation());
}

// The pages a fast-registration region's range spans (its MTT entries).
static uint64_t pagesSpanned(const pib_mr_context &c) {
    if (!c.length || c.log_page_size >= 64)
        return 0;
    return ((c.iova + c.length - 1) >> c.log_page_size) - (c.iova >> c.log_page_size) + 1;
}

// A region: created as CREATE_MR made it; a fast-registration one that a
// REG_MR mapped is mapped again by the REG_MR's code, with the entries
// its MTT range holds, and freed again if it was invalidated since.
void CommandProcessor::loadMr(StateReader &r, uint32_t number, std::vector<SavedChild> &children) {
    pib_mr_context ctx;
    r.record(ctx, "an MR's context");
    const uint32_t key = r.u32();
    const bool valid = r.boolean("an MR's validity");
    const bool fastReg = ctx.flags & PIB_MR_FAST_REG;
    const bool registered = fastReg && ctx.length;
    // A child of an implicit region is linked once every region is back
    // (relinkChildren).
    const uint32_t parentKey = std::exchange(ctx.parent_key, 0);
    pib_mr_context created = ctx;
    if (fastReg)
        created.iova = created.length = created.access = created.log_page_size = 0;
    auto create = [&]() -> CommandOutcome {
        const CommandOutcome made = createMr(created);
        if (made.status != PIB_CMD_STATUS_OK || !registered)
            return made;
        const uint64_t pages = pagesSpanned(ctx);
        if (pages > ctx.mtt_count) // checked again by the registration
            return fail(err::kCmdBadParam, "a registration of %" PRIu64 " pages", pages);
        std::vector<uint64_t> entries(pages);
        for (uint64_t i = 0; i < pages; ++i)
            entries[i] = objects_.mtt.entry(static_cast<uint32_t>(ctx.mtt_index + i));
        pib_wqe_reg_mr reg{};
        reg.key = key;
        reg.iova = ctx.iova;
        reg.length = ctx.length;
        reg.access = ctx.access;
        reg.log_page_size = ctx.log_page_size;
        reg.page_count = static_cast<uint32_t>(pages);
        const uint8_t status = core_.dataPath.keys().fastRegister(0, 0, ctx.pdn, reg, entries);
        return status == PIB_WC_SUCCESS ? made : CommandOutcome::failed(err::kCmdBadParam);
    };
    if (!restore(r, "MR", objects_.mrs, number, create))
        return;
    MemoryRegion &mr = objects_.mrs.at(number);
    if (mr.key != key || std::memcmp(&mr.ctx, &ctx, sizeof(ctx)) != 0 || (!fastReg && !valid) ||
        (valid && fastReg && !registered)) {
        r.fail("MR " + std::to_string(number) +
               ": its key, context or validity is not what its commands make");
        return;
    }
    mr.valid = valid; // a registered region invalidated since
    if (parentKey)
        children.push_back({number, parentKey});
}

// The on-demand regions that implicit ones reach, linked again once all
// regions are back: a child may come before its parent in the table.
void CommandProcessor::relinkChildren(StateReader &r, const std::vector<SavedChild> &children) {
    for (const SavedChild &c : children) {
        std::string why;
        host_.captureGuestErrors(&why);
        const err::Condition *failed = regions_.relinkChild("MR", c.number, c.parentKey);
        host_.captureGuestErrors(nullptr);
        if (failed) {
            r.fail("MR " + std::to_string(c.number) + ": " + why);
            return;
        }
    }
}

// A window: created as CREATE_MW made it, then bound again by the
// BIND_MW's code to the region and range it was bound to.
void CommandProcessor::loadMw(StateReader &r, uint32_t number) {
    pib_mw_context ctx;
    r.record(ctx, "an MW's context");
    const uint32_t key = r.u32();
    auto create = [&]() -> CommandOutcome {
        pib_mw_context created{};
        created.pdn = ctx.pdn;
        created.type = ctx.type;
        created.key_variant = ctx.key_variant;
        const CommandOutcome made = createMw(created);
        if (made.status != PIB_CMD_STATUS_OK || !ctx.bound)
            return made;
        pib_wqe_bind_mw bind{};
        bind.mw_key = static_cast<uint32_t>(made.result);
        bind.new_rkey = key;
        bind.mr_key = ctx.mr_key;
        bind.addr = ctx.addr;
        bind.length = ctx.length;
        bind.access = ctx.access;
        const uint8_t status = core_.dataPath.keys().bindWindow(ctx.qpn, 0, ctx.pdn, bind);
        return status == PIB_WC_SUCCESS ? made : CommandOutcome::failed(err::kCmdBadParam);
    };
    if (!restore(r, "MW", objects_.mws, number, create))
        return;
    const MemoryWindow &mw = objects_.mws.at(number);
    if (mw.key != key || std::memcmp(&mw.ctx, &ctx, sizeof(ctx)) != 0)
        r.fail("MW " + std::to_string(number) +
               ": its key or binding is not what it was saved with");
}

void CommandProcessor::loadSrq(StateReader &r, uint32_t number) {
    pib_srq_context ctx;
    r.record(ctx, "an SRQ's context");
    const uint32_t producer = r.u32(), consumer = r.u32();
    if (!restore(r, "SRQ", objects_.srqs, number, [&] { return createSrq(ctx); }))
        return;
    SharedReceiveQueue &srq = objects_.srqs.at(number);
    srq.ctx.wqe_count = ctx.wqe_count; // what the SRQ held when it was saved
    // The counts run on past the ring's size; they are never more than a
    // ring apart, and the consumer never passes the producer (both counted
    // from the ring's base, which RESIZE_SRQ sets).
    const uint32_t base = ctx.base;
    if (std::memcmp(&srq.ctx, &ctx, sizeof(ctx)) != 0 || consumer - base > producer - base ||
        producer - consumer > (1u << ctx.log_wqe_count)) {
        r.fail("SRQ " + std::to_string(number) + ": its context or indices are not an SRQ's");
        return;
    }
    srq.ctx.wqe_count = 0; // as CREATE_SRQ keeps it
    srq.producer = producer;
    srq.consumer = consumer;
}

void CommandProcessor::loadQp(StateReader &r, QueuePair &qp, const pib_qp_attr &attr) {
    loadQpState(r, qp, attr, core_.ports, {caps_.max_qp_init_rd_atom, caps_.max_qp_rd_atom},
                core_.dataPath);
}

void CommandProcessor::loadObjects(StateReader &r) {
    const Command none;
    loadTable(r, kUarsTag, "doorbell pages", objects_.uars, 0, [&](uint32_t number) {
        restore(r, "doorbell page", objects_.uars, number, [&] { return allocUar(none); });
    });
    loadTable(r, kPdsTag, "PDs", objects_.pds, 0, [&](uint32_t number) {
        restore(r, "PD", objects_.pds, number, [&] { return allocPd(none); });
    });
    loadTable(r, kXrcdsTag, "XRC domains", objects_.xrcds, 0, [&](uint32_t number) {
        restore(r, "XRC domain", objects_.xrcds, number, [&] { return allocXrcd(none); });
    });
    // Counter sets are created by the ConnectX front end's commands; a
    // set holds nothing and needs no check.
    loadTable(r, kCounterSetsTag, "counter sets", objects_.counterSets, sizeof(pib_port_counters),
              [&](uint32_t number) {
                  auto set = std::make_unique<CounterSet>();
                  r.record(set->counts, "a counter set's counts");
                  if (r.ok() && !objects_.counterSets.insertAt(number, std::move(set)))
                      r.fail("counter set " + std::to_string(number) +
                             ": its number is taken or beyond the table");
              });
    objects_.mtt.load(r);
    loadTable(r, kEqsTag, "EQs", objects_.eqs, sizeof(pib_eq_context),
              [&](uint32_t number) { loadEq(r, number); });
    loadTable(r, kCqsTag, "CQs", objects_.cqs, sizeof(pib_cq_context),
              [&](uint32_t number) { loadCq(r, number); });
    std::vector<SavedChild> children;
    loadTable(r, kMrsTag, "MRs", objects_.mrs, sizeof(pib_mr_context),
              [&](uint32_t number) { loadMr(r, number, children); });
    relinkChildren(r, children);
    loadTable(r, kMwsTag, "MWs", objects_.mws, sizeof(pib_mw_context),
              [&](uint32_t number) { loadMw(r, number); });
    loadTable(r, kSrqsTag, "SRQs", objects_.srqs, sizeof(pib_srq_context),
              [&](uint32_t number) { loadSrq(r, number); });
    const auto loadQpAt = [&](uint32_t number) {
        pib_qp_context ctx;
        r.record(ctx, "a QP's context");
        pib_qp_attr attr;
        r.record(attr, "a QP's attributes");
        // QP0 and QP1 have their own section: CREATE_QP's code would put
        // one here outside the table.
        if (r.ok() && (ctx.type == PIB_QPT_SMI || ctx.type == PIB_QPT_GSI))
            r.fail("QP " + std::to_string(number) + ": a special QP among the others");
        if (!restore(r, "QP", objects_.qps, number, [&] { return createQp(ctx); }))
            return;
        loadQp(r, objects_.qps.at(number), attr);
    };
    loadTable(r, kQpsTag, "QPs", objects_.qps, sizeof(pib_qp_context) + sizeof(pib_qp_attr),
              loadQpAt);
    loadSpecialQps(r, kSpecialQpsTag, [&](uint32_t qpn) { loadSpecialQp(r, qpn); });
    loadMulticast(r, kMulticastTag, objects_,
                  [&](const SavedAttachment &a) { return attachLoaded(a); });
    if (r.ok())
        resumeLoadedQps(objects_, core_.dataPath);
}

// QP0 and QP1 of each port: their numbers are their port's and type's.
void CommandProcessor::loadSpecialQp(StateReader &r, uint32_t qpn) {
    pib_qp_context ctx;
    r.record(ctx, "a special QP's context");
    pib_qp_attr attr;
    r.record(attr, "a special QP's attributes");
    const bool special = ctx.type == PIB_QPT_SMI || ctx.type == PIB_QPT_GSI;
    if (r.ok() && (!special || ctx.port < 1 || ctx.port > PIB_MAX_PORTS ||
                   PIB_SPECIAL_QPN(ctx.port, ctx.type) != qpn)) {
        r.fail("QP " + std::to_string(qpn) + ": not the special QP of that number");
        return;
    }
    std::string why;
    host_.captureGuestErrors(&why);
    const CommandOutcome made = r.ok() ? createQp(ctx) : CommandOutcome{};
    host_.captureGuestErrors(nullptr);
    if (r.ok() && made.status != PIB_CMD_STATUS_OK)
        r.fail("QP " + std::to_string(qpn) + ": " + why);
    if (r.ok())
        loadQp(r, *objects_.specialQps[qpn], attr);
}

// A multicast attachment, made again by ATTACH_MCAST's code.
std::string CommandProcessor::attachLoaded(const SavedAttachment &a) {
    pib_mcast m{};
    std::copy(a.gid.begin(), a.gid.end(), m.gid);
    m.mlid = a.mlid;
    std::string why;
    host_.captureGuestErrors(&why);
    const CommandOutcome done =
        attachOrDetachMcast(Command{.opcode = PIB_CMD_ATTACH_MCAST, .modifier = a.qpn}, m);
    host_.captureGuestErrors(nullptr);
    return done.status == PIB_CMD_STATUS_OK ? "" : why.empty() ? "refused" : why;
}

} // namespace pib
