// SPDX-License-Identifier: GPL-2.0-or-later
// ConnectX user contexts (docs/mlx5.md §16): two processes' contexts, A
// and B, beside the kernel. Each object belongs to the uid that made it;
// B's commands can neither change, destroy nor query A's, nor build on
// them; what the kernel keeps (MADs, EQs, QP0, fast registration,
// physical keys) no context may ask for; and a context ends only when its
// objects have. Each case fails on a device that takes the uid as it
// comes.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <string>

#include "conditions.hh"
#include "mlx5_function.hh"

using namespace pib;
using namespace pib::mlx5;

namespace {

using namespace pib::testing::mlx5qp;
using pib::testing::Mlx5Function;
using Qp = Mlx5Function::Qp;

constexpr uint16_t kCreateUctx = 0xa04, kDestroyUctx = 0xa06;
constexpr uint16_t kAllocPd = 0x800, kDeallocPd = 0x801, kAllocUar = 0x802, kAllocXrcd = 0x80e;
constexpr uint16_t kAllocQCounter = 0x771, kQueryQCounter = 0x773, kMadIfc = 0x50d;
constexpr uint16_t kCreateMkey = 0x200;
constexpr Field kUctxUid = field(0x50, 16);   // create_uctx_out.uid, destroy_uctx_in.uid
constexpr Field kCounter = field(0x58, 8);    // alloc_q_counter_out.counter_set_id
constexpr Field kQueried = field(0xf8, 8);    // query_q_counter_in.counter_set_id
constexpr Field kQueryClear = field(0xc0, 1); // query_q_counter_in.clear
constexpr uint16_t kShared = 0xffff;

uint8_t statusOf(const err::Condition &c) {
    return c.mlx5Status;
}

struct Contexts : pib::testing::OwnedMlx5Host, Mlx5Function {
    Contexts() : Mlx5Function(owned) {
        REQUIRE(setUp());
        kernel = {pd, cqn, uar};
    }
    // What one context made: its PD, CQ and UAR page.
    struct Made {
        uint32_t pd = 0, cq = 0, uar = 0;
    };

    Mlx5Host::Reply as(uint16_t uid, std::vector<uint8_t> in, uint32_t outBytes = 16) {
        set(in, kUid, uid);
        return host.run(in, outBytes);
    }
    uint16_t newContext() {
        const auto r = host.run(Mlx5Host::input(kCreateUctx, 0, 0x40), 16);
        REQUIRE(r.status() == 0);
        return static_cast<uint16_t>(r.get(kUctxUid));
    }
    Mlx5Host::Reply endContext(uint16_t uid) {
        auto in = Mlx5Host::input(kDestroyUctx);
        set(in, kUctxUid, uid);
        return host.run(in, 16);
    }
    uint32_t held(uint16_t uid, uint16_t opcode) {
        const auto r = as(uid, Mlx5Host::input(opcode));
        REQUIRE(r.status() == 0);
        return static_cast<uint32_t>(r.get(kHeld));
    }
    // A PD, a UAR page and a CQ on the kernel's EQ, all of `uid`.
    Made objectsOf(uint16_t uid) {
        Made m;
        m.pd = held(uid, kAllocPd);
        m.uar = held(uid, kAllocUar);
        uint64_t ring = 0, record = 0;
        const auto r = as(uid, host.cqInput(kLogCq, eqn, m.uar, &ring, &record));
        REQUIRE(r.status() == 0);
        m.cq = static_cast<uint32_t>(r.get(kHeld));
        return m;
    }
    // CREATE_QP as mlx5_ib makes a process's: no fre, on `m`'s objects.
    Mlx5Host::Reply qp(uint16_t uid, const Made &m, Qp &made, uint8_t st = kRc) {
        const Made saved{pd, cqn, uar};
        pd = m.pd, cqn = m.cq, uar = m.uar;
        auto in = qpInput(st, 0, 2, 2, made);
        pd = saved.pd, cqn = saved.cq, uar = saved.uar;
        set(in, kFre, 0);
        const auto r = as(uid, in);
        made.qpn = static_cast<uint32_t>(r.get(kHeld));
        return r;
    }
    // CREATE_MKEY of one page (access mode MTT) in `pdn`.
    Mlx5Host::Reply mttKey(uint16_t uid, uint32_t pdn, bool physical = false) {
        auto in = Mlx5Host::input(kCreateMkey, 0, 0x120);
        set(in, field(0x95, 1), 1);                // lr
        set(in, field(0x96, 2), physical ? 0 : 1); // access mode PA or MTT
        set(in, field(0xa0, 24), 0xffffff);        // no QP
        set(in, field(0xe8, 24), pdn);
        set(in, field(0x100, 64), 0x10000);             // start_addr
        set(in, field(0x140, 64), physical ? 0 : 8192); // len
        set(in, field(0xe0, 1), physical ? 1 : 0);      // length64
        set(in, field(0x220, 32), 1);                   // translations_octword_size
        set(in, field(0x25a, 6), 12);                   // 4 KiB pages
        set(in, field(0x300, 32), 1);                   // two entries given
        writeBe64(&in[0x110], host.alloc(4096));
        writeBe64(&in[0x118], host.alloc(4096));
        return as(uid, in);
    }
    Made kernel;
};

} // namespace

TEST_CASE("mlx5: user contexts: uids, the kernel's commands, and a context ends only when its "
          "objects have",
          "[mlx5][uctx]") {
    Contexts f;
    const uint16_t a = f.newContext(), b = f.newContext();
    CHECK(a == 1);
    CHECK(b == 2);

    // A uid no context has, and the kernel's commands from a context.
    CHECK(f.as(7, Mlx5Host::input(kAllocPd)).status() == statusOf(err::kMlx5CmdBadUid));
    CHECK(f.as(b, Mlx5Host::input(kMadIfc, 1, 0x110), 0x110).status() ==
          statusOf(err::kMlx5CmdBadUid));
    uint64_t ring = 0;
    CHECK(f.as(b, f.host.eqInput(3, 0, 1, f.uar, &ring)).status() == statusOf(err::kMlx5CmdBadUid));
    CHECK(f.as(kShared, f.host.eqInput(3, 0, 2, f.uar, &ring)).status() == 0);
    CHECK(f.as(a, Mlx5Host::input(kCreateUctx, 0, 0x40)).status() == statusOf(err::kMlx5CmdBadUid));

    const uint32_t pdA = f.held(a, kAllocPd);
    const auto refused = f.endContext(a);
    CHECK(refused.status() == statusOf(err::kMlx5UctxInUse));
    CHECK(refused.syndrome() == err::kMlx5UctxInUse.syndrome);
    // B may not free A's PD; A may, then A's context ends, and its uid
    // is none until CREATE_UCTX gives it again.
    auto dealloc = Mlx5Host::input(kDeallocPd);
    set(dealloc, kHeld, pdA);
    CHECK(f.as(b, dealloc).status() == statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.as(a, dealloc).status() == 0);
    CHECK(f.endContext(a).status() == 0);
    CHECK(f.endContext(a).status() == statusOf(err::kMlx5CmdBadResource));
    CHECK(f.as(a, Mlx5Host::input(kAllocPd)).status() == statusOf(err::kMlx5CmdBadUid));
    CHECK(f.newContext() == a);
    CHECK(f.host.guestErrors() > 0);
}

TEST_CASE("mlx5: user contexts: a process's objects build only on its own, and another's "
          "commands cannot touch them",
          "[mlx5][uctx]") {
    Contexts f;
    const uint16_t a = f.newContext(), b = f.newContext();
    const Contexts::Made ma = f.objectsOf(a), mb = f.objectsOf(b);

    // B's CQ on A's UAR page; QPs on another's PD or CQ.
    uint64_t ring = 0, record = 0;
    CHECK(f.as(b, f.host.cqInput(2, f.eqn, ma.uar, &ring, &record)).status() ==
          statusOf(err::kMlx5CmdForeignObject));
    Qp qp;
    CHECK(f.qp(b, {ma.pd, mb.cq, mb.uar}, qp).status() == statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.qp(b, {mb.pd, ma.cq, mb.uar}, qp).status() == statusOf(err::kMlx5CmdForeignObject));
    // The kernel's PD is no process's either: its keys are the kernel's.
    CHECK(f.qp(b, {f.kernel.pd, mb.cq, mb.uar}, qp).status() ==
          statusOf(err::kMlx5CmdForeignObject));
    // Fast registration is the kernel's.
    Qp withFre;
    auto fre = f.qpInput(kRc, 0, 2, 2, withFre);
    CHECK(f.as(b, fre).status() == statusOf(err::kMlx5CmdBadUid));

    Qp qpA;
    REQUIRE(f.qp(a, ma, qpA).status() == 0);
    // The host's inspection says whose it is.
    char *answer = nullptr;
    REQUIRE(pib_core_inspect(f.host.core, ("qp " + std::to_string(qpA.qpn)).c_str(), 1, &answer) ==
            0);
    CHECK(std::string(answer).find("\"uid\":1") != std::string::npos);
    std::free(answer);
    // B can neither change, query nor destroy A's QP; the kernel can.
    auto query = Mlx5Host::input(kQueryQp);
    set(query, kHeld, qpA.qpn);
    CHECK(f.as(b, query, 0x100).status() == statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.as(a, query, 0x100).status() == 0);
    CHECK(f.as(0, query, 0x100).status() == 0);
    auto toErr = Mlx5Host::input(kToErr);
    set(toErr, kHeld, qpA.qpn);
    CHECK(f.as(b, toErr).status() == statusOf(err::kMlx5CmdForeignObject));
    auto destroy = Mlx5Host::input(kDestroyQp);
    set(destroy, kHeld, qpA.qpn);
    CHECK(f.as(b, destroy).status() == statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.query(qpA.qpn).get(kState) == 0); // still in RESET: B changed nothing

    // Keys: B's in A's PD, and a physical one, are refused; one in its own
    // PD is made.
    CHECK(f.mttKey(b, ma.pd).status() == statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.mttKey(b, mb.pd, true).status() == statusOf(err::kMlx5CmdBadUid));
    const auto keyB = f.mttKey(b, mb.pd);
    REQUIRE(keyB.status() == 0);
    auto destroyKey = Mlx5Host::input(0x202);
    set(destroyKey, kHeld, keyB.get(kHeld));
    CHECK(f.as(a, destroyKey).status() == statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.as(b, destroyKey).status() == 0);

    // A basic SRQ of A's may name the kernel's XRC domain and placeholder
    // CQ; an XRC SRQ's CQ takes completions, so it must be A's.
    const std::vector<uint16_t> order{0, 1, 2, 3};
    const auto srqInput = [&](uint16_t opcode, uint32_t cq, uint32_t xrcd) {
        auto s = Mlx5Host::input(opcode, 0, 0x118);
        set(s, field(0x80 + 0x04, 4), 2);
        set(s, field(0x80 + 0x25, 3), 1);
        set(s, field(0x80 + 0x28, 24), xrcd);
        set(s, field(0x80 + 0x48, 24), cq);
        set(s, field(0x80 + 0xc8, 24), ma.pd);
        set(s, field(0x80 + 0x140, 64), f.host.alloc(64, 64));
        writeBe64(&s[0x110], f.host.alloc(4096));
        return s;
    };
    const uint32_t kernelXrcd = f.held(0, kAllocXrcd);
    const auto basic = f.as(a, srqInput(0x700, f.kernel.cq, kernelXrcd));
    CHECK(basic.status() == 0);
    CHECK(f.as(a, srqInput(0x705, f.kernel.cq, kernelXrcd)).status() ==
          statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.as(b, srqInput(0x700, mb.cq, kernelXrcd)).status() ==
          statusOf(err::kMlx5CmdForeignObject)); // A's PD
    // B's DCT on A's SRQ.
    auto dct = f.dctInput(static_cast<uint32_t>(basic.get(kHeld)), 7);
    set(dct, field(0x80 + 0xc8, 24), mb.pd);
    set(dct, field(0x80 + 0x48, 24), mb.cq);
    CHECK(f.as(b, dct).status() == statusOf(err::kMlx5CmdForeignObject));

    // Q counters: the kernel's shared one any context reads and binds;
    // clearing it is the kernel's; B's is B's alone.
    const auto shared = f.as(kShared, Mlx5Host::input(kAllocQCounter));
    REQUIRE(shared.status() == 0);
    const auto counterB = f.as(b, Mlx5Host::input(kAllocQCounter));
    REQUIRE(counterB.status() == 0);
    auto read = Mlx5Host::input(kQueryQCounter, 0, 0x20);
    set(read, kQueried, shared.get(kCounter));
    CHECK(f.as(a, read, 0x100).status() == 0);
    set(read, kQueryClear, 1);
    CHECK(f.as(a, read, 0x100).status() == statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.change(kRst2Init, qpA.qpn, 1,
                   {.counterSet = static_cast<uint32_t>(counterB.get(kCounter))})
              .status() == statusOf(err::kMlx5CmdForeignObject));
    CHECK(
        f.change(kRst2Init, qpA.qpn, 1, {.counterSet = static_cast<uint32_t>(shared.get(kCounter))})
            .status() == 0);
}

TEST_CASE("mlx5: user contexts and their objects' uids survive a saved state", "[mlx5][uctx]") {
    Contexts f;
    const uint16_t a = f.newContext(), b = f.newContext();
    const Contexts::Made ma = f.objectsOf(a);
    Qp qpA;
    REQUIRE(f.qp(a, ma, qpA).status() == 0);
    REQUIRE(f.host.move() == "");
    auto destroy = Mlx5Host::input(kDestroyQp);
    set(destroy, kHeld, qpA.qpn);
    CHECK(f.as(b, destroy).status() == statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.endContext(a).status() == statusOf(err::kMlx5UctxInUse));
    CHECK(f.as(a, destroy).status() == 0);
    // B's context, which owned nothing, ended and came back with the state.
    CHECK(f.endContext(b).status() == 0);
    CHECK(f.as(b, Mlx5Host::input(kAllocPd)).status() == statusOf(err::kMlx5CmdBadUid));
}

namespace {

constexpr uint16_t kCreateUmem = 0xa08, kDestroyUmem = 0xa0a;

// CREATE_UMEM of `pages` (guest addresses of 4 KiB pages) with read and
// write rights, as mlx5_ib registers a process's pinned buffer.
std::vector<uint8_t> umemInput(const std::vector<uint64_t> &pages, uint32_t offset = 0) {
    auto in = Mlx5Host::input(kCreateUmem, 0, 0x30 + 8 * pages.size());
    set(in, field(0x120, 32), offset);       // page_offset
    set(in, field(0x140, 64), pages.size()); // num_of_mtt
    for (size_t i = 0; i < pages.size(); ++i)
        writeBe64(&in[0x30 + 8 * i], pages[i] | 0x3); // wr_en, rd_en
    return in;
}

} // namespace

TEST_CASE("mlx5: UMEMs: a process's pinned pages, its own to end, only guest RAM", "[mlx5][uctx]") {
    Contexts f;
    const uint16_t a = f.newContext(), b = f.newContext();
    const std::vector<uint64_t> pages{f.host.alloc(4096, 4096), f.host.alloc(4096, 4096)};
    const auto made = f.as(a, umemInput(pages, 128));
    REQUIRE(made.status() == 0);
    const auto id = static_cast<uint32_t>(made.get(kHeld));
    CHECK(id >= 1);

    // What is no process's pinned memory is refused.
    const auto refusedAs = [&](std::vector<uint8_t> in) {
        const auto r = f.as(a, std::move(in));
        return r.status() == statusOf(err::kMlx5UmemBad) &&
               r.syndrome() == err::kMlx5UmemBad.syndrome;
    };
    CHECK(refusedAs(umemInput({pages[0] + 512}))); // not page-aligned
    CHECK(refusedAs(umemInput({0xfffffffff000}))); // not guest RAM
    CHECK(refusedAs(umemInput({pages[0]}, 4096))); // offset beyond the page
    CHECK(refusedAs(umemInput({})));               // no page
    auto ats = umemInput(pages);
    set(ats, field(0x100, 1), 1);
    CHECK(refusedAs(ats));
    auto mixed = umemInput(pages);
    mixed[0x30 + 7] = 0x1; // the first page read-only, the second writable
    CHECK(refusedAs(mixed));

    // A's to end, not B's; A's context ends only after it; and a moved
    // function keeps it, and whose it is.
    REQUIRE(f.host.move() == "");
    auto end = Mlx5Host::input(kDestroyUmem);
    set(end, kHeld, id);
    CHECK(f.as(b, end).status() == statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.endContext(a).status() == statusOf(err::kMlx5UctxInUse));
    CHECK(f.as(a, end).status() == 0);
    CHECK(f.as(a, end).status() == statusOf(err::kMlx5CmdBadResource));
    CHECK(f.endContext(a).status() == 0);
}

TEST_CASE("mlx5: a DEVX process's CQ and QPs live in its UMEM: a SEND arrives whole, and the "
          "UMEM stays until they end",
          "[mlx5][uctx]") {
    Contexts f;
    REQUIRE(f.activatePort());
    const uint16_t a = f.newContext(), b = f.newContext();
    const Contexts::Made ma = f.objectsOf(a);
    // One UMEM of 16 pages: the CQ's ring at 0, the QPs' at 0x1000 and
    // 0x2000, the doorbell records at 0x3000 on.
    const uint64_t buffer = f.host.alloc(16 * 4096, 4096);
    std::vector<uint64_t> pages;
    for (uint64_t i = 0; i < 16; ++i)
        pages.push_back(buffer + 4096 * i);
    const auto umem = f.as(a, umemInput(pages));
    REQUIRE(umem.status() == 0);
    const auto id = static_cast<uint32_t>(umem.get(kHeld));
    for (uint32_t i = 0; i < 16; ++i)
        f.host.at(buffer + 64 * i)[0x3f] = 0xf1; // CQEs invalid, owner 1

    // CREATE_CQ as DEVX sends it: no page list, the ring and record in the UMEM.
    auto cq = Mlx5Host::input(0x400, 0, 0x110);
    set(cq, field(0x80 + 0x63, 5), 4); // 16 CQEs
    set(cq, field(0x80 + 0x68, 24), ma.uar);
    set(cq, field(0x80 + 0xa0, 32), f.eqn);
    set(cq, field(0x80 + 0x06, 1), 1);   // dbr_umem_valid
    set(cq, field(0x80 + 0x20, 32), id); // dbr_umem_id
    set(cq, field(0x80 + 0x1c0, 64), 0x3000);
    set(cq, field(0x2e0, 1), 1);                                         // cq_umem_valid
    set(cq, field(0x2c0, 32), id);                                       // cq_umem_id
    CHECK(f.as(b, cq).status() == statusOf(err::kMlx5CmdForeignObject)); // A's UMEM
    const auto madeCq = f.as(a, cq);
    REQUIRE(madeCq.status() == 0);
    const auto cqn = static_cast<uint32_t>(madeCq.get(kHeld));

    // Two RC QPs, their rings and records in the UMEM too.
    Qp qps[2];
    for (int i = 0; i < 2; ++i) {
        auto in = f.qpInput(kRc, 0, 2, 2, qps[i]);
        in.resize(0x110); // no page list
        set(in, kFre, 0);
        set(in, kPd, ma.pd);
        set(in, kUarPage, ma.uar);
        set(in, kCqnSnd, cqn);
        set(in, kCqnRcv, cqn);
        set(in, field(0x860, 1), 1); // wq_umem_valid
        set(in, field(0x840, 32), id);
        set(in, field(0x800, 64), 0x1000 * (i + 1));
        set(in, field(0xc0 + 0x683, 1), 1); // dbr_umem_valid
        set(in, field(0xc0 + 0x720, 32), id);
        set(in, kDbrAddr, 0x3040 + 0x40 * i);
        qps[i].buffer = buffer + 0x1000 * (i + 1);
        qps[i].record = buffer + 0x3040 + 0x40 * i;
        const auto r = f.as(a, in);
        REQUIRE(r.status() == 0);
        qps[i].qpn = static_cast<uint32_t>(r.get(kHeld));
    }
    REQUIRE(f.toRts(qps[0].qpn, {.qpn = qps[1].qpn}));
    REQUIRE(f.toRts(qps[1].qpn, {.qpn = qps[0].qpn}));

    // A key in A's PD over all of memory (the kernel's, as mlx5_ib makes
    // a process's), and random data from one QP to the other.
    auto key = Mlx5Host::input(0x200, 0, 0x110);
    set(key, field(0x91, 5), 0x1f);
    set(key, field(0xa0, 24), 0xffffff);
    set(key, field(0xe0, 1), 1);
    set(key, field(0xe8, 24), ma.pd);
    const auto madeKey = f.host.run(key, 16);
    REQUIRE(madeKey.status() == 0);
    f.lkey = static_cast<uint32_t>(madeKey.get(kHeld)) << 8;
    const uint64_t source = f.host.allocRandom(4096, 0xda7a), sink = f.host.alloc(4096);
    f.postReceive(qps[1], sink, 4096);
    f.blueFlame(f.writeSend(qps[0], false, {.opcode = kSend, .addr = source, .length = 3000}),
                ma.uar);
    uint32_t next = 0;
    const auto done = f.cqesOf(buffer, buffer + 0x3000, &next);
    CHECK(done.size() == 2);
    CHECK(std::equal(f.host.at(source), f.host.at(source) + 3000, f.host.at(sink)));

    // A key over a second UMEM (two pages, the buffer 256 bytes into the
    // first), as DEVX makes one: the next SEND lands in those pages.
    const uint64_t sinkPages = f.host.alloc(2 * 4096, 4096);
    const auto sinkUmem = f.as(a, umemInput({sinkPages, sinkPages + 4096}, 256));
    REQUIRE(sinkUmem.status() == 0);
    const auto sinkId = static_cast<uint32_t>(sinkUmem.get(kHeld));
    constexpr uint64_t kVa = 0x7f0000000100; // where the process has the buffer
    const auto umemKey = [&](uint32_t umemId, uint64_t va, uint64_t length, bool write) {
        auto k = Mlx5Host::input(0x200, 0, 0x110);
        set(k, field(0x61, 1), 1); // mkey_umem_valid
        set(k, field(0x320, 32), umemId);
        set(k, field(0x340, 64), 0); // from the buffer's first byte
        set(k, field(0x94, 1), write);
        set(k, field(0x95, 1), 1); // lr
        set(k, field(0x96, 2), 1); // MTT
        set(k, field(0xa0, 24), 0xffffff);
        set(k, field(0xe8, 24), ma.pd);
        set(k, field(0x100, 64), va);
        set(k, field(0x140, 64), length);
        return k;
    };
    const auto refusedKey = [&](uint16_t uid, std::vector<uint8_t> in, const err::Condition &why) {
        const auto r = f.as(uid, std::move(in));
        return r.status() == statusOf(why) && r.syndrome() == why.syndrome;
    };
    CHECK(refusedKey(b, umemKey(sinkId, kVa, 4096, true), err::kMlx5CmdForeignObject));
    CHECK(refusedKey(a, umemKey(sinkId, kVa + 8, 4096, true), err::kMlx5UmemBad)); // not in place
    CHECK(refusedKey(a, umemKey(sinkId, kVa, 2 * 4096, true), err::kMlx5UmemBad)); // beyond it
    CHECK(refusedKey(a, umemKey(0xbad, kVa, 4096, true), err::kMlx5CmdBadResource));
    auto freeKey = umemKey(sinkId, kVa, 4096, true);
    set(freeKey, field(0x81, 1), 1);
    CHECK(refusedKey(a, freeKey, err::kMlx5MkeyNotOffered));
    const auto readOnly = f.as(a, [&] {
        auto in = umemInput({f.host.alloc(4096, 4096)});
        in[0x30 + 7] = 0x1; // rd_en alone
        return in;
    }());
    REQUIRE(readOnly.status() == 0);
    const auto readOnlyId = static_cast<uint32_t>(readOnly.get(kHeld));
    CHECK(refusedKey(a, umemKey(readOnlyId, kVa, 1024, true), err::kMlx5UmemBad));
    CHECK(refusedKey(
        a,
        [&] { // a CQ ring the device would write in it
            auto in = cq;
            set(in, field(0x2c0, 32), readOnlyId);
            set(in, field(0x80 + 0x20, 32), readOnlyId);
            set(in, field(0x80 + 0x1c0, 64), 0);
            return in;
        }(),
        err::kMlx5UmemBad));
    const auto madeUmemKey = f.as(a, umemKey(sinkId, kVa, 4000, true));
    REQUIRE(madeUmemKey.status() == 0);
    const uint32_t sinkKey = static_cast<uint32_t>(madeUmemKey.get(kHeld)) << 8;
    const uint32_t kernelKey = f.lkey;
    f.lkey = sinkKey;
    f.postReceive(qps[1], kVa + 100, 3000);
    f.lkey = kernelKey;
    f.blueFlame(f.writeSend(qps[0], false, {.opcode = kSend, .addr = source + 1, .length = 3000}),
                ma.uar);
    CHECK(f.cqesOf(buffer, buffer + 0x3000, &next).size() == 2);
    CHECK(std::equal(f.host.at(source + 1), f.host.at(source + 1) + 3000,
                     f.host.at(sinkPages + 256 + 100)));
    // The key holds its UMEM, across a move too; DESTROY_MKEY lets it go.
    auto endSink = Mlx5Host::input(kDestroyUmem);
    set(endSink, kHeld, sinkId);
    CHECK(f.as(a, endSink).status() == statusOf(err::kMlx5CmdInUse));
    REQUIRE(f.host.move() == "");
    CHECK(f.as(a, endSink).status() == statusOf(err::kMlx5CmdInUse));
    auto destroyKey = Mlx5Host::input(0x202);
    set(destroyKey, kHeld, sinkKey >> 8);
    CHECK(f.as(b, destroyKey).status() == statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.as(a, destroyKey).status() == 0);
    CHECK(f.as(a, endSink).status() == 0);

    // The UMEM stays while they use it, across a move too.
    auto end = Mlx5Host::input(kDestroyUmem);
    set(end, kHeld, id);
    CHECK(f.as(a, end).status() == statusOf(err::kMlx5CmdInUse));
    REQUIRE(f.host.move() == "");
    CHECK(f.as(a, end).status() == statusOf(err::kMlx5CmdInUse));
    for (const Qp &qp : qps) {
        auto destroy = Mlx5Host::input(kDestroyQp);
        set(destroy, kHeld, qp.qpn);
        CHECK(f.as(a, destroy).status() == 0);
    }
    CHECK(f.as(a, end).status() == statusOf(err::kMlx5CmdInUse)); // the CQ's still
    auto destroyCq = Mlx5Host::input(0x401);
    set(destroyCq, kHeld, cqn);
    CHECK(f.as(a, destroyCq).status() == 0);
    CHECK(f.as(a, end).status() == 0);
}

namespace {

constexpr uint16_t kCreateObject = 0xa00, kModifyObject = 0xa01, kQueryObject = 0xa02,
                   kDestroyObject = 0xa03, kQueryHcaCap = 0x100;
constexpr uint16_t kReservedQpn = 0x2c, kAvQpMapping = 0x3a;
constexpr Field kObjectType = field(0x30, 16); // general_obj_in_cmd_hdr.obj_type
constexpr Field kObjectId = field(0x40, 32);   // general_obj_in_cmd_hdr.obj_id, and out's
constexpr Field kLogRange = field(0x63, 5);    // general_obj_in_cmd_hdr.log_obj_range

// As rdma-core sends one: the header, then the object's own 16 bytes
// (`bytes` 0x10: the header alone, which needs no mailbox).
std::vector<uint8_t> objectInput(uint16_t opcode, uint16_t type, uint32_t id = 0,
                                 uint32_t logRange = 0, size_t bytes = 0x20) {
    auto in = Mlx5Host::input(opcode, 0, bytes);
    set(in, kObjectType, type);
    set(in, kObjectId, id);
    set(in, kLogRange, logRange);
    return in;
}

} // namespace

TEST_CASE("mlx5: DEVX general objects: ranges of reserved QP numbers, a process's own, of the "
          "granularity the second general page names",
          "[mlx5][uctx]") {
    Contexts f;
    const uint16_t a = f.newContext(), b = f.newContext();

    // The general page offers the type and the second page; that page
    // names the ranges' size (cmd_hca_cap's hca_cap_2 and general_obj_types,
    // cmd_hca_cap_2's log_reserved_qpn_granularity, 0x10 bytes into the
    // output).
    const auto general = f.as(a, Mlx5Host::input(kQueryHcaCap, 1), 0x1010);
    REQUIRE(general.status() == 0);
    CHECK(general.get(field(0x80 + 0x20, 1)) == 1);
    CHECK(general.get(field(0x80 + 0x400, 64)) ==
          (uint64_t{1} << kReservedQpn | uint64_t{1} << kAvQpMapping));
    const auto second = f.as(a, Mlx5Host::input(kQueryHcaCap, 0x20 << 1 | 1), 0x1010);
    REQUIRE(second.status() == 0);
    const auto logRange = static_cast<uint32_t>(second.get(field(0x80 + 0x93, 5)));
    REQUIRE(logRange == 3);

    // Two of A's ranges: apart, aligned, beyond every QP's number.
    const auto made = [&](uint16_t uid) {
        const auto r = f.as(uid, objectInput(kCreateObject, kReservedQpn, 0, logRange));
        REQUIRE(r.status() == 0);
        return static_cast<uint32_t>(r.get(kObjectId));
    };
    const uint32_t first = made(a), next = made(a);
    CHECK(first != next);
    CHECK((first & 7) == 0);
    CHECK((next & 7) == 0);
    CHECK(first >= 0x400000);
    CHECK(next < 1u << 24);
    Qp qpA;
    REQUIRE(f.qp(a, f.objectsOf(a), qpA).status() == 0);
    CHECK((qpA.qpn < std::min(first, next)));

    // Types not offered, and ranges of another size.
    const auto refused = [&](std::vector<uint8_t> in, const err::Condition &why) {
        const auto r = f.as(a, std::move(in));
        return r.status() == statusOf(why) && r.syndrome() == why.syndrome;
    };
    CHECK(refused(objectInput(kCreateObject, 0x13, 0, logRange), err::kMlx5GeneralObjectBad));
    CHECK(refused(objectInput(kCreateObject, kReservedQpn, 0, 4), err::kMlx5GeneralObjectBad));
    CHECK(refused(objectInput(kQueryObject, 0x13, first), err::kMlx5GeneralObjectBad));
    CHECK(refused(objectInput(kModifyObject, kReservedQpn, first), err::kMlx5GeneralObjectBad));
    CHECK(refused(objectInput(kDestroyObject, kReservedQpn, first + 1), err::kMlx5CmdBadResource));

    // B can neither query nor end A's; A's context ends only after them,
    // and a moved function keeps them and whose they are.
    CHECK(f.as(b, objectInput(kQueryObject, kReservedQpn, first)).status() ==
          statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.as(b, objectInput(kDestroyObject, kReservedQpn, first)).status() ==
          statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.as(a, objectInput(kQueryObject, kReservedQpn, first)).status() == 0);
    auto destroyQp = Mlx5Host::input(kDestroyQp);
    set(destroyQp, kHeld, qpA.qpn);
    REQUIRE(f.as(a, destroyQp).status() == 0);
    REQUIRE(f.host.move() == "");
    CHECK(f.as(b, objectInput(kDestroyObject, kReservedQpn, next)).status() ==
          statusOf(err::kMlx5CmdForeignObject));
    for (const uint32_t id : {first, next}) {
        CHECK(f.as(a, objectInput(kDestroyObject, kReservedQpn, id)).status() == 0);
        CHECK(f.as(a, objectInput(kDestroyObject, kReservedQpn, id)).status() ==
              statusOf(err::kMlx5CmdBadResource));
    }

    // The ranges are bounded: a process that takes them all gets NO_RES.
    uint32_t count = 0;
    while (count <= 8192 &&
           f.as(b, objectInput(kCreateObject, kReservedQpn, 0, logRange, 0x10)).status() == 0)
        ++count;
    CHECK(count == 8192);
    CHECK(f.as(a, objectInput(kCreateObject, kReservedQpn, 0, logRange)).status() ==
          statusOf(err::kMlx5CmdNoResources));
}

// libmlx5's mlx5dv_map_ah_to_qp (docs/mlx5.md §16.3): an AH's path mapped
// to a UD QP or DCI of the process's own, a hint for congestion control.
TEST_CASE("mlx5: DEVX general objects: AH-to-QP mappings, kept, shown and a process's own",
          "[mlx5][uctx]") {
    Contexts f;
    const uint16_t a = f.newContext(), b = f.newContext();
    const Contexts::Made ma = f.objectsOf(a);
    Qp ud, rc;
    REQUIRE(f.qp(a, ma, ud, kUd).status() == 0);
    REQUIRE(f.qp(a, ma, rc).status() == 0);
    constexpr Field kQpn = field(0xe0, 32), kSl = field(0x164, 4), kSgid = field(0x1e4, 8);
    const auto mapping = [&](uint32_t qpn, uint8_t sgid = 0) {
        auto in = objectInput(kCreateObject, kAvQpMapping, 0, 0, 0x50);
        set(in, kQpn, qpn);
        set(in, kSl, 5);
        set(in, kSgid, sgid);
        for (int i = 0; i < 16; ++i)
            in[0x40 + i] = static_cast<uint8_t>(0xa0 + i); // the remote GID
        return in;
    };
    const auto made = f.as(a, mapping(ud.qpn));
    REQUIRE(made.status() == 0);
    const auto id = static_cast<uint32_t>(made.get(kObjectId));
    const auto shown = f.as(a, objectInput(kQueryObject, kAvQpMapping, id), 0x50);
    REQUIRE(shown.status() == 0);
    CHECK(shown.get(kQpn) == ud.qpn);
    CHECK(shown.get(kSl) == 5);
    CHECK(shown.get(field(0x200, 64)) == 0xa0a1a2a3a4a5a6a7);

    // Not to an RC QP, no QP, or through a GID the port has not; to
    // another context's UD QP, yes (it reaches nothing of it).
    const auto refused = [&](uint16_t uid, std::vector<uint8_t> in) {
        const auto r = f.as(uid, std::move(in));
        return r.status() == statusOf(err::kMlx5GeneralObjectBad) &&
               r.syndrome() == err::kMlx5GeneralObjectBad.syndrome;
    };
    CHECK(refused(a, mapping(rc.qpn)));
    const auto bs = f.as(b, mapping(ud.qpn));
    CHECK(bs.status() == 0);
    CHECK(refused(a, mapping(0x77777)));
    CHECK(refused(a, mapping(ud.qpn, 200)));
    CHECK(refused(a, objectInput(kModifyObject, kAvQpMapping, id)));

    // B can neither see nor end it; the QP can go first (the mapping is
    // the AH's, libmlx5 ends it with the AH); a move keeps it.
    CHECK(f.as(b, objectInput(kQueryObject, kAvQpMapping, id)).status() ==
          statusOf(err::kMlx5CmdForeignObject));
    CHECK(f.as(b, objectInput(kDestroyObject, kAvQpMapping, id)).status() ==
          statusOf(err::kMlx5CmdForeignObject));
    CHECK(
        f.as(a, objectInput(kDestroyObject, kAvQpMapping, static_cast<uint32_t>(bs.get(kObjectId))))
            .status() == statusOf(err::kMlx5CmdForeignObject));
    auto destroyQp = Mlx5Host::input(kDestroyQp);
    set(destroyQp, kHeld, ud.qpn);
    REQUIRE(f.as(a, destroyQp).status() == 0);
    REQUIRE(f.host.move() == "");
    CHECK(f.as(a, objectInput(kQueryObject, kAvQpMapping, id), 0x50).get(kQpn) == ud.qpn);
    CHECK(f.as(a, objectInput(kDestroyObject, kAvQpMapping, id)).status() == 0);
    CHECK(f.as(a, objectInput(kQueryObject, kAvQpMapping, id)).status() ==
          statusOf(err::kMlx5CmdBadResource));
}

TEST_CASE("mlx5: QUERY_CQ, QUERY_QP and QUERY_SRQ show a process its objects, but the kernel "
          "alone their doorbell records' guest physical addresses",
          "[mlx5][uctx]") {
    Contexts f;
    const uint16_t a = f.newContext(), b = f.newContext();
    const Contexts::Made ma = f.objectsOf(a);
    Qp qpA;
    REQUIRE(f.qp(a, ma, qpA).status() == 0);
    constexpr Field kCqcLogSize = field(0x80 + 0x63, 5), kCqcEqn = field(0x80 + 0xa0, 32);
    constexpr Field kCqcRecord = field(0x80 + 0x1c0, 64), kQpState = field(0xc0, 4);
    constexpr Field kQpcRecord = field(0xc0 + 0x500, 64), kQpcPd = field(0xc0 + 0x28, 24);
    constexpr uint16_t kQueryCq = 0x402;

    auto queryCq = Mlx5Host::input(kQueryCq);
    set(queryCq, kHeld, ma.cq);
    const auto mine = f.as(a, queryCq, 0x110);
    REQUIRE(mine.status() == 0);
    CHECK(mine.get(kCqcLogSize) == Mlx5Function::kLogCq);
    CHECK(mine.get(kCqcEqn) == f.eqn);
    CHECK(mine.get(kCqcRecord) == 0);
    const auto kernels = f.as(0, queryCq, 0x110);
    REQUIRE(kernels.status() == 0);
    CHECK(kernels.get(kCqcRecord) != 0);
    CHECK(f.as(b, queryCq, 0x110).status() == statusOf(err::kMlx5CmdForeignObject));
    set(queryCq, kHeld, 0xfffff);
    CHECK(f.as(0, queryCq, 0x110).status() == statusOf(err::kMlx5CmdBadResource));

    auto queryQp = Mlx5Host::input(kQueryQp);
    set(queryQp, kHeld, qpA.qpn);
    const auto qp = f.as(a, queryQp, 0x100);
    REQUIRE(qp.status() == 0);
    CHECK(qp.get(kQpState) == 0); // RESET
    CHECK(qp.get(kQpcPd) == ma.pd);
    CHECK(qp.get(kQpcRecord) == 0);
    CHECK(f.as(0, queryQp, 0x100).get(kQpcRecord) == qpA.record);
}
