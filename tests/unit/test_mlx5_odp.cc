// SPDX-License-Identifier: GPL-2.0-or-later
// ConnectX on-demand paging (docs/mlx5.md §10.6) as mlx5_ib drives it: a
// key of its MR cache loaded by the UMR QP with some entries absent (0)
// or read-only, a page fault EQE (the memory scheme's) on the EQ that
// takes them when a transfer reaches one, the pages loaded by another
// UMR, and PAGE_FAULT_RESUME. Every byte that moves is checked.
#include <catch2/catch.hpp>

#include "mlx5_umr_function.hh"

using namespace pib;
using namespace pib::mlx5;
using namespace pib::testing::umr_function;

namespace {

constexpr uint64_t kPage = 4096;
constexpr uint64_t kReadable = 0x1, kWritable = 0x3;
constexpr uint8_t kPageFaultEvent = 0x0c;
constexpr uint64_t kEnable = (1u << 0) | (1u << 1) | (1u << 6) | (1u << 7) | (1u << 13) |
                             (0x1fu << 17) | (1u << 29); // range, PD, key, rights, free

// A page fault EQE's memory scheme fields.
struct Fault {
    uint8_t type = 0, subType = 0, flags = 0;
    uint64_t token = 0;
    uint32_t pages = 0, key = 0;
    uint64_t va = 0;
};

struct OdpFunction : UmrFunction {
    // The driver's page fault EQ (mlx5r_odp_create_eq): page faults only.
    OdpFunction() {
        const auto r =
            host.run(host.eqInput(4, uint64_t{1} << kPageFaultEvent, 0, uar, &faultRing), 16);
        REQUIRE(r.status() == 0);
        faultEqn = static_cast<uint32_t>(r.get(field(0x58, 8)));
        umr = umrQp();
    }
    // A connected pair that waits out RNR NAKs for ever, as rdma-core's
    // tests make theirs (rnr_retry 7).
    std::pair<Qp, Qp> patientPair() {
        auto a = createQp(kRc, 1, 3, 4), b = createQp(kRc, 1, 3, 4);
        REQUIRE((a && b));
        REQUIRE(toRts(a->qpn, {.qpn = b->qpn, .rnrRetries = 7}));
        REQUIRE(toRts(b->qpn, {.qpn = a->qpn, .rnrRetries = 7}));
        return {*a, *b};
    }
    // A UMR of `key` loading `entries` (raw: page address and enables)
    // from its first, the mask `fields`; its CQE's opcode.
    uint8_t load(uint32_t key, uint8_t flags, uint64_t fields, uint64_t length,
                 const std::vector<uint64_t> &entries) {
        std::vector<uint8_t> wqe = mlx5umr::umrQpSegments(key, 0x80 | flags, fields, false, pd,
                                                          kIova, length, entries.size());
        for (uint64_t e : entries) {
            wqe.resize(wqe.size() + 8);
            writeBe64(&wqe[wqe.size() - 8], e);
        }
        return run(umr, wqe).first;
    }
    // A key of 8 entries over `pages` (4 KiB each), enabled, each entry
    // with its enables (0: absent).
    uint32_t pagedKey(const std::vector<uint64_t> &entries) {
        const uint32_t key = cacheKey(8);
        REQUIRE(load(key, kMustBeFree, kEnable, entries.size() * kPage, entries) == kGood);
        return key;
    }
    // The next EQE of the fault EQ, if one was written.
    std::optional<Fault> nextFault() {
        const uint8_t *e = host.at(faultRing + 64 * (faultsSeen % 16));
        if ((e[0x3f] & 1) != ((faultsSeen / 16) & 1 ? 1 : 0))
            return std::nullopt; // the owner bit of the pass before
        ++faultsSeen;
        Fault f;
        f.type = e[1];
        f.subType = e[3];
        f.flags = e[0x20];
        f.token = uint64_t{readBe16(e + 0x26)} << 32 | readBe32(e + 0x28);
        f.pages = readBe32(e + 0x2c) >> 12;
        f.key = readBe32(e + 0x30);
        f.va = readBe64(e + 0x34);
        return f;
    }
    void resume(uint64_t token, bool error = false) {
        auto in = Mlx5Host::input(0x204);
        in[0x08] = error ? 0x80 : 0;
        writeBe16(&in[0x0a], static_cast<uint16_t>(token >> 32));
        writeBe32(&in[0x0c], static_cast<uint32_t>(token));
        REQUIRE(host.run(in, 16).status() == 0);
    }
    // The driver resumes fault `token`, time passes beyond any RNR wait:
    // the `want` CQEs that come then.
    std::vector<const uint8_t *> resumeAndWait(uint64_t token, size_t want) {
        resume(token);
        host.advance(1'000'000'000);
        return completions(&next, want);
    }
    // Rings a WRITE of `length` bytes from `local` through `lkey` to
    // `remote` through `rkey` on `qp`; its CQEs so far.
    std::vector<const uint8_t *> write(Qp &qp, uint64_t local, uint32_t lkey, uint32_t length,
                                       uint64_t remote, uint32_t rkey) {
        blueFlame(writeSend(qp, false,
                            {.opcode = kRdmaWrite,
                             .addr = local,
                             .length = length,
                             .remoteAddr = remote,
                             .rkey = rkey,
                             .lkey = lkey}),
                  uar);
        return completions(&next, 1);
    }

    uint64_t faultRing = 0;
    uint32_t faultEqn = 0, faultsSeen = 0;
    Qp umr;
};

uint8_t opcodeOf(const uint8_t *cqe) {
    return static_cast<uint8_t>(cqe[0x3f] >> 4);
}

} // namespace

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

    // Resumed with an error: the WQE completes with a local protection
    // error, and the QP with it.
    CHECK(f.write(a, kIova, key, 64, sink, f.lkey).empty());
    auto fault = f.nextFault();
    REQUIRE(fault);
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
    // Resumed after that: stale.
    CHECK(f.host.traces("page_fault_resumed") == 1);
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
