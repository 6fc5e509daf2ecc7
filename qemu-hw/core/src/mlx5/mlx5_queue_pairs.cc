// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_queue_pairs.hh"

#include <algorithm>
#include <bit>

#include "limits.hh"
#include "mlx5_ifc.hh"
#include "mlx5_page_list.hh"
#include "mlx5_user_contexts.hh"
#include "qp_lifecycle.hh"
#include "qp_state.hh"
#include "trace.hh"

namespace pib::mlx5 {

namespace {

// The commands' own fields: the QP (modify, query, destroy) and the
// optional parameters a state change sets.
constexpr Field kQpn = field(0x48, 24);
constexpr Field kOptParamMask = field(0x80, 32);
// INIT2INIT's QP context extension, where rdma-core's mlx5_ifc.h has it
// (Linux's keeps these bits reserved): DMA copies on or off
// (qpc_ext's mmo, named by opt_param_mask_95_32's
// MLX5_QPC_OPT_MASK_32_INIT2INIT_MMO).
constexpr Field kQpcExtension = field(0x40, 1);       // init2init_qp_in.qpc_ext
constexpr Field kOptParamMaskHigh = field(0x840, 64); // opt_param_mask_95_32
constexpr Field kDmaCopyEnable = field(0x882, 1);     // qpc_data_ext.mmo
constexpr uint64_t kOptDmaCopy = 1u << 3;
constexpr uint16_t kInit2Init = 0x50e;
// RTS2RTS's: the stream of a DCI to reset (qpc_ext's
// dci_stream_channel_id, named by MLX5_QPC_OPT_MASK_32_DCI_STREAM_CHANNEL_ID).
constexpr Field kStreamToReset = field(0x890, 16); // qpc_data_ext.dci_stream_channel_id
constexpr uint64_t kOptStreamReset = 1u << 0;

// The QP context (qpc) at byte 0x18 of create_qp_in, of each state
// change's input and of query_qp_out (mlx5_ifc.h).
constexpr uint32_t kQpc = 8 * 0x18; // ifc: create_qp_in.qpc
constexpr Field kState = field(kQpc + 0x00, 4);
constexpr Field kSt = field(kQpc + 0x08, 8);
constexpr Field kPmState = field(kQpc + 0x13, 2);
constexpr Field kQpcWqSignature = field(kQpc + 0x20, 1);
constexpr Field kQpcPd = field(kQpc + 0x28, 24);
constexpr Field kMtu = field(kQpc + 0x40, 3);
constexpr Field kLogMsgMax = field(kQpc + 0x43, 5);
constexpr Field kLogRqSize = field(kQpc + 0x49, 4);
constexpr Field kQpcLogRqStride = field(kQpc + 0x4d, 3);
constexpr Field kNoSq = field(kQpc + 0x50, 1);
constexpr Field kLogSqSize = field(kQpc + 0x51, 4);
constexpr Field kQpcCounterSetId = field(kQpc + 0x60, 8);
constexpr Field kQpcUarPage = field(kQpc + 0x68, 24);
constexpr Field kQpcLogPageSize = field(kQpc + 0xa3, 5);
constexpr Field kRemoteQpn = field(kQpc + 0xa8, 24);
// The primary address path (ads) at qpc byte 0x18.
constexpr uint32_t kPath = kQpc + 0xc0; // ifc: create_qp_in.qpc.primary_address_path
constexpr Field kPkeyIndex = field(kPath + 0x10, 16);
constexpr Field kGrh = field(kPath + 0x28, 1);
constexpr Field kMlid = field(kPath + 0x29, 7);
constexpr Field kRlid = field(kPath + 0x30, 16);
constexpr Field kAckTimeout = field(kPath + 0x40, 5);
constexpr Field kSrcAddrIndex = field(kPath + 0x48, 8);
constexpr Field kHopLimit = field(kPath + 0x58, 8);
constexpr Field kTclass = field(kPath + 0x64, 8);
constexpr Field kFlowLabel = field(kPath + 0x6c, 20);
constexpr uint32_t kRgidByte = (kPath + 0x80) / 8;
constexpr Field kSl = field(kPath + 0x124, 4);
constexpr Field kVhcaPort = field(kPath + 0x128, 8); // ifc: vhca_port_num
constexpr Field kLogSraMax = field(kQpc + 0x388, 3);
constexpr Field kRetryCount = field(kQpc + 0x38d, 3);
constexpr Field kRnrRetry = field(kQpc + 0x390, 3);
constexpr Field kFre = field(kQpc + 0x394, 1); // fast registration enabled
constexpr Field kNextSendPsn = field(kQpc + 0x3c8, 24);
constexpr Field kLogDciStreams = field(kQpc + 0x3e3, 5); // ifc: log_num_dci_stream_channels
constexpr Field kCqnSnd = field(kQpc + 0x3e8, 24);
constexpr Field kLogDciErrored = field(kQpc + 0x403, 5); // ifc: log_num_dci_errored_streams
constexpr Field kLogRraMax = field(kQpc + 0x488, 3);
constexpr Field kRre = field(kQpc + 0x490, 1);
constexpr Field kRwe = field(kQpc + 0x491, 1);
constexpr Field kRae = field(kQpc + 0x492, 1);
constexpr Field kQpcPageOffset = field(kQpc + 0x494, 6);
constexpr Field kMinRnrNak = field(kQpc + 0x4a3, 5);
constexpr Field kNextRcvPsn = field(kQpc + 0x4a8, 24);
constexpr Field kCqnRcv = field(kQpc + 0x4e8, 24);
constexpr Field kQpcXrcd = field(kQpc + 0x4c8, 24);
constexpr Field kQpcDbrAddr = field(kQpc + 0x500, 64);
// qpc.send_dbr_mode, which Linux's mlx5_ifc.h keeps reserved and
// rdma-core's tests' PRM structures name (docs/mlx5.md §10.3): 1, an SQ
// whose doorbell carries its counter and that has no record.
constexpr Field kSendDbrMode = field(8 * 0x18 + 0x80, 2);
constexpr uint64_t kDbrValid = 0, kNoDbrExternal = 1;
constexpr Field kQkey = field(kQpc + 0x540, 32); // ifc: q_key
constexpr Field kRqType = field(kQpc + 0x565, 3);
constexpr Field kSrqn = field(kQpc + 0x568, 24);        // ifc: srqn_rmpn_xrqn
constexpr Field kHwSqCounter = field(kQpc + 0x5a0, 16); // ifc: hw_sq_wqebb_counter
constexpr Field kSwSqCounter = field(kQpc + 0x5b0, 16); // ifc: sw_sq_wqebb_counter
constexpr Field kHwRqCounter = field(kQpc + 0x5c0, 32);
constexpr Field kSwRqCounter = field(kQpc + 0x5e0, 32);
constexpr uint32_t kQpPageList = 0x110;
constexpr uint32_t kMulticastGidByte = 0x10; // attach_to_mcg_in, detach_from_mcg_in

// Service types (st) and receive queue types (rq_type).
namespace st {
constexpr uint8_t kRc = 0x0;
constexpr uint8_t kUc = 0x1;
constexpr uint8_t kUd = 0x2;
constexpr uint8_t kXrc = 0x3; // an XRC INI QP with an SQ, an XRC TGT QP without
constexpr uint8_t kDci = 0x5; // a DC initiator (docs/mlx5.md §15)
constexpr uint8_t kQp0 = 0x7;
constexpr uint8_t kQp1 = 0x8;
constexpr uint8_t kRegUmr = 0xc; // the driver's UMR QP (docs/mlx5.md §10.1)
} // namespace st
constexpr uint8_t kRegularRq = 0;
constexpr uint8_t kSrqRq = 1;
constexpr uint8_t kZeroRq = 3;
constexpr uint8_t kPmMigrated = 3;

// Each service type and the core's QP type it is.
struct ServiceType {
    uint8_t st;
    uint8_t coreType;
};
constexpr ServiceType kServiceTypes[] = {{st::kRc, PIB_QPT_RC},       {st::kUc, PIB_QPT_UC},
                                         {st::kUd, PIB_QPT_UD},       {st::kXrc, PIB_QPT_XRC_INI},
                                         {st::kXrc, PIB_QPT_XRC_TGT}, {st::kQp0, PIB_QPT_SMI},
                                         {st::kQp1, PIB_QPT_GSI},     {st::kDci, kQptDci}};

// The core's type of a CREATE_QP's context: the UMR QP is a core UC QP
// (QueuePair::umr); an XRC QP without an SQ is a target.
std::optional<uint8_t> coreType(std::span<const uint8_t> in) {
    const uint64_t serviceType = get(in, kSt);
    if (serviceType == st::kRegUmr)
        return PIB_QPT_UC;
    if (serviceType == st::kXrc)
        return get(in, kNoSq) ? PIB_QPT_XRC_TGT : PIB_QPT_XRC_INI;
    for (const ServiceType &t : kServiceTypes)
        if (t.st == serviceType)
            return t.coreType;
    return std::nullopt;
}

// What a QP's ring must start on: its receive WQEs, each read whole
// from one 4 KiB granule (ring.hh), are aligned to their stride, and send
// WQEs to their 64-byte blocks (a page's 64th is a multiple of 64 bytes).
uint64_t ringAlignment(std::span<const uint8_t> in) {
    return get(in, kRqType) == kRegularRq
               ? uint64_t{1} << (get(in, kQpcLogRqStride) + kStrideUnitShift)
               : 1;
}

// A ring's start in a 4 KiB page in page_offset's units (64ths of it).
constexpr uint32_t kPageOffsetUnitShift = PageList::kAdapterPageShift - 6;

// Every QP was made from one of the table's service types.
uint8_t serviceType(uint8_t coreType) {
    for (const ServiceType &t : kServiceTypes)
        if (t.coreType == coreType)
            return t.st;
    return st::kRc;
}

// The ConnectX state numbers differ from IBA's for SQD and SQE.
uint8_t connectXState(uint8_t core) {
    switch (core) {
    case PIB_QPS_SQE:
        return 4;
    case PIB_QPS_SQD:
        return 5;
    default:
        return core;
    }
}

// The optional parameters (opt_param_mask) and the attributes each sets.
struct OptionalParameter {
    uint32_t bits;
    uint32_t attr;
};
constexpr OptionalParameter kOptional[] = {
    {0x2 | 0x4 | 0x8, PIB_QP_ACCESS_FLAGS}, // RRE, RAE, RWE
    {0x10, PIB_QP_PKEY_INDEX},
    {0x20, PIB_QP_QKEY},
    {0x40, PIB_QP_MIN_RNR_TIMER},
    {0x80, PIB_QP_AV},
    {0x100, PIB_QP_MAX_QP_RD_ATOMIC},
    {0x200, PIB_QP_MAX_DEST_RD_ATOMIC},
    {0x400, PIB_QP_PATH_MIG_STATE},
    {0x1000, PIB_QP_RETRY_CNT},
    {0x2000, PIB_QP_RNR_RETRY},
    {0x4000, PIB_QP_TIMEOUT},
    {0x10000, PIB_QP_PORT},
};
constexpr uint32_t kOptCounterSetId = 1u << 25; // no core attribute: the QP's counter set

// Each state change: the state the QP must be in (none: any) and the one
// it enters.
struct StateChange {
    uint16_t opcode;
    const char *name;
    std::optional<uint8_t> from;
    uint8_t to;
};
constexpr uint16_t kRst2Init = 0x502, kRts2Rts = 0x505;
constexpr StateChange kStateChanges[] = {
    {0x502, "RST2INIT_QP", PIB_QPS_RESET, PIB_QPS_INIT},
    {0x503, "INIT2RTR_QP", PIB_QPS_INIT, PIB_QPS_RTR},
    {0x504, "RTR2RTS_QP", PIB_QPS_RTR, PIB_QPS_RTS},
    {0x505, "RTS2RTS_QP", PIB_QPS_RTS, PIB_QPS_RTS},
    {0x506, "SQERR2RTS_QP", PIB_QPS_SQE, PIB_QPS_RTS},
    {0x507, "2ERR_QP", std::nullopt, PIB_QPS_ERR},
    {0x50a, "2RST_QP", std::nullopt, PIB_QPS_RESET},
    {0x50c, "SQD_RTS_QP", PIB_QPS_SQD, PIB_QPS_RTS},
    {0x50e, "INIT2INIT_QP", PIB_QPS_INIT, PIB_QPS_INIT},
};

const StateChange *findChange(uint16_t opcode) {
    for (const StateChange &c : kStateChanges)
        if (c.opcode == opcode)
            return &c;
    return nullptr;
}

// The attributes a qpc carries, in the core's terms: all of them; the
// mask says which the command sets.
pib_qp_attr attributesOf(std::span<const uint8_t> in) {
    pib_qp_attr a{};
    a.qp_access_flags = static_cast<uint32_t>((get(in, kRre) ? PIB_ACCESS_REMOTE_READ : 0) |
                                              (get(in, kRwe) ? PIB_ACCESS_REMOTE_WRITE : 0) |
                                              (get(in, kRae) ? PIB_ACCESS_REMOTE_ATOMIC : 0));
    a.pkey_index = static_cast<uint16_t>(get(in, kPkeyIndex));
    a.port_num = static_cast<uint8_t>(get(in, kVhcaPort));
    a.qkey = static_cast<uint32_t>(get(in, kQkey));
    a.path_mtu = static_cast<uint8_t>(get(in, kMtu));
    a.dest_qp_num = static_cast<uint32_t>(get(in, kRemoteQpn));
    a.rq_psn = static_cast<uint32_t>(get(in, kNextRcvPsn));
    a.sq_psn = static_cast<uint32_t>(get(in, kNextSendPsn));
    a.timeout = static_cast<uint8_t>(get(in, kAckTimeout));
    a.retry_cnt = static_cast<uint8_t>(get(in, kRetryCount));
    a.rnr_retry = static_cast<uint8_t>(get(in, kRnrRetry));
    a.min_rnr_timer = static_cast<uint8_t>(get(in, kMinRnrNak));
    a.max_rd_atomic = static_cast<uint8_t>(1u << get(in, kLogSraMax));
    a.max_dest_rd_atomic = static_cast<uint8_t>(1u << get(in, kLogRraMax));
    a.path_mig_state = get(in, kPmState) == kPmMigrated ? 0 : 1;
    pib_av &av = a.av;
    av.dlid = static_cast<uint16_t>(get(in, kRlid));
    av.sl = static_cast<uint8_t>(get(in, kSl));
    av.src_path_bits = static_cast<uint8_t>(get(in, kMlid));
    av.port = a.port_num;
    if (get(in, kGrh)) {
        av.flags = PIB_AV_GRH;
        av.sgid_index = static_cast<uint8_t>(get(in, kSrcAddrIndex));
        av.hop_limit = static_cast<uint8_t>(get(in, kHopLimit));
        av.traffic_class = static_cast<uint8_t>(get(in, kTclass));
        av.flow_label = static_cast<uint32_t>(get(in, kFlowLabel));
        if (in.size() >= kRgidByte + sizeof(av.dgid))
            std::copy_n(in.data() + kRgidByte, sizeof(av.dgid), av.dgid);
    }
    return a;
}

// What a state change's QP context extension (qpc_ext) may carry:
// INIT2INIT's DMA copies on an RC QP (docs/mlx5.md §10.2), and RTS2RTS's
// reset of a DCI's stream in error (§15.4). nullptr when it is that.
const char *badExtension(uint16_t opcode, const QueuePair &qp, std::span<const uint8_t> in) {
    const uint64_t named = get(in, kOptParamMaskHigh);
    if (opcode == kInit2Init && qp.ctx.type == PIB_QPT_RC && !(named & ~kOptDmaCopy))
        return nullptr;
    if (opcode != kRts2Rts || qp.ctx.type != kQptDci || named != kOptStreamReset)
        return "qpc_ext: only INIT2INIT's DMA copies (mmo) on an RC QP, or RTS2RTS's stream "
               "reset on a DCI";
    return qp.streams.inError(static_cast<uint16_t>(get(in, kStreamToReset)))
               ? nullptr
               : "dci_stream_channel_id: a stream that is not in error";
}

} // namespace

// The lowest port whose QP0 or QP1 (`type`) does not exist: the driver
// creates them port by port and names the port only when it changes the
// QP's state, which must then be this one.
std::optional<uint8_t> QueuePairs::freePort(uint8_t type) const {
    for (uint8_t port = 1; ports_.find(port); ++port)
        if (!objects_.specialQps[PIB_SPECIAL_QPN(port, type)])
            return port;
    return std::nullopt;
}

const err::Condition *QueuePairs::checkContext(std::span<const uint8_t> in) const {
    const auto type = coreType(in);
    const bool umr = get(in, kSt) == st::kRegUmr;
    const uint64_t rqType = get(in, kRqType);
    const bool rq = rqType == kRegularRq;
    const bool srq = rqType == kSrqRq;
    const bool sq = !get(in, kNoSq);
    const char *bad =
        !type                              ? "st: a service type the device does not offer"
        : !rq && !srq && rqType != kZeroRq ? "rq_type: not a regular RQ, an SRQ or none"
        : srq && (*type == PIB_QPT_SMI || *type == PIB_QPT_GSI)    ? "an SRQ for QP0 or QP1"
        : srq && !objects_.srqs.find(get(in, kSrqn))               ? "srqn: no such SRQ"
        : !rq && (get(in, kLogRqSize) || get(in, kQpcLogRqStride)) ? "an RQ size with no RQ"
        : !sq && get(in, kLogSqSize)                               ? "an SQ size with no_sq"
        : !rq && !srq && !sq              ? "neither a receive side nor an SQ"
        : umr && (srq || !sq)             ? "a UMR QP with an SRQ or no SQ"
        : *type == PIB_QPT_XRC_INI && rq  ? "an XRC INI QP with an RQ"
        : *type == PIB_QPT_XRC_TGT && rq  ? "an XRC TGT QP with an RQ"
        : *type == kQptDci && (rq || !sq) ? "a DCI with an RQ or no SQ"
        : get(in, kSendDbrMode) > kNoDbrExternal
            ? "send_dbr_mode: only a record (0) or none, rung externally (1)"
        : get(in, kSendDbrMode) == kNoDbrExternal && (!sq || umr)
            ? "send_dbr_mode: no record for an SQ it does not have"
        : *type != kQptDci && (get(in, kLogDciStreams) || get(in, kLogDciErrored))
            ? "DCI streams on a QP that is no DCI"
        : get(in, kLogDciStreams) > limits::kLogMaxDciStreams
            ? "log_num_dci_stream_channels beyond log_max_dci_stream_channels"
        : get(in, kLogDciErrored) > limits::kLogMaxDciErroredStreams
            ? "log_num_dci_errored_streams beyond log_max_dci_errored_streams"
        : *type == PIB_QPT_XRC_TGT && !objects_.xrcds.find(get(in, kQpcXrcd))
            ? "xrcd: no such XRC domain"
        : get(in, kQpcWqSignature)         ? "wq_signature: WQE signatures are not offered"
        : get(in, kPmState) != kPmMigrated ? "pm_state: path migration is not offered"
        : get(in, kLogRqSize) > limits::kLogMaxMlx5QpSize      ? "log_rq_size beyond log_max_qp_sz"
        : get(in, kLogSqSize) > limits::kLogMaxMlx5QpSize      ? "log_sq_size beyond log_max_qp_sz"
        : get(in, kQpcLogPageSize) > PageList::kMaxLogPageSize ? "log_page_size"
        : !PageList::startsOn(get(in, kQpcLogPageSize), get(in, kQpcPageOffset), ringAlignment(in))
            ? "page_offset: the ring does not start on a multiple of the RQ's stride"
        : !umr && !objects_.pds.find(get(in, kQpcPd))                    ? "pd: no such PD"
        : !objects_.cqs.find(get(in, kCqnSnd))                           ? "cqn_snd: no such CQ"
        : !objects_.cqs.find(get(in, kCqnRcv))                           ? "cqn_rcv: no such CQ"
        : *type != PIB_QPT_XRC_TGT && !uars_.given(get(in, kQpcUarPage)) ? "uar_page: not given out"
        : *type != PIB_QPT_XRC_TGT && !isDoorbellRecord(host_, get(in, kQpcDbrAddr))
            ? "dbr_addr: not 8-byte aligned guest RAM"
        : (*type == PIB_QPT_SMI || *type == PIB_QPT_GSI) && !freePort(*type)
            ? "every port has its QP0 or QP1"
            : nullptr;
    if (bad) {
        host_.guestError(err::kMlx5QpBadContext, "CREATE_QP: %s", bad);
        return &err::kMlx5QpBadContext;
    }
    return nullptr;
}

void QueuePairs::hold(const QueuePair &qp, int delta) {
    const auto adjust = [delta](Referenced &o) { o.refs += static_cast<uint32_t>(delta); };
    if (!qp.umr) // it has no PD
        adjust(objects_.pds.at(qp.ctx.pdn));
    if (qp.ctx.type == PIB_QPT_XRC_TGT)
        adjust(objects_.xrcds.at(qp.ctx.xrcdn));
    adjust(objects_.cqs.at(qp.ctx.send_cqn));
    adjust(objects_.cqs.at(qp.ctx.recv_cqn));
    if (qp.ctx.flags & PIB_QP_USE_SRQ)
        adjust(objects_.srqs.at(qp.ctx.srqn));
}

uint32_t QueuePairs::counterSetAfter(uint16_t opcode, const QueuePair &qp,
                                     std::span<const uint8_t> in) const {
    const bool named =
        opcode == kRst2Init || (opcode == kRts2Rts && (get(in, kOptParamMask) & kOptCounterSetId));
    return named ? static_cast<uint32_t>(get(in, kQpcCounterSetId)) : qp.counterSet;
}

void QueuePairs::bindCounterSet(QueuePair &qp, uint32_t set) {
    if (set == qp.counterSet)
        return;
    if (CounterSet *old = objects_.counterSets.find(qp.counterSet))
        --old->refs;
    if (CounterSet *next = objects_.counterSets.find(set))
        ++next->refs;
    qp.counterSet = set;
}

// A user context's QP builds on its own PD, CQs and SRQ, except the
// kernel's placeholders mlx5_ib names where nothing is received (the
// receive CQ and SRQ of a QP with no receive side); its UAR page is its
// own or the kernel's. QP0, QP1, the UMR QP and fast registration are the
// kernel's alone.
const err::Condition *QueuePairs::checkOwners(std::span<const uint8_t> in) const {
    const auto caller = static_cast<Owner>(get(in, kUid));
    if (caller == uid::kKernel)
        return nullptr;
    const auto type = *coreType(in);
    const bool umr = get(in, kSt) == st::kRegUmr;
    if (umr || get(in, kFre) || type == PIB_QPT_SMI || type == PIB_QPT_GSI) {
        host_.guestError(err::kMlx5CmdBadUid, "CREATE_QP with uid %u: %s is the kernel's", caller,
                         umr             ? "the UMR QP"
                         : get(in, kFre) ? "fast registration"
                                         : "QP0 or QP1");
        return &err::kMlx5CmdBadUid;
    }
    const bool receives = hasReceiveSide(type);
    const struct {
        const char *what;
        uint64_t number;
        Owner owner;
        bool shared; // may be the kernel's or the shared uid's
        bool named;  // the QP uses it
    } uses[] = {
        {"PD", get(in, kQpcPd), ownerIn(objects_.pds, get(in, kQpcPd)), false,
         type != PIB_QPT_XRC_TGT},
        {"send CQ", get(in, kCqnSnd), ownerIn(objects_.cqs, get(in, kCqnSnd)), false,
         hasSendQueue(type)},
        {"receive CQ", get(in, kCqnRcv), ownerIn(objects_.cqs, get(in, kCqnRcv)), !receives, true},
        {"SRQ", get(in, kSrqn), ownerIn(objects_.srqs, get(in, kSrqn)), !receives,
         get(in, kRqType) == kSrqRq},
        {"XRC domain", get(in, kQpcXrcd), ownerIn(objects_.xrcds, get(in, kQpcXrcd)), true,
         type == PIB_QPT_XRC_TGT},
        {"UAR page", get(in, kQpcUarPage), uars_.owner(get(in, kQpcUarPage)), true,
         type != PIB_QPT_XRC_TGT},
    };
    for (const auto &u : uses)
        if (u.named && !(u.shared ? mayShare(caller, u.owner) : controls(caller, u.owner)))
            return refuseForeign(host_, "CREATE_QP", u.what, u.number, u.owner, caller);
    return nullptr;
}

const err::Condition *QueuePairs::create(std::span<const uint8_t> in, uint32_t &qpn) {
    if (const err::Condition *why = checkContext(in))
        return why;
    if (const err::Condition *why = checkOwners(in))
        return why;
    auto qp = std::make_unique<QueuePair>();
    qp->owner = static_cast<Owner>(get(in, kUid));
    pib_qp_context &ctx = qp->ctx;
    ctx.type = *coreType(in);
    qp->umr = get(in, kSt) == st::kRegUmr;
    qp->fastRegEnabled = get(in, kFre);
    qp->sendDoorbellLess = get(in, kSendDbrMode) == kNoDbrExternal;
    qp->streams.logChannels = static_cast<uint8_t>(get(in, kLogDciStreams));
    qp->streams.logErrored = static_cast<uint8_t>(get(in, kLogDciErrored));
    ctx.pdn = qp->umr ? 0 : static_cast<uint32_t>(get(in, kQpcPd));
    ctx.send_cqn = static_cast<uint32_t>(get(in, kCqnSnd));
    ctx.recv_cqn = static_cast<uint32_t>(get(in, kCqnRcv));
    ctx.uar_page = static_cast<uint32_t>(get(in, kQpcUarPage));
    // A queue the QP lacks has stride 0 (mlx5_wqe_reader.cc). An XRC TGT
    // QP takes its receive WQEs from the XRC SRQ each message names, an
    // XRC INI QP or a DCI receives nothing: the SRQ their context names
    // (the driver's default one) is never used.
    if (ctx.type == PIB_QPT_XRC_TGT) {
        ctx.xrcdn = static_cast<uint32_t>(get(in, kQpcXrcd));
        ctx.srqn = static_cast<uint32_t>(get(in, kSrqn)); // kept for createInput()
    } else if (ctx.type == PIB_QPT_XRC_INI || ctx.type == kQptDci) {
    } else if (get(in, kRqType) == kSrqRq) {
        ctx.flags |= PIB_QP_USE_SRQ;
        ctx.srqn = static_cast<uint32_t>(get(in, kSrqn));
    } else if (get(in, kRqType) == kRegularRq) {
        ctx.rq_log_wqe_count = static_cast<uint8_t>(get(in, kLogRqSize));
        ctx.rq_log_wqe_stride = static_cast<uint8_t>(get(in, kQpcLogRqStride) + kStrideUnitShift);
    }
    if (!get(in, kNoSq)) {
        ctx.sq_log_wqe_count = static_cast<uint8_t>(get(in, kLogSqSize));
        ctx.sq_log_wqe_stride = wqe::kLogBasicBlock;
    }
    const bool special = ctx.type == PIB_QPT_SMI || ctx.type == PIB_QPT_GSI;
    if (special)
        ctx.port = *freePort(ctx.type);
    const uint64_t rqBytes =
        ctx.rq_log_wqe_stride ? uint64_t{1} << (ctx.rq_log_wqe_count + ctx.rq_log_wqe_stride) : 0;
    const uint64_t sqBytes =
        ctx.sq_log_wqe_stride ? uint64_t{1} << (ctx.sq_log_wqe_count + ctx.sq_log_wqe_stride) : 0;
    if (!special && objects_.qps.size() == objects_.qps.capacity()) {
        host_.guestError(err::kMlx5CmdNoResources, "CREATE_QP: all %u QPs exist",
                         objects_.qps.capacity());
        return &err::kMlx5CmdNoResources;
    }
    // An XRC TGT QP has no ring, and its command no page list.
    if (rqBytes + sqBytes) {
        if (const err::Condition *why = PageList::loadAndMap(
                host_, objects_.mtt, in, kQpPageList,
                {get(in, kQpcLogPageSize), get(in, kQpcPageOffset), rqBytes + sqBytes}, "CREATE_QP",
                err::kMlx5QpBadPages, &ctx.sq_buf, &qp->ringStart))
            return why;
        ctx.rq_buf = ctx.sq_buf;
    }
    qp->sendOffset = static_cast<uint32_t>(rqBytes);
    qp->record = get(in, kQpcDbrAddr);
    qp->attr.qp_state = PIB_QPS_RESET;
    qp->attr.port_num = special ? ctx.port : 1;
    qp->attr.path_mtu = PIB_MTU_256;
    QueuePair &made = *qp;
    qpn = *insertQp(objects_, std::move(qp)); // there is room: checked above
    hold(made, +1);
    trace::mlx5_qp_create(host_, qpn, ctx.type, ctx.rq_log_wqe_count, ctx.rq_log_wqe_stride,
                          ctx.sq_log_wqe_count, ctx.pdn, ctx.uar_page);
    return nullptr;
}

// The CREATE_QP input that makes `qp` as it is, in RESET (the device's
// state). An XRC TGT QP names the SRQ its creation named: the command
// needs one, which it never uses.
std::vector<uint8_t> QueuePairs::createInput(const QueuePair &qp) const {
    const pib_qp_context &ctx = qp.ctx;
    std::vector<uint8_t> in = PageList::inputFor(objects_.mtt, ctx.sq_buf, kQpPageList);
    set(in, kUid, qp.owner);
    set(in, kSt, qp.umr ? st::kRegUmr : serviceType(ctx.type));
    set(in, kPmState, kPmMigrated);
    set(in, kFre, qp.fastRegEnabled);
    set(in, kSendDbrMode, qp.sendDoorbellLess ? kNoDbrExternal : kDbrValid);
    set(in, kLogDciStreams, qp.streams.logChannels);
    set(in, kLogDciErrored, qp.streams.logErrored);
    set(in, kQpcPd, ctx.pdn);
    set(in, kQpcUarPage, ctx.uar_page);
    set(in, kCqnSnd, ctx.send_cqn);
    set(in, kCqnRcv, ctx.recv_cqn);
    set(in, kQpcDbrAddr, qp.record);
    set(in, kQpcPageOffset, qp.ringStart >> kPageOffsetUnitShift);
    set(in, kNoSq, ctx.sq_log_wqe_stride == 0);
    set(in, kLogSqSize, ctx.sq_log_wqe_count);
    if (ctx.type == PIB_QPT_XRC_TGT) {
        set(in, kQpcXrcd, ctx.xrcdn);
        set(in, kRqType, kSrqRq);
        set(in, kSrqn, ctx.srqn);
    } else if (ctx.flags & PIB_QP_USE_SRQ) {
        set(in, kRqType, kSrqRq);
        set(in, kSrqn, ctx.srqn);
    } else if (ctx.rq_log_wqe_stride) {
        set(in, kRqType, kRegularRq);
        set(in, kLogRqSize, ctx.rq_log_wqe_count);
        set(in, kQpcLogRqStride, ctx.rq_log_wqe_stride - kStrideUnitShift);
    } else {
        set(in, kRqType, kZeroRq);
    }
    return in;
}

const err::Condition *QueuePairs::refuse(const err::Condition &why, const char *command,
                                         uint32_t qpn, const char *what) const {
    host_.guestError(why, "%s of QP %u: %s", command, qpn, what);
    return &why;
}

const err::Condition *QueuePairs::destroy(uint32_t qpn) {
    QueuePair *qp = objects_.findQp(qpn);
    if (!qp)
        return refuse(err::kMlx5CmdBadResource, "DESTROY_QP", qpn, "no such QP");
    hold(*qp, -1);
    bindCounterSet(*qp, 0);
    const pib_buf_desc ring = qp->ctx.sq_buf;
    endQp(objects_, dataPath_, *qp);
    if (ring.npages)
        objects_.mtt.release(ring.mtt_index);
    trace::mlx5_qp_destroy(host_, qpn);
    return nullptr;
}

// A state change: the QP must be in the state the command changes from,
// IBA must allow the change for its type (qp_state.hh), and the
// attributes the change takes, the required ones and the optional ones
// the command names, must be in range; then the core enters the state.
const err::Condition *QueuePairs::modify(uint16_t opcode, std::span<const uint8_t> in) {
    const StateChange &change = *findChange(opcode);
    const auto qpn = static_cast<uint32_t>(get(in, kQpn));
    QueuePair *qp = objects_.findQp(qpn);
    if (!qp)
        return refuse(err::kMlx5CmdBadResource, change.name, qpn, "no such QP");
    const uint8_t cur = qp->attr.qp_state;
    const TransitionRule rule = transitionRule(qp->ctx.type, cur, change.to);
    if ((change.from && *change.from != cur) || !rule.allowed) {
        host_.guestError(err::kMlx5QpBadState, "%s of QP %u (core type %u) in state %u",
                         change.name, qpn, qp->ctx.type, cur);
        return &err::kMlx5QpBadState;
    }
    uint32_t optional = 0;
    const auto named = static_cast<uint32_t>(get(in, kOptParamMask));
    for (const OptionalParameter &p : kOptional)
        if (named & p.bits)
            optional |= p.attr;
    // The UMR QP takes its port and P_Key index into INIT, and nothing
    // else: it sends no packet.
    const uint32_t mask = qp->umr
                              ? PIB_QP_STATE | (change.to == PIB_QPS_INIT && cur == PIB_QPS_RESET
                                                    ? PIB_QP_PKEY_INDEX | PIB_QP_PORT
                                                    : 0)
                              : PIB_QP_STATE | rule.required | (optional & rule.optional);
    pib_qp_attr attrs = attributesOf(in);
    // QP0 and QP1 belong to the port they were made for: the driver names
    // it in each change that has a context.
    if (isSpecialQp(*qp) && change.from && attrs.port_num != qp->ctx.port)
        return refuse(err::kMlx5QpBadAttr, change.name, qpn, "vhca_port_num is another port");
    if (const char *bad =
            badQpAttr(*qp, attrs, mask, ports_, {limits::kMaxRdAtom, limits::kMaxRdAtom}))
        return refuse(err::kMlx5QpBadAttr, change.name, qpn, bad);
    const bool extended = get(in, kQpcExtension);
    if (const char *bad = extended ? badExtension(opcode, *qp, in) : nullptr)
        return refuse(err::kMlx5QpBadAttr, change.name, qpn, bad);
    const uint32_t set = counterSetAfter(opcode, *qp, in);
    if (set && !objects_.counterSets.find(set))
        return refuse(err::kMlx5QpBadAttr, change.name, qpn, "counter_set_id names no Q counter");
    if (set && !mayShare(qp->owner, objects_.counterSets.at(set).owner))
        return refuseForeign(host_, change.name, "Q counter", set,
                             objects_.counterSets.at(set).owner, qp->owner);
    bindCounterSet(*qp, set);
    if (extended && get(in, kOptParamMaskHigh) & kOptDmaCopy)
        qp->dmaCopy = get(in, kDmaCopyEnable);
    if (extended && get(in, kOptParamMaskHigh) & kOptStreamReset) {
        const auto stream = static_cast<uint16_t>(get(in, kStreamToReset));
        qp->streams.reset(stream);
        trace::dci_stream_reset(host_, qpn, stream);
    }
    dataPath_.qpStateLeaving(*qp, change.to);
    applyQpAttrs(qp->attr, attrs, mask, change.to);
    trace::mlx5_qp_modify(host_, qpn, change.name, cur, change.to, mask);
    dataPath_.qpStateEntered(*qp, cur, change.to, mask);
    return nullptr;
}

const err::Condition *QueuePairs::query(uint32_t qpn, std::span<uint8_t> out,
                                        bool addresses) const {
    const QueuePair *qp = objects_.findQp(qpn);
    if (!qp)
        return refuse(err::kMlx5CmdBadResource, "QUERY_QP", qpn, "no such QP");
    const pib_qp_context &ctx = qp->ctx;
    const pib_qp_attr &a = qp->attr;
    set(out, kState, a.qp_state == PIB_QPS_SQD && a.sq_draining ? 7 : connectXState(a.qp_state));
    set(out, kSt, qp->umr ? st::kRegUmr : serviceType(ctx.type));
    if (ctx.type == PIB_QPT_XRC_TGT)
        set(out, kQpcXrcd, ctx.xrcdn);
    set(out, kPmState, kPmMigrated);
    set(out, kFre, qp->fastRegEnabled);
    set(out, kSendDbrMode, qp->sendDoorbellLess ? kNoDbrExternal : kDbrValid);
    set(out, kLogDciStreams, qp->streams.logChannels);
    set(out, kLogDciErrored, qp->streams.logErrored);
    set(out, kQpcPd, ctx.pdn);
    set(out, kMtu, a.path_mtu);
    set(out, kLogMsgMax, std::bit_width(limits::kMaxMsgSize) - 1);
    set(out, kLogRqSize, ctx.rq_log_wqe_count);
    set(out, kQpcLogRqStride, ctx.rq_log_wqe_stride ? ctx.rq_log_wqe_stride - kStrideUnitShift : 0);
    set(out, kNoSq, ctx.sq_log_wqe_stride == 0);
    set(out, kLogSqSize, ctx.sq_log_wqe_count);
    set(out, kRqType,
        ctx.flags & PIB_QP_USE_SRQ ? kSrqRq
        : ctx.rq_log_wqe_stride    ? kRegularRq
                                   : kZeroRq);
    if (ctx.flags & PIB_QP_USE_SRQ)
        set(out, kSrqn, ctx.srqn);
    set(out, kQpcUarPage, ctx.uar_page);
    set(out, kQpcCounterSetId, qp->counterSet);
    set(out, kRemoteQpn, a.dest_qp_num);
    set(out, kPkeyIndex, a.pkey_index);
    set(out, kVhcaPort, a.port_num);
    set(out, kRlid, a.av.dlid);
    set(out, kSl, a.av.sl);
    set(out, kMlid, a.av.src_path_bits);
    if (a.av.flags & PIB_AV_GRH) {
        set(out, kGrh, 1);
        set(out, kSrcAddrIndex, a.av.sgid_index);
        set(out, kHopLimit, a.av.hop_limit);
        set(out, kTclass, a.av.traffic_class);
        set(out, kFlowLabel, a.av.flow_label);
        if (out.size() >= kRgidByte + sizeof(a.av.dgid))
            std::copy_n(a.av.dgid, sizeof(a.av.dgid), out.data() + kRgidByte);
    }
    set(out, kAckTimeout, a.timeout);
    set(out, kRetryCount, a.retry_cnt);
    set(out, kRnrRetry, a.rnr_retry);
    set(out, kMinRnrNak, a.min_rnr_timer);
    set(out, kLogSraMax, a.max_rd_atomic ? std::bit_width(a.max_rd_atomic - 1u) : 0);
    set(out, kLogRraMax, a.max_dest_rd_atomic ? std::bit_width(a.max_dest_rd_atomic - 1u) : 0);
    set(out, kRre, (a.qp_access_flags & PIB_ACCESS_REMOTE_READ) != 0);
    set(out, kRwe, (a.qp_access_flags & PIB_ACCESS_REMOTE_WRITE) != 0);
    set(out, kRae, (a.qp_access_flags & PIB_ACCESS_REMOTE_ATOMIC) != 0);
    set(out, kNextSendPsn, a.sq_psn);
    set(out, kNextRcvPsn, a.rq_psn);
    set(out, kQkey, a.qkey);
    set(out, kCqnSnd, ctx.send_cqn);
    set(out, kCqnRcv, ctx.recv_cqn);
    set(out, kQpcDbrAddr, addresses ? qp->record : 0);
    set(out, kHwSqCounter, qp->sq.consumer & wqe::kCounterMask);
    set(out, kSwSqCounter, qp->sq.producer & wqe::kCounterMask);
    set(out, kHwRqCounter, qp->rq.consumer);
    set(out, kSwRqCounter, qp->rq.producer);
    return nullptr;
}

const err::Condition *QueuePairs::attachMulticast(bool attach, std::span<const uint8_t> in) {
    const char *command = attach ? "ATTACH_TO_MCG" : "DETACH_FROM_MCG";
    const auto qpn = static_cast<uint32_t>(get(in, kQpn));
    QueuePair *qp = objects_.findQp(qpn);
    if (!qp)
        return refuse(err::kMlx5CmdBadResource, command, qpn, "no such QP");
    MulticastGroups::Gid gid;
    std::copy_n(in.data() + kMulticastGidByte, gid.size(), gid.begin());
    const char *bad = qp->ctx.type != PIB_QPT_UD           ? "it is not a UD QP"
                      : qp->attr.qp_state == PIB_QPS_RESET ? "it has no port yet (RESET)"
                      : gid[0] != 0xff                     ? "the GID is not a multicast GID"
                                                           : nullptr;
    if (bad)
        return refuse(err::kMlx5CmdBadParam, command, qpn, bad);
    const uint8_t status = attach ? objects_.multicast.attach(qp->attr.port_num, gid, 0, qpn)
                                  : objects_.multicast.detach(qp->attr.port_num, gid, qpn);
    if (status != PIB_CMD_STATUS_OK)
        return attach
                   ? refuse(err::kMlx5CmdNoResources, command, qpn, "a multicast limit is reached")
                   : refuse(err::kMlx5CmdBadParam, command, qpn, "it is not attached");
    trace::mcast_attach(host_, qpn, attach, 0, qp->attr.port_num, readBe64(gid.data()),
                        readBe64(gid.data() + 8));
    return nullptr;
}

void QueuePairs::blueFlame(uint32_t uar, uint32_t offset, uint64_t value) {
    if (offset % kBlueFlameHalf)
        return; // the rest of a WQE copied to the register: memory has it
    // The control segment's second big-endian dword: the QP and DS count.
    const uint32_t qpn = __builtin_bswap32(static_cast<uint32_t>(value >> 32)) >> 8;
    QueuePair *qp = ringable(uar, offset, qpn, false);
    if (!qp)
        return;
    const auto producer = wqes_.sendProducer(*qp);
    if (!producer)
        return;
    trace::mlx5_sq_doorbell(host_, uar, qpn, *producer & wqe::kCounterMask);
    dataPath_.sendProduced(*qp, *producer);
}

// QP `qpn`, whose send doorbell the driver wrote at `offset` of UAR page
// `uar`, if that is its SQ's doorbell: a record's QP rings the blue-flame
// registers, a doorbell-less one (`doorbellLess`) the register of its own.
QueuePair *QueuePairs::ringable(uint32_t uar, uint32_t offset, uint32_t qpn, bool doorbellLess) {
    QueuePair *qp = objects_.findQp(qpn);
    const char *bad = !qp                              ? "no such QP"
                      : qp->ctx.sq_log_wqe_stride == 0 ? "it has no SQ"
                      : qp->ctx.uar_page != uar        ? "it is on another UAR page"
                      : qp->sendDoorbellLess != doorbellLess
                          ? (doorbellLess ? "its SQ has a doorbell record (send_dbr_mode 0)"
                                          : "its SQ has no doorbell record: it rings at 0x600")
                          : nullptr;
    if (bad) {
        host_.guestError(err::kMlx5QpDoorbell, "UAR %u offset 0x%x: send doorbell of QP %u: %s",
                         uar, offset, qpn, bad);
        return nullptr;
    }
    return qp;
}

// The doorbell of an SQ without a record (docs/mlx5.md §10.3): the
// first 8 bytes of the last WQE posted, whose index and DS count say
// where the producer counter now stands. An older WQE's (doorbells
// written out of order) moves nothing; one beyond the ring is refused.
void QueuePairs::doorbellLessSend(uint32_t uar, uint64_t value) {
    const uint32_t opcodeWord = __builtin_bswap32(static_cast<uint32_t>(value));
    const uint32_t qpnWord = __builtin_bswap32(static_cast<uint32_t>(value >> 32));
    QueuePair *qp = ringable(uar, kDoorbellLessSend, qpnWord >> 8, true);
    if (!qp)
        return;
    const uint32_t index = opcodeWord >> 8 & wqe::kCounterMask;
    const uint32_t blocks = std::max<uint32_t>(1, ((qpnWord & 0x3f) + 3) / 4);
    const uint32_t end = index + blocks;
    const uint32_t ring = 1u << qp->ctx.sq_log_wqe_count;
    const uint32_t ahead = (end - qp->sq.consumer) & wqe::kCounterMask;
    const uint32_t behind = (qp->sq.consumer - end) & wqe::kCounterMask;
    const uint32_t posted = (qp->sq.producer - qp->sq.consumer) & wqe::kCounterMask;
    if (ahead <= posted || behind <= ring)
        return; // a WQE the device has taken already
    if (ahead > ring) {
        host_.guestError(err::kMlx5QpDoorbell,
                         "QP %u doorbell of WQE 0x%x: %u WQE blocks ahead of the device, the "
                         "ring has %u",
                         qp->number, index, ahead, ring);
        return;
    }
    trace::mlx5_sq_doorbell(host_, uar, qp->number, end & wqe::kCounterMask);
    dataPath_.sendProduced(*qp, qp->sq.consumer + ahead);
}

} // namespace pib::mlx5
