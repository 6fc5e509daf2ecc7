// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_dc_targets.hh"

#include <algorithm>
#include <string>

#include "limits.hh"
#include "mlx5_commands.hh"
#include "mlx5_ifc.hh"
#include "mlx5_user_contexts.hh"
#include "qp_lifecycle.hh"
#include "state_tables.hh"
#include "trace.hh"

namespace pib::mlx5 {

namespace {

// The DCT context (dctc, mlx5_ifc.h), its fields by their bit in the
// context itself.
namespace dctc {
constexpr Field kState = field(0x04, 4);
constexpr Field kCqn = field(0x48, 24);
constexpr Field kCounterSetId = field(0x60, 8);
constexpr Field kAtomicMode = field(0x68, 4);
constexpr Field kRre = field(0x6c, 1);
constexpr Field kRwe = field(0x6d, 1);
constexpr Field kRae = field(0x6e, 1);
constexpr Field kMinRnrNak = field(0x93, 5);
constexpr Field kSrqn = field(0xa8, 24); // ifc: srqn_xrqn
constexpr Field kPd = field(0xc8, 24);
constexpr Field kAccessKey = field(0x100, 64); // ifc: dc_access_key
constexpr Field kMtu = field(0x145, 3);
constexpr Field kPort = field(0x148, 8);
constexpr Field kPkeyIndex = field(0x150, 16);
constexpr Field kMyAddrIndex = field(0x168, 8);
constexpr Field kKeyViolations = field(0x180, 32); // ifc: dc_access_key_violation_count
} // namespace dctc

// dctc.state as QUERY_DCT reports it.
constexpr uint8_t kActive = 0;
constexpr uint8_t kDrained = 2;
// dctc.atomic_mode: none asked (no remote atomics), IB's 8-byte atomics,
// or atomics of up to 8 bytes, which are those.
constexpr uint64_t kAtomicModeIb = 1;
constexpr uint64_t kAtomicMode8B = 3;
// DCT_DRAINED (device.h, MLX5_EVENT_TYPE_DCT_DRAINED): the DCT's number
// at byte 0x18 of the event data.
constexpr uint8_t kDctDrained = 0x1c;
constexpr uint32_t kDrainedDctnByte = 0x18;

constexpr uint32_t kDctsTag = stateTag("M5DT");
constexpr uint16_t kCreateDct = 0x710;

std::span<const uint8_t> contextOf(std::span<const uint8_t> in) {
    return in.subspan(DcTargets::kContextByte, DcTargets::kContextBytes);
}

} // namespace

const err::Condition *DcTargets::checkContext(std::span<const uint8_t> c) const {
    const uint64_t mtu = get(c, dctc::kMtu), port = get(c, dctc::kPort),
                   set = get(c, dctc::kCounterSetId);
    const uint64_t atomicMode = get(c, dctc::kAtomicMode);
    const char *bad =
        !objects_.pds.find(get(c, dctc::kPd))              ? "pd: no such PD"
        : !objects_.cqs.find(get(c, dctc::kCqn))           ? "cqn: no such CQ"
        : !objects_.srqs.find(get(c, dctc::kSrqn))         ? "srqn_xrqn: no such SRQ"
        : !ports_.find(static_cast<unsigned>(port))        ? "port: no such port"
        : get(c, dctc::kPkeyIndex) >= PIB_PKEY_TABLE_LEN   ? "pkey_index beyond the P_Key table"
        : get(c, dctc::kMyAddrIndex) >= PIB_GUID_TABLE_LEN ? "my_addr_index beyond the GID table"
        : mtu < PIB_MTU_256 || mtu > PIB_MTU_4096          ? "mtu: not 256 to 4096 bytes"
        : get(c, dctc::kRae) && atomicMode != kAtomicModeIb && atomicMode != kAtomicMode8B
            ? "atomic_mode: atomics larger than 8 bytes are not offered"
        : set && !objects_.counterSets.find(set) ? "counter_set_id names no Q counter"
                                                 : nullptr;
    if (bad) {
        host_.guestError(err::kMlx5DctBadContext, "CREATE_DCT: %s", bad);
        return &err::kMlx5DctBadContext;
    }
    return nullptr;
}

// A user context's DCT builds on its own PD, CQ and SRQ; its Q counter may
// be the kernel's.
const err::Condition *DcTargets::checkOwners(std::span<const uint8_t> c, Owner caller) const {
    const uint64_t pd = get(c, dctc::kPd), cq = get(c, dctc::kCqn), srq = get(c, dctc::kSrqn),
                   set = get(c, dctc::kCounterSetId);
    if (!controls(caller, ownerIn(objects_.pds, pd)))
        return refuseForeign(host_, "CREATE_DCT", "PD", pd, ownerIn(objects_.pds, pd), caller);
    if (!controls(caller, ownerIn(objects_.cqs, cq)))
        return refuseForeign(host_, "CREATE_DCT", "CQ", cq, ownerIn(objects_.cqs, cq), caller);
    if (!controls(caller, ownerIn(objects_.srqs, srq)))
        return refuseForeign(host_, "CREATE_DCT", "SRQ", srq, ownerIn(objects_.srqs, srq), caller);
    if (set && !mayShare(caller, ownerIn(objects_.counterSets, set)))
        return refuseForeign(host_, "CREATE_DCT", "Q counter", set,
                             ownerIn(objects_.counterSets, set), caller);
    return nullptr;
}

void DcTargets::hold(const QueuePair &dct, int delta) {
    const auto adjust = [delta](Referenced &o) { o.refs += static_cast<uint32_t>(delta); };
    adjust(objects_.pds.at(dct.ctx.pdn));
    adjust(objects_.cqs.at(dct.ctx.recv_cqn));
    adjust(objects_.srqs.at(dct.ctx.srqn));
    if (CounterSet *set = objects_.counterSets.find(dct.counterSet))
        adjust(*set);
}

const err::Condition *DcTargets::create(std::span<const uint8_t> in, uint32_t &dctn) {
    const std::span<const uint8_t> c = contextOf(in);
    if (const err::Condition *why = checkContext(c))
        return why;
    const auto caller = static_cast<Owner>(get(in, kUid));
    if (const err::Condition *why = checkOwners(c, caller))
        return why;
    if (objects_.qps.size() == objects_.qps.capacity()) {
        host_.guestError(err::kMlx5CmdNoResources, "CREATE_DCT: all %u QPs and DCTs exist",
                         objects_.qps.capacity());
        return &err::kMlx5CmdNoResources;
    }
    auto made = std::make_unique<QueuePair>();
    QueuePair &dct = *made;
    dct.owner = caller;
    dct.ctx.type = kQptDct;
    dct.ctx.flags = PIB_QP_USE_SRQ;
    dct.ctx.pdn = static_cast<uint32_t>(get(c, dctc::kPd));
    dct.ctx.srqn = static_cast<uint32_t>(get(c, dctc::kSrqn));
    dct.ctx.recv_cqn = dct.ctx.send_cqn = static_cast<uint32_t>(get(c, dctc::kCqn));
    pib_qp_attr &a = dct.attr;
    a.qp_state = PIB_QPS_RTR; // it takes requests from now on
    a.port_num = static_cast<uint8_t>(get(c, dctc::kPort));
    a.pkey_index = static_cast<uint16_t>(get(c, dctc::kPkeyIndex));
    a.path_mtu = static_cast<uint8_t>(get(c, dctc::kMtu));
    a.min_rnr_timer = static_cast<uint8_t>(get(c, dctc::kMinRnrNak));
    a.max_dest_rd_atomic = limits::kMaxRdAtom; // log_max_ra_req_dc
    a.qp_access_flags = static_cast<uint32_t>((get(c, dctc::kRre) ? PIB_ACCESS_REMOTE_READ : 0) |
                                              (get(c, dctc::kRwe) ? PIB_ACCESS_REMOTE_WRITE : 0) |
                                              (get(c, dctc::kRae) ? PIB_ACCESS_REMOTE_ATOMIC : 0));
    dct.counterSet = static_cast<uint32_t>(get(c, dctc::kCounterSetId));
    dct.dc.key = get(c, dctc::kAccessKey);
    dctn = *insertQp(objects_, std::move(made)); // there is room: checked above
    hold(dct, +1);
    Context &kept = contexts_[dctn];
    std::copy(c.begin(), c.end(), kept.begin());
    set(kept, dctc::kState, kActive);
    set(kept, dctc::kKeyViolations, 0);
    trace::mlx5_dct_create(host_, dctn, dct.ctx.srqn, dct.ctx.recv_cqn, dct.ctx.pdn, a.port_num);
    return nullptr;
}

QueuePair *DcTargets::find(uint32_t dctn) const {
    QueuePair *qp = objects_.findQp(dctn);
    return qp && qp->ctx.type == kQptDct ? qp : nullptr;
}

const err::Condition *DcTargets::missing(const char *command, uint32_t dctn) const {
    host_.guestError(err::kMlx5CmdBadResource, "%s of DCT %u: no such DCT", command, dctn);
    return &err::kMlx5CmdBadResource;
}

// The DCT takes no new request; those it took are done (the responder
// works as the packets arrive). DCT_DRAINED says so, as mlx5_core waits
// for it, without a time limit, before it destroys the DCT.
const err::Condition *DcTargets::drain(uint32_t dctn) {
    QueuePair *dct = find(dctn);
    if (!dct)
        return missing("DRAIN_DCT", dctn);
    dct->attr.qp_state = PIB_QPS_ERR;
    dataPath_.closeDcConnections(dctn, "its DCT was drained");
    EventQueues::Data data{};
    writeBe32(data.data() + kDrainedDctnByte, dctn);
    eqs_.post(kDctDrained, 0, data, dctn);
    trace::mlx5_dct_drain(host_, dctn);
    return nullptr;
}

const err::Condition *DcTargets::arm(uint32_t dctn) {
    QueuePair *dct = find(dctn);
    if (!dct)
        return missing("ARM_DCT_FOR_KEY_VIOLATION", dctn);
    dct->dc.keyViolationArmed = true;
    trace::mlx5_dct_arm(host_, dctn);
    return nullptr;
}

const err::Condition *DcTargets::destroy(uint32_t dctn) {
    QueuePair *dct = find(dctn);
    if (!dct)
        return missing("DESTROY_DCT", dctn);
    dataPath_.closeDcConnections(dctn, "its DCT was destroyed");
    hold(*dct, -1);
    contexts_.erase(dctn);
    endQp(objects_, dataPath_, *dct);
    trace::mlx5_dct_destroy(host_, dctn);
    return nullptr;
}

const err::Condition *DcTargets::query(uint32_t dctn, std::span<uint8_t> out) const {
    const QueuePair *dct = find(dctn);
    if (!dct)
        return missing("QUERY_DCT", dctn);
    const std::span<uint8_t> c = out.subspan(kContextByte, kContextBytes);
    const Context &kept = contexts_.at(dctn);
    std::copy(kept.begin(), kept.end(), c.begin());
    set(c, dctc::kState, dct->attr.qp_state == PIB_QPS_RTR ? kActive : kDrained);
    set(c, dctc::kKeyViolations, dct->dc.keyViolations);
    return nullptr;
}

void DcTargets::save(StateWriter &w) const {
    w.beginSection(kDctsTag);
    w.u32(objects_.dcConnections.nextSerial);
    w.u32(static_cast<uint32_t>(contexts_.size()));
    for (const auto &[dctn, context] : contexts_) {
        const QueuePair &dct = *find(dctn);
        std::vector<uint8_t> in(Commands::inputBytes(kCreateDct));
        std::copy(context.begin(), context.end(), in.begin() + kContextByte);
        set(in, kUid, dct.owner);
        w.u32(dctn);
        w.bytes(in);
        w.u8(dct.attr.qp_state == PIB_QPS_RTR ? kActive : kDrained);
        w.u32(dct.dc.keyViolations);
        w.boolean(dct.dc.keyViolationArmed);
        dataPath_.saveDcConnections(dctn, w);
    }
    w.endSection();
}

// Each DCT made again by CREATE_DCT's code at its number, then drained
// if it was (no event: the driver heard it before the save).
void DcTargets::load(StateReader &r) {
    r.enterSection(kDctsTag, "DCTs");
    const uint32_t nextSerial = r.u32();
    if (r.ok() && nextSerial == 0)
        r.fail("DCTs: the next DC connection serial is 0");
    objects_.dcConnections.nextSerial = nextSerial;
    const uint32_t count =
        r.count(objects_.qps.capacity(), 4 + Commands::inputBytes(kCreateDct) + 1 + 4 + 1, "DCTs");
    for (uint32_t i = 0; i < count && r.ok(); ++i) {
        const uint32_t dctn = r.u32();
        const std::vector<uint8_t> in = Commands::savedInput(r, kCreateDct);
        const uint8_t state = r.u8();
        const uint32_t violations = r.u32();
        const bool armed = r.boolean("a DCT armed for key violations");
        uint32_t made = 0;
        if (!restoreAt(r, host_, "DCT", objects_.qps, dctn,
                       [&] { return r.ok() && !create(in, made); }))
            return;
        QueuePair &dct = *find(dctn);
        if (state == kDrained)
            dct.attr.qp_state = PIB_QPS_ERR;
        else if (state != kActive)
            r.fail("DCT " + std::to_string(dctn) + ": state " + std::to_string(state));
        dct.dc.keyViolations = violations;
        dct.dc.keyViolationArmed = armed;
        dataPath_.loadDcConnections(dct, r);
    }
    r.leaveSection("DCTs");
}

} // namespace pib::mlx5
