// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX personality (docs/mlx5.md): the initialization segment,
// the command queue and the commands of a function's bring-up, as
// Linux's mlx5_core drives them.
#include <catch2/catch.hpp>

#include <algorithm>

#include "conditions.hh"
#include "mlx5/mlx5_commands.hh"
#include "mlx5_host.hh"

using namespace pib::mlx5;

namespace {

constexpr uint16_t kQueryHcaCap = 0x100, kQueryAdapter = 0x101, kInitHca = 0x102,
                   kTeardownHca = 0x103, kEnableHca = 0x104, kDisableHca = 0x105,
                   kQueryPages = 0x107, kManagePages = 0x108, kSetHcaCap = 0x109,
                   kQueryIssi = 0x10a, kSetIssi = 0x10b, kAccessReg = 0x805,
                   kSetDriverVersion = 0x10d;
constexpr uint32_t kCapOut = 0x10 + 4096;

// cmd_hca_cap fields, by bit offset within the capability page.
constexpr Field kCapLogMaxQp = field(0x09b, 5);
constexpr Field kCapPortType = field(0x1b6, 2);
constexpr Field kCapNumPorts = field(0x1b8, 8);
constexpr Field kCapCmdifChecksum = field(0x210, 2);
constexpr Field kCapXrc = field(0x23c, 1);
constexpr Field kCapRc = field(0x23f, 1);
constexpr Field kCapLogMaxKlmList = field(0x11a, 6);
constexpr Field kCapUmrEntitySizeDisabled = field(0x207, 1);
constexpr Field kCapMcamReg = field(0x1a9, 1);
constexpr Field kCapAtomic = field(0x21e, 1);
constexpr Field kCapDeviceFrequencyKhz = field(0x4e0, 32);

// A field of the capability page as the output holds it, 16 bytes in.
Field inOutput(Field f) {
    return Field{f.bit + 0x80, f.width};
}

} // namespace

TEST_CASE("mlx5: configuration space shows a ConnectX-5 InfiniBand controller", "[mlx5]") {
    Mlx5Host host;
    pib_pci_identity id{};
    pib_core_pci_identity(host.core, &id);
    CHECK(id.vendor_id == 0x15b3);
    CHECK(id.device_id == 0x1017);
    CHECK(id.class_code == 0x0207);
    CHECK(id.subsystem_vendor_id == PIB_PCI_SUBSYSTEM_VENDOR_ID); // pib-hca's board
    FakeHost pib;
    pib_core_pci_identity(pib.core, &id);
    CHECK(id.vendor_id == PIB_PCI_VENDOR_ID);
    CHECK(id.device_id == PIB_PCI_DEVICE_ID);
}

TEST_CASE("mlx5: the initialization segment reads as mlx5_core expects", "[mlx5]") {
    Mlx5Host host;
    CHECK(pib_core_bar_size(host.core, PIB_BAR_REGS) == 32 * 4096); // 3 + 16 pages, rounded
    CHECK(pib_core_bar_size(host.core, PIB_BAR_DOORBELL) == 0);
    CHECK(host.isegRead(iseg::kCmdifRevFwSub) >> 16 == 5);
    CHECK((host.isegRead(iseg::kCmdqAddrLowSize) & 0xff) == 0x56); // 32 slots of 64 bytes
    CHECK((host.isegRead(iseg::kCmdqAddrLowSize) & 0xfffff000u) ==
          static_cast<uint32_t>(host.queue));
    CHECK(host.isegRead(iseg::kInitializing) == 0);
    CHECK(host.isegRead(iseg::kHealthFwVer) != 0xffffffffu);
    CHECK(host.isegRead(iseg::kCmdQueueInitTimeout) == 0);
    const uint32_t counter = host.isegRead(iseg::kHealthCounter);
    CHECK(host.isegRead(iseg::kHealthCounter) != counter);
    // The health code reads single bytes: synd and rfr_severity are 0.
    CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, iseg::kHealthSynd, 1) == 0);
    CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, iseg::kHealthRfrSeverity, 1) == 0);
    // fw_rev's bytes, as memory holds a big-endian dword.
    const uint32_t fwRev = host.isegRead(iseg::kFwRev);
    CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, 3, 1) == (fwRev & 0xff));
    CHECK(host.guestErrors() == 0);

    host.isegWrite(iseg::kFwRev, 1);
    CHECK(host.guestErrors("mlx5-iseg-read-only") == 1);
    pib_core_bar_write(host.core, PIB_BAR_REGS, iseg::kCmdDoorbell, 1, 1);
    CHECK(host.guestErrors("mlx5-iseg-bad-access") == 1);
    CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, 3 * 4096, 4) == 0);
    CHECK(host.guestErrors("mlx5-uar-unallocated") == 1);
    // nic_interface is the driver's to set; it reads back.
    host.isegWrite(iseg::kCmdqAddrLowSize, static_cast<uint32_t>(host.queue) | 1u << 8);
    CHECK((host.isegRead(iseg::kCmdqAddrLowSize) >> 8 & 7) == 1);
}

TEST_CASE("mlx5: a function comes up as mlx5_core brings it up, polling", "[mlx5]") {
    Mlx5Host host;
    // Nothing but ENABLE_HCA before it.
    auto r = host.run(Mlx5Host::input(kQueryIssi), 0x70);
    CHECK_FALSE(r.owned());
    CHECK(r.delivery() == 0);
    CHECK(r.status() == status::kBadSystemState);
    CHECK(r.syndrome() == pib::err::kMlx5CmdBadState.syndrome);

    r = host.run(Mlx5Host::input(kEnableHca), 16);
    CHECK_FALSE(r.owned());
    CHECK(r.status() == 0);
    CHECK(r.syndrome() == 0);
    r = host.run(Mlx5Host::input(kQueryIssi), 0x70, 3); // output beyond the slot: a mailbox
    CHECK(r.status() == 0);
    CHECK(r.get(field(0x50, 16)) == 0);  // current_issi
    CHECK(r.get(field(0x360, 32)) == 1); // supported_issi_dw0: ISSI 0 only
    auto setIssi = Mlx5Host::input(kSetIssi);
    pib::mlx5::set(setIssi, field(0x50, 16), 1);
    CHECK(host.run(setIssi, 16).status() == status::kBadParam);

    // HOST_ENDIANNESS, written then read.
    auto reg = Mlx5Host::input(kAccessReg, 0, 0x20);
    pib::mlx5::set(reg, field(0x50, 16), 0x7004);
    reg[0x10] = 0x80;
    CHECK(host.run(reg, 0x20).status() == 0);
    pib::mlx5::set(reg, kOpMod, 1);
    reg[0x10] = 0;
    r = host.run(reg, 0x20);
    CHECK(r.status() == 0);
    CHECK(r.out[0x10] == 0x80);
    pib::mlx5::set(reg, field(0x50, 16), 0x5002); // PTYS: not here
    CHECK(host.run(reg, 0x20).status() == status::kBadParam);

    r = host.run(Mlx5Host::input(kQueryAdapter), 0x110);
    CHECK(r.status() == 0);
    CHECK(r.get(field(0x148, 24)) == 0x0002c9);
    CHECK(std::string(reinterpret_cast<const char *>(&r.out[0x100]), 13) == "PIB0000000001");

    CHECK(host.run(Mlx5Host::input(kInitHca), 16).status() == 0);
    CHECK(host.run(Mlx5Host::input(kInitHca), 16).status() == status::kBadSystemState);
    CHECK(host.run(Mlx5Host::input(kDisableHca), 16).status() == status::kBadSystemState);
    CHECK(host.run(Mlx5Host::input(kTeardownHca), 16).status() == 0);
    CHECK(host.run(Mlx5Host::input(kDisableHca), 16).status() == 0);
    CHECK(host.run(Mlx5Host::input(kQueryIssi), 0x70).status() == status::kBadSystemState);
    CHECK(host.traces("mlx5_command") == 14);
    CHECK(host.guestErrors() == 6); // each refusal above, once
}

TEST_CASE("mlx5: commands the device does not execute are BAD_OP, named in the trace", "[mlx5]") {
    Mlx5Host host;
    REQUIRE(host.bringUp());
    auto r = host.run(Mlx5Host::input(kSetDriverVersion), 16);
    CHECK(r.status() == status::kBadOpcode);
    CHECK(r.syndrome() == pib::err::kMlx5CmdBadOpcode.syndrome);
    CHECK(host.guestErrors("mlx5-cmd-bad-opcode") == 1);
    CHECK(host.errors.back().detail.find("SET_DRIVER_VERSION") != std::string::npos);
    CHECK(host.run(Mlx5Host::input(0x7777), 16).status() == status::kBadOpcode);
    // Opcode 0 is no command: the table has no empty entry that a longer
    // std::array than its rows would leave (opcode 0, no name).
    CHECK(std::string(Commands::name(0)) == "unknown");
    CHECK(host.run(Mlx5Host::input(0), 16).status() == status::kBadOpcode);
    CHECK(host.errors.back().detail.find("(unknown)") != std::string::npos);
    // Too short an input or output for the structure.
    CHECK(host.run(Mlx5Host::input(kQueryIssi), 0x20).status() == status::kBadOutputLength);
    CHECK(host.run(Mlx5Host::input(kSetHcaCap), 16).status() == status::kBadInputLength);
}

TEST_CASE("mlx5: QUERY_HCA_CAP reports an IB function, SET_HCA_CAP takes what a driver may "
          "choose",
          "[mlx5]") {
    Mlx5Host host;
    REQUIRE(host.run(Mlx5Host::input(kEnableHca), 16).status() == 0);
    auto r = host.run(Mlx5Host::input(kQueryHcaCap, 0), kCapOut); // general, maximum
    REQUIRE(r.status() == 0);
    CHECK(r.get(inOutput(kCapPortType)) == 0); // InfiniBand
    CHECK(r.get(inOutput(kCapNumPorts)) == 1);
    CHECK(r.get(inOutput(kCapXrc)) == 1);
    CHECK(r.get(inOutput(kCapRc)) == 1);
    // UMR maps free keys (IB_WR_REG_MR) of up to 512 pages.
    CHECK(r.get(inOutput(kCapUmrEntitySizeDisabled)) == 0);
    CHECK(r.get(inOutput(kCapLogMaxKlmList)) == 9);
    CHECK(r.get(inOutput(kCapMcamReg)) == 1);
    CHECK(r.get(inOutput(kCapLogMaxQp)) == 12);
    CHECK(r.get(inOutput(kCapDeviceFrequencyKhz)) == 1000000); // the internal timer's ns
    CHECK(r.get(inOutput(kCapAtomic)) == 1);
    // The atomic page: compare-and-swap and fetch-and-add of 8 bytes, in
    // host byte order (the mode offered, and current from the start).
    const Field kReqEndianness = inOutput(field(0x40, 2));
    const auto atomics = host.run(Mlx5Host::input(kQueryHcaCap, 3 << 1 | 1), kCapOut);
    REQUIRE(atomics.status() == 0);
    CHECK(atomics.get(inOutput(field(0x90, 16))) == 0x3);
    CHECK(atomics.get(inOutput(field(0xb0, 16))) == 0x8);
    CHECK(atomics.get(inOutput(field(0x46, 1))) == 1);
    CHECK(atomics.get(kReqEndianness) == 1);
    // On-demand paging (pg) by the memory scheme's faults alone: its block
    // holds every side of RC and XRC, UD's send; the transport scheme's
    // block is zeros. mem_page_fault is the driver's to set, and only it.
    CHECK(r.get(inOutput(field(0x227, 1))) == 1); // pg
    const Field kMemPageFault = inOutput(field(0x600, 1));
    const auto odp = host.run(Mlx5Host::input(kQueryHcaCap, 2 << 1), kCapOut);
    REQUIRE(odp.status() == 0);
    CHECK(odp.get(kMemPageFault) == 1);
    CHECK(odp.get(inOutput(field(0x245, 1))) == 1);            // page_prefetch
    CHECK(odp.get(inOutput(field(0x280, 32))) == 0xfc000000u); // rc_odp_caps
    CHECK(odp.get(inOutput(field(0x2c0, 32))) == 0x80000000u); // ud_odp_caps: send
    CHECK(odp.get(inOutput(field(0x2e0, 32))) == 0xfc000000u); // xrc_odp_caps
    CHECK(std::all_of(odp.out.begin() + 16, odp.out.begin() + 16 + 0x40,
                      [](uint8_t b) { return b == 0; }));
    auto odpNow = host.run(Mlx5Host::input(kQueryHcaCap, 2 << 1 | 1), kCapOut);
    CHECK(odpNow.get(kMemPageFault) == 0);
    auto setOdp = Mlx5Host::input(kSetHcaCap, 2 << 1, kCapOut);
    std::copy(odpNow.out.begin() + 16, odpNow.out.end(), setOdp.begin() + 16);
    pib::mlx5::set(setOdp, kMemPageFault, 1);
    CHECK(host.run(setOdp, 16).status() == 0);
    const auto chosen = host.run(Mlx5Host::input(kQueryHcaCap, 2 << 1 | 1), kCapOut);
    CHECK(chosen.get(kMemPageFault) == 1);
    // DC's word in both blocks then: libmlx5 reads the transport scheme's.
    CHECK(odp.get(inOutput(field(0x300, 32))) == 0xfc000000u);
    CHECK(odpNow.get(inOutput(field(0x100, 32))) == 0);
    CHECK(chosen.get(inOutput(field(0x100, 32))) == 0xfc000000u);
    pib::mlx5::set(setOdp, inOutput(field(0x080, 32)), 0xfc000000u); // transport scheme's rc
    CHECK(host.run(setOdp, 16).status() == status::kBadParam);
    // Every other type the PRM names reads as zeros, one beyond is refused;
    // DEVX's user contexts are offered.
    const auto roce = host.run(Mlx5Host::input(kQueryHcaCap, 4 << 1), kCapOut);
    REQUIRE(roce.status() == 0);
    CHECK(std::all_of(roce.out.begin() + 16, roce.out.end(), [](uint8_t b) { return b == 0; }));
    CHECK(host.run(Mlx5Host::input(kQueryHcaCap, 0x40 << 1), kCapOut).status() ==
          status::kBadParam);
    CHECK(r.get(inOutput(field(0x463, 5))) == 8); // log_max_uctx: 256 contexts
    // handle_hca_cap_atomic's SET: host endianness, taken; big-endian refused.
    auto setAtomic = Mlx5Host::input(kSetHcaCap, 3 << 1, kCapOut);
    pib::mlx5::set(setAtomic, kReqEndianness, 1);
    CHECK(host.run(setAtomic, 16).status() == 0);
    pib::mlx5::set(setAtomic, kReqEndianness, 0);
    CHECK(host.run(setAtomic, 16).status() == status::kBadParam);
    CHECK(host.guestErrors("mlx5-cmd-bad-param") == 3);

    // The driver's SET: the current page with log_max_qp lowered.
    auto cur = host.run(Mlx5Host::input(kQueryHcaCap, 1), kCapOut);
    auto set = Mlx5Host::input(kSetHcaCap, 0, kCapOut);
    std::copy(cur.out.begin() + 16, cur.out.end(), set.begin() + 16);
    pib::mlx5::set(set, inOutput(kCapLogMaxQp), 10);
    CHECK(host.run(set, 16).status() == 0);
    CHECK(host.run(Mlx5Host::input(kQueryHcaCap, 1), kCapOut).get(inOutput(kCapLogMaxQp)) == 10);
    CHECK(host.run(Mlx5Host::input(kQueryHcaCap, 0), kCapOut).get(inOutput(kCapLogMaxQp)) == 12);
    // What it may not choose changes nothing.
    pib::mlx5::set(set, inOutput(kCapLogMaxQp), 8);
    pib::mlx5::set(set, inOutput(kCapCmdifChecksum), 1);
    CHECK(host.run(set, 16).status() == status::kBadParam);
    pib::mlx5::set(set, inOutput(kCapCmdifChecksum), 0);
    pib::mlx5::set(set, inOutput(kCapLogMaxQp), 13);
    CHECK(host.run(set, 16).status() == status::kBadParam);
    CHECK(host.run(Mlx5Host::input(kQueryHcaCap, 1), kCapOut).get(inOutput(kCapLogMaxQp)) == 10);
    CHECK(host.guestErrors("mlx5-cmd-bad-param") == 5);
    REQUIRE(host.run(Mlx5Host::input(kInitHca), 16).status() == 0);
    pib::mlx5::set(set, inOutput(kCapLogMaxQp), 9);
    CHECK(host.run(set, 16).status() == status::kBadSystemState);
}

namespace {

std::vector<uint8_t> givePages(const std::vector<uint64_t> &pages) {
    auto in = Mlx5Host::input(kManagePages, 1, 0x10 + 8 * pages.size());
    pib::mlx5::set(in, field(0x60, 32), pages.size());
    for (size_t i = 0; i < pages.size(); ++i)
        writeBe64(&in[0x10 + 8 * i], pages[i]);
    return in;
}

uint32_t pagesWanted(Mlx5Host &host, uint16_t stage) {
    const auto r = host.run(Mlx5Host::input(kQueryPages, stage), 16);
    REQUIRE(r.status() == 0);
    return static_cast<uint32_t>(r.get(field(0x60, 32)));
}

} // namespace

TEST_CASE("mlx5: the device holds exactly the pages it asked for, and gives them back", "[mlx5]") {
    Mlx5Host host;
    REQUIRE(host.run(Mlx5Host::input(kEnableHca), 16).status() == 0);
    CHECK(pagesWanted(host, 1) == 4);
    std::vector<uint64_t> pages;
    for (int i = 0; i < 5; ++i)
        pages.push_back(host.alloc(4096));
    // Refused, each holding none: more than asked, twice the same page,
    // not aligned, not guest RAM.
    const std::vector<std::vector<uint64_t>> bad = {{pages[0], pages[1], pages[2], pages[3],
                                                     pages[4], host.alloc(4096), host.alloc(4096),
                                                     host.alloc(4096), host.alloc(4096)},
                                                    {pages[0], pages[0]},
                                                    {pages[0] + 8},
                                                    {0x10000000000ull}};
    for (const auto &list : bad)
        CHECK(host.run(givePages(list), 16).status() == status::kBadParam);
    CHECK(host.guestErrors("mlx5-pages-bad") == bad.size());
    CHECK(pagesWanted(host, 1) == 4);

    CHECK(host.run(givePages({pages[0], pages[1], pages[2], pages[3]}), 16).status() == 0);
    CHECK(pagesWanted(host, 1) == 0);
    CHECK(pagesWanted(host, 2) == 4);
    CHECK(pagesWanted(host, 3) == 4);
    CHECK(host.run(givePages({pages[1]}), 16).status() == status::kBadParam); // held already

    // Taken back: as many as asked and held, each one given.
    auto take = Mlx5Host::input(kManagePages, 2);
    pib::mlx5::set(take, field(0x60, 32), 8);
    const auto r = host.run(take, 0x10 + 8 * 8);
    REQUIRE(r.status() == 0);
    REQUIRE(r.get(field(0x40, 32)) == 4);
    std::vector<uint64_t> back;
    for (int i = 0; i < 4; ++i)
        back.push_back(readBe64(&r.out[0x10 + 8 * i]));
    std::sort(back.begin(), back.end());
    CHECK(back == std::vector<uint64_t>(pages.begin(), pages.begin() + 4));
    CHECK(pagesWanted(host, 1) == 4);
}

TEST_CASE("mlx5: a slot the device cannot use gets a delivery status and does not run", "[mlx5]") {
    using namespace pib::mlx5::cmdq;
    Mlx5Host host;
    REQUIRE(host.run(Mlx5Host::input(kEnableHca), 16).status() == 0);
    const uint64_t slot = host.queue;

    // Not handed over: ignored, the slot untouched.
    *host.at(slot + kStatusOwn) = 0;
    host.isegWrite(iseg::kCmdDoorbell, 1);
    CHECK(*host.at(slot + kStatusOwn) == 0);
    CHECK(host.guestErrors("mlx5-cmdq-not-owned") == 1);

    // Another transport type.
    auto r = host.run(Mlx5Host::input(kQueryIssi), 0x70);
    *host.at(slot + kType) = 3;
    *host.at(slot + kStatusOwn) = 1;
    host.isegWrite(iseg::kCmdDoorbell, 1);
    CHECK(*host.at(slot + kStatusOwn) == kDeliveryDescriptor << 1);

    // A mailbox that says it is another block.
    const auto blocks = host.mailboxes(0x60);
    writeBe32(host.at(blocks[0] + kBlockNumber), 7);
    *host.at(slot + kType) = kTransportPci;
    writeBe64(host.at(slot + kOutPointer), blocks[0]);
    *host.at(slot + kStatusOwn) = 1;
    host.isegWrite(iseg::kCmdDoorbell, 1);
    CHECK(*host.at(slot + kStatusOwn) == kDeliveryBadBlockNumber << 1);

    // A chain that ends before the output does, and one misaligned.
    writeBe64(host.at(slot + kOutPointer), 0);
    *host.at(slot + kStatusOwn) = 1;
    host.isegWrite(iseg::kCmdDoorbell, 1);
    CHECK(*host.at(slot + kStatusOwn) == kDeliveryOutLength << 1);
    writeBe64(host.at(slot + kOutPointer), blocks[0] + 4);
    *host.at(slot + kStatusOwn) = 1;
    host.isegWrite(iseg::kCmdDoorbell, 1);
    CHECK(*host.at(slot + kStatusOwn) == kDeliveryOutPointerAlign << 1);

    // More than the device takes.
    writeBe32(host.at(slot + kInLength), (1u << 20) + 1);
    *host.at(slot + kStatusOwn) = 1;
    host.isegWrite(iseg::kCmdDoorbell, 1);
    CHECK(*host.at(slot + kStatusOwn) == kDeliveryInLength << 1);
    CHECK(host.guestErrors("mlx5-cmdq-bad-layout") == 4);
    CHECK(host.guestErrors("mlx5-cmdq-bad-length") == 1);
    CHECK(host.traces("mlx5_command") == 2); // ENABLE_HCA and QUERY_ISSI only ran
    (void)r;

    // Before the queue's address, a doorbell has nowhere to look.
    Mlx5Host fresh(false);
    fresh.isegWrite(iseg::kCmdDoorbell, 1);
    CHECK(fresh.guestErrors("mlx5-cmdq-no-queue") == 1);
}

TEST_CASE("mlx5: after an internal error the health buffer says so and commands fail", "[mlx5]") {
    Mlx5Host host;
    REQUIRE(host.bringUp());
    pib_core_inject_fatal(host.core, "a test");
    CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, iseg::kHealthSynd, 1) != 0);
    CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, iseg::kHealthRfrSeverity, 1) & 0x80);
    const uint32_t counter = host.isegRead(iseg::kHealthCounter);
    CHECK(host.isegRead(iseg::kHealthCounter) == counter); // the firmware stopped
    const auto r = host.run(Mlx5Host::input(kQueryIssi), 0x70);
    CHECK(r.status() == status::kInternal);
    CHECK(r.syndrome() == pib::err::kDeviceFatal.syndrome);

    // A reset brings back a function to enable, the queue to be written.
    pib_core_reset(host.core);
    CHECK(pib_core_bar_read(host.core, PIB_BAR_REGS, iseg::kHealthSynd, 1) == 0);
    CHECK(host.isegRead(iseg::kHealthCounter) != host.isegRead(iseg::kHealthCounter));
    CHECK((host.isegRead(iseg::kCmdqAddrLowSize) & 0xfffff000u) == 0);
    host.isegWrite(iseg::kCmdqAddrHigh, static_cast<uint32_t>(host.queue >> 32));
    host.isegWrite(iseg::kCmdqAddrLowSize, static_cast<uint32_t>(host.queue));
    CHECK(host.run(Mlx5Host::input(kQueryIssi), 0x70).status() == status::kBadSystemState);
    CHECK(host.bringUp());
}

TEST_CASE("mlx5: the vendor-specific capability has a semaphore and no spaces", "[mlx5]") {
    // mlx5_vsc_gw_lock: read the counter, write it to the semaphore, read
    // the semaphore back; the lock is taken when they are equal.
    Mlx5Host host;
    REQUIRE(pib_core_vsc_size(host.core) == 0x18);
    const uint32_t mine = pib_core_vsc_read(host.core, 0x8);
    const uint32_t theirs = pib_core_vsc_read(host.core, 0x8);
    CHECK(mine != 0);
    CHECK(theirs != mine);
    CHECK(pib_core_vsc_read(host.core, 0xc) == 0);
    pib_core_vsc_write(host.core, 0xc, mine);
    CHECK(pib_core_vsc_read(host.core, 0xc) == mine);
    pib_core_vsc_write(host.core, 0xc, theirs); // held: another cannot take it
    CHECK(pib_core_vsc_read(host.core, 0xc) == mine);
    // mlx5_vsc_gw_set_space: the space is written to CTRL; status 0 says
    // the device has no such space (crspace 3, the semaphores 0xa).
    for (const uint32_t space : {3u, 0xau}) {
        pib_core_vsc_write(host.core, 0x4, space);
        CHECK(pib_core_vsc_read(host.core, 0x4) == space);
    }
    // An operation anyway ends at once, failed: the flag flips, the
    // syndrome is set.
    pib_core_vsc_write(host.core, 0x10, 0x100);
    CHECK(pib_core_vsc_read(host.core, 0x10) == (0x100u | 1u << 31 | 1u << 30));
    pib_core_vsc_write(host.core, 0x10, 0x100 | 1u << 31);
    CHECK(pib_core_vsc_read(host.core, 0x10) == (0x100u | 1u << 30));
    CHECK(pib_core_vsc_read(host.core, 0x14) == 0);
    pib_core_vsc_write(host.core, 0xc, 0); // freed
    CHECK(pib_core_vsc_read(host.core, 0xc) == 0);
    // The header, unaligned and outside offsets are nothing.
    CHECK(pib_core_vsc_read(host.core, 0) == 0);
    CHECK(pib_core_vsc_read(host.core, 0x9) == 0);
    CHECK(pib_core_vsc_read(host.core, 0x18) == 0);
    pib_core_vsc_write(host.core, 0x1000, 1);
    // The pib personality has none.
    FakeHost pib;
    CHECK(pib_core_vsc_size(pib.core) == 0);
    CHECK(pib_core_vsc_read(pib.core, 0x8) == 0);
}
