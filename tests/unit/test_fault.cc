// SPDX-License-Identifier: GPL-2.0-or-later
// The switch's fault injection: the spec syntax, each fault on its own
// with exact or statistical counts, determinism from the seed, the bounds
// on what is held back, and the flap schedule.
#include <algorithm>
#include <cstring>
#include <string>
#include <vector>

#include <catch2/catch.hpp>

#include "fault.hh"

using namespace pib::fabric;

namespace {

using Packet = std::vector<uint8_t>;

// Packet i: 64 bytes that carry i in their first four, the rest a pattern.
Packet numbered(uint32_t i) {
    Packet p(64);
    for (size_t b = 0; b < p.size(); ++b)
        p[b] = static_cast<uint8_t>(i * 7 + b);
    std::memcpy(p.data(), &i, 4);
    return p;
}

uint32_t numberOf(const Packet &p) {
    uint32_t i;
    std::memcpy(&i, p.data(), 4);
    return i;
}

FaultSpec spec(const char *text) {
    std::string error;
    const auto s = FaultSpec::parse(text, &error);
    INFO(error);
    REQUIRE(s);
    return *s;
}

// Offers packets 0..count-1 at time 0 and collects what leaves, in order.
std::vector<Packet> run(FaultInjector &f, uint32_t count, uint64_t stream = 0,
                        const char *text = nullptr) {
    if (text)
        f.configure(spec(text), stream, 0);
    std::vector<Packet> out;
    auto deliver = [&out](std::span<const uint8_t> b) { out.emplace_back(b.begin(), b.end()); };
    for (uint32_t i = 0; i < count; ++i)
        f.offer(numbered(i), 0, deliver);
    f.release(UINT64_MAX - 1, deliver);
    return out;
}

} // namespace

TEST_CASE("fault specs parse, print back, and refuse nonsense") {
    const FaultSpec s = spec("loss=5% corrupt=1%,dup=0.01 reorder=2% window=8 "
                             "delay=1ms±500us flap=200ms/5s seed=42 burst=3/100 loss-every=7");
    CHECK(s.loss == Approx(0.05));
    CHECK(s.corrupt == Approx(0.01));
    CHECK(s.duplicate == Approx(0.01));
    CHECK(s.reorder == Approx(0.02));
    CHECK(s.reorderWindow == 8);
    CHECK(s.delayNs == 1'000'000);
    CHECK(s.jitterNs == 500'000);
    CHECK(s.flapDownNs == 200'000'000);
    CHECK(s.flapEveryNs == 5'000'000'000);
    CHECK(s.seed == 42);
    CHECK(s.burstLength == 3);
    CHECK(s.burstEvery == 100);
    CHECK(s.lossEvery == 7);
    CHECK(s.toString() == "loss=5% loss-every=7 burst=3/100 corrupt=1% dup=1% reorder=2% "
                          "window=8 delay=1ms±500us flap=200ms/5s seed=42");
    CHECK(spec(s.toString().c_str()).toString() == s.toString());
    CHECK(spec("delay=2+-1").jitterNs == 1'000'000); // bare numbers are ms
    CHECK_FALSE(spec("seed=3").any());

    for (const char *bad :
         {"loss=150%", "loss=-1%", "loss=x", "burst=5/3", "flap=5s/1s", "window=0", "loss-every=1",
          "delay=1h", "lose=5%", "loss", "delay=99999s"}) {
        std::string error;
        INFO(bad);
        CHECK_FALSE(FaultSpec::parse(bad, &error));
        CHECK(error.find("bad fault") == 0);
    }
}

TEST_CASE("a fault setting names its directions") {
    std::string error;
    auto s = FaultSetting::parse("loss=1% dir=in", &error);
    REQUIRE(s);
    CHECK((s->in && !s->out));
    CHECK(s->spec.loss == Approx(0.01));
    s = FaultSetting::parse("dir=out,dup=2%", &error);
    REQUIRE(s);
    CHECK((!s->in && s->out));
    s = FaultSetting::parse("corrupt=1%", &error);
    REQUIRE(s);
    CHECK((s->in && s->out));
    CHECK_FALSE(FaultSetting::parse("dir=sideways loss=1%", &error));
    CHECK_FALSE(FaultSetting::parse("dir=in loss=2", &error));
}

TEST_CASE("without faults every packet passes unchanged, in order") {
    FaultInjector f;
    const auto out = run(f, 100, 0, "seed=9");
    REQUIRE(out.size() == 100);
    for (uint32_t i = 0; i < 100; ++i)
        CHECK(out[i] == numbered(i));
    CHECK(f.counters().packets == 100);
    CHECK(f.counters().dropped == 0);
}

TEST_CASE("loss drops packets by chance, by count, and in bursts") {
    FaultInjector f;
    auto out = run(f, 20000, 0, "loss=5%");
    CHECK(f.counters().dropped > 800);
    CHECK(f.counters().dropped < 1200);
    CHECK(out.size() == 20000 - f.counters().dropped);
    CHECK(std::is_sorted(out.begin(), out.end(),
                         [](auto &a, auto &b) { return numberOf(a) < numberOf(b); }));

    out = run(f, 100, 0, "loss-every=10"); // packets 10, 20, ... counting from 1
    REQUIRE(out.size() == 90);
    CHECK(f.counters().dropped == 10);
    for (const Packet &p : out)
        CHECK((numberOf(p) + 1) % 10 != 0);

    out = run(f, 100, 0, "burst=3/20"); // the first 3 of each 20
    REQUIRE(out.size() == 85);
    for (const Packet &p : out)
        CHECK(numberOf(p) % 20 >= 3);
}

TEST_CASE("corruption flips exactly one bit of a packet") {
    FaultInjector f;
    const auto out = run(f, 500, 0, "corrupt=100%");
    REQUIRE(out.size() == 500);
    CHECK(f.counters().corrupted == 500);
    std::vector<int> bitsHit(64 * 8);
    for (const Packet &p : out) {
        int flipped = 0;
        // The number may be the corrupted part: find the original by distance.
        for (uint32_t i = 0; i < 500; ++i) {
            const Packet orig = numbered(i);
            int diff = 0;
            for (size_t b = 0; b < orig.size(); ++b)
                diff += __builtin_popcount(orig[b] ^ p[b]);
            if (diff == 1) {
                flipped = 1;
                break;
            }
        }
        CHECK(flipped == 1);
    }
}

TEST_CASE("duplication sends a packet twice, one after the other") {
    FaultInjector f;
    const auto out = run(f, 50, 0, "dup=100%");
    REQUIRE(out.size() == 100);
    CHECK(f.counters().duplicated == 50);
    for (uint32_t i = 0; i < 50; ++i) {
        CHECK(out[2 * i] == numbered(i));
        CHECK(out[2 * i + 1] == numbered(i));
    }
}

TEST_CASE("reordering lets up to `window` later packets overtake one, and loses none") {
    FaultInjector f;
    const auto out = run(f, 5000, 0, "reorder=10% window=3");
    REQUIRE(out.size() == 5000);
    const uint64_t reordered = f.counters().reordered;
    CHECK(reordered > 350);
    CHECK(reordered < 650);
    std::vector<uint32_t> numbers;
    for (const Packet &p : out)
        numbers.push_back(numberOf(p));
    CHECK_FALSE(std::is_sorted(numbers.begin(), numbers.end()));
    // Every packet arrives once, and none later than a few places behind.
    std::vector<uint32_t> sorted = numbers;
    std::sort(sorted.begin(), sorted.end());
    for (uint32_t i = 0; i < 5000; ++i)
        REQUIRE(sorted[i] == i);
    for (size_t at = 0; at < numbers.size(); ++at)
        CHECK(at - std::min<size_t>(at, numbers[at]) <= 3 * 4);
}

TEST_CASE("a reordered packet on a link that falls quiet still leaves") {
    FaultInjector f;
    f.configure(spec("reorder=100%"), 0, 0);
    std::vector<Packet> out;
    auto deliver = [&out](std::span<const uint8_t> b) { out.emplace_back(b.begin(), b.end()); };
    f.offer(numbered(1), 1000, deliver);
    CHECK(out.empty());
    REQUIRE(f.nextRelease() == 1000 + FaultInjector::kReorderTimeoutNs);
    f.release(1000 + FaultInjector::kReorderTimeoutNs - 1, deliver);
    CHECK(out.empty());
    f.release(1000 + FaultInjector::kReorderTimeoutNs, deliver);
    REQUIRE(out.size() == 1);
    CHECK_FALSE(f.nextRelease());
}

TEST_CASE("delay holds packets for their time, with jitter, in order") {
    FaultInjector f;
    f.configure(spec("delay=1ms±500us"), 0, 0);
    std::vector<Packet> out;
    auto deliver = [&out](std::span<const uint8_t> b) { out.emplace_back(b.begin(), b.end()); };
    for (uint32_t i = 0; i < 100; ++i)
        f.offer(numbered(i), i * 10'000, deliver);
    CHECK(out.empty());
    CHECK(f.counters().delayed == 100);
    REQUIRE(f.nextRelease());
    CHECK(*f.nextRelease() >= 500'000);
    CHECK(*f.nextRelease() <= 1'500'000);
    f.release(499'999, deliver);
    CHECK(out.empty());
    f.release(3'000'000, deliver);
    REQUIRE(out.size() == 100);
    for (uint32_t i = 0; i < 100; ++i)
        CHECK(numberOf(out[i]) == i);
}

TEST_CASE("what is held back is bounded, and clear() lets it all go") {
    FaultInjector f;
    f.configure(spec("delay=10s"), 0, 0);
    std::vector<Packet> out;
    auto deliver = [&out](std::span<const uint8_t> b) { out.emplace_back(b.begin(), b.end()); };
    for (uint32_t i = 0; i < FaultInjector::kMaxHeldPackets + 100; ++i)
        f.offer(numbered(i), 0, deliver);
    CHECK(out.empty());
    CHECK(f.counters().overflowed == 100);
    f.clear(deliver);
    CHECK_FALSE(f.active());
    CHECK(out.size() == FaultInjector::kMaxHeldPackets);
    CHECK_FALSE(f.nextRelease());
}

TEST_CASE("the same seed gives the same faults; another port or seed others") {
    const char *text = "loss=10% corrupt=5% dup=5% reorder=5% seed=7";
    FaultInjector a, b, c;
    const auto first = run(a, 2000, 3, text);
    const auto again = run(b, 2000, 3, text);
    const auto other = run(c, 2000, 4, text);
    CHECK(first == again);
    CHECK(a.counters().toString() == b.counters().toString());
    CHECK(first != other);
    const auto reseeded = run(c, 2000, 3, "loss=10% corrupt=5% dup=5% reorder=5% seed=8");
    CHECK(first != reseeded);
}

TEST_CASE("a flapping link is down at the end of each period") {
    FlapSchedule f;
    CHECK_FALSE(f.active());
    f.configure(200, 1000, 5000);
    REQUIRE(f.active());
    CHECK_FALSE(f.down(5000));
    CHECK_FALSE(f.down(5799));
    CHECK(f.down(5800));
    CHECK(f.down(5999));
    CHECK_FALSE(f.down(6000));
    CHECK(f.nextChange(5000) == 5800);
    CHECK(f.nextChange(5800) == 6000);
    CHECK(f.nextChange(6100) == 6800);
    f.clear();
    CHECK_FALSE(f.down(5900));
}
