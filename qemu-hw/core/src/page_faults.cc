// SPDX-License-Identifier: GPL-2.0-or-later
// A QP's page faults (page_faults.hh): raised by its transport roles,
// resumed by the driver's command, failed by the QP's timer.
#include "data_path.hh"
#include "trace.hh"

namespace pib {

namespace {

const char *sideName(FaultSide side) {
    return side == FaultSide::kRequester ? "requester" : "responder";
}

PageFaultWait &waitOf(QueuePair &qp, FaultSide side) {
    return side == FaultSide::kRequester ? qp.req.fault : qp.resp.fault;
}

} // namespace

// A fault the driver failed once is asked again; through an implicit
// region's span, on the region's own key at that address: mlx5_ib fails
// a fault on a child it has just dropped (madvise(DONTNEED) emptied it)
// before its work queue points the span elsewhere, and a fault on the
// region makes or finds the span's child at once. A second failure on
// the key asked fails the transfer.
bool TransportRole::waitForPage(QueuePair &qp, FaultSide side, const FaultSite &reached) {
    PageFaultWait &w = waitOf(qp, side);
    FaultSite site = reached;
    if (w.failedOnce && reached.region) {
        site.key = reached.region;
        site.va = reached.regionVa;
    }
    if (w.failed) {
        w.failed = false;
        if (w.key == 0 || w.key == site.key || w.key == reached.region) {
            trace::page_fault_failed(host_, qp.number, sideName(side), site.key, site.va);
            return false;
        }
    }
    if (w.waiting())
        return true;
    const uint64_t token = page_fault::token(qp.number, side, ++w.serial);
    if (!events_.postPageFault({site, token, qp.number, side})) {
        trace::page_fault_unreported(host_, qp.number, sideName(side), site.key, site.va);
        return false;
    }
    w.token = token;
    w.key = site.key;
    w.raisedAt = host_.clockNs();
    w.deadline = w.raisedAt + page_fault::kWaitNs;
    timers_.schedule(qp);
    trace::page_fault(host_, qp.number, sideName(side), site.key, site.va, site.length, site.write,
                      token);
    return true;
}

bool DataPath::resumePageFault(uint64_t token, bool failed) {
    QueuePair *qp = objects_.findTransportQp(page_fault::tokenQpn(token));
    const FaultSide side = page_fault::tokenSide(token);
    if (!qp || waitOf(*qp, side).token != token) {
        trace::page_fault_stale(host_, token);
        return false;
    }
    PageFaultWait &w = waitOf(*qp, side);
    w.token = w.deadline = 0;
    trace::page_fault_resumed(host_, qp->number, sideName(side), token, failed,
                              host_.clockNs() - w.raisedAt);
    // A first failure is asked again after kRetryNs: by the requester, or
    // by a responder on the first resend after it (it RNR NAKs those
    // before). A second fails.
    w.failed = failed && w.failedOnce;
    w.failedOnce = failed && !w.failedOnce;
    if (w.failedOnce) {
        w.retrying = true;
        w.deadline = host_.clockNs() + page_fault::kRetryNs;
        timers_.schedule(*qp);
        return true;
    }
    // The requester fetches the WQE again; a responder's peer sends its
    // request again when its RNR wait ends.
    if (side == FaultSide::kRequester)
        resume(*qp);
    return true;
}

void DataPath::expirePageFaults(QueuePair &qp) {
    const uint64_t now = host_.clockNs();
    for (const FaultSide side : {FaultSide::kRequester, FaultSide::kResponder}) {
        PageFaultWait &w = waitOf(qp, side);
        if (!w.waiting() || w.deadline > now)
            continue;
        if (w.retrying) { // the requester asks again; a responder on the next resend
            w.retrying = false;
            w.deadline = 0;
            if (side == FaultSide::kRequester)
                resume(qp);
            continue;
        }
        trace::page_fault_timeout(host_, qp.number, sideName(side), w.token);
        w.token = w.deadline = 0;
        w.failed = true;
        w.key = 0; // whatever it faults on next fails
        if (side == FaultSide::kRequester)
            resume(qp);
    }
}

} // namespace pib
