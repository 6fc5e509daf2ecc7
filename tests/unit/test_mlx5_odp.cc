// SPDX-License-Identifier: GPL-2.0-or-later
// ConnectX on-demand paging (docs/mlx5.md §10.6) as mlx5_ib drives it: a
// key of its MR cache loaded by the UMR QP with some entries absent (0)
// or read-only, a page fault EQE (the memory scheme's) on the EQ that
// takes them when a transfer reaches one, the pages loaded by another
// UMR, and PAGE_FAULT_RESUME. Every byte that moves is checked.
#include <catch2/catch.hpp>

#include "mlx5_odp_function.hh"

using namespace pib;
using namespace pib::mlx5;
using namespace pib::testing::umr_function;
using namespace pib::testing::odp_function;

TEST_CASE("mlx5 ODP: a WRITE into a page the key does not map is RNR NAKed and faults; once "
          "the driver maps it and resumes, the resend lands",
          "[mlx5][odp]") {
    OdpFunction f;
    auto [a, b] = f.patientPair();
    const auto pages = scatteredPages(f.host, 4);
    const uint32_t key =
        f.pagedKey({pages[0] | kWritable, 0, pages[2] | kWritable, pages[3] | kWritable});
    const uint64_t source = f.host.allocRandom(8192, 11);

    // Bytes 2048..10239: page 1 is absent. Nothing completes, nothing lands.
    CHECK(f.write(a, source, f.lkey, 8192, kIova + 2048, key).empty());
    const auto fault = f.nextFault();
    REQUIRE(fault);
    CHECK(fault->type == kPageFaultEvent);
    CHECK(fault->subType == 2);  // the memory scheme's
    CHECK(fault->flags == 0x80); // LAST: resume it
    CHECK(fault->key == key);
    CHECK(fault->va == kIova + kPage);
    CHECK(fault->pages == 2); // 4096..10239 of the range
    CHECK(!f.nextFault());
    CHECK(f.host.traces("page_fault") == 1);
    CHECK(!holds(f.host, pages, 2048, f.host.at(source), 2048));

    // The driver maps page 1 (MTT only, mkey_mask 0) and resumes: the
    // requester's RNR wait ends, the WRITE goes again and lands whole.
    // (Its loads start at a multiple of 8 entries, as the driver's do.)
    CHECK(f.load(key, kMustBeInUse, 0, 0,
                 {pages[0] | kWritable, pages[1] | kWritable, pages[2] | kWritable,
                  pages[3] | kWritable}) == kGood);
    const auto done = f.resumeAndWait(fault->token, 1);
    REQUIRE(done.size() == 1);
    CHECK(opcodeOf(done[0]) == kGood);
    CHECK(holds(f.host, pages, 2048, f.host.at(source), 8192));
    CHECK(f.host.traces("page_fault_resumed") == 1);
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5 ODP: a WQE whose buffer reaches a read-only page for a READ's data waits for "
          "the driver; a page it reads needs only the read enable",
          "[mlx5][odp]") {
    OdpFunction f;
    auto [a, b] = f.patientPair();
    const auto pages = scatteredPages(f.host, 2);
    std::fill_n(f.host.at(pages[0]), kPage, 0x3c);
    const uint32_t key = f.pagedKey({pages[0] | kReadable, pages[1] | kReadable});
    const uint64_t remote = f.host.allocRandom(kPage, 5);

    // A READ into page 1 of the key writes it: the requester faults at
    // the WQE and sends nothing until the driver resumes.
    f.blueFlame(f.writeSend(a, false,
                            {.opcode = kRdmaRead,
                             .addr = kIova + kPage,
                             .length = 4096,
                             .remoteAddr = remote,
                             .rkey = f.lkey,
                             .lkey = key}),
                f.uar);
    CHECK(f.completions(&f.next, 1).empty());
    const auto fault = f.nextFault();
    REQUIRE(fault);
    CHECK(fault->va == kIova + kPage);
    CHECK(fault->pages == 1);
    CHECK(f.host.traces("page_fault") == 1);
    CHECK(f.load(key, kMustBeInUse, 0, 0, {pages[0] | kReadable, pages[1] | kWritable}) == kGood);
    const auto done = f.resumeAndWait(fault->token, 1);
    REQUIRE(done.size() == 1);
    CHECK(opcodeOf(done[0]) == kGood);
    CHECK(std::equal(f.host.at(remote), f.host.at(remote) + kPage, f.host.at(pages[1])));

    // A WRITE from read-only page 0 reads it: no fault.
    const uint64_t sink = f.host.alloc(kPage);
    const auto sent = f.write(a, kIova, key, 4096, sink, f.lkey);
    REQUIRE(sent.size() == 1);
    CHECK(opcodeOf(sent[0]) == kGood);
    CHECK(
        std::all_of(f.host.at(sink), f.host.at(sink) + kPage, [](uint8_t x) { return x == 0x3c; }));
    CHECK(f.host.traces("page_fault") == 1);
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5 ODP: a fault the driver fails, or leaves unanswered, fails the WQE; a stale "
          "resume is no error",
          "[mlx5][odp]") {
    OdpFunction f;
    auto [a, b] = f.patientPair();
    const uint32_t key = f.pagedKey({0, 0});
    const uint64_t sink = f.host.alloc(kPage);

    // Resumed with an error: the requester asks again 20 ms later; the
    // driver fails that too, and the WQE completes with a local protection
    // error, and the QP with it.
    CHECK(f.write(a, kIova, key, 64, sink, f.lkey).empty());
    auto fault = f.nextFault();
    REQUIRE(fault);
    f.resume(fault->token, true);
    CHECK(f.completions(&f.next, 1).empty());
    CHECK(!f.nextFault());
    f.host.advance(20'000'000);
    fault = f.nextFault();
    REQUIRE(fault);
    CHECK(fault->va == kIova);
    f.resume(fault->token, true);
    auto done = f.completions(&f.next, 1);
    REQUIRE(done.size() == 1);
    CHECK(opcodeOf(done[0]) == kRequesterError);
    CHECK(done[0][0x37] == kLocalProtection);
    CHECK(f.host.traces("page_fault_failed") == 1);
    // Resumed again, or never raised: nothing to do.
    f.resume(fault->token);
    f.resume(uint64_t{1} << 47 | 0x123456);
    CHECK(f.host.traces("page_fault_stale") == 2);

    // Not resumed within 10 s: the same.
    auto [c, d] = f.patientPair();
    CHECK(f.write(c, kIova + 100, key, 64, sink, f.lkey).empty());
    REQUIRE(f.nextFault());
    f.host.advance(9'000'000'000);
    CHECK(f.completions(&f.next, 1).empty());
    f.host.advance(2'000'000'000);
    done = f.completions(&f.next, 1);
    REQUIRE(done.size() == 1);
    CHECK(done[0][0x37] == kLocalProtection);
    CHECK(f.host.traces("page_fault_timeout") == 1);
    // The two resumes of the first pair's faults; none of the timed out one.
    CHECK(f.host.traces("page_fault_resumed") == 2);
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5 ODP: a SEND into a receive buffer the key does not map is RNR NAKed; the "
          "receive WQE waits for the resend",
          "[mlx5][odp]") {
    OdpFunction f;
    auto [a, b] = f.patientPair();
    const auto pages = scatteredPages(f.host, 2);
    const uint32_t key = f.pagedKey({0, pages[1] | kWritable});
    f.postReceive(b, kIova, 8192, key);
    const uint64_t source = f.host.allocRandom(6000, 3);
    f.blueFlame(f.writeSend(a, false, {.opcode = kSend, .addr = source, .length = 6000}), f.uar);
    CHECK(f.completions(&f.next, 2).empty());
    const auto fault = f.nextFault();
    REQUIRE(fault);
    CHECK(fault->va == kIova);
    CHECK(f.load(key, kMustBeInUse, 0, 0, {pages[0] | kWritable, pages[1] | kWritable}) == kGood);
    const auto done = f.resumeAndWait(fault->token, 2);
    REQUIRE(done.size() == 2); // the SEND and the receive
    for (const uint8_t *cqe : done)
        CHECK(cqe[0x3f] >> 4 != kRequesterError);
    CHECK(holds(f.host, pages, 0, f.host.at(source), 6000));
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5 ODP: with no EQ taking page faults, a transfer that reaches an absent page "
          "fails at once",
          "[mlx5][odp]") {
    UmrFunction f;
    auto umr = f.umrQp();
    auto [a, b] = f.connectedRc();
    const uint32_t key = f.cacheKey(8);
    REQUIRE(f.run(umr, mlx5umr::cacheLoad(key, f.pd, kIova, 2 * kPage, {0, 0})).first == kGood);
    const uint64_t sink = f.host.alloc(kPage);
    const auto done = f.completeOne(
        f.writeSend(
            a, false,
            {.opcode = kRdmaWrite, .addr = kIova, .length = 64, .remoteAddr = sink, .lkey = key}),
        &f.next);
    REQUIRE(done);
    CHECK(done->first == kRequesterError);
    CHECK(done->second == kLocalProtection);
    CHECK(f.host.traces("page_fault_unreported") == 1);
}

TEST_CASE("mlx5 ODP: a responder's fault the driver fails is asked again on a resend 20 ms "
          "or more later, the resends before RNR NAKed; failed twice, the peer gets a remote "
          "access error",
          "[mlx5][odp]") {
    OdpFunction f;
    auto [a, b] = f.patientPair();
    const uint32_t key = f.pagedKey({0, 0});
    const uint64_t source = f.host.allocRandom(64, 2);
    CHECK(f.write(a, source, f.lkey, 64, kIova, key).empty());
    auto fault = f.nextFault();
    REQUIRE(fault);
    f.resume(fault->token, true);
    f.host.advance(10'000'000); // resends within the 20 ms: RNR NAKs, no fault
    CHECK(!f.nextFault());
    CHECK(f.completions(&f.next, 1).empty());
    f.host.advance(1'000'000'000); // beyond any RNR wait
    fault = f.nextFault();
    REQUIRE(fault);
    CHECK(fault->va == kIova);
    f.resume(fault->token, true);
    f.host.advance(1'000'000'000);
    const auto done = f.completions(&f.next, 1);
    REQUIRE(done.size() == 1);
    CHECK(opcodeOf(done[0]) == kRequesterError);
    CHECK(done[0][0x37] == 0x13); // remote access error
    CHECK(f.host.traces("page_fault_failed") == 1);
    CHECK(f.host.guestErrors() == 0);
}
