// SPDX-License-Identifier: GPL-2.0-or-later
// The native benchmark of the device core's data path (no QEMU, no guest):
// RDMA WRITE, SEND and READ between two device instances cabled back to back in
// this process, from 8 B to 1 MiB, beside this machine's memcpy
// bandwidth measured in the same run. It prints numbers; it asserts
// nothing about them.
//
// Each row runs twice: both devices on one thread (the whole cost of a
// message on one core), then each device on its own thread, as each VM's
// QEMU runs its device in its own process.
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <malloc.h>
#include <mutex>
#include <span>
#include <thread>
#include <vector>

#include "connected_fixture.hh"

using namespace pib;
using namespace pib::testing;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kMaxMessage = 1u << 20;
constexpr unsigned kDepth = 32;        // WQEs in flight, as perftest's default tx depth
constexpr double kSecondsPerRow = 0.3; // each run of a row takes about this long
// This machine is shared: each figure is the median of this many runs.
constexpr int kRuns = 3;

double seconds(Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
}

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

// memcpy bandwidth over buffers larger than the caches, in GB/s.
double memcpyGBps() {
    std::vector<uint8_t> a(64 << 20, 1), b(64 << 20, 2);
    std::memcpy(b.data(), a.data(), a.size()); // fault the pages in
    std::vector<double> runs;
    for (int run = 0; run < kRuns; ++run) {
        size_t bytes = 0;
        const auto start = Clock::now();
        while (seconds(start) < kSecondsPerRow) {
            std::memcpy(b.data(), a.data(), a.size());
            bytes += a.size();
            a[bytes % a.size()] ^= b[7]; // keep the copies observable
        }
        runs.push_back(bytes / seconds(start) / 1e9);
    }
    return median(runs);
}

struct Row {
    uint64_t messages = 0;
    double secs = 0;
};

// How long a run of a row lasts: about kSecondsPerRow, or (a profiler's
// fixed count, so that instructions per message compare between builds)
// exactly this many messages.
uint64_t fixedCount = 0;

bool morePosts(Clock::time_point start, uint64_t posted) {
    return fixedCount ? posted < fixedCount : seconds(start) < kSecondsPerRow;
}

// Streams messages of `size` bytes from a to b for about kSecondsPerRow,
// both devices on this thread.
Row streamOneThread(Pair &p, uint8_t opcode, uint32_t size, uint64_t local, uint64_t remote) {
    const bool send = opcode == PIB_WR_SEND;
    unsigned inFlight = 0, recvPosted = 0;
    Row row;
    auto post = [&] {
        p.a.postSend(row.messages + inFlight,
                     {.opcode = opcode, .local = local, .length = size, .remote = remote});
        ++inFlight;
    };
    if (send)
        for (; recvPosted < (1u << Node::kLogRq) - 1; ++recvPosted)
            p.b.postRecv(recvPosted, remote, kMaxMessage);
    // Takes the completions there are; reposts receives as they are used.
    auto reap = [&] {
        p.wire.run();
        for (const pib_cqe &c : p.a.poll()) {
            expect(c.status == PIB_WC_SUCCESS, "a benchmark completion");
            --inFlight;
            ++row.messages;
        }
        if (send)
            for (const pib_cqe &c : p.b.poll()) {
                expect(c.status == PIB_WC_SUCCESS, "a benchmark receive");
                p.b.postRecv(c.wr_id, remote, kMaxMessage);
            }
    };
    const auto start = Clock::now();
    while (morePosts(start, row.messages + inFlight)) {
        while (inFlight < kDepth && (!send || recvPosted > inFlight) &&
               morePosts(start, row.messages + inFlight))
            post();
        reap();
    }
    while (inFlight) // what is still in flight counts, and takes its time
        reap();
    row.secs = seconds(start);
    return row;
}

// One direction of a cable between two threads. It carries the port's
// output in the chunks the device wrote them, and the far end reads them
// in pieces of at most kPiece bytes, as a socket would give them: the
// receiver answers (ACKs) while the sender is still sending. Buffers are
// handed over, not copied, and come back for reuse.
class Cable {
  public:
    static constexpr size_t kPiece = 64 << 10;

    void put(std::vector<uint8_t> &bytes) {
        std::lock_guard lock(mutex_);
        queued_.push_back(std::move(bytes));
        bytes = takeSpare();
    }
    // The next piece of the oldest chunk (empty if none). It stays valid
    // until the next call.
    std::span<const uint8_t> take() {
        std::lock_guard lock(mutex_);
        if (!queued_.empty() && offset_ == queued_.front().size()) {
            queued_.front().clear();
            spare_.push_back(std::move(queued_.front()));
            queued_.pop_front();
            offset_ = 0;
        }
        if (queued_.empty())
            return {};
        const std::vector<uint8_t> &chunk = queued_.front();
        const size_t n = std::min(kPiece, chunk.size() - offset_);
        offset_ += n;
        return {chunk.data() + offset_ - n, n};
    }

  private:
    std::vector<uint8_t> takeSpare() {
        if (spare_.empty())
            return {};
        std::vector<uint8_t> v = std::move(spare_.back());
        spare_.pop_back();
        return v;
    }
    std::mutex mutex_;
    std::deque<std::vector<uint8_t>> queued_; // the front one is being read
    size_t offset_ = 0;                       // of the front chunk, what was taken
    std::vector<std::vector<uint8_t>> spare_;
};

// What a thread of the two-thread rows does when a round moved nothing.
// The other thread is then mid-round, most often for a microsecond or
// less: the thread spins (a pause per turn) rather than yield at once,
// since a sched_yield per idle round made a third of the run system time
// on these machines. After a while it yields, so that an overloaded host
// still runs the other thread.
class IdleBackoff {
  public:
    void idle() {
        if (++idleRounds_ < kSpinRounds) {
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
            return;
        }
        idleRounds_ = 0;
        std::this_thread::yield();
    }
    void busy() {
        idleRounds_ = 0;
    }

  private:
    static constexpr unsigned kSpinRounds = 256;
    unsigned idleRounds_ = 0;
};

// Gives `node` one piece that came in on `in`, runs the work its core
// postponed (as QEMU's bottom half would: the rest of a long READ
// response), then puts what it sent (its answers too) on `out`. Returns
// whether anything came in or ran.
bool exchange(Node &node, Cable &in, Cable &out) {
    const std::span<const uint8_t> piece = in.take();
    if (!piece.empty())
        pib_core_port_receive(node.host.core, 1, piece.data(), piece.size());
    const bool ran = node.host.runScheduled();
    if (!node.host.portOutput[1].empty())
        out.put(node.host.portOutput[1]);
    return !piece.empty() || ran;
}

// The same stream with b's device on a thread of its own.
Row streamTwoThreads(Pair &p, uint8_t opcode, uint32_t size, uint64_t local, uint64_t remote) {
    const bool send = opcode == PIB_WR_SEND;
    Cable aToB, bToA;
    std::atomic<bool> done{false}, receivesPosted{!send};
    // At most kDepth SENDs are unacknowledged and b reposts each receive
    // in the round that used it, so it never runs out of receives.
    static_assert(kDepth < (1u << Node::kLogRq) - 1);
    std::thread responder([&] {
        IdleBackoff backoff;
        if (send)
            for (unsigned i = 0; i < (1u << Node::kLogRq) - 1; ++i)
                p.b.postRecv(i, remote, kMaxMessage);
        receivesPosted = true;
        while (!done.load(std::memory_order_relaxed)) {
            const bool busy = exchange(p.b, aToB, bToA);
            if (send)
                for (const pib_cqe &c : p.b.poll()) {
                    expect(c.status == PIB_WC_SUCCESS, "a benchmark receive");
                    p.b.postRecv(c.wr_id, remote, kMaxMessage);
                }
            busy ? backoff.busy() : backoff.idle();
        }
    });
    Row row;
    unsigned inFlight = 0;
    IdleBackoff backoff;
    auto reap = [&] {
        const bool busy = exchange(p.a, bToA, aToB);
        for (const pib_cqe &c : p.a.poll()) {
            expect(c.status == PIB_WC_SUCCESS, "a benchmark completion");
            --inFlight;
            ++row.messages;
        }
        busy ? backoff.busy() : backoff.idle();
    };
    // The first SENDs must not overtake b's first receives.
    while (!receivesPosted)
        std::this_thread::yield();
    const auto start = Clock::now();
    while (morePosts(start, row.messages + inFlight)) {
        // The window refilled in bursts of a quarter of it, each on the
        // cable as one chunk (a QEMU writes what one doorbell sent in one
        // go), so that b works on one burst while a posts the next.
        unsigned burst = 0;
        for (; inFlight < kDepth && burst < kDepth / 4 && morePosts(start, row.messages + inFlight);
             ++inFlight, ++burst)
            p.a.postSend(row.messages + inFlight,
                         {.opcode = opcode, .local = local, .length = size, .remote = remote});
        if (burst)
            aToB.put(p.a.host.portOutput[1]);
        reap();
    }
    while (inFlight)
        reap();
    row.secs = seconds(start);
    done = true;
    responder.join();
    return row;
}

const char *name(uint8_t opcode) {
    return opcode == PIB_WR_SEND ? "SEND" : opcode == PIB_WR_RDMA_READ ? "RDMA READ" : "RDMA WRITE";
}

// What picks the operation on the command line.
const char *word(uint8_t opcode) {
    return opcode == PIB_WR_SEND ? "send" : opcode == PIB_WR_RDMA_READ ? "read" : "write";
}

} // namespace

// With arguments ("write 65536", "send 4096" or "read 8") it runs that row alone,
// for a profiler; a third argument, 1 or 2, picks the number of threads, and
// a fourth the number of messages each run moves (instead of a time).
int main(int argc, char **argv) {
    const bool one = argc >= 3;
    const int threads = argc >= 4 ? std::atoi(argv[3]) : 0;
    fixedCount = argc >= 5 ? std::strtoull(argv[4], nullptr, 0) : 0;
    const double memcpy = one ? 0 : memcpyGBps(); // a profiler's run skips it
    // The cable's and the fake hosts' buffers are reused. Without this,
    // glibc hands large freed ones back to the kernel and every reuse
    // faults fresh pages in: runs then took 2.5 times as long, at random.
    mallopt(M_MMAP_THRESHOLD, 256 << 20);
    mallopt(M_TRIM_THRESHOLD, 512 << 20);
    std::printf("pib-hca core data path, two devices in one process, RC, MTU 4096, %u in flight\n"
                "(each figure the median of %d runs)\n",
                kDepth, kRuns);
    if (memcpy > 0)
        std::printf("memcpy on this machine (one thread): %.2f GB/s\n", memcpy);
    std::printf("\n%-22s | %-35s | %-35s\n", "", "both devices on one thread",
                "each device on its own thread");
    std::printf("%-11s %10s | %12s %10s %11s | %12s %10s %11s\n", "operation", "bytes",
                "messages/s", "GB/s", "% memcpy", "messages/s", "GB/s", "% memcpy");
    for (uint8_t opcode :
         {uint8_t{PIB_WR_RDMA_WRITE}, uint8_t{PIB_WR_SEND}, uint8_t{PIB_WR_RDMA_READ}}) {
        for (uint32_t size : {8u, 64u, 512u, 4096u, 16384u, 65536u, 262144u, kMaxMessage}) {
            if (one &&
                (std::strcmp(argv[1], word(opcode)) || std::strtoul(argv[2], nullptr, 0) != size))
                continue;
            std::printf("%-11s %10u", name(opcode), size);
            for (auto stream : {streamOneThread, streamTwoThreads}) {
                if (threads && (stream == streamTwoThreads) != (threads == 2)) {
                    std::printf(" | %35s", "");
                    continue;
                }
                std::vector<double> rates;
                for (int run = 0; run < kRuns; ++run) {
                    Node::Options o;
                    o.mtu = 5; // 4096
                    o.timeout = 20;
                    Pair p(PIB_QPT_RC, o);
                    p.wire.inspect = false;
                    const uint64_t local = p.a.host.alloc(kMaxMessage),
                                   remote = p.b.host.alloc(kMaxMessage);
                    const Row row = stream(p, opcode, size, local, remote);
                    rates.push_back(row.messages / row.secs);
                }
                const double rate = median(rates);
                const double gbps = rate * size / 1e9;
                std::printf(" | %12.0f %10.3f", rate, gbps);
                if (memcpy > 0)
                    std::printf(" %10.1f%%", 100 * gbps / memcpy);
                else
                    std::printf(" %11s", "");
                std::fflush(stdout);
            }
            std::printf("\n");
        }
    }
    return 0;
}
