// SPDX-License-Identifier: GPL-2.0-or-later
// XRC on the ConnectX personality (docs/mlx5.md §9, §10): XRC SRQs by
// CREATE_XRC_SRQ, an XRC TGT QP (no SQ, no ring) and an XRC INI QP whose
// send WQEs carry an XRC segment naming the remote XRC SRQ. A SEND
// crosses, lands in the XRC SRQ's buffer and completes on its CQ with
// the SRQ's number; one naming an SRQ of another domain is refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <random>

#include "mlx5_checks.hh"
#include "mlx5_function.hh"

using namespace pib;
using namespace pib::mlx5;

namespace {

using namespace pib::testing::mlx5qp;
using pib::testing::Mlx5Function;
constexpr uint8_t kXrc = 0x3;
constexpr uint16_t kCreateXrcSrq = 0x705, kDestroyXrcSrq = 0x706, kQueryXrcSrq = 0x707,
                   kArmXrcSrq = 0x708;

struct XrcFunction : pib::testing::OwnedMlx5Host, Mlx5Function {
    XrcFunction() : Mlx5Function(owned) {
        REQUIRE(setUp());
        REQUIRE(activatePort());
        const auto made = host.run(Mlx5Host::input(0x80e), 16); // ALLOC_XRCD
        REQUIRE(made.status() == 0);
        xrcd = static_cast<uint32_t>(made.get(kHeld));
    }
    // The XRC TGT QP as create_xrc_tgt_qp makes it: no SQ, the driver's
    // default SRQ named, no page list, no doorbell record (dbr_addr 0: a
    // QP is no less there for it); to RTR from `initiator`.
    Qp target(uint32_t srqn, uint32_t initiator) {
        auto in = Mlx5Host::input(kCreateQp, 0, 0x110);
        set(in, kSt, kXrc);
        set(in, kPmState, 3);
        set(in, kPd, pd);
        set(in, kNoSq, 1);
        set(in, kRqType, 1);
        set(in, kSrqn, srqn);
        set(in, kXrcd, xrcd);
        set(in, kCqnSnd, cqn);
        set(in, kCqnRcv, cqn);
        Qp qp;
        const auto r = host.run(in, 16);
        REQUIRE(r.status() == 0);
        qp.qpn = static_cast<uint32_t>(r.get(kHeld));
        REQUIRE(change(kRst2Init, qp.qpn).status() == 0);
        REQUIRE(change(kInit2Rtr, qp.qpn, 1, {.qpn = initiator}).status() == 0);
        return qp;
    }
    // An XRC INI QP: an SQ, the default SRQ named as the driver does.
    Qp initiator(uint32_t srqn) {
        Qp qp;
        auto in = qpInput(kXrc, std::nullopt, 0, 4, qp);
        set(in, kRqType, 1);
        set(in, kSrqn, srqn);
        const auto r = host.run(in, 16);
        REQUIRE(r.status() == 0);
        qp.qpn = static_cast<uint32_t>(r.get(kHeld));
        return qp;
    }
    // A SEND of `length` bytes at `addr` to XRC SRQ `srqn`: the XRC
    // segment after the control segment (mlx5_wqe_xrc_seg).
    uint64_t xrcSend(Qp &qp, uint32_t srqn, uint64_t addr, uint32_t length) {
        std::vector<uint8_t> wqe(48);
        wqe[3] = kSend;
        writeBe32(&wqe[16], srqn);
        writeBe32(&wqe[32], length);
        writeBe32(&wqe[36], lkey);
        writeBe64(&wqe[40], addr);
        return postWqe(qp, wqe);
    }
    uint32_t xrcd = 0;
};

} // namespace

TEST_CASE("mlx5: an XRC INI QP sends through an XRC TGT QP into an XRC SRQ", "[mlx5]") {
    XrcFunction f;
    const auto srq = f.createSrq(3, {0, 1, 2, 3, 4, 5, 6, 7}, kCreateXrcSrq, f.xrcd);
    const auto otherDomain = f.createSrq(3, {0, 1, 2, 3, 4, 5, 6, 7}); // CREATE_SRQ, its own XRCD
    REQUIRE((srq && otherDomain));
    auto xsrq = *srq, other = *otherDomain;
    auto ini = f.initiator(xsrq.srqn);
    auto tgt = f.target(xsrq.srqn, ini.qpn);
    REQUIRE(f.toRts(ini.qpn, {.qpn = tgt.qpn}));
    CHECK(f.query(tgt.qpn).get(kSt) == kXrc);
    CHECK(f.query(tgt.qpn).get(kXrcd) == f.xrcd);
    CHECK(f.query(ini.qpn).get(kSt) == kXrc);
    auto query = Mlx5Host::input(kQueryXrcSrq);
    set(query, kHeld, xsrq.srqn);
    CHECK(f.host.run(query, 0x50).get(field(0x80 + 0x28, 24)) == f.xrcd);
    auto arm = Mlx5Host::input(kArmXrcSrq, 1);
    set(arm, kHeld, xsrq.srqn);
    set(arm, field(0x70, 16), 2);
    CHECK(f.host.run(arm, 16).status() == 0);

    constexpr uint32_t kBytes = 3000;
    const uint64_t source = f.host.alloc(4096), sink = f.host.alloc(4096);
    std::mt19937 random(13);
    std::generate_n(f.host.at(source), kBytes, [&] { return static_cast<uint8_t>(random()); });
    f.postSrq(xsrq, sink, 4096);
    f.blueFlame(f.xrcSend(ini, xsrq.srqn, source, kBytes), f.uar);
    uint32_t next = 0;
    const auto done = f.completions(&next, 2);
    REQUIRE(done.size() == 2);
    const uint8_t *recv = done[0][0x3f] >> 4 == 0x2 ? done[0] : done[1];
    const uint8_t *sent = recv == done[0] ? done[1] : done[0];
    CHECK(sent[0x3f] >> 4 == 0x0);
    CHECK(recv[0x3f] >> 4 == 0x2);
    CHECK(readBe32(recv + 0x2c) == kBytes);
    CHECK((readBe32(recv + 0x38) & 0xffffff) == tgt.qpn);
    CHECK((readBe32(recv + 0x30) & 0xffffff) == xsrq.srqn); // the XRC SRQ it landed in
    CHECK(std::equal(f.host.at(source), f.host.at(source) + kBytes, f.host.at(sink)));
    CHECK(f.host.guestErrors() == 0);

    // An SRQ of another XRC domain: the responder refuses, the INI QP's
    // SEND completes in error.
    f.postSrq(other, sink, 4096);
    f.blueFlame(f.xrcSend(ini, other.srqn, source, 8), f.uar);
    const auto refused = f.completions(&next, 1);
    REQUIRE(refused.size() == 1);
    CHECK(refused[0][0x3f] >> 4 == 0xd);

    // No QP holds an XRC SRQ (messages name it): it goes first, then the
    // QPs, then the domain they held.
    auto destroy = Mlx5Host::input(kDestroyXrcSrq);
    set(destroy, kHeld, xsrq.srqn);
    CHECK(f.host.run(destroy, 16).status() == 0);
    CHECK(f.destroy(kDestroyQp, tgt.qpn).status() == 0);
    CHECK(f.destroy(kDestroyQp, ini.qpn).status() == 0);
    auto dealloc = Mlx5Host::input(0x80f);
    set(dealloc, kHeld, f.xrcd);
    CHECK(f.host.run(dealloc, 16).status() == 0);
}

TEST_CASE("mlx5: XRC QPs and SRQs the device cannot take are refused", "[mlx5]") {
    XrcFunction f;
    const auto srq = f.createSrq(3, {0, 1, 2, 3, 4, 5, 6, 7}, kCreateXrcSrq, f.xrcd);
    REQUIRE(srq);
    // A TGT QP in a domain that does not exist, one with an RQ.
    auto in = Mlx5Host::input(kCreateQp, 0, 0x110);
    set(in, kSt, kXrc);
    set(in, kPmState, 3);
    set(in, kPd, f.pd);
    set(in, kNoSq, 1);
    set(in, kRqType, 1);
    set(in, kSrqn, srq->srqn);
    set(in, kXrcd, f.xrcd + 7);
    set(in, kCqnSnd, f.cqn);
    set(in, kCqnRcv, f.cqn);
    set(in, kDbrAddr, f.host.alloc(64, 64));
    CHECK(f.host.run(in, 16).status() == 0x3);
    Mlx5Function::Qp qp;
    CHECK(f.host.run(f.qpInput(kXrc, 1, 2, 2, qp), 16).status() == 0x3); // an INI QP with an RQ
    // An XRC SRQ with a cyclic receive queue, or its record in a umem.
    for (const uint32_t bit : {0x80u + 0x24, 0x80u + 0x47, 0x2e0u}) {
        INFO("bit 0x" << std::hex << bit);
        auto x = Mlx5Host::input(kCreateXrcSrq, 0, 0x118);
        set(x, field(0x80 + 0x04, 4), 3);
        set(x, field(0x80 + 0x25, 3), 1);
        set(x, field(0x80 + 0x28, 24), f.xrcd);
        set(x, field(0x80 + 0x48, 24), f.cqn);
        set(x, field(0x80 + 0xc8, 24), f.pd);
        set(x, field(0x80 + 0x140, 64), f.host.alloc(64, 64));
        writeBe64(&x[0x110], f.host.alloc(4096));
        set(x, field(bit, 1), 1);
        CHECK(f.host.run(x, 16).status() == 0x3);
    }
    CHECK(f.host.guestErrors("mlx5-qp-bad-context") == 2);
    CHECK(f.host.guestErrors("mlx5-srq-bad-context") == 3);
}
