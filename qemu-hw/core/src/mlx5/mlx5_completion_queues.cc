// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_completion_queues.hh"

#include "core_operations.hh"
#include "limits.hh"
#include "mlx5_ifc.hh"
#include "mlx5_page_list.hh"
#include "mlx5_user_contexts.hh"
#include "ring.hh"
#include "trace.hh"

#include <algorithm>
#include <array>

namespace pib::mlx5 {

namespace {

// create_cq_in: the CQ context (cqc) at byte 0x10, then the page list.
constexpr uint32_t kCqc = 0x10; // ifc: create_cq_in.cq_context
constexpr size_t kCqcBytes = 0x40;
constexpr Field kDbrUmemValid = field(8 * kCqc + 0x06, 1);
constexpr Field kApuCq = field(8 * kCqc + 0x07, 1);
constexpr Field kCqeSize = field(8 * kCqc + 0x08, 3);         // ifc: cqe_sz
constexpr Field kCollapsed = field(8 * kCqc + 0x0b, 1);       // ifc: cc
constexpr Field kBreakModeration = field(8 * kCqc + 0x0d, 1); // ifc: scqe_break_moderation_en
constexpr Field kOverrunIgnore = field(8 * kCqc + 0x0e, 1);   // ifc: oi
constexpr Field kCqeCompression = field(8 * kCqc + 0x11, 1);  // ifc: cqe_comp_en
constexpr Field kCqcPageOffset = field(8 * kCqc + 0x54, 6);
constexpr Field kLogCqSize = field(8 * kCqc + 0x63, 5);
constexpr Field kCqcUarPage = field(8 * kCqc + 0x68, 24);
constexpr Field kPeriod = field(8 * kCqc + 0x84, 12);   // ifc: cq_period
constexpr Field kMaxCount = field(8 * kCqc + 0x90, 16); // ifc: cq_max_count
constexpr Field kEqn = field(8 * kCqc + 0xa0, 32);      // ifc: c_eqn_or_apu_element
constexpr Field kCqcLogPageSize = field(8 * kCqc + 0xc3, 5);
constexpr Field kCqcDbrAddr = field(8 * kCqc + 0x1c0, 64);
constexpr Field kConsumerCounter = field(8 * kCqc + 0x148, 24);
constexpr Field kProducerCounter = field(8 * kCqc + 0x168, 24);
constexpr Field kCqUmemValid = field(0x2e0, 1);
constexpr uint32_t kCqPageList = 0x110;
// modify_cq_in: the CQ and what changes, then a cqc and a page list where
// create_cq_in has them.
constexpr Field kModifyCqn = field(0x48, 24);
constexpr Field kFieldSelect = field(0x60, 32);
constexpr uint32_t kSelectLogSize = 1u << 0, kSelectPageOffset = 1u << 1,
                   kSelectPageSize = 1u << 2;                       // MLX5_MODIFY_CQ_MASK_*
constexpr uint32_t kSelectPeriod = 1u << 0, kSelectCount = 1u << 1; // MLX5_CQ_MODIFY_*

// cqe_sz 0: 64-byte CQEs; 1: 128-byte ones, whose second half is the
// 64-byte CQE. The first half would hold received data scattered to the
// CQE, which is not offered (sctr_data_cqe 0), so it stays zero.
constexpr unsigned kLogCqeBytes = 6;
constexpr uint8_t kMaxCqeSize = 1;

// The 64-byte CQE (device.h's mlx5_cqe64 and mlx5_err_cqe).
namespace cqe {
constexpr uint32_t kMlPath = 0x11;
constexpr uint32_t kSlid = 0x16;
constexpr uint32_t kFlagsRqpn = 0x18; // GRH 29:28, SL 27:24, source QP 23:0
constexpr uint32_t kSrqn = 0x20;
constexpr uint32_t kImmediate = 0x24; // or the invalidated R_Key, or QP1's P_Key
constexpr uint32_t kByteCount = 0x2c;
constexpr uint32_t kTimestamp = 0x30;
constexpr uint32_t kVendorSyndrome = 0x36;
constexpr uint32_t kSyndrome = 0x37;
constexpr uint32_t kOpcodeQpn = 0x38; // a send's WQE opcode 31:24, QP 23:0
constexpr uint32_t kWqeCounter = 0x3c;
constexpr uint32_t kOpOwn = 0x3f; // CQE opcode 7:4, owner bit 0
// CQE opcodes (cq.h, MLX5_CQE_*).
constexpr uint8_t kRequester = 0x0;
constexpr uint8_t kReceiveWriteImm = 0x1;
constexpr uint8_t kReceiveSend = 0x2;
constexpr uint8_t kReceiveSendImm = 0x3;
constexpr uint8_t kReceiveSendInv = 0x4;
constexpr uint8_t kResize = 0x5; // the last CQE of a ring a resize left
constexpr uint8_t kRequesterError = 0xd;
constexpr uint8_t kResponderError = 0xe;
} // namespace cqe

// The WQE opcode a requester's CQE names (MLX5_OPCODE_*), from the
// completion's: the driver turns it back into the work completion's.
uint8_t sendOpcode(uint8_t wcOpcode) {
    switch (wcOpcode) {
    case PIB_WC_RDMA_WRITE:
        return 0x08;
    case PIB_WC_RDMA_READ:
        return 0x10;
    case PIB_WC_COMP_SWAP:
        return 0x11;
    case PIB_WC_FETCH_ADD:
        return 0x12;
    case PIB_WC_LOCAL_INV:
    case PIB_WC_REG_MR:
    case PIB_WC_BIND_MW:
        return 0x25; // UMR: the driver's own record says which
    case kWcNop:
        return 0x00;
    case kWcDmaCopy:
        return 0x2f; // MMO
    default:
        return 0x0a; // SEND
    }
}

// The error syndrome (MLX5_CQE_SYNDROME_*) of a completion status.
uint8_t syndromeOf(uint8_t status) {
    switch (status) {
    case PIB_WC_LOC_LEN_ERR:
        return 0x01;
    case PIB_WC_LOC_QP_OP_ERR:
        return 0x02;
    case PIB_WC_LOC_PROT_ERR:
        return 0x04;
    case PIB_WC_WR_FLUSH_ERR:
        return 0x05;
    case PIB_WC_MW_BIND_ERR:
        return 0x06;
    case PIB_WC_BAD_RESP_ERR:
        return 0x10;
    case PIB_WC_LOC_ACCESS_ERR:
        return 0x11;
    case PIB_WC_REM_INV_REQ_ERR:
        return 0x12;
    case PIB_WC_REM_ACCESS_ERR:
        return 0x13;
    case PIB_WC_REM_OP_ERR:
        return 0x14;
    case PIB_WC_RETRY_EXC_ERR:
        return 0x15;
    case PIB_WC_RNR_RETRY_EXC_ERR:
        return 0x16;
    default:
        return 0x22; // remote aborted: the nearest to "something else"
    }
}

bool isReceive(uint8_t wcOpcode) {
    return wcOpcode == PIB_WC_RECV || wcOpcode == PIB_WC_RECV_RDMA_WITH_IMM;
}

uint8_t receiveOpcode(const Completion &c) {
    if (c.opcode == PIB_WC_RECV_RDMA_WITH_IMM)
        return cqe::kReceiveWriteImm;
    if (c.immediate)
        return cqe::kReceiveSendImm;
    return c.invalidate ? cqe::kReceiveSendInv : cqe::kReceiveSend;
}

} // namespace

const err::Condition *CompletionQueues::checkContext(std::span<const uint8_t> in) const {
    const uint64_t logPage = get(in, kCqcLogPageSize);
    const auto uar = static_cast<uint32_t>(get(in, kCqcUarPage));
    const char *bad =
        get(in, kCqeSize) > kMaxCqeSize ? "cqe_sz: only 64- and 128-byte CQEs"
        : get(in, kCqeCompression) || get(in, kCollapsed) || get(in, kApuCq)
            ? "CQE compression, collapsed and APU CQs are not offered"
        : get(in, kBreakModeration) ? "scqe_break_moderation_en is not offered"
        : get(in, kDbrUmemValid) || get(in, kCqUmemValid) ? "user memory objects are not offered"
        : get(in, kLogCqSize) > limits::kLogMaxCqe        ? "log_cq_size beyond log_max_cq_sz"
        : logPage > PageList::kMaxLogPageSize             ? "log_page_size"
        : !PageList::startsOnAdapterPage(get(in, kCqcLogPageSize), get(in, kCqcPageOffset))
            ? "page_offset: the ring does not start on a 4 KiB boundary"
        : !uars_.given(uar)                                  ? "uar_page: not given by ALLOC_UAR"
        : !eqs_.exists(static_cast<uint32_t>(get(in, kEqn))) ? "c_eqn: no such EQ"
        : !isDoorbellRecord(host_, get(in, kCqcDbrAddr)) ? "dbr_addr: not 8-byte aligned guest RAM"
                                                         : nullptr;
    if (bad) {
        host_.guestError(err::kMlx5CqBadContext, "CREATE_CQ: %s", bad);
        return &err::kMlx5CqBadContext;
    }
    return nullptr;
}

// The ring's pages go to the core's MTT, where the core's EventWriter
// finds them.
const err::Condition *CompletionQueues::mapPages(std::span<const uint8_t> in,
                                                 pib_buf_desc &buf) const {
    const uint64_t bytes = uint64_t{1} << (get(in, kLogCqSize) + kLogCqeBytes + get(in, kCqeSize));
    return PageList::loadAndMap(host_, objects_.mtt, in, kCqPageList,
                                {get(in, kCqcLogPageSize), get(in, kCqcPageOffset), bytes},
                                "CREATE_CQ", err::kMlx5CqBadPages, &buf);
}

const err::Condition *CompletionQueues::create(std::span<const uint8_t> in, uint32_t &cqn) {
    if (objects_.cqs.size() == objects_.cqs.capacity()) {
        host_.guestError(err::kMlx5CmdNoResources, "CREATE_CQ: all %u CQs exist",
                         objects_.cqs.capacity());
        return &err::kMlx5CmdNoResources;
    }
    if (const err::Condition *why = checkContext(in))
        return why;
    const auto caller = static_cast<Owner>(get(in, kUid));
    const uint64_t uar = get(in, kCqcUarPage);
    if (!mayShare(caller, uars_.owner(uar)))
        return refuseForeign(host_, "CREATE_CQ", "UAR page", uar, uars_.owner(uar), caller);
    auto cq = std::make_unique<CompletionQueue>();
    cq->owner = caller;
    if (const err::Condition *why = mapPages(in, cq->ctx.buf))
        return why;
    cq->ctx.log_size = static_cast<uint32_t>(get(in, kLogCqSize));
    cq->cqeFormat = static_cast<uint8_t>(get(in, kCqeSize));
    cq->ignoreOverrun = get(in, kOverrunIgnore) != 0;
    cq->ctx.eqn = static_cast<uint32_t>(get(in, kEqn));
    cq->ctx.uar_page = static_cast<uint32_t>(get(in, kCqcUarPage));
    cq->ctx.ci_record = get(in, kCqcDbrAddr);
    cq->ctx.moderation_count = static_cast<uint16_t>(get(in, kMaxCount));
    cq->ctx.moderation_period = static_cast<uint16_t>(get(in, kPeriod));
    const CompletionQueue &made = *cq;
    cqn = *objects_.cqs.insert(std::move(cq)); // there is room: checked above
    eqs_.hold(made.ctx.eqn);
    trace::mlx5_cq_create(host_, cqn, made.ctx.log_size, made.ctx.eqn, made.ctx.uar_page);
    return nullptr;
}

// The CREATE_CQ input that makes `cq` as it is now, its ring the one a
// resize may have given it (the device's state).
std::vector<uint8_t> CompletionQueues::createInput(const CompletionQueue &cq) const {
    std::vector<uint8_t> in = PageList::inputFor(objects_.mtt, cq.ctx.buf, kCqPageList);
    set(in, kUid, cq.owner);
    set(in, kCqeSize, cq.cqeFormat);
    set(in, kOverrunIgnore, cq.ignoreOverrun);
    set(in, kLogCqSize, cq.ctx.log_size);
    set(in, kCqcUarPage, cq.ctx.uar_page);
    set(in, kPeriod, cq.ctx.moderation_period);
    set(in, kMaxCount, cq.ctx.moderation_count);
    set(in, kEqn, cq.ctx.eqn);
    set(in, kCqcDbrAddr, cq.ctx.ci_record);
    return in;
}

// query_cq_out's context is where create_cq_in's is.
const err::Condition *CompletionQueues::query(uint32_t cqn, std::span<uint8_t> out,
                                              bool addresses) const {
    const CompletionQueue *cq = objects_.cqs.find(cqn);
    if (!cq) {
        host_.guestError(err::kMlx5CmdBadResource, "QUERY_CQ of CQ %u, which does not exist", cqn);
        return &err::kMlx5CmdBadResource;
    }
    const std::vector<uint8_t> in = createInput(*cq);
    const size_t end = std::min(out.size(), kCqc + kCqcBytes);
    if (end > kCqc)
        std::copy(in.begin() + kCqc, in.begin() + static_cast<ptrdiff_t>(end), out.begin() + kCqc);
    if (!addresses)
        set(out, kCqcDbrAddr, 0);
    set(out, kConsumerCounter, cq->consumer & kMask24);
    set(out, kProducerCounter, cq->producer & kMask24);
    return nullptr;
}

const err::Condition *CompletionQueues::destroy(uint32_t cqn) {
    const CompletionQueue *cq = objects_.cqs.find(cqn);
    if (!cq) {
        host_.guestError(err::kMlx5CmdBadResource, "DESTROY_CQ of CQ %u, which does not exist",
                         cqn);
        return &err::kMlx5CmdBadResource;
    }
    if (cq->refs) {
        host_.guestError(err::kMlx5CmdInUse, "DESTROY_CQ of CQ %u, which %u queues use", cqn,
                         cq->refs);
        return &err::kMlx5CmdInUse;
    }
    eqs_.unhold(cq->ctx.eqn);
    objects_.mtt.release(cq->ctx.buf.mtt_index);
    objects_.cqs.erase(cqn);
    trace::mlx5_cq_destroy(host_, cqn);
    return nullptr;
}

// The CQ a MODIFY_CQ names; nullptr (a guest error) if it does not exist.
CompletionQueue *CompletionQueues::modified(uint32_t cqn) {
    CompletionQueue *cq = objects_.cqs.find(cqn);
    if (!cq)
        host_.guestError(err::kMlx5CmdBadResource, "MODIFY_CQ of CQ %u, which does not exist", cqn);
    return cq;
}

// MODIFY_CQ with op_mod 1, as mlx5_ib_resize_cq sends it: a new ring of
// 2^log_cq_size CQEs (of cqe_sz) in a new page list. The device writes a
// resize CQE (opcode 5) in the old ring's next slot, then goes on in the
// new ring from the count after it; the driver copies what it had not
// consumed, up to that CQE, into the new ring itself (libmlx5's
// mlx5_cq_resize_copy_cqes). Both rings must have room for that.
const err::Condition *CompletionQueues::resize(std::span<const uint8_t> in) {
    const auto cqn = static_cast<uint32_t>(get(in, kModifyCqn));
    CompletionQueue *cq = modified(cqn);
    if (!cq)
        return &err::kMlx5CmdBadResource;
    const uint64_t select = get(in, kFieldSelect);
    const uint64_t logSize = get(in, kLogCqSize);
    const char *bad =
        !(select & kSelectLogSize) ||
                (select & ~uint64_t{kSelectLogSize | kSelectPageOffset | kSelectPageSize})
            ? "resize_field_select: the size, and only the size and page fields, change"
        : get(in, kCqeSize) > kMaxCqeSize ? "cqe_sz: only 64- and 128-byte CQEs"
        : logSize > limits::kLogMaxCqe    ? "log_cq_size beyond log_max_cq_sz"
        : get(in, kCqcLogPageSize) > PageList::kMaxLogPageSize ? "log_page_size"
        : !PageList::startsOnAdapterPage(get(in, kCqcLogPageSize), get(in, kCqcPageOffset))
            ? "page_offset: the ring does not start on a 4 KiB boundary"
        : get(in, kCqUmemValid) ? "user memory objects are not offered"
                                : nullptr;
    if (bad) {
        host_.guestError(err::kMlx5CqBadContext, "MODIFY_CQ of CQ %u: %s", cqn, bad);
        return &err::kMlx5CqBadContext;
    }
    if (const auto consumer = readConsumer(cq->ctx.ci_record, cq->producer))
        cq->consumer = *consumer;
    const uint32_t pending = cq->producer - cq->consumer;
    if (pending >= (1u << cq->ctx.log_size) || pending > (1u << logSize)) {
        trace::cq_resize_refused(host_, cqn, static_cast<unsigned>(logSize), pending);
        return &err::kCqResizeUnconsumed;
    }
    pib_buf_desc buf{};
    if (const err::Condition *why = mapPages(in, buf))
        return why;
    if (!writeResizeCqe(*cq)) {
        objects_.mtt.release(buf.mtt_index);
        host_.guestError(err::kCqDma, "CQ %u: cannot write the resize CQE at count %u", cqn,
                         cq->producer);
        return &err::kMlx5CqBadPages;
    }
    trace::mlx5_cq_resize(host_, cqn, static_cast<unsigned>(logSize), cq->producer - 1);
    objects_.mtt.release(cq->ctx.buf.mtt_index);
    cq->ctx.buf = buf;
    cq->ctx.log_size = static_cast<uint32_t>(logSize);
    cq->cqeFormat = static_cast<uint8_t>(get(in, kCqeSize));
    cq->overrun = false;
    return nullptr;
}

// MODIFY_CQ with op_mod 0, as mlx5_core_modify_cq_moderation sends it
// for mlx5_ib_modify_cq (ibv_modify_cq, rdma_dim): the event moderation of
// the context's cq_period and cq_max_count, those the field select names.
const err::Condition *CompletionQueues::moderate(std::span<const uint8_t> in) {
    const auto cqn = static_cast<uint32_t>(get(in, kModifyCqn));
    CompletionQueue *cq = modified(cqn);
    if (!cq)
        return &err::kMlx5CmdBadResource;
    const uint64_t select = get(in, kFieldSelect);
    if (!select || (select & ~uint64_t{kSelectPeriod | kSelectCount})) {
        host_.guestError(err::kMlx5CqBadContext,
                         "MODIFY_CQ of CQ %u: modify_field_select 0x%x: only the period and count",
                         cqn, static_cast<unsigned>(select));
        return &err::kMlx5CqBadContext;
    }
    const auto period = select & kSelectPeriod ? static_cast<uint16_t>(get(in, kPeriod))
                                               : cq->ctx.moderation_period;
    const auto count = select & kSelectCount ? static_cast<uint16_t>(get(in, kMaxCount))
                                             : cq->ctx.moderation_count;
    events_.moderation().change(cqn, *cq, count, period);
    return nullptr;
}

bool CompletionQueues::writeResizeCqe(CompletionQueue &cq) {
    const unsigned logBytes = logCqeBytes(cq);
    std::array<uint8_t, 128> bytes{};
    const std::span<uint8_t> slot(bytes.data(), size_t{1} << logBytes);
    const uint32_t pass = cq.producer >> cq.ctx.log_size;
    slot.last(64)[cqe::kOpOwn] = static_cast<uint8_t>(cqe::kResize << 4 | (pass & 1));
    const uint32_t index = cq.producer & ((1u << cq.ctx.log_size) - 1);
    const auto addr =
        ringAddress(objects_.mtt, cq.ctx.buf, uint64_t{index} << logBytes, slot.size());
    if (!addr || !host_.dmaWriteOwnerLast(*addr, slot, cqeOwnerByte(cq)))
        return false;
    ++cq.producer;
    return true;
}

// Counters are 24 bits: one less than half their space ahead is ahead.
constexpr uint32_t kHalf24 = 1u << 23;

// The driver writes two big-endian dwords, in this order: the arm
// sequence number 29:28, the command 27:24 (0 next, 1 solicited) and its
// consumer counter 23:0; then the CQ's number (mlx5_cq_arm).
void CompletionQueues::armDoorbell(uint32_t uar, uint64_t value) {
    const uint32_t word = __builtin_bswap32(static_cast<uint32_t>(value));
    const uint32_t cqn = __builtin_bswap32(static_cast<uint32_t>(value >> 32)) & kMask24;
    const uint32_t command = word >> 24 & 0xf;
    const uint32_t consumer = word & kMask24;
    trace::mlx5_cq_arm(host_, uar, cqn, consumer, command);
    CompletionQueue *cq = objects_.cqs.find(cqn);
    if (!cq || cq->ctx.uar_page != uar || command > 1) {
        host_.guestError(err::kMlx5CqDoorbell, "UAR %u: arm of CQ %u with command %u: %s", uar, cqn,
                         command,
                         !cq                       ? "no such CQ"
                         : cq->ctx.uar_page != uar ? "it is on another UAR page"
                                                   : "no such command");
        return;
    }
    // A counter beyond the CQEs written names none: the driver's error.
    const uint32_t ahead = (consumer - cq->producer) & kMask24;
    if (ahead != 0 && ahead < kHalf24) {
        host_.guestError(err::kMlx5CqDoorbell,
                         "UAR %u: CQ %u consumer counter %u beyond the %u CQEs written", uar, cqn,
                         consumer, cq->producer & kMask24);
        return;
    }
    // mlx5_ib reads its counter for the doorbell outside the CQ's lock, so
    // an arm that lost a race with a later one arrives with an older
    // counter; and libmlx5 arms with its own counter, which stays where it
    // was while the application polls the CQ itself (UCX's mlx5
    // transports): a counter may be any distance back. As the hardware
    // compares it with what it wrote, every CQE since then is waiting,
    // and the event goes at once; the device's idea of the consumer never
    // moves back.
    const uint32_t waiting = (cq->producer - consumer) & kMask24;
    if (waiting < cq->producer - cq->consumer)
        cq->consumer = cq->producer - waiting;
    // CQEs beyond the consumer counter make the event at once.
    events_.arm(cqn, *cq, command == 0 ? PIB_CQ_ARM_NEXT : PIB_CQ_ARM_SOLICITED, waiting != 0);
}

unsigned CompletionQueues::logCqeBytes(const CompletionQueue &cq) const {
    return kLogCqeBytes + cq.cqeFormat;
}

// op_own ends the CQE (a 128-byte CQE's second half is the 64-byte one).
size_t CompletionQueues::cqeOwnerByte(const CompletionQueue &cq) const {
    return (size_t{1} << logCqeBytes(cq)) - 64 + cqe::kOpOwn;
}

void CompletionQueues::encodeCqe(const Completion &c, uint32_t pass, std::span<uint8_t> out) const {
    uint8_t *p = out.last(size_t{1} << kLogCqeBytes).data(); // a 128-byte CQE's second half
    const bool receive = isReceive(c.opcode);
    uint8_t opcode = 0;
    if (c.status != PIB_WC_SUCCESS) {
        opcode = receive ? cqe::kResponderError : cqe::kRequesterError;
        p[cqe::kSyndrome] = syndromeOf(c.status);
        p[cqe::kVendorSyndrome] = c.vendorErr;
        writeBe32(p + cqe::kOpcodeQpn, c.qpn & kMask24);
    } else if (receive) {
        opcode = receiveOpcode(c);
        p[cqe::kMlPath] = c.dlidPathBits;
        writeBe16(p + cqe::kSlid, c.slid);
        writeBe32(p + cqe::kFlagsRqpn,
                  uint32_t{c.grh} << 28 | uint32_t{c.sl & 0xfu} << 24 | (c.srcQp & kMask24));
        if (c.immediate)
            writeBe32(p + cqe::kImmediate, *c.immediate);
        else if (c.invalidate)
            writeBe32(p + cqe::kImmediate, *c.invalidate);
        else
            writeBe32(p + cqe::kImmediate, c.pkey); // QP1 reports the P_Key itself
        writeBe32(p + cqe::kByteCount, c.byteLen);
        writeBe32(p + cqe::kOpcodeQpn, c.qpn & kMask24);
    } else {
        opcode = cqe::kRequester;
        writeBe32(p + cqe::kByteCount, c.byteLen);
        writeBe32(p + cqe::kOpcodeQpn, uint32_t{sendOpcode(c.opcode)} << 24 | (c.qpn & kMask24));
    }
    if (c.srqn)
        writeBe32(p + cqe::kSrqn, *c.srqn & kMask24);
    // An error CQE has its syndromes where the clock would be.
    if (c.status == PIB_WC_SUCCESS)
        writeBe64(p + cqe::kTimestamp, host_.clockNs());
    writeBe16(p + cqe::kWqeCounter, c.wqeIndex);
    // The owner bit: 0 on the ring's first pass, as the driver expects.
    p[cqe::kOpOwn] = static_cast<uint8_t>(opcode << 4 | (pass & 1));
}

// The record's first big-endian dword holds the driver's consumer
// counter, 24 bits of it.
std::optional<uint32_t> CompletionQueues::readConsumer(uint64_t record, uint32_t producer) const {
    uint8_t bytes[4];
    if (!host_.dmaRead(record, bytes, sizeof(bytes)))
        return std::nullopt;
    const uint32_t consumer = readBe32(bytes) & kMask24;
    return producer - ((producer - consumer) & kMask24);
}

void CompletionQueues::completionEvent(uint32_t eqn, uint32_t cqn) {
    EventQueues::Data data{};
    writeBe32(data.data() + 0x18, cqn); // eqe.data.comp.cqn
    eqs_.postTo(eqn, event::kCompletion, 0, data, cqn);
}

void CompletionQueues::asyncEvent(uint8_t event, uint32_t number) {
    eqs_.postAsync(event, number);
}

} // namespace pib::mlx5
