// SPDX-License-Identifier: GPL-2.0-or-later
#include "fuzz_core_ledger.hh"

#include <algorithm>
#include <cinttypes>
#include <iterator>

#include "fuzz_core_check.hh"

namespace pib::fuzz {

namespace {

// wr_id = kTag << 48 | queue << 40 | sequence number: a CQE whose wr_id
// does not decode names no WQE of the harness.
constexpr uint64_t kTag = 0xc0de;
constexpr unsigned kQueueShift = 40;
constexpr uint64_t kSeqMask = (uint64_t{1} << kQueueShift) - 1;

constexpr const char *kNames[] = {
    "the RC QP's SQ",   "the RC QP's RQ", "the UC QP's SQ", "the UC QP's RQ", "the SRQ QP's SQ",
    "the XRC INI's SQ", "the UD QP's SQ", "the UD QP's RQ", "QP0's SQ",       "QP0's RQ",
    "QP1's SQ",         "QP1's RQ",       "the SRQ",        "the XRC SRQ"};
static_assert(std::size(kNames) == static_cast<size_t>(Queue::kCount));
// A send queue's CQE retires the WQEs before it.
constexpr bool kSendQueues[] = {true,  false, true,  false, true,  true,  true,
                                false, true,  false, true,  false, false, false};
static_assert(std::size(kSendQueues) == static_cast<size_t>(Queue::kCount));

uint64_t wrIdOf(Queue q, uint64_t seq) {
    return kTag << 48 | uint64_t{static_cast<uint8_t>(q)} << kQueueShift | seq;
}

} // namespace

void Ledger::open(Queue q, uint32_t cqn, uint32_t qpn, uint32_t ringSize) {
    Book &b = books_[index(q)];
    b.name = kNames[index(q)];
    b.send = kSendQueues[index(q)];
    b.cqn = cqn;
    b.qpn = qpn;
    b.ringSize = ringSize;
}

uint64_t Ledger::post(Queue q, bool mustComplete) {
    Book &b = books_[index(q)];
    b.cqes.push_back(0);
    b.due.push_back(mustComplete ? Due::kOne : Due::kAtMostOne);
    return wrIdOf(q, b.cqes.size() - 1);
}

bool Ledger::hasRoom(Queue q) const {
    const Book &b = books_[index(q)];
    return b.cqes.size() - std::max(b.retired, b.ringStart) < b.ringSize;
}

uint32_t Ledger::producerCount(Queue q) const {
    const Book &b = books_[index(q)];
    return static_cast<uint32_t>(b.cqes.size() - b.ringStart);
}

void Ledger::restartRing(Queue q) {
    books_[index(q)].ringStart = posted(q);
}

void Ledger::excuseUncompleted(Queue q) {
    for (Due &due : books_[index(q)].due)
        if (due == Due::kOne)
            due = Due::kAtMostOne;
}

void Ledger::abandon(Queue q, uint64_t consumed) {
    Book &b = books_[index(q)];
    for (uint64_t seq = consumed; seq < b.due.size(); ++seq)
        b.due[seq] = Due::kNone;
    if (checking_)
        for (uint64_t seq = b.sealed; seq < consumed; ++seq)
            if (b.due[seq] == Due::kOne && !b.cqes[seq])
                fail("WQE %" PRIu64 " of %s was consumed, but its SRQ was destroyed without "
                     "a CQE for it",
                     seq, b.name);
    b.sealed = b.due.size();
}

void Ledger::rebase(Queue q, uint64_t base, uint32_t ringSize) {
    Book &b = books_[index(q)];
    b.ringStart = base;
    b.ringSize = ringSize;
}

uint64_t Ledger::oldestUncompleted(Queue q) const {
    const Book &b = books_[index(q)];
    uint64_t seq = b.ringStart;
    while (seq < b.cqes.size() && b.cqes[seq])
        ++seq;
    return seq;
}

void Ledger::onCqe(uint32_t cqn, const pib_cqe &cqe) {
    if (!checking_)
        return;
    const uint64_t id = cqe.wr_id;
    const uint64_t queue = (id >> kQueueShift) & 0xff;
    if (id >> 48 != kTag || queue >= books_.size())
        fail("CQ %u: a CQE of QP %u (status %u) with wr_id 0x%" PRIx64
             ", which no WQE the harness posted carries",
             cqn, cqe.qpn, cqe.status, id);
    book(books_[queue], id & kSeqMask, cqn, cqe);
}

void Ledger::book(Book &b, uint64_t seq, uint32_t cqn, const pib_cqe &cqe) {
    if (seq >= b.cqes.size())
        fail("CQ %u: a CQE names WQE %" PRIu64 " of %s, which was never posted (%zu were)", cqn,
             seq, b.name, b.cqes.size());
    if (seq < b.sealed)
        fail("CQ %u: a CQE (status %u) for WQE %" PRIu64 " of %s, whose SRQ was destroyed", cqn,
             cqe.status, seq, b.name);
    if (cqn != b.cqn)
        fail("WQE %" PRIu64 " of %s completed on CQ %u, not on its queue's CQ %u", seq, b.name, cqn,
             b.cqn);
    if (b.qpn != UINT32_MAX && cqe.qpn != b.qpn)
        fail("the CQE of WQE %" PRIu64 " of %s names QP %u, not %u", seq, b.name, cqe.qpn, b.qpn);
    if (((cqe.opcode & PIB_WC_RECV) == 0) != b.send)
        fail("WQE %" PRIu64 " of %s completed with opcode 0x%x", seq, b.name, cqe.opcode);
    if (++b.cqes[seq] > 1)
        fail("WQE %" PRIu64 " of %s completed twice (status %u)", seq, b.name, cqe.status);
    // Queues are consumed in order: a completion means the device took
    // every WQE before it (a send CQE retires them, IBA 10.8.3).
    b.retired = std::max(b.retired, seq + 1);
}

void Ledger::checkSettled(Queue q, uint64_t consumed) const {
    if (!checking_)
        return;
    const Book &b = books_[index(q)];
    for (uint64_t seq = 0; seq < b.cqes.size(); ++seq) {
        const bool taken = seq < consumed && b.due[seq] != Due::kNone;
        if (!taken && b.cqes[seq])
            fail("WQE %" PRIu64 " of %s completed, but the device never consumed it (%" PRIu64
                 " of %zu consumed)",
                 seq, b.name, consumed, b.cqes.size());
        if (taken && !b.cqes[seq] && b.due[seq] == Due::kOne)
            fail("WQE %" PRIu64 " of %s was consumed but never completed (%zu posted)", seq, b.name,
                 b.cqes.size());
    }
}

} // namespace pib::fuzz
