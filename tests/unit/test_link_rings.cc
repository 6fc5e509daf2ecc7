// SPDX-License-Identifier: GPL-2.0-or-later
// The device's end of a ring cable (docs/wire.md, "Ring cables"): the test
// is the switch. It answers the offer, maps the device's memory, and moves
// the frames of two devices' RC traffic from one's ring to the other's.
#include <catch2/catch.hpp>

#include <cstring>
#include <utility>

#include <nlohmann/json.hpp>

#include "connected_fixture.hh"
#include "fake_host.hh"
#include "frame.hh"
#include "management_calls.hh"
#include "packet.hh"
#include "page_send.hh"
#include "ring_cable.hh"
#include "ring_switch.hh"

using pib::testing::checkPageArrived;
using pib::testing::postPageSend;
using pib::testing::RingSwitch;
using pib::wire::encode;

namespace {

constexpr uint32_t kRingSize = RingSwitch::kRingSize;

// Frames of `bytes`, as the stream carries them.
std::vector<pib::wire::Frame> framesOf(const std::vector<uint8_t> &bytes) {
    pib::wire::FrameReader reader;
    reader.feed(bytes);
    std::vector<pib::wire::Frame> frames;
    pib::wire::FrameReader::Error error;
    while (auto frame = reader.next(&error))
        frames.push_back(*frame);
    return frames;
}

FakeHost &initialized(FakeHost &host) {
    host.initHca();
    return host;
}

// At most `max` frames from `from`'s device into `to`'s, as a switch
// forwards them. True when any moved.
// Port 1's counters, as pib_core_inspect shows them.
nlohmann::json portCounters(pib::testing::Node &n) {
    const auto a = pib::testing::inspect(n, nullptr, true);
    REQUIRE(a.rc == 0);
    return nlohmann::json::parse(a.text)["ports"][0]["counters"];
}

bool forward(RingSwitch &from, RingSwitch &to, unsigned max) {
    const auto frames = from.take(max);
    for (const auto &frame : frames)
        REQUIRE(to.put(frame)); // the test's rings are never full: 1 MiB, few frames a turn
    to.publish();
    return !frames.empty();
}

} // namespace

TEST_CASE("a switch that takes rings gets a ring cable offered, once", "[link-rings]") {
    FakeHost host;
    RingSwitch sw(initialized(host));
    const auto frames = framesOf(host.portOutput[1]);
    REQUIRE(frames.size() == 2);
    CHECK(frames[0].type == PIB_WIRE_HELLO);
    CHECK(frames[1].type == PIB_WIRE_RINGS);
    pib_wire_rings offer;
    REQUIRE(frames[1].payload.size() == sizeof(offer));
    std::memcpy(&offer, frames[1].payload.data(), sizeof(offer));
    CHECK(offer.ring_size == kRingSize);
    CHECK(offer.flags == 0);
    // The descriptors go with the offer, after the HELLO.
    REQUIRE(host.passedFds[1].size() == 1);
    CHECK(host.passedFds[1].front().at == pib::wire::kHeaderSize + frames[0].payload.size());
    REQUIRE(host.passedFds[1].front().fds.size() == 2);
    CHECK(pib::wire::isDoorbellLine(host.passedFds[1].front().fds[1]));
    CHECK(host.traces("link_rings_offered") == 1);

    // A retraining HELLO does not offer again.
    host.now += 1'000'000'000;
    pib_wire_hello hello{};
    hello.flags = PIB_WIRE_HELLO_TAKES_RINGS;
    sw.feed(encode(PIB_WIRE_HELLO, RingSwitch::bytesOf(hello)));
    CHECK(host.passedFds[1].size() == 1);
}

namespace {

// Two devices with connected RC QPs, each cabled by a ring cable to the
// test's switch, which forwards between the two.
struct RingPair {
    pib::testing::Pair pair;
    std::unique_ptr<RingSwitch> a, b;
    // Whether the switch also forwards the packets a device put on its
    // stream (before its rings were up), and how many it did.
    bool forwardsStreams = false;
    size_t streamed = 0;

    RingPair() {
        plug(pair.a, &a);
        plug(pair.b, &b);
    }
    // A new ring cable for node `n`, its port ACTIVE again.
    static void plug(pib::testing::Node &n, std::unique_ptr<RingSwitch> *sw) {
        *sw = std::make_unique<RingSwitch>(n.host);
        REQUIRE((*sw)->answer(true));
        for (uint8_t state : {PIB_PORT_ARMED, PIB_PORT_ACTIVE})
            n.setPortState(state);
        n.host.portOutput[1].clear();
    }
    // Turns of a switch that moves `perTurn` frames each way (a slow one
    // lets a device's ring fill, and its packets wait for room) and of
    // the devices' hosts, until all are quiet; then, `idleSteps` times,
    // 1 ms passes (RC timers) and the turns go on.
    void run(unsigned perTurn, int idleSteps = 0) {
        for (int turn = 0; turn < 200000; ++turn) {
            bool busy = forward(*a, *b, perTurn);
            busy |= forward(*b, *a, perTurn);
            if (forwardsStreams) {
                busy |= forwardStream(pair.a, *b);
                busy |= forwardStream(pair.b, *a);
            }
            busy |= a->answerBell();
            busy |= b->answerBell();
            busy |= pair.a.host.runScheduled();
            busy |= pair.b.host.runScheduled();
            if (!busy && idleSteps-- > 0) {
                pair.a.host.advance(1'000'000);
                pair.b.host.advance(1'000'000);
                busy = true;
            }
            if (!busy)
                return;
        }
        FAIL("the devices never went quiet");
    }
    // The packets `from` put on its stream, into `to`'s device's ring.
    bool forwardStream(pib::testing::Node &from, RingSwitch &to) {
        std::vector<uint8_t> bytes;
        bytes.swap(from.host.portOutput[1]);
        bool any = false;
        for (const auto &frame : framesOf(bytes)) {
            if (frame.type != PIB_WIRE_PACKET)
                continue;
            REQUIRE(to.put(encode(PIB_WIRE_PACKET, frame.payload)));
            any = true;
            ++streamed;
        }
        if (any)
            to.publish();
        return any;
    }
};

} // namespace

TEST_CASE("on a ring cable two devices' RC traffic travels in the rings", "[link-rings]") {
    RingPair r;
    pib::testing::Pair &pair = r.pair;
    CHECK(pair.a.host.traces("link_rings_up") == 1);
    CHECK(pib::wire::isDoorbellLine(pair.a.host.watchedFd[1]));

    const uint32_t length = GENERATE(64u * 1024, 3u << 20);
    const unsigned perTurn = length > (1u << 20) ? 4 : 64;
    const uint64_t src = pair.a.host.allocRandom(length, length);
    const uint64_t dst = pair.b.host.alloc(length);
    pair.a.postSend(1,
                    {.opcode = PIB_WR_RDMA_WRITE, .local = src, .length = length, .remote = dst});
    r.run(perTurn);
    const auto done = pair.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(std::memcmp(pair.a.host.at(src), pair.b.host.at(dst), length) == 0);
    CHECK(pair.a.host.portOutput[1].empty()); // nothing on the stream
    CHECK(pair.b.host.portOutput[1].empty());
    // The WRITE's packets were built in the ring, from guest memory
    // straight; only those that waited for room took a copy.
    const auto sent = portCounters(pair.a);
    if (length <= (1u << 20))
        CHECK(sent["frames_built_in_ring"] == sent["xmit_packets"]);
    else
        CHECK(sent["frames_built_in_ring"] > 0);

    // And back: a READ of what arrived.
    const uint64_t back = pair.a.host.alloc(length);
    pair.a.postSend(2,
                    {.opcode = PIB_WR_RDMA_READ, .local = back, .length = length, .remote = dst});
    r.run(perTurn);
    REQUIRE(pair.a.poll().size() == 1);
    CHECK(std::memcmp(pair.a.host.at(src), pair.a.host.at(back), length) == 0);
    CHECK(portCounters(pair.b)["frames_built_in_ring"] > length / 4096 / 2); // READ responses
    // and their payloads went from the ring to memory: the WRITE's at b,
    // the READ responses' at a.
    CHECK(portCounters(pair.b)["frames_read_in_ring"] >= length / 4096);
    CHECK(portCounters(pair.a)["frames_read_in_ring"] >= length / 4096);
}

// Found on a loaded CI host: the switch process waited for a CPU for
// half a second, both devices' requests sat unread in their rings, and
// ibv_rc_pingpong ended in RETRY_EXC (timeout 14 x 7 retries is 0.5 s)
// with nothing lost. An ACK timeout while the cable still holds the
// port's packets spends no retry, for a while (kCableStallGraceNs).
TEST_CASE("ACK timeouts while the switch takes nothing from the ring spend no retries, for a while",
          "[link-rings]") {
    RingPair r;
    pib::testing::Pair &pair = r.pair;
    const auto [src, dst] = postPageSend(pair, 21);
    // 20 timeouts of 4.2 ms, five times the QP's retries: the switch ran
    // none of that time.
    for (int i = 0; i < 20; ++i)
        pair.a.host.advance(4'200'000);
    CHECK(pair.a.host.traces("rc_timeout_excused") >= 19);
    CHECK(pair.a.host.traces("rc_timeout") == 0);
    CHECK(pair.a.poll().empty());
    SECTION("the switch runs again: the SEND arrives whole") {
        r.run(64);
        checkPageArrived(pair, src, dst);
    }
    SECTION("a switch stuck beyond the grace still ends the QP in RETRY_EXC_ERR") {
        // Its resends fill the ring meanwhile: waiting for room, the QP
        // still counts its retries once the grace is over.
        for (int i = 0; i < 2000 && pair.a.poll().empty(); ++i) // up to 8.4 s more
            pair.a.host.advance(4'200'000);
        CHECK(pair.a.qpState() == PIB_QPS_ERR);
        CHECK(pair.a.host.traces("rc_retry_exceeded") == 1);
    }
    SECTION("packets the switch took count as sent: the peer's silence spends retries") {
        r.b.reset(); // b's cable is pulled: what the switch takes goes nowhere
        r.a->take();
        // Retries 500 ms apart (Requester::kRetrySpacingNs): some 120 timeouts.
        for (int i = 0; i < 600 && pair.a.qpState() != PIB_QPS_ERR; ++i) {
            pair.a.host.advance(4'200'000);
            r.a->take(); // the resends too
        }
        CHECK(pair.a.qpState() == PIB_QPS_ERR);
        CHECK(pair.a.host.traces("rc_timeout") == 3); // retry_cnt 3
    }
}

// Found by test_storage_over_a_cable_that_loses_and_reorders, whose time
// went from 17 to 77 s for the same code: the switch lost a packet, and
// its resend waited out the grace because the port's ring was seldom
// empty. What the QP sent before its timer started was taken: the wire
// lost it, and the timeout resends at once, whatever else waits.
TEST_CASE("a packet lost beyond a busy ring cable is resent at the QP's own timeout",
          "[link-rings]") {
    RingPair r;
    pib::testing::Pair &pair = r.pair;
    const auto [src, dst] = postPageSend(pair, 23);
    REQUIRE(!r.a->take().empty()); // the switch took the SEND, and lost it
    // More of a's work after it, which the switch has not taken yet.
    const uint64_t src2 = pair.a.host.allocRandom(4096, 24), dst2 = pair.b.host.alloc(4096);
    pair.b.postRecv(2, dst2, 4096);
    pair.a.postSend(2, {.local = src2, .length = 4096});
    pair.a.host.advance(4'200'000);
    CHECK(pair.a.host.traces("rc_timeout_excused") == 0);
    CHECK(pair.a.host.traces("rc_timeout") == 1);
    r.run(64, 50);
    const auto done = pair.a.poll();
    REQUIRE(done.size() == 2);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(done[1].status == PIB_WC_SUCCESS);
    CHECK(std::memcmp(pair.a.host.at(src), pair.b.host.at(dst), 4096) == 0);
    CHECK(std::memcmp(pair.a.host.at(src2), pair.b.host.at(dst2), 4096) == 0);
}

// Found by live migration under load: in the precopy the moving guest's
// QEMU read its ring slowly, the switch held what the peer sent it behind
// what already waited, and the peer's answers came 2 to 4 s late, after
// the last retry. Packets for the device unread on its own cable make a
// timeout spend no retry either, for a while (kCableStallGraceNs).
TEST_CASE("ACK timeouts while the device's own ring holds unread packets spend no retries",
          "[link-rings]") {
    RingPair r;
    pib::testing::Pair &pair = r.pair;
    const auto [src, dst] = postPageSend(pair, 22);
    // The switch took the SEND's packets (and lost them), and a packet for
    // a waits in a's ring, which a's host does not read.
    const auto sent = r.a->take();
    REQUIRE(!sent.empty());
    REQUIRE(r.a->put(sent[0]));
    r.a->publish();
    for (int i = 0; i < 20; ++i)
        pair.a.host.advance(4'200'000);
    CHECK(pair.a.host.traces("rc_timeout_behind") >= 19);
    CHECK(pair.a.host.traces("rc_timeout_excused") == 0);
    CHECK(pair.a.host.traces("rc_timeout") == 0);
    CHECK(pair.a.poll().empty());
    // a reads its ring: the next timeout resends, and the SEND arrives.
    REQUIRE(r.a->answerBell());
    r.run(64, 50);
    CHECK(pair.a.host.traces("rc_timeout") >= 1);
    checkPageArrived(pair, src, dst);
}

// Found by test_dual_port's traffic on both ports at once: the port had
// said "full" with packets waiting for the ring, the cable was replaced,
// and the port's work stayed held back for good.
TEST_CASE("a ring cable pulled while packets wait for room: the port goes on with the next",
          "[link-rings]") {
    RingPair r;
    pib::testing::Pair &pair = r.pair;
    const uint32_t length = 3u << 20; // three times the ring
    const uint64_t src = pair.a.host.allocRandom(length, 7);
    const uint64_t dst = pair.b.host.alloc(length);
    pair.a.postSend(1,
                    {.opcode = PIB_WR_RDMA_WRITE, .local = src, .length = length, .remote = dst});
    r.run(0); // the switch takes nothing: a's ring fills, its port is full
    REQUIRE(pair.a.host.traces("port_queue_full") > 0);

    RingPair::plug(pair.a, &r.a); // a new cable; what waited is lost
    r.run(64, 100);               // RC retransmits it
    const auto done = pair.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(std::memcmp(pair.a.host.at(src), pair.b.host.at(dst), length) == 0);
}

TEST_CASE("a ring cable ends with its cable or when the switch breaks it", "[link-rings]") {
    FakeHost host;
    RingSwitch sw(initialized(host));
    REQUIRE(sw.answer(true));
    REQUIRE(host.watchedFd[1] >= 0);
    SECTION("the cable unplugged: the host stops watching the doorbell") {
        pib_core_port_connected(host.core, 1, 0);
        CHECK(host.watchedFd[1] == -1);
    }
    SECTION("a switch that says more is in the ring than it holds") {
        sw.ctrl(1)->produced = 3 * kRingSize;
        sw.publish(true);
        pib_core_port_bell(host.core, 1);
        CHECK(host.disconnects == std::vector<unsigned>{1});
        CHECK(host.traces("err_link") == 1);
        CHECK(host.watchedFd[1] == -1);
    }
    SECTION("a frame that is no PACKET") {
        const std::vector<uint8_t> hello(sizeof(pib_wire_hello), 0);
        REQUIRE(sw.put(encode(PIB_WIRE_HELLO, hello)));
        sw.publish();
        pib_core_port_bell(host.core, 1);
        CHECK(host.disconnects == std::vector<unsigned>{1});
    }
    SECTION("a doorbell for a port with no rings is nothing") {
        pib_core_port_bell(host.core, 2);
        pib_core_port_bell(host.core, 0);
        CHECK(host.disconnects.empty());
    }
}

TEST_CASE("a refused ring offer leaves the packets on the stream", "[link-rings]") {
    FakeHost host;
    RingSwitch sw(initialized(host));
    REQUIRE(sw.answer(false));
    CHECK(host.traces("link_rings_refused") == 1);
    CHECK(host.watchedFd[1] == -1);
}

TEST_CASE("a host that passes no descriptors stays on the stream", "[link-rings]") {
    FakeHost host;
    host.initHca();
    pib_core_port_connected(host.core, 1, 1);
    pib_wire_hello hello{};
    hello.flags = PIB_WIRE_HELLO_TAKES_RINGS;
    const auto frame = encode(PIB_WIRE_HELLO, RingSwitch::bytesOf(hello));
    pib_core_port_receive(host.core, 1, frame.data(), frame.size());
    CHECK(host.traces("link_rings_not_offered") == 1);
    const auto frames = framesOf(host.portOutput[1]);
    REQUIRE(frames.size() == 1);
    CHECK(frames[0].type == PIB_WIRE_HELLO);
}

// Found in CI: a ConnectX guest that moved under RC traffic came back on
// the stream, not on a ring cable. Its QPs resent what the move lost as
// the link resumed, before the ring offer, and QEMU's glue passes the
// offer's descriptors only with nothing queued before them. The offer
// now goes first.
TEST_CASE("a device that moves with packets in flight comes back on a ring cable", "[link-rings]") {
    RingPair r;
    pib::testing::Pair &pair = r.pair;
    constexpr uint32_t kLength = 1 << 20;
    const uint64_t src = pair.a.host.allocRandom(kLength, 31);
    const uint64_t dst = pair.b.host.alloc(kLength);
    pair.a.postSend(1,
                    {.opcode = PIB_WR_RDMA_WRITE, .local = src, .length = kLength, .remote = dst});
    pair.a.host.runScheduled();
    CHECK(!r.a->take().empty()); // the switch took them; the move loses them

    std::string why;
    const std::vector<uint8_t> state = pair.a.host.saveState(&why);
    REQUIRE(why.empty());
    pair.a.host.replaceCore();
    REQUIRE(pair.a.host.loadState(state).empty());
    // Its first cable is refused (the switch still holds the old QEMU's):
    // the loaded QPs send meanwhile, into a link that is not up.
    pib_core_port_connected(pair.a.host.core, 1, 1);
    while (pair.a.host.runScheduled()) {
    }
    pair.a.host.descriptorsBehindAtMost = 4096; // its HELLO, not its resends
    const size_t upBefore = pair.a.host.traces("link_rings_up");
    r.a = std::make_unique<RingSwitch>(pair.a.host, PIB_WIRE_HELLO_RESUMES);
    CHECK(pair.a.host.traces("link_resumed") >= 1);
    CHECK(pair.a.host.traces("link_rings_not_offered") == 0);
    REQUIRE(r.a->answer(true));
    CHECK(pair.a.host.traces("link_rings_up") == upBefore + 1);

    // What it resent before the answer took the stream; the rest, the ring.
    r.forwardsStreams = true;
    r.run(64, 5);
    const auto done = pair.a.poll();
    REQUIRE(done.size() == 1);
    CHECK(done[0].status == PIB_WC_SUCCESS);
    CHECK(std::memcmp(pair.a.host.at(src), pair.b.host.at(dst), kLength) == 0);
    CHECK(portCounters(pair.a)["frames_built_in_ring"] > 0);
}
