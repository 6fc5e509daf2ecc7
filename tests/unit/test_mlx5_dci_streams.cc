// SPDX-License-Identifier: GPL-2.0-or-later
// DCI streams on the ConnectX personality (docs/mlx5.md §15.4): a DCI
// made with log_num_dci_stream_channels and log_num_dci_errored_streams,
// whose send WQEs name a stream. An error fails its stream only: the
// stream's later WQEs are flushed, the others go on, the DCI stays in RTS
// until 2^n streams are in error at once; RTS2RTS's context extension
// resets a stream in error, and only such a stream.
#include <catch2/catch.hpp>

#include <algorithm>

#include "limits.hh"
#include "mlx5_checks.hh"
#include "mlx5_dc_function.hh"

using namespace pib;
using namespace pib::mlx5;

namespace {

using namespace pib::testing::mlx5qp;
using pib::testing::Mlx5Function;
constexpr uint8_t kDci = 0x5;
constexpr uint64_t kKey = 0x1ee7a330;
constexpr Field kLogStreams = field(kQpc + 0x3e3, 5);
constexpr Field kLogErrored = field(kQpc + 0x403, 5);
constexpr uint8_t kRts = 3, kErr = 6;
// CQE syndromes.
constexpr uint8_t kLocProt = 0x4, kFlushed = 0x5, kRemAccess = 0x13;

struct StreamFunction : pib::testing::DcFunction {
    StreamFunction() : target(dct(kKey)) {}
    std::vector<uint8_t> dciInput(uint64_t logStreams, uint64_t logErrored, Qp &qp) {
        auto in = qpInput(kDci, std::nullopt, 0, 5, qp);
        set(in, kRqType, 1);
        set(in, kSrqn, srq.srqn);
        set(in, kLogStreams, logStreams);
        set(in, kLogErrored, logErrored);
        return in;
    }
    // RTS2RTS with the context extension, as libmlx5's
    // mlx5dv_dci_stream_id_reset sends it (rdma-core's mlx5_ifc.h layout).
    Mlx5Host::Reply resetStream(uint32_t qpn, uint16_t stream) {
        auto in = Mlx5Host::input(kRts2Rts, 0, 0x1d0);
        set(in, kHeld, qpn);
        set(in, field(0x40, 1), 1);        // qpc_ext
        set(in, field(0x840, 64), 1);      // opt_param_mask_95_32: the stream
        set(in, field(0x890, 16), stream); // qpc_data_ext.dci_stream_channel_id
        return host.run(in, 16);
    }
    uint64_t send(Qp &qp, uint16_t stream, uint64_t addr, uint32_t length, uint32_t lkey = 0) {
        return writeDcSend(
            qp, target, kKey,
            {.opcode = kSend, .addr = addr, .length = length, .lkey = lkey, .stream = stream});
    }
    uint64_t write(Qp &qp, uint16_t stream, uint64_t addr, uint32_t length, uint64_t remote,
                   uint32_t rkey = 0) {
        return writeDcSend(qp, target, kKey,
                           {.opcode = kRdmaWrite,
                            .addr = addr,
                            .length = length,
                            .remoteAddr = remote,
                            .rkey = rkey,
                            .stream = stream});
    }
    // A 4 KiB SEND on `stream` into a receive posted before it: both
    // complete without error and every byte lands.
    void sendLands(Qp &qp, uint16_t stream, uint64_t source, uint64_t sink, uint32_t *next) {
        blueFlame(send(qp, stream, source, 4096), uar);
        const auto done = completions(next, 2);
        REQUIRE(done.size() == 2);
        CHECK(done[0][0x3f] >> 4 != 0xd);
        CHECK(done[1][0x3f] >> 4 != 0xd);
        CHECK(std::equal(host.at(source), host.at(source) + 4096, host.at(sink)));
    }
    uint8_t state(uint32_t qpn) { return static_cast<uint8_t>(query(qpn).get(kState)); }
    uint32_t target; // the DCT
};

// A send WQE of a DCI takes two blocks: its CQEs count 0, 2, 4, ...
bool failed(const uint8_t *cqe) {
    return cqe[0x3f] >> 4 == 0xd;
}
uint8_t syndrome(const uint8_t *cqe) {
    return failed(cqe) ? cqe[0x37] : 0;
}
uint16_t wqeIndex(const uint8_t *cqe) {
    return readBe16(cqe + 0x3c);
}

} // namespace

TEST_CASE("mlx5: DCI streams are offered, reported, and bounded", "[mlx5][dc]") {
    StreamFunction f;
    const auto caps = f.host.run(Mlx5Host::input(0x100, 1), 0x1010);
    REQUIRE(caps.status() == 0);
    CHECK(caps.get(field(0x80 + 0x58b, 5)) == limits::kLogMaxDciStreams);
    CHECK(caps.get(field(0x80 + 0x593, 5)) == limits::kLogMaxDciErroredStreams);
    CHECK(caps.get(field(0x80 + 0x122, 1)) == 1); // qpc_extension: the reset's way in
    auto qp = f.dci(3, 2);
    CHECK(f.query(qp.qpn).get(kLogStreams) == 3);
    CHECK(f.query(qp.qpn).get(kLogErrored) == 2);

    Mlx5Function::Qp other;
    checkRefused(f.host, f.dciInput(limits::kLogMaxDciStreams + 1, 0, other), status::kBadParam,
                 err::kMlx5QpBadContext);
    checkRefused(f.host, f.dciInput(0, limits::kLogMaxDciErroredStreams + 1, other),
                 status::kBadParam, err::kMlx5QpBadContext);
    auto rc = f.qpInput(kRc, 0, 2, 2, other);
    set(rc, kLogErrored, 1);
    checkRefused(f.host, rc, status::kBadParam, err::kMlx5QpBadContext);
    // Nothing is in error: there is nothing to reset.
    CHECK(f.resetStream(qp.qpn, 1).status() == status::kBadParam);
    CHECK(f.host.guestErrors(err::kMlx5QpBadAttr.token) == 1);
}

// A SEND through a key that is not there fails stream 1 alone: the next
// SEND of stream 1 is flushed, stream 2's lands; once reset, stream 1
// sends again. The DCI stays in RTS throughout.
TEST_CASE("mlx5: a WQE's local error fails its DCI stream alone, until the stream is reset",
          "[mlx5][dc]") {
    StreamFunction f;
    auto qp = f.dci(3, 2);
    const uint64_t source = f.host.allocRandom(4096, 51), other = f.host.allocRandom(4096, 52);
    const uint64_t sinkA = f.host.alloc(4096), sinkB = f.host.alloc(4096);
    f.postSrq(f.srq, sinkA, 4096);
    f.postSrq(f.srq, sinkB, 4096);
    uint32_t next = 0;
    f.send(qp, 1, source, 512, f.lkey ^ 0x1); // another key's variant
    f.send(qp, 1, source, 512);
    f.blueFlame(f.send(qp, 2, source, 4096), f.uar);
    auto done = f.completions(&next, 4); // three sends', one receive
    REQUIRE(done.size() == 4);
    std::vector<std::pair<uint16_t, uint8_t>> sends;
    for (const uint8_t *c : done)
        if (c[0x3f] >> 4 != 0x2) // not the receive
            sends.emplace_back(wqeIndex(c), syndrome(c));
    CHECK(sends == std::vector<std::pair<uint16_t, uint8_t>>{{0, kLocProt}, {2, kFlushed}, {4, 0}});
    CHECK(std::equal(f.host.at(source), f.host.at(source) + 4096, f.host.at(sinkA)));
    CHECK(f.state(qp.qpn) == kRts);
    CHECK(f.host.traces("dci_stream_error") == 2);

    // Another stream that is not in error cannot be reset; stream 1 can, once.
    CHECK(f.resetStream(qp.qpn, 2).status() == status::kBadParam);
    CHECK(f.resetStream(qp.qpn, 1).status() == 0);
    CHECK(f.resetStream(qp.qpn, 1).status() == status::kBadParam);
    f.sendLands(qp, 1, other, sinkB, &next);
    CHECK(f.state(qp.qpn) == kRts);
}

// With 2^2 streams allowed in error, the fourth stream's error fails the
// DCI: it moves to the error state and flushes the rest, as a DCI without
// streams does at its first.
TEST_CASE("mlx5: a DCI fails when its streams in error reach its bound", "[mlx5][dc]") {
    StreamFunction f;
    auto qp = f.dci(3, 2);
    const uint64_t source = f.host.allocRandom(4096, 53);
    uint32_t next = 0;
    for (uint16_t stream = 1; stream <= 3; ++stream)
        f.send(qp, stream, source, 64, f.lkey ^ 0x1);
    f.blueFlame(f.send(qp, 2, source, 64), f.uar); // stream 2 is in error: flushed
    auto done = f.completions(&next, 4);
    REQUIRE(done.size() == 4);
    CHECK(syndrome(done[0]) == kLocProt);
    CHECK(syndrome(done[1]) == kLocProt);
    CHECK(syndrome(done[2]) == kLocProt);
    CHECK(syndrome(done[3]) == kFlushed);
    CHECK(f.state(qp.qpn) == kRts);
    f.send(qp, 4, source, 64, f.lkey ^ 0x1);
    f.blueFlame(f.send(qp, 5, source, 64), f.uar);
    done = f.completions(&next, 2);
    REQUIRE(done.size() == 2);
    CHECK(syndrome(done[0]) == kLocProt);
    CHECK(syndrome(done[1]) == kFlushed);
    CHECK(f.state(qp.qpn) == kErr);
    CHECK(f.host.traces("qp_error") == 1);
    // Reset and ready again, the DCI has no stream in error.
    REQUIRE(f.change(kToRst, qp.qpn).status() == 0);
    CHECK(f.resetStream(qp.qpn, 1).status() == status::kBadQpState);
}

// A WRITE the DCT refuses (a key it does not have) fails stream 1 at the
// DCT's NAK, with a SEND of stream 2 and a WRITE of stream 1 behind it on
// the wire. The DCT's connection failed with the NAK and dropped them:
// the DCI flushes stream 1's WRITE and sends stream 2's SEND again on a
// new connection, where it lands once.
TEST_CASE("mlx5: a DCT's NAK fails the DCI stream alone, and the other streams' requests go "
          "again on a new connection",
          "[mlx5][dc]") {
    StreamFunction f;
    auto qp = f.dci(2, 3);
    const uint64_t source = f.host.allocRandom(4096, 54), window = f.host.alloc(4096);
    const uint64_t sink = f.host.alloc(4096);
    f.postSrq(f.srq, sink, 4096);
    uint32_t next = 0;
    f.write(qp, 1, source, 1024, window, f.lkey ^ 0x1);
    f.send(qp, 2, source, 2048);
    f.blueFlame(f.write(qp, 1, source, 1024, window), f.uar);
    auto done = f.completions(&next, 4);
    REQUIRE(done.size() == 4);
    std::vector<std::pair<uint16_t, uint8_t>> sends;
    int received = 0;
    for (const uint8_t *c : done) {
        if (c[0x3f] >> 4 == 0x2)
            ++received;
        else
            sends.emplace_back(wqeIndex(c), syndrome(c));
    }
    CHECK(received == 1);
    CHECK(sends ==
          std::vector<std::pair<uint16_t, uint8_t>>{{0, kRemAccess}, {2, 0}, {4, kFlushed}});
    CHECK(std::equal(f.host.at(source), f.host.at(source) + 2048, f.host.at(sink)));
    CHECK(
        std::all_of(f.host.at(window), f.host.at(window) + 1024, [](uint8_t b) { return b == 0; }));
    CHECK(f.state(qp.qpn) == kRts);
    CHECK(f.host.traces("dc_opened") == 2);
    CHECK(f.completions(&next, 1).empty()); // nothing delivered twice
}

// Nothing but the failed stream's WQEs behind the NAKed one: both complete
// (the second flushed) and the DCI, connected to nothing now, takes the
// next stream's SEND to the same DCT on a new connection.
TEST_CASE("mlx5: a DCT's NAK with only its stream's WQEs behind it leaves the DCI ready for the "
          "next",
          "[mlx5][dc]") {
    StreamFunction f;
    auto qp = f.dci(2, 3);
    const uint64_t source = f.host.allocRandom(4096, 56), window = f.host.alloc(4096);
    const uint64_t sink = f.host.alloc(4096);
    uint32_t next = 0;
    f.write(qp, 1, source, 1024, window, f.lkey ^ 0x1);
    f.blueFlame(f.write(qp, 1, source, 1024, window), f.uar);
    auto done = f.completions(&next, 2);
    REQUIRE(done.size() == 2);
    CHECK(syndrome(done[0]) == kRemAccess);
    CHECK(syndrome(done[1]) == kFlushed);
    CHECK(f.state(qp.qpn) == kRts);
    f.postSrq(f.srq, sink, 4096);
    f.sendLands(qp, 2, source, sink, &next);
    CHECK(
        std::all_of(f.host.at(window), f.host.at(window) + 1024, [](uint8_t b) { return b == 0; }));
}

// The streams in error move with the function: after a move, stream 1
// still flushes, and is reset as before.
TEST_CASE("mlx5: a DCI's streams in error are saved and loaded", "[mlx5][dc]") {
    StreamFunction f;
    auto qp = f.dci(3, 2);
    const uint64_t source = f.host.allocRandom(4096, 55), sink = f.host.alloc(4096);
    uint32_t next = 0;
    f.blueFlame(f.send(qp, 1, source, 64, f.lkey ^ 0x1), f.uar);
    REQUIRE(f.completions(&next, 1).size() == 1);
    REQUIRE(f.host.move() == "");
    f.blueFlame(f.send(qp, 1, source, 64), f.uar);
    auto done = f.completions(&next, 1);
    REQUIRE(done.size() == 1);
    CHECK(syndrome(done[0]) == kFlushed);
    CHECK(f.resetStream(qp.qpn, 1).status() == 0);
    f.postSrq(f.srq, sink, 4096);
    f.sendLands(qp, 1, source, sink, &next);
}
