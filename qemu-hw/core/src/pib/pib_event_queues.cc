// SPDX-License-Identifier: GPL-2.0-or-later
#include "pib_event_queues.hh"
#include "trace.hh"

#include <algorithm>
#include <bit>
#include <cstddef>
#include <cstring>

#include "ring.hh"

namespace pib {

static_assert(std::has_single_bit(PIB_CQE_SIZE));

// What an EQE is about, as its trace names it: the CQ, the command's
// token, or the object of an async event.
static unsigned eqeObject(const pib_eqe &eqe) {
    switch (eqe.type) {
    case PIB_EQE_COMPLETION:
        return eqe.data.comp.cqn;
    case PIB_EQE_COMMAND:
        return eqe.data.cmd.token;
    case PIB_EQE_PAGE_FAULT:
        return eqe.data.page_fault.key;
    default:
        return eqe.data.async.number;
    }
}

// pib-hca's driver writes the EQ's whole 32-bit consumer count.
static const EqEngine::Rules kRules{err::kEqOverrun, err::kEqDma, err::kEqDbBadCi, 0xffffffff};

PibEventQueues::PibEventQueues(const Host &host, const Mtt &mtt, ObjectTable<EventQueue> &eqs)
    : host_(host), mtt_(mtt), eqs_(eqs), engine_(host, kRules) {}

void PibEventQueues::eqDoorbell(uint32_t eqn, uint32_t consumer, bool arm) {
    EventQueue *eq = eqs_.find(eqn);
    if (!eq) {
        host_.guestError(err::kEqDbBadIndex, "doorbell of EQ %u, which does not exist", eqn);
        return;
    }
    engine_.doorbell(eqn, *eq, eq->ctx.msix_vector, consumer, arm);
}

void PibEventQueues::postEqe(uint32_t eqn, EventQueue &eq, pib_eqe eqe) {
    if (!engine_.hasRoom(eqn, eq, eq.ctx.log_size))
        return;
    const uint32_t slot = eq.producer & ((1u << eq.ctx.log_size) - 1);
    // The phase bit is 1 on the ring's first pass, and flips on each.
    eqe.flags = static_cast<uint8_t>((eqe.flags & ~PIB_EQE_PHASE) |
                                     (((eq.producer >> eq.ctx.log_size) & 1) ^ 1));
    const auto addr = ringAddress(mtt_, eq.ctx.buf, uint64_t{slot} << kLogEqeSize, sizeof(eqe));
    const auto *bytes = reinterpret_cast<const uint8_t *>(&eqe);
    engine_.write(eqn, eq, eq.ctx.msix_vector, addr, {bytes, sizeof(eqe)}, offsetof(pib_eqe, flags),
                  {eqe.type, eqe.subtype, eqeObject(eqe)});
}

void PibEventQueues::asyncEvent(uint8_t event, uint32_t number) {
    eqs_.forEach([&](uint32_t eqn, EventQueue &eq) {
        if (!(eq.ctx.flags & PIB_EQ_ASYNC))
            return;
        pib_eqe eqe{};
        eqe.type = PIB_EQE_ASYNC;
        eqe.subtype = event;
        eqe.data.async.number = number;
        postEqe(eqn, eq, eqe);
    });
}

// A page fault (docs/prm.md §6.9) goes to the lowest-numbered async EQ
// alone: one driver resumes it once.
bool PibEventQueues::pageFault(const PageFaultReport &f) {
    constexpr uint64_t kMostBytes = 4u << 20; // the rest faults again
    bool posted = false;
    eqs_.forEach([&](uint32_t eqn, EventQueue &eq) {
        if (posted || !(eq.ctx.flags & PIB_EQ_ASYNC))
            return;
        pib_eqe eqe{};
        eqe.type = PIB_EQE_PAGE_FAULT;
        eqe.subtype = f.site.write ? PIB_PAGE_FAULT_WRITE : 0;
        eqe.data.page_fault.token = f.token;
        eqe.data.page_fault.va = f.site.va;
        eqe.data.page_fault.key = f.site.key;
        eqe.data.page_fault.length = static_cast<uint32_t>(std::min(f.site.length, kMostBytes));
        postEqe(eqn, eq, eqe);
        posted = true;
    });
    return posted;
}

bool PibEventQueues::hasAsyncEq() const {
    bool found = false;
    eqs_.forEach(
        [&](uint32_t, const EventQueue &eq) { found |= (eq.ctx.flags & PIB_EQ_ASYNC) != 0; });
    return found;
}

void PibEventQueues::postCommandEvent(uint16_t token, uint8_t status, uint64_t result) {
    eqs_.forEach([&](uint32_t eqn, EventQueue &eq) {
        if (!(eq.ctx.flags & PIB_EQ_ASYNC))
            return;
        pib_eqe eqe{};
        eqe.type = PIB_EQE_COMMAND;
        eqe.data.cmd.token = token;
        eqe.data.cmd.status = status;
        eqe.data.cmd.result = result;
        postEqe(eqn, eq, eqe);
    });
}

void PibEventQueues::completionEvent(uint32_t eqn, uint32_t cqn) {
    if (EventQueue *eq = eqs_.find(eqn)) {
        pib_eqe eqe{};
        eqe.type = PIB_EQE_COMPLETION;
        eqe.data.comp.cqn = cqn;
        postEqe(eqn, *eq, eqe);
    }
}

namespace {

// What an error completion's status says the device found (prm §7.3).
uint8_t vendorErrOf(uint8_t status) {
    switch (status) {
    case PIB_WC_SUCCESS:
        return PIB_VENDOR_ERR_NONE;
    case PIB_WC_LOC_QP_OP_ERR:
        return PIB_VENDOR_ERR_WQE;
    case PIB_WC_LOC_PROT_ERR:
        return PIB_VENDOR_ERR_LKEY;
    case PIB_WC_LOC_ACCESS_ERR:
        return PIB_VENDOR_ERR_DMA;
    case PIB_WC_LOC_LEN_ERR:
        return PIB_VENDOR_ERR_LENGTH;
    case PIB_WC_WR_FLUSH_ERR:
        return PIB_VENDOR_ERR_FLUSHED;
    case PIB_WC_RETRY_EXC_ERR:
        return PIB_VENDOR_ERR_RETRIES;
    case PIB_WC_RNR_RETRY_EXC_ERR:
        return PIB_VENDOR_ERR_RNR_RETRIES;
    case PIB_WC_REM_INV_REQ_ERR:
    case PIB_WC_REM_ACCESS_ERR:
    case PIB_WC_REM_OP_ERR:
        return PIB_VENDOR_ERR_REMOTE_NAK;
    case PIB_WC_BAD_RESP_ERR:
        return PIB_VENDOR_ERR_BAD_RESPONSE;
    default:
        return PIB_VENDOR_ERR_INTERNAL;
    }
}

} // namespace

unsigned PibEventQueues::logCqeBytes(const CompletionQueue &) const {
    return std::countr_zero(PIB_CQE_SIZE);
}

size_t PibEventQueues::cqeOwnerByte(const CompletionQueue &) const {
    return offsetof(pib_cqe, flags);
}

void PibEventQueues::encodeCqe(const Completion &c, uint32_t pass, std::span<uint8_t> out) const {
    pib_cqe cqe{};
    cqe.wr_id = c.wrId;
    cqe.byte_len = c.byteLen;
    cqe.qpn = c.qpn;
    cqe.src_qp = c.srcQp;
    cqe.slid = c.slid;
    cqe.pkey_index = c.pkeyIndex;
    cqe.wqe_index = c.wqeIndex;
    cqe.opcode = c.opcode;
    cqe.status = c.status;
    cqe.sl = c.sl;
    cqe.dlid_path_bits = c.dlidPathBits;
    cqe.vendor_err =
        c.vendorErr == 0 && c.status != PIB_WC_SUCCESS ? vendorErrOf(c.status) : c.vendorErr;
    cqe.flags = static_cast<uint8_t>(((pass & 1) ^ 1) | (c.grh ? PIB_CQE_GRH : 0));
    if (c.immediate) {
        cqe.imm = __builtin_bswap32(*c.immediate); // big-endian, as ibv_wc's imm_data
        cqe.flags |= PIB_CQE_WITH_IMM;
    }
    if (c.invalidate) {
        cqe.imm = *c.invalidate;
        cqe.flags |= PIB_CQE_WITH_INV;
    }
    if (c.srqn) {
        cqe.srqn = *c.srqn;
        cqe.flags |= PIB_CQE_SRQ;
    }
    cqe.timestamp = host_.clockNs();
    std::memcpy(out.data(), &cqe, std::min(out.size(), sizeof(cqe)));
}

std::optional<uint32_t> PibEventQueues::readConsumer(uint64_t record, uint32_t) const {
    uint32_t ci = 0;
    if (!host_.dmaRead(record, ci))
        return std::nullopt;
    return ci;
}

} // namespace pib
