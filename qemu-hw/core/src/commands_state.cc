// SPDX-License-Identifier: GPL-2.0-or-later
// The objects of the command interface in a saved state (docs/migration.md):
// a section per table, in the order the objects may refer to each other.
// Each object is saved as what created it (its context, as the create
// command left it or a later command changed it) and what it has done
// since (its indices, its arm); loading creates it again by the create
// command's own code, at its saved number, then sets those. A stream is
// untrusted input: whatever it says passes the checks a guest's command
// passes, and no count of references is taken from it.
#include "commands.hh"

#include <array>

#include <cinttypes>
#include <cstring>
#include <vector>

#include "qp_lifecycle.hh"
#include "qp_state.hh"

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

// The attributes a loaded QP's are checked with (qp_lifecycle.hh's
// badQpAttr): every one a MODIFY_QP may set, but an alternate path, which
// the device refuses whatever its value (so never has one).
constexpr uint32_t kCheckedAttrs =
    PIB_QP_ATTR_MASK_ALL &
    ~(PIB_QP_STATE | PIB_QP_CUR_STATE | PIB_QP_ALT_PATH | PIB_QP_EN_SQD_ASYNC_NOTIFY);

// A table's section: where its numbering goes on from, how many objects,
// then each one's number and what `each` writes of it.
template <class T, class Each>
void saveTable(StateWriter &w, uint32_t tag, const ObjectTable<T> &table, Each &&each) {
    w.beginSection(tag);
    w.u32(table.rotation());
    w.u32(static_cast<uint32_t>(table.size()));
    table.forEach([&](uint32_t number, const T &object) {
        w.u32(number);
        each(object);
    });
    w.endSection();
}

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
        w.u32(cq.producer);
        w.u32(cq.consumer);
        w.u8(cq.arm);
        w.boolean(cq.overrun);
        w.boolean(cq.stopped);
        w.u32(cq.eventDue ? cq.heldCqes : 0); // CQEs whose event waits
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
        dataPath_.saveTransport(qp, w);
    };
    saveTable(w, kQpsTag, objects_.qps, saveQp);
    w.beginSection(kSpecialQpsTag);
    for (const auto &qp : objects_.specialQps)
        w.boolean(qp != nullptr);
    for (const auto &qp : objects_.specialQps)
        if (qp)
            saveQp(*qp);
    w.endSection();
    w.beginSection(kMulticastTag);
    w.u32(objects_.multicast.attachments());
    objects_.multicast.forEach(
        [&](unsigned port, const MulticastGroups::Gid &mgid, uint16_t mlid, uint32_t qpn) {
            w.u32(qpn);
            w.u8(static_cast<uint8_t>(port));
            for (uint8_t b : mgid)
                w.u8(b);
            w.u16(mlid);
        });
    w.endSection();
}

// Creates object `number` of `table` by `create` (a create command's
// code); false, and the stream refused saying why, when the command would
// have been refused.
template <class T>
bool CommandProcessor::restore(StateReader &r, const char *what, ObjectTable<T> &table,
                               uint32_t number, const std::function<CommandOutcome()> &create) {
    if (!r.ok())
        return false;
    if (!table.freeNumber(number)) {
        r.fail(std::string(what) + " " + std::to_string(number) +
               ": its number is taken or beyond the table");
        return false;
    }
    std::string why;
    table.placeNextAt(number);
    host_.captureGuestErrors(&why);
    const CommandOutcome outcome = create();
    host_.captureGuestErrors(nullptr);
    table.cancelPlacement(); // refused before it was stored
    if (outcome.status == PIB_CMD_STATUS_OK)
        return true;
    r.fail(std::string(what) + " " + std::to_string(number) + ": " + why);
    return false;
}

// A table's section as saveTable() wrote it: `load` reads each object's
// fields after its number and creates it.
template <class T, class Load>
void CommandProcessor::loadTable(StateReader &r, uint32_t tag, const char *what,
                                 ObjectTable<T> &table, size_t eachAtLeast, Load &&load) {
    r.enterSection(tag, what);
    const uint32_t rotation = r.u32();
    const uint32_t count = r.count(table.capacity(), 4 + eachAtLeast, what);
    for (uint32_t i = 0; i < count && r.ok(); ++i)
        load(r.u32());
    r.leaveSection(what);
    if (r.ok())
        table.restoreRotation(rotation);
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
    const uint32_t producer = r.u32(), consumer = r.u32();
    const uint8_t arm = r.u8();
    const bool overrun = r.boolean("a CQ's overrun"), stopped = r.boolean("a CQ stopped");
    const uint32_t held = r.u32();
    if (r.ok() && arm != 0 && arm != PIB_CQ_ARM_NEXT && arm != PIB_CQ_ARM_SOLICITED)
        r.fail("CQ " + std::to_string(number) + ": arm " + std::to_string(arm));
    if (!restore(r, "CQ", objects_.cqs, number, [&] { return createCq(ctx); }))
        return;
    CompletionQueue &cq = objects_.cqs.at(number);
    cq.producer = producer;
    cq.consumer = consumer;
    cq.arm = arm;
    cq.overrun = overrun;
    cq.stopped = stopped;
    dataPath_.events().moderation().restoreHeld(number, cq, held);
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
void CommandProcessor::loadMr(StateReader &r, uint32_t number) {
    pib_mr_context ctx;
    r.record(ctx, "an MR's context");
    const uint32_t key = r.u32();
    const bool valid = r.boolean("an MR's validity");
    const bool fastReg = ctx.flags & PIB_MR_FAST_REG;
    const bool registered = fastReg && ctx.length;
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
        const uint8_t status = dataPath_.keys().fastRegister(0, 0, ctx.pdn, reg, entries);
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
        const uint8_t status = dataPath_.keys().bindWindow(ctx.qpn, 0, ctx.pdn, bind);
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

// A QP: created by CREATE_QP's code (in the RESET state), its saved
// attributes checked as MODIFY_QP checks them, its transport loaded, and
// then its state set: an ERR QP enters it by MODIFY_QP's code, which
// flushes nothing (a QP in error has nothing left to flush) but watches
// its receive records again; the others take theirs as saved.
void CommandProcessor::loadQp(StateReader &r, QueuePair &qp, const pib_qp_attr &attr) {
    const uint8_t state = attr.qp_state;
    const auto refuse = [&](const char *why) {
        r.fail("QP " + std::to_string(qp.number) + ": " + why);
    };
    if (state > PIB_QPS_ERR ||
        (state == PIB_QPS_SQE && !transitionRule(qp.ctx.type, PIB_QPS_SQE, PIB_QPS_RTS).allowed))
        return refuse("a state its type cannot be in");
    if (attr.en_sqd_async_notify > 1)
        return refuse("an SQD notification that is not a truth value");
    if (const char *bad = badQpAttr(qp, attr, kCheckedAttrs, ports_,
                                    {caps_.max_qp_init_rd_atom, caps_.max_qp_rd_atom}))
        return refuse(bad);
    qp.attr = attr;
    if (state == PIB_QPS_ERR) // entered below, by MODIFY_QP's code
        qp.attr.qp_state = PIB_QPS_RESET;
    dataPath_.loadTransport(qp, r);
    if (!r.ok())
        return;
    if (state == PIB_QPS_ERR) {
        pib_qp_attr toError{};
        toError.attr_mask = PIB_QP_STATE;
        toError.qp_state = PIB_QPS_ERR;
        modifyQp(qp, toError);
        qp.attr = attr;
    }
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
    loadTable(r, kMrsTag, "MRs", objects_.mrs, sizeof(pib_mr_context),
              [&](uint32_t number) { loadMr(r, number); });
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
    loadSpecialQps(r);
    loadMulticast(r);
    if (r.ok())
        resumeLoadedQps();
}

// QP0 and QP1 of each port: their numbers are their port's and type's.
void CommandProcessor::loadSpecialQps(StateReader &r) {
    r.enterSection(kSpecialQpsTag, "QP0 and QP1");
    std::array<bool, 2 * PIB_MAX_PORTS> present{};
    for (bool &p : present)
        p = r.boolean("a special QP");
    for (uint32_t qpn = 0; qpn < present.size() && r.ok(); ++qpn) {
        if (!present[qpn])
            continue;
        pib_qp_context ctx;
        r.record(ctx, "a special QP's context");
        pib_qp_attr attr;
        r.record(attr, "a special QP's attributes");
        const bool special = ctx.type == PIB_QPT_SMI || ctx.type == PIB_QPT_GSI;
        if (r.ok() && (!special || ctx.port < 1 || ctx.port > PIB_MAX_PORTS ||
                       PIB_SPECIAL_QPN(ctx.port, ctx.type) != qpn)) {
            r.fail("QP " + std::to_string(qpn) + ": not the special QP of that number");
            break;
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
    r.leaveSection("QP0 and QP1");
}

// Multicast attachments, attached again by ATTACH_MCAST's code.
void CommandProcessor::loadMulticast(StateReader &r) {
    r.enterSection(kMulticastTag, "multicast attachments");
    const uint32_t count = r.count(UINT32_MAX, 23, "multicast attachments");
    for (uint32_t i = 0; i < count && r.ok(); ++i) {
        const uint32_t qpn = r.u32();
        const uint8_t port = r.u8();
        pib_mcast m{};
        for (uint8_t &b : m.gid)
            b = r.u8();
        m.mlid = r.u16();
        const QueuePair *qp = objects_.findQp(qpn);
        if (r.ok() && (!qp || qp->attr.port_num != port)) {
            r.fail("a multicast attachment of QP " + std::to_string(qpn) + " on port " +
                   std::to_string(port) + ", which is not its port");
            break;
        }
        std::string why;
        host_.captureGuestErrors(&why);
        const CommandOutcome done =
            r.ok()
                ? attachOrDetachMcast(Command{.opcode = PIB_CMD_ATTACH_MCAST, .modifier = qpn}, m)
                : CommandOutcome{};
        host_.captureGuestErrors(nullptr);
        if (r.ok() && done.status != PIB_CMD_STATUS_OK)
            r.fail("a multicast attachment of QP " + std::to_string(qpn) + ": " + why);
    }
    r.leaveSection("multicast attachments");
}

void CommandProcessor::resumeLoadedQps() {
    objects_.qps.forEach([&](uint32_t, QueuePair &qp) { dataPath_.resumeLoaded(qp); });
    for (const auto &qp : objects_.specialQps)
        if (qp)
            dataPath_.resumeLoaded(*qp);
}

} // namespace pib
