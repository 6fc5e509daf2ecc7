// SPDX-License-Identifier: GPL-2.0-or-later
#include "wqe_format.hh"

#include "trace.hh"

namespace pib {

uint64_t dataLength(const Wqe &wqe) {
    uint64_t length = wqe.isInline ? wqe.inlineData.size() : 0;
    for (const pib_wqe_data &sge : wqe.sges)
        length += sge.byte_count;
    return length;
}

uint8_t WqeFormatSlot::readSend(const QueuePair &qp, uint32_t index, Wqe &out) {
    const uint8_t status = format_->readSend(qp, index, out);
    if (host_.eventEnabled(PIB_EVENT_WQE_FETCHED))
        trace::wqe_fetched(host_, qp.number, index, out.ctrl.opcode,
                           static_cast<unsigned>(dataLength(out)), status);
    return status;
}

bool WqeFormatSlot::readReceive(const QueuePair &qp, SharedReceiveQueue *srq, uint32_t index,
                                Wqe &out, uint8_t *status) {
    if (!format_->readReceive(qp, srq, index, out, status))
        return false;
    if (host_.eventEnabled(PIB_EVENT_RECV_WQE_FETCHED))
        trace::recv_wqe_fetched(host_, qp.number, srq ? srq->number : 0, index,
                                static_cast<unsigned>(dataLength(out)));
    return true;
}

} // namespace pib
