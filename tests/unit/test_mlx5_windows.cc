// SPDX-License-Identifier: GPL-2.0-or-later
// Memory windows of the ConnectX personality (docs/mlx5.md §10.5): made
// as mlx5_ib_alloc_mw makes them (the kernel's KLM keys in a process's
// PD), bound, unbound and invalidated by the UMRs libmlx5's set_bind_wr
// writes from the process's QP, byte for byte, stale bytes and all; data
// through a window lands in its range of the region, and nothing else
// reaches it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "limits.hh"
#include "mlx5_processes.hh"
#include "mlx5_umr_wqes.hh"

using namespace pib;
using namespace pib::mlx5;

namespace {

using namespace pib::testing::mlx5qp;
namespace mlx5umr = pib::testing::mlx5umr;
using Qp = pib::testing::Mlx5Function::Qp;

constexpr uint8_t kRequesterError = 0xd;
constexpr uint8_t kBindError = 0x06, kLocalProtection = 0x04, kRemoteAccess = 0x13;
constexpr uint8_t kRemoteRights = 0x08 | 0x10 | 0x20; // lw (which libmlx5 passes), rr, rw
constexpr uint64_t kIova = 0x10000;

// Window `key` as a bind renames it: its index, variant `variant`.
constexpr uint32_t withVariant(uint32_t key, uint32_t variant) {
    return (key & ~0xffu) | variant;
}

struct Windows : pib::testing::Mlx5Processes {
    Windows() : p(process()) {
        data = host.allocRandom(8192, 21);
        pages[0] = host.alloc(4096);
        pages[1] = host.alloc(4096);
        region = regionOf(p.pd);
    }
    // A region of the process's, two pages at kIova, all rights: what
    // ibv_reg_mr makes through DEVX's CREATE_MKEY.
    uint32_t regionOf(uint32_t pdn) {
        auto in = Mlx5Host::input(0x200, 0, 0x120);
        set(in, kUid, p.uid);
        set(in, field(0x91, 5), 0x1f);
        set(in, field(0x96, 2), 1);
        set(in, field(0xa0, 24), 0xffffff);
        set(in, field(0xe8, 24), pdn);
        set(in, field(0x100, 64), kIova);
        set(in, field(0x140, 64), 8192);
        set(in, field(0x220, 32), 1);
        set(in, field(0x25a, 6), 12);
        set(in, field(0x300, 32), 1);
        writeBe64(&in[0x110], pages[0]);
        writeBe64(&in[0x118], pages[1]);
        const auto r = host.run(in, 16);
        REQUIRE(r.status() == 0);
        return static_cast<uint32_t>(r.get(kHeld)) << 8;
    }
    uint32_t window(bool type2, uint8_t variant = 0x10) {
        const auto r = host.run(mlx5umr::windowKeyInput(p.pd, type2, variant), 16);
        REQUIRE(r.status() == 0);
        return static_cast<uint32_t>(r.get(kHeld)) << 8 | variant;
    }
    Qp qp() { return qpOf(p, p.pd); }
    std::pair<Qp, Qp> pair() { return pairOf(p, p.pd); }
    std::pair<uint8_t, uint8_t> post(Qp &qp, std::vector<uint8_t> wqe) {
        return postAs(p, qp, std::move(wqe));
    }
    // An RDMA WRITE of `length` bytes from the region's first page (the
    // random data copied there) to `remote` through `rkey`, from `qp` to
    // its peer: its CQE's opcode and syndrome.
    std::pair<uint8_t, uint8_t> write(Qp &qp, uint64_t remote, uint32_t rkey, uint32_t length) {
        std::copy_n(host.at(data), length, host.at(pages[0]));
        return post(qp, [&] {
            std::vector<uint8_t> wqe(48);
            wqe[3] = kRdmaWrite;
            writeBe64(&wqe[16], remote);
            writeBe32(&wqe[24], rkey);
            writeBe32(&wqe[32], length);
            writeBe32(&wqe[36], region);
            writeBe64(&wqe[40], kIova);
            return wqe;
        }());
    }
    bool landed(uint64_t at, uint32_t length) {
        return std::equal(host.at(data), host.at(data) + length, host.at(at));
    }
    // What inspection says of window `key` (JSON).
    std::string inspect(uint32_t key) {
        char *answer = nullptr;
        const std::string what = "mw " + std::to_string(key);
        REQUIRE(pib_core_inspect(host.core, what.c_str(), 1, &answer) == 0);
        std::string text = answer ? answer : "";
        std::free(answer);
        return text;
    }
    static constexpr std::pair<uint8_t, uint8_t> kDone{0, 0};

    Process p;
    uint64_t data = 0, pages[2] = {};
    uint32_t region = 0;
};

} // namespace

TEST_CASE("mlx5: memory windows: mlx5_ib_alloc_mw's KLM keys in a process's PD are windows, "
          "type 2 with en_rinval; DESTROY_MKEY ends one, bound or not",
          "[mlx5][windows]") {
    Windows f;
    const uint32_t one = f.window(false), two = f.window(true);
    CHECK(one >> 8 > limits::kMaxMr); // numbered after the keys
    CHECK(f.inspect(one).find("\"type\":1") != std::string::npos);
    CHECK(f.inspect(two).find("\"type\":2") != std::string::npos);
    auto qp = f.qp();
    REQUIRE(f.post(qp, mlx5umr::windowBind(one, 0x11, false, 0, f.region, kIova + 100, 200,
                                           kRemoteRights)) == Windows::kDone);
    const uint32_t bound = withVariant(one, 0x11);
    CHECK(f.inspect(bound).find("\"bound\":true") != std::string::npos);
    auto destroy = Mlx5Host::input(0x202);
    set(destroy, kHeld, one >> 8);
    CHECK(f.host.run(destroy, 16).status() == 0); // bound: ends all the same
    CHECK(f.host.run(destroy, 16).status() != 0);
    // A window holds its PD: a PD of nothing else stays while it does.
    const uint32_t lone = f.allocPd(f.p.uid);
    const auto made = f.host.run(mlx5umr::windowKeyInput(lone, true, 0x20), 16);
    REQUIRE(made.status() == 0);
    auto dealloc = Mlx5Host::input(0x801);
    set(dealloc, kHeld, lone);
    CHECK(f.host.run(dealloc, 16).status() != 0);
    // The window is the kernel's key: the process cannot end it through
    // DEVX; the kernel can, and then the PD goes.
    set(destroy, kHeld, made.get(kHeld));
    set(destroy, kUid, f.p.uid);
    CHECK(f.host.run(destroy, 16).status() != 0);
    set(destroy, kUid, 0);
    CHECK(f.host.run(destroy, 16).status() == 0);
    CHECK(f.host.run(dealloc, 16).status() == 0);
}

TEST_CASE("mlx5: a type 1 window bound from a process's QP takes a WRITE through its new key "
          "alone, in its range; unbinding it ends that",
          "[mlx5][windows]") {
    Windows f;
    const uint32_t w = f.window(false);
    auto [a, b] = f.pair();
    REQUIRE(f.post(a, mlx5umr::windowBind(w, 0x11, false, 0, f.region, kIova + 100, 200,
                                          kRemoteRights)) == Windows::kDone);
    const uint32_t bound = withVariant(w, 0x11);
    REQUIRE(f.write(a, kIova + 150, bound, 64) == Windows::kDone);
    CHECK(f.landed(f.pages[0] + 150, 64));
    CHECK(f.write(a, kIova + 150, w, 8).second == kRemoteAccess); // the old key
    std::tie(a, b) = f.pair();
    CHECK(f.write(a, kIova + 280, bound, 64).second == kRemoteAccess); // beyond its range
    std::tie(a, b) = f.pair();
    // Bound again in place, then unbound (a bind of length 0).
    REQUIRE(f.post(b, mlx5umr::windowBind(bound, 0x12, false, 0, f.region, kIova, 8192,
                                          kRemoteRights)) == Windows::kDone);
    const uint32_t again = withVariant(w, 0x12);
    REQUIRE(f.write(a, kIova + 4096, again, 128) == Windows::kDone);
    CHECK(f.landed(f.pages[1], 128));
    REQUIRE(f.post(b, mlx5umr::windowUnbind(again, 0x13)) == Windows::kDone);
    CHECK(f.write(a, kIova, again, 8).second == kRemoteAccess);
}

TEST_CASE("mlx5: a type 2 window is bound to one QP, free before it is bound again, and freed "
          "by that QP's LOCAL_INV or a peer's SEND with Invalidate",
          "[mlx5][windows]") {
    Windows f;
    const uint32_t w = f.window(true);
    auto [a, b] = f.pair();
    // Bound to b: a's requests arrive there.
    REQUIRE(f.post(b, mlx5umr::windowBind(w, 0x11, true, b.qpn, f.region, kIova, 4096,
                                          kRemoteRights)) == Windows::kDone);
    const uint32_t bound = withVariant(w, 0x11);
    REQUIRE(f.write(a, kIova + 8, bound, 32) == Windows::kDone);
    CHECK(f.landed(f.pages[0] + 8, 32));
    // Bound: a second bind fails, the window as it was.
    CHECK(f.post(b, mlx5umr::windowBind(bound, 0x12, true, b.qpn, f.region, kIova, 4096,
                                        kRemoteRights)) == std::pair{kRequesterError, kBindError});
    // Another QP's peer reaches it not, nor does its LOCAL_INV free it.
    auto [c, d] = f.pair();
    CHECK(f.write(c, kIova, bound, 8).second == kRemoteAccess);
    std::tie(c, d) = f.pair();
    CHECK(f.post(d, mlx5umr::klmInvalidation(bound)) ==
          std::pair{kRequesterError, kLocalProtection});
    // A bind naming another QP than the one posting it is refused.
    std::tie(c, d) = f.pair();
    CHECK(f.post(d, mlx5umr::windowBind(bound, 0x12, true, c.qpn, f.region, kIova, 4096,
                                        kRemoteRights)) == std::pair{kRequesterError, kBindError});

    // A new window on a new pair: bound to b, freed by a's SEND with
    // Invalidate (type 2 windows have en_rinval).
    const uint32_t w2 = f.window(true, 0x40);
    std::tie(a, b) = f.pair();
    REQUIRE(f.post(b, mlx5umr::windowBind(w2, 0x41, true, b.qpn, f.region, kIova, 4096,
                                          kRemoteRights)) == Windows::kDone);
    const uint32_t bound2 = withVariant(w2, 0x41);
    f.postReceive(b, kIova + 4096, 16, f.region);
    f.blueFlame(f.postWqe(a, mlx5umr::sendInvalidate(bound2, 16, f.region, kIova)), f.p.uar);
    std::vector<const uint8_t *> done;
    for (int poll = 0; poll < 100 && done.size() < 2; ++poll) {
        f.host.runScheduled();
        const auto more = f.cqesOf(f.p.ring, f.p.record, &f.p.next);
        done.insert(done.end(), more.begin(), more.end());
    }
    REQUIRE(done.size() == 2);
    for (const uint8_t *cqe : done)
        CHECK(cqe[0x3f] >> 4 < kRequesterError);
    CHECK(f.inspect(bound2).find("\"bound\":false") != std::string::npos);
    CHECK(f.write(a, kIova, bound2, 8).second == kRemoteAccess);
    // Bound again, and freed by LOCAL_INV on the QP it is bound to.
    std::tie(a, b) = f.pair();
    REQUIRE(f.post(b, mlx5umr::windowBind(bound2, 0x42, true, b.qpn, f.region, kIova, 4096,
                                          kRemoteRights)) == Windows::kDone);
    const uint32_t bound3 = withVariant(w2, 0x42);
    REQUIRE(f.write(a, kIova, bound3, 8) == Windows::kDone);
    REQUIRE(f.post(b, mlx5umr::klmInvalidation(bound3)) == Windows::kDone);
    CHECK(f.write(a, kIova, bound3, 8).second == kRemoteAccess);
}

TEST_CASE("mlx5: window binds libmlx5 would not write, or IBA forbids, fail with a bind error",
          "[mlx5][windows]") {
    Windows f;
    const uint32_t w = f.window(false);
    const auto fails = [&](std::vector<uint8_t> wqe) {
        auto qp = f.qp();
        return f.post(qp, std::move(wqe)) == std::pair{kRequesterError, kBindError};
    };
    // Zero-based: the window starts at 0, its entry at the region's address.
    auto zeroBased = mlx5umr::windowBind(w, 0x11, false, 0, f.region, kIova, 64, kRemoteRights);
    writeBe64(&zeroBased[80], 0);
    CHECK(fails(zeroBased));
    CHECK(fails(mlx5umr::windowBind(w, 0x11, false, 0, f.region, kIova + 8000, 400,
                                    kRemoteRights))); // beyond the region
    const uint32_t foreign = f.regionOf(f.allocPd(f.p.uid));
    CHECK(fails(mlx5umr::windowBind(w, 0x11, false, 0, foreign, kIova, 64, kRemoteRights)));
    auto withPageSize = mlx5umr::windowBind(w, 0x11, false, 0, f.region, kIova, 64, kRemoteRights);
    withPageSize[31] |= 0x02;
    CHECK(fails(withPageSize));
    auto unknownFlag = mlx5umr::windowBind(w, 0x11, false, 0, f.region, kIova, 64, kRemoteRights);
    unknownFlag[16] |= 0x40;
    CHECK(fails(unknownFlag));
    // The window was never bound: its key reaches nothing.
    auto [a, b] = f.pair();
    CHECK(f.write(a, kIova, withVariant(w, 0x11), 8).second == kRemoteAccess);
    CHECK(f.inspect(w).find("\"bound\":false") != std::string::npos);
}

TEST_CASE("mlx5: bound windows survive a saved state, and a QP's end unbinds its type 2 "
          "windows",
          "[mlx5][windows][mlx5-state]") {
    Windows f;
    const uint32_t one = f.window(false), two = f.window(true, 0x30);
    auto [a, b] = f.pair();
    REQUIRE(f.post(b, mlx5umr::windowBind(one, 0x11, false, 0, f.region, kIova, 8192,
                                          kRemoteRights)) == Windows::kDone);
    REQUIRE(f.post(b, mlx5umr::windowBind(two, 0x31, true, b.qpn, f.region, kIova + 4096, 4096,
                                          kRemoteRights)) == Windows::kDone);
    REQUIRE(f.host.move() == "");
    REQUIRE(f.write(a, kIova + 10, withVariant(one, 0x11), 16) == Windows::kDone);
    CHECK(f.landed(f.pages[0] + 10, 16));
    REQUIRE(f.write(a, kIova + 4096, withVariant(two, 0x31), 16) == Windows::kDone);
    CHECK(f.landed(f.pages[1], 16));
    const uint32_t bound2 = withVariant(two, 0x31);
    CHECK(f.inspect(bound2).find("\"bound\":true") != std::string::npos);
    REQUIRE(f.destroy(kDestroyQp, b.qpn).status() == 0);
    CHECK(f.inspect(bound2).find("\"bound\":false") != std::string::npos);
    CHECK(f.inspect(withVariant(one, 0x11)).find("\"bound\":true") != std::string::npos);
}

TEST_CASE("mlx5: a window over a key of mlx5_ib's MR cache reaches nothing once the driver "
          "revokes the key and gives it to another process; no window binds over an indirect "
          "key",
          "[mlx5][windows][isolation]") {
    Windows f;
    // The driver's UMR QP loads a free key of its cache with a page of
    // the process's, in the process's PD.
    const auto umr = f.createQp(0xc, std::nullopt, 0, 4);
    REQUIRE(umr);
    REQUIRE(f.toRts(umr->qpn));
    Qp loader = *umr;
    const uint32_t cached = mlx5umr::freeKey(f, 2);
    REQUIRE(cached);
    uint32_t next = 0;
    const auto load = [&](uint32_t pdn, uint64_t page) {
        const auto done = f.completeOne(
            f.postWqe(loader, mlx5umr::cacheLoad(cached, pdn, kIova, 4096, {page})), &next);
        REQUIRE(done);
        return done->first == 0;
    };
    REQUIRE(load(f.p.pd, f.pages[0]));
    const uint32_t w = f.window(false);
    auto [a, b] = f.pair();
    REQUIRE(f.post(b, mlx5umr::windowBind(w, 0x11, false, 0, cached, kIova, 4096, kRemoteRights)) ==
            Windows::kDone);
    const uint32_t bound = withVariant(w, 0x11);
    REQUIRE(f.write(a, kIova, bound, 16) == Windows::kDone);
    // Deregistration: the driver revokes the key into its own PD, then
    // gives it to another process's region, over that process's page.
    const auto revoked =
        f.completeOne(f.postWqe(loader, mlx5umr::cacheRevoke(cached, f.pd)), &next);
    REQUIRE(revoked);
    REQUIRE(revoked->first == 0);
    auto other = f.process();
    const uint64_t secret = f.host.allocRandom(4096, 33);
    const std::vector<uint8_t> before(f.host.at(secret), f.host.at(secret) + 4096);
    REQUIRE(load(other.pd, secret));
    CHECK(f.write(a, kIova, bound, 16).second == kRemoteAccess);
    CHECK(std::equal(before.begin(), before.end(), f.host.at(secret)));
    CHECK(f.inspect(bound).find("\"bound\":false") != std::string::npos);

    // A window over an indirect key: refused.
    const auto klm = f.host.run(mlx5umr::klmKeyInput(f.p.pd, 4, f.p.uid), 16);
    REQUIRE(klm.status() == 0);
    const uint32_t indirect = static_cast<uint32_t>(klm.get(kHeld)) << 8;
    std::tie(a, b) = f.pair();
    REQUIRE(f.post(b, mlx5umr::klmList(indirect, 0x38, {{4096, f.region, kIova}})) ==
            Windows::kDone);
    CHECK(f.post(b, mlx5umr::windowBind(bound, 0x12, false, 0, indirect, 0, 64, kRemoteRights)) ==
          std::pair{kRequesterError, kBindError});
}
