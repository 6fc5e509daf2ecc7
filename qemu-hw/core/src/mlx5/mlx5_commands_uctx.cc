// SPDX-License-Identifier: GPL-2.0-or-later
// ConnectX user contexts at the command interface (docs/mlx5.md §16):
// CREATE_UCTX and DESTROY_UCTX, and the check every command passes before
// its handler runs: that its uid may issue it, and may touch the object
// it names. What a new object builds on is checked where its context is
// read (mlx5_user_contexts.hh has the rules).
#include <algorithm>

#include "mlx5_commands.hh"
#include "mlx5_ifc.hh"
#include "trace.hh"

namespace pib::mlx5 {

// Named, not anonymous: the QEMU build compiles the core as one unit.
namespace uctx_gate {

constexpr Field kUctxUid = field(0x50, 16); // ifc: destroy_uctx_in.uid, create_uctx_out.uid

// The tables a command's object is in.
enum class Kind : uint8_t { kUar, kPd, kXrcd, kQCounter, kCq, kSrq, kQp, kMkey, kUmem, kGeneral };
using K = Kind;

// Where the commands that act on one object name it: most at the
// same place (e.g. ifc: destroy_qp_in.qpn), Q counters elsewhere.
constexpr Field kObject = field(0x48, 24);           // ifc: destroy_cq_in.cqn
constexpr Field kDeallocCounter = field(0x58, 8);    // ifc: dealloc_q_counter_in.counter_set_id
constexpr Field kQueryCounter = field(0xf8, 8);      // ifc: query_q_counter_in.counter_set_id
constexpr Field kQueryCounterClear = field(0xc0, 1); // ifc: query_q_counter_in.clear
constexpr uint16_t kRegisterWrite = 0;

struct Named {
    uint16_t opcode;
    Kind kind;
    Field field = kObject;
};
// clang-format off
constexpr Named kNamed[] = {
    {0x803, K::kUar},                                        // DEALLOC_UAR
    {0x401, K::kCq},  {0x402, K::kCq},  {0x403, K::kCq},     // DESTROY_, QUERY_, MODIFY_CQ
    {0x701, K::kSrq}, {0x702, K::kSrq}, {0x703, K::kSrq},    // DESTROY_, QUERY_SRQ, ARM_RQ
    {0x706, K::kSrq}, {0x707, K::kSrq}, {0x708, K::kSrq},    // the XRC SRQs'
    {0x501, K::kQp},  {0x502, K::kQp},  {0x503, K::kQp},  {0x504, K::kQp},
    {0x505, K::kQp},  {0x506, K::kQp},  {0x507, K::kQp},  {0x50a, K::kQp},
    {0x50b, K::kQp},  {0x50c, K::kQp},  {0x50e, K::kQp},     // DESTROY_QP, state changes, QUERY_QP
    {0x711, K::kQp},  {0x712, K::kQp},  {0x713, K::kQp},     // DESTROY_, DRAIN_, QUERY_DCT
    {0x714, K::kQp}, // ARM_DCT_FOR_KEY_VIOLATION
    {0x806, K::kQp},  {0x807, K::kQp},                       // ATTACH_TO_MCG, DETACH_FROM_MCG
    {0x202, K::kMkey},                                       // DESTROY_MKEY
    {0x801, K::kPd},  {0x80f, K::kXrcd},                     // DEALLOC_PD, DEALLOC_XRCD
    {0x772, K::kQCounter, kDeallocCounter},                  // DEALLOC_Q_COUNTER
    {0x773, K::kQCounter, kQueryCounter},                    // QUERY_Q_COUNTER
    {0xa0a, K::kUmem},                                       // DESTROY_UMEM
    // MODIFY_, QUERY_, DESTROY_GENERAL_OBJECT: by type and id
    {0xa01, K::kGeneral, GeneralObjects::kId}, {0xa02, K::kGeneral, GeneralObjects::kId},
    {0xa03, K::kGeneral, GeneralObjects::kId},
};
// clang-format on

// The commands only the kernel issues: the function's life, its pages,
// capabilities and ISSI, MADs (an SMP sets a port's state), the user
// contexts; EQs, which the shared uid may make and end as well.
constexpr uint16_t kKernelOnly[] = {0x102, 0x103, 0x104, 0x105, 0x107, 0x108,
                                    0x109, 0x10b, 0x50d, 0xa04, 0xa06};
constexpr uint16_t kEqCommands[] = {0x301, 0x302};
constexpr uint16_t kAccessReg = 0x805, kQueryQCounter = 0x773;

bool among(std::span<const uint16_t> opcodes, uint16_t opcode) {
    return std::find(opcodes.begin(), opcodes.end(), opcode) != opcodes.end();
}

} // namespace uctx_gate

const err::Condition *Commands::admitCaller(const Spec &spec, const Request &r) const {
    namespace gate = uctx_gate;
    const auto caller = static_cast<Owner>(get(r.in, kUid));
    if (!uctxs_.admits(caller))
        return fail(err::kMlx5CmdBadUid, "%s with uid %u, which is no user context", spec.name,
                    caller);
    const bool kernelOnly = gate::among(gate::kKernelOnly, r.opcode) ||
                            (r.opcode == gate::kAccessReg && r.opMod == gate::kRegisterWrite);
    if (caller != uid::kKernel &&
        (kernelOnly || (gate::among(gate::kEqCommands, r.opcode) && caller != uid::kShared)))
        return fail(err::kMlx5CmdBadUid, "%s with uid %u: the kernel's command", spec.name, caller);
    const auto named = std::find_if(std::begin(gate::kNamed), std::end(gate::kNamed),
                                    [&](const gate::Named &n) { return n.opcode == r.opcode; });
    if (named == std::end(gate::kNamed))
        return nullptr;
    const std::optional<Owner> owner =
        ownerOf(static_cast<uint8_t>(named->kind), r.in, named->field);
    // One that does not exist is the handler's to refuse.
    const bool readsShared =
        r.opcode == gate::kQueryQCounter && !get(r.in, gate::kQueryCounterClear);
    if (!owner || controls(caller, *owner) || (readsShared && mayShare(caller, *owner)))
        return nullptr;
    return fail(err::kMlx5CmdForeignObject, "%s of %llu, user context %u's, with uid %u", spec.name,
                static_cast<unsigned long long>(get(r.in, named->field)), *owner, caller);
}

std::optional<Owner> Commands::ownerOf(uint8_t kind, std::span<const uint8_t> in,
                                       Field field) const {
    using uctx_gate::K;
    const uint64_t number = get(in, field);
    const auto of = [number](const auto &table) -> std::optional<Owner> {
        const auto *object = table.find(number);
        return object ? std::optional<Owner>(object->owner) : std::nullopt;
    };
    const ObjectTables &o = core_.objects;
    switch (static_cast<K>(kind)) {
    case K::kUar:
        return uars_.given(number) ? std::optional<Owner>(uars_.owner(number)) : std::nullopt;
    case K::kPd:
        return of(o.pds);
    case K::kXrcd:
        return of(o.xrcds);
    case K::kQCounter:
        return of(o.counterSets);
    case K::kCq:
        return of(o.cqs);
    case K::kSrq:
        return of(o.srqs);
    case K::kQp:
        return of(o.qps);
    case K::kUmem:
        return of(umems_.table());
    case K::kGeneral:
        return generalObjects_.ownerOf(in);
    case K::kMkey:
        if (o.mws.find(number)) // a window: the kernel's key (docs/mlx5.md §10.5)
            return uid::kKernel;
        break;
    }
    return of(o.mrs);
}

// Every object that has an owner: what it is, its number, its owner.
// Bounded by the tables' sizes: DESTROY_UCTX (once per process) and a
// state's loading walk it.
void Commands::forEachOwned(
    const std::function<void(const char *what, uint64_t number, Owner owner)> &f) const {
    const auto each = [&](const char *what, const auto &table) {
        table.forEach([&](uint32_t number, const auto &object) { f(what, number, object.owner); });
    };
    const ObjectTables &o = core_.objects;
    each("PD", o.pds);
    each("XRC domain", o.xrcds);
    each("Q counter", o.counterSets);
    each("CQ", o.cqs);
    each("SRQ", o.srqs);
    each("QP", o.qps);
    each("memory key", o.mrs);
    each("UMEM", umems_.table());
    generalObjects_.forEach(f);
    for (uint32_t index = Uars::kFirstUar; index < uars_.limit(); ++index)
        if (uars_.given(index))
            f("UAR page", index, uars_.owner(index));
}

uint32_t Commands::objectsOf(Owner uid) const {
    uint32_t count = 0;
    forEachOwned([&](const char *, uint64_t, Owner owner) { count += owner == uid; });
    return count;
}

const err::Condition *Commands::createUctx(const Request &r) {
    using uctx_gate::kUctxUid;
    const std::optional<Owner> uid = uctxs_.create();
    if (!uid)
        return fail(err::kMlx5CmdNoResources, "CREATE_UCTX: all %u user contexts exist",
                    limits::kMaxUserContexts);
    set(r.out, kUctxUid, *uid);
    trace::mlx5_uctx(host_, "made", *uid);
    return nullptr;
}

const err::Condition *Commands::destroyUctx(const Request &r) {
    using uctx_gate::kUctxUid;
    const auto uid = static_cast<Owner>(get(r.in, kUctxUid));
    if (!uctxs_.exists(uid))
        return fail(err::kMlx5CmdBadResource, "DESTROY_UCTX of uid %u, which does not exist", uid);
    if (const uint32_t objects = objectsOf(uid))
        return fail(err::kMlx5UctxInUse, "DESTROY_UCTX of uid %u, whose %u objects exist", uid,
                    objects);
    uctxs_.destroy(uid);
    trace::mlx5_uctx(host_, "ended", uid);
    return nullptr;
}

// UMEMs (mlx5_user_memories.hh): create_umem_out and destroy_umem_in
// name one at the same place.
const err::Condition *Commands::createUmem(const Request &r) {
    uint32_t id = 0;
    if (const err::Condition *why = umems_.create(r.in, &id))
        return why;
    set(r.out, uctx_gate::kObject, id);
    return nullptr;
}

const err::Condition *Commands::destroyUmem(const Request &r) {
    return umems_.destroy(static_cast<uint32_t>(get(r.in, uctx_gate::kObject)));
}

// General objects (mlx5_general_objects.hh), each command's input read
// there: neither type offered has anything to modify.
const err::Condition *Commands::createGeneralObject(const Request &r) {
    return generalObjects_.create(r.in, r.out);
}

const err::Condition *Commands::modifyGeneralObject(const Request &r) {
    if (const err::Condition *why = generalObjects_.check("MODIFY_GENERAL_OBJECT", r.in))
        return why;
    return fail(err::kMlx5GeneralObjectBad,
                "MODIFY_GENERAL_OBJECT of type 0x%x, id 0x%x: nothing in it changes",
                static_cast<unsigned>(get(r.in, GeneralObjects::kType)),
                static_cast<unsigned>(get(r.in, GeneralObjects::kId)));
}

const err::Condition *Commands::queryGeneralObject(const Request &r) {
    return generalObjects_.query(r.in, r.out);
}

const err::Condition *Commands::destroyGeneralObject(const Request &r) {
    return generalObjects_.destroy(r.in);
}

} // namespace pib::mlx5
