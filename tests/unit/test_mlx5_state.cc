// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX personality in a saved state (docs/migration.md, "The
// ConnectX personality"): a function moves in the middle of RC traffic
// and the transfer completes whole; its objects come back at their
// numbers, each as its command made it, and work; a state cut short or
// one whose object its command would refuse is refused.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstring>

#include "mlx5_function.hh"
#include "state_sections.hh"

using namespace pib;
using namespace pib::mlx5;

namespace {

using namespace pib::testing::mlx5qp;
using pib::testing::Mlx5Function;
using pib::testing::withoutSection;

constexpr uint16_t kAllocQCounter = 0x771, kAttachToMcg = 0x806;
constexpr Field kCounterSet = field(0x58, 8); // alloc_q_counter_out

struct StateFunction : pib::testing::OwnedMlx5Host, Mlx5Function {
    StateFunction() : Mlx5Function(owned) {
        REQUIRE(setUp());
        REQUIRE(activatePort());
    }
    Qp rc() {
        const auto qp = createQp(kRc, 1, 3, 4);
        REQUIRE(qp);
        return *qp;
    }
    // CQEs until `want` came, the clock moving 10 ms at a time so that
    // RC's timers resend what a move lost (bounded: 4 s).
    std::vector<const uint8_t *> waitFor(uint32_t *next, size_t want) {
        std::vector<const uint8_t *> got;
        for (int i = 0; i < 400 && got.size() < want; ++i) {
            host.advance(10'000'000);
            const auto more = completions(next, want - got.size());
            got.insert(got.end(), more.begin(), more.end());
        }
        return got;
    }
    bool same(uint64_t x, uint64_t y, uint32_t n) {
        return std::equal(host.at(x), host.at(x) + n, host.at(y));
    }
};

uint8_t opcodeOf(const uint8_t *cqe) {
    return cqe[0x3f] >> 4;
}

} // namespace

// What issue 33 asks of a ConnectX guest's device: RC SENDs, WRITEs and
// READs in flight when it moves complete whole, every byte checked. The
// first SEND finds no receive posted: the requester waits out an RNR NAK
// with the rest outstanding behind it when the function moves.
TEST_CASE("mlx5: RC traffic in flight completes whole when the function moves mid-way",
          "[mlx5-state]") {
    StateFunction f;
    auto a = f.rc(), b = f.rc();
    const Mlx5Function::Peer toB{.qpn = b.qpn, .ackTimeout = 12, .retries = 7, .rnrRetries = 7};
    const Mlx5Function::Peer toA{.qpn = a.qpn, .ackTimeout = 12, .retries = 7, .rnrRetries = 7};
    REQUIRE(f.toRts(a.qpn, toB));
    REQUIRE(f.toRts(b.qpn, toA));
    constexpr uint32_t kBytes = 24 << 10;
    std::vector<std::pair<uint64_t, uint64_t>> copies; // (source, sink)
    std::vector<uint64_t> receives;
    for (uint32_t i = 0; i < 2; ++i) {
        const uint64_t sent = f.host.allocRandom(kBytes, 10 + i), received = f.host.alloc(kBytes);
        f.blueFlame(f.writeSend(a, false, {.opcode = kSend, .addr = sent, .length = kBytes}),
                    f.uar);
        copies.emplace_back(sent, received);
        receives.push_back(received);
        const uint64_t written = f.host.allocRandom(kBytes, 20 + i), into = f.host.alloc(kBytes);
        f.blueFlame(
            f.writeSend(
                a, false,
                {.opcode = kRdmaWrite, .addr = written, .length = kBytes, .remoteAddr = into}),
            f.uar);
        copies.emplace_back(written, into);
        const uint64_t read = f.host.allocRandom(kBytes, 30 + i), back = f.host.alloc(kBytes);
        f.blueFlame(
            f.writeSend(a, false,
                        {.opcode = kRdmaRead, .addr = back, .length = kBytes, .remoteAddr = read}),
            f.uar);
        copies.emplace_back(read, back);
    }
    uint32_t next = 0;
    f.host.advance(1'000'000);
    CHECK(f.cqes(&next).empty()); // in order: nothing before the first SEND
    REQUIRE(f.host.move() == "");
    for (uint64_t received : receives)
        f.postReceive(b, received, kBytes);
    // Six requests and two receives complete.
    const auto done = f.waitFor(&next, 8);
    REQUIRE(done.size() == 8);
    for (const uint8_t *cqe : done)
        CHECK((opcodeOf(cqe) == 0x0 || opcodeOf(cqe) == 0x2)); // a requester's or a SEND's
    for (const auto &[from, to] : copies)
        CHECK(f.same(from, to, kBytes));
    CHECK(f.query(a.qpn).get(kState) == 3); // RTS
    CHECK(f.query(b.qpn).get(kState) == 3);
    CHECK(f.host.guestErrors() == 0);
}

// Every kind of object a driver makes: each comes back at its number,
// saved again to the same bytes, and works.

TEST_CASE("mlx5: a loaded function's objects are as they were saved, and work", "[mlx5-state]") {
    StateFunction f;
    auto a = f.rc(), b = f.rc();
    const auto counter = f.host.run(Mlx5Host::input(kAllocQCounter), 16);
    REQUIRE(counter.status() == 0);
    const auto set = static_cast<uint32_t>(counter.get(kCounterSet));
    REQUIRE(f.toRts(a.qpn, {.qpn = b.qpn}));
    REQUIRE(f.toRts(b.qpn, {.qpn = a.qpn, .counterSet = set}));
    const std::vector<uint16_t> order{0, 3, 1, 2}; // the list's head is slot 0
    auto srq = f.createSrq(2, order);
    REQUIRE(srq);
    const auto onSrq = f.createQpOnSrq(kUd, srq->srqn);
    REQUIRE(onSrq);
    REQUIRE(f.toRts(onSrq->qpn));
    auto attach = Mlx5Host::input(kAttachToMcg, 0, 0x20);
    pib::mlx5::set(attach, kHeld, onSrq->qpn);
    attach[0x10] = 0xff;
    attach[0x1f] = 0x01;
    REQUIRE(f.host.run(attach, 16).status() == 0);
    // A SEND first, so that the CQ, the EQ and the RQ have moved on.
    uint32_t next = 0;
    const uint64_t data = f.host.allocRandom(8192, 5), sink = f.host.alloc(8192);
    f.postReceive(b, sink, 2000);
    f.blueFlame(f.writeSend(a, false, {.opcode = kSend, .addr = data, .length = 2000}), f.uar);
    REQUIRE(f.completions(&next, 2).size() == 2);
    // Two WQEs on the SRQ; a datagram takes the first (slot 0) before the
    // save, the second (slot 3) after.
    const uint64_t first = f.host.alloc(4096), landed = f.host.alloc(4096);
    f.postSrq(*srq, first, 4096);
    f.postSrq(*srq, landed, 4096);
    auto ud = f.createQp(kUd);
    REQUIRE(ud);
    REQUIRE(f.toRts(ud->qpn));
    f.blueFlame(f.writeSend(*ud, true, {.remoteQpn = onSrq->qpn, .addr = data, .length = 10}),
                f.uar);
    REQUIRE(f.completions(&next, 2).size() == 2);

    const std::vector<uint8_t> saved = f.host.saveState();
    REQUIRE(!saved.empty());
    const auto stateOf = [&](uint32_t qpn) { return f.query(qpn).get(kState); };
    const uint64_t states[] = {stateOf(a.qpn), stateOf(b.qpn), stateOf(onSrq->qpn)};
    REQUIRE(f.host.move() == "");
    // As saved, but for the port's counters: its link resumed, and its
    // RC QPs said where they were (DataPath::resendWhatWasLost).
    CHECK(withoutSection(f.host.saveState(), "PRTS") == withoutSection(saved, "PRTS"));
    CHECK(stateOf(a.qpn) == states[0]);
    CHECK(stateOf(b.qpn) == states[1]);
    CHECK(stateOf(onSrq->qpn) == states[2]);
    CHECK(f.query(b.qpn).get(kCounterSetId) == set);

    // The RC pair goes on where it was: the CQE after the first two, the
    // RQ's second WQE, the same key.
    f.postReceive(b, sink + 4096, 3000);
    f.blueFlame(f.writeSend(a, false, {.opcode = kSend, .addr = data + 4096, .length = 3000}),
                f.uar);
    REQUIRE(f.completions(&next, 2).size() == 2);
    CHECK(f.same(data + 4096, sink + 4096, 3000));
    // A UD datagram to the QP on the SRQ takes the free list's next, 3.
    f.blueFlame(f.writeSend(*ud, true, {.remoteQpn = onSrq->qpn, .addr = data, .length = 1000}),
                f.uar);
    const auto done = f.completions(&next, 2);
    REQUIRE(done.size() == 2);
    const uint8_t *received = opcodeOf(done[0]) == 0x2 ? done[0] : done[1];
    CHECK(readBe16(received + 0x3c) == 3);
    CHECK(f.same(data, landed + 40, 1000)); // behind the GRH's room
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5: a saved function cut short, or with an object its command refuses, is refused",
          "[mlx5-state]") {
    StateFunction f;
    auto a = f.rc(), b = f.rc();
    REQUIRE(f.toRts(a.qpn, {.qpn = b.qpn}));
    const std::vector<uint8_t> saved = f.host.saveState();
    REQUIRE(!saved.empty());
    for (size_t cut = 0; cut < saved.size(); cut += cut < 256 ? 1 : 97) {
        CAPTURE(cut);
        f.host.replaceCore();
        CHECK(f.host.loadState(std::span(saved).first(cut)) != "");
    }
    // Every UAR page taken back: CREATE_EQ's code refuses the EQ on one.
    std::vector<uint8_t> bad = saved;
    const uint8_t tag[] = {'M', '5', 'U', 'A'};
    const auto at = std::search(bad.begin(), bad.end(), std::begin(tag), std::end(tag));
    REQUIRE(at != bad.end());
    const auto pages = static_cast<size_t>(at - bad.begin()) + 12; // tag, length, count
    std::fill(bad.begin() + static_cast<ptrdiff_t>(pages),
              bad.begin() + static_cast<ptrdiff_t>(pages + f.host.config.doorbell_pages), 0);
    f.host.replaceCore();
    const std::string why = f.host.loadState(bad);
    CHECK(why.find("EQ 0: CREATE_EQ: uar_page: not given by ALLOC_UAR") != std::string::npos);
    // The refused device is as after reset: a driver sets it up again,
    // and the whole state loads over what it set up.
    Mlx5Function again(f.host);
    CHECK(again.setUp());
    CHECK(f.host.loadState(saved) == "");
    CHECK(f.query(a.qpn).get(kState) == 3);
}
