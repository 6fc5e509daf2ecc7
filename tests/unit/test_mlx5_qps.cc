// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX personality's QPs (docs/mlx5.md §10): CREATE_QP and its
// checks, QP0 and QP1 port by port, the state-change commands under IBA's
// rules, QUERY_QP and DESTROY_QP; then traffic as mlx5_ib makes it: send
// WQEs of basic blocks rung through a blue-flame register, receive WQEs
// posted through the doorbell record, and the CQEs both end in.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>
#include <random>
#include <utility>

#include "conditions.hh"
#include "mlx5_checks.hh"
#include "mlx5_function.hh"
#include "mlx5_umr_wqes.hh"

using namespace pib;
using namespace pib::mlx5;

namespace {

using namespace pib::testing::mlx5qp;
using pib::testing::Mlx5Function;
constexpr uint16_t kDestroyCq = 0x401;
constexpr uint32_t kQkeyValue = Mlx5Function::kQkeyValue;

// A function set up as mlx5_ib finds it (mlx5_function.hh), each step
// required to succeed.
using namespace pib::testing::mlx5umr;

struct QpFunction : pib::testing::OwnedMlx5Host, Mlx5Function {
    QpFunction() : Mlx5Function(owned) { REQUIRE(setUp()); }
    Qp createQp(uint8_t st, std::optional<uint32_t> logStride = 0, uint32_t logRq = 2,
                uint32_t logSq = 2) {
        const auto qp = Mlx5Function::createQp(st, logStride, logRq, logSq);
        REQUIRE(qp);
        return *qp;
    }
    // Two RC QPs in RTS, each the other's peer through the port.
    std::pair<Qp, Qp> connectedRc() {
        Qp a = createQp(kRc, 1, 3, 4), b = createQp(kRc, 1, 3, 4);
        REQUIRE(toRts(a.qpn, {.qpn = b.qpn}));
        REQUIRE(toRts(b.qpn, {.qpn = a.qpn}));
        return {a, b};
    }
    uint64_t writeUdSend(Qp &qp, uint32_t remote, uint64_t addr, uint32_t length) {
        return writeSend(qp, true, {.remoteQpn = remote, .addr = addr, .length = length});
    }
};

} // namespace

TEST_CASE("mlx5: CREATE_QP checks its context and page list", "[mlx5]") {
    QpFunction f;
    Mlx5Function::Qp qp;
    const auto in = f.qpInput(kUd, 0, 2, 2, qp);
    const std::pair<Field, uint64_t> contexts[] = {
        {kSt, 5},                        // DCI: not a type the device offers
        {kSt, 3},                        // XRC: not yet (docs/mlx5.md §11)
        {kRqType, 2},                    // a reserved receive queue type
        {kRqType, 1},                    // on an SRQ that does not exist
        {kWqSignature, 1},               // WQE signatures
        {kPmState, 0},                   // path migration armed
        {kLogPageSize, 19},              // a page beyond what the MTT maps
        {kPd, 77},                       // no such PD
        {kCqnSnd, 77},                   // no such CQ
        {kCqnRcv, 77},                   // the same
        {kUarPage, 9},                   // not given out
        {kDbrAddr, f.host.alloc(8) + 4}, // misaligned
        {kDbrAddr, 0x8},                 // not RAM
    };
    for (const auto &[where, value] : contexts) {
        INFO("field at bit 0x" << std::hex << where.bit << " = 0x" << value);
        auto bad = in;
        set(bad, where, value);
        checkRefused(f.host, bad, status::kBadParam, err::kMlx5QpBadContext);
    }
    auto noSq = in; // no SQ, yet a size for it
    set(noSq, kNoSq, 1);
    checkRefused(f.host, noSq, status::kBadParam, err::kMlx5QpBadContext);
    auto noRq = in; // no RQ, yet a size for it
    set(noRq, kRqType, 3);
    checkRefused(f.host, noRq, status::kBadParam, err::kMlx5QpBadContext);
    auto bad = in;
    writeBe64(&bad[0x110], 0x1000); // aligned, not guest RAM
    checkRefused(f.host, bad, status::kBadParam, err::kMlx5QpBadPages);
    bad = in;
    writeBe64(&bad[0x110], qp.buffer + 64); // misaligned
    checkRefused(f.host, bad, status::kBadParam, err::kMlx5QpBadPages);
    // 2^7 WQEs of 256 bytes take eight pages: a list of one is short.
    Mlx5Function::Qp big;
    auto eight = f.qpInput(kUd, 4, 7, 2, big);
    eight.resize(0x118);
    checkRefused(f.host, eight, status::kBadInputLength, err::kMlx5CmdShortInput);
    // None of those made a QP or held anything.
    CHECK(f.host.traces("mlx5_qp_create") == 0);
    CHECK(f.destroy(kDestroyCq, f.cqn).status() == 0);
}

TEST_CASE("mlx5: QP0 and QP1 are made for the port without one, and stay on it", "[mlx5]") {
    QpFunction f;
    const auto qp0 = f.createQp(kQp0);
    const auto qp1 = f.createQp(kQp1);
    CHECK(qp0.qpn == 0);
    CHECK(qp1.qpn == 1);
    // The function has one port: a second QP0 or QP1 is refused.
    Mlx5Function::Qp again;
    checkRefused(f.host, f.qpInput(kQp0, 0, 2, 2, again), status::kBadParam,
                 err::kMlx5QpBadContext);
    checkRefused(f.host, f.qpInput(kQp1, 0, 2, 2, again), status::kBadParam,
                 err::kMlx5QpBadContext);
    // Naming another port in its first state change is the driver's error.
    f.host.clear();
    const auto r = f.change(kRst2Init, qp1.qpn, 2);
    CHECK(r.status() == status::kBadParam);
    CHECK(f.host.guestErrors(err::kMlx5QpBadAttr.token) == 1);
    CHECK(f.change(kRst2Init, qp1.qpn).status() == 0);
    CHECK(f.query(qp1.qpn).get(kVhcaPort) == 1);
    // Destroyed, its port may have one again.
    CHECK(f.destroy(kDestroyQp, qp0.qpn).status() == 0);
    CHECK(f.createQp(kQp0).qpn == 0);
}

TEST_CASE("mlx5: state changes follow IBA's rules; QUERY_QP reports the QP", "[mlx5]") {
    QpFunction f;
    const auto qp = f.createQp(kUd);
    CHECK(f.host.traces("mlx5_qp_create") == 1);
    auto q = f.query(qp.qpn);
    REQUIRE(q.status() == 0);
    CHECK(q.get(kState) == 0);
    CHECK(q.get(kSt) == kUd);
    CHECK(q.get(kLogRqSize) == 2);
    CHECK(q.get(kLogSqSize) == 2);
    CHECK(q.get(kCqnSnd) == f.cqn);
    CHECK(q.get(kDbrAddr) == qp.record);
    // A change from a state the QP is not in, or one IBA forbids.
    f.host.clear();
    auto r = f.change(kRtr2Rts, qp.qpn);
    CHECK(r.status() == status::kBadQpState);
    CHECK(r.syndrome() == err::kMlx5QpBadState.syndrome);
    CHECK(f.host.guestErrors(err::kMlx5QpBadState.token) == 1);
    // A port the function lacks.
    f.host.clear();
    CHECK(f.change(kRst2Init, qp.qpn, 3).status() == status::kBadParam);
    CHECK(f.host.guestErrors(err::kMlx5QpBadAttr.token) == 1);
    // And no such QP.
    CHECK(f.change(kRst2Init, qp.qpn + 1).status() == status::kBadResource);

    REQUIRE(f.toRts(qp.qpn));
    q = f.query(qp.qpn);
    CHECK(q.get(kState) == 3); // RTS
    CHECK(q.get(kQkey) == kQkeyValue);
    CHECK(q.get(kVhcaPort) == 1);
    CHECK(q.get(kNextSendPsn) == 0x123);
    CHECK(f.change(kRst2Init, qp.qpn).status() == status::kBadQpState);
    CHECK(f.change(kToErr, qp.qpn).status() == 0);
    CHECK(f.query(qp.qpn).get(kState) == 6); // ERR
    CHECK(f.change(kToRst, qp.qpn).status() == 0);
    CHECK(f.query(qp.qpn).get(kState) == 0);
    CHECK(f.host.traces("mlx5_qp_modify") == 5);

    // The QP holds its CQ and PD until DESTROY_QP.
    CHECK(f.destroy(kDestroyCq, f.cqn).status() == status::kBadResourceState);
    CHECK(f.destroy(kDestroyQp, qp.qpn).status() == 0);
    CHECK(f.destroy(kDestroyQp, qp.qpn).status() == status::kBadResource);
    CHECK(f.query(qp.qpn).status() == status::kBadResource);
    CHECK(f.destroy(kDestroyCq, f.cqn).status() == 0);
    CHECK(f.host.guestErrors(err::kMlx5QpBadContext.token) == 0);
}

TEST_CASE("mlx5: a UD send rung through blue flame arrives, every byte, with its CQEs", "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    auto sender = f.createQp(kUd);
    auto receiver = f.createQp(kUd, 1); // 32-byte receive WQEs: a data segment, a terminator
    REQUIRE(f.toRts(sender.qpn));
    REQUIRE(f.toRts(receiver.qpn));

    constexpr uint32_t kGrh = 40, kBytes = 200;
    const uint64_t source = f.host.allocRandom(4096, 7), sink = f.host.alloc(4096);
    uint32_t next = 0;
    for (int round = 0; round < 3; ++round) {
        INFO("round " << round);
        std::fill_n(f.host.at(sink), 4096, 0);
        f.postReceive(receiver, sink, kGrh + kBytes);
        const uint64_t first8 = f.writeUdSend(sender, receiver.qpn, source + round, kBytes);
        // Either half of the first blue-flame register rings it.
        f.blueFlame(first8, f.uar, 0x800 + 0x100 * (round % 2));
        const auto done = f.cqes(&next);
        REQUIRE(done.size() == 2);
        const uint8_t *send = done[0][0x3f] >> 4 == 0 ? done[0] : done[1];
        const uint8_t *recv = send == done[0] ? done[1] : done[0];
        CHECK(send[0x3f] >> 4 == 0x0); // REQ
        CHECK((readBe32(send + 0x38) & 0xffffff) == sender.qpn);
        CHECK(send[0x38] == kSend);                // a requester's CQE names the WQE's opcode
        CHECK(readBe16(send + 0x3c) == 2 * round); // the WQE's first basic block
        CHECK(recv[0x3f] >> 4 == 0x2);             // RESP_SEND
        CHECK(readBe32(recv + 0x38) == receiver.qpn);
        CHECK(readBe32(recv + 0x2c) == kGrh + kBytes);
        CHECK((readBe32(recv + 0x18) & 0xffffff) == sender.qpn);
        CHECK(std::equal(f.host.at(source + round), f.host.at(source + round) + kBytes,
                         f.host.at(sink + kGrh)));
        CHECK(std::all_of(f.host.at(sink + kGrh + kBytes), f.host.at(sink + 4096),
                          [](uint8_t b) { return b == 0; }));
    }
    CHECK(f.host.traces("mlx5_sq_doorbell") == 3);
    const auto q = f.query(sender.qpn);
    CHECK(q.get(kHwSqCounter) == 6);
    CHECK(f.query(receiver.qpn).get(kHwRqCounter) == 3);
    CHECK(f.host.guestErrors() == 0);
}

// A DEVX QP made with send_dbr_mode 1 (docs/mlx5.md §10.3), as pyverbs'
// test_mlx5_devx makes one: its SQ has no doorbell record, and the 8 bytes
// the driver writes at UAR offset 0x600 say how far it posted. The record's
// SQ counter, left wrong here, is never read.
TEST_CASE("mlx5: an SQ without a doorbell record goes as far as its doorbell says", "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    const auto caps2 = f.host.run(Mlx5Host::input(0x100, 0x20 << 1 | 1), 0x1010);
    REQUIRE(caps2.status() == 0);
    CHECK(caps2.get(field(0x80 + 0x2e1, 1)) == 1); // send_dbr_mode_no_dbr_ext
    constexpr Field kSendDbrMode = field(kQpc + 0x80, 2);
    Mlx5Function::Qp sender, plain;
    auto in = f.qpInput(kUd, 0, 2, 3, sender);
    set(in, kSendDbrMode, 2); // rung from inside the device: not offered
    checkRefused(f.host, in, status::kBadParam, err::kMlx5QpBadContext);
    set(in, kSendDbrMode, 1);
    const auto made = f.host.run(in, 16);
    REQUIRE(made.status() == 0);
    sender.qpn = static_cast<uint32_t>(made.get(kHeld));
    plain = f.createQp(kUd);
    auto receiver = f.createQp(kUd, 1, 3);
    for (uint32_t qpn : {sender.qpn, plain.qpn, receiver.qpn})
        REQUIRE(f.toRts(qpn));
    CHECK(f.query(sender.qpn).get(kSendDbrMode) == 1);
    CHECK(f.query(plain.qpn).get(kSendDbrMode) == 0);

    constexpr uint32_t kGrh = 40, kBytes = 300;
    const uint64_t source = f.host.allocRandom(4096, 17), sink = f.host.alloc(8192);
    uint32_t next = 0;
    uint64_t first8[3];
    for (uint32_t i = 0; i < 3; ++i) {
        f.postReceive(receiver, sink + 1024 * i, kGrh + kBytes);
        first8[i] = f.writeUdSend(sender, receiver.qpn, source + 100 * i, kBytes);
    }
    writeBe32(f.host.at(sender.record + 4), 0x7777); // not read
    f.host.clear();
    // Its blue-flame register, and another QP's doorbell at 0x600, ring nothing.
    f.blueFlame(first8[2], f.uar);
    f.blueFlame(f.writeUdSend(plain, receiver.qpn, source, 8), f.uar, 0x600);
    CHECK(f.host.guestErrors(err::kMlx5QpDoorbell.token) == 2);
    CHECK(f.cqes(&next).empty());
    // The last WQE's doorbell sends all three; the first's again, nothing.
    f.blueFlame(first8[2], f.uar, 0x600);
    const auto done = f.completions(&next, 6);
    REQUIRE(done.size() == 6);
    for (uint32_t i = 0; i < 3; ++i)
        CHECK(std::equal(f.host.at(source + 100 * i), f.host.at(source + 100 * i) + kBytes,
                         f.host.at(sink + 1024 * i + kGrh)));
    f.blueFlame(first8[0], f.uar, 0x600);
    CHECK(f.cqes(&next).empty());
    CHECK(f.query(sender.qpn).get(kHwSqCounter) == 6);
    // A doorbell beyond the ring moves nothing.
    uint64_t beyond = first8[2];
    reinterpret_cast<uint8_t *>(&beyond)[1] = 0x40; // WQE 0x4004
    f.blueFlame(beyond, f.uar, 0x600);
    CHECK(f.host.guestErrors(err::kMlx5QpDoorbell.token) == 3);
    CHECK(f.cqes(&next).empty());
}

// Found by UCX's ud_mlx5 dying in its wireup (ud_ep.c: a connection
// request that was not one): UCX resends a control packet as its 8-byte
// header inline and the rest behind a data segment, in one WQE; the device
// read the inline bytes and dropped the data segments, so the receiver got
// a bare header. The message is the inline bytes, then what the data
// segments gather, on UD and on RC alike.
TEST_CASE("mlx5: a send WQE's inline header and the data segments behind it go as one message",
          "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    const uint64_t source = f.host.allocRandom(8192, 9), sink = f.host.alloc(8192);
    const uint8_t header[12] = {0xc1, 0xc2, 0xc3, 0xc4, 0xc5, 0xc6,
                                0xc7, 0xc8, 0xc9, 0xca, 0xcb, 0xcc};
    // Control segment, [address vector,] an inline segment of `inlined`
    // header bytes padded to 16, then a data segment per (offset, length).
    const auto wqe = [&](uint32_t remoteQpn, uint32_t inlined,
                         std::vector<std::pair<uint32_t, uint32_t>> pieces) {
        std::vector<uint8_t> w(16);
        w[3] = kSend;
        if (remoteQpn) {
            w.resize(w.size() + 48);
            uint8_t *av = w.data() + 16;
            writeBe32(av, kQkeyValue);
            writeBe32(av + 8, 0x80000000u | remoteQpn);
            writeBe16(av + 14, kLid);
        }
        const size_t at = w.size();
        w.resize(at + (4 + inlined + 15) / 16 * 16);
        writeBe32(w.data() + at, 0x80000000u | inlined);
        std::copy_n(header, inlined, w.data() + at + 4);
        for (const auto &[offset, length] : pieces) {
            const size_t d = w.size();
            w.resize(d + 16);
            writeBe32(w.data() + d, length);
            writeBe32(w.data() + d + 4, f.lkey);
            writeBe64(w.data() + d + 8, source + offset);
        }
        return w;
    };
    // What the receiver must hold: the header's bytes, then the pieces'.
    const auto expected = [&](uint32_t inlined, std::vector<std::pair<uint32_t, uint32_t>> pieces) {
        std::vector<uint8_t> bytes(header, header + inlined);
        for (const auto &[offset, length] : pieces)
            bytes.insert(bytes.end(), f.host.at(source + offset),
                         f.host.at(source + offset) + length);
        return bytes;
    };
    uint32_t next = 0;
    SECTION("UD: an 8-byte header and 100 bytes behind it") {
        auto sender = f.createQp(kUd), receiver = f.createQp(kUd, 1);
        REQUIRE(f.toRts(sender.qpn));
        REQUIRE(f.toRts(receiver.qpn));
        constexpr uint32_t kGrh = 40;
        f.postReceive(receiver, sink, 4096);
        f.blueFlame(f.postWqe(sender, wqe(receiver.qpn, 8, {{300, 100}})), f.uar);
        const auto done = f.cqes(&next);
        REQUIRE(done.size() == 2);
        const uint8_t *recv = done[0][0x3f] >> 4 == 0x2 ? done[0] : done[1];
        CHECK(readBe32(recv + 0x2c) == kGrh + 108);
        const auto want = expected(8, {{300, 100}});
        CHECK(std::equal(want.begin(), want.end(), f.host.at(sink + kGrh)));
    }
    SECTION("RC: a 12-byte header and two pieces of 3000 bytes, over several packets") {
        auto [a, b] = f.connectedRc();
        f.postReceive(b, sink, 8192);
        const std::vector<std::pair<uint32_t, uint32_t>> pieces = {{0, 1500}, {4000, 1500}};
        f.blueFlame(f.postWqe(a, wqe(0, 12, pieces)), f.uar);
        const auto done = f.completions(&next, 2);
        REQUIRE(done.size() == 2);
        const uint8_t *recv = done[0][0x3f] >> 4 == 0x2 ? done[0] : done[1];
        CHECK(readBe32(recv + 0x2c) == 3012);
        const auto want = expected(12, pieces);
        CHECK(std::equal(want.begin(), want.end(), f.host.at(sink)));
    }
    SECTION("inline data after a data segment is refused, not read as a pointer") {
        auto [a, b] = f.connectedRc();
        f.postReceive(b, sink, 8192);
        std::vector<uint8_t> w = wqe(0, 0, {{0, 64}});
        w.erase(w.begin() + 16, w.begin() + 32); // the empty inline segment
        const size_t at = w.size();
        w.resize(at + 16);
        writeBe32(w.data() + at, 0x80000000u | 4);
        f.blueFlame(f.postWqe(a, w), f.uar);
        const auto done = f.completions(&next, 1);
        REQUIRE(done.size() == 1);
        CHECK(done[0][0x3f] >> 4 == 0xd); // REQ_ERR
        CHECK(f.host.guestErrors() == 1);
    }
    CHECK(f.host.guestErrors() <= 1);
}

TEST_CASE("mlx5: send doorbells the device cannot take are the driver's errors", "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    auto sender = f.createQp(kUd);
    REQUIRE(f.toRts(sender.qpn));
    const uint64_t buffer = f.host.alloc(4096);
    const uint32_t otherUar = f.host.allocUar();
    uint32_t next = 0;

    // The rest of a WQE copied into the register rings nothing.
    f.host.clear();
    const uint64_t first8 = f.writeUdSend(sender, sender.qpn, buffer, 8);
    f.blueFlame(first8, f.uar, 0x808);
    CHECK(f.cqes(&next).empty());
    CHECK(f.host.guestErrors() == 0);
    // Another UAR page, no such QP: nothing is sent.
    f.blueFlame(first8, otherUar);
    uint64_t stranger = first8;
    reinterpret_cast<uint8_t *>(&stranger)[6] ^= 0x40; // another QP number
    f.blueFlame(stranger, f.uar);
    CHECK(f.host.guestErrors(err::kMlx5QpDoorbell.token) == 2);
    CHECK(f.cqes(&next).empty());
    // A counter more than the ring ahead: nothing is sent.
    f.host.clear();
    writeBe32(f.host.at(sender.record + 4), 9);
    f.blueFlame(first8, f.uar);
    CHECK(f.host.guestErrors(err::kMlx5QpDoorbell.token) == 1);
    CHECK(f.cqes(&next).empty());
    // Put right, the WQE goes (to the sender itself, which has no receive
    // posted: the datagram is dropped, the send completes).
    writeBe32(f.host.at(sender.record + 4), 2);
    f.blueFlame(first8, f.uar);
    CHECK(f.cqes(&next).size() == 1);
}

TEST_CASE("mlx5: RC QPs connected through the port move SENDs, WRITEs and READs", "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    auto [a, b] = f.connectedRc();

    constexpr uint32_t kBytes = 3000; // three packets of the path's 1024 bytes
    const uint64_t mine = f.host.alloc(8192), theirs = f.host.alloc(8192);
    std::mt19937 random(11);
    std::generate_n(f.host.at(mine), 8192, [&] { return static_cast<uint8_t>(random()); });
    std::generate_n(f.host.at(theirs), 8192, [&] { return static_cast<uint8_t>(random()); });
    const auto same = [&](uint64_t x, uint64_t y, uint32_t n) {
        return std::equal(f.host.at(x), f.host.at(x) + n, f.host.at(y));
    };
    uint32_t next = 0;
    const auto completions = [&](size_t want) { return f.completions(&next, want); };

    // SEND: a's bytes land in b's receive buffer.
    f.postReceive(b, theirs + 4096, kBytes);
    f.blueFlame(f.writeSend(a, false, {.opcode = kSend, .addr = mine, .length = kBytes}), f.uar);
    auto done = completions(2);
    REQUIRE(done.size() == 2);
    CHECK(same(mine, theirs + 4096, kBytes));
    for (const uint8_t *cqe : done) // REQ on a's side, RESP_SEND on b's
        CHECK(cqe[0x3f] >> 4 == ((readBe32(cqe + 0x38) & 0xffffff) == a.qpn ? 0x0 : 0x2));

    // RDMA WRITE: into b's memory; only a sees a completion.
    f.blueFlame(
        f.writeSend(
            a, false,
            {.opcode = kRdmaWrite, .addr = mine + 100, .length = kBytes, .remoteAddr = theirs}),
        f.uar);
    done = completions(1);
    REQUIRE(done.size() == 1);
    CHECK(readBe32(done[0] + 0x38) == (uint32_t{kRdmaWrite} << 24 | a.qpn));
    CHECK(done[0][0x3f] >> 4 == 0x0);
    CHECK(same(mine + 100, theirs, kBytes));

    // RDMA READ: b's bytes come back into a's buffer.
    std::generate_n(f.host.at(theirs), kBytes, [&] { return static_cast<uint8_t>(random()); });
    f.blueFlame(
        f.writeSend(
            a, false,
            {.opcode = kRdmaRead, .addr = mine + 4096, .length = kBytes, .remoteAddr = theirs}),
        f.uar);
    done = completions(1);
    REQUIRE(done.size() == 1);
    CHECK(readBe32(done[0] + 0x38) == (uint32_t{kRdmaRead} << 24 | a.qpn));
    CHECK(readBe32(done[0] + 0x2c) == kBytes);
    CHECK(same(theirs, mine + 4096, kBytes));
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5: a NOP completes after the WQEs before it", "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    auto [a, b] = f.connectedRc();
    const uint64_t mine = f.host.allocRandom(4096, 5), theirs = f.host.alloc(4096);
    uint32_t next = 0;
    // A WRITE and a NOP rung together: the NOP's CQE comes second, with
    // the NOP's opcode (0) and WQE counter, once the WRITE is acknowledged.
    f.writeSend(a, false,
                {.opcode = kRdmaWrite, .addr = mine, .length = 4000, .remoteAddr = theirs});
    const uint32_t nopIndex = a.sqPosted;
    f.blueFlame(f.postWqe(a, std::vector<uint8_t>(16)), f.uar); // a control segment, opcode 0
    const auto done = f.completions(&next, 2);
    REQUIRE(done.size() == 2);
    CHECK(readBe32(done[0] + 0x38) == (uint32_t{kRdmaWrite} << 24 | a.qpn));
    CHECK(readBe32(done[1] + 0x38) == a.qpn); // NOP: WQE opcode 0
    CHECK(readBe16(done[1] + 0x3c) == nopIndex);
    CHECK(done[1][0x3f] >> 4 == 0x0); // a requester's CQE, no error
    CHECK(std::equal(f.host.at(mine), f.host.at(mine) + 4000, f.host.at(theirs)));
    // Alone, a NOP completes at once.
    f.blueFlame(f.postWqe(a, std::vector<uint8_t>(16)), f.uar);
    CHECK(f.completions(&next, 1).size() == 1);
    CHECK(f.host.traces("wqe_nop") == 2);
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5: a ring may start inside a larger page, as mlx5_ib places a user buffer",
          "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    auto sender = f.createQp(kUd);
    // The receiver's RQ and SQ start 4 KiB into a 16 KiB page:
    // log_page_size 2, page_offset 16 (64ths of the page).
    Mlx5Function::Qp receiver;
    auto in = f.qpInput(kUd, 0, 2, 2, receiver);
    const uint64_t page = f.host.alloc(16384, 16384);
    receiver.buffer = page + 4096;
    set(in, kLogPageSize, 2);
    set(in, kPageOffset, 16);
    writeBe64(&in[0x110], page);
    const auto made = f.host.run(in, 16);
    REQUIRE(made.status() == 0);
    receiver.qpn = static_cast<uint32_t>(made.get(kHeld));
    REQUIRE(f.toRts(sender.qpn));
    REQUIRE(f.toRts(receiver.qpn));

    constexpr uint32_t kGrh = 40, kBytes = 100;
    const uint64_t source = f.host.allocRandom(4096, 13), sink = f.host.alloc(4096);
    f.postReceive(receiver, sink, kGrh + kBytes);
    f.blueFlame(f.writeUdSend(sender, receiver.qpn, source, kBytes), f.uar);
    uint32_t next = 0;
    CHECK(f.cqes(&next).size() == 2);
    CHECK(std::equal(f.host.at(source), f.host.at(source) + kBytes, f.host.at(sink + kGrh)));
    CHECK(f.host.guestErrors() == 0);

    // A start that is not a multiple of the RQ's stride (64 bytes into a
    // 4 KiB page, 128-byte receive WQEs) is refused.
    Mlx5Function::Qp odd;
    auto oddIn = f.qpInput(kUd, 3, 2, 2, odd);
    set(oddIn, kPageOffset, 1);
    CHECK(f.host.run(oddIn, 16).status() == status::kBadParam);
    CHECK(f.host.guestErrors("mlx5-qp-bad-context") == 1);
}

// A QP of `st` whose ring (4 receive WQEs of `16 << logStride` bytes, 16
// send blocks) starts `start` bytes into the first of two 4 KiB pages that
// are not neighbours in guest memory, as a parent domain's allocator puts
// one (rdma-core's test_parent_domain): log_page_size 0, page_offset in
// 64-byte units.
static Mlx5Function::Qp createOffsetQp(QpFunction &f, uint8_t st, uint32_t logStride,
                                       uint32_t start) {
    Mlx5Function::Qp qp;
    auto in = f.qpInput(st, logStride, 2, 4, qp);
    in.resize(0x110 + 16);
    const uint64_t first = f.host.alloc(4096, 4096);
    f.host.alloc(4096, 4096); // a page between the two
    qp.pages = {first, f.host.alloc(4096, 4096)};
    qp.start = start;
    writeBe64(&in[0x110], qp.pages[0]);
    writeBe64(&in[0x118], qp.pages[1]);
    set(in, kPageOffset, start / 64);
    const auto made = f.host.run(in, 16);
    REQUIRE(made.status() == 0);
    qp.qpn = static_cast<uint32_t>(made.get(kHeld));
    return qp;
}

TEST_CASE("mlx5: a QP's ring may start at any multiple of its RQ's stride and cross 4 KiB pages",
          "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    // RQ 4 x 64 bytes from 3840: its last WQE ends the first page, the SQ
    // (16 blocks) is all in the second.
    auto sender = createOffsetQp(f, kRc, 2, 4096 - 256);
    // RQ 4 x 16 bytes from 3968: the SQ's first block ends the first page.
    auto receiver = createOffsetQp(f, kRc, 0, 4096 - 128);
    REQUIRE(f.toRts(sender.qpn, {.qpn = receiver.qpn}));
    REQUIRE(f.toRts(receiver.qpn, {.qpn = sender.qpn}));

    const uint64_t source = f.host.allocRandom(8192, 29), sink = f.host.alloc(8192);
    uint32_t next = 0;
    // 40 rounds: both RQs and SQs wrap, and the function moves half-way
    // (a saved state gives each ring's start as page_offset again).
    for (uint32_t round = 0; round < 40; ++round) {
        if (round == 20)
            REQUIRE(f.host.move() == "");
        const uint32_t bytes = 100 + 200 * round;
        std::memset(f.host.at(sink), 0, 8192);
        f.postReceive(receiver, sink, 8192);
        f.blueFlame(f.writeSend(sender, false, {.opcode = kSend, .addr = source, .length = bytes}),
                    f.uar);
        REQUIRE(f.completions(&next, 2).size() == 2);
        CHECK(std::equal(f.host.at(source), f.host.at(source) + bytes, f.host.at(sink)));
        std::memset(f.host.at(sink), 0, 8192);
        f.blueFlame(f.writeSend(receiver, false,
                                {.opcode = kRdmaWrite,
                                 .addr = source + 8192 - bytes,
                                 .length = bytes,
                                 .remoteAddr = sink}),
                    f.uar);
        REQUIRE(f.completions(&next, 1).size() == 1);
        CHECK(std::equal(f.host.at(source + 8192 - bytes), f.host.at(source) + 8192,
                         f.host.at(sink)));
    }
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5: a QP on an SRQ takes its WQEs in the free list's order", "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    const auto madeSrq = f.createSrq(3, {0, 5, 2, 7, 1, 3, 4, 6});
    REQUIRE(madeSrq);
    auto srq = *madeSrq;
    auto sender = f.createQp(kUd);
    // rq_type 1: the SRQ's; no RQ of its own.
    const auto made = f.createQpOnSrq(kUd, srq.srqn);
    REQUIRE(made);
    const auto receiver = *made;
    CHECK(f.query(receiver.qpn).get(kRqType) == 1);
    REQUIRE(f.toRts(sender.qpn));
    REQUIRE(f.toRts(receiver.qpn));

    constexpr uint32_t kGrh = 40, kBytes = 100;
    const uint64_t source = f.host.allocRandom(4096, 5), sinks = f.host.alloc(4096);
    for (uint32_t i = 0; i < 3; ++i)
        f.postSrq(srq, sinks + 1024 * i, kGrh + kBytes);
    uint32_t next = 0;
    const uint16_t slots[] = {0, 5, 2};
    for (uint32_t i = 0; i < 3; ++i) {
        INFO("message " << i);
        f.blueFlame(f.writeUdSend(sender, receiver.qpn, source + 7 * i, kBytes), f.uar);
        const auto done = f.cqes(&next);
        REQUIRE(done.size() == 2);
        const uint8_t *recv = done[0][0x3f] >> 4 == 0x2 ? done[0] : done[1];
        CHECK(recv[0x3f] >> 4 == 0x2);
        CHECK(readBe16(recv + 0x3c) == slots[i]); // the slot the free list gave
        CHECK(std::equal(f.host.at(source + 7 * i), f.host.at(source + 7 * i) + kBytes,
                         f.host.at(sinks + 1024 * i + kGrh)));
    }
    CHECK(f.host.guestErrors() == 0);
    // The SRQ is held until its QP goes.
    auto destroySrq = Mlx5Host::input(0x701);
    set(destroySrq, kHeld, srq.srqn);
    CHECK(f.host.run(destroySrq, 16).status() == status::kBadResourceState);
    CHECK(f.destroy(kDestroyQp, receiver.qpn).status() == 0);
    CHECK(f.host.run(destroySrq, 16).status() == 0);
}

TEST_CASE("mlx5: UMR WQEs register free keys for RDMA and invalidate them", "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    auto [a, b] = f.connectedRc();
    uint32_t next = 0;
    const auto completions = [&](size_t want) { return f.completions(&next, want); };
    const uint64_t source = f.host.allocRandom(16384, 3);

    for (const bool inlined : {true, false}) {
        INFO((inlined ? "inline page list" : "page list in memory"));
        // b's key over four scattered pages from an I/O virtual address.
        const uint32_t key = freeKey(f, 8);
        REQUIRE(key);
        const std::vector<uint64_t> pages = {f.host.alloc(4096), f.host.alloc(8192) + 4096,
                                             f.host.alloc(4096), f.host.alloc(4096)};
        const uint64_t listAddr = f.host.alloc(64, 64);
        constexpr uint64_t kIova = 0x7f0000000000, kLength = 3 * 4096 + 100;
        const auto umr = inlined ? registration(key, kIova, kLength, pages)
                                 : registration(key, kIova, kLength, pages, f.host.at(listAddr),
                                                listAddr, f.lkey);
        f.blueFlame(f.postWqe(b, umr), f.uar);
        auto done = completions(1);
        REQUIRE(done.size() == 1);
        CHECK(done[0][0x3f] >> 4 == 0x0);
        CHECK(done[0][0x38] == 0x25); // UMR: the driver's own record says which

        // a writes 10000 bytes at iova + 50 through the key: they land
        // across the pages.
        constexpr uint32_t kBytes = 10000, kAt = 50;
        f.blueFlame(f.writeSend(a, false,
                                {.opcode = kRdmaWrite,
                                 .addr = source,
                                 .length = kBytes,
                                 .remoteAddr = kIova + kAt,
                                 .rkey = key}),
                    f.uar);
        done = completions(1);
        REQUIRE(done.size() == 1);
        CHECK(done[0][0x3f] >> 4 == 0x0);
        for (uint32_t off = 0; off < kBytes;) {
            const uint64_t at = kAt + off;
            const uint32_t n = std::min<uint32_t>(kBytes - off, 4096 - at % 4096);
            CHECK(std::equal(f.host.at(source + off), f.host.at(source + off) + n,
                             f.host.at(pages[at / 4096] + at % 4096)));
            off += n;
        }
        CHECK(f.host.guestErrors() == 0);

        // Invalidated, the key takes no more writes: a's WRITE fails with
        // a remote access error.
        f.blueFlame(f.postWqe(b, invalidation(key)), f.uar);
        REQUIRE(completions(1).size() == 1);
        if (!inlined) {
            f.blueFlame(f.writeSend(a, false,
                                    {.opcode = kRdmaWrite,
                                     .addr = source,
                                     .length = 8,
                                     .remoteAddr = kIova,
                                     .rkey = key}),
                        f.uar);
            done = completions(1);
            REQUIRE(done.size() == 1);
            CHECK(done[0][0x3f] >> 4 == 0xd); // REQ_ERR
            CHECK(done[0][0x37] == 0x13);     // remote access error
        }
    }
}

TEST_CASE("mlx5: free keys hold no memory until a UMR maps them", "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    // What mlx5_ib's MR cache makes at probe: thousands of free keys, the
    // largest of 2^17 pages. Sixty-four of those alone are eight times
    // the MTT; as keys that hold nothing yet, they are made.
    std::vector<uint32_t> keys;
    for (int i = 0; i < 64; ++i)
        keys.push_back(freeKey(f, 1u << 17));
    REQUIRE(keys.back());
    auto in = Mlx5Host::input(0x200, 0, 0x110);
    set(in, field(0x81, 1), 1);
    set(in, field(0x90, 1), 1);
    set(in, field(0x95, 1), 1);
    set(in, field(0x96, 2), 1);
    set(in, field(0xa0, 24), 0xffffff);
    set(in, field(0xe8, 24), f.pd);
    set(in, field(0x220, 32), (1u << 19) + 1); // 2^20 + 2 pages: beyond any key
    CHECK(f.host.run(in, 16).status() == 0x3); // BAD_PARAM

    // One of them maps two pages, is invalidated and maps one: a READ
    // through it reads that one.
    auto [a, b] = f.connectedRc();
    uint32_t next = 0;
    const uint64_t first = f.host.alloc(4096), second = f.host.alloc(4096);
    std::fill_n(f.host.at(first), 4096, 0x11);
    std::fill_n(f.host.at(second), 4096, 0x22);
    f.blueFlame(f.postWqe(b, registration(keys[5], 0x10000, 8192, {first, second})), f.uar);
    REQUIRE(f.completions(&next, 1).size() == 1);
    f.blueFlame(f.postWqe(b, invalidation(keys[5])), f.uar);
    REQUIRE(f.completions(&next, 1).size() == 1);
    f.blueFlame(f.postWqe(b, registration(keys[5], 0x10000, 4096, {second})), f.uar);
    REQUIRE(f.completions(&next, 1).size() == 1);
    const uint64_t sink = f.host.alloc(4096);
    f.blueFlame(f.writeSend(a, false,
                            {.opcode = kRdmaRead,
                             .addr = sink,
                             .length = 4096,
                             .remoteAddr = 0x10000,
                             .rkey = keys[5]}),
                f.uar);
    auto done = f.completions(&next, 1);
    REQUIRE(done.size() == 1);
    CHECK(done[0][0x3f] >> 4 == 0x0);
    CHECK(
        std::all_of(f.host.at(sink), f.host.at(sink) + 4096, [](uint8_t b) { return b == 0x22; }));
    // Beyond the one page it maps now, the key reaches nothing.
    f.blueFlame(f.writeSend(a, false,
                            {.opcode = kRdmaRead,
                             .addr = sink,
                             .length = 8,
                             .remoteAddr = 0x10000 + 4096,
                             .rkey = keys[5]}),
                f.uar);
    done = f.completions(&next, 1);
    REQUIRE(done.size() == 1);
    CHECK(done[0][0x3f] >> 4 == 0xd);
    for (uint32_t key : keys) {
        auto destroy = Mlx5Host::input(0x202, 0, 0x10);
        set(destroy, kHeld, key >> 8);
        CHECK(f.host.run(destroy, 16).status() == 0);
    }
}

TEST_CASE("mlx5: a receive posted to a QP in the error state is flushed unrung", "[mlx5]") {
    // ib_drain_rq: the QP goes to the error state, a receive WQE is posted
    // (its counter in the doorbell record; nothing rings), and the driver
    // waits for its flushed completion.
    QpFunction f;
    REQUIRE(f.activatePort());
    auto [a, b] = f.connectedRc();
    REQUIRE(f.change(kToErr, a.qpn).status() == 0);
    uint32_t next = 0;
    f.host.runScheduled();
    CHECK(f.cqes(&next).empty());
    f.host.advance(200'000'000); // the record's reads back off: 50 ms apart at most
    const uint64_t buffer = f.host.alloc(4096);
    f.postReceive(a, buffer, 64);
    CHECK(f.cqes(&next).empty()); // not before the record is read again
    f.host.advance(50'000'000);
    f.host.runScheduled();
    const auto done = f.cqes(&next);
    REQUIRE(done.size() == 1);
    CHECK(done[0][0x3f] >> 4 == 0xe);     // a responder error CQE
    CHECK(done[0][0x37] == 0x5);          // flushed
    CHECK(readBe16(done[0] + 0x3c) == 0); // the WQE's slot
    // Back to reset, the QP reads no record: nothing more is flushed.
    REQUIRE(f.change(kToRst, a.qpn).status() == 0);
    f.postReceive(a, buffer, 64);
    f.host.advance(100'000'000);
    f.host.runScheduled();
    CHECK(f.cqes(&next).empty());
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5: an SQ behind an RQ that ends within a page is read to its end", "[mlx5]") {
    // ib_srp's and nvme-rdma's QPs: an RQ of 2 KiB, an SQ of 1024 basic
    // blocks behind it, 17 pages in all; the last basic blocks of the SQ
    // are on the 17th.
    QpFunction f;
    REQUIRE(f.activatePort());
    auto sender = f.createQp(kUd, 3, 4, 10); // 16 receive WQEs of 128 bytes
    auto receiver = f.createQp(kUd);
    REQUIRE(f.toRts(sender.qpn));
    REQUIRE(f.toRts(receiver.qpn));
    const uint64_t buffer = f.host.alloc(4096);
    uint32_t next = 0, completed = 0;
    for (uint32_t i = 0; i < 1100; ++i) { // a UD send takes two blocks: past the ring's end
        f.blueFlame(f.writeUdSend(sender, receiver.qpn, buffer, 8), f.uar);
        for (const uint8_t *cqe : f.cqes(&next)) {
            CHECK(cqe[0x3f] >> 4 == 0x0);
            ++completed;
        }
    }
    CHECK(completed == 1100);
    CHECK(f.host.guestErrors() == 0);
}

namespace {

// Q counters (docs/mlx5.md §4.6): ALLOC_Q_COUNTER, DEALLOC_Q_COUNTER and
// QUERY_Q_COUNTER, and some of query_q_counter_out's counters.
constexpr uint16_t kAllocQCounter = 0x771, kDeallocQCounter = 0x772, kQueryQCounter = 0x773;
constexpr Field kCounterSet = field(0x58, 8); // alloc_q_counter_out, dealloc_q_counter_in
constexpr Field kRxWrites = field(0x080, 32), kRxReads = field(0x0c0, 32),
                kOutOfBuffer = field(0x180, 32), kRnrNakRetryErr = field(0x240, 32),
                kReqRnrRetriesExceeded = field(0x380, 32);

uint32_t allocQCounter(QpFunction &f) {
    const auto r = f.host.run(Mlx5Host::input(kAllocQCounter), 16);
    REQUIRE(r.status() == 0);
    return static_cast<uint32_t>(r.get(kCounterSet));
}

uint8_t deallocQCounter(QpFunction &f, uint32_t set) {
    auto in = Mlx5Host::input(kDeallocQCounter);
    pib::mlx5::set(in, kCounterSet, set);
    return f.host.run(in, 16).status();
}

Mlx5Host::Reply queryQCounter(QpFunction &f, uint32_t set, bool clear = false) {
    auto in = Mlx5Host::input(kQueryQCounter, 0, 0x20);
    pib::mlx5::set(in, field(0xf8, 8), set);
    pib::mlx5::set(in, field(0xc0, 1), clear);
    return f.host.run(in, 0x100);
}

} // namespace

TEST_CASE("mlx5: Q counters count what the QPs bound to them do", "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    const uint32_t one = allocQCounter(f), two = allocQCounter(f);
    CHECK(one != 0);
    CHECK(two != one);
    // a counts into one, b into two, from RST2INIT on.
    Mlx5Function::Qp a = f.createQp(kRc, 1, 3, 4), b = f.createQp(kRc, 1, 3, 4);
    REQUIRE(f.toRts(a.qpn, {.qpn = b.qpn, .counterSet = one}));
    REQUIRE(f.toRts(b.qpn, {.qpn = a.qpn, .counterSet = two}));
    CHECK(f.query(a.qpn).get(kCounterSetId) == one);
    CHECK(f.query(b.qpn).get(kCounterSetId) == two);
    // b WRITEs twice and READs once from a: a's responder counts them.
    const uint64_t mine = f.host.allocRandom(4096, 9), theirs = f.host.alloc(4096);
    uint32_t next = 0;
    for (int i = 0; i < 2; ++i)
        f.blueFlame(
            f.writeSend(b, false,
                        {.opcode = kRdmaWrite, .addr = mine, .length = 1000, .remoteAddr = theirs}),
            f.uar);
    f.blueFlame(
        f.writeSend(
            b, false,
            {.opcode = kRdmaRead, .addr = mine + 2048, .length = 500, .remoteAddr = theirs}),
        f.uar);
    REQUIRE(f.completions(&next, 3).size() == 3);
    auto counts = queryQCounter(f, one);
    REQUIRE(counts.status() == 0);
    CHECK(counts.get(kRxWrites) == 2);
    CHECK(counts.get(kRxReads) == 1);
    CHECK(queryQCounter(f, two).get(kRxWrites) == 0); // b asked; it took nothing

    // A set the QPs hold is not deallocated; a rebinding in RTS frees it.
    f.host.clear();
    CHECK(deallocQCounter(f, one) == status::kBadResourceState);
    CHECK(f.host.guestErrors(err::kMlx5CmdInUse.token) == 1);
    REQUIRE(f.change(kRts2Rts, a.qpn, 1, {.qpn = b.qpn, .counterSet = two, .optional = 1u << 25})
                .status() == 0);
    CHECK(f.query(a.qpn).get(kCounterSetId) == two);
    CHECK(deallocQCounter(f, one) == 0);
    CHECK(deallocQCounter(f, one) == status::kBadResource);
    CHECK(queryQCounter(f, one).status() == status::kBadResource);
    // Binding a QP to a set that does not exist is refused, and binds nothing.
    Mlx5Function::Qp c = f.createQp(kRc, 1, 3, 4);
    f.host.clear();
    CHECK(f.change(kRst2Init, c.qpn, 1, {.counterSet = one}).status() == status::kBadParam);
    CHECK(f.host.guestErrors(err::kMlx5QpBadAttr.token) == 1);
    CHECK(f.query(c.qpn).get(kState) == 0); // still RESET

    // A SEND that finds no receive WQE: b answers an RNR NAK, and a, with
    // no RNR retries, completes it in error. Both now count into two.
    f.blueFlame(f.writeSend(a, false, {.opcode = kSend, .addr = mine, .length = 64}), f.uar);
    REQUIRE(f.completions(&next, 1).size() == 1);
    counts = queryQCounter(f, two, true); // and clear
    CHECK(counts.get(kOutOfBuffer) == 1);
    CHECK(counts.get(kRnrNakRetryErr) == 1);
    CHECK(counts.get(kReqRnrRetriesExceeded) == 1);
    CHECK(queryQCounter(f, two).get(kOutOfBuffer) == 0); // cleared
    // Gone with their QPs, they hold it no more.
    CHECK(deallocQCounter(f, two) == status::kBadResourceState);
    for (uint32_t qpn : {a.qpn, b.qpn, c.qpn})
        CHECK(f.destroy(kDestroyQp, qpn).status() == 0);
    CHECK(deallocQCounter(f, two) == 0);
}

namespace {

// INIT2INIT with the QP context extension, as libmlx5's qp_enable_mmo
// sends it (rdma-core's mlx5_ifc.h layout): DMA copies on.
Mlx5Host::Reply enableDmaCopies(QpFunction &f, uint32_t qpn) {
    auto in = Mlx5Host::input(0x50e, 0, 0x1d0);
    set(in, kHeld, qpn);
    set(in, field(0x40, 1), 1);                  // qpc_ext
    set(in, field(0x840, 64), uint64_t{1} << 3); // opt_param_mask_95_32: MMO
    set(in, field(0x882, 1), 1);                 // qpc_data_ext.mmo
    return f.host.run(in, 16);
}

// A DMA copy WQE (MMO, opcode modifier 1): control, metadata, source and
// destination segments.
std::vector<uint8_t> dmaCopy(uint32_t srcKey, uint64_t src, uint32_t dstKey, uint64_t dst,
                             uint32_t length) {
    std::vector<uint8_t> wqe(64);
    wqe[0] = 0x1;  // MLX5_OPC_MOD_MMO_DMA
    wqe[3] = 0x2f; // MLX5_OPCODE_MMO
    writeBe32(&wqe[32], length);
    writeBe32(&wqe[36], srcKey);
    writeBe64(&wqe[40], src);
    writeBe32(&wqe[48], length);
    writeBe32(&wqe[52], dstKey);
    writeBe64(&wqe[56], dst);
    return wqe;
}

} // namespace

TEST_CASE("mlx5: DMA copies (MMO) move a buffer between local keys, once INIT2INIT enabled them, "
          "and only where the keys allow",
          "[mlx5]") {
    QpFunction f;
    REQUIRE(f.activatePort());
    // The capability libmlx5 reads: dma_mmo_qp, and the largest copy.
    const auto caps = f.host.run(Mlx5Host::input(0x100, 1), 0x1010);
    CHECK(caps.get(field(0x80 + 0x748, 1)) == 1);
    CHECK(caps.get(field(0x80 + 0x6b, 5)) == 20);
    // block_lb_mc: a QP never receives its own multicast (the core's rule,
    // test_multicast.cc), so the device offers what a context asks.
    CHECK(caps.get(field(0x80 + 0x228, 1)) == 1);

    Mlx5Function::Qp a = f.createQp(kRc, 1, 3, 4), b = f.createQp(kRc, 1, 3, 4);
    REQUIRE(f.change(kRst2Init, a.qpn).status() == 0);
    REQUIRE(enableDmaCopies(f, a.qpn).status() == 0);
    REQUIRE(f.change(kInit2Rtr, a.qpn, 1, {.qpn = b.qpn}).status() == 0);
    REQUIRE(f.change(kRtr2Rts, a.qpn, 1, {.qpn = b.qpn}).status() == 0);
    REQUIRE(f.toRts(b.qpn, {.qpn = a.qpn}));
    // Only INIT2INIT takes the extension, and an RC QP's.
    CHECK(enableDmaCopies(f, b.qpn).status() != 0);

    uint32_t next = 0;
    const uint64_t source = f.host.allocRandom(8192, 0xc0b1), sink = f.host.alloc(8192);
    f.blueFlame(f.postWqe(a, dmaCopy(f.lkey, source + 3, f.lkey, sink + 5, 6000)), f.uar);
    auto done = f.completions(&next, 1);
    REQUIRE(done.size() == 1);
    CHECK(done[0][0x3f] >> 4 == 0x0);                                  // a requester's CQE
    CHECK(readBe32(done[0] + 0x38) == (uint32_t{0x2f} << 24 | a.qpn)); // the MMO's
    CHECK(std::equal(f.host.at(source + 3), f.host.at(source + 3) + 6000, f.host.at(sink + 5)));
    CHECK(f.host.traces("wqe_dma_copy") == 1);

    // A destination key without local write: a local protection error
    // (syndrome 0x4), the QP in error, nothing written.
    auto key = Mlx5Host::input(0x200, 0, 0x110);
    set(key, field(0x95, 1), 1); // lr only
    set(key, field(0xa0, 24), 0xffffff);
    set(key, field(0xe0, 1), 1); // length64, access mode PA
    set(key, field(0xe8, 24), f.pd);
    const auto readOnly = f.host.run(key, 16);
    REQUIRE(readOnly.status() == 0);
    const uint32_t readOnlyKey = static_cast<uint32_t>(readOnly.get(kHeld)) << 8;
    const uint64_t untouched = f.host.alloc(4096);
    f.blueFlame(f.postWqe(a, dmaCopy(f.lkey, source, readOnlyKey, untouched, 100)), f.uar);
    done = f.completions(&next, 1);
    REQUIRE(done.size() == 1);
    CHECK(done[0][0x3f] >> 4 == 0xd); // an error CQE
    CHECK(done[0][0x37] == 0x04);     // local protection
    CHECK(std::all_of(f.host.at(untouched), f.host.at(untouched) + 100,
                      [](uint8_t byte) { return byte == 0; }));

    // Beyond 2^20 bytes, a length error.
    Mlx5Function::Qp d = f.createQp(kRc, 1, 3, 4);
    REQUIRE(f.change(kRst2Init, d.qpn).status() == 0);
    REQUIRE(enableDmaCopies(f, d.qpn).status() == 0);
    REQUIRE(f.change(kInit2Rtr, d.qpn, 1, {.qpn = b.qpn}).status() == 0);
    REQUIRE(f.change(kRtr2Rts, d.qpn, 1, {.qpn = b.qpn}).status() == 0);
    f.blueFlame(f.postWqe(d, dmaCopy(f.lkey, source, f.lkey, sink, (1u << 20) + 1)), f.uar);
    done = f.completions(&next, 1);
    REQUIRE(done.size() == 1);
    CHECK(done[0][0x37] == 0x01); // local length

    // On a QP that did not enable them, a DMA copy is an operation error.
    Mlx5Function::Qp c = f.createQp(kRc, 1, 3, 4);
    REQUIRE(f.toRts(c.qpn, {.qpn = b.qpn}));
    f.blueFlame(f.postWqe(c, dmaCopy(f.lkey, source, f.lkey, sink, 100)), f.uar);
    done = f.completions(&next, 1);
    REQUIRE(done.size() == 1);
    CHECK(done[0][0x37] == 0x02); // local QP operation
    CHECK(f.host.guestErrors() > 0);
}
