// SPDX-License-Identifier: GPL-2.0-or-later
// Regression tests of the connected transports against a hostile guest or
// peer (issue 13): DMA aimed at the device's own registers, memory
// regions that vanish under a message, and requests that ask for far
// more work than one event may do.
#include <algorithm>

#include <catch2/catch.hpp>

#include "connected.hh"
#include "connected_fixture.hh"
#include "limits.hh"
#include "management_calls.hh"

#include <nlohmann/json.hpp>

using namespace pib;
using namespace pib::testing;

// Defect 3: a receive buffer in BAR0 made incoming data write CMD_CTRL,
// which ran CLOSE_HCA in the middle of the responder; the QP was freed
// under it.
TEST_CASE("DMA into the device's own BAR cannot re-enter it", "[hostile]") {
    Pair p;
    const uint64_t out = p.a.host.alloc(64);
    // The register words from CMD_IN_LO to CMD_CTRL: a CLOSE_HCA command.
    uint32_t words[9] = {};
    words[(PIB_REG_CMD_CTRL - PIB_REG_CMD_IN_LO) / 4] = PIB_CMD_CLOSE_HCA | PIB_CMD_CTRL_GO;
    std::memcpy(p.a.host.at(out), words, sizeof(words));
    p.b.postRecv(7, FakeHost::kBar0Base + PIB_REG_CMD_IN_LO, sizeof(words));
    p.a.postSend(1, {.opcode = PIB_WR_SEND, .local = out, .length = sizeof(words)});
    p.wire.run();
    CHECK(p.b.host.barDmas > 0);
    CHECK(p.b.host.guestErrors("dma-reentry") > 0);
    // The command never ran: B still has its QP, and the SEND completed.
    CHECK(p.b.qpState() == PIB_QPS_RTS);
    const auto got = p.b.poll();
    REQUIRE(got.size() == 1);
    CHECK(got[0].wr_id == 7);
    const auto sent = p.a.poll();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].status == PIB_WC_SUCCESS);
}

// Defect 4: a duplicate READ was answered from a buffer never filled once
// the R_Key no longer allowed it; the requester took it as the data. The
// READ is still the last request B took, so A lacks the data: a NAK (a
// late duplicate of one followed by others is not answered at all:
// test_connected.cc).
TEST_CASE("a duplicate READ of memory no longer readable is refused", "[hostile]") {
    Pair p;
    const uint64_t local = p.a.host.alloc(4096), remote = p.b.host.alloc(4096);
    p.b.fill(remote, 4096, 3);
    bool dropResponses = true;
    p.wire.filter = [&](bool fromA, iba::Packet &k) {
        const uint8_t op = k.bth.opcode & 0x1f;
        const bool response = op >= iba::kReadResponseFirst && op <= iba::kReadResponseOnly;
        if (!fromA && response && dropResponses) {
            // The responses are lost, and meanwhile B's region goes away.
            p.b.host.command(PIB_CMD_DESTROY_MR, p.b.key);
            return false;
        }
        return true;
    };
    p.a.postSend(1, {.opcode = PIB_WR_RDMA_READ, .local = local, .length = 4096, .remote = remote});
    p.wire.run();
    dropResponses = false;
    const size_t before = p.wire.seen.size();
    p.wire.advance(20'000'000); // the ACK timer resends the READ: a duplicate at B
    const auto done = p.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_REM_ACCESS_ERR);
    for (size_t i = before; i < p.wire.seen.size(); ++i) {
        const uint8_t op = p.wire.seen[i].bth.opcode & 0x1f;
        CHECK_FALSE((op >= iba::kReadResponseFirst && op <= iba::kReadResponseOnly));
    }
    CHECK(std::all_of(p.a.host.at(local), p.a.host.at(local) + 4096,
                      [](uint8_t b) { return b == 0; }));
}

// Defect 4: the middle of an RDMA WRITE whose region was destroyed after
// the first packet was dropped, yet ACKed as a success.
TEST_CASE("an RDMA WRITE whose region goes away mid-message is NAKed", "[hostile]") {
    Pair p;
    const uint64_t local = p.a.host.alloc(4096), remote = p.b.host.alloc(4096);
    p.a.fill(local, 4096, 9);
    p.wire.filter = [&](bool fromA, iba::Packet &k) {
        if (fromA && (k.bth.opcode & 0x1f) == iba::kWriteMiddle)
            p.b.host.command(PIB_CMD_DESTROY_MR, p.b.key);
        return true;
    };
    p.a.postSend(1,
                 {.opcode = PIB_WR_RDMA_WRITE, .local = local, .length = 4096, .remote = remote});
    p.wire.run();
    const auto done = p.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_REM_ACCESS_ERR);
    CHECK(p.b.qpState() == PIB_QPS_ERR);
}

// Defect 9: SQ drained was raised on entering SQD while sends were still
// unacknowledged.
TEST_CASE("SQ drained waits for the sends in flight", "[hostile]") {
    Pair p;
    const uint64_t local = p.a.host.alloc(8192), remote = p.b.host.alloc(8192);
    p.a.postSend(1,
                 {.opcode = PIB_WR_RDMA_WRITE, .local = local, .length = 8192, .remote = remote});
    pib_qp_attr sqd{};
    sqd.attr_mask = PIB_QP_STATE | PIB_QP_EN_SQD_ASYNC_NOTIFY;
    sqd.qp_state = PIB_QPS_SQD;
    sqd.en_sqd_async_notify = 1;
    p.a.modify(sqd);
    auto drained = [&] {
        const auto events = p.a.asyncEvents();
        return std::count(events.begin(), events.end(), PIB_ASYNC_SQ_DRAINED);
    };
    CHECK(drained() == 0); // the WRITE is not acknowledged yet
    p.wire.run();
    const auto done = p.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(drained() == 1);
}

namespace {

// Frames in a port's output.
size_t framesIn(const std::vector<uint8_t> &bytes) {
    wire::FrameReader reader;
    reader.feed(bytes);
    wire::FrameReader::Error error;
    size_t n = 0;
    while (reader.next(&error))
        ++n;
    return n;
}

// A READ by A of `length` bytes of B's memory, posted: where the data
// comes from on B, and where it goes on A.
struct Read {
    uint64_t local, remote;
    uint32_t length;
};
Read postRead(Pair &p, uint32_t length, uint8_t seed) {
    const Read r{p.a.host.alloc(length), p.b.host.alloc(length), length};
    p.b.fill(r.remote, length, seed);
    p.a.postSend(
        1, {.opcode = PIB_WR_RDMA_READ, .local = r.local, .length = length, .remote = r.remote});
    return r;
}

// The READ completed, and every byte arrived.
void checkArrived(Pair &p, const Read &r) {
    const auto done = p.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(
        std::equal(p.b.host.at(r.remote), p.b.host.at(r.remote) + r.length, p.a.host.at(r.local)));
}

} // namespace

// Defect 5: every READ response was produced inside one call, and the
// loopback queue grew without bound: a guest's 256 MiB READ to its own LID
// took 548 MiB inside a single doorbell write.
TEST_CASE("a long READ to the QP's own port goes out in bounded batches", "[hostile]") {
    constexpr uint32_t kLength = 8 << 20;
    Node n(PIB_QPT_RC, 0x33, 24 << 20);
    n.connect(n, PIB_QPT_RC, {.sqPsn = 100, .rqPsn = 100}); // to itself
    const uint64_t from = n.host.alloc(kLength), to = n.host.alloc(kLength);
    for (uint32_t i = 0; i < kLength; i += 4096)
        n.fill(from + i, 4096, static_cast<uint8_t>(i >> 12));
    n.postSend(1, {.opcode = PIB_WR_RDMA_READ, .local = to, .length = kLength, .remote = from});
    CHECK(n.poll().empty()); // one doorbell did not do it all
    CHECK(n.host.scheduled > 0);
    while (n.host.runScheduled())
        REQUIRE(n.host.runs < 100000);
    // 8192 responses of 1 KiB at 128 packets per event, with their ACKs
    // and requests sharing the budget.
    CHECK(n.host.runs >= 8192 / 128);
    const auto done = n.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(std::equal(n.host.at(from), n.host.at(from) + kLength, n.host.at(to)));
}

// Defect 5, from the fabric: one READ request (or a duplicate of one)
// from a peer made the responder produce every response in one call.
TEST_CASE("one READ request from a peer costs one event a bounded batch", "[hostile]") {
    Pair p(PIB_QPT_RC, {}, 24 << 20);
    const Read read = postRead(p, 4 << 20, 5);
    p.wire.move(p.a, p.b, 0); // the request reaches B: one event
    CHECK(framesIn(p.b.host.portOutput[1]) <= limits::kPacketsPerEvent);
    CHECK(p.b.host.scheduled > 0);
    p.wire.run();
    checkArrived(p, read);
}

// Defect 6, in the core: a port whose host queue is full holds back new
// work (the host never blocks, and its queue stays bounded), and the work
// resumes when the host says there is room.
TEST_CASE("a full port holds back new work until it has room", "[hostile]") {
    Pair p(PIB_QPT_RC, {}, 16 << 20);
    p.b.host.portQueueLimit = 16 << 10;
    const Read read = postRead(p, 1 << 20, 11);
    p.wire.move(p.a, p.b, 0);
    while (p.b.host.runScheduled()) {
    }
    // Full after 16 KiB: the rest waits, however often B runs.
    CHECK(p.b.host.portOutput[1].size() < (16 << 10) + 2048);
    CHECK(p.b.host.traces("port_queue_full") == 1);
    p.wire.run(); // drains B's queue, which makes room, again and again
    CHECK(p.b.host.portOutputPeak < (16 << 10) + 2048);
    checkArrived(p, read);
}

// Found by fuzz-core: a packet lost to a port that cannot send cost no
// budget, so a 2 GiB WRITE or READ on a port that was not ACTIVE looped
// over all its packets inside one doorbell write.
TEST_CASE("packets lost to a port that cannot send cost the same budget", "[hostile]") {
    constexpr uint32_t kLength = 8 << 20;
    Pair p(PIB_QPT_RC, {}, 24 << 20);
    p.a.portInfoSet([](iba::Mad &m) {
        // DOWN retrains to INIT: nothing may go out.
        iba::writePortInfo(m, {.lid = 0x11, .portState = PIB_PORT_DOWN});
    });
    const uint64_t local = p.a.host.alloc(kLength);
    p.a.runAfterDoorbell = false; // the doorbell's own event, then each run
    p.a.postSend(1, {.opcode = PIB_WR_RDMA_WRITE, .local = local, .length = kLength, .remote = 0});
    CHECK(p.a.host.scheduled > 0); // the doorbell stopped after one batch
    unsigned runs = 0;
    while (p.a.host.runScheduled())
        ++runs;
    // The RC window (2 MiB) goes out, lost, a batch per event; then the
    // requester waits for ACKs that cannot come.
    CHECK(runs >= sendWindowPackets(1024) / limits::kPacketsPerEvent - 1);
    CHECK(p.a.host.portOutput[1].empty());
}

namespace {

// Bytes the device says it holds for outstanding send WQEs.
uint64_t outstandingBytes(Node &n) {
    const Answer a = inspect(n, nullptr, true);
    return nlohmann::json::parse(a.text).at("outstanding_wqe_bytes").get<uint64_t>();
}

} // namespace

// Audit finding 4 (issue 27): QPs whose send rings alias one guest page,
// each WQE with the most SGEs a 2 KiB stride holds, no peer and no ACK
// timeout: every QP keeps its WQEs outstanding for ever. The device's
// copies of them stay within its stated budget, every QP still has one,
// and a flush gives everything back.
TEST_CASE("outstanding WQEs of many QPs hold a bounded share of the device's memory",
          "[rc][hostile][budget]") {
    constexpr uint32_t kQps = 128, kLogWqes = 7, kSges = 127;
    Node n(PIB_QPT_RC, 0x11, 32 << 20);
    // One page with two identical WQEs of 127 one-byte SGEs, and an MTT
    // range for each ring that maps every slot onto it.
    const uint64_t page = n.host.alloc(PIB_PAGE_SIZE), data = n.host.alloc(PIB_PAGE_SIZE);
    for (uint64_t half : {page, page + 2048}) {
        for (uint32_t i = 0; i < kSges; ++i)
            n.host.poke(half + 16 + 16 * i, pib_wqe_data{1, n.key, data + i});
        pib_wqe_ctrl ctrl{};
        ctrl.opcode = PIB_WR_SEND;
        ctrl.num_ds = kSges + 1;
        n.host.poke(half, ctrl);
    }
    constexpr uint32_t kRingPages = (2048u << kLogWqes) / PIB_PAGE_SIZE;
    std::vector<uint32_t> qpns;
    for (uint32_t q = 0; q < kQps; ++q) {
        const auto mtt = n.host.command(PIB_CMD_ALLOC_MTT, 0, kRingPages);
        REQUIRE(mtt.status == PIB_CMD_STATUS_OK);
        pib_mtt_write w{};
        w.count = kRingPages;
        for (uint32_t i = 0; i < kRingPages; ++i)
            w.entries[i] = page;
        REQUIRE(n.host.commandIn(PIB_CMD_WRITE_MTT, static_cast<uint32_t>(mtt.result), w).status ==
                PIB_CMD_STATUS_OK);
        pib_qp_context c{};
        c.type = PIB_QPT_RC;
        c.pdn = n.pd;
        c.send_cqn = c.recv_cqn = n.cqn;
        c.uar_page = n.uar;
        c.sq_log_wqe_count = kLogWqes;
        c.sq_log_wqe_stride = 11;
        c.sq_buf = {static_cast<uint32_t>(mtt.result), kRingPages};
        c.rq_log_wqe_count = 1;
        c.rq_log_wqe_stride = 6;
        c.rq_buf = n.host.ring(1);
        const auto qp = n.host.commandIn(PIB_CMD_CREATE_QP, 0, c);
        REQUIRE(qp.status == PIB_CMD_STATUS_OK);
        n.qpn = static_cast<uint32_t>(qp.result);
        qpns.push_back(n.qpn);
        n.connectTo(0x99, 0x999, PIB_QPT_RC, {.timeout = 0}); // nobody there, no timer
        n.ring(PIB_DB_SQ, 1u << kLogWqes);
        while (n.host.runScheduled())
            n.host.portOutput[1].clear();
        n.host.portOutput[1].clear();
    }
    const uint64_t largest = sizeof(SendWqe) + kSges * sizeof(pib_wqe_data);
    const uint64_t held = outstandingBytes(n);
    INFO("held " << held << " bytes");
    CHECK(held <= limits::kOutstandingWqeBytes + kQps * largest);
    CHECK(held >= limits::kOutstandingWqeBytes - kQps * largest); // the budget was used
    CHECK(n.host.traces("rc_work_held") > 0);
    // Every QP holds at least one WQE: it sent its packets.
    const auto state = nlohmann::json::parse(inspect(n, nullptr, true).text);
    size_t started = 0;
    for (const auto &qp : state.at("qps"))
        started += qp.at("type") == "RC" && qp.at("sq").at("ci").get<uint32_t>() > 0;
    CHECK(started == kQps);
    // The error state flushes them all, and the memory comes back.
    pib_qp_attr err{};
    err.attr_mask = PIB_QP_STATE;
    err.qp_state = PIB_QPS_ERR;
    for (uint32_t qpn : qpns) {
        n.qpn = qpn;
        n.modify(err);
    }
    CHECK(outstandingBytes(n) == 0);
}

// Our own finding (issue 27): a QP moved to the error state flushed its
// whole queues inside the command, 16384 CQEs written in one register
// write. A flush is bounded like any work: one event completes at most
// kPacketsPerEvent * kFlushesPerPacket WQEs, the rest go on from the
// host's bottom half, in order, each once; a WQE posted during the flush
// completes after the WQEs before it.
TEST_CASE("a long send queue is flushed within each event's budget, in order",
          "[rc][hostile][budget]") {
    Node a(PIB_QPT_RC, 1);
    constexpr unsigned kLogCq = 14;
    const FakeHost::Cq cq =
        a.host.createCq(a.eqn, a.uar, kLogCq, (PIB_CQE_SIZE << kLogCq) / PIB_PAGE_SIZE);
    a.cqn = cq.cqn;
    a.logSq = 13;
    a.createQp(PIB_QPT_RC);
    a.connectTo(2, PIB_FIRST_QPN, PIB_QPT_RC, {});
    pib_qp_attr sqd{};
    sqd.attr_mask = PIB_QP_STATE;
    sqd.qp_state = PIB_QPS_SQD; // SQD holds new WQEs: none goes out
    a.modify(sqd);
    constexpr uint32_t kWqes = 8000;
    const uint64_t buf = a.host.alloc(64);
    for (uint32_t i = 0; i < kWqes; ++i)
        a.postSend(i, {.local = buf, .length = 8}, false);
    a.ring(PIB_DB_SQ, a.sqPi);
    uint32_t seen = 0;
    std::vector<uint64_t> order;
    const auto take = [&] {
        size_t got = 0;
        for (;; ++got) {
            const pib_cqe c =
                a.host.peek<pib_cqe>(cq.page + (seen % (1u << kLogCq)) * PIB_CQE_SIZE);
            if ((c.flags & PIB_CQE_PHASE) != (((seen >> kLogCq) & 1) ^ 1))
                break;
            CHECK(c.status == PIB_WC_WR_FLUSH_ERR);
            order.push_back(c.wr_id);
            ++seen;
        }
        a.host.poke(cq.ciRecord, seen);
        return got;
    };
    pib_qp_attr err{};
    err.attr_mask = PIB_QP_STATE;
    err.qp_state = PIB_QPS_ERR;
    a.modify(err);
    constexpr size_t kPerEvent = limits::kPacketsPerEvent * limits::kFlushesPerPacket;
    const size_t first = take();
    CHECK(first > 0);
    CHECK(first <= kPerEvent);
    CHECK(a.host.traces("qp_flush_postponed") == 1);
    a.postSend(kWqes, {.local = buf, .length = 8}); // during the flush
    take();
    for (int run = 0; run < 100 && a.host.runScheduled(); ++run)
        CHECK(take() <= kPerEvent);
    REQUIRE(order.size() == kWqes + 1);
    for (uint32_t i = 0; i <= kWqes; ++i)
        CHECK(order[i] == i);
    CHECK(a.host.traces("qp_flush_postponed") >= kWqes / kPerEvent);
}
