// SPDX-License-Identifier: GPL-2.0-or-later
// The command interface: device, port, UAR, PD and MTT commands.
#include <catch2/catch.hpp>

#include "conditions.hh"
#include "fake_host.hh"

TEST_CASE("before INIT_HCA only discovery commands run", "[cmd]") {
    FakeHost host;
    CHECK(host.command(PIB_CMD_ALLOC_PD).status == PIB_CMD_STATUS_BAD_STATE);
    CHECK(host.guestErrors("cmd-not-initialized") == 1);
    pib_dev_cap cap;
    REQUIRE(host.commandOut(PIB_CMD_QUERY_DEV_CAP, 0, &cap).status == PIB_CMD_STATUS_OK);
    CHECK(cap.node_guid == FakeHost::defaultConfig().node_guid);
    CHECK(cap.vendor_id == PIB_PCI_VENDOR_ID);
    CHECK(cap.vendor_part_id == PIB_PCI_DEVICE_ID);
    CHECK(cap.num_ports == 1);
    CHECK(cap.max_uar == 16);
    CHECK(cap.max_qp > 0);
    CHECK(cap.max_pkeys == PIB_PKEY_TABLE_LEN);
    CHECK(cap.atomic_cap == PIB_ATOMIC_HCA);
    CHECK(cap.device_cap_flags & PIB_DEV_CAP_RNR_NAK_GEN);
    host.initHca();
    CHECK(host.command(PIB_CMD_ALLOC_PD).status == PIB_CMD_STATUS_OK);
    CHECK(host.command(PIB_CMD_INIT_HCA).status == PIB_CMD_STATUS_BAD_STATE);
}

TEST_CASE("unknown opcodes and mailbox faults get their status", "[cmd]") {
    FakeHost host;
    CHECK(host.command(0x7fff).status == PIB_CMD_STATUS_BAD_OPCODE);
    CHECK(host.guestErrors("cmd-bad-opcode") == 1);
    // Outside guest RAM, and misaligned.
    CHECK(host.command(PIB_CMD_QUERY_DEV_CAP, 0, 0, 0x10).status == PIB_CMD_STATUS_DMA_ERROR);
    const uint64_t out = host.alloc(PIB_MAILBOX_SIZE);
    CHECK(host.command(PIB_CMD_QUERY_DEV_CAP, 0, 0, out + 4).status == PIB_CMD_STATUS_DMA_ERROR);
    // The detail says which rule: the alignment, and where it is written.
    CHECK(host.errors.back().detail.find("output mailbox 0x") != std::string::npos);
    CHECK(host.errors.back().detail.find("is not 8-byte aligned (prm §4.2)") != std::string::npos);
    CHECK(host.command(PIB_CMD_QUERY_DEV_CAP, 0, 0, ~0ull - 8).status == PIB_CMD_STATUS_DMA_ERROR);
    CHECK(host.guestErrors("cmd-dma") == 3);
}

TEST_CASE("command registers read back and reject writes to outputs", "[cmd]") {
    FakeHost host;
    host.write32(PIB_BAR_REGS, PIB_REG_CMD_MODIFIER, 0x1234);
    host.write32(PIB_BAR_REGS, PIB_REG_CMD_TOKEN, 0xabcdef);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_CMD_MODIFIER) == 0x1234);
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_CMD_TOKEN) == 0xcdef);
    host.write32(PIB_BAR_REGS, PIB_REG_CMD_STATUS, 1);
    CHECK(host.guestErrors("regs-read-only") == 1);
    host.initHca();
    CHECK(host.read32(PIB_BAR_REGS, PIB_REG_CMD_CTRL) == PIB_CMD_INIT_HCA);
}

TEST_CASE("ports report their attributes and tables", "[cmd][port]") {
    FakeHost host;
    pib_port_info info;
    REQUIRE(host.commandOut(PIB_CMD_QUERY_PORT, 1, &info).status == PIB_CMD_STATUS_OK);
    CHECK(info.state == PIB_PORT_DOWN);
    CHECK(info.phys_state == PIB_PHYS_POLLING);
    CHECK(info.max_mtu == PIB_MTU_4096);
    CHECK(info.port_guid == FakeHost::defaultConfig().node_guid + 1);
    CHECK(info.gid_prefix == 0xfe80000000000000ull);
    CHECK(host.commandOut(PIB_CMD_QUERY_PORT, 2, &info).status == PIB_CMD_STATUS_BAD_INDEX);
    CHECK(host.commandOut(PIB_CMD_QUERY_PORT, 0, &info).status == PIB_CMD_STATUS_BAD_INDEX);

    host.initHca();
    uint16_t pkeys[PIB_PKEY_TABLE_LEN];
    REQUIRE(host.commandOut(PIB_CMD_QUERY_PKEYS, 1, &pkeys).status == PIB_CMD_STATUS_OK);
    CHECK(pkeys[0] == 0xffff);
    CHECK(pkeys[1] == 0);
    uint64_t guids[PIB_GUID_TABLE_LEN];
    REQUIRE(host.commandOut(PIB_CMD_QUERY_GUIDS, 1, &guids).status == PIB_CMD_STATUS_OK);
    CHECK(guids[0] == FakeHost::defaultConfig().node_guid + 1);

    // MODIFY_PORT sets and clears capability bits.
    CHECK(host.command(PIB_CMD_MODIFY_PORT, 1, (uint64_t{0} << 32) | 0x10000).status ==
          PIB_CMD_STATUS_OK);
    host.commandOut(PIB_CMD_QUERY_PORT, 1, &info);
    CHECK(info.cap_mask & 0x10000);
    host.command(PIB_CMD_MODIFY_PORT, 1, uint64_t{0x10000} << 32);
    host.commandOut(PIB_CMD_QUERY_PORT, 1, &info);
    CHECK(!(info.cap_mask & 0x10000));
    CHECK(host.command(PIB_CMD_MODIFY_PORT, 3, 0).status == PIB_CMD_STATUS_BAD_INDEX);
}

TEST_CASE("doorbell pages are allocated up to the configured count", "[cmd][uar]") {
    FakeHost host;
    host.initHca();
    for (uint32_t i = 0; i < 16; ++i) {
        const auto r = host.command(PIB_CMD_ALLOC_UAR);
        REQUIRE(r.status == PIB_CMD_STATUS_OK);
        CHECK(r.result == i);
    }
    CHECK(host.command(PIB_CMD_ALLOC_UAR).status == PIB_CMD_STATUS_NO_RESOURCES);
    CHECK(host.command(PIB_CMD_FREE_UAR, 3).status == PIB_CMD_STATUS_OK);
    CHECK(host.command(PIB_CMD_FREE_UAR, 3).status == PIB_CMD_STATUS_BAD_INDEX);
    CHECK(host.command(PIB_CMD_ALLOC_UAR).result == 3);
}

TEST_CASE("protection domains", "[cmd][pd]") {
    FakeHost host;
    host.initHca();
    const auto a = host.command(PIB_CMD_ALLOC_PD);
    const auto b = host.command(PIB_CMD_ALLOC_PD);
    CHECK(a.result != b.result);
    CHECK(host.command(PIB_CMD_DEALLOC_PD, static_cast<uint32_t>(a.result)).status ==
          PIB_CMD_STATUS_OK);
    CHECK(host.command(PIB_CMD_DEALLOC_PD, static_cast<uint32_t>(a.result)).status ==
          PIB_CMD_STATUS_BAD_INDEX);
    CHECK(host.command(PIB_CMD_DEALLOC_PD, 99999).status == PIB_CMD_STATUS_BAD_INDEX);
}

TEST_CASE("MTT ranges are allocated, written and freed with checks", "[cmd][mtt]") {
    FakeHost host;
    host.initHca();
    CHECK(host.command(PIB_CMD_ALLOC_MTT, 0, 0).status == PIB_CMD_STATUS_BAD_PARAM);
    CHECK(host.command(PIB_CMD_ALLOC_MTT, 0, uint64_t{1} << 40).status == PIB_CMD_STATUS_BAD_PARAM);
    const auto a = host.command(PIB_CMD_ALLOC_MTT, 0, 4);
    const auto b = host.command(PIB_CMD_ALLOC_MTT, 0, 4);
    REQUIRE(a.status == PIB_CMD_STATUS_OK);
    CHECK(b.result == a.result + 4);

    pib_mtt_write w{};
    w.count = 4;
    for (auto &e : w.entries)
        e = 0x200000;
    CHECK(host.commandIn(PIB_CMD_WRITE_MTT, static_cast<uint32_t>(a.result), w).status ==
          PIB_CMD_STATUS_OK);
    // Past the end of the range, unaligned, and bad counts.
    CHECK(host.commandIn(PIB_CMD_WRITE_MTT, static_cast<uint32_t>(a.result) + 1, w).status ==
          PIB_CMD_STATUS_BAD_INDEX);
    w.entries[2] = 0x200010;
    CHECK(host.commandIn(PIB_CMD_WRITE_MTT, static_cast<uint32_t>(a.result), w).status ==
          PIB_CMD_STATUS_BAD_PARAM);
    w.count = PIB_MTT_WRITE_MAX + 1;
    CHECK(host.commandIn(PIB_CMD_WRITE_MTT, static_cast<uint32_t>(a.result), w).status ==
          PIB_CMD_STATUS_BAD_PARAM);

    CHECK(host.command(PIB_CMD_FREE_MTT, static_cast<uint32_t>(a.result) + 1).status ==
          PIB_CMD_STATUS_BAD_INDEX);
    CHECK(host.command(PIB_CMD_FREE_MTT, static_cast<uint32_t>(a.result)).status ==
          PIB_CMD_STATUS_OK);
    // The freed range is reused first.
    CHECK(host.command(PIB_CMD_ALLOC_MTT, 0, 2).result == a.result);
}

TEST_CASE("CLOSE_HCA and reset destroy every object", "[cmd]") {
    FakeHost host;
    host.initHca();
    const auto pd = host.command(PIB_CMD_ALLOC_PD);
    SECTION("CLOSE_HCA") {
        CHECK(host.command(PIB_CMD_CLOSE_HCA).status == PIB_CMD_STATUS_OK);
    }
    SECTION("reset register") {
        host.write32(PIB_BAR_REGS, PIB_REG_RESET, PIB_RESET_MAGIC);
    }
    CHECK(host.command(PIB_CMD_ALLOC_PD).status == PIB_CMD_STATUS_BAD_STATE);
    host.initHca();
    CHECK(host.command(PIB_CMD_DEALLOC_PD, static_cast<uint32_t>(pd.result)).status ==
          PIB_CMD_STATUS_BAD_INDEX);
}

TEST_CASE("CMD_SYNDROME names the check that failed the last command, and is 0 after success",
          "[cmd]") {
    FakeHost host;
    const auto syndrome = [&] { return host.read32(PIB_BAR_REGS, PIB_REG_CMD_SYNDROME); };
    CHECK(syndrome() == 0);
    CHECK(host.command(PIB_CMD_ALLOC_PD).status == PIB_CMD_STATUS_BAD_STATE);
    CHECK(syndrome() == pib::err::kCmdNotInitialized.syndrome);
    host.initHca();
    CHECK(syndrome() == 0);
    CHECK(host.command(0x7fff).status == PIB_CMD_STATUS_BAD_OPCODE);
    CHECK(syndrome() == pib::err::kCmdBadOpcode.syndrome);
    CHECK(host.command(PIB_CMD_QUERY_DEV_CAP, 0, 0, 0x10).status == PIB_CMD_STATUS_DMA_ERROR);
    CHECK(syndrome() == pib::err::kCmdDma.syndrome);
    CHECK(host.command(PIB_CMD_QUERY_PORT, 9, 0, host.alloc(PIB_MAILBOX_SIZE)).status ==
          PIB_CMD_STATUS_BAD_INDEX);
    CHECK(syndrome() == pib::err::kCmdBadPort.syndrome);
    // The same status from another check has another syndrome.
    CHECK(host.command(PIB_CMD_DEALLOC_PD, 4000).status == PIB_CMD_STATUS_BAD_INDEX);
    CHECK(syndrome() == pib::err::kCmdBadIndex.syndrome);
    CHECK(pib::err::kCmdBadIndex.syndrome != pib::err::kCmdBadPort.syndrome);
    CHECK(host.command(PIB_CMD_ALLOC_PD).status == PIB_CMD_STATUS_OK);
    CHECK(syndrome() == 0);
    // It is read-only.
    host.write32(PIB_BAR_REGS, PIB_REG_CMD_SYNDROME, 1);
    CHECK(host.guestErrors("regs-read-only") == 1);
    CHECK(syndrome() == 0);
}
