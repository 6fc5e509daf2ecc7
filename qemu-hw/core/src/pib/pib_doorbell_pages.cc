// SPDX-License-Identifier: GPL-2.0-or-later
#include "pib_doorbell_pages.hh"
#include "trace.hh"

#include <cinttypes>

#include "pib_hw.h"

namespace pib {

// What a doorbell at `offset` of its page rings, as its trace names it.
static const char *queueAt(uint32_t offset) {
    switch (offset) {
    case PIB_DB_SQ:
        return "SQ of QP";
    case PIB_DB_RQ:
        return "RQ of QP";
    case PIB_DB_SRQ:
        return "SRQ";
    case PIB_DB_CQ_ARM:
        return "arm of CQ";
    default:
        return "nothing at its offset";
    }
}

uint64_t DoorbellPages::size() const {
    return uint64_t{pages_} * PIB_PAGE_SIZE;
}

uint64_t DoorbellPages::read(uint64_t offset, unsigned size) {
    if (offset >= this->size()) {
        host_.guestError(err::kDoorbellOutOfRange, "read of %u bytes at 0x%" PRIx64 " beyond BAR2",
                         size, offset);
        return 0;
    }
    // Every page shows the core clock, so user space reads it without a
    // system call; the doorbells themselves are write-only and read as 0.
    const uint64_t inPage = offset % PIB_PAGE_SIZE;
    if (inPage == PIB_DB_CLOCK && size == 8)
        return host_.clockNs();
    if (inPage == PIB_DB_CLOCK && size == 4)
        return static_cast<uint32_t>(host_.clockNs());
    if (inPage == PIB_DB_CLOCK + 4 && size == 4)
        return static_cast<uint32_t>(host_.clockNs() >> 32);
    return 0;
}

void DoorbellPages::write(uint64_t offset, uint64_t value, unsigned size) {
    if (offset >= this->size()) {
        host_.guestError(err::kDoorbellOutOfRange, "write of %u bytes at 0x%" PRIx64 " beyond BAR2",
                         size, offset);
        return;
    }
    // A doorbell names its queue and its new index in one atomic write.
    if (size != 8 || offset % 8) {
        host_.guestError(err::kDoorbellBadSize,
                         "write of %u bytes at 0x%" PRIx64 " (doorbells are aligned 64-bit writes)",
                         size, offset);
        return;
    }
    const auto page = static_cast<uint32_t>(offset / PIB_PAGE_SIZE);
    const auto inPage = static_cast<uint32_t>(offset % PIB_PAGE_SIZE);
    const auto number = static_cast<uint32_t>(value);
    const auto arg = static_cast<uint32_t>(value >> 32);
    trace::doorbell(host_, page, queueAt(inPage), number, arg);
    if (!objects_.uars.find(page)) {
        host_.guestError(err::kDoorbellUnallocated,
                         "write of 0x%" PRIx64 " to page %u offset 0x%x, which no context owns",
                         value, page, inPage);
        return;
    }
    if (inPage != PIB_DB_SQ && inPage != PIB_DB_RQ && inPage != PIB_DB_SRQ &&
        inPage != PIB_DB_CQ_ARM) {
        host_.guestError(err::kDoorbellBadOffset, "write of 0x%" PRIx64 " to page %u offset 0x%x",
                         value, page, inPage);
        return;
    }
    ring(page, inPage, number, arg);
}

void DoorbellPages::ring(uint32_t page, uint32_t offset, uint32_t number, uint32_t arg) {
    if (offset == PIB_DB_SRQ)
        ringSrq(page, number, arg);
    else if (offset == PIB_DB_CQ_ARM)
        armCq(page, number, arg);
    else
        ringQp(page, offset, number, arg);
}

void DoorbellPages::ringQp(uint32_t page, uint32_t offset, uint32_t number, uint32_t arg) {
    QueuePair *qp = objects_.findQp(number);
    // An XRC TGT QP has no queue to ring (and belongs to no page); an XRC
    // INI QP no receive queue.
    const bool send = offset == PIB_DB_SQ;
    const bool hasQueue = qp && (send ? hasSendQueue(qp->ctx.type) : hasReceiveSide(qp->ctx.type));
    if (!qp || qp->ctx.uar_page != page || !hasQueue) {
        host_.guestError(err::kDoorbellBadObject, "%s doorbell of QP %u on page %u, which %s",
                         send ? "SQ" : "RQ", number, page,
                         !qp                        ? "does not exist"
                         : qp->ctx.uar_page != page ? "belongs to another page"
                                                    : "has no such queue");
        return;
    }
    if (send)
        dataPath_.sendProduced(*qp, arg);
    else if (qp->ctx.flags & PIB_QP_USE_SRQ)
        host_.guestError(err::kDoorbellBadObject, "RQ doorbell of QP %u, which uses an SRQ",
                         number);
    else
        dataPath_.receiveProduced(*qp, arg);
}

void DoorbellPages::ringSrq(uint32_t page, uint32_t number, uint32_t arg) {
    SharedReceiveQueue *srq = objects_.srqs.find(number);
    if (!srq || srq->ctx.uar_page != page) {
        host_.guestError(err::kDoorbellBadObject, "doorbell of SRQ %u on page %u", number, page);
        return;
    }
    dataPath_.srqProduced(*srq, arg);
}

void DoorbellPages::armCq(uint32_t page, uint32_t number, uint32_t arg) {
    CompletionQueue *cq = objects_.cqs.find(number);
    if (!cq || cq->ctx.uar_page != page) {
        host_.guestError(err::kDoorbellBadObject, "arm of CQ %u on page %u", number, page);
        return;
    }
    if (arg != PIB_CQ_ARM_NEXT && arg != PIB_CQ_ARM_SOLICITED) {
        host_.guestError(err::kDoorbellBadArm, "arm of CQ %u with 0x%x", number, arg);
        return;
    }
    // CQEs the CQ's record says the driver has not consumed make the event
    // at once, as a ConnectX's arm does: IPoIB arms the send CQ of its
    // stopped queue, ignores what IB_CQ_REPORT_MISSED_EVENTS answers, and
    // waits for that event to wake the queue (a 10 s NETDEV WATCHDOG when
    // the CQEs came before the arm).
    dataPath_.armCq(number, *cq, static_cast<uint8_t>(arg), dataPath_.events().unconsumed(*cq));
}

} // namespace pib
