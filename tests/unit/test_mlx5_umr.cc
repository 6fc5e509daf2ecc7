// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX UMR QP (docs/mlx5.md §10.1) and keys made with their pages
// (§4.5): what mlx5_ib does with a user memory region. It takes a free
// key of its MR cache, loads the region's pages into it in chunks by UMR
// WQEs on its own UMR QP, enables it, and frees it again when the region
// is deregistered; or it makes the key with its pages in CREATE_MKEY.
// Each key is then used for RDMA by a connected QP, every byte checked.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>
#include <utility>

#include "mlx5_checks.hh"
#include "mlx5_function.hh"
#include "mlx5_umr_wqes.hh"

using namespace pib;
using namespace pib::mlx5;

namespace {

using namespace pib::testing::mlx5qp;
namespace mlx5umr = pib::testing::mlx5umr;
using pib::testing::Mlx5Function;
constexpr uint8_t kRegUmr = 0xc;
constexpr uint64_t kIova = 0x7f1200000000;

// The mkey_mask bits mlx5r_umr_* set (MLX5_MKEY_MASK_*).
namespace mask {
constexpr uint64_t kRange = (1u << 0) | (1u << 1) | (1u << 6); // length, page size, start
constexpr uint64_t kPd = 1u << 7;
constexpr uint64_t kKey = 1u << 13;
constexpr uint64_t kRights = 0x1fu << 17; // lr lw rr rw a
constexpr uint64_t kFree = 1u << 29;
} // namespace mask
constexpr uint8_t kInline = 0x80, kMustBeFree = 1u << 5, kMustBeInUse = 2u << 5;

struct UmrFunction : pib::testing::OwnedMlx5Host, Mlx5Function {
    UmrFunction() : Mlx5Function(owned) {
        REQUIRE(setUp());
        REQUIRE(activatePort());
        const auto alloc = host.run(Mlx5Host::input(0x800), 16); // ALLOC_PD: the UMR's own
        REQUIRE(alloc.status() == 0);
        umrPd = static_cast<uint32_t>(alloc.get(kHeld));
    }

    // The UMR QP as mlx5r_umr_resource_init makes it: no PD, no RQ,
    // INIT with its port, then RTR and RTS.
    Qp umrQp() {
        Qp qp;
        auto in = qpInput(kRegUmr, std::nullopt, 0, 6, qp);
        set(in, kPd, 0);
        const auto r = host.run(in, 16);
        REQUIRE(r.status() == 0);
        qp.qpn = static_cast<uint32_t>(r.get(kHeld));
        REQUIRE(toRts(qp.qpn));
        return qp;
    }
    std::pair<Qp, Qp> connectedRc() {
        auto a = createQp(kRc, 1, 3, 4), b = createQp(kRc, 1, 3, 4);
        REQUIRE((a && b));
        REQUIRE(toRts(a->qpn, {.qpn = b->qpn}));
        REQUIRE(toRts(b->qpn, {.qpn = a->qpn}));
        return {*a, *b};
    }
    // A key of the MR cache (mlx5_ib's alloc_cache_mr): free, UMR-enabled,
    // MTT, in the UMR's PD, a table of `entries`.
    uint32_t cacheKey(uint32_t entries) {
        auto in = Mlx5Host::input(0x200, 0, 0x110);
        set(in, field(0x81, 1), 1); // free
        set(in, field(0x90, 1), 1); // umr_en
        set(in, field(0x95, 1), 1); // lr
        set(in, field(0x96, 2), 1); // MTT
        set(in, field(0xa0, 24), 0xffffff);
        set(in, field(0xb8, 8), 0x5a);
        set(in, field(0xe8, 24), umrPd);
        set(in, field(0x220, 32), entries / 2);
        const auto r = host.run(in, 16);
        REQUIRE(r.status() == 0);
        return static_cast<uint32_t>(r.get(kHeld)) << 8 | 0x5a;
    }
    // A UMR WQE as mlx5r_umr_post_send writes one: flags, mask and the key
    // segment's free bit, PD and range; `entries` inline or (a data
    // segment) in memory; `offset` in entries.
    std::vector<uint8_t> umr(uint32_t key, uint8_t flags, uint64_t fields, bool free, uint32_t pdn,
                             uint64_t length, const std::vector<uint64_t> &entries,
                             uint64_t offset = 0) {
        std::vector<uint8_t> wqe = mlx5umr::umrQpSegments(key, flags, fields, free, pdn, kIova,
                                                          length, entries.size(), offset);
        const std::vector<uint8_t> bytes = mlx5umr::mttEntries(entries);
        if (flags & kInline) {
            wqe.insert(wqe.end(), bytes.begin(), bytes.end());
        } else if (!entries.empty()) {
            const uint64_t list = host.alloc(bytes.size(), 64);
            std::copy(bytes.begin(), bytes.end(), host.at(list));
            wqe.resize(144);
            writeBe32(&wqe[128], static_cast<uint32_t>(bytes.size()));
            writeBe32(&wqe[132], lkey);
            writeBe64(&wqe[136], list);
        }
        return wqe;
    }
    // Posts `wqe` on `qp` and returns its CQE's opcode byte and syndrome.
    std::pair<uint8_t, uint8_t> run(Qp &qp, std::vector<uint8_t> wqe) {
        const auto done = completeOne(postWqe(qp, std::move(wqe)), &next);
        REQUIRE(done);
        return *done;
    }
    // `bytes` random bytes WRITTEN through `key` at `at` of its range
    // (which `pages` back) and READ back: whether both completed and the
    // bytes came back the same.
    bool writeAndReadBack(Qp &qp, uint32_t key, const std::vector<uint64_t> &pages, uint64_t at,
                          uint32_t bytes);
    std::pair<uint8_t, uint8_t> rdma(Qp &qp, uint8_t opcode, uint64_t local, uint32_t length,
                                     uint64_t remote, uint32_t rkey) {
        const auto done = rdmaOne(qp, opcode, local, length, remote, rkey, &next);
        REQUIRE(done);
        return *done;
    }

    uint32_t umrPd = 0;
    uint32_t next = 0; // the CQ's consumer counter
};

constexpr uint8_t kGood = 0x0, kRequesterError = 0xd, kLocalProtection = 0x4;

// `count` pages of 4 KiB, none next to another.
std::vector<uint64_t> scatteredPages(Mlx5Host &host, size_t count) {
    std::vector<uint64_t> pages;
    for (size_t i = 0; i < count; ++i)
        pages.push_back(host.alloc(8192) + (i % 2) * 4096);
    return pages;
}

// Whether bytes [at, at + n) of the region over `pages` hold `data`.
bool holds(Mlx5Host &host, const std::vector<uint64_t> &pages, uint64_t at, const uint8_t *data,
           uint64_t n) {
    for (uint64_t i = 0; i < n; ++i, ++at)
        if (*host.at(pages[at / 4096] + at % 4096) != data[i])
            return false;
    return true;
}

bool UmrFunction::writeAndReadBack(Qp &qp, uint32_t key, const std::vector<uint64_t> &pages,
                                   uint64_t at, uint32_t bytes) {
    const uint64_t source = host.allocRandom(bytes, 7), sink = host.alloc(bytes);
    return rdma(qp, kRdmaWrite, source, bytes, kIova + at, key).first == kGood &&
           holds(host, pages, at, host.at(source), bytes) &&
           rdma(qp, kRdmaRead, sink, bytes, kIova + at, key).first == kGood &&
           std::equal(host.at(source), host.at(source) + bytes, host.at(sink));
}

} // namespace

TEST_CASE("mlx5: the UMR QP loads a cached key in chunks, enables it and frees it", "[mlx5]") {
    UmrFunction f;
    auto umrQp = f.umrQp();
    CHECK(f.query(umrQp.qpn).get(kSt) == kRegUmr);
    auto [a, b] = f.connectedRc();

    // A region of 21 pages (its first starts 100 bytes in) into a key with
    // a table of 64: 16 entries, 8 at a time from memory, then the last 5
    // (padded to 8) with the enabling UMR, as _mlx5r_umr_update_mr_pas
    // does in chunks.
    constexpr uint64_t kLength = 20 * 4096;
    const auto pages = scatteredPages(f.host, 21);
    const uint32_t key = f.cacheKey(64);
    for (uint64_t chunk = 0; chunk < 16; chunk += 8) {
        const std::vector<uint64_t> part(pages.begin() + chunk, pages.begin() + chunk + 8);
        CHECK(f.run(umrQp, f.umr(key, kMustBeFree, 0, false, f.pd, 0, part, chunk)).first == kGood);
    }
    std::vector<uint64_t> last(pages.begin() + 16, pages.end());
    last.resize(8); // zeros to 64 bytes
    const uint64_t enable = mask::kKey | mask::kFree | mask::kRights | mask::kPd | mask::kRange;
    const auto enabled =
        f.run(umrQp, f.umr(key, kMustBeFree, enable, false, f.pd, kLength, last, 16));
    CHECK(enabled.first == kGood);
    CHECK(f.host.traces("mlx5_umr") == 3);

    // a writes 30000 random bytes at offset 3000 of the region through the
    // key, and reads them back into another buffer.
    CHECK(f.writeAndReadBack(a, key, pages, 3000, 30000));
    const uint64_t source = f.host.allocRandom(8, 8), sink = f.host.alloc(4096);
    // The range ends at 20 pages, whatever the table holds.
    CHECK(f.rdma(a, kRdmaRead, sink, 8, kIova + kLength, key).first == kRequesterError);
    CHECK(f.host.guestErrors("mlx5-umr") == 0);

    // Revoked (mlx5r_umr_revoke_mr: free, back in the UMR's PD), the key
    // takes no more: the responder refuses the WRITE (a new pair, the
    // first in error).
    CHECK(f.run(umrQp, f.umr(key, kInline, mask::kPd | mask::kFree, true, f.umrPd, 0, {})).first ==
          kGood);
    auto [c, d] = f.connectedRc();
    CHECK(f.rdma(c, kRdmaWrite, source, 8, kIova, key).first == kRequesterError);

    // Loaded again as another region of 2 pages, the key reads them.
    const auto two = scatteredPages(f.host, 2);
    std::fill_n(f.host.at(two[1]), 4096, 0x77);
    auto [e, g] = f.connectedRc();
    CHECK(
        f.run(umrQp, f.umr(key, kMustBeFree, enable, false, f.pd, 8192, {two[0], two[1]})).first ==
        kGood);
    CHECK(f.rdma(e, kRdmaRead, sink, 4096, kIova + 4096, key).first == kGood);
    CHECK(
        std::all_of(f.host.at(sink), f.host.at(sink) + 4096, [](uint8_t x) { return x == 0x77; }));
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5: a key of 4 entries takes a load padded to 8", "[mlx5]") {
    // The MR cache's smallest keys have 4 entries; the driver loads 64
    // bytes, zeros after the region's pages.
    UmrFunction f;
    auto umrQp = f.umrQp();
    auto [a, b] = f.connectedRc();
    const uint32_t key = f.cacheKey(4);
    auto pages = scatteredPages(f.host, 1);
    std::fill_n(f.host.at(pages[0]), 4096, 0x5c);
    pages.resize(8);
    const uint64_t enable = mask::kKey | mask::kFree | mask::kRights | mask::kPd | mask::kRange;
    CHECK(f.run(umrQp, f.umr(key, kMustBeFree, enable, false, f.pd, 4096, pages)).first == kGood);
    const uint64_t sink = f.host.alloc(4096);
    CHECK(f.rdma(a, kRdmaRead, sink, 4096, kIova, key).first == kGood);
    CHECK(
        std::all_of(f.host.at(sink), f.host.at(sink) + 4096, [](uint8_t x) { return x == 0x5c; }));
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5: UMRs a key cannot take fail whole, and leave it as it was", "[mlx5]") {
    UmrFunction f;
    const uint32_t key = f.cacheKey(8);
    const auto pages = scatteredPages(f.host, 2);
    const uint64_t enable = mask::kKey | mask::kFree | mask::kRights | mask::kPd | mask::kRange;
    struct Case {
        const char *what;
        std::vector<uint8_t> wqe;
        const char *token;
    };
    const std::vector<Case> cases = {
        {"the key must be in use", f.umr(key, kMustBeInUse, enable, false, f.pd, 8192, pages),
         "mlx5-umr"},
        {"entries beyond its table (8, the block the driver pads to)",
         f.umr(key, kMustBeFree, 0, false, f.pd, 0, {pages[0], pages[1]}, 8), "mlx5-umr"},
        {"no such PD", f.umr(key, kMustBeFree, enable, false, 0xabcd, 8192, pages), "mlx5-umr"},
        {"a key that is no translation key",
         f.umr(f.lkey, kMustBeFree, enable, false, f.pd, 8192, pages), "mlx5-umr"},
        {"a page size of 2^40",
         [&] {
             auto w = f.umr(key, kMustBeFree, enable, false, f.pd, 8192, pages);
             w[64 + 59] = 40;
             return w;
         }(),
         "mlx5-umr"},
        {"an entry that is no page address",
         f.umr(key, kMustBeFree, enable, false, f.pd, 8192, {pages[0] + 0x800, pages[1]}),
         "mlx5-umr"},
        {"a mask with a field the device does not update (BSF)",
         f.umr(key, kMustBeFree, enable | (1u << 12), false, f.pd, 8192, pages), "wqe-bad"},
        {"part of the range", f.umr(key, kMustBeFree, 1u << 0, false, f.pd, 8192, pages),
         "wqe-bad"},
        {"check flags 3", f.umr(key, 3u << 5, enable, false, f.pd, 8192, pages), "wqe-bad"},
        {"a SEND on the UMR QP",
         [] {
             std::vector<uint8_t> w(32);
             w[3] = kSend;
             return w;
         }(),
         "wqe-bad"},
    };
    for (const Case &c : cases) {
        INFO(c.what);
        auto qp = f.umrQp(); // each failure puts its QP in error
        f.host.clear();
        const auto [opcode, syndrome] = f.run(qp, c.wqe);
        CHECK(opcode == kRequesterError);
        CHECK(f.host.guestErrors(c.token) == 1);
        if (std::string(c.token) == "mlx5-umr")
            CHECK(syndrome == kLocalProtection);
        // The key is still free: a READ through it fails.
        const uint64_t sink = f.host.alloc(8);
        auto [c2, d2] = f.connectedRc();
        CHECK(f.rdma(c2, kRdmaRead, sink, 8, kIova, key).first == kRequesterError);
    }
}

TEST_CASE("mlx5: a key made with its pages maps them at once", "[mlx5]") {
    UmrFunction f;
    auto [a, b] = f.connectedRc();
    // reg_create with populate: MTT, in use, UMR-enabled, 3 pages of a
    // region from 0x300 into its first page.
    const auto pages = scatteredPages(f.host, 3);
    const auto create = [&](uint64_t length, uint32_t given, uint64_t firstEntry) {
        auto in = Mlx5Host::input(0x200, 0, 0x110 + 8 * 4);
        set(in, field(0x90, 1), 1); // umr_en
        set(in, field(0x91, 1), 1); // a
        set(in, field(0x92, 1), 1); // rw
        set(in, field(0x93, 1), 1); // rr
        set(in, field(0x94, 1), 1); // lw
        set(in, field(0x95, 1), 1); // lr
        set(in, field(0x96, 2), 1); // MTT
        set(in, field(0xa0, 24), 0xffffff);
        set(in, field(0xb8, 8), 0x21);
        set(in, field(0xe8, 24), f.pd);
        set(in, field(0x100, 64), kIova + 0x300);
        set(in, field(0x140, 64), length);
        set(in, field(0x220, 32), 2); // a table of 4
        set(in, field(0x25a, 6), 12); // 4 KiB pages
        set(in, field(0x300, 32), given / 2);
        writeBe64(&in[0x110], firstEntry | 0x3);
        for (size_t i = 1; i < 3; ++i)
            writeBe64(&in[0x110 + 8 * i], pages[i] | 0x3);
        return f.host.run(in, 16);
    };
    const auto made = create(2 * 4096, 4, pages[0]);
    REQUIRE(made.status() == 0);
    const uint32_t key = static_cast<uint32_t>(made.get(kHeld)) << 8 | 0x21;
    constexpr uint32_t kBytes = 2 * 4096;
    const uint64_t source = f.host.allocRandom(kBytes, 11);
    CHECK(f.rdma(a, kRdmaWrite, source, kBytes, kIova + 0x300, key).first == kGood);
    CHECK(holds(f.host, pages, 0x300, f.host.at(source), kBytes));
    CHECK(f.host.guestErrors() == 0);

    // Fewer entries than the range's pages, an entry that is no page, a
    // table beyond the device's: BAD_PARAM, nothing made.
    CHECK(create(3 * 4096, 2, pages[0]).status() == 0x3);
    CHECK(create(2 * 4096, 4, pages[0] + 8).status() == 0x3);
    CHECK(f.host.guestErrors("mlx5-cmd-bad-param") == 2);
}

// A moved function's keys are as the UMRs left them (docs/migration.md):
// one mapped and enabled takes RDMA over its pages, one freed since takes
// none.
TEST_CASE("mlx5: keys the UMR QP mapped and freed are loaded as it left them", "[mlx5-state]") {
    UmrFunction f;
    auto umrQp = f.umrQp();
    auto [a, b] = f.connectedRc();
    const auto pages = scatteredPages(f.host, 8);
    const uint64_t enable = mask::kKey | mask::kFree | mask::kRights | mask::kPd | mask::kRange;
    const uint32_t key = f.cacheKey(8), freed = f.cacheKey(8);
    CHECK(f.run(umrQp, f.umr(key, kMustBeFree, enable, false, f.pd, 8 * 4096, pages)).first ==
          kGood);
    CHECK(f.run(umrQp, f.umr(freed, kMustBeFree, enable, false, f.pd, 4096, pages)).first == kGood);
    CHECK(
        f.run(umrQp, f.umr(freed, kInline, mask::kPd | mask::kFree, true, f.umrPd, 0, {})).first ==
        kGood);
    REQUIRE(f.host.move() == "");

    CHECK(f.writeAndReadBack(a, key, pages, 1000, 20000));
    const uint64_t source = f.host.allocRandom(8, 3);
    auto [c, d] = f.connectedRc();
    CHECK(f.rdma(c, kRdmaWrite, source, 8, kIova, freed).first == kRequesterError);
    // The UMR QP goes on: the freed key is mapped again.
    CHECK(f.run(umrQp, f.umr(freed, kMustBeFree, enable, false, f.pd, 4096, pages)).first == kGood);
    CHECK(f.host.guestErrors("mlx5-umr") == 0);
}
