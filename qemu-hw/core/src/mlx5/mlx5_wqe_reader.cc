// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_wqe_reader.hh"

#include <cstring>

#include "mlx5_ifc.hh"
#include "mlx5_umr.hh"
#include "ring.hh"
#include "trace.hh"

namespace pib::mlx5 {

namespace {

// The send opcodes of the control segment (mlx5 PRM, "Send WQE").
namespace opcode {
constexpr uint8_t kNop = 0x00;
constexpr uint8_t kSendInvalidate = 0x01;
constexpr uint8_t kRdmaWrite = 0x08;
constexpr uint8_t kRdmaWriteImm = 0x09;
constexpr uint8_t kSend = 0x0a;
constexpr uint8_t kSendImm = 0x0b;
constexpr uint8_t kRdmaRead = 0x10;
constexpr uint8_t kAtomicCompareSwap = 0x11;
constexpr uint8_t kAtomicFetchAdd = 0x12;
constexpr uint8_t kUmr = 0x25; // fast registration or invalidation (mlx5_umr.hh)
constexpr uint8_t kMmo = 0x2f; // with opcode modifier kMmoDma: a DMA copy
} // namespace opcode

// The control segment: opcode and counter, QP and DS count, then the
// completion, solicited and fence bits and the immediate (or R_Key).
constexpr uint32_t kCtrlBytes = 16;
constexpr uint32_t kStreamId = 9; // dci_stream_channel_id: a DCI's stream (dci_streams.hh)
constexpr uint32_t kFmCeSe = 11;
constexpr uint8_t kCqUpdate = 0x08; // CE 2 or 3: a CQE
constexpr uint8_t kSolicited = 0x02;
constexpr uint32_t kFenceShift = 5;
constexpr uint32_t kImmediate = 12;
constexpr uint32_t kDsMask = 0x3f;
constexpr uint32_t kSegmentBytes = 16;
// A DMA copy (MMO): the control segment's opcode modifier (its first
// byte), then a metadata segment the copy does not use, the source's data
// segment and the destination's.
constexpr uint8_t kMmoDma = 0x1;
constexpr uint32_t kMmoSource = 32, kMmoDestination = 48, kMmoBytes = 64;

// The datagram segment: the address vector (struct mlx5_av, 48 bytes).
namespace av {
constexpr uint32_t kBytes = 48;
constexpr uint32_t kQkey = 0;
constexpr uint32_t kDestQp = 8;
constexpr uint32_t kRateSl = 12;
constexpr uint32_t kPathBits = 13;
constexpr uint32_t kRlid = 14;
constexpr uint32_t kTclass = 26;
constexpr uint32_t kHopLimit = 27;
constexpr uint32_t kGrhGidFlow = 28;
constexpr uint32_t kRgid = 32;
constexpr uint32_t kGrhPresent = 1u << 30;
} // namespace av

constexpr uint32_t kInlineFlag = 0x80000000;
// An SRQ WQE's next segment: the slot of the WQE after it in the free list.
constexpr uint32_t kNextWqeIndex = 2;
// The scatter list of a receive WQE ends early at a segment with this
// key (the driver's terminate_scatter_list_mkey when the device has none).
constexpr uint32_t kTerminateKey = 0x100;

// A QP with an RQ of its own has a receive stride; one on an SRQ or with
// no receive side has none (mlx5_queue_pairs.cc).
bool hasReceiveQueue(const QueuePair &qp) {
    return qp.ctx.rq_log_wqe_stride != 0;
}

// The basic blocks a WQE of `ds` 16-byte segments takes.
uint32_t blocksOf(uint32_t ds) {
    return (ds * kSegmentBytes + wqe::kBasicBlock - 1) / wqe::kBasicBlock;
}

pib_wqe_data dataSegment(const uint8_t *p) {
    return {readBe32(p), readBe32(p + 4), readBe64(p + 8)};
}

} // namespace

// The operations each QP type has (IBA 9.4, 11.4.1), as the core names
// them, and the segments they carry; false when the type has none such.
bool WqeReader::sendLayout(uint8_t qpType, uint8_t mlx5Opcode, Layout &layout) {
    if (isDatagramType(qpType)) {
        layout = {.opcode = mlx5Opcode == opcode::kSendImm ? uint8_t{PIB_WR_SEND_IMM}
                                                           : uint8_t{PIB_WR_SEND},
                  .datagram = true};
        return mlx5Opcode == opcode::kSend || mlx5Opcode == opcode::kSendImm;
    }
    const bool reliable = isReliableRequester(qpType);
    const bool connected = reliable || qpType == PIB_QPT_UC;
    const bool found = connectedLayout(mlx5Opcode, reliable, connected, layout);
    layout.xrc = qpType == PIB_QPT_XRC_INI;
    // A DCI's WQEs that send carry the DCT's address, as UD's do.
    layout.datagram =
        qpType == kQptDci && layout.opcode != PIB_WR_REG_MR && layout.opcode != kWrNop;
    return found;
}

bool WqeReader::connectedLayout(uint8_t mlx5Opcode, bool reliable, bool connected, Layout &layout) {
    switch (mlx5Opcode) {
    case opcode::kSend:
        layout = {.opcode = PIB_WR_SEND};
        return connected;
    case opcode::kSendImm:
        layout = {.opcode = PIB_WR_SEND_IMM};
        return connected;
    case opcode::kSendInvalidate:
        layout = {.opcode = PIB_WR_SEND_INV};
        return reliable;
    case opcode::kRdmaWrite:
        layout = {.opcode = PIB_WR_RDMA_WRITE, .raddr = true};
        return connected;
    case opcode::kRdmaWriteImm:
        layout = {.opcode = PIB_WR_RDMA_WRITE_IMM, .raddr = true};
        return connected;
    case opcode::kRdmaRead:
        layout = {.opcode = PIB_WR_RDMA_READ, .raddr = true};
        return reliable;
    case opcode::kAtomicCompareSwap:
        layout = {.opcode = PIB_WR_ATOMIC_CMP_AND_SWP, .raddr = true, .atomic = true};
        return reliable;
    case opcode::kAtomicFetchAdd:
        layout = {.opcode = PIB_WR_ATOMIC_FETCH_AND_ADD, .raddr = true, .atomic = true};
        return reliable;
    case opcode::kUmr:
        layout = {.opcode = PIB_WR_REG_MR, .umr = true};
        return connected;
    case opcode::kMmo:
        layout = {.opcode = kWrDmaCopy};
        return reliable;
    case opcode::kNop: // any segments after its control segment are not read
        layout = {.opcode = kWrNop};
        return connected;
    default:
        return false;
    }
}

void WqeReader::clear(Wqe &out) {
    std::vector<pib_wqe_data> sges = std::move(out.sges); // keep their capacity
    std::vector<uint64_t> pages = std::move(out.pages);
    sges.clear();
    pages.clear();
    out = Wqe{};
    out.sges = std::move(sges);
    out.pages = std::move(pages);
}

bool WqeReader::fetchBlock(const QueuePair &qp, uint32_t block, uint8_t *to) const {
    const uint32_t slot = block & ((1u << qp.ctx.sq_log_wqe_count) - 1);
    const uint64_t offset = qp.ringStart + qp.sendOffset + (uint64_t{slot} << wqe::kLogBasicBlock);
    const auto addr = ringAddress(mtt_, qp.ctx.sq_buf, offset, wqe::kBasicBlock);
    return addr && host_.dmaRead(*addr, to, wqe::kBasicBlock);
}

uint32_t WqeReader::dsCount(const QueuePair &qp, uint32_t index) {
    raw_.resize(wqe::kBasicBlock);
    if (!fetchBlock(qp, index, raw_.data()))
        return 0;
    return readBe32(raw_.data() + 4) & kDsMask;
}

uint32_t WqeReader::sendSlots(const QueuePair &qp, uint32_t index) {
    const uint32_t blocks = blocksOf(dsCount(qp, index));
    return blocks ? blocks : 1;
}

uint8_t WqeReader::readSend(const QueuePair &qp, uint32_t index, Wqe &out) {
    clear(out);
    raw_.resize(wqe::kBasicBlock);
    if (!fetchBlock(qp, index, raw_.data())) {
        host_.guestError(err::kWqeDma,
                         "QP %u: cannot read send WQE %u (ring of 2^%u blocks at byte %u of %u "
                         "pages)",
                         qp.number, index, qp.ctx.sq_log_wqe_count, qp.sendOffset,
                         qp.ctx.sq_buf.npages);
        return PIB_WC_LOC_QP_OP_ERR;
    }
    const uint32_t ds = readBe32(raw_.data() + 4) & kDsMask;
    const uint32_t blocks = blocksOf(ds);
    out.slots = blocks ? blocks : 1;
    const uint32_t named = readBe32(raw_.data() + 4) >> 8;
    const uint8_t mlx5Opcode = raw_[3];
    Layout layout;
    const char *bad = named != qp.number                       ? "it names another QP"
                      : ds == 0                                ? "no segments"
                      : blocks > wqe::kMaxBlocks               ? "more than 16 basic blocks"
                      : blocks > 1u << qp.ctx.sq_log_wqe_count ? "more blocks than its ring"
                      : qp.umr && mlx5Opcode != opcode::kUmr   ? "not a UMR on a UMR QP"
                      : mlx5Opcode == opcode::kMmo && (!qp.dmaCopy || raw_[0] != kMmoDma)
                          ? "an MMO other than a DMA copy, or on a QP without DMA copies (mmo)"
                      : !sendLayout(qp.ctx.type, mlx5Opcode, layout) ? "an opcode its QP lacks"
                                                                     : nullptr;
    if (bad) {
        host_.guestError(err::kWqeBad, "QP %u send WQE %u (opcode 0x%02x, %u segments): %s",
                         qp.number, index, mlx5Opcode, ds, bad);
        return PIB_WC_LOC_QP_OP_ERR;
    }
    raw_.resize(size_t{blocks} * wqe::kBasicBlock);
    for (uint32_t i = 1; i < blocks; ++i)
        if (!fetchBlock(qp, index + i, raw_.data() + size_t{i} * wqe::kBasicBlock)) {
            host_.guestError(err::kWqeDma,
                             "QP %u: cannot read block %u of send WQE %u (ring of 2^%u blocks "
                             "at byte %u of %u pages)",
                             qp.number, i, index, qp.ctx.sq_log_wqe_count, qp.sendOffset,
                             qp.ctx.sq_buf.npages);
            return PIB_WC_LOC_QP_OP_ERR;
        }
    pib_wqe_ctrl &ctrl = out.ctrl;
    if (qp.ctx.type == kQptDci)
        out.dciStream = readBe16(raw_.data() + kStreamId);
    const uint8_t fmCeSe = raw_[kFmCeSe];
    ctrl.opcode = layout.opcode;
    ctrl.num_ds = static_cast<uint8_t>(ds);
    ctrl.flags = static_cast<uint8_t>((fmCeSe & kCqUpdate ? PIB_WQE_SIGNALED : 0) |
                                      (fmCeSe & kSolicited ? PIB_WQE_SOLICITED : 0) |
                                      (fmCeSe >> kFenceShift ? PIB_WQE_FENCE : 0));
    // The immediate stays in wire order, as the core keeps it; the R_Key
    // a SEND with Invalidate names, or a UMR's key, is a number.
    if (layout.opcode == PIB_WR_SEND_INV || layout.umr)
        ctrl.imm = readBe32(raw_.data() + kImmediate);
    else
        std::memcpy(&ctrl.imm, raw_.data() + kImmediate, sizeof(ctrl.imm));
    if (layout.opcode == kWrNop)
        return PIB_WC_SUCCESS;
    if (layout.opcode == kWrDmaCopy)
        return decodeDmaCopy(qp, index, size_t{ds} * kSegmentBytes, out);
    if (layout.umr && qp.umr)
        return umr::decodeUpdate(host_, qp.number, index, raw_, size_t{ds} * kSegmentBytes, out);
    if (layout.umr)
        return umr::decode(host_, qp.number, index, raw_, size_t{ds} * kSegmentBytes,
                           qp.fastRegEnabled, out);
    return decodeSend(qp, index, layout, size_t{ds} * kSegmentBytes, out);
}

// The segments after the control segment, checked against the `used`
// bytes the DS count gives before they are copied out.
uint8_t WqeReader::decodeSend(const QueuePair &qp, uint32_t index, const Layout &layout,
                              size_t used, Wqe &out) {
    const size_t headers = kCtrlBytes + (layout.xrc ? kSegmentBytes : 0) +
                           (layout.datagram ? av::kBytes : 0) + (layout.raddr ? kSegmentBytes : 0) +
                           (layout.atomic ? kSegmentBytes : 0);
    if (used < headers) {
        host_.guestError(err::kWqeBad, "QP %u send WQE %u: %zu bytes, its segments need %zu",
                         qp.number, index, used, headers);
        return PIB_WC_LOC_QP_OP_ERR;
    }
    const uint8_t *p = raw_.data() + kCtrlBytes;
    if (layout.xrc) {
        out.xrc.remote_srqn = readBe32(p) & 0xffffff;
        p += kSegmentBytes;
    }
    if (layout.datagram) {
        pib_wqe_ud &ud = out.ud;
        const uint32_t grh = readBe32(p + av::kGrhGidFlow);
        ud.remote_qkey = readBe32(p + av::kQkey);
        out.dcKey = readBe64(p + av::kQkey); // a DCI's: the key field is the DC access key
        ud.remote_qpn = readBe32(p + av::kDestQp) & 0xffffff;
        ud.av.sl = p[av::kRateSl] & 0xf;
        ud.av.src_path_bits = p[av::kPathBits] & 0x7f;
        ud.av.dlid = readBe16(p + av::kRlid);
        if (grh & av::kGrhPresent) {
            ud.av.flags = PIB_AV_GRH;
            ud.av.sgid_index = static_cast<uint8_t>(grh >> 20);
            ud.av.flow_label = grh & 0xfffff;
            ud.av.traffic_class = p[av::kTclass];
            ud.av.hop_limit = p[av::kHopLimit];
            std::memcpy(ud.av.dgid, p + av::kRgid, sizeof(ud.av.dgid));
        }
        p += av::kBytes;
    }
    if (layout.raddr) {
        out.raddr.remote_addr = readBe64(p);
        out.raddr.rkey = readBe32(p + 8);
        p += kSegmentBytes;
    }
    if (layout.atomic) {
        out.atomic.swap_add = readBe64(p);
        out.atomic.compare = readBe64(p + 8);
        p += kSegmentBytes;
    }
    const size_t off = static_cast<size_t>(p - raw_.data());
    const size_t left = used - off;
    if (left >= 4 && readBe32(p) & kInlineFlag) {
        const uint32_t count = readBe32(p) & ~kInlineFlag;
        // What a READ or an atomic fetches lands in memory: never inline.
        if (layout.raddr && (layout.atomic || layout.opcode == PIB_WR_RDMA_READ)) {
            host_.guestError(err::kWqeBad, "QP %u send WQE %u: inline data on a READ or atomic",
                             qp.number, index);
            return PIB_WC_LOC_QP_OP_ERR;
        }
        if (count > left - 4 || count > maxInlineData_) {
            host_.guestError(err::kWqeBad, "QP %u send WQE %u: %u inline bytes", qp.number, index,
                             count);
            return PIB_WC_LOC_LEN_ERR;
        }
        out.isInline = true;
        out.ctrl.flags |= PIB_WQE_INLINE;
        out.inlineData = std::span(raw_).subspan(off + 4, count);
        // Data segments may follow, from the next 16-byte boundary.
        return dataSegments(qp, index,
                            off + (4 + count + kSegmentBytes - 1) / kSegmentBytes * kSegmentBytes,
                            used, out);
    }
    return dataSegments(qp, index, off, used, out);
}

// A DMA copy's source and destination data segments.
uint8_t WqeReader::decodeDmaCopy(const QueuePair &qp, uint32_t index, size_t used, Wqe &out) const {
    if (used != kMmoBytes) {
        host_.guestError(err::kWqeBad, "QP %u send WQE %u: a DMA copy of %zu bytes, not %u",
                         qp.number, index, used, kMmoBytes);
        return PIB_WC_LOC_QP_OP_ERR;
    }
    out.sges.push_back(dataSegment(raw_.data() + kMmoSource));
    out.sges.push_back(dataSegment(raw_.data() + kMmoDestination));
    return PIB_WC_SUCCESS;
}

// The pointer data segments of a send WQE from byte `from` to `used`. An
// inline segment among them (mixed after a pointer, or a second one) is
// refused, not read as a pointer: the core carries one inline prefix.
uint8_t WqeReader::dataSegments(const QueuePair &qp, uint32_t index, size_t from, size_t used,
                                Wqe &out) const {
    for (size_t at = from; at + kSegmentBytes <= used; at += kSegmentBytes) {
        if (readBe32(raw_.data() + at) & kInlineFlag) {
            host_.guestError(err::kWqeBad, "QP %u send WQE %u: inline data after a data segment",
                             qp.number, index);
            return PIB_WC_LOC_QP_OP_ERR;
        }
        out.sges.push_back(dataSegment(raw_.data() + at));
    }
    return PIB_WC_SUCCESS;
}

void WqeReader::scatterList(size_t from, Wqe &out) const {
    for (size_t at = from; at + kSegmentBytes <= raw_.size(); at += kSegmentBytes) {
        const pib_wqe_data sge = dataSegment(raw_.data() + at);
        if (sge.lkey == kTerminateKey)
            break;
        out.sges.push_back(sge);
    }
    out.ctrl.num_ds = static_cast<uint8_t>(out.sges.size());
}

// The SRQ's WQE at the head of its free list, which then moves on to the
// slot the WQE names (the driver links each WQE it frees at the tail).
bool WqeReader::readSrqWqe(const QueuePair &qp, SharedReceiveQueue &srq, Wqe &out) {
    const uint32_t stride = 1u << srq.ctx.log_wqe_stride;
    const uint32_t slot = srq.head & ((1u << srq.ctx.log_wqe_count) - 1);
    const auto addr = ringAddress(mtt_, srq.ctx.buf, uint64_t{slot} * stride, stride);
    raw_.resize(stride);
    if (!addr || !host_.dmaRead(*addr, raw_.data(), raw_.size())) {
        host_.guestError(err::kWqeDma, "QP %u: cannot read WQE %u of SRQ %u", qp.number, slot,
                         srq.number);
        return false;
    }
    srq.head = readBe16(raw_.data() + kNextWqeIndex);
    out.completionIndex = static_cast<uint16_t>(slot);
    scatterList(kSegmentBytes, out);
    return true;
}

bool WqeReader::readReceive(const QueuePair &qp, SharedReceiveQueue *srq, uint32_t index, Wqe &out,
                            uint8_t *status) {
    clear(out);
    *status = PIB_WC_SUCCESS;
    if (srq)
        return readSrqWqe(qp, *srq, out);
    if (!hasReceiveQueue(qp))
        return false;
    const uint32_t stride = 1u << qp.ctx.rq_log_wqe_stride;
    const uint32_t slot = index & ((1u << qp.ctx.rq_log_wqe_count) - 1);
    const auto addr =
        ringAddress(mtt_, qp.ctx.rq_buf, qp.ringStart + uint64_t{slot} * stride, stride);
    raw_.resize(stride);
    if (!addr || !host_.dmaRead(*addr, raw_.data(), raw_.size()))
        return false;
    out.completionIndex = static_cast<uint16_t>(index);
    scatterList(0, out);
    return true;
}

// A counter of a doorbell record (big-endian, 16 bits of it) as a slot
// count at most a ring ahead of `consumer`.
std::optional<uint32_t> WqeReader::counterAhead(const Counter &c, uint32_t consumer,
                                                uint32_t size) const {
    uint8_t bytes[4];
    if (!host_.dmaRead(c.record + c.offset, bytes, sizeof(bytes))) {
        host_.guestError(err::kMlx5QpDoorbell, "%s %u: its doorbell record 0x%llx is unreadable",
                         c.what, c.owner, static_cast<unsigned long long>(c.record));
        return std::nullopt;
    }
    const uint32_t ahead = (readBe32(bytes) - consumer) & wqe::kCounterMask;
    if (ahead > size) {
        host_.guestError(err::kMlx5QpDoorbell,
                         "%s %u counter 0x%x: %u WQEs ahead of the device, the ring has %u", c.what,
                         c.owner, readBe32(bytes) & wqe::kCounterMask, ahead, size);
        return std::nullopt;
    }
    return consumer + ahead;
}

void WqeReader::pollReceiveProducer(QueuePair &qp) {
    if (!hasReceiveQueue(qp))
        return;
    const auto producer = counterAhead({"QP RQ", qp.number, qp.record, 0}, qp.rq.consumer,
                                       1u << qp.ctx.rq_log_wqe_count);
    if (producer && *producer != qp.rq.producer) {
        trace::mlx5_rq_record(host_, "QP", qp.number, *producer);
        qp.rq.producer = *producer;
    }
}

void WqeReader::pollSrqProducer(SharedReceiveQueue &srq) {
    const auto producer =
        counterAhead({"SRQ", srq.number, srq.record, 0}, srq.consumer, 1u << srq.ctx.log_wqe_count);
    if (producer && *producer != srq.producer) {
        trace::mlx5_rq_record(host_, "SRQ", srq.number, *producer);
        srq.producer = *producer;
    }
}

std::optional<uint32_t> WqeReader::sendProducer(const QueuePair &qp) const {
    return counterAhead({"QP SQ", qp.number, qp.record, 4}, qp.sq.consumer,
                        1u << qp.ctx.sq_log_wqe_count);
}

} // namespace pib::mlx5
