// SPDX-License-Identifier: GPL-2.0-or-later
// Writing completions: CQEs with their phase bit, overrun detection through
// the consumer's CI record, and completion events for armed CQs.
#include <cinttypes>

#include "firmware.hh"
#include "ring.hh"

namespace pib {

void Firmware::postCqe(uint32_t cqn, pib_cqe cqe, bool solicited) {
    CompletionQueue *cq = cqs_.find(cqn);
    if (!cq)
        return;
    const uint32_t size = 1u << cq->ctx.log_size;
    if (cq->producer - cq->consumer >= size) {
        // Looks full: see how far the consumer really got.
        uint32_t ci = 0;
        if (host_.dmaRead(cq->ctx.ci_record, ci) && cq->producer - ci <= size)
            cq->consumer = ci;
    }
    if (cq->producer - cq->consumer >= size) {
        if (!cq->overrun) {
            host_.guestError("cq-overrun", "CQ %u overran; completions are lost", cqn);
            postAsyncEvent(PIB_ASYNC_CQ_ERR, cqn);
        }
        cq->overrun = true;
        return;
    }
    cq->overrun = false;
    const uint32_t slot = cq->producer & (size - 1);
    cqe.flags = static_cast<uint8_t>((cqe.flags & ~PIB_CQE_PHASE) |
                                     (((cq->producer >> cq->ctx.log_size) & 1) ^ 1));
    const auto addr = ringAddress(mtt_, cq->ctx.buf, uint64_t{slot} * PIB_CQE_SIZE, PIB_CQE_SIZE);
    if (!addr || !host_.dmaWrite(*addr, cqe)) {
        host_.guestError("cq-dma", "CQ %u: cannot write CQE %u", cqn, cq->producer);
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

void Firmware::completeSend(uint32_t qpn, QueuePair &qp, uint32_t index, uint64_t wrId,
                            uint8_t opcode, uint8_t status, uint32_t length, bool signaled) {
    // Errors always complete; successes when asked to.
    if (!signaled && status == PIB_WC_SUCCESS)
        return;
    pib_cqe cqe{};
    cqe.wr_id = wrId;
    cqe.byte_len = length;
    cqe.qpn = qpn;
    cqe.opcode = opcode;
    cqe.status = status;
    cqe.wqe_index = static_cast<uint16_t>(index);
    postCqe(qp.ctx.send_cqn, cqe, false);
}

} // namespace pib
