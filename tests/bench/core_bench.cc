// SPDX-License-Identifier: GPL-2.0-or-later
// The native benchmark of the device core's data path (no QEMU, no guest):
// RDMA WRITE and SEND between two device instances cabled back to back in
// this process, from 8 B to 1 MiB, beside this machine's memcpy
// bandwidth measured in the same run. It prints numbers; it asserts
// nothing about them.
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "connected_fixture.hh"

using namespace pib;
using namespace pib::testing;
using Clock = std::chrono::steady_clock;

namespace {

constexpr uint32_t kMaxMessage = 1u << 20;
constexpr unsigned kDepth = 32;        // WQEs in flight, as perftest's default tx depth
constexpr double kSecondsPerRow = 0.4; // each row runs about this long

double seconds(Clock::time_point since) {
    return std::chrono::duration<double>(Clock::now() - since).count();
}

// memcpy bandwidth over buffers larger than the caches, in GB/s.
double memcpyGBps() {
    std::vector<uint8_t> a(64 << 20, 1), b(64 << 20, 2);
    std::memcpy(b.data(), a.data(), a.size()); // fault the pages in
    size_t bytes = 0;
    const auto start = Clock::now();
    while (seconds(start) < 0.5) {
        std::memcpy(b.data(), a.data(), a.size());
        bytes += a.size();
        a[bytes % a.size()] ^= b[7]; // keep the copies observable
    }
    return bytes / seconds(start) / 1e9;
}

struct Row {
    uint64_t messages = 0;
    double secs = 0;
};

// Streams messages of `size` bytes from a to b for about kSecondsPerRow.
Row stream(Pair &p, uint8_t opcode, uint32_t size, uint64_t local, uint64_t remote) {
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
    while (seconds(start) < kSecondsPerRow) {
        while (inFlight < kDepth && (!send || recvPosted > inFlight))
            post();
        reap();
    }
    while (inFlight) // what is still in flight counts, and takes its time
        reap();
    row.secs = seconds(start);
    return row;
}

} // namespace

// With arguments ("write 65536" or "send 4096") it runs that row alone,
// for a profiler.
int main(int argc, char **argv) {
    const bool one = argc == 3;
    const double memcpy = one ? 0 : memcpyGBps(); // a profiler's run skips it
    std::printf("pib-hca core data path, two devices in one process, RC, MTU 4096, %u in flight\n",
                kDepth);
    if (memcpy > 0)
        std::printf("memcpy on this machine: %.2f GB/s\n", memcpy);
    std::printf("\n");
    std::printf("%-11s %9s %12s %10s %9s\n", "operation", "bytes", "messages/s", "GB/s",
                "% memcpy");
    for (uint8_t opcode : {uint8_t{PIB_WR_RDMA_WRITE}, uint8_t{PIB_WR_SEND}}) {
        for (uint32_t size : {8u, 64u, 512u, 4096u, 16384u, 65536u, 262144u, kMaxMessage}) {
            if (one && (std::strcmp(argv[1], opcode == PIB_WR_SEND ? "send" : "write") ||
                        std::strtoul(argv[2], nullptr, 0) != size))
                continue;
            Node::Options o;
            o.mtu = 5; // 4096
            o.timeout = 20;
            Pair p(PIB_QPT_RC, o, 64 << 20);
            p.wire.inspect = false;
            const uint64_t local = p.a.host.alloc(kMaxMessage),
                           remote = p.b.host.alloc(kMaxMessage);
            const Row row = stream(p, opcode, size, local, remote);
            const double rate = row.messages / row.secs;
            const double gbps = rate * size / 1e9;
            std::printf("%-11s %9u %12.0f %10.3f", opcode == PIB_WR_SEND ? "SEND" : "RDMA WRITE",
                        size, rate, gbps);
            if (memcpy > 0)
                std::printf(" %8.1f%%", 100 * gbps / memcpy);
            std::printf("\n");
        }
    }
    return 0;
}
