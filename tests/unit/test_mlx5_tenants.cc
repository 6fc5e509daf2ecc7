// SPDX-License-Identifier: GPL-2.0-or-later
// What the ConnectX personality keeps from a user process (docs/mlx5.md
// §10): mlx5_ib makes every QP of a process without fre, and only a QP
// with it may post a UMR, so a process can neither map a key over memory
// that is not its own nor free another's key; a translation list behind a
// data segment is read through its L_Key in the QP's PD, never at a bare
// guest address; a peer's SEND with Invalidate frees only a key made or
// mapped with en_rinval; and a key the driver's UMR QP loaded (a user
// region of its MR cache) is that QP's alone. Each case fails on a
// device that lacks the rule (the audit of issue 57).
#include <catch2/catch.hpp>

#include <algorithm>

#include "mlx5_function.hh"
#include "mlx5_umr_wqes.hh"

using namespace pib;
using namespace pib::mlx5;

namespace {

using namespace pib::testing::mlx5qp;
using namespace pib::testing::mlx5umr;
using pib::testing::Mlx5Function;
using Qp = Mlx5Function::Qp;

constexpr uint8_t kRequesterError = 0xd; // a CQE's opcode for a failed send WQE
constexpr uint8_t kLocalQpOperation = 0x02, kLocalProtection = 0x04; // syndromes
constexpr uint64_t kIova = 0x7f3400000000;

struct Tenants : pib::testing::OwnedMlx5Host, Mlx5Function {
    Tenants() : Mlx5Function(owned) {
        REQUIRE(setUp());
        REQUIRE(activatePort());
    }
    // An RC QP as mlx5_ib makes it for the kernel (fre) or for a user
    // process's ibv_create_qp (no fre), in the function's PD.
    Qp rcQp(bool kernel) {
        Qp qp;
        auto in = qpInput(kRc, 1, 3, 4, qp);
        set(in, kFre, kernel);
        const auto r = host.run(in, 16);
        REQUIRE(r.status() == 0);
        qp.qpn = static_cast<uint32_t>(r.get(kHeld));
        return qp;
    }
    // The driver's UMR QP (service type REG_UMR, no PD), ready.
    Qp umrQp() {
        const auto qp = createQp(0xc, std::nullopt, 0, 4);
        REQUIRE(qp);
        REQUIRE(toRts(qp->qpn));
        return *qp;
    }
    std::pair<Qp, Qp> connect(Qp a, Qp b) {
        REQUIRE(toRts(a.qpn, {.qpn = b.qpn}));
        REQUIRE(toRts(b.qpn, {.qpn = a.qpn}));
        return {a, b};
    }
    // Posts `wqe` on `qp`: its CQE's opcode and syndrome.
    std::pair<uint8_t, uint8_t> post(Qp &qp, std::vector<uint8_t> wqe) {
        const auto done = completeOne(postWqe(qp, std::move(wqe)), &next);
        REQUIRE(done);
        return *done;
    }
    // An RDMA READ of `length` bytes at `remote` through `rkey` into
    // `local`: whether it completed without error.
    bool read(Qp &qp, uint64_t local, uint32_t length, uint64_t remote, uint32_t rkey) {
        const auto done = rdmaOne(qp, kRdmaRead, local, length, remote, rkey, &next);
        REQUIRE(done);
        return done->first == 0x0;
    }
    // A SEND with Invalidate of `rkey` (the peer has a receive posted):
    // whether the requester's CQE and the peer's both came without error.
    bool sendInvalidate(Qp &qp, uint64_t addr, uint32_t rkey) {
        blueFlame(postWqe(qp, pib::testing::mlx5umr::sendInvalidate(rkey, 8, lkey, addr)), uar);
        const auto done = completions(&next, 2);
        REQUIRE(done.size() == 2);
        return std::none_of(done.begin(), done.end(),
                            [](const uint8_t *cqe) { return cqe[0x3f] >> 4 >= kRequesterError; });
    }
    uint32_t allocPd() {
        const auto r = host.run(Mlx5Host::input(0x800), 16);
        REQUIRE(r.status() == 0);
        return static_cast<uint32_t>(r.get(kHeld));
    }
    // A physical key over all memory in PD `pdn` (ib_core's local DMA key).
    uint32_t physicalKey(uint32_t pdn) {
        auto in = Mlx5Host::input(0x200, 0, 0x110);
        set(in, field(0x91, 5), 0x1f);
        set(in, field(0xa0, 24), 0xffffff);
        set(in, field(0xb8, 8), 0x77);
        set(in, field(0xe0, 1), 1);
        set(in, field(0xe8, 24), pdn);
        const auto r = host.run(in, 16);
        REQUIRE(r.status() == 0);
        return static_cast<uint32_t>(r.get(kHeld)) << 8 | 0x77;
    }
    uint32_t next = 0;
};

} // namespace

TEST_CASE("mlx5: a user process's QP (no fre) posts no UMR: it maps and frees no key",
          "[mlx5][isolation]") {
    Tenants f;
    auto [kernel, peer] = f.connect(f.rcQp(true), f.rcQp(true));
    auto [user, userPeer] = f.connect(f.rcQp(false), f.rcQp(false));
    // The kernel's key over a page of its own: a secret.
    const uint64_t secret = f.host.allocRandom(4096, 7);
    std::vector<uint8_t> before(f.host.at(secret), f.host.at(secret) + 4096);
    const uint32_t kernelKey = freeKey(f, 1);
    REQUIRE(kernelKey);
    REQUIRE(f.post(kernel, registration(kernelKey, kIova, 4096, {secret})).first == 0x0);

    // The process maps a free key of its PD over the secret page: refused.
    const uint32_t stolen = freeKey(f, 1);
    REQUIRE(stolen);
    const auto mapped = f.post(user, registration(stolen, kIova, 4096, {secret}));
    CHECK(mapped.first == kRequesterError);
    CHECK(mapped.second == kLocalQpOperation);
    const uint64_t sink = f.host.alloc(4096);
    CHECK_FALSE(f.read(kernel, sink, 64, kIova, stolen)); // the key stays free

    // Nor does it free the kernel's key, or write through the secret.
    auto [user2, userPeer2] = f.connect(f.rcQp(false), f.rcQp(false));
    const auto freed = f.post(user2, invalidation(kernelKey));
    CHECK(freed.first == kRequesterError);
    CHECK(freed.second == kLocalQpOperation);
    auto [kernel2, peer2] = f.connect(f.rcQp(true), f.rcQp(true));
    CHECK(f.read(kernel2, sink, 4096, kIova, kernelKey)); // still in use
    CHECK(std::equal(before.begin(), before.end(), f.host.at(secret)));
    CHECK(std::equal(before.begin(), before.end(), f.host.at(sink)));
    CHECK(f.host.guestErrors() >= 2);
}

TEST_CASE("mlx5: a UMR's translation list is read through its L_Key in the QP's PD",
          "[mlx5][isolation]") {
    Tenants f;
    auto [kernel, peer] = f.connect(f.rcQp(true), f.rcQp(true));
    const uint64_t page = f.host.allocRandom(4096, 9);
    const uint64_t listAddr = f.host.alloc(64, 64);
    const uint64_t sink = f.host.alloc(4096);

    SECTION("a key of another PD, or none, reads no list: the key stays free") {
        const uint32_t foreign = f.physicalKey(f.allocPd());
        for (const uint32_t lkey : {foreign, uint32_t{0}, f.lkey + 0x100}) {
            INFO("L_Key 0x" << std::hex << lkey);
            const uint32_t key = freeKey(f, 1);
            REQUIRE(key);
            auto [a, b] = f.connect(f.rcQp(true), f.rcQp(true));
            const auto r = f.post(
                a, registration(key, kIova, 4096, {page}, f.host.at(listAddr), listAddr, lkey));
            CHECK(r.first == kRequesterError);
            CHECK(r.second == kLocalProtection);
            CHECK_FALSE(f.read(kernel, sink, 64, kIova, key));
        }
    }
    SECTION("the QP's PD's own key reads it: the key maps the page") {
        const uint32_t key = freeKey(f, 1);
        REQUIRE(key);
        REQUIRE(f.post(peer, registration(key, kIova, 4096, {page}, f.host.at(listAddr), listAddr,
                                          f.lkey))
                    .first == 0x0);
        CHECK(f.read(kernel, sink, 4096, kIova, key));
        CHECK(std::equal(f.host.at(page), f.host.at(page) + 4096, f.host.at(sink)));
    }
}

TEST_CASE("mlx5: a peer's SEND with Invalidate frees only a key with en_rinval",
          "[mlx5][isolation]") {
    Tenants f;
    const uint64_t page = f.host.allocRandom(4096, 11);
    const uint64_t message = f.host.allocRandom(64, 12), inbox = f.host.alloc(64);
    const uint64_t sink = f.host.alloc(4096);
    for (const bool allowed : {false, true}) {
        INFO((allowed ? "mapped with en_rinval" : "mapped without en_rinval"));
        auto [a, b] = f.connect(f.rcQp(true), f.rcQp(true));
        const uint32_t key = freeKey(f, 1);
        REQUIRE(key);
        REQUIRE(f.post(b, registration(key, kIova, 4096, {page}, nullptr, 0, 0, allowed)).first ==
                0x0);
        f.postReceive(b, inbox, 64);
        const bool sent = f.sendInvalidate(a, message, key);
        auto [c, d] = f.connect(f.rcQp(true), f.rcQp(true));
        CHECK(sent == allowed);
        CHECK(f.read(c, sink, 64, kIova, key) == !allowed); // freed only if allowed
    }
}

TEST_CASE("mlx5: a key the UMR QP loaded is that QP's: no other QP's REG_MR or invalidation "
          "touches it",
          "[mlx5][isolation]") {
    Tenants f;
    auto [kernel, peer] = f.connect(f.rcQp(true), f.rcQp(true));
    auto [reader, readerPeer] = f.connect(f.rcQp(true), f.rcQp(true));
    Qp loader = f.umrQp();
    // A process's region of a page, as ibv_reg_mr leaves it: a key of the
    // MR cache that the UMR QP loaded (here into the kernel's own PD).
    const uint64_t own = f.host.allocRandom(4096, 3);
    const uint32_t key = freeKey(f, 2);
    REQUIRE(key);
    REQUIRE(f.post(loader, cacheLoad(key, f.pd, kIova, 4096, {own})).first == 0x0);
    const uint64_t sink = f.host.alloc(4096);

    SECTION("a kernel QP's invalidation leaves it in use") {
        const auto freed = f.post(kernel, invalidation(key));
        CHECK(freed.first == kRequesterError);
        CHECK(freed.second == kLocalProtection);
        CHECK(f.read(reader, sink, 4096, kIova, key));
        CHECK(std::equal(f.host.at(own), f.host.at(own) + 4096, f.host.at(sink)));
    }
    SECTION("revoked by the UMR QP, a kernel QP's REG_MR does not map it over another page") {
        REQUIRE(f.post(loader, cacheRevoke(key, f.pd)).first == 0x0);
        const uint64_t secret = f.host.allocRandom(4096, 9);
        const auto mapped = f.post(kernel, registration(key, kIova, 4096, {secret}));
        CHECK(mapped.first == kRequesterError);
        CHECK(mapped.second == kLocalProtection);
        CHECK_FALSE(f.read(reader, sink, 64, kIova, key)); // still free
    }
    CHECK(f.host.guestErrors() >= 1);
}
