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

#include "mlx5_umr_function.hh"

using namespace pib;
using namespace pib::mlx5;

using namespace pib::testing::umr_function;

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
