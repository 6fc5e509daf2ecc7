// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX personality in a saved state (docs/migration.md, "The
// ConnectX personality"). Each object is saved as the input of the
// command that makes it as it is now (its ring as a list of 4 KiB pages,
// the one a resize gave it), then what it did since: its counters, its
// arm, a QP's attributes and transport. Loading runs that input through
// the command's own code at the saved number, so a stream passes every
// check a driver's command passes; nothing it says sizes or indexes
// anything before that. The function's own state follows: its life
// (ENABLE_HCA, INIT_HCA), its capabilities, the pages the driver gave,
// the initialization segment and the vendor capability.
#include "mlx5_front_end.hh"

#include <cstring>

#include "mlx5_command_queue.hh"
#include "state_tables.hh"

namespace pib::mlx5 {

namespace {

constexpr uint32_t kFunctionTag = stateTag("M5FN");
constexpr uint32_t kUarsTag = stateTag("M5UA");
constexpr uint32_t kPdsTag = stateTag("M5PD");
constexpr uint32_t kXrcdsTag = stateTag("M5XD");
constexpr uint32_t kQCountersTag = stateTag("M5QC");
constexpr uint32_t kKeysTag = stateTag("M5MK");
constexpr uint32_t kWindowsTag = stateTag("M5MW");

constexpr uint16_t kCreateMkey = 0x200;
constexpr uint32_t kKeyOutputBytes = 0x10;

// An object that others hold by number and that holds nothing itself:
// its owner.
template <class T>
void loadHeld(StateReader &r, uint32_t tag, const char *what, ObjectTable<T> &table) {
    loadTable(r, tag, what, table, 2, [&](uint32_t number) {
        auto object = std::make_unique<T>();
        object->owner = r.u16();
        if (r.ok() && !table.insertAt(number, std::move(object)))
            r.fail(std::string(what) + " " + std::to_string(number) +
                   ": its number is taken or beyond the table");
    });
}

} // namespace

std::vector<uint8_t> Commands::savedInput(StateReader &r, uint16_t opcode) {
    const std::string what = std::string("a ") + name(opcode) + " input";
    std::vector<uint8_t> in = r.bytes(CommandQueue::kMaxMessageBytes, what.c_str());
    if (r.ok() && in.size() < inputBytes(opcode))
        r.fail(what + " of " + std::to_string(in.size()) + " bytes, short of the " +
               std::to_string(inputBytes(opcode)) + " the command takes");
    return in;
}

// ---- the front end ---------------------------------------------------------

void Mlx5FrontEnd::saveObjects(StateWriter &w) const {
    uars_.save(w);
    eqs_.save(w);
    commands_.saveObjects(w);
}

void Mlx5FrontEnd::loadObjects(StateReader &r) {
    uars_.load(r);
    eqs_.load(r);
    commands_.loadObjects(r);
}

void Mlx5FrontEnd::save(StateWriter &w) const {
    w.beginSection(kFunctionTag);
    iseg_.save(w);
    vsc_.save(w);
    commands_.save(w);
    w.endSection();
}

void Mlx5FrontEnd::load(StateReader &r) {
    r.enterSection(kFunctionTag, "the ConnectX function");
    iseg_.load(r);
    vsc_.load(r);
    commands_.load(r);
    r.leaveSection("the ConnectX function");
}

// ---- the function's registers ----------------------------------------------

void InitSegment::save(StateWriter &w) const {
    w.u32(cmdqHigh_);
    w.u64(cmdqAddress_);
    w.u32(nicInterface_);
    w.u32(healthCounter_);
}

// As the driver's writes leave them: the queue's address on a page.
void InitSegment::load(StateReader &r) {
    const uint32_t high = r.u32();
    const uint64_t address = r.u64();
    const uint32_t nic = r.u32();
    healthCounter_ = r.u32();
    if (r.ok() && (address % 4096 || nic > iseg::kNicInterfaceMask))
        r.fail("the command queue's address or the NIC interface is not one a driver writes");
    if (!r.ok())
        return;
    cmdqHigh_ = high;
    cmdqAddress_ = address;
    nicInterface_ = nic;
}

void VendorCapability::save(StateWriter &w) const {
    w.u32(ctrl_);
    w.u32(counter_);
    w.u32(owner_);
    w.u32(address_);
}

void VendorCapability::load(StateReader &r) {
    ctrl_ = r.u32() & 0xffff; // the space the driver selected
    counter_ = r.u32();
    owner_ = r.u32();
    address_ = r.u32();
}

void Uars::save(StateWriter &w) const {
    w.beginSection(kUarsTag);
    w.u32(static_cast<uint32_t>(given_.size()));
    for (size_t i = 0; i < given_.size(); ++i) {
        w.boolean(given_[i]);
        w.u16(owners_[i]);
    }
    w.endSection();
}

void Uars::load(StateReader &r) {
    r.enterSection(kUarsTag, "the UAR pages");
    if (r.u32() != given_.size() && r.ok())
        r.fail("the UAR pages: another count of pages than this device's");
    for (size_t i = 0; i < given_.size() && r.ok(); ++i) {
        given_[i] = r.boolean("a UAR page given");
        owners_[i] = r.u16();
    }
    r.leaveSection("the UAR pages");
}

void Registers::save(StateWriter &w) const {
    w.bytes(hostEndianness_);
}

void Registers::load(StateReader &r) {
    const std::vector<uint8_t> bytes = r.bytes(hostEndianness_.size(), "HOST_ENDIANNESS");
    if (r.ok() && bytes.size() != hostEndianness_.size())
        r.fail("HOST_ENDIANNESS: not its size");
    if (r.ok())
        std::memcpy(hostEndianness_.data(), bytes.data(), bytes.size());
}

// ---- the commands' state ---------------------------------------------------

void Commands::save(StateWriter &w) const {
    w.u8(static_cast<uint8_t>(state_));
    const HcaCaps::Page &current = *caps_.page(HcaCaps::kGeneral, true);
    w.bytes(current);
    w.bytes(*caps_.page(HcaCaps::kOdp, true));
    w.u32(static_cast<uint32_t>(pages_.pages().size()));
    for (uint64_t page : pages_.pages())
        w.u64(page);
    registers_.save(w);
}

// The capabilities are set by SET_HCA_CAP's code and the pages given by
// MANAGE_PAGES's, which check them.
void Commands::load(StateReader &r) {
    const uint8_t state = r.u8();
    if (r.ok() && state > static_cast<uint8_t>(State::kInitialized))
        r.fail("the function's state " + std::to_string(state));
    const std::vector<uint8_t> current = r.bytes(HcaCaps::kPageBytes, "the capabilities");
    const std::vector<uint8_t> odp = r.bytes(HcaCaps::kPageBytes, "the paging capabilities");
    const uint32_t count =
        r.count(FunctionPages::kBootPages + FunctionPages::kInitPages, 8, "the function's pages");
    std::vector<uint64_t> pages(count);
    for (uint64_t &page : pages)
        page = r.u64();
    registers_.load(r);
    if (!r.ok())
        return;
    std::string why;
    host_.captureGuestErrors(&why);
    const bool taken =
        current.size() == HcaCaps::kPageBytes && !caps_.apply(host_, HcaCaps::kGeneral, current) &&
        std::memcmp(caps_.page(HcaCaps::kGeneral, true)->data(), current.data(), current.size()) ==
            0 &&
        odp.size() == HcaCaps::kPageBytes && !caps_.apply(host_, HcaCaps::kOdp, odp) &&
        !pages_.give(pages);
    host_.captureGuestErrors(nullptr);
    eqs_.useMemoryPageFaults(caps_.memoryPageFaults());
    if (!taken) {
        r.fail("the function's capabilities or pages: " +
               (why.empty() ? std::string("not what SET_HCA_CAP sets") : why));
        return;
    }
    state_ = static_cast<State>(state);
}

// ---- the objects -----------------------------------------------------------

// In the order they hold each other: PDs, XRC domains and Q counters; CQs
// (on the EQs); memory keys (in PDs); SRQs (on CQs); QPs (on all of them).
void Commands::saveObjects(StateWriter &w) const {
    uctxs_.save(w);
    umems_.save(w);
    generalObjects_.save(w);
    const auto saveOwner = [&](const Referenced &object) { w.u16(object.owner); };
    saveTable(w, kPdsTag, core_.objects.pds, saveOwner);
    saveTable(w, kXrcdsTag, core_.objects.xrcds, saveOwner);
    saveTable(w, kQCountersTag, core_.objects.counterSets, [&](const CounterSet &set) {
        saveOwner(set);
        w.record(set.counts);
    });
    cqs_.save(w);
    saveKeys(w);
    saveTable(w, kWindowsTag, core_.objects.mws, [&](const MemoryWindow &mw) {
        w.record(mw.ctx);
        w.u32(mw.key);
    });
    srqs_.save(w);
    qps_.save(w);
    dcts_.save(w);
}

void Commands::loadObjects(StateReader &r) {
    uctxs_.load(r);
    umems_.load(r);
    generalObjects_.load(r);
    loadHeld(r, kPdsTag, "PDs", core_.objects.pds);
    loadHeld(r, kXrcdsTag, "XRC domains", core_.objects.xrcds);
    loadTable(r, kQCountersTag, "Q counters", core_.objects.counterSets,
              2 + sizeof(pib_port_counters), [&](uint32_t number) {
                  auto set = std::make_unique<CounterSet>();
                  set->owner = r.u16();
                  r.record(set->counts, "a Q counter's counts");
                  if (r.ok() && !core_.objects.counterSets.insertAt(number, std::move(set)))
                      r.fail("Q counter " + std::to_string(number) +
                             ": its number is taken or beyond the table");
              });
    cqs_.load(r);
    loadTable(r, kKeysTag, "memory keys", core_.objects.mrs, 4 + 4 + 1 + sizeof(pib_mr_context) + 4,
              [&](uint32_t number) { loadKey(r, number); });
    loadTable(r, kWindowsTag, "memory windows", core_.objects.mws, sizeof(pib_mw_context) + 4,
              [&](uint32_t number) { loadWindow(r, number); });
    srqs_.load(r);
    qps_.load(r);
    dcts_.load(r);
    checkLoadedOwners(r);
}

// Every object belongs to the kernel, the shared uid or a user context
// the state has; a QP's Q counter is one its context may use.
void Commands::checkLoadedOwners(StateReader &r) const {
    if (!r.ok())
        return;
    forEachOwned([&](const char *what, uint64_t number, Owner owner) {
        if (r.ok() && !uctxs_.admits(owner))
            r.fail(std::string(what) + " " + std::to_string(number) + ": uid " +
                   std::to_string(owner) + ", which is no user context");
    });
    const ObjectTables &o = core_.objects;
    // An object on UMEMs exists, and they are its context's.
    umems_.forEachHolder([&](char kind, uint32_t number, const UmemHold &held) {
        const CompletionQueue *cq = kind == 'c' ? o.cqs.find(number) : nullptr;
        const QueuePair *qp = kind == 'q' ? o.qps.find(number) : nullptr;
        const MemoryRegion *key = kind == 'k' ? o.mrs.find(number) : nullptr;
        const bool exists = cq || qp || key;
        const Owner owner = cq ? cq->owner : qp ? qp->owner : key ? key->owner : 0;
        for (uint32_t id : {held.ring, held.record})
            if (r.ok() && (!exists || (id && !controls(owner, umems_.find(id)->owner))))
                r.fail(std::string(kind == 'c'   ? "CQ "
                                   : kind == 'q' ? "QP "
                                                 : "memory key ") +
                       std::to_string(number) + ": on UMEM " + std::to_string(id) +
                       ", but no such object, or another user context's UMEM");
    });
    o.qps.forEach([&](uint32_t number, const QueuePair &qp) {
        const CounterSet *set = o.counterSets.find(qp.counterSet);
        if (r.ok() && set && !mayShare(qp.owner, set->owner))
            r.fail("QP " + std::to_string(number) + ": Q counter " + std::to_string(qp.counterSet) +
                   " is another user context's");
    });
}

// A key: its CREATE_MKEY input, then what it is now. A UMR-enabled one is
// made free, then mapped by the UMR's code to its range, rights and
// translations, and freed again if it was free.
void Commands::saveKeys(StateWriter &w) const {
    saveTable(w, kKeysTag, core_.objects.mrs, [&](const MemoryRegion &mr) {
        w.bytes(mkeyInput(mr));
        w.u32(mr.key);
        w.boolean(mr.valid);
        w.boolean(mr.umrQpOwned);
        w.record(mr.ctx);
        const bool mapped = mr.fastReg();
        w.u32(mapped ? static_cast<uint32_t>(mr.ownPages.size()) : 0);
        if (mapped)
            for (uint64_t page : mr.ownPages)
                w.u64(page);
        saveIndirectLayout(w, mr);
    });
}

// A window (docs/mlx5.md §10.5): made as mlx5_ib's CREATE_MKEY made it,
// then bound again by the bind's code to the region, range and QP it was
// bound to.
void Commands::loadWindow(StateReader &r, uint32_t number) {
    pib_mw_context ctx;
    r.record(ctx, "a window's context");
    const uint32_t key = r.u32();
    const auto make = [&] {
        uint32_t made = 0;
        if (regions_.insertWindow("CREATE_MKEY", ctx.pdn, ctx.type, ctx.key_variant, &made))
            return false;
        if (!ctx.bound)
            return true;
        const pib_wqe_bind_mw bind{ctx.addr, ctx.length, made, key, ctx.mr_key, ctx.access};
        return core_.dataPath.keys().bindWindow(ctx.qpn, 0, ctx.pdn, bind) == PIB_WC_SUCCESS;
    };
    if (!restoreAt(r, host_, "memory window", core_.objects.mws, number, make))
        return;
    const MemoryWindow &mw = core_.objects.mws.at(number);
    if (mw.key != key || std::memcmp(&mw.ctx, &ctx, sizeof(ctx)) != 0)
        r.fail("memory window " + std::to_string(number) +
               ": its key or binding is not what it was saved with");
}

// An indirect key's layout (indirect_key.hh): its repeat count and
// entries; none for another key, or one no UMR laid out yet.
void Commands::saveIndirectLayout(StateWriter &w, const MemoryRegion &mr) const {
    const std::vector<IndirectEntry> none;
    const auto &entries = mr.indirect ? mr.indirect->entries : none;
    w.u32(static_cast<uint32_t>(entries.size()));
    if (entries.empty())
        return;
    w.u32(mr.indirect->repeats);
    for (const IndirectEntry &e : entries) {
        w.u64(e.addr);
        w.u32(e.key);
        w.u32(e.bytes);
        w.u32(e.stride);
    }
}

std::optional<IndirectLayout> Commands::loadIndirectLayout(StateReader &r) const {
    const uint64_t count = r.count(limits::kMaxIndirectEntries, 20, "an indirect key's entries");
    if (count == 0)
        return std::nullopt;
    IndirectLayout l;
    l.repeats = r.u32();
    uint64_t offset = 0;
    for (uint64_t i = 0; i < count; ++i) {
        IndirectEntry &e = l.entries.emplace_back();
        e.addr = r.u64();
        e.key = r.u32();
        e.bytes = r.u32();
        e.stride = r.u32();
        e.offset = offset;
        offset += e.bytes;
    }
    return l;
}

// Lays out a restored indirect key as its UMRs did: range, rights,
// layout and free state, through the checks a UMR passes.
bool Commands::restoreIndirect(StateReader &r, MemoryRegion &mr, const pib_mr_context &ctx,
                               bool valid, std::optional<IndirectLayout> layout) {
    IndirectUpdate u;
    u.setsStart = u.setsLength = u.setsFree = true;
    u.start = ctx.iova;
    u.length = ctx.length;
    u.accessMask = u.access = ctx.access;
    u.free = !valid;
    if (layout)
        u.octowords = static_cast<uint32_t>(layout->entries.size() + (layout->repeats ? 1 : 0));
    u.layout = std::move(layout);
    if (const char *why = core_.dataPath.keys().restoreIndirect(mr, u)) {
        r.fail("memory key " + std::to_string(PIB_KEY_INDEX(mr.key)) + ": " + why);
        return false;
    }
    return true;
}

void Commands::loadKey(StateReader &r, uint32_t number) {
    const std::vector<uint8_t> in = savedInput(r, kCreateMkey);
    const uint32_t key = r.u32();
    const bool valid = r.boolean("a key in use");
    const bool umrQpOwned = r.boolean("a key of the UMR QP's");
    pib_mr_context ctx;
    r.record(ctx, "a key's context");
    std::vector<uint64_t> entries(r.count(limits::kMaxMtt, 8, "a key's translations"));
    for (uint64_t &entry : entries)
        entry = r.u64();
    std::optional<IndirectLayout> layout = loadIndirectLayout(r);
    std::array<uint8_t, kKeyOutputBytes> out{};
    const Request made{in, out, 0, kCreateMkey};
    if (!restoreAt(r, host_, "memory key", core_.objects.mrs, number,
                   [&] { return !createMkey(made); }))
        return;
    MemoryRegion &mr = core_.objects.mrs.at(number);
    if (layout && !mr.indirect) {
        r.fail("memory key " + std::to_string(number) + ": a layout, and no indirect key");
        return;
    }
    if (mr.indirect && !restoreIndirect(r, mr, ctx, valid, std::move(layout)))
        return;
    if (mr.fastReg() && !mr.indirect) {
        KeyUpdate u;
        u.setsRange = ctx.length != 0;
        u.iova = ctx.iova;
        u.length = ctx.length;
        u.length64 = ctx.length == ~uint64_t{0} - ctx.iova; // what length64 made
        u.logPageSize = ctx.log_page_size;
        u.setsAccess = u.setsAtomic = true;
        u.access = ctx.access;
        u.setsFree = true;
        u.free = !valid;
        std::string why;
        host_.captureGuestErrors(&why);
        const uint8_t status = core_.dataPath.keys().update(0, 0, mr.key, u, entries);
        host_.captureGuestErrors(nullptr);
        if (status != PIB_WC_SUCCESS) {
            r.fail("memory key " + std::to_string(number) + ": " + why);
            return;
        }
    }
    if (umrQpOwned && !(mr.ownsPages && mr.fastReg())) {
        r.fail("memory key " + std::to_string(number) +
               ": the UMR QP's, but not a key the UMR QP can load");
        return;
    }
    mr.umrQpOwned = umrQpOwned; // the update above is the restore's, not the UMR QP's
    if (mr.fastReg()) // a REG_MR's entries are page addresses alone; a KSM key's not pages
        mr.pagedEntries = umrQpOwned && !mr.ksm;
    if (mr.key != key || mr.valid != valid || std::memcmp(&mr.ctx, &ctx, sizeof(ctx)) != 0 ||
        (mr.fastReg() && mr.ownPages != entries))
        r.fail("memory key " + std::to_string(number) +
               ": its key, context or translations are not what its commands make");
}

} // namespace pib::mlx5
