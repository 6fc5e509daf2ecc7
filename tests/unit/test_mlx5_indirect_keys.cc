// SPDX-License-Identifier: GPL-2.0-or-later
// Indirect memory keys of the ConnectX personality (docs/mlx5.md §4.5,
// §10.4): KLM keys made as mlx5dv_create_mkey makes them and laid out
// by the UMR WQEs libmlx5 posts from a process's QP (no fre), byte for
// byte; data through them lands where the layout says, at both ends;
// entries are resolved at each access; what the key's user may not do
// is refused. The layout's own arithmetic is tested against a walk of
// every byte.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "indirect_key.hh"
#include "limits.hh"
#include "mlx5_function.hh"
#include "mlx5_processes.hh"
#include "mlx5_umr_wqes.hh"

using namespace pib;
using namespace pib::mlx5;

namespace {

using namespace pib::testing::mlx5qp;
namespace mlx5umr = pib::testing::mlx5umr;
using pib::testing::Mlx5Function;
using Qp = Mlx5Function::Qp;

constexpr uint8_t kRequesterError = 0xd; // a CQE's opcode for a failed send WQE
constexpr uint8_t kLocalQpOperation = 0x02, kLocalProtection = 0x04, kRemoteAccess = 0x13;
constexpr uint8_t kFetchAdd = 0x12;
constexpr uint16_t kCreateMkey = 0x200, kDestroyMkey = 0x202;
// MLX5_PERM_* in the key segment's flags byte.
constexpr uint8_t kLocalWrite = 0x08, kRemoteRead = 0x10, kRemoteWrite = 0x20, kAtomic = 0x40;
constexpr uint8_t kAllRights = kLocalWrite | kRemoteRead | kRemoteWrite | kAtomic;

using Piece = mlx5umr::KlmPiece;

struct IndirectKeys : pib::testing::Mlx5Processes {
    // An RC QP as mlx5_ib makes a process's (no fre) in PD `pdn` (the
    // function's when 0), made by `uid`.
    Qp userQp(uint32_t pdn = 0, uint16_t uid = 0) {
        Qp qp;
        const uint32_t saved = pd;
        pd = pdn ? pdn : pd;
        auto in = qpInput(kRc, 1, 3, 4, qp);
        pd = saved;
        set(in, kFre, 0);
        set(in, kUid, uid);
        const auto r = host.run(in, 16);
        REQUIRE(r.status() == 0);
        qp.qpn = static_cast<uint32_t>(r.get(kHeld));
        return qp;
    }
    std::pair<Qp, Qp> connect(Qp a, Qp b) {
        REQUIRE(toRts(a.qpn, {.qpn = b.qpn, .atomics = true}));
        REQUIRE(toRts(b.qpn, {.qpn = a.qpn, .atomics = true}));
        return {a, b};
    }
    std::pair<Qp, Qp> pair() { return connect(userQp(), userQp()); }
    // Two of the kernel's RC QPs (fre), connected.
    std::pair<Qp, Qp> kernelPair() {
        const auto a = createQp(kRc, 1, 3, 4), b = createQp(kRc, 1, 3, 4);
        REQUIRE(a);
        REQUIRE(b);
        return connect(*a, *b);
    }
    // CREATE_MKEY as mlx5dv_create_mkey asks: KLM, free, UMR-enabled,
    // local read, a table of `entries`. Its status and key (variant 0).
    std::pair<uint8_t, uint32_t> klmKey(uint32_t entries, uint32_t pdn = 0, uint16_t uid = 0,
                                        bool remoteInvalidate = false) {
        const auto r =
            host.run(mlx5umr::klmKeyInput(pdn ? pdn : pd, entries, uid, remoteInvalidate), 16);
        return {r.status(), static_cast<uint32_t>(r.get(kHeld)) << 8};
    }
    uint32_t key(uint32_t entries = 4) {
        const auto [status, made] = klmKey(entries);
        REQUIRE(status == 0);
        return made;
    }
    uint8_t destroyKey(uint32_t key) {
        auto in = Mlx5Host::input(kDestroyMkey);
        set(in, kHeld, key >> 8);
        return host.run(in, 16).status();
    }
    // A physical key over all memory in `pdn`, with `rights` (the mkc's
    // a, rw, rr, lw, lr bits).
    uint32_t physicalKey(uint32_t pdn, uint8_t rights = 0x1f) {
        auto in = Mlx5Host::input(kCreateMkey, 0, 0x110);
        set(in, field(0x91, 5), rights);
        set(in, field(0xa0, 24), 0xffffff);
        set(in, field(0xb8, 8), 0x44);
        set(in, field(0xe0, 1), 1);
        set(in, field(0xe8, 24), pdn);
        const auto r = host.run(in, 16);
        REQUIRE(r.status() == 0);
        return static_cast<uint32_t>(r.get(kHeld)) << 8 | 0x44;
    }

    static std::vector<uint8_t> configure(uint32_t key, uint8_t rights,
                                          const std::vector<Piece> &pieces,
                                          uint64_t mask = 0x203C2001, uint8_t flags = 0x80) {
        return mlx5umr::klmList(key, rights, pieces, mask, flags);
    }
    static std::vector<uint8_t> interleaved(uint32_t key, uint8_t rights, uint32_t repeats,
                                            const std::vector<Piece> &pieces) {
        return mlx5umr::klmInterleaved(key, rights, repeats, pieces);
    }
    static std::vector<uint8_t> umr(uint32_t key, uint8_t rights, uint64_t length,
                                    std::vector<uint8_t> layout, uint64_t mask, uint8_t flags) {
        return mlx5umr::indirectUmr(key, rights, length, std::move(layout), mask, flags);
    }
    static std::vector<uint8_t> localInvalidate(uint32_t key) {
        return mlx5umr::klmInvalidation(key);
    }

    // Posts `wqe` on `qp`: its CQE's opcode and syndrome.
    std::pair<uint8_t, uint8_t> post(Qp &qp, std::vector<uint8_t> wqe) {
        const auto done = completeOne(postWqe(qp, std::move(wqe)), &next);
        REQUIRE(done);
        return *done;
    }
    bool posted(Qp &qp, std::vector<uint8_t> wqe) { return post(qp, std::move(wqe)).first == 0; }
    // A SEND of `length` bytes at `addr` of key `from` into a receive of
    // key `into` at `at`: whether both completed without error.
    bool send(Qp &a, uint32_t from, uint64_t addr, uint32_t length, Qp &b, uint32_t into,
              uint64_t at) {
        postReceive(b, at, length, into);
        blueFlame(writeSend(a, false, {.addr = addr, .length = length, .lkey = from}), uar);
        const auto done = completions(&next, 2);
        return done.size() == 2 && std::none_of(done.begin(), done.end(), [](const uint8_t *c) {
                   return c[0x3f] >> 4 >= kRequesterError;
               });
    }
    // An RDMA operation through `rkey` at `remote`, from or into `local`
    // (the function's key): its CQE's opcode and syndrome.
    std::pair<uint8_t, uint8_t> rdma(Qp &qp, uint8_t opcode, uint64_t local, uint32_t length,
                                     uint64_t remote, uint32_t rkey) {
        const auto done = rdmaOne(qp, opcode, local, length, remote, rkey, &next);
        REQUIRE(done);
        return *done;
    }
    // A fetch-and-add of `add` at `remote` through `rkey`, the old value
    // into `local`: its CQE's opcode and syndrome.
    std::pair<uint8_t, uint8_t> fetchAdd(Qp &qp, uint64_t local, uint64_t remote, uint32_t rkey,
                                         uint64_t add) {
        std::vector<uint8_t> wqe(64);
        wqe[3] = kFetchAdd;
        writeBe64(&wqe[16], remote);
        writeBe32(&wqe[24], rkey);
        writeBe64(&wqe[32], add);
        writeBe32(&wqe[48], 8);
        writeBe32(&wqe[52], lkey);
        writeBe64(&wqe[56], local);
        return post(qp, wqe);
    }
    bool bytesAre(uint64_t at, const uint8_t *expected, size_t n) {
        return std::equal(expected, expected + n, host.at(at));
    }

    uint32_t next = 0;
};

} // namespace

TEST_CASE("mlx5: indirect keys: CREATE_MKEY makes a KLM key free and UMR-enabled in the "
          "caller's PD; signature, crypto and the rest are refused",
          "[mlx5][indirect]") {
    IndirectKeys f;
    CHECK(f.klmKey(3).first == 0);
    CHECK(f.klmKey(512).first == 0);
    CHECK(f.klmKey(0).first == 0x3);   // BAD_PARAM: no table
    CHECK(f.klmKey(513).first == 0x3); // beyond log_max_klm_list_size
    const auto refused = [&](Field f2, uint64_t value) {
        auto in = mlx5umr::klmKeyInput(f.pd, 4);
        set(in, f2, value);
        return f.host.run(in, 16).status() == 0x3;
    };
    CHECK(!refused(field(0x96, 2), 3));        // KSM: the kernel's (test_mlx5_implicit_odp.cc)
    CHECK(refused(field(0x81, 1), 0));         // not free
    CHECK(refused(field(0x90, 1), 0));         // no UMR may lay it out
    CHECK(refused(field(0xe1, 1), 1));         // bsf_en: a signature key
    CHECK(refused(field(0x180, 32), 4));       // bsf_octword_size
    CHECK(refused(field(0x80 + 0x1e3, 2), 1)); // crypto_en
    CHECK(refused(field(0x300, 32), 1));       // entries of its own
    CHECK(!refused(field(0x60, 1), 1));        // pg_access: on-demand paging is offered

    // A process (DEVX uid) makes one in its own PD, not in another's.
    const auto r =
        f.host.run(Mlx5Host::input(pib::testing::Mlx5Processes::kCreateUctx, 0, 0x40), 16);
    REQUIRE(r.status() == 0);
    const auto uid = static_cast<uint16_t>(r.get(field(0x50, 16)));
    const uint32_t own = f.allocPd(uid);
    const auto mine = f.klmKey(4, own, uid);
    CHECK(mine.first == 0);
    CHECK(f.klmKey(4, f.pd, uid).first != 0); // the kernel's PD
    CHECK(f.destroyKey(mine.second) == 0);
    CHECK(f.destroyKey(mine.second) != 0);

    // The capabilities say so: one level of indirection, indirect keys on.
    const auto caps = f.host.run(Mlx5Host::input(0x100, 1), 0x10 + 4096); // general, current
    REQUIRE(caps.status() == 0);
    CHECK(caps.get(field(0x80 + 0x100, 8)) == 1); // max_indirection
    CHECK(caps.get(field(0x80 + 0x209, 1)) == 0); // umr_indirect_mkey_disabled
    CHECK(caps.get(field(0x80 + 0x108, 1)) == 1); // fixed_buffer_size: KSM keys
    CHECK(caps.get(field(0x80 + 0x231, 1)) == 1); // imaicl: memory windows (§10.5)
}

TEST_CASE("mlx5: an indirect key's list, laid out from a process's QP: a SEND gathers its "
          "pieces and a receive scatters into them, every byte where the list says",
          "[mlx5][indirect]") {
    IndirectKeys f;
    auto [client, server] = f.pair();
    const uint64_t data = f.host.allocRandom(128, 3), sink = f.host.alloc(128);
    const uint32_t clientKey = f.key(), serverKey = f.key();
    // mlx5dv_wr_mr_list with two SGEs of 8 bytes, 56 apart: test_mlx5_mkey's.
    REQUIRE(f.posted(
        client, f.configure(clientKey, kLocalWrite, {{8, f.lkey, data}, {8, f.lkey, data + 64}})));
    REQUIRE(f.posted(
        server, f.configure(serverKey, kLocalWrite, {{8, f.lkey, sink}, {8, f.lkey, sink + 64}})));
    CHECK(f.send(client, clientKey, 0, 16, server, serverKey, 0));
    CHECK(f.bytesAre(sink, f.host.at(data), 8));
    CHECK(f.bytesAre(sink + 64, f.host.at(data + 64), 8));
    const std::vector<uint8_t> zero(56);
    CHECK(f.bytesAre(sink + 8, zero.data(), 56)); // between the pieces: untouched
    CHECK(f.bytesAre(sink + 72, zero.data(), 56));

    // Ten bytes from offset 3: five of each piece, into offset 5.
    CHECK(f.send(client, clientKey, 3, 10, server, serverKey, 5));
    CHECK(f.bytesAre(sink + 5, f.host.at(data + 3), 3));
    CHECK(f.bytesAre(sink + 64, f.host.at(data + 6), 2));
    CHECK(f.bytesAre(sink + 66, f.host.at(data + 64), 5));
    CHECK(f.host.guestErrors() == 0);

    // test_mkey_list_bad_flow: 100 bytes of a 16-byte key fail locally.
    const auto [opcode, syndrome] = f.post(client, [&] {
        std::vector<uint8_t> wqe(32);
        wqe[3] = kSend;
        writeBe32(&wqe[16], 100);
        writeBe32(&wqe[20], clientKey);
        return wqe;
    }());
    CHECK(opcode == kRequesterError);
    CHECK(syndrome == kLocalProtection);
}

TEST_CASE("mlx5: an indirect key's repeat block: a WRITE through its rkey lands interleaved, "
          "a READ and an atomic come from where the block says",
          "[mlx5][indirect]") {
    IndirectKeys f;
    auto [client, server] = f.pair();
    const uint64_t data = f.host.allocRandom(48, 4), sink = f.host.alloc(256);
    const uint32_t rkey = f.key();
    // mlx5dv_wr_mr_interleaved: 3 blocks of {8 bytes, skip 2} twice.
    REQUIRE(f.posted(server, f.interleaved(rkey, kAllRights, 3,
                                           {{8, f.lkey, sink, 10}, {8, f.lkey, sink + 128, 10}})));
    REQUIRE(f.rdma(client, kRdmaWrite, data, 48, 0, rkey).first == 0);
    for (uint64_t o = 0; o < 48; ++o) {
        const uint64_t block = o / 16, within = o % 16;
        const uint64_t at =
            within < 8 ? sink + block * 10 + within : sink + 128 + block * 10 + within - 8;
        CHECK(*f.host.at(at) == *f.host.at(data + o));
    }
    const std::vector<uint8_t> zero(2);
    CHECK(f.bytesAre(sink + 8, zero.data(), 2)); // the skips stay as they were
    CHECK(f.bytesAre(sink + 128 + 18, zero.data(), 2));

    const uint64_t back = f.host.alloc(64);
    REQUIRE(f.rdma(client, kRdmaRead, back, 30, 5, rkey).first == 0);
    CHECK(f.bytesAre(back, f.host.at(data + 5), 30));

    // A fetch-and-add at offset 16 (the second block's first entry):
    // sink + 10, eight bytes within one entry.
    uint64_t before = 0;
    std::memcpy(&before, f.host.at(sink + 10), 8);
    const uint64_t old = f.host.alloc(8);
    REQUIRE(f.fetchAdd(client, old, 16, rkey, 5).first == 0);
    uint64_t after = 0, returned = 0;
    std::memcpy(&after, f.host.at(sink + 10), 8);
    std::memcpy(&returned, f.host.at(old), 8);
    CHECK(returned == before);
    CHECK(after == before + 5);
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5: an 8 KiB WRITE through a repeat block of one-byte pieces lands on every other "
          "byte: checked whole by spans, moved a packet at a time",
          "[mlx5][indirect]") {
    IndirectKeys f;
    auto [client, server] = f.pair();
    const uint64_t data = f.host.allocRandom(8192, 12), sink = f.host.alloc(16384);
    const uint32_t rkey = f.key();
    REQUIRE(f.posted(server, f.interleaved(rkey, kAllRights, 8192, {{1, f.lkey, sink, 2}})));
    REQUIRE(f.rdma(client, kRdmaWrite, data, 8192, 0, rkey).first == 0);
    bool every = true;
    for (uint64_t i = 0; i < 8192; ++i)
        every = every && *f.host.at(sink + 2 * i) == *f.host.at(data + i) &&
                *f.host.at(sink + 2 * i + 1) == 0;
    CHECK(every);
}

TEST_CASE("mlx5: an access through an indirect key checks the key's rights, and reaches each "
          "entry through its key as it is now: valid, direct, of the key's PD",
          "[mlx5][indirect]") {
    IndirectKeys f;
    const uint64_t data = f.host.allocRandom(64, 5), sink = f.host.alloc(4096);
    SECTION("no remote write on the key: a WRITE is NAKed, nothing lands") {
        auto [client, server] = f.pair();
        const uint32_t rkey = f.key();
        REQUIRE(
            f.posted(server, f.configure(rkey, kLocalWrite | kRemoteRead, {{32, f.lkey, sink}})));
        CHECK(f.rdma(client, kRdmaWrite, data, 16, 0, rkey) ==
              std::pair{kRequesterError, kRemoteAccess});
        const std::vector<uint8_t> zero(16);
        CHECK(f.bytesAre(sink, zero.data(), 16));
    }
    SECTION("an entry whose key went fails the access; an entry re-laid over a live key works") {
        auto [client, server] = f.pair();
        const uint32_t entry = f.physicalKey(f.pd);
        const uint32_t rkey = f.key();
        REQUIRE(f.posted(server, f.configure(rkey, kAllRights, {{32, entry, sink}})));
        REQUIRE(f.rdma(client, kRdmaWrite, data, 16, 0, rkey).first == 0);
        REQUIRE(f.destroyKey(entry) == 0);
        CHECK(f.rdma(client, kRdmaWrite, data, 16, 0, rkey) ==
              std::pair{kRequesterError, kRemoteAccess});
    }
    SECTION("an entry that is itself indirect (max_indirection 1) fails") {
        auto [client, server] = f.pair();
        const uint32_t inner = f.key(), outer = f.key();
        REQUIRE(f.posted(server, f.configure(inner, kAllRights, {{32, f.lkey, sink}})));
        REQUIRE(f.posted(server, f.configure(outer, kAllRights, {{32, inner, 0}})));
        CHECK(f.rdma(client, kRdmaWrite, data, 16, 0, outer).second == kRemoteAccess);
    }
    SECTION("an entry of another PD fails") {
        auto [client, server] = f.pair();
        const uint32_t foreign = f.physicalKey(f.allocPd());
        const uint32_t rkey = f.key();
        REQUIRE(f.posted(server, f.configure(rkey, kAllRights, {{32, foreign, sink}})));
        CHECK(f.rdma(client, kRdmaWrite, data, 16, 0, rkey).second == kRemoteAccess);
    }
    SECTION("a write through an entry without local write fails; a read works") {
        auto [client, server] = f.pair();
        const uint32_t readOnly = f.physicalKey(f.pd, 0x05); // rr and lr: no lw
        const uint32_t rkey = f.key();
        REQUIRE(f.posted(server, f.configure(rkey, kAllRights, {{32, readOnly, sink}})));
        const uint64_t back = f.host.alloc(64);
        CHECK(f.rdma(client, kRdmaRead, back, 16, 0, rkey).first == 0);
        CHECK(f.rdma(client, kRdmaWrite, data, 16, 0, rkey).second == kRemoteAccess);
    }
    SECTION("an atomic across two entries is NAKed") {
        auto [client, server] = f.pair();
        const uint32_t rkey = f.key();
        REQUIRE(f.posted(
            server, f.configure(rkey, kAllRights, {{4, f.lkey, sink}, {4, f.lkey, sink + 64}})));
        CHECK(f.fetchAdd(client, f.host.alloc(8), 0, rkey, 1).second == kRemoteAccess);
    }
}

TEST_CASE("mlx5: an indirect key freed by LOCAL_INV takes no access, and a configure without a "
          "layout brings its layout back; SEND with Invalidate frees it only with en_rinval",
          "[mlx5][indirect]") {
    IndirectKeys f;
    auto [client, server] = f.pair();
    const uint64_t data = f.host.allocRandom(64, 6), sink = f.host.alloc(256);
    const uint32_t clientKey = f.key();
    const std::vector<Piece> pieces{{8, f.lkey, data}, {8, f.lkey, data + 32}};
    REQUIRE(f.posted(client, f.configure(clientKey, kLocalWrite, pieces)));
    REQUIRE(f.posted(client, f.localInvalidate(clientKey)));
    CHECK(f.post(client, f.localInvalidate(clientKey)) ==
          std::pair{kRequesterError, kLocalProtection}); // already free
    // The QP is in error now: a new pair, the same key.
    std::tie(client, server) = f.pair();
    CHECK_FALSE(f.send(client, clientKey, 0, 16, server, f.lkey, sink));
    std::tie(client, server) = f.pair();
    // FREE, KEY and the rights, no length and no layout: check-free too.
    REQUIRE(f.posted(client, IndirectKeys::umr(clientKey, kLocalWrite, 0, {}, 0x203C2000, 0xa0)));
    CHECK(f.send(client, clientKey, 0, 16, server, f.lkey, sink));
    CHECK(f.bytesAre(sink, f.host.at(data), 8));
    CHECK(f.bytesAre(sink + 8, f.host.at(data + 32), 8));
    // Check-free on a key in use fails, the key unchanged.
    CHECK(f.post(client, f.configure(clientKey, kLocalWrite, {{16, f.lkey, data}}, 0x203C2001,
                                     0xa0)) == std::pair{kRequesterError, kLocalProtection});
    std::tie(client, server) = f.pair();
    CHECK(f.send(client, clientKey, 0, 16, server, f.lkey, sink + 64));
    CHECK(f.bytesAre(sink + 72, f.host.at(data + 32), 8));

    // SEND with Invalidate: refused for a key made without en_rinval.
    const auto invalidate = [&](Qp &a, Qp &b, uint32_t rkey) {
        f.postReceive(b, sink + 128, 8);
        f.blueFlame(f.postWqe(a, mlx5umr::sendInvalidate(rkey, 8, f.lkey, data)), f.uar);
        const auto done = f.completions(&f.next, 2);
        return done.size() == 2 && std::none_of(done.begin(), done.end(), [](const uint8_t *c) {
                   return c[0x3f] >> 4 >= kRequesterError;
               });
    };
    const uint32_t plain = f.key();
    REQUIRE(f.posted(server, f.configure(plain, kAllRights, {{16, f.lkey, sink}})));
    CHECK_FALSE(invalidate(client, server, plain));
    std::tie(client, server) = f.pair();
    CHECK(f.rdma(client, kRdmaWrite, data, 8, 0, plain).first == 0); // still in use
    const auto [status, freeable] = f.klmKey(4, 0, 0, true);
    REQUIRE(status == 0);
    REQUIRE(f.posted(server, f.configure(freeable, kAllRights, {{16, f.lkey, sink}})));
    CHECK(invalidate(client, server, freeable));
    CHECK(f.rdma(client, kRdmaWrite, data, 8, 0, freeable).second == kRemoteAccess);
}

TEST_CASE("mlx5: a process's QP lays out only its own context's indirect keys of its PD; the "
          "kernel's keys and UMRs stay out of its reach",
          "[mlx5][indirect][isolation]") {
    IndirectKeys f;
    const uint64_t sink = f.host.alloc(4096);
    auto p = f.process();
    const auto [status, userKey] = f.klmKey(4, p.pd, p.uid);
    REQUIRE(status == 0);
    // A KLM key the kernel makes in the process's PD is a memory window
    // (mlx5_ib_alloc_mw's, §10.5): a layout is no bind of it.
    const auto [kernelStatus, window] = f.klmKey(4, p.pd, 0);
    REQUIRE(kernelStatus == 0);
    CHECK(window >> 8 > limits::kMaxMr);
    auto own = f.qpOf(p, p.pd);
    CHECK(f.postAs(p, own, f.configure(window, kLocalWrite, {{16, f.lkey, sink}})) ==
          std::pair{kRequesterError, uint8_t{0x06}}); // a bind error
    // The process's QP in another of its PDs: refused as well.
    auto elsewhere = f.qpOf(p, f.allocPd(p.uid));
    CHECK(f.postAs(p, elsewhere, f.configure(userKey, kLocalWrite, {{16, f.lkey, sink}})) ==
          std::pair{kRequesterError, kLocalQpOperation});
    // Its own QP in its PD, its own key: done.
    auto again = f.qpOf(p, p.pd);
    CHECK(f.postAs(p, again, f.configure(userKey, kLocalWrite, {{16, f.lkey, sink}})) ==
          std::pair{uint8_t{0}, uint8_t{0}});

    // A UMR of an indirect key's shape aimed at a free MTT key (what a
    // kernel consumer registers): no indirect key, refused.
    const uint32_t mtt = mlx5umr::freeKey(f, 4);
    REQUIRE(mtt);
    auto [user, peer] = f.pair();
    CHECK(f.post(user, f.configure(mtt, kLocalWrite, {{16, f.lkey, sink}})) ==
          std::pair{kRequesterError, kLocalQpOperation});
}

TEST_CASE("mlx5: malformed UMRs of indirect keys complete in error, the key unchanged",
          "[mlx5][indirect]") {
    IndirectKeys f;
    const uint64_t sink = f.host.alloc(4096);
    const uint32_t k = f.key(4);
    const auto fails = [&](std::vector<uint8_t> wqe, uint8_t syndrome) {
        auto [qp, peer] = f.pair();
        return f.post(qp, std::move(wqe)) == std::pair{kRequesterError, syndrome};
    };
    const std::vector<Piece> one{{16, f.lkey, sink}};
    CHECK(fails(f.configure(k, kLocalWrite, one, 0x203C2001, 0x80 | 0x40), kLocalQpOperation));
    CHECK(fails(f.configure(k, kLocalWrite, one, 0x203C2001 | 0x2),
                kLocalQpOperation)); // page size: no fre
    CHECK(fails(f.configure(k, kLocalWrite, one, 0x203C2001 | 0x80), kLocalQpOperation));   // PD
    CHECK(fails(f.configure(k, kLocalWrite, one, 0x203C2001 | 0x1000), kLocalQpOperation)); // BSF
    CHECK(
        fails(f.configure(k, kLocalWrite, one, 0x203C2001, 0x00), kLocalQpOperation)); // not inline
    CHECK(fails(f.configure(k, kLocalWrite, {{0, f.lkey, sink}}), kLocalQpOperation));
    CHECK(fails(f.configure(k, kLocalWrite, {{16, f.lkey, ~uint64_t{0} - 4}}), kLocalQpOperation));
    CHECK(fails(f.configure(k, kRemoteWrite, one), kLocalProtection)); // rw without lw
    // Five entries (eight octowords with padding) in a table of four.
    const std::vector<Piece> five(5, Piece{4, f.lkey, sink});
    CHECK(fails(f.configure(k, kLocalWrite, five), kLocalProtection));
    // A repeat block whose stride is shorter than its bytes.
    CHECK(fails(f.interleaved(k, kLocalWrite, 2, {{8, f.lkey, sink, 4}}), kLocalQpOperation));
    // A layout whose octowords run past the WQE.
    auto cut = f.configure(k, kLocalWrite, one);
    writeBe16(&cut[20], 40);
    CHECK(fails(cut, kLocalQpOperation));
    // The key was never laid out: still free.
    auto [qp, peer] = f.pair();
    CHECK(f.rdma(qp, kRdmaWrite, sink, 8, 0, k).second == kRemoteAccess);
}

TEST_CASE("mlx5: a saved function keeps its indirect keys' layouts, and data goes through them "
          "after the load as before",
          "[mlx5][indirect][mlx5-state]") {
    IndirectKeys f;
    auto [client, server] = f.pair();
    const uint64_t data = f.host.allocRandom(64, 7), sink = f.host.alloc(256);
    const uint32_t list = f.key(), block = f.key(), unused = f.key(), freed = f.key();
    REQUIRE(f.posted(server,
                     f.configure(list, kAllRights, {{8, f.lkey, sink}, {8, f.lkey, sink + 64}})));
    REQUIRE(f.posted(server, f.interleaved(block, kAllRights, 2, {{4, f.lkey, sink + 128, 8}})));
    REQUIRE(f.posted(server, f.configure(freed, kAllRights, {{8, f.lkey, sink}})));
    REQUIRE(f.posted(server, f.localInvalidate(freed)));
    (void)unused;
    REQUIRE(f.host.move() == "");
    REQUIRE(f.rdma(client, kRdmaWrite, data, 16, 0, list).first == 0);
    CHECK(f.bytesAre(sink, f.host.at(data), 8));
    CHECK(f.bytesAre(sink + 64, f.host.at(data + 8), 8));
    REQUIRE(f.rdma(client, kRdmaWrite, data + 16, 8, 0, block).first == 0);
    CHECK(f.bytesAre(sink + 128, f.host.at(data + 16), 4));
    CHECK(f.bytesAre(sink + 136, f.host.at(data + 20), 4));
    CHECK(f.rdma(client, kRdmaWrite, data, 8, 0, freed).second == kRemoteAccess);
}

TEST_CASE("indirect layouts: pieces and spans agree with a walk of every byte, and a span "
          "check costs one call per entry however long the range",
          "[indirect]") {
    std::mt19937 random(11);
    for (int round = 0; round < 200; ++round) {
        IndirectLayout l;
        l.repeats = random() % 2 ? 0 : 1 + random() % 5;
        const uint32_t n = 1 + random() % 4;
        uint64_t offset = 0;
        for (uint32_t i = 0; i < n; ++i) {
            IndirectEntry e;
            e.bytes = 1 + random() % 9;
            e.stride = e.bytes + random() % 7;
            e.addr = 1000 * (i + 1);
            e.key = i;
            e.offset = offset;
            offset += e.bytes;
            l.entries.push_back(e);
        }
        REQUIRE(l.invalid() == nullptr);
        const uint64_t total = l.length();
        // Where each byte of the key is, byte by byte.
        std::vector<std::pair<uint32_t, uint64_t>> where;
        for (uint32_t r = 0; r < std::max<uint32_t>(l.repeats, 1); ++r)
            for (const IndirectEntry &e : l.entries)
                for (uint32_t b = 0; b < e.bytes; ++b)
                    where.push_back({e.key, e.addr + r * e.stride + b});
        REQUIRE(where.size() == total);
        const uint64_t from = random() % total, len = 1 + random() % (total - from);
        std::vector<std::pair<uint32_t, uint64_t>> got;
        REQUIRE(l.forEachPiece(from, len, [&](const IndirectEntry &e, uint64_t at, uint64_t n2) {
            for (uint64_t b = 0; b < n2; ++b)
                got.push_back({e.key, at + b});
            return true;
        }));
        CHECK(std::equal(got.begin(), got.end(), where.begin() + from));
        CHECK(got.size() == len);
        // Every byte reached lies in its entry's span, and each span's
        // ends are bytes reached.
        std::vector<std::pair<uint64_t, uint64_t>> spans(n, {~uint64_t{0}, 0});
        REQUIRE(l.forEachHull(from, len, [&](const IndirectEntry &e, uint64_t at, uint64_t n2) {
            spans[e.key] = {at, at + n2};
            return true;
        }));
        for (const auto &[key, at] : got)
            CHECK((at >= spans[key].first && at < spans[key].second));
        for (uint32_t k = 0; k < n; ++k)
            if (spans[k].second) {
                CHECK(std::count(got.begin(), got.end(), std::pair{k, spans[k].first}) == 1);
                CHECK(std::count(got.begin(), got.end(), std::pair{k, spans[k].second - 1}) == 1);
            }
        CHECK_FALSE(l.forEachPiece(from, total - from + 1,
                                   [](const IndirectEntry &, uint64_t, uint64_t) { return true; }));
    }
    // 2^32 - 1 blocks of two one-byte entries: a check of the whole costs
    // two calls.
    IndirectLayout big;
    big.repeats = 0xffffffff;
    big.entries = {{.addr = 0, .key = 1, .bytes = 1, .stride = 1, .offset = 0},
                   {.addr = 1ull << 40, .key = 2, .bytes = 1, .stride = 1, .offset = 1}};
    REQUIRE(big.invalid() == nullptr);
    int calls = 0;
    CHECK(big.forEachHull(0, big.length(), [&](const IndirectEntry &, uint64_t, uint64_t n) {
        ++calls;
        return n == 0xffffffff;
    }));
    CHECK(calls == 2);
}

TEST_CASE("mlx5: mlx5_ib's fast registration of a KLM key (an SG_GAPS region): its list inline "
          "or read through its L_Key, from the key's iova; LOCAL_INV and SEND with Invalidate "
          "free it",
          "[mlx5][indirect][umr]") {
    IndirectKeys f;
    auto [a, b] = f.kernelPair();
    const uint64_t data = f.host.allocRandom(8192, 8), sink = f.host.alloc(8192);
    constexpr uint64_t kIova = 0x7f0000001234;
    const uint32_t key = f.key(8) | 0x5a;
    // Three pieces: inline.
    const std::vector<Piece> three{
        {100, f.lkey, sink}, {200, f.lkey, sink + 1000}, {50, f.lkey, sink + 3000}};
    REQUIRE(f.posted(a, mlx5umr::klmRegistration(key, kIova, three)));
    REQUIRE(f.rdma(b, kRdmaWrite, data, 350, kIova, key).first == 0);
    CHECK(f.bytesAre(sink, f.host.at(data), 100));
    CHECK(f.bytesAre(sink + 1000, f.host.at(data + 100), 200));
    CHECK(f.bytesAre(sink + 3000, f.host.at(data + 300), 50));
    CHECK(f.rdma(b, kRdmaWrite, data, 8, kIova - 1, key).second == kRemoteAccess);
    std::tie(a, b) = f.kernelPair();
    // A peer's SEND with Invalidate frees it (the registration set en_rinval).
    f.postReceive(a, sink + 4096, 8);
    f.blueFlame(f.postWqe(b, mlx5umr::sendInvalidate(key, 8, f.lkey, data)), f.uar);
    REQUIRE(f.completions(&f.next, 2).size() == 2);
    CHECK(f.rdma(b, kRdmaWrite, data, 8, kIova, key).second == kRemoteAccess);

    // Six pieces: behind the data segment, read through its L_Key.
    std::tie(a, b) = f.kernelPair();
    std::vector<Piece> six;
    for (uint64_t i = 0; i < 6; ++i)
        six.push_back({64, f.lkey, sink + 4096 + 512 * i});
    const uint64_t list = f.host.alloc(128, 64);
    const uint32_t next = (key & ~0xffu) | 0x5b;
    REQUIRE(f.posted(a, mlx5umr::klmRegistration(next, kIova, six, f.host.at(list), list, f.lkey)));
    REQUIRE(f.rdma(b, kRdmaWrite, data, 384, kIova, next).first == 0);
    for (uint64_t i = 0; i < 6; ++i)
        CHECK(f.bytesAre(sink + 4096 + 512 * i, f.host.at(data + 64 * i), 64));
    const uint64_t back = f.host.alloc(4096);
    REQUIRE(f.rdma(b, kRdmaRead, back, 100, kIova + 60, next).first == 0);
    CHECK(f.bytesAre(back, f.host.at(data + 60), 100));
    // The kernel's LOCAL_INV (the free bit alone) frees it.
    REQUIRE(f.posted(a, mlx5umr::invalidation(next)));
    CHECK(f.rdma(b, kRdmaWrite, data, 8, kIova, next).second == kRemoteAccess);
    // A list whose key does not reach it fails the registration.
    std::tie(a, b) = f.kernelPair();
    CHECK(f.post(a, mlx5umr::klmRegistration(next, kIova, six, f.host.at(list), list, 0x12345)) ==
          std::pair{kRequesterError, kLocalProtection});
    // A process's QP (no fre) may not post it.
    auto [user, peer] = f.pair();
    CHECK(f.post(user, mlx5umr::klmRegistration(next, kIova, three)) ==
          std::pair{kRequesterError, kLocalQpOperation});
}
