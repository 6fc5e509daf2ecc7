// SPDX-License-Identifier: GPL-2.0-or-later
// ConnectX implicit on-demand paging (docs/mlx5.md §10.7) as mlx5_ib's
// memory scheme drives it: a KSM key over the address space in spans of
// 1 GiB, each span through the implicit region's null key (which faults
// on every page) until the driver makes a child key for it; the fault
// names the null key and the address, the driver loads the child and
// points the span at it, and resumes. Every byte that moves is checked.
#include <catch2/catch.hpp>

#include "limits.hh"
#include "mlx5_odp_function.hh"
#include "mlx5_processes.hh"
#include "state_sections.hh"

using namespace pib;
using namespace pib::mlx5;
using namespace pib::testing::umr_function;
using namespace pib::testing::odp_function;
using pib::testing::withoutSection;

namespace {

constexpr unsigned kSpanShift = 30; // MLX5_KSM_PAGE_SHIFT
constexpr uint64_t kSpan = uint64_t{1} << kSpanShift;
constexpr uint64_t kVa = 3 * kSpan + 0x5000; // in span 3
constexpr uint8_t kLength64 = 0x80;

struct ImplicitOdp : OdpFunction {
    // CREATE_MKEY as mlx5_ib's MR cache makes a KSM key (set_cache_mkc):
    // free, UMR-enabled, a table of `entries`, in the UMR's PD; `uid` 0.
    std::pair<uint8_t, uint32_t> ksmKey(uint32_t entries, uint16_t uid = 0) {
        auto in = Mlx5Host::input(0x200, 0, 0x110);
        set(in, field(0x10, 16), uid);
        set(in, field(0x81, 1), 1); // free
        set(in, field(0x90, 1), 1); // umr_en
        set(in, field(0x95, 1), 1); // lr
        set(in, field(0x96, 2), 3); // KSM
        set(in, field(0xa0, 24), 0xffffff);
        set(in, field(0xb8, 8), 0x6b);
        set(in, field(0xe8, 24), umrPd);
        set(in, field(0x220, 32), entries);
        set(in, field(0x25a, 6), 12);
        const auto r = host.run(in, 16);
        return {r.status(), static_cast<uint32_t>(r.get(kHeld)) << 8 | 0x6b};
    }
    // alloc_implicit_mr_null_mkey: an MTT key with pg_access over the
    // whole address space in 2^61-byte pages, its 8 entries absent.
    std::pair<uint8_t, uint32_t> nullKey(uint32_t pdn, unsigned logPage = 61) {
        auto in = Mlx5Host::input(0x200, 0, 0x110 + 64);
        set(in, field(0x60, 1), 1);    // pg_access
        set(in, field(0x300, 32), 4);  // translations_octword_actual_size
        set(in, field(0x91, 5), 0x1f); // a rw rr lw lr
        set(in, field(0x96, 2), 1);    // MTT
        set(in, field(0xa0, 24), 0xffffff);
        set(in, field(0xe0, 1), 1); // length64
        set(in, field(0xe8, 24), pdn);
        set(in, field(0x220, 32), 4);
        set(in, field(0x25a, 6), logPage);
        const auto r = host.run(in, 16);
        return {r.status(), static_cast<uint32_t>(r.get(kHeld)) << 8};
    }
    // A UMR of the UMR QP as mlx5r_umr_update_xlt posts one: `words`
    // (8-byte, big-endian) behind a data segment at `offset` words, the
    // mask `fields`, the key segment's range from `iova` to the address
    // space's end (length64) in pages of 2^logPage bytes.
    uint8_t update(uint32_t key, uint8_t flags, uint64_t fields, uint64_t iova, unsigned logPage,
                   const std::vector<uint64_t> &words, uint64_t offset = 0) {
        std::vector<uint8_t> wqe =
            mlx5umr::umrQpSegments(key, flags, fields, false, pd, iova, 0, words.size(), offset);
        wqe[64 + 12] |= kLength64;
        wqe[64 + 59] = static_cast<uint8_t>(logPage);
        const uint64_t list = host.alloc(8 * words.size(), 64);
        for (size_t i = 0; i < words.size(); ++i)
            writeBe64(host.at(list + 8 * i), words[i]);
        wqe.resize(144);
        writeBe32(&wqe[128], static_cast<uint32_t>(8 * words.size()));
        writeBe32(&wqe[132], lkey);
        writeBe64(&wqe[136], list);
        return run(umr, wqe).first;
    }
    // KSM entries (mlx5_klm as populate_klm fills them: byte count, key,
    // address) as words.
    static std::vector<uint64_t> ksmEntries(const std::vector<std::pair<uint32_t, uint64_t>> &e) {
        std::vector<uint64_t> words;
        for (const auto &[key, va] : e) {
            words.push_back(kSpan << 32 | key);
            words.push_back(va);
        }
        return words;
    }
    // The implicit region: a KSM key of 8 spans, all through a null key
    // of the user's PD, enabled in that PD (ZAP | ENABLE).
    void makeImplicit() {
        auto [status, k] = ksmKey(8);
        REQUIRE(status == 0);
        ksm = k;
        auto [nullStatus, n] = nullKey(pd);
        REQUIRE(nullStatus == 0);
        null = n;
        std::vector<std::pair<uint32_t, uint64_t>> spans;
        for (uint64_t i = 0; i < 8; ++i)
            spans.emplace_back(null, i * kSpan);
        REQUIRE(update(ksm, kMustBeFree, kEnable, 0, kSpanShift, ksmEntries(spans)) == kGood);
    }
    // What pagefault_implicit_mr does for span 3: a child key of the MR
    // cache over the span's first 8 pages (`pages`, with their enables),
    // enabled in the user's PD, and the span pointed at it (entries 0..3,
    // as the driver aligns its loads to 64 bytes).
    uint32_t makeChild(const std::vector<uint64_t> &pages) {
        const uint32_t child = cacheKey(8);
        REQUIRE(update(child, kMustBeFree, kEnable, 3 * kSpan, 12, pages) == kGood);
        REQUIRE(
            update(ksm, kMustBeInUse, 0, 0, 0,
                   ksmEntries({{null, 0}, {null, kSpan}, {null, 2 * kSpan}, {child, 3 * kSpan}})) ==
            kGood);
        return child;
    }

    // A child for span 3 that maps kVa's page alone, at `page`.
    uint32_t childOfOnePage(uint64_t page) {
        std::vector<uint64_t> entries(8, 0);
        entries[5] = page | kWritable;
        return makeChild(entries);
    }

    uint32_t ksm = 0, null = 0;
};

} // namespace

TEST_CASE("mlx5 implicit ODP: a WRITE into a span no child maps faults on the region's null key "
          "at its address; once the driver made the child and resumes, it lands",
          "[mlx5][odp][implicit]") {
    ImplicitOdp f;
    f.makeImplicit();
    auto [a, b] = f.patientPair();
    const uint64_t source = f.host.allocRandom(6000, 21);

    CHECK(f.write(a, source, f.lkey, 6000, kVa + 100, f.ksm).empty());
    const auto fault = f.nextFault();
    REQUIRE(fault);
    CHECK(fault->key == f.null); // the null key's: mlx5_ib finds its region by it
    CHECK(fault->va == kVa + 100);
    CHECK(fault->flags == 0x80);
    CHECK(f.host.traces("page_fault") == 1);

    // The child maps pages 5 and 6 of span 3 (kVa's and the next).
    const auto pages = scatteredPages(f.host, 2);
    std::vector<uint64_t> entries(8, 0);
    entries[5] = pages[0] | kWritable;
    entries[6] = pages[1] | kWritable;
    f.makeChild(entries);
    const auto done = f.resumeAndWait(fault->token, 1);
    REQUIRE(done.size() == 1);
    CHECK(opcodeOf(done[0]) == kGood);
    CHECK(holds(f.host, pages, 100, f.host.at(source), 6000));

    // And READ back through the implicit region as an L_Key: no fault.
    const uint64_t sink = f.host.alloc(6000);
    const auto back = f.write(a, kVa + 100, f.ksm, 6000, sink, f.lkey);
    REQUIRE(back.size() == 1);
    CHECK(opcodeOf(back[0]) == kGood);
    CHECK(std::equal(f.host.at(source), f.host.at(source) + 6000, f.host.at(sink)));
    CHECK(f.host.traces("page_fault") == 1);
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5 implicit ODP: a page the child does not map faults on the child, at its address",
          "[mlx5][odp][implicit]") {
    ImplicitOdp f;
    f.makeImplicit();
    auto [a, b] = f.patientPair();
    const auto pages = scatteredPages(f.host, 1);
    std::vector<uint64_t> entries(8, 0);
    entries[5] = pages[0] | kWritable;
    const uint32_t child = f.makeChild(entries);
    const uint64_t source = f.host.allocRandom(8192, 4);

    CHECK(f.write(a, source, f.lkey, 8192, kVa, f.ksm).empty()); // pages 5 and 6
    const auto fault = f.nextFault();
    REQUIRE(fault);
    CHECK(fault->key == child);
    CHECK(fault->va == kVa + kPage);
    const auto more = scatteredPages(f.host, 1);
    entries[6] = more[0] | kWritable;
    REQUIRE(f.update(child, kMustBeInUse, 0, 3 * kSpan, 12, entries) == kGood);
    const auto done = f.resumeAndWait(fault->token, 1);
    REQUIRE(done.size() == 1);
    CHECK(opcodeOf(done[0]) == kGood);
    CHECK(holds(f.host, {pages[0], more[0]}, 0, f.host.at(source), 8192));
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5 implicit ODP: a span through a key of another PD, an indirect key, a key gone "
          "or beyond the table fails the access; the KSM key's own PD and rights are checked",
          "[mlx5][odp][implicit]") {
    ImplicitOdp f;
    f.makeImplicit();
    auto [a, b] = f.connectedRc();
    const auto pages = scatteredPages(f.host, 8);
    std::vector<uint64_t> entries;
    for (uint64_t p : pages)
        entries.push_back(p | kWritable);
    const uint32_t child = f.makeChild(entries);
    const uint64_t source = f.host.allocRandom(256, 9);
    CHECK(f.rdma(a, kRdmaWrite, source, 256, kVa, f.ksm).first == kGood);
    CHECK(holds(f.host, pages, 0x5000, f.host.at(source), 256));

    const auto pointSpan3At = [&](uint32_t key) {
        REQUIRE(
            f.update(f.ksm, kMustBeInUse, 0, 0, 0,
                     ImplicitOdp::ksmEntries(
                         {{f.null, 0}, {f.null, kSpan}, {f.null, 2 * kSpan}, {key, 3 * kSpan}})) ==
            kGood);
    };
    // Each failure below is the WQE's: the implicit region as its L_Key.
    const uint64_t sink = f.host.alloc(64);
    const auto gatherFails = [&]() {
        auto [c, d] = f.connectedRc();
        const auto done = f.write(c, kVa, f.ksm, 64, sink, f.lkey);
        return done.size() == 1 && opcodeOf(done[0]) == kRequesterError &&
               done[0][0x37] == kLocalProtection;
    };
    // A key of the UMR's PD (the cache's, in use): not the region's.
    const uint32_t foreign = f.cacheKey(8);
    REQUIRE(f.run(f.umr, mlx5umr::cacheLoad(foreign, f.umrPd, 3 * kSpan, 8 * kPage, pages)).first ==
            kGood);
    pointSpan3At(foreign);
    CHECK(gatherFails());
    // Another KSM key: one level of indirection.
    auto [s2, other] = f.ksmKey(8);
    REQUIRE(s2 == 0);
    pointSpan3At(other);
    CHECK(gatherFails());
    // Back to the child, then the child goes: the span reaches nothing.
    pointSpan3At(child);
    auto [h, i] = f.connectedRc();
    CHECK(f.rdma(h, kRdmaWrite, source, 64, kVa, f.ksm).first == kGood);
    auto destroy = Mlx5Host::input(0x202);
    set(destroy, field(0x48, 24), child >> 8);
    REQUIRE(f.host.run(destroy, 16).status() == 0);
    CHECK(gatherFails());
    // Beyond the table's 8 spans.
    auto [j, k] = f.connectedRc();
    const auto beyond = f.write(j, 8 * kSpan + 64, f.ksm, 64, sink, f.lkey);
    REQUIRE(beyond.size() == 1);
    CHECK(beyond[0][0x37] == kLocalProtection);
}

TEST_CASE("mlx5 implicit ODP: CREATE_MKEY makes KSM keys for the kernel only, of up to 2^17 "
          "entries; the null key reports no page, and QUERY_SPECIAL_CONTEXTS names none",
          "[mlx5][odp][implicit]") {
    ImplicitOdp f;
    CHECK(f.ksmKey(limits::kMaxKsmEntries).first == 0);
    CHECK(f.ksmKey(limits::kMaxKsmEntries + 1).first == 0x3); // BAD_PARAM
    CHECK(f.ksmKey(0).first == 0x3);
    const auto uctx =
        f.host.run(Mlx5Host::input(pib::testing::Mlx5Processes::kCreateUctx, 0, 0x40), 16);
    REQUIRE(uctx.status() == 0);
    const auto uid = static_cast<uint16_t>(uctx.get(field(0x50, 16)));
    CHECK(f.ksmKey(8, uid).first != 0); // a process's free key
    CHECK(f.host.guestErrors("mlx5-cmd-bad-uid") == 1);
    // pg_access pages beyond 2^61 bytes, or length64 without pg_access.
    CHECK(f.nullKey(f.pd, 61).first == 0);
    CHECK(f.nullKey(f.pd, 62).first == 0x3);
    // The null key QUERY_SPECIAL_CONTEXTS gives is 0: no key has index 0.
    const auto special = f.host.run(Mlx5Host::input(0x203), 0x20);
    REQUIRE(special.status() == 0);
    CHECK(special.get(field(0x80, 32)) == 0);
    // Capabilities: KSM keys and a null key, so mlx5_ib offers implicit ODP.
    const auto caps = f.host.run(Mlx5Host::input(0x100, 1), 0x10 + 4096);
    REQUIRE(caps.status() == 0);
    CHECK(caps.get(field(0x80 + 0x108, 1)) == 1); // fixed_buffer_size
    CHECK(caps.get(field(0x80 + 0x119, 1)) == 1); // null_mkey
    CHECK(caps.get(field(0x80 + 0x118, 1)) == 1); // umr_extended_translation_offset
}

TEST_CASE("mlx5 implicit ODP: a function moves with its implicit region: the KSM key's table, "
          "the null key and the child come back as they were, and still fault and map",
          "[mlx5][odp][implicit][mlx5-state]") {
    ImplicitOdp f;
    f.makeImplicit();
    auto [a, b] = f.patientPair();
    const auto pages = scatteredPages(f.host, 1);
    f.childOfOnePage(pages[0]);
    const uint64_t source = f.host.allocRandom(512, 8);

    const std::vector<uint8_t> saved = f.host.saveState();
    REQUIRE(!saved.empty());
    REQUIRE(f.host.move() == "");
    CHECK(withoutSection(f.host.saveState(), "PRTS") == withoutSection(saved, "PRTS"));
    // Span 3 through the child, to its page; span 2 through the null key.
    const auto done = f.write(a, source, f.lkey, 512, kVa, f.ksm);
    REQUIRE(done.size() == 1);
    CHECK(opcodeOf(done[0]) == kGood);
    CHECK(holds(f.host, pages, 0, f.host.at(source), 512));
    CHECK(f.write(a, source, f.lkey, 512, 2 * kSpan + 64, f.ksm).empty());
    const auto fault = f.nextFault();
    REQUIRE(fault);
    CHECK(fault->key == f.null);
    CHECK(fault->va == 2 * kSpan + 64);
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5 implicit ODP: a fault the driver fails because the span's child went is asked "
          "again on the region's key at that address; failed twice, the WQE fails",
          "[mlx5][odp][implicit]") {
    ImplicitOdp f;
    f.makeImplicit();
    auto [a, b] = f.patientPair();
    std::vector<uint64_t> entries(8, 0);
    const uint32_t child = f.makeChild(entries); // span 3's child, no page mapped
    const uint64_t sink = f.host.alloc(256);
    CHECK(f.write(a, kVa, f.ksm, 256, sink, f.lkey).empty());
    auto fault = f.nextFault();
    REQUIRE(fault);
    CHECK(fault->key == child);
    // The driver destroys the child meanwhile (mlx5_ib's unused children):
    // the span back to the null key; its fault on the child fails.
    REQUIRE(
        f.update(f.ksm, kMustBeInUse, 0, 0, 0,
                 ImplicitOdp::ksmEntries(
                     {{f.null, 0}, {f.null, kSpan}, {f.null, 2 * kSpan}, {f.null, 3 * kSpan}})) ==
        kGood);
    f.resume(fault->token, true);
    // Fetched again 20 ms later, the WQE reaches the null key, and asks on
    // the region's key, at the address in it.
    CHECK(!f.nextFault());
    f.host.advance(20'000'000);
    fault = f.nextFault();
    REQUIRE(fault);
    CHECK(fault->key == f.ksm);
    CHECK(fault->va == kVa);
    CHECK(f.host.traces("page_fault_failed") == 0);
    // Failed twice: the WQE fails.
    f.resume(fault->token, true);
    const auto done = f.completions(&f.next, 1);
    REQUIRE(done.size() == 1);
    CHECK(done[0][0x37] == kLocalProtection);
    CHECK(f.host.traces("page_fault_failed") == 1);
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5 implicit ODP: a span whose dropped child the driver fails a fault on before it "
          "points the span elsewhere is asked again on the region's key, which the driver "
          "resolves: the WQE completes",
          "[mlx5][odp][implicit]") {
    // rdma-core's test_odp_implicit_async_prefetch_rc_traffic under load:
    // madvise(DONTNEED) empties span 3's child, mlx5_ib drops it from its
    // tables at once and links the span to another key later, from a work
    // queue. Its fault on the child fails; 20 ms later the span still
    // names it.
    ImplicitOdp f;
    f.makeImplicit();
    auto [a, b] = f.patientPair();
    const uint32_t dropped = f.makeChild(std::vector<uint64_t>(8, 0));
    const uint64_t sink = f.host.alloc(256);
    CHECK(f.write(a, kVa, f.ksm, 256, sink, f.lkey).empty()); // its data through the region
    auto fault = f.nextFault();
    REQUIRE(fault);
    CHECK(fault->key == dropped);
    f.resume(fault->token, true);
    f.host.advance(20'000'000);
    fault = f.nextFault();
    REQUIRE(fault);
    CHECK(fault->key == f.ksm);
    CHECK(fault->va == kVa);
    // pagefault_implicit_mr: a new child with the page, the span on it.
    const auto pages = scatteredPages(f.host, 1);
    const uint64_t data = f.host.allocRandom(256, 23);
    std::copy(f.host.at(data), f.host.at(data) + 256, f.host.at(pages[0]));
    f.childOfOnePage(pages[0]);
    const auto done = f.resumeAndWait(fault->token, 1);
    REQUIRE(done.size() == 1);
    CHECK(opcodeOf(done[0]) == kGood);
    CHECK(std::equal(f.host.at(data), f.host.at(data) + 256, f.host.at(sink)));
    CHECK(f.host.traces("page_fault_failed") == 0);
    CHECK(f.host.guestErrors() == 0);
}
