// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_hca_caps.hh"

#include <bit>

#include "limits.hh"
#include "mlx5_general_objects.hh"
#include "mlx5_ifc.hh"

namespace pib::mlx5 {

namespace {

// cmd_hca_cap fields (mlx5_ifc.h), by bit offset and width.
// ifc fields: cmd_hca_cap
namespace cap {
constexpr Field kHcaCap2 = field(0x020, 1); // ifc: hca_cap_2
constexpr Field kEventCap = field(0x090, 1);
constexpr Field kLogMaxSrqSize = field(0x080, 8); // ifc: log_max_srq_sz
constexpr Field kLogMaxQpSize = field(0x088, 8);  // ifc: log_max_qp_sz
constexpr Field kLogMaxQp = field(0x09b, 5);
constexpr Field kLogMaxSrq = field(0x0ab, 5);
constexpr Field kLogMaxCqSize = field(0x0c8, 8); // ifc: log_max_cq_sz
constexpr Field kLogMaxCq = field(0x0db, 5);
constexpr Field kLogMaxEqSize = field(0x0e0, 8); // ifc: log_max_eq_sz
constexpr Field kLogMaxMkey = field(0x0ea, 6);
constexpr Field kLogMaxEq = field(0x0fc, 4);
constexpr Field kLogMaxRaReqDc = field(0x12a, 6);
constexpr Field kLogMaxRaResDc = field(0x13a, 6);
constexpr Field kLogMaxRaReqQp = field(0x14a, 6);
constexpr Field kLogMaxRaResQp = field(0x15a, 6);
constexpr Field kGidTableSize = field(0x170, 16);
constexpr Field kRts2RtsQpCountersSetId = field(0x169, 1); // ifc: rts2rts_qp_counters_set_id
constexpr Field kOutOfSeqCnt = field(0x180, 1);
constexpr Field kRetransmissionQCounters = field(0x182, 1);
constexpr Field kMaxQpCnt = field(0x186, 10);
constexpr Field kPkeyTableSize = field(0x190, 16);
constexpr Field kLocalCaAckDelay = field(0x1ab, 5);
constexpr Field kPortType = field(0x1b6, 2);
constexpr Field kNumPorts = field(0x1b8, 8);
constexpr Field kMcamReg = field(0x1a9, 1);
constexpr Field kLogMaxMsg = field(0x1c3, 5);
constexpr Field kMaxIndirection = field(0x100, 8);
constexpr Field kImaicl = field(0x231, 1);
constexpr Field kUmrExtendedTranslationOffset = field(0x118, 1);
constexpr Field kFixedBufferSize = field(0x108, 1); // KSM keys
constexpr Field kNullMkey = field(0x119, 1);
constexpr Field kLogMaxKlmListSize = field(0x11a, 6);
constexpr Field kQpcExtension = field(0x122, 1);
constexpr Field kDct = field(0x21a, 1);
constexpr Field kBlockLbMc = field(0x228, 1); // ifc: block_lb_mc
constexpr Field kPg = field(0x227, 1);        // on-demand paging
constexpr Field kAtomic = field(0x21e, 1);
constexpr Field kCqOi = field(0x220, 1);
constexpr Field kCqResize = field(0x221, 1);
constexpr Field kCqModeration = field(0x222, 1);
constexpr Field kCmdifChecksum = field(0x210, 2);
constexpr Field kXrc = field(0x23c, 1);
constexpr Field kUd = field(0x23d, 1);
constexpr Field kUc = field(0x23e, 1);
constexpr Field kRc = field(0x23f, 1);
constexpr Field kLogPageSize = field(0x258, 8); // ifc: log_pg_sz
constexpr Field kLogBfRegSize = field(0x26b, 5);
constexpr Field kMaxWqeSizeSq = field(0x290, 16); // ifc: max_wqe_sz_sq
constexpr Field kMaxWqeSizeRq = field(0x2b0, 16); // ifc: max_wqe_sz_rq
constexpr Field kMaxQpMcg = field(0x2e7, 25);
constexpr Field kLogMaxMcg = field(0x318, 8);
constexpr Field kLogMaxPd = field(0x32b, 5);
constexpr Field kLogMaxXrcd = field(0x33b, 5);
constexpr Field kLogMaxUctx = field(0x463, 5);
constexpr Field kGeneralObjTypes = field(0x400, 64);
constexpr Field kLogUarPageSize = field(0x490, 16); // ifc: log_uar_page_sz
constexpr Field kLogMaxDciStreamChannels = field(0x58b, 5);
constexpr Field kLogMaxDciErroredStreams = field(0x593, 5);
constexpr Field kDeviceFrequencyMhz = field(0x4c0, 32);
constexpr Field kDeviceFrequencyKhz = field(0x4e0, 32);
} // namespace cap

// The atomic capability page (atomic_caps in mlx5_ifc.h).
// ifc fields: atomic_caps
namespace atomic {
constexpr Field kReqEndianness = field(0x40, 2); // ifc: atomic_req_8B_endianness_mode
constexpr Field kHostEndiannessOffered =
    field(0x46, 1); // ifc: supported_atomic_req_8B_endianness_mode_1
constexpr uint32_t kHostEndianness = 1;
constexpr Field kOperations = field(0x90, 16); // ifc: atomic_operations
constexpr Field kSizeQp = field(0xb0, 16);     // ifc: atomic_size_qp
constexpr Field kSizeDc = field(0xd0, 16);     // ifc: atomic_size_dc
constexpr uint32_t kCompareSwap = 1u << 0, kFetchAdd = 1u << 1;
constexpr uint32_t kSize8Bytes = 1u << 3;
} // namespace atomic

// The on-demand paging page (odp_cap in Linux 6.12's mlx5_ifc.h; 6.1's
// keeps the memory scheme's fields reserved): the memory scheme's block,
// which mlx5_ib reads once the driver set mem_page_fault. The transport
// scheme's block stays 0: the device raises no WQE or RDMA page faults.
// ifc fields: odp_cap
namespace odp {
constexpr Field kMemPageFault = field(0x600, 1);
} // namespace odp
namespace memory_scheme {
constexpr uint32_t kBlock = 0x200; // ifc: odp_cap.memory_page_fault_scheme_cap
constexpr Field kPagePrefetch = field(kBlock + 0x45, 1);
// A transport's word (odp_per_transport_service_cap): six bits from its
// first, send, receive, write, read, atomic and srq_receive.
constexpr Field kRc =
    field(kBlock + 0x80, 1); // ifc: odp_cap.memory_page_fault_scheme_cap.rc_odp_caps.send
constexpr Field kUd =
    field(kBlock + 0xc0, 1); // ifc: odp_cap.memory_page_fault_scheme_cap.ud_odp_caps.send
constexpr Field kXrc =
    field(kBlock + 0xe0, 1); // ifc: odp_cap.memory_page_fault_scheme_cap.xrc_odp_caps.send
constexpr Field kDc =
    field(kBlock + 0x100, 1); // ifc: odp_cap.memory_page_fault_scheme_cap.dc_odp_caps.send
constexpr uint32_t kSend = 0x20, kReceive = 0x10, kWrite = 0x08, kRead = 0x04, kAtomic = 0x02,
                   kSrqReceive = 0x01;
constexpr uint32_t kAllSides = kSend | kReceive | kWrite | kRead | kAtomic | kSrqReceive;
// The six bits of the transport whose word starts at `first`.
constexpr Field sides(Field first) {
    return field(first.bit, 6);
}
// libmlx5 reads DC's word where the transport scheme's block has it (6.1's
// odp_cap.dc_odp_caps, 6.12's transport_page_fault_scheme_cap's), whichever
// scheme the driver chose.
constexpr Field kTransportDc = field(0x100, 6);
} // namespace memory_scheme

// DMA copies, general page fields rdma-core's mlx5_ifc.h names and
// Linux's keeps reserved.
namespace mmo {
constexpr Field kLogMaxSize = field(0x06b, 5); // log_dma_mmo_max_size
constexpr Field kOnQp = field(0x748, 1);       // dma_mmo_qp
} // namespace mmo

// The event page (device_event_cap in mlx5_ifc.h): bit n of the 64-bit
// word n / 64 for event type n.
// ifc fields: device_event_cap
namespace events {
constexpr Field kUserAffiliated = field(0x000, 64);   // ifc: user_affiliated_events
constexpr Field kUserUnaffiliated = field(0x100, 64); // ifc: user_unaffiliated_events
} // namespace events
// The events the device posts (device.h, MLX5_EVENT_TYPE_*): of a QP,
// SRQ, CQ or DCT, path migration's two only when injected (prm §10); and
// the port's.
constexpr uint64_t kAffiliatedEvents =
    uint64_t{1} << 0x01 | uint64_t{1} << 0x02 | uint64_t{1} << 0x03 | uint64_t{1} << 0x04 |
    uint64_t{1} << 0x05 | uint64_t{1} << 0x07 | uint64_t{1} << 0x10 | uint64_t{1} << 0x11 |
    uint64_t{1} << 0x12 | uint64_t{1} << 0x13 | uint64_t{1} << 0x14 | uint64_t{1} << 0x1c |
    uint64_t{1} << 0x1d;
constexpr uint64_t kUnaffiliatedEvents = uint64_t{1} << 0x09; // PORT_CHANGE

// The second general page (cmd_hca_cap_2). Linux's mlx5_ifc.h keeps the
// bits of the fields the device sets reserved: rdma-core's mlx5_ifc.h
// names the first, its tests' PRM structures the others.
namespace cap2 {
constexpr Field kLogReservedQpnGranularity = field(0x93, 5);
constexpr Field kSendDbrModeNoDbrExt = field(0x2e1, 1);
constexpr Field kLogMaxSendDbrLessQpSq = field(0x2e3, 5);
} // namespace cap2

constexpr uint32_t log2(uint32_t n) {
    return static_cast<uint32_t>(std::bit_width(n) - 1);
}

constexpr uint32_t kPortTypeIb = 0;
// pkey_table_size is encoded: 0 means 128 entries (the driver's choice).
constexpr uint32_t kPkeyTable128 = 0;
constexpr uint32_t kClockKhz = 1000000;

} // namespace

void HcaCaps::reset() {
    max_.fill(0);
    std::span<uint8_t> m(max_);
    // Sizes of the objects the core has (limits.hh).
    mlx5::set(m, cap::kLogMaxQp, log2(limits::kMaxQp));
    mlx5::set(m, cap::kLogMaxQpSize, limits::kLogMaxMlx5QpSize);
    mlx5::set(m, cap::kLogMaxSrq, log2(limits::kMaxSrq));
    mlx5::set(m, cap::kLogMaxSrqSize, limits::kLogMaxSrqWr);
    mlx5::set(m, cap::kLogMaxCq, log2(limits::kMaxCq));
    mlx5::set(m, cap::kLogMaxCqSize, limits::kLogMaxCqe);
    mlx5::set(m, cap::kLogMaxEq, log2(limits::kMaxEq));
    mlx5::set(m, cap::kLogMaxEqSize, limits::kLogMaxEqe);
    mlx5::set(m, cap::kLogMaxMkey, log2(limits::kMaxMr));
    mlx5::set(m, cap::kLogMaxPd, log2(limits::kMaxPd));
    // DEVX (docs/mlx5.md §16): mlx5_ib makes a user context for every
    // process that opens the device.
    mlx5::set(m, cap::kLogMaxUctx, log2(limits::kMaxUserContexts));
    // DEVX's general objects (§16.3): ranges of reserved QP numbers, of
    // the size the second general page names.
    mlx5::set(m, cap::kGeneralObjTypes, GeneralObjects::kTypesOffered);
    mlx5::set(m, cap::kHcaCap2, 1);
    general2_.fill(0);
    mlx5::set(general2_, cap2::kLogReservedQpnGranularity, GeneralObjects::kLogQpnsPerRange);
    // SQs without a doorbell record, of any size (docs/mlx5.md §10.3).
    mlx5::set(general2_, cap2::kSendDbrModeNoDbrExt, 1);
    mlx5::set(general2_, cap2::kLogMaxSendDbrLessQpSq, limits::kLogMaxMlx5QpSize);
    mlx5::set(m, cap::kLogMaxXrcd, log2(limits::kMaxXrcd));
    mlx5::set(m, cap::kLogMaxRaReqQp, log2(limits::kMaxRdAtom));
    mlx5::set(m, cap::kLogMaxRaResQp, log2(limits::kMaxRdAtom));
    mlx5::set(m, cap::kLogMaxMcg, log2(limits::kMaxMcastGroups));
    mlx5::set(m, cap::kMaxQpMcg, limits::kMaxMcastQpAttach);
    mlx5::set(m, cap::kLogMaxMsg, log2(limits::kMaxMsgSize));
    mlx5::set(m, cap::kLocalCaAckDelay, limits::kLocalCaAckDelay);
    // The tables' sizes an IB driver uses come from the SMA (NodeInfo,
    // PortInfo); these encodings are the smallest there are.
    mlx5::set(m, cap::kGidTableSize, 0); // 8 entries
    mlx5::set(m, cap::kPkeyTableSize, kPkeyTable128);
    // An InfiniBand function with the core's ports and transports.
    mlx5::set(m, cap::kPortType, kPortTypeIb);
    mlx5::set(m, cap::kNumPorts, numPorts_);
    mlx5::set(m, cap::kRc, 1);
    mlx5::set(m, cap::kUc, 1);
    mlx5::set(m, cap::kUd, 1);
    mlx5::set(m, cap::kXrc, 1);
    // DC (docs/mlx5.md §15): DCIs and DCTs, with RC's READ and atomic
    // depths.
    mlx5::set(m, cap::kDct, 1);
    mlx5::set(m, cap::kLogMaxRaReqDc, log2(limits::kMaxRdAtom));
    mlx5::set(m, cap::kLogMaxRaResDc, log2(limits::kMaxRdAtom));
    // The events a DEVX process may subscribe to, which mlx5_core then
    // takes on its async EQ too: DCT_KEY_VIOLATION among them, which
    // ARM_DCT_FOR_KEY_VIOLATION asks for (§15.1).
    mlx5::set(m, cap::kEventCap, 1);
    events_.fill(0);
    mlx5::set(events_, events::kUserAffiliated, kAffiliatedEvents);
    mlx5::set(events_, events::kUserUnaffiliated, kUnaffiliatedEvents);
    // DCI streams (§15.4): a stream's errors fail it alone. libmlx5 resets
    // a stream by the QP context extension (qpc_ext), which state changes
    // may carry for that and for DMA copies (§10.2), and nothing else.
    mlx5::set(m, cap::kLogMaxDciStreamChannels, limits::kLogMaxDciStreams);
    mlx5::set(m, cap::kLogMaxDciErroredStreams, limits::kLogMaxDciErroredStreams);
    mlx5::set(m, cap::kQpcExtension, 1);
    // CQs that ignore overrun, and MODIFY_CQ's resize and event
    // moderation (docs/mlx5.md §8).
    mlx5::set(m, cap::kCqOi, 1);
    mlx5::set(m, cap::kCqResize, 1);
    mlx5::set(m, cap::kCqModeration, 1);
    // IBA's 8-byte atomics, which the core's responder executes: with
    // these, mlx5_ib takes remote atomic access on an RC QP (atomic_mode
    // IB compatible), which the CM asks for on every connection it makes.
    // The core works on the 8 bytes in host order, at the responder and in
    // the original value the requester stores: the host-endianness mode,
    // the one the device has, so it is the current one from the start and
    // the one a driver may set. With it mlx5_ib reports atomic_cap HCA.
    mlx5::set(m, cap::kAtomic, 1);
    atomic_.fill(0);
    mlx5::set(atomic_, atomic::kReqEndianness, atomic::kHostEndianness);
    mlx5::set(atomic_, atomic::kHostEndiannessOffered, 1);
    mlx5::set(atomic_, atomic::kOperations, atomic::kCompareSwap | atomic::kFetchAdd);
    mlx5::set(atomic_, atomic::kSizeQp, atomic::kSize8Bytes);
    mlx5::set(atomic_, atomic::kSizeDc, atomic::kSize8Bytes);
    // UMR maps MTT keys, up to kMaxFastRegPages pages a fast registration
    // (the driver's max_fast_reg_page_list_len), and lays out indirect
    // (KLM) keys of as many entries, each entry a direct key: one level
    // of indirection (docs/mlx5.md §4.5, §10). umr_modify_entity_size_disabled
    // and umr_modify_atomic_disabled stay 0: with the one set, the driver
    // has no IB_WR_REG_MR at all; with the other, it cannot load a key
    // by UMR while it asks to set the atomic right (as it does with
    // `atomic`).
    mlx5::set(m, cap::kLogMaxKlmListSize, log2(limits::kMaxFastRegPages));
    // The UMR QP loads a key's table at any offset (xlt_offset_47_16 too,
    // docs/mlx5.md §10.1): so the driver loads every user memory region
    // by UMR, however large, rather than in one CREATE_MKEY.
    mlx5::set(m, cap::kUmrExtendedTranslationOffset, 1);
    mlx5::set(m, cap::kMaxIndirection, 1);
    // Memory windows (docs/mlx5.md §10.5), type 1 and 2B. mlx5_ib offers
    // them with this bit, and tells kernel consumers they may register
    // gappy lists (IB_MR_TYPE_SG_GAPS: KLM fast registrations, §10.4).
    mlx5::set(m, cap::kImaicl, 1);
    // A UD QP never receives the multicast it sent (the core's datagram
    // rule, docs/mlx5.md §10): block_lb_mc, which a QP's context asks for
    // (ibv's IBV_QP_CREATE_BLOCK_SELF_MCAST_LB, IPoIB's QP), is always so.
    mlx5::set(m, cap::kBlockLbMc, 1);
    // DMA copies on RC QPs (docs/mlx5.md §10.2), up to kMaxDmaCopy bytes
    // a WQE: libmlx5's mlx5dv_wr_memcpy.
    mlx5::set(m, mmo::kOnQp, 1);
    mlx5::set(m, mmo::kLogMaxSize, log2(limits::kMaxDmaCopy));
    // Q counters (docs/mlx5.md §4.6): counter sets QPs are bound to at
    // RST2INIT and rebound in RTS, with the basic counters, out_of_sequence
    // and the retransmission ones, which the core's transport counts.
    mlx5::set(m, cap::kMaxQpCnt, limits::kMaxCounterSets);
    mlx5::set(m, cap::kOutOfSeqCnt, 1);
    mlx5::set(m, cap::kRetransmissionQCounters, 1);
    mlx5::set(m, cap::kRts2RtsQpCountersSetId, 1);
    // MCAM and the registers it names: the firmware's version for devlink
    // (mlx5_registers.cc).
    mlx5::set(m, cap::kMcamReg, 1);
    // On-demand paging (docs/mlx5.md §10.6): a key the UMR QP loads maps a
    // page only while its entry's present bits say so, and a transfer that
    // reaches one it does not raises a page fault (the memory scheme's
    // event). RC, XRC and DC fault on every side; UD on the sending side
    // (a UD receive cannot wait for a page: it completes in error). With `pg`
    // the driver also sets the present bits of every MTT it writes.
    // Implicit ODP (docs/mlx5.md §10.7) takes KSM keys (fixed_buffer_size)
    // and a null key: with both, mlx5_ib offers it.
    mlx5::set(m, cap::kPg, 1);
    mlx5::set(m, cap::kFixedBufferSize, 1);
    mlx5::set(m, cap::kNullMkey, 1);
    odpMax_.fill(0);
    mlx5::set(odpMax_, odp::kMemPageFault, 1);
    mlx5::set(odpMax_, memory_scheme::kPagePrefetch, 1);
    mlx5::set(odpMax_, memory_scheme::sides(memory_scheme::kRc), memory_scheme::kAllSides);
    mlx5::set(odpMax_, memory_scheme::sides(memory_scheme::kXrc), memory_scheme::kAllSides);
    mlx5::set(odpMax_, memory_scheme::sides(memory_scheme::kUd), memory_scheme::kSend);
    mlx5::set(odpMax_, memory_scheme::sides(memory_scheme::kDc), memory_scheme::kAllSides);
    odpCurrent_ = odpMax_; // the scheme's block is there; the driver picks the scheme
    mlx5::set(odpCurrent_, odp::kMemPageFault, 0);
    mlx5::set(m, cap::kLogPageSize, limits::kMinLogPageSize);
    mlx5::set(m, cap::kLogBfRegSize, 9); // 512-byte doorbell registers, four per UAR
    mlx5::set(m, cap::kMaxWqeSizeSq, 1u << limits::kLogMaxWqeStride);
    mlx5::set(m, cap::kMaxWqeSizeRq, 1u << limits::kLogMaxWqeStride);
    // The device clock (the initialization segment's internal timer, the
    // CQEs' timestamps) counts the host's nanoseconds: 1 GHz.
    mlx5::set(m, cap::kDeviceFrequencyMhz, kClockKhz / 1000);
    mlx5::set(m, cap::kDeviceFrequencyKhz, kClockKhz);
    current_ = max_;
}

// Every other type the PRM names is a page of zeros: none of its
// features is offered (a DEVX process asks for any; the kernel asks for
// those a general bit says are there, and none is).
const HcaCaps::Page *HcaCaps::page(uint16_t type, bool current) const {
    static const Page kNone{};
    if (type == kAtomic)
        return &atomic_;
    if (type == kGeneral2)
        return &general2_;
    if (type == kDeviceEvent)
        return &events_;
    if (type == kOdp)
        return current ? &odpCurrent_ : &odpMax_;
    if (type == kGeneral)
        return current ? &current_ : &max_;
    return type < kTypes ? &kNone : nullptr;
}

const err::Condition *HcaCaps::apply(const Host &host, uint16_t type,
                                     std::span<const uint8_t> requested) {
    if (type == kAtomic) {
        if (get(requested, atomic::kReqEndianness) == atomic::kHostEndianness)
            return nullptr;
        host.guestError(err::kMlx5CmdBadParam,
                        "SET_HCA_CAP: atomic_req_8B_endianness_mode %u: only host endianness (1)",
                        static_cast<unsigned>(get(requested, atomic::kReqEndianness)));
        return &err::kMlx5CmdBadParam;
    }
    if (type == kOdp)
        return applyOdp(host, requested);
    if (type != kGeneral) {
        host.guestError(err::kMlx5CmdBadParam, "SET_HCA_CAP of capability type 0x%x", type);
        return &err::kMlx5CmdBadParam;
    }
    const uint64_t logMaxQp = get(requested, cap::kLogMaxQp);
    const uint64_t checksum = get(requested, cap::kCmdifChecksum);
    const uint64_t uarPage = get(requested, cap::kLogUarPageSize);
    const uint64_t pkeys = get(requested, cap::kPkeyTableSize);
    const char *bad = logMaxQp > get(max_, cap::kLogMaxQp) ? "log_max_qp beyond the maximum"
                      : checksum != 0          ? "cmdif_checksum: the device checks no signatures"
                      : uarPage != 0           ? "log_uar_page_sz: UAR pages are 4 KiB"
                      : pkeys != kPkeyTable128 ? "pkey_table_size other than 128 entries"
                                               : nullptr;
    if (bad) {
        host.guestError(err::kMlx5CmdBadParam, "SET_HCA_CAP: %s", bad);
        return &err::kMlx5CmdBadParam;
    }
    mlx5::set(current_, cap::kLogMaxQp, logMaxQp);
    return nullptr;
}

// mlx5_core sets mem_page_fault, and nothing else, in a copy of the
// current page: any field within the maximum is taken. Once the memory
// scheme is chosen, DC's word shows in the transport scheme's block too,
// where libmlx5 reads it (mlx5dv's dc_odp_caps); a driver of the
// transport scheme, which never chooses the memory one, sees no DC there.
const err::Condition *HcaCaps::applyOdp(const Host &host, std::span<const uint8_t> requested) {
    Page allowed = odpMax_;
    mlx5::set(allowed, memory_scheme::kTransportDc,
              get(odpMax_, memory_scheme::sides(memory_scheme::kDc)));
    for (size_t i = 0; i < kPageBytes; ++i) {
        if (!(requested[i] & ~allowed[i]))
            continue;
        host.guestError(err::kMlx5CmdBadParam,
                        "SET_HCA_CAP of the ODP page: byte 0x%zx asks for 0x%x beyond the maximum",
                        i, requested[i] & ~allowed[i]);
        return &err::kMlx5CmdBadParam;
    }
    std::copy_n(requested.begin(), kPageBytes, odpCurrent_.begin());
    mlx5::set(odpCurrent_, memory_scheme::kTransportDc,
              memoryPageFaults() ? get(odpCurrent_, memory_scheme::sides(memory_scheme::kDc)) : 0);
    return nullptr;
}

bool HcaCaps::memoryPageFaults() const {
    return get(odpCurrent_, odp::kMemPageFault);
}

} // namespace pib::mlx5
