// SPDX-License-Identifier: GPL-2.0-or-later
// The guest is untrusted: random register writes, doorbells and commands
// with random mailboxes must never crash, hang or corrupt the device. The
// test suite also runs under ASan/UBSan (./pib test), which turns any
// out-of-bounds access or leak this provokes into a failure.
#include <catch2/catch.hpp>

#include <random>

#include "fake_host.hh"

TEST_CASE("random input never breaks the device", "[robustness]") {
    FakeHost host;
    std::mt19937_64 rng(Catch::rngSeed());
    auto pick = [&](uint64_t n) { return rng() % n; };
    const uint64_t inBox = host.alloc(PIB_MAILBOX_SIZE);
    const uint64_t outBox = host.alloc(PIB_MAILBOX_SIZE);
    // A few real pages, so that some rings and MRs point at guest RAM.
    uint64_t pages[8];
    for (auto &p : pages)
        p = host.alloc(PIB_PAGE_SIZE);
    host.initHca();

    for (int round = 0; round < 20000; ++round) {
        switch (pick(4)) {
        case 0: { // a command with a random mailbox of small numbers
            auto *words = reinterpret_cast<uint32_t *>(host.at(inBox));
            for (unsigned i = 0; i < PIB_MAILBOX_SIZE / 4; ++i)
                words[i] = pick(3) == 0 ? static_cast<uint32_t>(rng()) : pick(20);
            if (pick(2))
                reinterpret_cast<uint64_t *>(words)[0] = pages[pick(8)];
            const uint16_t op = kCommandOpcodes[pick(std::size(kCommandOpcodes))];
            const uint64_t in = pick(10) ? inBox : rng();
            const uint64_t out = pick(10) ? outBox : rng();
            host.command(op, static_cast<uint32_t>(pick(40)), pick(2) ? in : pick(64), out,
                         pick(8) == 0 ? PIB_CMD_CTRL_EVENT : 0);
            break;
        }
        case 1: // a doorbell
            pib_core_bar_write(host.core, PIB_BAR_DOORBELL, pick(32 * PIB_PAGE_SIZE), rng(),
                               1u << pick(4));
            break;
        case 2: // a register
            pib_core_bar_write(host.core, PIB_BAR_REGS, pick(0x600), rng(), 1u << pick(4));
            break;
        default:
            pib_core_bar_read(host.core, PIB_BAR_REGS, pick(0x600), 1u << pick(4));
            break;
        }
        if (round % 997 == 0)
            host.write32(PIB_BAR_REGS, PIB_REG_RESET, PIB_RESET_MAGIC), host.initHca();
    }
    // Still itself, and still able to work.
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_ID) == PIB_ID_MAGIC);
    host.write32(PIB_BAR_REGS, PIB_REG_RESET, PIB_RESET_MAGIC);
    host.initHca();
    CHECK(host.command(PIB_CMD_ALLOC_PD).status == PIB_CMD_STATUS_OK);
}
