// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX personality's completion queues and SRQs (docs/mlx5.md
// §8, §9): CREATE_CQ and its checks, what a CQ holds, the arm doorbell,
// the 64- and 128-byte CQEs the data path's completions become, with their
// owner bit and overrun, the async events as EQEs; CREATE_SRQ and its checks, what
// an SRQ holds, its limit.
#include <catch2/catch.hpp>

#include <algorithm>
#include <cstdlib>
#include <cstring>
#include <string>

#include "conditions.hh"
#include "event_writer.hh"
#include "mlx5/mlx5_completion_queues.hh"
#include "mlx5_checks.hh"
#include "mlx5_host.hh"

using namespace pib::mlx5;

namespace {

constexpr uint16_t kDestroyCq = 0x401, kDestroyEq = 0x302, kDeallocUar = 0x803;
constexpr Field kEqNumber = field(0x58, 8);
constexpr Field kCqNumber = field(0x48, 24);
constexpr uint64_t kCqErrorEvents = 1u << 0x04, kPortEvents = 1u << 0x09;

// A function brought up with a UAR page and an EQ taking `types`.
struct Function {
    Mlx5Host host;
    uint32_t uar = 0;
    uint32_t eqn = 0;
    uint64_t eqRing = 0;
    explicit Function(uint64_t types = 0) {
        REQUIRE(host.bringUp());
        uar = host.allocUar();
        const auto r = host.run(host.eqInput(3, types, 1, uar, &eqRing), 16);
        REQUIRE(r.status() == 0);
        eqn = static_cast<uint32_t>(r.get(kEqNumber));
    }
    Mlx5Host::Reply destroy(uint16_t opcode, Field f, uint32_t number) {
        auto in = Mlx5Host::input(opcode);
        set(in, f, number);
        return host.run(in, 16);
    }
    // The arm doorbell as mlx5_cq_arm writes it: two big-endian dwords.
    void arm(uint32_t cqn, uint32_t command, uint32_t consumer) {
        const uint32_t word = command << 24 | consumer;
        const uint64_t value = uint64_t{__builtin_bswap32(cqn)} << 32 | __builtin_bswap32(word);
        pib_core_bar_write(host.core, PIB_BAR_REGS, uint64_t{uar} * 4096 + 0x20, value, 8);
    }
    void inject(const std::string &line) {
        char *answer = nullptr;
        REQUIRE(pib_core_inject(host.core, line.c_str(), &answer) == 0);
        std::free(answer);
    }
    const uint8_t *eqe(uint32_t index) { return host.at(eqRing + 64 * index); }
};

} // namespace

TEST_CASE("mlx5: CREATE_CQ checks its context and page list", "[mlx5]") {
    Function f;
    uint64_t ring = 0, record = 0;
    auto refused = [&](const std::vector<uint8_t> &in, uint8_t status,
                       const pib::err::Condition &why) { checkRefused(f.host, in, status, why); };
    const auto in = f.host.cqInput(2, f.eqn, f.uar, &ring, &record);
    const std::pair<Field, uint64_t> contexts[] = {
        {field(0x80 + 0x08, 3), 2},     // cqe_sz: beyond 128 bytes
        {field(0x80 + 0x11, 1), 1},     // CQE compression
        {field(0x80 + 0x0d, 1), 1},     // scqe_break_moderation_en
        {field(0x80 + 0x63, 5), 23},    // log_cq_size beyond 22
        {field(0x80 + 0x54, 6), 1},     // page_offset
        {field(0x80 + 0xc3, 5), 19},    // log_page_size
        {field(0x80 + 0x68, 24), 9},    // uar_page not given
        {field(0x80 + 0xa0, 32), 5},    // no such EQ
        {field(0x80 + 0x1c0, 64), 0x4}, // dbr_addr misaligned
        {field(0x80 + 0x1c0, 64), 0x8}, // and not RAM
    };
    for (const auto &[where, value] : contexts) {
        INFO("field at bit 0x" << std::hex << where.bit << " = 0x" << value);
        auto bad = in;
        set(bad, where, value);
        refused(bad, status::kBadParam, pib::err::kMlx5CqBadContext);
    }
    auto bad = in;
    set(bad, field(0x2e0, 1), 1); // cq_umem_valid, and UMEM 0 is none
    refused(bad, status::kBadResource, pib::err::kMlx5CmdBadResource);
    bad = in;
    writeBe64(&bad[0x110], ring + 64); // misaligned
    refused(bad, status::kBadParam, pib::err::kMlx5CqBadPages);
    bad = in;
    writeBe64(&bad[0x110], 0x1000); // aligned, not guest RAM
    refused(bad, status::kBadParam, pib::err::kMlx5CqBadPages);
    // 2^7 CQEs take two pages: a list of one is short.
    auto two = f.host.cqInput(7, f.eqn, f.uar, &ring, &record);
    two.resize(0x118);
    refused(two, status::kBadInputLength, pib::err::kMlx5CmdShortInput);
    // Nothing was made: the first CQ is number 0.
    const auto r = f.host.run(in, 16);
    REQUIRE(r.status() == 0);
    CHECK(r.get(kCqNumber) == 0);
}

TEST_CASE("mlx5: a CQ holds its EQ until DESTROY_CQ, and may outlive its UAR page", "[mlx5]") {
    Function f;
    uint64_t ring = 0, record = 0;
    const uint32_t page = f.host.allocUar(); // the CQ's; f.uar is the EQ's
    const auto r = f.host.run(f.host.cqInput(2, f.eqn, page, &ring, &record), 16);
    REQUIRE(r.status() == 0);
    const auto cqn = static_cast<uint32_t>(r.get(kCqNumber));
    CHECK(f.host.traces("mlx5_cq_create") == 1);
    CHECK(f.destroy(kDestroyEq, kEqNumber, f.eqn).status() == status::kBadResourceState);
    CHECK(f.destroy(kDeallocUar, field(0x48, 24), f.uar).status() == status::kBadResourceState);
    // The CQ's page goes, as libmlx5's does when a context closes with CQs
    // left; an arm doorbell there is then the driver's error.
    CHECK(f.destroy(kDeallocUar, field(0x48, 24), page).status() == 0);
    f.host.clear();
    pib_core_bar_write(f.host.core, PIB_BAR_REGS, uint64_t{page} * 4096 + 0x20, 0, 8);
    CHECK(f.host.guestErrors("mlx5-uar-unallocated") == 1);
    CHECK(f.destroy(kDestroyCq, kCqNumber, cqn).status() == 0);
    const auto again = f.destroy(kDestroyCq, kCqNumber, cqn);
    CHECK(again.status() == status::kBadResource);
    CHECK(again.syndrome() == pib::err::kMlx5CmdBadResource.syndrome);
    CHECK(f.destroy(kDestroyEq, kEqNumber, f.eqn).status() == 0);
    CHECK(f.destroy(kDeallocUar, field(0x48, 24), f.uar).status() == 0);
}

TEST_CASE("mlx5: async events reach the EQ that takes their type", "[mlx5]") {
    Function f(kCqErrorEvents | kPortEvents);
    uint64_t ring = 0, record = 0;
    const auto r = f.host.run(f.host.cqInput(2, f.eqn, f.uar, &ring, &record), 16);
    REQUIRE(r.status() == 0);
    const auto cqn = static_cast<uint32_t>(r.get(kCqNumber));
    f.inject("event cq-err " + std::to_string(cqn));
    f.inject("event port-active 1");
    f.inject("event client-reregister 1");
    CHECK(f.eqe(0)[1] == 0x04);
    CHECK(readBe32(f.eqe(0) + 0x20) == cqn);
    CHECK(f.eqe(0)[0x20 + 0x0b] == 1); // overrun
    CHECK(f.eqe(1)[1] == 0x09);
    CHECK(f.eqe(1)[3] == 0x04); // active
    CHECK(f.eqe(1)[0x20 + 8] == 0x10);
    CHECK(f.eqe(2)[3] == 0x09);    // client reregistration
    CHECK(f.eqe(3)[0x3f] == 0x01); // nothing more: still the driver's
}

namespace {

// A ConnectX CQ and EQ as components, with the core's EventWriter
// filling the CQ: what the transports' completions look like to mlx5_ib.
struct Components {
    Mlx5Host host;
    pib::Host bus{FakeHost::hostOps(), &host};
    pib_core_config config = Mlx5Host::mlx5Config();
    pib::ObjectTables objects{config};
    Uars uars{4};
    EventQueues eqs{bus, uars, 8};
    // The writer takes the CQs' layout; the CQs arm and moderate through
    // the writer: each keeps a reference to the other, used only once both
    // exist.
    pib::EventWriter writer{bus, objects.mtt, objects.cqs, cqs};
    CompletionQueues cqs{bus, objects, uars, eqs, writer};
    uint32_t uar = *uars.alloc(0);
    uint32_t eqn = 0, cqn = 0;
    uint64_t eqRing = 0, cqRing = 0, record = 0;

    uint32_t cqeBytes;

    // A CQ of 2^logCqSize CQEs of 64 << cqeSize bytes; `oi`: it ignores
    // overrun.
    explicit Components(uint32_t logCqSize, uint32_t cqeSize = 0, bool oi = false)
        : cqeBytes(64u << cqeSize) {
        REQUIRE(eqs.create(host.eqInput(3, kCqErrorEvents, 2, uar, &eqRing), eqn) == nullptr);
        auto in = host.cqInput(logCqSize, eqn, uar, &cqRing, &record, cqeSize);
        set(in, field(0x80 + 0x0e, 1), oi);
        REQUIRE(cqs.create(in, cqn) == nullptr);
    }
    // The 64-byte CQE of slot `index`: a 128-byte CQE's second half.
    const uint8_t *cqe(uint32_t index) {
        return host.at(cqRing + uint64_t{cqeBytes} * index + cqeBytes - 64);
    }
    void consumed(uint32_t count) { writeBe32(host.at(record), count & 0xffffff); }
    void arm(uint32_t command, uint32_t consumer) {
        const uint32_t word = command << 24 | consumer;
        cqs.armDoorbell(uar, uint64_t{__builtin_bswap32(cqn)} << 32 | __builtin_bswap32(word));
    }
};

pib::Completion receive() {
    pib::Completion c;
    c.qpn = 0x1234;
    c.wqeIndex = 7;
    c.opcode = PIB_WC_RECV;
    c.byteLen = 296;
    c.srcQp = 1;
    c.slid = 0x11;
    c.sl = 3;
    c.dlidPathBits = 2;
    c.grh = true;
    c.pkey = 0xffff;
    return c;
}

} // namespace

TEST_CASE("mlx5: completions become 64-byte CQEs, the owner bit last", "[mlx5]") {
    Components k(1);
    k.writer.postCqe(k.cqn, receive(), false);
    const uint8_t *e = k.cqe(0);
    CHECK(e[0x3f] == 0x20); // RESP_SEND, owner 0 on the first pass
    CHECK(readBe32(e + 0x2c) == 296);
    CHECK(readBe32(e + 0x18) == (1u << 28 | 3u << 24 | 1));
    CHECK(readBe32(e + 0x14) == 0x11);
    CHECK(e[0x11] == 2);
    CHECK(readBe32(e + 0x24) == 0xffff); // QP1 reads the P_Key here
    CHECK(readBe32(e + 0x38) == 0x1234);
    CHECK(readBe32(e + 0x3c) >> 16 == 7);

    pib::Completion send;
    send.qpn = 0x1234;
    send.wqeIndex = 9;
    send.opcode = PIB_WC_RDMA_WRITE;
    send.status = PIB_WC_WR_FLUSH_ERR;
    k.writer.postCqe(k.cqn, send, false);
    e = k.cqe(1);
    CHECK(e[0x3f] == 0xd0); // REQ_ERR
    CHECK(e[0x37] == 0x05); // flushed
    CHECK(readBe32(e + 0x38) == 0x1234);

    // A third on a ring of two whose driver consumed none: lost, once.
    k.host.clear();
    k.writer.postCqe(k.cqn, receive(), false);
    k.writer.postCqe(k.cqn, receive(), false);
    CHECK(k.host.guestErrors("cq-overrun") == 1);
    CHECK(k.host.at(k.eqRing)[1] == 0x04); // CQ_ERROR
    CHECK(k.cqe(0)[0x3f] == 0x20);
    // Consumed, the ring takes CQEs again, their owner bit now 1.
    k.consumed(2);
    k.writer.postCqe(k.cqn, receive(), false);
    CHECK(k.cqe(0)[0x3f] == 0x21);
}

TEST_CASE("mlx5: a 128-byte CQE is the 64-byte CQE after 64 bytes the device leaves zero",
          "[mlx5]") {
    Components k(1, 1);
    std::memset(k.host.at(k.cqRing), 0xa5, 64); // what scatter-to-CQE would overwrite
    k.writer.postCqe(k.cqn, receive(), false);
    k.writer.postCqe(k.cqn, receive(), false);
    for (uint32_t i = 0; i < 2; ++i) {
        INFO("CQE " << i);
        CHECK(k.cqe(i)[0x3f] == 0x20); // RESP_SEND, owner 0
        CHECK(readBe32(k.cqe(i) + 0x2c) == 296);
        const uint8_t *first = k.host.at(k.cqRing + 128 * i);
        CHECK(std::all_of(first, first + 64, [](uint8_t b) { return b == 0; }));
    }
    // The ring is 2 x 128 bytes: the third CQE overruns it.
    k.writer.postCqe(k.cqn, receive(), false);
    CHECK(k.host.guestErrors("cq-overrun") == 1);
}

// mlx5_ib takes a CQE or an EQE once its owner bit says so: the device
// writes every other byte first, and the owner byte alone, last.
TEST_CASE("mlx5: a CQE's and an EQE's owner byte lands last, in a write of its own", "[mlx5]") {
    for (const uint32_t cqeSize : {0u, 1u}) {
        INFO((64u << cqeSize) << "-byte CQEs");
        Components k(2, cqeSize);
        k.arm(0, 0);
        k.eqs.doorbell(k.uar, k.eqn << 24, true);
        k.host.recordingDmaWrites = true;
        k.writer.postCqe(k.cqn, receive(), false); // and a completion EQE
        k.writer.postCqe(k.cqn, receive(), false);
        for (uint32_t i = 0; i < 2; ++i)
            CHECK(k.host.ownerWrittenLast(k.cqRing + uint64_t{k.cqeBytes} * i, k.cqeBytes,
                                          k.cqeBytes - 1));
        CHECK(k.host.at(k.eqRing)[1] == 0x00); // the completion event
        CHECK(k.host.ownerWrittenLast(k.eqRing, 64, 0x3f));
    }
}

TEST_CASE("mlx5: a CQ that ignores overrun writes on over CQEs not consumed", "[mlx5]") {
    Components k(1, 0, true);
    for (int i = 0; i < 3; ++i)
        k.writer.postCqe(k.cqn, receive(), false);
    // The third went over the first, on the ring's second pass; no error.
    CHECK(k.cqe(0)[0x3f] == 0x21);
    CHECK(k.host.guestErrors() == 0);
    CHECK(k.host.at(k.eqRing)[1] == 0x01); // as the driver left it: no CQ_ERROR
}

TEST_CASE("mlx5: MODIFY_CQ resizes a CQ, a resize CQE ending the old ring", "[mlx5]") {
    Function f;
    uint64_t ring = 0, record = 0;
    auto r = f.host.run(f.host.cqInput(2, f.eqn, f.uar, &ring, &record), 16);
    REQUIRE(r.status() == 0);
    const auto cqn = static_cast<uint32_t>(r.get(kCqNumber));
    // A resize to 2^3 CQEs of 128 bytes, as mlx5_ib_resize_cq asks.
    uint64_t newRing = 0, unused = 0;
    auto resize = f.host.cqInput(3, f.eqn, f.uar, &newRing, &unused, 1);
    resize[1] = 0x03;                // MODIFY_CQ
    set(resize, field(0x30, 16), 1); // op_mod: resize
    set(resize, field(0x48, 24), cqn);
    set(resize, field(0x60, 32), 7); // size, page offset and page size
    r = f.host.run(resize, 16);
    REQUIRE(r.status() == 0);
    // The old ring's first slot holds the resize CQE (opcode 5, owner 0).
    CHECK(f.host.at(ring)[0x3f] == 0x50);
    CHECK(f.host.traces("mlx5_cq_resize") == 1);
    // Op_mods other than moderation (0) and resize, and unknown CQs, are refused.
    set(resize, field(0x30, 16), 2);
    checkRefused(f.host, resize, status::kBadParam, pib::err::kMlx5CmdBadParam);
    set(resize, field(0x30, 16), 1);
    set(resize, field(0x48, 24), 77);
    checkRefused(f.host, resize, status::kBadResource, pib::err::kMlx5CmdBadResource);
    // Only the size and page fields may change, the size among them.
    set(resize, field(0x48, 24), cqn);
    set(resize, field(0x60, 32), 2);
    checkRefused(f.host, resize, status::kBadParam, pib::err::kMlx5CqBadContext);
}

TEST_CASE("mlx5: an armed CQ's next CQE is a completion event on its EQ", "[mlx5]") {
    Components k(2);
    k.host.clear();
    k.arm(0, 0);
    CHECK(k.host.traces("mlx5_cq_arm") == 1);
    CHECK(k.host.interrupts.empty());
    // The EQ itself is armed as the driver does, so its vector signals.
    k.eqs.doorbell(k.uar, k.eqn << 24, true);
    k.writer.postCqe(k.cqn, receive(), false);
    CHECK(k.host.at(k.eqRing)[1] == 0x00);
    CHECK(readBe32(k.host.at(k.eqRing) + 0x20 + 0x18) == k.cqn);
    CHECK(k.host.interrupts == std::vector<unsigned>{2});
    // Disarmed: the next CQE makes no event.
    k.writer.postCqe(k.cqn, receive(), false);
    CHECK(k.host.at(k.eqRing + 64)[0x3f] == 0x01);
    // Armed "solicited": an unsolicited CQE makes none, a solicited one does.
    k.arm(1, 2);
    k.writer.postCqe(k.cqn, receive(), false);
    CHECK(k.host.at(k.eqRing + 64)[0x3f] == 0x01);
    k.writer.postCqe(k.cqn, receive(), true);
    CHECK(k.host.at(k.eqRing + 64)[1] == 0x00);
    CHECK(k.host.at(k.eqRing + 64)[0x3f] == 0x00);
    // Armed with a CQE beyond the consumer counter: the event comes at once.
    k.arm(0, 3);
    CHECK(k.host.at(k.eqRing + 128)[0x3f] == 0x00);
    // An arm that lost a race with a later one names an older CQE: the
    // event comes at once, as for any CQE beyond the counter.
    k.writer.postCqe(k.cqn, receive(), false); // four CQEs written
    k.arm(0, 4);
    k.host.clear();
    k.arm(0, 1);
    CHECK(k.host.guestErrors("mlx5-cq-doorbell") == 0);
    CHECK(k.host.at(k.eqRing + 192)[0x3f] == 0x00);
    // A counter beyond the CQEs written, or another CQ, is the driver's error.
    k.arm(0, 9);
    CHECK(k.host.guestErrors("mlx5-cq-doorbell") == 1);
}

// libmlx5 arms with its own consumer counter, which stays at 0 while the
// application polls the CQ itself (UCX's mlx5 transports): however far
// back it is, the arm takes, and the event goes at once, as the hardware
// sees CQEs beyond it.
TEST_CASE("mlx5: an arm with a counter a ring or more back takes, its event at once", "[mlx5]") {
    Components k(2); // 4 CQEs
    for (uint32_t n = 1; n <= 10; ++n) {
        k.writer.postCqe(k.cqn, receive(), false);
        k.consumed(n); // the application's own polling, by the record
    }
    k.eqs.doorbell(k.uar, k.eqn << 24, true);
    k.host.clear();
    k.arm(0, 0);
    CHECK(k.host.guestErrors("mlx5-cq-doorbell") == 0);
    CHECK(k.host.at(k.eqRing)[1] == 0x00); // a completion event
    CHECK(readBe32(k.host.at(k.eqRing) + 0x20 + 0x18) == k.cqn);
    CHECK(k.host.interrupts == std::vector<unsigned>{2});
}

TEST_CASE("mlx5: MODIFY_CQ's moderation holds an armed CQ's event for a count or a period",
          "[mlx5]") {
    Components k(2);
    auto modify = [&](uint32_t select, uint32_t period, uint32_t count) {
        auto m = Mlx5Host::input(0x403, 0, 0x110); // MODIFY_CQ, op_mod 0
        set(m, field(0x48, 24), k.cqn);
        set(m, field(0x60, 32), select); // MLX5_CQ_MODIFY_PERIOD 1, _COUNT 2
        set(m, field(0x80 + 0x84, 12), period);
        set(m, field(0x80 + 0x90, 16), count);
        return k.cqs.moderate(m);
    };
    k.eqs.doorbell(k.uar, k.eqn << 24, true);
    // As mlx5_core_modify_cq_moderation sends it: both fields.
    REQUIRE(modify(3, 100, 2) == nullptr);
    k.arm(0, 0);
    k.writer.postCqe(k.cqn, receive(), false);
    CHECK(k.host.interrupts.empty());
    k.writer.postCqe(k.cqn, receive(), false);
    CHECK(k.host.interrupts == std::vector<unsigned>{2});
    CHECK(readBe32(k.host.at(k.eqRing) + 0x20 + 0x18) == k.cqn);
    // Only the count changes; the period stays 100 us, from the first CQE.
    REQUIRE(modify(2, 7, 8) == nullptr);
    k.consumed(2);
    k.arm(0, 2);
    k.eqs.doorbell(k.uar, k.eqn << 24 | 1, true);
    k.writer.postCqe(k.cqn, receive(), false);
    k.host.now += 99'000;
    k.writer.moderation().expire(k.host.now);
    CHECK(k.host.interrupts.size() == 1);
    k.host.now += 1'000;
    k.writer.moderation().expire(k.host.now);
    CHECK(k.host.interrupts.size() == 2);
    // An arm naming a CQE beyond its counter makes the event at once, and
    // the wait of the moderation ends with it.
    k.arm(0, 3);
    k.eqs.doorbell(k.uar, k.eqn << 24 | 2, true);
    k.writer.postCqe(k.cqn, receive(), false); // held: 1 of 8
    k.arm(0, 3);
    CHECK(k.host.interrupts.size() == 3);
    k.host.now += 200'000;
    k.writer.moderation().expire(k.host.now);
    CHECK(k.host.interrupts.size() == 3);
    // Nothing, or a field beyond them, to change is the driver's error.
    k.host.clear();
    CHECK(modify(0, 1, 1) == &pib::err::kMlx5CqBadContext);
    CHECK(modify(4, 1, 1) == &pib::err::kMlx5CqBadContext);
    CHECK(k.host.guestErrors("mlx5-cq-bad-context") == 2);
}

namespace {

constexpr uint16_t kAllocPd = 0x800, kDeallocPd = 0x801, kAllocXrcd = 0x80e, kDeallocXrcd = 0x80f,
                   kCreateSrq = 0x700, kDestroySrq = 0x701, kQuerySrq = 0x702, kArmRq = 0x703;
constexpr Field kHeld = field(0x48, 24);      // alloc_pd_out.pd, alloc_xrcd_out.xrcd
constexpr Field kSrqNumber = field(0x48, 24); // create_srq_out, *_srq_in, arm_rq_in
constexpr Field kLwm = field(0x80 + 0xe0, 16);
constexpr Field kLogSrqSize = field(0x80 + 0x04, 4);

// A function with a CQ, a PD and an XRC domain, for SRQs.
struct SrqFunction : Function {
    uint32_t cqn = 0, pd = 0, xrcd = 0;
    SrqFunction() {
        uint64_t ring = 0, record = 0;
        cqn = static_cast<uint32_t>(
            host.run(host.cqInput(2, eqn, uar, &ring, &record), 16).get(kCqNumber));
        pd = static_cast<uint32_t>(host.run(Mlx5Host::input(kAllocPd), 16).get(kHeld));
        xrcd = static_cast<uint32_t>(host.run(Mlx5Host::input(kAllocXrcd), 16).get(kHeld));
    }
    // A CREATE_SRQ input as mlx5_ib's: 2^logSize WQEs of 32 bytes in a
    // fresh page, its doorbell record at *record.
    std::vector<uint8_t> srqInput(uint32_t logSize, uint64_t *record) {
        const uint64_t ring = host.alloc(4096);
        *record = host.alloc(64, 64);
        auto in = Mlx5Host::input(kCreateSrq, 0, 0x118);
        set(in, kLogSrqSize, logSize);
        set(in, field(0x80 + 0x25, 3), 1); // 32-byte WQEs
        set(in, field(0x80 + 0x28, 24), xrcd);
        set(in, field(0x80 + 0x48, 24), cqn);
        set(in, field(0x80 + 0xc8, 24), pd);
        set(in, field(0x80 + 0x140, 64), *record);
        writeBe64(&in[0x110], ring);
        return in;
    }
    Mlx5Host::Reply srqCommand(uint16_t opcode, uint16_t opMod, uint32_t srqn, uint32_t lwm = 0) {
        auto in = Mlx5Host::input(opcode, opMod);
        set(in, kSrqNumber, srqn);
        set(in, field(0x70, 16), lwm);
        return host.run(in, opcode == kQuerySrq ? 0x50 : 16);
    }
};

} // namespace

TEST_CASE("mlx5: CREATE_SRQ checks its context and page list", "[mlx5]") {
    SrqFunction f;
    uint64_t record = 0;
    const auto in = f.srqInput(3, &record);
    auto refused = [&](const std::vector<uint8_t> &bad, uint8_t status,
                       const pib::err::Condition &why) { checkRefused(f.host, bad, status, why); };
    const std::pair<Field, uint64_t> contexts[] = {
        {field(0x80 + 0x20, 1), 1},     // wq_signature
        {field(0x80 + 0x21, 1), 1},     // cont_srq
        {kLogSrqSize, 15},              // beyond 2^14 WQEs
        {field(0x80 + 0x25, 3), 0},     // 16-byte WQEs: not even one data segment
        {field(0x80 + 0x40, 6), 1},     // page_offset
        {field(0x80 + 0x82, 6), 19},    // log_page_size
        {field(0x80 + 0xc8, 24), 77},   // no such PD
        {field(0x80 + 0x28, 24), 77},   // no such XRC domain
        {field(0x80 + 0x48, 24), 77},   // no such CQ
        {kLwm, 8},                      // a limit of all 8 WQEs
        {field(0x80 + 0x140, 64), 0x4}, // dbr_addr misaligned
        {field(0x80 + 0x140, 64), 0x8}, // and not RAM
    };
    for (const auto &[where, value] : contexts) {
        INFO("field at bit 0x" << std::hex << where.bit << " = 0x" << value);
        auto bad = in;
        set(bad, where, value);
        refused(bad, status::kBadParam, pib::err::kMlx5SrqBadContext);
    }
    auto bad = in;
    writeBe64(&bad[0x110], 0x1000); // aligned, not guest RAM
    refused(bad, status::kBadParam, pib::err::kMlx5SrqBadPages);
    bad = in;
    bad.resize(0x110);
    refused(bad, status::kBadInputLength, pib::err::kMlx5CmdShortInput);
    const auto r = f.host.run(in, 16);
    REQUIRE(r.status() == 0);
    CHECK(r.get(kSrqNumber) == 0);
    CHECK(f.host.traces("mlx5_srq_create") == 1);
}

TEST_CASE("mlx5: an SRQ holds its PD, XRC domain and CQ; ARM_RQ sets its limit", "[mlx5]") {
    SrqFunction f;
    uint64_t record = 0;
    const auto r = f.host.run(f.srqInput(3, &record), 16);
    REQUIRE(r.status() == 0);
    const auto srqn = static_cast<uint32_t>(r.get(kSrqNumber));
    CHECK(f.destroy(kDestroyCq, kCqNumber, f.cqn).status() == status::kBadResourceState);
    CHECK(f.destroy(kDeallocPd, kHeld, f.pd).status() == status::kBadResourceState);
    CHECK(f.destroy(kDeallocXrcd, kHeld, f.xrcd).status() == status::kBadResourceState);

    auto q = f.srqCommand(kQuerySrq, 0, srqn);
    REQUIRE(q.status() == 0);
    CHECK(q.get(kLogSrqSize) == 3);
    CHECK(q.get(kLwm) == 0);
    CHECK(q.get(field(0x80 + 0x140, 64)) == record);
    CHECK(f.srqCommand(kArmRq, 1, srqn, 5).status() == 0);
    CHECK(f.srqCommand(kQuerySrq, 0, srqn).get(kLwm) == 5);
    CHECK(f.srqCommand(kArmRq, 1, srqn, 8).status() == status::kBadParam); // all 8
    CHECK(f.srqCommand(kArmRq, 0, srqn, 1).status() == status::kBadParam); // an RQ
    CHECK(f.srqCommand(kArmRq, 1, srqn + 1, 1).status() == status::kBadResource);

    CHECK(f.srqCommand(kDestroySrq, 0, srqn).status() == 0);
    CHECK(f.srqCommand(kDestroySrq, 0, srqn).status() == status::kBadResource);
    CHECK(f.host.traces("mlx5_srq_destroy") == 1);
    CHECK(f.destroy(kDestroyCq, kCqNumber, f.cqn).status() == 0);
    CHECK(f.destroy(kDeallocPd, kHeld, f.pd).status() == 0);
    CHECK(f.destroy(kDeallocXrcd, kHeld, f.xrcd).status() == 0);
}

// mlx5_ib forgets a destroyed SRQ's number only after DESTROY_SRQ has
// returned: given again at once, to another process's CREATE_SRQ in that
// window, the number would be forgotten for the new SRQ (docs/mlx5.md §9).
TEST_CASE("mlx5: a destroyed SRQ's number is the last to be given again", "[mlx5]") {
    SrqFunction f;
    uint64_t record = 0;
    const auto in = f.srqInput(3, &record);
    const auto create = [&] {
        const auto r = f.host.run(in, 16);
        REQUIRE(r.status() == 0);
        return static_cast<uint32_t>(r.get(kSrqNumber));
    };
    const uint32_t first = create();
    REQUIRE(f.srqCommand(kDestroySrq, 0, first).status() == 0);
    const uint32_t second = create();
    CHECK(second != first);
    REQUIRE(f.srqCommand(kDestroySrq, 0, second).status() == 0);
    CHECK(create() != second);
}
