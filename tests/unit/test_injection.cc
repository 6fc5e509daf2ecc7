// SPDX-License-Identifier: GPL-2.0-or-later
// Test facilities (docs/prm.md §10): what the host injects, and what the
// driver then sees — a failed command, an error completion with its
// vendor_err, lost and corrupted packets that RC recovers from, any async
// event, and a stopped CQ that overruns.
#include <cstdlib>
#include <string>

#include <catch2/catch.hpp>

#include "injection.hh"
#include "management_calls.hh"

using namespace pib;
using namespace pib::testing;

namespace {

// No command names and no status names: opcodes and statuses by number.
const CommandWords noNames{};

} // namespace

TEST_CASE("injection lines parse, and nonsense is refused with the reason", "[injection]") {
    std::string error;
    auto wqe = parseInjection("wqe 17 REM_ACCESS_ERR 0x42", noNames, &error);
    REQUIRE(wqe);
    CHECK(wqe->kind == Injection::Kind::kWqe);
    CHECK(wqe->number == 17);
    CHECK(wqe->status == PIB_WC_REM_ACCESS_ERR);
    CHECK(wqe->vendorErr == 0x42);
    auto drop = parseInjection("  drop 0x11 3 ", noNames, &error);
    REQUIRE(drop);
    CHECK(drop->count == 3);
    auto event = parseInjection("event port-err 1", noNames, &error);
    REQUIRE(event);
    CHECK(event->status == PIB_ASYNC_PORT_ERR);
    auto fatal = parseInjection("fatal a broken firmware", noNames, &error);
    REQUIRE(fatal);
    CHECK(fatal->reason == "a broken firmware");
    for (const char *bad : {"",
                            "bogus",
                            "wqe",
                            "wqe 1",
                            "wqe 1 SUCCESS",
                            "wqe 1 NOPE",
                            "wqe 1 LOC_LEN_ERR 256",
                            "drop",
                            "drop x",
                            "drop 1 0",
                            "drop 16777216",
                            "command 1 OK",
                            "command NOPE BUSY",
                            "event",
                            "event nope",
                            "event qp-fatal x",
                            "stop qp 1",
                            "stop eq",
                            "resume cq x",
                            "clear now",
                            "corrupt 1 2 3"}) {
        INFO(bad);
        error.clear();
        CHECK(!parseInjection(bad, noNames, &error));
        CHECK(!error.empty());
    }
}

TEST_CASE("an injected command failure fails the next command of that opcode only", "[injection]") {
    Node n(PIB_QPT_RC, 0x11);
    CHECK(inject(n, "command ALLOC_PD NO_RESOURCES").rc == 0);
    CHECK(n.host.command(PIB_CMD_ALLOC_UAR).status == PIB_CMD_STATUS_OK);
    CHECK(n.host.command(PIB_CMD_ALLOC_PD).status == PIB_CMD_STATUS_NO_RESOURCES);
    CHECK(n.host.command(PIB_CMD_ALLOC_PD).status == PIB_CMD_STATUS_OK);
    CHECK(n.host.traces("inject_command") == 1);
    CHECK(n.host.guestErrors() == 0); // the guest did nothing wrong
    CHECK(inject(n, "command 0x0012 0x07").rc == 0);
    CHECK(n.host.command(PIB_CMD_ALLOC_PD).status == PIB_CMD_STATUS_DMA_ERROR);
}

TEST_CASE("an injected completion fails the QP's next send WQE with its vendor_err",
          "[injection]") {
    Pair p;
    const uint64_t out = p.a.host.alloc(4096), in = p.b.host.alloc(4096);
    p.b.postRecv(1, in, 4096);
    REQUIRE(inject(p.a, "wqe " + std::to_string(p.a.qpn) + " REM_ACCESS_ERR 0x42").rc == 0);
    p.a.postSend(7, {.local = out, .length = 100});
    p.a.postSend(8, {.local = out, .length = 100});
    p.wire.run();
    const auto done = p.a.poll();
    REQUIRE(done.size() == 2);
    CHECK(done[0].wr_id == 7);
    CHECK(done[0].status == PIB_WC_REM_ACCESS_ERR);
    CHECK(done[0].vendor_err == 0x42);
    CHECK(done[1].status == PIB_WC_WR_FLUSH_ERR);
    CHECK(p.a.qpState() == PIB_QPS_ERR);
    CHECK(p.wire.seen.empty()); // nothing was sent
    CHECK(p.a.host.traces("inject_completion") == 1);
}

TEST_CASE("injected loss and corruption: RC resends, the data arrives whole", "[injection]") {
    const bool corrupt = GENERATE(false, true);
    Pair p;
    p.wire.inspect = false; // the cable passes corrupt packets as they are
    const uint64_t out = p.a.host.alloc(8192), in = p.b.host.alloc(8192);
    p.a.fill(out, 5000, 9);
    p.b.postRecv(1, in, 8192);
    const std::string how = corrupt ? "corrupt " : "drop ";
    REQUIRE(inject(p.a, how + std::to_string(p.a.qpn) + " 2").rc == 0);
    p.a.postSend(1, {.local = out, .length = 5000});
    p.wire.run();
    p.wire.advance(10'000'000); // past the ACK timeout
    const auto sent = p.a.poll();
    REQUIRE(sent.size() == 1);
    CHECK(sent[0].status == PIB_WC_SUCCESS);
    REQUIRE(p.b.poll().size() == 1);
    CHECK(std::equal(p.a.host.at(out), p.a.host.at(out) + 5000, p.b.host.at(in)));
    CHECK(p.a.host.traces("inject_packet") == 2);
    if (corrupt) // the receiver saw them and refused them
        CHECK(p.b.host.traces("err_port_drop") == 2);
}

TEST_CASE("any async event can be raised on an object that exists", "[injection]") {
    Node n(PIB_QPT_RC, 0x11);
    const size_t before = n.asyncEvents().size(); // the port's own, as it came up
    CHECK(inject(n, "event qp-fatal " + std::to_string(n.qpn)).rc == 0);
    CHECK(inject(n, "event path-mig " + std::to_string(n.qpn)).rc == 0);
    CHECK(inject(n, "event cq-err " + std::to_string(n.cqn)).rc == 0);
    CHECK(inject(n, "event port-active 1").rc == 0);
    CHECK(inject(n, "event qp-fatal 9999").rc == -1);
    CHECK(inject(n, "event port-err 3").rc == -1);
    const auto events = n.asyncEvents();
    CHECK(std::vector<uint8_t>(events.begin() + static_cast<long>(before), events.end()) ==
          std::vector<uint8_t>{PIB_ASYNC_QP_FATAL, PIB_ASYNC_PATH_MIG, PIB_ASYNC_CQ_ERR,
                               PIB_ASYNC_PORT_ACTIVE});
    CHECK(n.qpState() == PIB_QPS_RESET); // an event only: the QP is as it was
}

TEST_CASE("a stopped CQ takes no completion and overruns; resumed, it takes them again",
          "[injection]") {
    Pair p;
    const uint64_t out = p.a.host.alloc(4096), in = p.b.host.alloc(4096);
    for (int i = 0; i < 3; ++i)
        p.b.postRecv(i, in, 4096);
    const size_t before = p.b.asyncEvents().size();
    REQUIRE(inject(p.b, "stop cq " + std::to_string(p.b.cqn)).rc == 0);
    p.a.postSend(1, {.local = out, .length = 100});
    p.wire.run();
    CHECK(p.b.poll().empty());
    CHECK(p.b.asyncEvents().size() == before + 1);
    CHECK(p.b.asyncEvents().back() == PIB_ASYNC_CQ_ERR);
    CHECK(p.b.host.traces("inject_overrun") == 1);
    CHECK(p.b.host.guestErrors() == 0);
    REQUIRE(inject(p.b, "resume cq " + std::to_string(p.b.cqn)).rc == 0);
    p.a.postSend(2, {.local = out, .length = 100});
    p.wire.run();
    CHECK(p.b.poll().size() == 1);
    CHECK(inject(p.b, "stop cq 77").rc == -1);
    CHECK(inject(p.b, "stop eq " + std::to_string(p.b.eqn)).rc == 0);
    CHECK(inject(p.b, "event port-err 1").rc == 0);
    CHECK(p.b.asyncEvents().size() == before + 1); // the EQ took nothing more
}

TEST_CASE("injections are bounded, listed by the inspection, and cleared", "[injection]") {
    Node n(PIB_QPT_RC, 0x11);
    for (size_t i = 0; i < ArmedInjections::kMaxArmed; ++i)
        REQUIRE(inject(n, "drop 5").rc == 0);
    CHECK(inject(n, "drop 5").rc == -1);
    CHECK(inject(n, "wqe 5 GENERAL_ERR").rc == 0); // another kind
    const Answer armed = inspect(n, nullptr, true);
    REQUIRE(armed.rc == 0);
    CHECK(armed.text.find("\"wqe_of_qp\":5") != std::string::npos);
    CHECK(inject(n, "clear").rc == 0);
    CHECK(inspect(n, nullptr, true).text.find("\"injections\":[]") != std::string::npos);
    CHECK(inject(n, "fatal as a test").rc == 0);
    CHECK(pib_core_bar_read(n.host.core, PIB_BAR_REGS, PIB_REG_STATUS, 4) & PIB_STATUS_FATAL);
}
