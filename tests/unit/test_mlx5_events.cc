// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX personality's UAR pages and event queues (docs/mlx5.md
// §6, §7): ALLOC_UAR, CREATE_EQ and its checks, EQEs with their owner
// bit, the EQ doorbells and MSI-X, and command completion events.
#include <catch2/catch.hpp>

#include <nlohmann/json.hpp>

#include "conditions.hh"
#include "management_calls.hh"
#include "mlx5_checks.hh"
#include "mlx5_host.hh"

using namespace pib::mlx5;
using pib::testing::inject;
using pib::testing::inspect;

namespace {

constexpr uint16_t kDeallocUar = 0x803, kDestroyEq = 0x302, kQueryIssi = 0x10a,
                   kTeardownHca = 0x103;
constexpr Field kEqNumber = field(0x58, 8);
constexpr uint64_t kCommandEvents = 1u << 0x0a;
constexpr uint32_t kArm = 0x40, kNoArm = 0x48;

// An EQE as the ring holds it.
struct Eqe {
    uint8_t type, subType, owner;
    uint32_t data0; // the first data dword (data.cmd.vector)
};

Eqe eqeAt(Mlx5Host &host, uint64_t ring, uint32_t index) {
    const uint8_t *e = host.at(ring + 64 * index);
    return Eqe{e[1], e[3], e[0x3f], readBe32(e + 0x20)};
}

// A function brought up, with a UAR page; its EQEs are traced
// (eqe_written is one of the normal path's events).
struct Function {
    Mlx5Host host;
    uint32_t uar = 0;
    Function() {
        host.tracingPath = true;
        REQUIRE(host.bringUp());
        uar = host.allocUar();
    }
    // CREATE_EQ; its number (the command must succeed).
    uint32_t createEq(uint32_t logSize, uint64_t types, uint32_t vector, uint64_t *ring) {
        const auto r = host.run(host.eqInput(logSize, types, vector, uar, ring), 16);
        REQUIRE(r.status() == 0);
        return static_cast<uint32_t>(r.get(kEqNumber));
    }
};

} // namespace

TEST_CASE("mlx5: ALLOC_UAR gives BAR0 pages from 3 on, DEALLOC_UAR takes them back", "[mlx5]") {
    Mlx5Host host;
    // Before INIT_HCA there are none.
    CHECK(host.run(Mlx5Host::input(0x802), 16).status() == status::kBadSystemState);
    REQUIRE(host.bringUp());
    CHECK(host.allocUar() == 3);
    CHECK(host.allocUar() == 4);
    // A page not given: neither its doorbells nor DEALLOC_UAR.
    host.uarWrite(5, kArm, 0);
    CHECK(host.guestErrors("mlx5-uar-unallocated") == 1);
    auto in = Mlx5Host::input(kDeallocUar);
    set(in, field(0x48, 24), 5);
    auto r = host.run(in, 16);
    CHECK(r.status() == status::kBadResource);
    CHECK(r.syndrome() == pib::err::kMlx5CmdBadResource.syndrome);
    set(in, field(0x48, 24), 3);
    CHECK(host.run(in, 16).status() == 0);
    CHECK(host.allocUar() == 3); // the lowest free again
    // All 16 pages (the default doorbell-pages) given, the next is refused.
    for (int i = 0; i < 14; ++i)
        host.allocUar();
    CHECK(host.run(Mlx5Host::input(0x802), 16).status() == status::kNoResources);
    // A given page is written, never read.
    host.clear();
    CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, 3 * 4096 + kArm, 4) == 0);
    host.uarWrite(3, 0x100, 0);
    CHECK(host.guestErrors("mlx5-uar-bad-doorbell") == 2);
}

TEST_CASE("mlx5: CREATE_EQ checks its context and page list", "[mlx5]") {
    Function f;
    uint64_t ring = 0;
    auto refused = [&](const std::vector<uint8_t> &in, uint8_t status,
                       const pib::err::Condition &why) { checkRefused(f.host, in, status, why); };
    auto in = f.host.eqInput(3, kCommandEvents, 0, f.uar, &ring);
    auto bad = in;
    set(bad, field(0xe3, 5), 17); // log_eq_size beyond 16
    refused(bad, status::kBadParam, pib::err::kMlx5EqBadContext);
    bad = in;
    set(bad, field(0x134, 12), 8); // the fake host has 8 vectors
    refused(bad, status::kBadParam, pib::err::kMlx5EqBadContext);
    bad = in;
    set(bad, field(0xe8, 24), f.uar + 1); // not given
    refused(bad, status::kBadParam, pib::err::kMlx5EqBadContext);
    bad = in;
    set(bad, field(0xd4, 6), 1); // page_offset
    refused(bad, status::kBadParam, pib::err::kMlx5EqBadContext);
    bad = in;
    writeBe64(&bad[0x110], ring + 64); // misaligned
    refused(bad, status::kBadParam, pib::err::kMlx5EqBadPages);
    bad = in;
    writeBe64(&bad[0x110], 0x10); // not guest RAM
    refused(bad, status::kBadParam, pib::err::kMlx5EqBadPages);
    // 2^7 EQEs take two pages: a list of one is short.
    auto two = f.host.eqInput(7, kCommandEvents, 0, f.uar, &ring);
    two.resize(0x118);
    refused(two, status::kBadInputLength, pib::err::kMlx5CmdShortInput);
    // DESTROY_EQ of one that does not exist.
    auto destroy = Mlx5Host::input(kDestroyEq);
    set(destroy, kEqNumber, 3);
    refused(destroy, status::kBadResource, pib::err::kMlx5CmdBadResource);
    // Nothing was made: the first EQ is number 0.
    CHECK(f.createEq(3, kCommandEvents, 0, &ring) == 0);
}

TEST_CASE("mlx5: command completions become EQEs once an EQ takes them", "[mlx5]") {
    Function f;
    uint64_t ring = 0;
    // The command creating the EQ is polled: no EQE for it.
    const uint32_t eqn = f.createEq(2, kCommandEvents, 5, &ring);
    CHECK(eqeAt(f.host, ring, 0).owner == 1);
    // Armed, the next completion writes an EQE and signals vector 5 once.
    f.host.uarWrite(f.uar, kArm, eqn << 24 | 0);
    CHECK(f.host.interrupts.empty());
    const auto r = f.host.run(Mlx5Host::input(kQueryIssi), 0x70, 7);
    CHECK(r.status() == 0);
    CHECK(r.delivery() == 0);
    Eqe e = eqeAt(f.host, ring, 0);
    CHECK(e.type == 0x0a);
    CHECK(e.owner == 0); // the first pass
    CHECK(e.data0 == 1u << 7);
    REQUIRE(f.host.interrupts.size() == 1);
    CHECK(f.host.interrupts[0] == 5);
    // Not armed again: the next EQE signals nothing.
    f.host.run(Mlx5Host::input(kQueryIssi), 0x70, 2);
    CHECK(eqeAt(f.host, ring, 1).data0 == 1u << 2);
    CHECK(f.host.interrupts.size() == 1);
    // Arming with an EQE unconsumed signals at once.
    f.host.uarWrite(f.uar, kArm, eqn << 24 | 1);
    CHECK(f.host.interrupts.size() == 2);
    // Consumed up to 2 without arming: quiet.
    f.host.uarWrite(f.uar, kNoArm, eqn << 24 | 2);
    CHECK(f.host.interrupts.size() == 2);
    CHECK(f.host.traces("eqe_written") == 2);
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5: the owner bit flips every pass, and a full EQ loses events", "[mlx5]") {
    Function f;
    uint64_t ring = 0;
    const uint32_t eqn = f.createEq(1, kCommandEvents, 0, &ring); // 2 EQEs
    for (uint32_t i = 0; i < 6; ++i) {
        f.host.run(Mlx5Host::input(kQueryIssi), 0x70);
        const Eqe e = eqeAt(f.host, ring, i % 2);
        CHECK(e.owner == ((i / 2) & 1));
        CHECK(e.type == 0x0a);
        f.host.uarWrite(f.uar, kNoArm, eqn << 24 | (i + 1));
    }
    // Two unconsumed EQEs fill it: the third event is lost, once reported.
    f.host.clear();
    for (int i = 0; i < 4; ++i)
        f.host.run(Mlx5Host::input(kQueryIssi), 0x70);
    CHECK(f.host.traces("eqe_written") == 2);
    CHECK(f.host.guestErrors("mlx5-eq-overrun") == 1);
    // The commands themselves completed: their slots are the driver's.
    CHECK(f.host.run(Mlx5Host::input(kQueryIssi), 0x70).owned() == false);
}

TEST_CASE("mlx5: EQ doorbells are checked", "[mlx5]") {
    Function f;
    uint64_t ring = 0;
    const uint32_t eqn = f.createEq(2, kCommandEvents, 0, &ring);
    const uint32_t other = f.host.allocUar();
    f.host.uarWrite(other, kArm, eqn << 24); // the EQ's doorbell is on f.uar
    f.host.uarWrite(f.uar, kArm, 9u << 24);  // no EQ 9
    // ALLOC_UAR's completion is the one EQE: a counter of 2 is past it.
    f.host.uarWrite(f.uar, kArm, eqn << 24 | 2);
    CHECK(f.host.guestErrors("mlx5-eq-doorbell") == 3);
    pib_core_bar_write(f.host.core, PIB_BAR_REGS, uint64_t{f.uar} * 4096 + kArm, 0, 8);
    CHECK(f.host.guestErrors("mlx5-uar-bad-doorbell") == 1);
    CHECK(f.host.interrupts.empty());
}

TEST_CASE("mlx5: a UAR with an EQ on it stays; TEARDOWN_HCA ends both", "[mlx5]") {
    Function f;
    uint64_t ring = 0;
    const uint32_t eqn = f.createEq(2, kCommandEvents, 0, &ring);
    auto dealloc = Mlx5Host::input(kDeallocUar);
    set(dealloc, field(0x48, 24), f.uar);
    auto r = f.host.run(dealloc, 16);
    CHECK(r.status() == status::kBadResourceState);
    CHECK(r.syndrome() == pib::err::kMlx5CmdInUse.syndrome);
    auto destroy = Mlx5Host::input(kDestroyEq);
    set(destroy, kEqNumber, eqn);
    // DESTROY_EQ of the command EQ completes polled: the EQ is gone.
    CHECK(f.host.run(destroy, 16).status() == 0);
    CHECK(f.host.run(dealloc, 16).status() == 0);
    // After a teardown the function has neither.
    f.host.allocUar();
    f.createEq(2, kCommandEvents, 0, &ring);
    REQUIRE(f.host.run(Mlx5Host::input(kTeardownHca), 16).status() == 0);
    REQUIRE(f.host.run(Mlx5Host::input(0x102), 16).status() == 0);
    f.host.clear();
    f.host.uarWrite(f.uar, kArm, 0);
    CHECK(f.host.guestErrors("mlx5-uar-unallocated") == 1);
    CHECK(f.host.allocUar() == 3);
    CHECK(f.createEq(2, kCommandEvents, 0, &ring) == 0);
}

// What the host's tools see of the device: inspect's JSON of `what`.
static nlohmann::json inspected(Mlx5Host &host, const char *what = "") {
    const auto a = inspect(host.core, what, true);
    REQUIRE(a.rc == 0);
    return nlohmann::json::parse(a.text);
}

TEST_CASE("mlx5: a function after INIT_HCA inspects as running, after TEARDOWN_HCA as not",
          "[mlx5][management]") {
    Mlx5Host host;
    CHECK(inspected(host)["state"] == "not initialised");
    REQUIRE(host.bringUp());
    CHECK(inspected(host)["state"] == "running");
    REQUIRE(host.run(Mlx5Host::input(kTeardownHca), 16).status() == 0);
    CHECK(inspected(host)["state"] == "not initialised");
}

TEST_CASE("mlx5: inspect counts the UAR pages the driver holds", "[mlx5][management]") {
    Mlx5Host host;
    REQUIRE(host.bringUp());
    CHECK(inspected(host)["objects"]["uars"] == 0);
    host.allocUar();
    host.allocUar();
    CHECK(inspected(host)["objects"]["uars"] == 2);
}

TEST_CASE("mlx5: an injected command failure answers a ConnectX status, once",
          "[mlx5][management][injection]") {
    Mlx5Host host;
    REQUIRE(host.bringUp());
    // ConnectX's names (MLX5_CMD_STAT_*), not pib-hca's.
    CHECK(inject(host.core, "command ALLOC_PD NO_RESOURCES").rc != 0);
    CHECK(inject(host.core, "command ALLOC_PDX NO_RES_ERR").rc != 0);
    REQUIRE(inject(host.core, "command ALLOC_PD NO_RES_ERR").rc == 0);
    CHECK(host.allocUar() == 3); // another command is not touched
    constexpr uint16_t kAllocPd = 0x800;
    const auto failed = host.run(Mlx5Host::input(kAllocPd), 16);
    CHECK(failed.status() == status::kNoResources);
    CHECK(failed.syndrome() == pib::err::kHostInjected.syndrome);
    CHECK(host.traces("inject_command") == 1);
    CHECK(host.run(Mlx5Host::input(kAllocPd), 16).status() == status::kOk);
    // By number, as for pib-hca.
    REQUIRE(inject(host.core, "command 0x800 0x3").rc == 0);
    CHECK(host.run(Mlx5Host::input(kAllocPd), 16).status() == status::kBadParam);
}

TEST_CASE("mlx5: an EQ can be stopped and resumed by injection, and inspect lists it",
          "[mlx5][management][injection]") {
    Function f;
    uint64_t ring = 0;
    const uint32_t eqn = f.createEq(2, kCommandEvents, 5, &ring);
    const std::string eq = "eq " + std::to_string(eqn);
    auto listed = inspected(f.host)["eqs"];
    REQUIRE(listed.size() == 1);
    CHECK(listed[0]["eqn"] == eqn);
    CHECK(listed[0]["vector"] == 5);
    CHECK(listed[0]["queue"]["size"] == 4);
    CHECK(listed[0]["async"] == true); // it takes command completions, not CQs'
    CHECK(inspected(f.host)["objects"]["eqs"] == 1);
    CHECK(inject(f.host.core, "stop eq 9").text == "no EQ 9");
    const auto stopped = inject(f.host.core, "stop " + eq);
    CHECK(stopped.rc == 0);
    CHECK(stopped.text == "EQ " + std::to_string(eqn) + " stopped: it takes no entries");
    CHECK(inspected(f.host, eq.c_str())["stopped"] == true);
    // A stopped EQ is not saved: the device says why it cannot save.
    std::string why;
    CHECK(f.host.saveState(&why).empty());
    CHECK(why.find("a stopped EQ") != std::string::npos);
    // The next command's completion is lost as to a full EQ, without a
    // guest error: the guest did nothing wrong.
    f.host.uarWrite(f.uar, kArm, eqn << 24);
    f.host.clear();
    f.host.run(Mlx5Host::input(kQueryIssi), 0x70, 7);
    CHECK(f.host.traces("eqe_written") == 0);
    CHECK(f.host.traces("inject_overrun") == 1);
    CHECK(f.host.interrupts.empty());
    CHECK(f.host.guestErrors() == 0);
    CHECK(inspected(f.host, eq.c_str())["overrun"] == true);
    CHECK(inject(f.host.core, "resume " + eq).rc == 0);
    f.host.run(Mlx5Host::input(kQueryIssi), 0x70, 2);
    CHECK(f.host.traces("eqe_written") == 1);
    CHECK(eqeAt(f.host, ring, 0).data0 == 1u << 2);
    CHECK(f.host.interrupts.size() == 1);
    const auto after = inspected(f.host, eq.c_str());
    CHECK(after["stopped"] == false);
    CHECK(after["overrun"] == false);
    CHECK(after["queue"]["pi"] == 1);
    CHECK_FALSE(f.host.saveState().empty());
}

TEST_CASE("mlx5: PDs and XRC domains are made in the core's tables", "[mlx5]") {
    Function f;
    constexpr Field kHeld = field(0x48, 24);
    auto r = f.host.run(Mlx5Host::input(0x800), 16);
    REQUIRE(r.status() == 0);
    const auto pd = r.get(kHeld);
    r = f.host.run(Mlx5Host::input(0x80e), 16);
    REQUIRE(r.status() == 0);
    const auto xrcd = r.get(kHeld);
    CHECK(f.host.run(Mlx5Host::input(0x80e), 16).get(kHeld) == xrcd + 1);
    // A user context's uid: there are none.
    auto in = Mlx5Host::input(0x800);
    set(in, kUid, 5);
    CHECK(f.host.run(in, 16).status() == status::kBadParam);
    // DEALLOC_PD of one that does not exist, then of the one made.
    auto dealloc = Mlx5Host::input(0x801);
    set(dealloc, kHeld, pd + 7);
    r = f.host.run(dealloc, 16);
    CHECK(r.status() == status::kBadResource);
    CHECK(r.syndrome() == pib::err::kMlx5CmdBadResource.syndrome);
    set(dealloc, kHeld, pd);
    CHECK(f.host.run(dealloc, 16).status() == 0);
    CHECK(f.host.run(dealloc, 16).status() == status::kBadResource); // gone
    // They are in the core's tables: after TEARDOWN_HCA, numbering starts over.
    REQUIRE(f.host.run(Mlx5Host::input(0x103), 16).status() == 0);
    REQUIRE(f.host.run(Mlx5Host::input(0x102), 16).status() == 0);
    CHECK(f.host.run(Mlx5Host::input(0x80e), 16).get(kHeld) == xrcd);
}

TEST_CASE("mlx5: CREATE_MKEY makes a physical region in the core, which holds its PD", "[mlx5]") {
    Function f;
    constexpr Field kHeld = field(0x48, 24);
    const auto pd = f.host.run(Mlx5Host::input(0x800), 16).get(kHeld);
    // As mlx5_ib_get_dma_mr asks: PA, the whole address space, local
    // write and remote read, variant 0x5a.
    auto mkey = Mlx5Host::input(0x200, 0, 0x110);
    set(mkey, field(0x96, 2), 0);         // access_mode PA
    set(mkey, field(0x94, 1), 1);         // lw
    set(mkey, field(0x95, 1), 1);         // lr
    set(mkey, field(0x93, 1), 1);         // rr
    set(mkey, field(0xa0, 24), 0xffffff); // no QP
    set(mkey, field(0xb8, 8), 0x5a);
    set(mkey, field(0xe0, 1), 1); // length64
    set(mkey, field(0xe8, 24), pd);
    auto r = f.host.run(mkey, 16);
    REQUIRE(r.status() == 0);
    const auto index = r.get(kHeld);
    auto dealloc = Mlx5Host::input(0x801);
    set(dealloc, kHeld, pd);
    r = f.host.run(dealloc, 16);
    CHECK(r.status() == status::kBadResourceState); // the key holds it
    CHECK(r.syndrome() == pib::err::kMlx5CmdInUse.syndrome);
    // What the device does not do is refused.
    auto refused = [&](Field fieldToSet, uint64_t value,
                       const pib::err::Condition &why = pib::err::kMlx5MkeyNotOffered) {
        auto in = mkey;
        set(in, fieldToSet, value);
        const auto out = f.host.run(in, 16);
        CHECK(out.status() == status::kBadParam);
        CHECK(out.syndrome() == why.syndrome);
    };
    refused(field(0x96, 2), 1, pib::err::kMlx5CmdBadParam); // MTT, and no translation
    refused(field(0x81, 1), 1);                             // free
    refused(field(0x90, 1), 1);                             // umr_en
    refused(field(0xa0, 24), 7);                            // a QP's
    refused(field(0x95, 1), 0);                             // no local read
    auto noPd = mkey;
    set(noPd, field(0xe8, 24), pd + 9);
    CHECK(f.host.run(noPd, 16).status() == status::kBadResource);
    // DESTROY_MKEY by index; then the PD goes.
    auto destroy = Mlx5Host::input(0x202);
    set(destroy, kHeld, index + 1);
    CHECK(f.host.run(destroy, 16).status() == status::kBadResource);
    set(destroy, kHeld, index);
    CHECK(f.host.run(destroy, 16).status() == 0);
    CHECK(f.host.run(dealloc, 16).status() == 0);
}
