// SPDX-License-Identifier: GPL-2.0-or-later
// The objects of a saved state that a device's work made (docs/migration.md):
// a region a REG_MR WQE mapped, one invalidated since, windows bound by
// BIND_MW WQEs, each loaded into a fresh device as those WQEs left it.
#include <catch2/catch.hpp>

#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

#include "connected_fixture.hh"

using namespace pib;
using namespace pib::testing;

namespace {

std::vector<uint8_t> saved(FakeHost &host) {
    void *state = nullptr;
    size_t len = 0;
    char *why = nullptr;
    const int result = pib_core_save(host.core, &state, &len, &why);
    INFO((why ? why : ""));
    REQUIRE(result == 0);
    std::vector<uint8_t> bytes(static_cast<uint8_t *>(state), static_cast<uint8_t *>(state) + len);
    std::free(state);
    std::free(why);
    return bytes;
}

// A fresh device with `from`'s guest RAM and clock, loaded with `state`;
// the loader's reason when it refused.
std::string loadInto(FakeHost &to, FakeHost &from, const std::vector<uint8_t> &state) {
    to.ram = from.ram;
    to.ramNext = from.ramNext;
    to.now = from.now;
    char *why = nullptr;
    const int result = pib_core_load(to.core, state.data(), state.size(), &why);
    std::string reason = why ? why : "";
    std::free(why);
    return result == 0 ? "" : reason.empty() ? "refused, no reason" : reason;
}

pib_cqe completionOf(Pair &p, Node &n) {
    p.wire.run();
    auto done = n.poll();
    expect(done.size() == 1, "one completion");
    return done[0];
}

template <class T> T query(FakeHost &host, uint16_t opcode, uint32_t key) {
    T c{};
    REQUIRE(host.commandOut(opcode, key, &c).status == PIB_CMD_STATUS_OK);
    return c;
}

} // namespace

TEST_CASE("regions and windows are loaded as the WQEs that mapped and bound them left them",
          "[object-state]") {
    Pair p;
    Node &b = p.b;
    // A region windows may be bound to, a type 1 and a type 2 window bound.
    const uint64_t base = b.host.alloc(16384);
    pib_mr_context region{};
    region.pdn = b.pd;
    region.access = PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_MW_BIND;
    region.flags = PIB_MR_PHYSICAL;
    region.iova = base;
    region.length = 16384;
    const auto mrKey = static_cast<uint32_t>(b.host.commandIn(PIB_CMD_CREATE_MR, 0, region).result);
    std::vector<uint32_t> windows;
    for (uint8_t type : {PIB_MW_TYPE_1, PIB_MW_TYPE_2}) {
        pib_mw_context mw{};
        mw.pdn = b.pd;
        mw.type = type;
        mw.key_variant = 0x40;
        const auto key = static_cast<uint32_t>(b.host.commandIn(PIB_CMD_CREATE_MW, 0, mw).result);
        const uint32_t bound = (key & ~0xffu) | 0x41;
        b.postBind(type, {base + 4096 * type, 4096, key, bound, mrKey,
                          PIB_ACCESS_REMOTE_READ | PIB_ACCESS_REMOTE_WRITE});
        REQUIRE(completionOf(p, b).status == PIB_WC_SUCCESS);
        windows.push_back(bound);
    }
    // Two fast-registration regions mapped by REG_MR; the second is
    // invalidated since.
    std::vector<uint32_t> fast;
    for (uint64_t wr : {3, 4}) {
        const uint32_t key = (b.createFastRegMr(2) & ~0xffu) | 0x5a;
        const uint64_t list = b.host.alloc(16, 8);
        b.host.poke(list, b.host.alloc(4096));
        b.host.poke(list + 8, b.host.alloc(4096));
        pib_wqe_reg_mr reg{};
        reg.iova = 0x7000'0100;
        reg.length = 4096;
        reg.page_list = list;
        reg.key = key;
        reg.access = PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_REMOTE_WRITE;
        reg.page_count = 2;
        reg.log_page_size = 12;
        b.postRegMr(wr, reg);
        REQUIRE(completionOf(p, b).status == PIB_WC_SUCCESS);
        fast.push_back(key);
    }
    b.postLocalInv(5, fast[1]);
    REQUIRE(completionOf(p, b).status == PIB_WC_SUCCESS);
    // The QP goes (QPs are not saved yet); what its WQEs made stays.
    REQUIRE(b.host.command(PIB_CMD_DESTROY_QP, b.qpn).status == PIB_CMD_STATUS_OK);
    const std::vector<uint8_t> state = saved(b.host);

    FakeHost c;
    REQUIRE(loadInto(c, b.host, state) == "");
    CHECK(saved(c) == state);
    for (uint32_t key : fast) {
        const auto before = query<pib_mr_context>(b.host, PIB_CMD_QUERY_MR, key);
        const auto after = query<pib_mr_context>(c, PIB_CMD_QUERY_MR, key);
        CHECK(std::memcmp(&before, &after, sizeof(before)) == 0);
        CHECK(after.length == 4096);
    }
    for (uint32_t key : windows) {
        const auto before = query<pib_mw_context>(b.host, PIB_CMD_QUERY_MW, key);
        const auto after = query<pib_mw_context>(c, PIB_CMD_QUERY_MW, key);
        CHECK(std::memcmp(&before, &after, sizeof(before)) == 0);
    }
    // The type 1 window stays bound; the type 2 one went with its QP.
    CHECK(query<pib_mw_context>(c, PIB_CMD_QUERY_MW, windows[0]).bound == 1);
    // The region is held by its bound window, counted again.
    CHECK(c.command(PIB_CMD_DESTROY_MR, mrKey).status == PIB_CMD_STATUS_BUSY);
    for (uint32_t key : windows)
        CHECK(c.command(PIB_CMD_DESTROY_MW, key).status == PIB_CMD_STATUS_OK);
    CHECK(c.command(PIB_CMD_DESTROY_MR, mrKey).status == PIB_CMD_STATUS_OK);
    // A fast-registration region's range is written by the device only.
    const auto mapped = query<pib_mr_context>(c, PIB_CMD_QUERY_MR, fast[0]);
    pib_mtt_write write{};
    write.count = 1;
    write.entries[0] = 0x10000;
    CHECK(c.commandIn(PIB_CMD_WRITE_MTT, mapped.mtt_index, write).status ==
          PIB_CMD_STATUS_BAD_STATE);

    SECTION("a window bound beyond its region is refused with BIND_MW's reason") {
        std::vector<uint8_t> bad = state;
        pib_mw_context ctx = query<pib_mw_context>(b.host, PIB_CMD_QUERY_MW, windows[0]);
        auto at = std::search(bad.begin(), bad.end(), reinterpret_cast<const uint8_t *>(&ctx),
                              reinterpret_cast<const uint8_t *>(&ctx) + sizeof(ctx));
        REQUIRE(at != bad.end());
        ctx.length = 1 << 20;
        std::memcpy(&*at, &ctx, sizeof(ctx));
        FakeHost d;
        const std::string why = loadInto(d, b.host, bad);
        CHECK(why.find("the range is not within the region") != std::string::npos);
        CHECK(d.guestErrors() == 0);
    }
}

namespace {

bool sameBytes(Node &x, uint64_t ax, Node &y, uint64_t ay, uint32_t len) {
    return std::memcmp(x.host.at(ax), y.host.at(ay), len) == 0;
}

// `n` moves: its device's state is saved, what both cables held is lost,
// and the state is loaded into the device again (a load starts with a
// reset: nothing of the device survives but what the state carries). The
// switch kept the link: the new cable's HELLO says it resumes.
void move(Pair &p, Node &n) {
    const std::vector<uint8_t> state = saved(n.host);
    p.a.host.portOutput[1].clear();
    p.b.host.portOutput[1].clear();
    char *why = nullptr;
    const int loaded = pib_core_load(n.host.core, state.data(), state.size(), &why);
    INFO((why ? why : ""));
    std::free(why);
    REQUIRE(loaded == 0);
    pib_core_port_connected(n.host.core, 1, 1);
    n.host.switchHello(PIB_WIRE_HELLO_RESUMES);
}

// Every completion of `n` that came, until `count` have: all successful.
std::vector<pib_cqe> completions(Pair &p, Node &n, size_t count) {
    std::vector<pib_cqe> done;
    for (int i = 0; i < 400 && done.size() < count; ++i) { // up to 4 s of timeouts
        p.wire.advance(10'000'000, 1'000'000);
        for (const pib_cqe &c : n.poll())
            done.push_back(c);
    }
    return done;
}

} // namespace

// What issue 33 asks of the device's state: an RC transfer in flight moves
// whole when either end is saved and loaded in the middle of it, with
// SENDs, WRITEs, READs and atomics outstanding, every byte checked and no
// atomic run twice.
TEST_CASE("RC traffic in flight completes whole when either end is saved and loaded mid-way",
          "[object-state]") {
    constexpr uint32_t kLength = 64 << 10;
    constexpr int kEach = 4;
    Pair p(PIB_QPT_RC, {.maxRdAtomic = 4}, 32 << 20);
    const bool requesterMoves = GENERATE(true, false);
    // Where the move cuts the traffic: after this many packets crossed.
    const int crossed = GENERATE(3, 40, 150);
    CAPTURE(requesterMoves, crossed);
    std::vector<std::pair<uint64_t, uint64_t>> copies; // (a's, b's) buffers of kLength
    const uint64_t counter = p.b.host.alloc(8);
    uint64_t wr = 0;
    for (int i = 0; i < kEach; ++i) {
        const uint64_t sendSrc = p.a.host.allocRandom(kLength, 10 + i);
        const uint64_t sendDst = p.b.host.alloc(kLength);
        p.b.postRecv(100 + i, sendDst, kLength);
        p.a.postSend(++wr, {.local = sendSrc, .length = kLength});
        copies.emplace_back(sendSrc, sendDst);
        const uint64_t writeSrc = p.a.host.allocRandom(kLength, 20 + i);
        const uint64_t writeDst = p.b.host.alloc(kLength);
        p.a.postSend(++wr, {.opcode = PIB_WR_RDMA_WRITE,
                            .local = writeSrc,
                            .length = kLength,
                            .remote = writeDst});
        copies.emplace_back(writeSrc, writeDst);
        const uint64_t readDst = p.a.host.alloc(kLength);
        const uint64_t readSrc = p.b.host.allocRandom(kLength, 30 + i);
        p.a.postSend(
            ++wr,
            {.opcode = PIB_WR_RDMA_READ, .local = readDst, .length = kLength, .remote = readSrc});
        copies.emplace_back(readDst, readSrc);
        p.a.postSend(++wr, {.opcode = PIB_WR_ATOMIC_FETCH_AND_ADD,
                            .local = p.a.host.alloc(8),
                            .length = 8,
                            .remote = counter,
                            .swapAdd = 1});
    }
    // Some of it crossed and was answered, the rest is lost with the move.
    int passed = 0;
    p.wire.filter = [&](bool, iba::Packet &) { return ++passed <= crossed; };
    p.wire.run();
    p.wire.filter = nullptr;
    const size_t before = p.a.poll().size();
    CHECK(before < wr); // the move comes in the middle
    move(p, requesterMoves ? p.a : p.b);
    const auto done = completions(p, p.a, wr - before);
    REQUIRE(done.size() == wr - before);
    // What was lost on the move came again: the responder saw duplicates.
    pib_port_counters counters{};
    REQUIRE(p.b.host.commandOut(PIB_CMD_QUERY_COUNTERS, 1, &counters).status == PIB_CMD_STATUS_OK);
    CHECK(counters.duplicate_requests > 0);
    for (const pib_cqe &c : done) {
        CAPTURE(c.wr_id);
        CHECK(c.status == PIB_WC_SUCCESS);
    }
    for (const auto &[a, b] : copies)
        CHECK(sameBytes(p.a, a, p.b, b, kLength));
    // Each fetch-and-add ran once: the counter counts them exactly.
    CHECK(p.b.host.peek<uint64_t>(counter) == kEach);
    const auto received = p.b.poll();
    CHECK(received.size() == kEach);
    CHECK(p.a.qpState() == PIB_QPS_RTS);
    CHECK(p.b.qpState() == PIB_QPS_RTS);
}
