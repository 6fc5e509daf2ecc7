// SPDX-License-Identifier: GPL-2.0-or-later
#include "event_writer.hh"
#include "trace.hh"

#include "ring.hh"

namespace pib {

static constexpr unsigned kLogEqeSize = 5;
static_assert(1u << kLogEqeSize == sizeof(pib_eqe));

void EventWriter::eqDoorbell(uint32_t eqn, uint32_t consumer, bool arm) {
    EventQueue *eq = eqs_.find(eqn);
    if (!eq) {
        host_.guestError(err::kEqDbBadIndex, "doorbell of EQ %u, which does not exist", eqn);
        return;
    }
    // The consumer may only move forward, and never past the producer.
    if (consumer - eq->consumer > eq->producer - eq->consumer) {
        host_.guestError(err::kEqDbBadCi, "EQ %u consumer index %u outside [%u, %u]", eqn, consumer,
                         eq->consumer, eq->producer);
        return;
    }
    eq->consumer = consumer;
    if (arm) {
        eq->armed = true;
        // Events already waiting signal at once, as a level would.
        if (eq->producer != eq->consumer) {
            eq->armed = false;
            host_.msixNotify(eq->ctx.msix_vector);
        }
    }
}

void EventWriter::postEqe(uint32_t eqn, EventQueue &eq, pib_eqe eqe) {
    const uint32_t size = 1u << eq.ctx.log_size;
    if (eq.stopped || eq.producer - eq.consumer >= size) {
        if (!eq.overrun && eq.stopped)
            trace::inject_overrun(host_, "EQ", eqn);
        else if (!eq.overrun)
            host_.guestError(err::kEqOverrun, "EQ %u is full; events are lost", eqn);
        eq.overrun = true;
        return;
    }
    eq.overrun = false;
    const uint32_t slot = eq.producer & (size - 1);
    eqe.flags = static_cast<uint8_t>((eqe.flags & ~PIB_EQE_PHASE) |
                                     (((eq.producer >> eq.ctx.log_size) & 1) ^ 1));
    const auto addr = ringAddress(mtt_, eq.ctx.buf, uint64_t{slot} << kLogEqeSize, sizeof(eqe));
    if (!addr || !host_.dmaWrite(*addr, eqe)) {
        host_.guestError(err::kEqDma, "EQ %u: cannot write EQE %u", eqn, eq.producer);
        return;
    }
    ++eq.producer;
    if (eq.armed) {
        eq.armed = false;
        host_.msixNotify(eq.ctx.msix_vector);
    }
}

void EventWriter::postAsyncEvent(uint8_t event, uint32_t number) {
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

bool EventWriter::hasAsyncEq() const {
    bool found = false;
    eqs_.forEach(
        [&](uint32_t, const EventQueue &eq) { found |= (eq.ctx.flags & PIB_EQ_ASYNC) != 0; });
    return found;
}

void EventWriter::postCommandEvent(uint16_t token, uint8_t status, uint64_t result) {
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

void EventWriter::postCqe(uint32_t cqn, pib_cqe cqe, bool solicited) {
    CompletionQueue *cq = cqs_.find(cqn);
    if (!cq)
        return;
    if (cqe.status != PIB_WC_SUCCESS && cqe.vendor_err == 0)
        cqe.vendor_err = vendorErrOf(cqe.status);
    const uint32_t size = 1u << cq->ctx.log_size;
    if (cq->producer - cq->consumer >= size) {
        // Looks full: see how far the consumer really got.
        uint32_t ci = 0;
        if (host_.dmaRead(cq->ctx.ci_record, ci) && cq->producer - ci <= size)
            cq->consumer = ci;
    }
    if (cq->stopped || cq->producer - cq->consumer >= size) {
        if (!cq->overrun) {
            // A CQ the host stopped overruns as a full one does.
            if (cq->stopped)
                trace::inject_overrun(host_, "CQ", cqn);
            else
                host_.guestError(err::kCqOverrun, "CQ %u overran; completions are lost", cqn);
            postAsyncEvent(PIB_ASYNC_CQ_ERR, cqn);
        }
        cq->overrun = true;
        return;
    }
    cq->overrun = false;
    const uint32_t slot = cq->producer & (size - 1);
    cqe.flags = static_cast<uint8_t>((cqe.flags & ~PIB_CQE_PHASE) |
                                     (((cq->producer >> cq->ctx.log_size) & 1) ^ 1));
    cqe.timestamp = host_.clockNs();
    const auto addr = ringAddress(mtt_, cq->ctx.buf, uint64_t{slot} * PIB_CQE_SIZE, PIB_CQE_SIZE);
    if (!addr || !host_.dmaWrite(*addr, cqe)) {
        host_.guestError(err::kCqDma, "CQ %u: cannot write CQE %u", cqn, cq->producer);
        return;
    }
    ++cq->producer;
    if (cq->arm == PIB_CQ_ARM_NEXT || (cq->arm == PIB_CQ_ARM_SOLICITED && solicited)) {
        cq->arm = 0;
        if (EventQueue *eq = eqs_.find(cq->ctx.eqn)) {
            pib_eqe eqe{};
            eqe.type = PIB_EQE_COMPLETION;
            eqe.data.comp.cqn = cqn;
            postEqe(cq->ctx.eqn, *eq, eqe);
        }
    }
}

void EventWriter::completeSend(uint32_t qpn, const QueuePair &qp, uint32_t index, uint64_t wrId,
                               uint8_t opcode, uint8_t status, uint32_t length, bool signaled,
                               uint8_t vendorErr) {
    // Errors always complete; successes when asked to.
    if (!signaled && status == PIB_WC_SUCCESS)
        return;
    pib_cqe cqe{};
    cqe.wr_id = wrId;
    cqe.byte_len = length;
    cqe.qpn = qpn;
    cqe.opcode = opcode;
    cqe.status = status;
    cqe.vendor_err = vendorErr;
    cqe.wqe_index = static_cast<uint16_t>(index);
    postCqe(qp.ctx.send_cqn, cqe, false);
}

} // namespace pib
