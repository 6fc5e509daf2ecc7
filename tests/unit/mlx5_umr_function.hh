// SPDX-License-Identifier: GPL-2.0-or-later
// A ConnectX function with the driver's UMR QP, as mlx5_ib has it
// (docs/mlx5.md §10.1): keys of its MR cache loaded by UMR WQEs, and
// connected RC QPs that use them.
#pragma once

#include <catch2/catch.hpp>

#include <algorithm>
#include <utility>

#include "mlx5_checks.hh"
#include "mlx5_function.hh"
#include "mlx5_umr_wqes.hh"

namespace pib::testing::umr_function {

using namespace pib::mlx5;
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
inline std::vector<uint64_t> scatteredPages(Mlx5Host &host, size_t count) {
    std::vector<uint64_t> pages;
    for (size_t i = 0; i < count; ++i)
        pages.push_back(host.alloc(8192) + (i % 2) * 4096);
    return pages;
}

// Whether bytes [at, at + n) of the region over `pages` hold `data`.
inline bool holds(Mlx5Host &host, const std::vector<uint64_t> &pages, uint64_t at,
                  const uint8_t *data, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i, ++at)
        if (*host.at(pages[at / 4096] + at % 4096) != data[i])
            return false;
    return true;
}

inline bool UmrFunction::writeAndReadBack(Qp &qp, uint32_t key, const std::vector<uint64_t> &pages,
                                          uint64_t at, uint32_t bytes) {
    const uint64_t source = host.allocRandom(bytes, 7), sink = host.alloc(bytes);
    return rdma(qp, kRdmaWrite, source, bytes, kIova + at, key).first == kGood &&
           holds(host, pages, at, host.at(source), bytes) &&
           rdma(qp, kRdmaRead, sink, bytes, kIova + at, key).first == kGood &&
           std::equal(host.at(source), host.at(source) + bytes, host.at(sink));
}

} // namespace pib::testing::umr_function
