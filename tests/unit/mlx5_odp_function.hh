// SPDX-License-Identifier: GPL-2.0-or-later
// A ConnectX function set up for on-demand paging as mlx5_ib sets one up
// (docs/mlx5.md §10.6): the UMR QP, an EQ that takes page faults, and
// the driver's side of a fault (its EQE read, pages loaded by UMR,
// PAGE_FAULT_RESUME). Shared by the tests of explicit and implicit
// on-demand regions.
#pragma once

#include <optional>

#include "mlx5_umr_function.hh"

namespace pib::testing::odp_function {

using namespace pib::testing::umr_function;

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

inline uint8_t opcodeOf(const uint8_t *cqe) {
    return static_cast<uint8_t>(cqe[0x3f] >> 4);
}

} // namespace pib::testing::odp_function
