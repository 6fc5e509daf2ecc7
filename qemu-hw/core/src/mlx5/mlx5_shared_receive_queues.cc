// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_shared_receive_queues.hh"

#include "limits.hh"
#include "mlx5_ifc.hh"
#include "mlx5_page_list.hh"
#include "mlx5_user_contexts.hh"
#include "trace.hh"

namespace pib::mlx5 {

namespace {

// The SRQ context (srqc) at byte 0x10 of create_srq_in and query_srq_out,
// and of create_xrc_srq_in (xrc_srqc), which puts every field used here
// where srqc does and names the XRC SRQs' own two; checked against it.
constexpr uint32_t kSrqc = 8 * 0x10; // ifc: create_xrc_srq_in.xrc_srq_context_entry
constexpr Field kLogSrqSize = field(kSrqc + 0x04, 4); // ifc: log_xrc_srq_size
constexpr Field kSrqcWqSignature = field(kSrqc + 0x20, 1);
constexpr Field kContiguous = field(kSrqc + 0x21, 1);   // ifc: cont_srq
constexpr Field kReservedLkey = field(kSrqc + 0x23, 1); // ifc: rlky
constexpr Field kCyclic = field(kSrqc + 0x24, 1);       // ifc: basic_cyclic_rcv_wqe (XRC SRQs')
constexpr Field kSrqcLogRqStride = field(kSrqc + 0x25, 3);
constexpr Field kSrqcXrcd = field(kSrqc + 0x28, 24);
constexpr Field kSrqcPageOffset = field(kSrqc + 0x40, 6);
constexpr Field kDbrUmem = field(kSrqc + 0x47, 1); // ifc: dbr_umem_valid (XRC SRQs')
constexpr Field kCqn = field(kSrqc + 0x48, 24);
constexpr Field kSrqcLogPageSize = field(kSrqc + 0x82, 6);
constexpr Field kSrqcPd = field(kSrqc + 0xc8, 24);
constexpr Field kLwm = field(kSrqc + 0xe0, 16);
constexpr Field kSrqcDbrAddr = field(kSrqc + 0x140, 64); // ifc: db_record_addr_h
constexpr Field kUmem = field(0x2e0, 1);                 // create_xrc_srq_in's xrc_srq_umem_valid
constexpr uint32_t kSrqPageList = 0x110;

// A WQE is a next segment and data segments of 16 bytes each: 32 bytes
// at least (one data segment), 2 KiB at most (as the send WQEs).
constexpr uint32_t kLogMinStride = 5;
constexpr uint16_t kCreateBasicSrq = 0x700, kCreateXrcSrq = 0x705;

} // namespace

const err::Condition *SharedReceiveQueues::checkContext(std::span<const uint8_t> in) const {
    const uint64_t logStride = get(in, kSrqcLogRqStride) + kStrideUnitShift;
    const char *bad =
        get(in, kSrqcWqSignature) ? "wq_signature: WQE signatures are not offered"
        : get(in, kContiguous) || get(in, kReservedLkey) ? "cont_srq and rlky are not offered"
        : get(in, kCyclic)                            ? "basic_cyclic_rcv_wqe: the free list only"
        : get(in, kDbrUmem) || get(in, kUmem)         ? "DEVX memory (a umem) is not offered"
        : get(in, kLogSrqSize) > limits::kLogMaxSrqWr ? "log_srq_size beyond log_max_srq_sz"
        : logStride < kLogMinStride || logStride > limits::kLogMaxWqeStride ? "log_rq_stride"
        : get(in, kSrqcLogPageSize) > PageList::kMaxLogPageSize             ? "log_page_size"
        : !PageList::startsOnAdapterPage(get(in, kSrqcLogPageSize), get(in, kSrqcPageOffset))
            ? "page_offset: the ring does not start on a 4 KiB boundary"
        : !objects_.pds.find(get(in, kSrqcPd))            ? "pd: no such PD"
        : !objects_.xrcds.find(get(in, kSrqcXrcd))        ? "xrcd: no such XRC domain"
        : !objects_.cqs.find(get(in, kCqn))               ? "cqn: no such CQ"
        : get(in, kLwm) >> get(in, kLogSrqSize) != 0      ? "lwm: beyond the SRQ's size"
        : !isDoorbellRecord(host_, get(in, kSrqcDbrAddr)) ? "dbr_addr: not 8-byte aligned guest RAM"
                                                          : nullptr;
    if (bad) {
        host_.guestError(err::kMlx5SrqBadContext, "CREATE_SRQ: %s", bad);
        return &err::kMlx5SrqBadContext;
    }
    return nullptr;
}

// A user context's SRQ builds on its own PD and CQ. mlx5_ib gives a basic
// SRQ (CREATE_SRQ; its completions go to its QPs' CQs) the kernel's XRC
// domain and, without a CQ of the process's, the kernel's placeholder CQ.
const err::Condition *SharedReceiveQueues::checkOwners(std::span<const uint8_t> in) const {
    const auto caller = static_cast<Owner>(get(in, kUid));
    const bool basic = get(in, kOpcode) == kCreateBasicSrq;
    const char *command = basic ? "CREATE_SRQ" : "CREATE_XRC_SRQ";
    const uint64_t pd = get(in, kSrqcPd), xrcd = get(in, kSrqcXrcd), cq = get(in, kCqn);
    const Owner pdOwner = objects_.pds.at(pd).owner, xrcdOwner = objects_.xrcds.at(xrcd).owner,
                cqOwner = objects_.cqs.at(cq).owner;
    if (!controls(caller, pdOwner))
        return refuseForeign(host_, command, "PD", pd, pdOwner, caller);
    if (!mayShare(caller, xrcdOwner))
        return refuseForeign(host_, command, "XRC domain", xrcd, xrcdOwner, caller);
    if (!(basic ? mayShare(caller, cqOwner) : controls(caller, cqOwner)))
        return refuseForeign(host_, command, "CQ", cq, cqOwner, caller);
    return nullptr;
}

const err::Condition *SharedReceiveQueues::create(std::span<const uint8_t> in, uint32_t &srqn) {
    if (objects_.srqs.size() == objects_.srqs.capacity()) {
        host_.guestError(err::kMlx5CmdNoResources, "CREATE_SRQ: all %u SRQs exist",
                         objects_.srqs.capacity());
        return &err::kMlx5CmdNoResources;
    }
    if (const err::Condition *why = checkContext(in))
        return why;
    if (const err::Condition *why = checkOwners(in))
        return why;
    auto srq = std::make_unique<SharedReceiveQueue>();
    srq->owner = static_cast<Owner>(get(in, kUid));
    srq->basic = get(in, kOpcode) == kCreateBasicSrq;
    pib_srq_context &ctx = srq->ctx;
    ctx.log_wqe_count = static_cast<uint8_t>(get(in, kLogSrqSize));
    ctx.log_wqe_stride = static_cast<uint8_t>(get(in, kSrqcLogRqStride) + kStrideUnitShift);
    ctx.type = PIB_SRQT_XRC;
    ctx.pdn = static_cast<uint32_t>(get(in, kSrqcPd));
    ctx.xrcdn = static_cast<uint32_t>(get(in, kSrqcXrcd));
    ctx.cqn = static_cast<uint32_t>(get(in, kCqn));
    ctx.limit = static_cast<uint32_t>(get(in, kLwm));
    srq->record = get(in, kSrqcDbrAddr);
    const uint64_t bytes = uint64_t{1} << (ctx.log_wqe_count + ctx.log_wqe_stride);
    if (const err::Condition *why =
            PageList::loadAndMap(host_, objects_.mtt, in, kSrqPageList,
                                 {get(in, kSrqcLogPageSize), get(in, kSrqcPageOffset), bytes},
                                 "CREATE_SRQ", err::kMlx5SrqBadPages, &ctx.buf))
        return why;
    const pib_srq_context made = ctx;
    SharedReceiveQueue &inserted = *srq;
    srqn = *objects_.srqs.insert(std::move(srq)); // there is room: checked above
    inserted.number = srqn;
    ++objects_.pds.at(made.pdn).refs;
    ++objects_.xrcds.at(made.xrcdn).refs;
    ++objects_.cqs.at(made.cqn).refs;
    trace::mlx5_srq_create(host_, srqn, made.log_wqe_count, made.log_wqe_stride, made.pdn,
                           made.cqn);
    return nullptr;
}

// The context's fields as CREATE_SRQ takes them and QUERY_SRQ gives them.
static void putContext(std::span<uint8_t> out, const SharedReceiveQueue &srq) {
    const pib_srq_context &ctx = srq.ctx;
    set(out, kLogSrqSize, ctx.log_wqe_count);
    set(out, kSrqcLogRqStride, ctx.log_wqe_stride - kStrideUnitShift);
    set(out, kSrqcXrcd, ctx.xrcdn);
    set(out, kCqn, ctx.cqn);
    set(out, kSrqcPd, ctx.pdn);
    set(out, kLwm, ctx.limit);
    set(out, kSrqcDbrAddr, srq.record);
}

// The CREATE_SRQ input that makes `srq` as it is (the device's state).
std::vector<uint8_t> SharedReceiveQueues::createInput(const SharedReceiveQueue &srq) const {
    std::vector<uint8_t> in = PageList::inputFor(objects_.mtt, srq.ctx.buf, kSrqPageList);
    set(in, kOpcode, srq.basic ? kCreateBasicSrq : kCreateXrcSrq);
    set(in, kUid, srq.owner);
    putContext(in, srq);
    return in;
}

const err::Condition *SharedReceiveQueues::missing(const char *command, uint32_t srqn) const {
    host_.guestError(err::kMlx5CmdBadResource, "%s of SRQ %u, which does not exist", command, srqn);
    return &err::kMlx5CmdBadResource;
}

const err::Condition *SharedReceiveQueues::destroy(uint32_t srqn) {
    const SharedReceiveQueue *srq = objects_.srqs.find(srqn);
    if (!srq)
        return missing("DESTROY_SRQ", srqn);
    if (srq->refs) {
        host_.guestError(err::kMlx5CmdInUse, "DESTROY_SRQ of SRQ %u, which %u QPs use", srqn,
                         srq->refs);
        return &err::kMlx5CmdInUse;
    }
    ends_(srqn);
    --objects_.pds.at(srq->ctx.pdn).refs;
    --objects_.xrcds.at(srq->ctx.xrcdn).refs;
    --objects_.cqs.at(srq->ctx.cqn).refs;
    objects_.mtt.release(srq->ctx.buf.mtt_index);
    objects_.srqs.erase(srqn);
    trace::mlx5_srq_destroy(host_, srqn);
    return nullptr;
}

const err::Condition *SharedReceiveQueues::query(uint32_t srqn, std::span<uint8_t> out,
                                                 bool addresses) const {
    const SharedReceiveQueue *srq = objects_.srqs.find(srqn);
    if (!srq)
        return missing("QUERY_SRQ", srqn);
    putContext(out, *srq);
    if (!addresses)
        set(out, kSrqcDbrAddr, 0);
    return nullptr;
}

const err::Condition *SharedReceiveQueues::arm(uint32_t srqn, uint32_t limit) {
    SharedReceiveQueue *srq = objects_.srqs.find(srqn);
    if (!srq)
        return missing("ARM_RQ", srqn);
    if (limit >> srq->ctx.log_wqe_count) {
        host_.guestError(err::kMlx5CmdBadParam, "ARM_RQ of SRQ %u: lwm %u beyond its %u WQEs", srqn,
                         limit, 1u << srq->ctx.log_wqe_count);
        return &err::kMlx5CmdBadParam;
    }
    srq->ctx.limit = limit;
    return nullptr;
}

} // namespace pib::mlx5
