// SPDX-License-Identifier: GPL-2.0-or-later
#include "pib_wqe_reader.hh"
#include "trace.hh"

#include <cstring>

#include "ring.hh"

namespace pib {

namespace {

bool isAtomic(uint8_t opcode) {
    return opcode == PIB_WR_ATOMIC_CMP_AND_SWP || opcode == PIB_WR_ATOMIC_FETCH_AND_ADD;
}

} // namespace

// The segments an opcode carries on a QP type (docs/prm.md §7.2); false
// when the QP type has no such operation. An XRC INI QP has RC's
// operations, each WQE with the XRC segment first.
bool WqeReader::sendLayout(uint8_t qpType, uint8_t opcode, Layout &layout) {
    if (isDatagramType(qpType)) {
        layout = {.ud = true, .mayInline = true};
        return opcode == PIB_WR_SEND || opcode == PIB_WR_SEND_IMM;
    }
    const bool reliable = isReliableRequester(qpType);
    const bool connected = reliable || qpType == PIB_QPT_UC;
    bool valid = false;
    switch (opcode) {
    case PIB_WR_SEND_INV: // reliable only (IBA 9.4.1: there is no UC opcode for it)
        layout = {.mayInline = true};
        valid = reliable;
        break;
    case PIB_WR_LOCAL_INV:
        layout = {.local = true};
        valid = connected;
        break;
    case PIB_WR_REG_MR:
        layout = {.reg = true, .local = true};
        valid = connected;
        break;
    case PIB_WR_BIND_MW:
        layout = {.bind = true, .local = true};
        valid = connected;
        break;
    case PIB_WR_SEND:
    case PIB_WR_SEND_IMM:
    case PIB_WR_RDMA_WRITE:
    case PIB_WR_RDMA_WRITE_IMM:
        layout = {.raddr = opcode == PIB_WR_RDMA_WRITE || opcode == PIB_WR_RDMA_WRITE_IMM,
                  .mayInline = true};
        valid = connected;
        break;
    case PIB_WR_RDMA_READ:
    case PIB_WR_ATOMIC_CMP_AND_SWP:
    case PIB_WR_ATOMIC_FETCH_AND_ADD:
        // What a READ or an atomic fetches lands in memory: never inline.
        layout = {.raddr = true, .atomic = isAtomic(opcode)};
        valid = reliable;
        break;
    case PIB_WR_FLUSH: // IBA 1.5: no data either way
        layout = {.raddr = true, .flush = true, .bare = true};
        valid = reliable;
        break;
    case PIB_WR_ATOMIC_WRITE: // its 8 bytes are in the atomic segment
        layout = {.raddr = true, .atomic = true, .bare = true};
        valid = reliable;
        break;
    default:
        return false;
    }
    layout.xrc = qpType == PIB_QPT_XRC_INI;
    return valid;
}

// Forgets the last WQE `out` held, but keeps its list's memory.
void WqeReader::clear(Wqe &out) {
    out.ctrl = {};
    out.raddr = {};
    out.atomic = {};
    out.ud = {};
    out.reg = {};
    out.bind = {};
    out.flush = {};
    out.xrc = {};
    out.isInline = false;
    out.inlineData = {};
    out.sges.clear();
    out.slots = 1;
}

bool WqeReader::fetch(const WqeRing &ring, uint32_t index) {
    const uint64_t offset = uint64_t{index & ((1u << ring.logCount) - 1)} << ring.logStride;
    const auto addr = ringAddress(mtt_, ring.buf, offset, 1u << ring.logStride);
    raw_.resize(size_t{1} << ring.logStride);
    return addr && host_.dmaRead(*addr, raw_.data(), raw_.size());
}

uint8_t WqeReader::readSend(uint32_t qpn, uint8_t qpType, const WqeRing &ring, uint32_t index,
                            Wqe &out) {
    clear(out);
    if (!fetch(ring, index)) {
        host_.guestError(err::kWqeDma, "QP %u: cannot read send WQE %u", qpn, index);
        return PIB_WC_LOC_QP_OP_ERR;
    }
    std::memcpy(&out.ctrl, raw_.data(), sizeof(out.ctrl));
    Layout layout;
    if (!sendLayout(qpType, out.ctrl.opcode, layout)) {
        host_.guestError(err::kWqeBad, "QP %u WQE %u: opcode %u on QP type %u", qpn, index,
                         out.ctrl.opcode, qpType);
        return PIB_WC_LOC_QP_OP_ERR;
    }
    return decode(qpn, index, layout, out);
}

bool WqeReader::readReceive(uint32_t qpn, const WqeRing &ring, uint32_t index, Wqe &out,
                            uint8_t *status) {
    clear(out);
    if (!fetch(ring, index))
        return false;
    std::memcpy(&out.ctrl, raw_.data(), sizeof(out.ctrl));
    out.completionIndex = static_cast<uint16_t>(index);
    *status = decode(qpn, index, Layout{.isReceive = true}, out);
    return true;
}

pib_wqe_ctrl WqeReader::readControl(const WqeRing &ring, uint32_t index) {
    pib_wqe_ctrl ctrl{};
    if (fetch(ring, index))
        std::memcpy(&ctrl, raw_.data(), sizeof(ctrl));
    return ctrl;
}

// Checks the segments `out.ctrl` announces against the slot and the
// layout, then copies them out. The guest wrote every byte: num_ds and an
// inline byte count are checked before they size or index anything.
uint8_t WqeReader::decode(uint32_t qpn, uint32_t index, const Layout &layout, Wqe &out) {
    const size_t used = size_t{out.ctrl.num_ds} * 16;
    const size_t headers =
        sizeof(pib_wqe_ctrl) + (layout.xrc ? sizeof(pib_wqe_xrc) : 0) +
        (layout.raddr ? sizeof(pib_wqe_raddr) : 0) + (layout.atomic ? sizeof(pib_wqe_atomic) : 0) +
        (layout.ud ? sizeof(pib_wqe_ud) : 0) + (layout.reg ? sizeof(pib_wqe_reg_mr) : 0) +
        (layout.bind ? sizeof(pib_wqe_bind_mw) : 0) + (layout.flush ? sizeof(pib_wqe_flush) : 0);
    const bool exact = layout.local || layout.bare;
    if (used < headers || used > raw_.size() || (exact && used != headers)) {
        host_.guestError(err::kWqeBad, "QP %u %s WQE %u: opcode %u with %u segments", qpn,
                         layout.isReceive ? "receive" : "send", index, out.ctrl.opcode,
                         out.ctrl.num_ds);
        return PIB_WC_LOC_QP_OP_ERR;
    }
    size_t off = sizeof(pib_wqe_ctrl);
    const auto take = [&](auto &segment) {
        std::memcpy(&segment, raw_.data() + off, sizeof(segment));
        off += sizeof(segment);
    };
    if (layout.xrc)
        take(out.xrc);
    if (layout.raddr)
        take(out.raddr);
    if (layout.atomic)
        take(out.atomic);
    if (layout.ud)
        take(out.ud);
    if (layout.reg)
        take(out.reg);
    if (layout.bind)
        take(out.bind);
    if (layout.flush)
        take(out.flush);
    if (exact)
        return PIB_WC_SUCCESS;
    // A receive WQE has no inline data: the flag means nothing there.
    out.isInline = !layout.isReceive && (out.ctrl.flags & PIB_WQE_INLINE);
    if (!out.isInline) {
        readDataSegments(std::span(raw_).subspan(off, used - off), out.sges);
        return PIB_WC_SUCCESS;
    }
    uint32_t count = 0;
    if (used - off >= sizeof(count))
        std::memcpy(&count, raw_.data() + off, sizeof(count));
    count &= ~PIB_INLINE_FLAG;
    if (!layout.mayInline || used - off < sizeof(count) || count > used - off - sizeof(count) ||
        count > maxInlineData_) {
        host_.guestError(err::kWqeBad, "QP %u WQE %u: %u inline bytes", qpn, index, count);
        return PIB_WC_LOC_LEN_ERR;
    }
    out.inlineData = std::span(raw_).subspan(off + sizeof(count), count);
    return PIB_WC_SUCCESS;
}

} // namespace pib
