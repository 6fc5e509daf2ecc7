// SPDX-License-Identifier: GPL-2.0-or-later
// The device's saved state (pib_core_save / pib_core_load, docs/migration.md):
// a device an SM configured is saved and loaded into a fresh one, which
// then answers as the first did; a state from another device, of another
// version, cut or rewritten, is refused and leaves the device as after
// reset; a device that holds what this version does not save yet refuses
// to save.
#include <catch2/catch.hpp>

#include <algorithm>
#include <array>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "connected_fixture.hh"
#include "fake_host.hh"
#include "frame.hh"
#include "mad.hh"
#include "mlx5_function.hh"
#include "smp.hh"

using namespace pib;

namespace {

struct Saved {
    int result;
    std::vector<uint8_t> bytes;
    std::string error;
};

Saved save(FakeHost &host) {
    Saved s;
    s.bytes = host.saveState(&s.error);
    s.result = s.bytes.empty() ? -1 : 0;
    return s;
}

// pib_core_load's result; its reason in *why.
int load(FakeHost &host, const std::vector<uint8_t> &bytes, std::string *why = nullptr) {
    const std::string reason = host.loadState(bytes);
    if (why)
        *why = reason;
    return reason.empty() ? 0 : -1;
}

// Port 1 as the SM sees it through MAD_IFC.
pib_mad_ifc getPortInfo(FakeHost &host) {
    pib_mad_ifc response{};
    REQUIRE(
        host.mad(iba::kClassSmpDirected, iba::kGet, iba::kAttrPortInfo, 1, {}, &response).status ==
        PIB_CMD_STATUS_OK);
    return response;
}

pib_port_info queryPort(FakeHost &host) {
    pib_port_info info{};
    REQUIRE(host.commandOut(PIB_CMD_QUERY_PORT, 1, &info).status == PIB_CMD_STATUS_OK);
    return info;
}

// A device whose driver ran INIT_HCA and named the node, on a cable whose
// link came up, that an SM gave a LID, an SM LID, an M_Key with protect
// bits, a partition and an ACTIVE port.
struct ConfiguredDevice {
    FakeHost host;
    static constexpr uint64_t kMkey = 0x1122334455667788ull;

    // `driver` runs after INIT_HCA, before the cable: the objects a
    // driver creates as it probes.
    explicit ConfiguredDevice(const std::function<void(FakeHost &)> &driver = {}) {
        host.initHca();
        if (driver)
            driver(host);
        std::array<char, PIB_NODE_DESC_LEN> desc{};
        std::strcpy(desc.data(), "vm1 saved");
        REQUIRE(host.commandIn(PIB_CMD_SET_NODE_DESC, 0, desc).status == PIB_CMD_STATUS_OK);
        host.cablePort1();
        for (uint8_t state : {uint8_t{0}, uint8_t{PIB_PORT_ARMED}, uint8_t{PIB_PORT_ACTIVE}})
            setPortInfo(state);
        pib_mad_ifc r{};
        REQUIRE(host.mad(
                        iba::kClassSmpDirected, iba::kSet, iba::kAttrPkeyTable, 0,
                        [](iba::Mad &m) {
                            m.set64(24, kMkey); // the SMP's M_Key
                            const uint16_t pkeys[] = {0xffff, 0x8123};
                            iba::writeBlock16(m, pkeys);
                        },
                        &r)
                    .status == PIB_CMD_STATUS_OK);
    }

    void setPortInfo(uint8_t state) {
        pib_mad_ifc r{};
        REQUIRE(host.mad(
                        iba::kClassSmpDirected, iba::kSet, iba::kAttrPortInfo, 1,
                        [&](iba::Mad &m) {
                            m.set64(24, kMkey); // the SMP's M_Key
                            iba::writePortInfo(m, {.mkey = kMkey,
                                                   .lid = 7,
                                                   .masterSmLid = 3,
                                                   .portState = state,
                                                   .mkeyProtectBits = 1,
                                                   .neighborMtu = PIB_MTU_4096});
                        },
                        &r)
                    .status == PIB_CMD_STATUS_OK);
        REQUIRE(iba::Mad(r.mad).status() == iba::kStatusOk);
    }
};

} // namespace

TEST_CASE("a device's ports and registers are saved and loaded into a fresh device",
          "[device-state]") {
    ConfiguredDevice a;
    const Saved s = save(a.host);
    REQUIRE(s.result == 0);
    REQUIRE_FALSE(s.bytes.empty());

    FakeHost b;
    std::string why;
    REQUIRE(load(b, s.bytes, &why) == 0);
    CHECK(why.empty());
    CHECK(save(b).bytes == s.bytes); // nothing lost or added on the way
    const pib_port_info before = queryPort(a.host), after = queryPort(b);
    CHECK(after.lid == 7);
    CHECK(after.sm_lid == 3);
    CHECK(after.state == PIB_PORT_ACTIVE);
    CHECK(after.active_mtu == PIB_MTU_4096);
    CHECK(std::memcmp(&before, &after, sizeof(before)) == 0);
    // The SM's view: the same PortInfo (M_Key included: the SMA checks
    // the key it was given) and the same partition and node description.
    const pib_mad_ifc portA = getPortInfo(a.host), portB = getPortInfo(b);
    CHECK(std::memcmp(portA.mad + 64, portB.mad + 64, 64) == 0);
    pib_mad_ifc pkeys{};
    REQUIRE(b.mad(
                 iba::kClassSmpDirected, iba::kGet, iba::kAttrPkeyTable, 0,
                 [](iba::Mad &m) { m.set64(24, ConfiguredDevice::kMkey); }, &pkeys)
                .status == PIB_CMD_STATUS_OK);
    std::array<uint16_t, iba::kPkeysPerBlock> table{};
    iba::readBlock16(iba::Mad(pkeys.mad), table);
    CHECK(table[1] == 0x8123);
    pib_mad_ifc desc{};
    REQUIRE(b.mad(iba::kClassSmpLid, iba::kGet, iba::kAttrNodeDescription, 0, {}, &desc).status ==
            PIB_CMD_STATUS_OK);
    CHECK(std::string(reinterpret_cast<char *>(desc.mad + 64)) == "vm1 saved");
    // INIT_HCA was done: a second one is refused, as on the first device.
    CHECK(b.command(PIB_CMD_INIT_HCA).status == PIB_CMD_STATUS_BAD_STATE);
}

TEST_CASE("a saved state that is not this device's, or not whole, is refused", "[device-state]") {
    ConfiguredDevice a;
    const Saved s = save(a.host);
    REQUIRE(s.result == 0);
    FakeHost b;
    const pib_port_info fresh = queryPort(b);
    auto refused = [&](const std::vector<uint8_t> &bytes, const std::string &reason = "") {
        std::string why;
        CHECK(load(b, bytes, &why) == -1);
        if (!reason.empty())
            CHECK(why.find(reason) != std::string::npos);
        CHECK_FALSE(why.empty());
        const pib_port_info now = queryPort(b); // as after reset
        CHECK(std::memcmp(&now, &fresh, sizeof(now)) == 0);
        b.command(PIB_CMD_CLOSE_HCA);
    };
    SECTION("another version") {
        auto bytes = s.bytes;
        bytes[8] = 99; // the header's version, after its tag and length
        refused(bytes, "version 99");
    }
    SECTION("another device") {
        pib_core_config config = FakeHost::defaultConfig();
        config.node_guid += 0x100;
        FakeHost other(config);
        other.initHca();
        const Saved o = save(other);
        REQUIRE(o.result == 0);
        refused(o.bytes, "configured otherwise");
    }
    SECTION("every cut") {
        for (size_t cut = 0; cut < s.bytes.size(); cut += 7)
            refused(std::vector<uint8_t>(s.bytes.begin(), s.bytes.begin() + cut));
    }
    SECTION("bytes after the end") {
        auto bytes = s.bytes;
        bytes.push_back(0);
        refused(bytes, "bytes after");
    }
    SECTION("a port state no port has") {
        // Find the saved port info by its LID and SM LID (7, 3) and make
        // its state 9.
        auto bytes = s.bytes;
        const pib_port_info info = queryPort(a.host);
        const auto *raw = reinterpret_cast<const uint8_t *>(&info);
        auto at = std::search(bytes.begin(), bytes.end(), raw, raw + sizeof(info));
        REQUIRE(at != bytes.end());
        pib_port_info bad = info;
        bad.state = 9;
        std::memcpy(&*at, &bad, sizeof(bad));
        refused(bytes, "port state of 9");
    }
}

TEST_CASE("a device that holds what is not saved yet refuses to save, and says what",
          "[device-state]") {
    FakeHost host;
    host.initHca();
    REQUIRE(save(host).result == 0);
    const uint32_t pd = static_cast<uint32_t>(host.command(PIB_CMD_ALLOC_PD).result);
    host.createPhysicalMr(pd, PIB_ACCESS_LOCAL_WRITE);
    REQUIRE(save(host).result == 0);
    testing::Node node(PIB_QPT_RC, 1); // a device with a QP
    REQUIRE(save(node.host).result == 0);
    char *answer = nullptr;
    REQUIRE(pib_core_inject(node.host.core, "drop 0x11 3", &answer) == 0);
    std::free(answer);
    const Saved s = save(node.host);
    CHECK(s.result == -1);
    CHECK(s.bytes.empty());
    CHECK(s.error.find("does not save yet") != std::string::npos);
    CHECK(s.error.find("armed injections") != std::string::npos);
}

namespace {

// What a migration carries beside the device's state: the guest's RAM
// (the rings and records the objects point at) and the clock.
void carryGuest(FakeHost &from, FakeHost &to) {
    to.ram = from.ram;
    to.ramNext = from.ramNext;
    to.now = from.now;
}

} // namespace

// The objects a driver creates before its QPs: each comes back under its
// number, with its references counted again (an EQ a CQ uses cannot be
// destroyed, nor an MTT range a ring is on), and the async EQ takes the
// next event in the slot after the last one written before the save.
TEST_CASE("doorbell pages, PDs, the MTT, EQs and CQs are loaded at their numbers and work",
          "[device-state]") {
    FakeHost::Eq async{}, comp{};
    FakeHost::Cq cq{};
    uint32_t uar = 0, pd = 0;
    ConfiguredDevice a([&](FakeHost &h) {
        uar = static_cast<uint32_t>(h.command(PIB_CMD_ALLOC_UAR).result);
        h.command(PIB_CMD_ALLOC_PD);
        pd = static_cast<uint32_t>(h.command(PIB_CMD_ALLOC_PD).result);
        REQUIRE(h.command(PIB_CMD_DEALLOC_PD, 0).status == PIB_CMD_STATUS_OK); // a gap
        async = h.createEq(4, PIB_EQ_ASYNC);
        comp = h.createEq(4, 0, 1);
        cq = h.createCq(comp.eqn, uar, 6);
        pib_core_bar_write(h.core, PIB_BAR_DOORBELL, uint64_t{uar} * PIB_PAGE_SIZE + PIB_DB_CQ_ARM,
                           uint64_t{PIB_CQ_ARM_NEXT} << 32 | cq.cqn, 8); // armed as it is saved
    });
    // The SM's configuration said LID, SM and P_Key changes, and ACTIVE.
    const std::vector<uint8_t> before = a.host.asyncEvents(async.page, 16);
    REQUIRE(before.size() >= 2);
    REQUIRE(before.size() < 16);
    REQUIRE(std::count(before.begin(), before.end(), PIB_ASYNC_PORT_ACTIVE) == 1);
    const Saved s = save(a.host);
    REQUIRE(s.result == 0);

    FakeHost b;
    carryGuest(a.host, b);
    std::string why;
    REQUIRE(load(b, s.bytes, &why) == 0);
    CHECK(why.empty());
    CHECK(save(b).bytes == s.bytes);
    pib_cq_context cqA{}, cqB{};
    REQUIRE(a.host.commandOut(PIB_CMD_QUERY_CQ, cq.cqn, &cqA).status == PIB_CMD_STATUS_OK);
    REQUIRE(b.commandOut(PIB_CMD_QUERY_CQ, cq.cqn, &cqB).status == PIB_CMD_STATUS_OK);
    CHECK(std::memcmp(&cqA, &cqB, sizeof(cqA)) == 0);
    pib_eq_context eqB{};
    REQUIRE(b.commandOut(PIB_CMD_QUERY_EQ, comp.eqn, &eqB).status == PIB_CMD_STATUS_OK);
    CHECK(eqB.msix_vector == 1);
    // The next PD takes the gap, on both devices alike.
    CHECK(b.command(PIB_CMD_ALLOC_PD).result == a.host.command(PIB_CMD_ALLOC_PD).result);
    CHECK(b.command(PIB_CMD_DEALLOC_PD, pd).status == PIB_CMD_STATUS_OK);
    // References, counted again as the objects were loaded.
    CHECK(b.command(PIB_CMD_DESTROY_EQ, comp.eqn).status == PIB_CMD_STATUS_BUSY);
    CHECK(b.command(PIB_CMD_FREE_UAR, uar).status == PIB_CMD_STATUS_BUSY);
    CHECK(b.command(PIB_CMD_FREE_MTT, cqB.buf.mtt_index).status == PIB_CMD_STATUS_BUSY);
    // The link goes down: PORT_ERR, in the async EQ's slot after them.
    pib_core_port_connected(b.core, 1, 1); // the cable the switch kept
    b.switchHello(PIB_WIRE_HELLO_RESUMES);
    pib_core_port_connected(b.core, 1, 0);
    std::vector<uint8_t> after = before;
    after.push_back(PIB_ASYNC_PORT_ERR);
    CHECK(b.asyncEvents(async.page, 16) == after);
    CHECK(b.command(PIB_CMD_DESTROY_CQ, cq.cqn).status == PIB_CMD_STATUS_OK);
    CHECK(b.command(PIB_CMD_DESTROY_EQ, comp.eqn).status == PIB_CMD_STATUS_OK);
    CHECK(b.command(PIB_CMD_FREE_MTT, cqB.buf.mtt_index).status == PIB_CMD_STATUS_OK);
    CHECK(b.command(PIB_CMD_FREE_UAR, uar).status == PIB_CMD_STATUS_OK);
    CHECK(b.guestErrors() == 3); // the three refused as busy, and nothing else
    CHECK(b.guestErrors("cmd-busy") == 3);
}

// A state whose objects a guest's commands could not have made is refused
// as the command would have been, with the command's reason.
TEST_CASE("a saved object that its create command would refuse is refused", "[device-state]") {
    FakeHost::Cq cq{};
    ConfiguredDevice a([&](FakeHost &h) {
        const auto uar = static_cast<uint32_t>(h.command(PIB_CMD_ALLOC_UAR).result);
        cq = h.createCq(h.createEq(4, PIB_EQ_ASYNC).eqn, uar, 6);
    });
    const Saved s = save(a.host);
    REQUIRE(s.result == 0);
    pib_cq_context ctx{};
    REQUIRE(a.host.commandOut(PIB_CMD_QUERY_CQ, cq.cqn, &ctx).status == PIB_CMD_STATUS_OK);
    auto rewritten = [&](const std::function<void(pib_cq_context &)> &change) {
        std::vector<uint8_t> bytes = s.bytes;
        auto at = std::search(bytes.begin(), bytes.end(), reinterpret_cast<const uint8_t *>(&ctx),
                              reinterpret_cast<const uint8_t *>(&ctx) + sizeof(ctx));
        REQUIRE(at != bytes.end());
        pib_cq_context bad = ctx;
        change(bad);
        std::memcpy(&*at, &bad, sizeof(bad));
        return bytes;
    };
    FakeHost b;
    const pib_port_info fresh = queryPort(b);
    std::string why;
    CHECK(load(b, rewritten([](pib_cq_context &c) { c.eqn = 9; }), &why) != 0);
    CHECK(why == "CQ " + std::to_string(cq.cqn) + ": CREATE_CQ on EQ 9");
    CHECK(load(b, rewritten([](pib_cq_context &c) { c.buf.npages = 7; }), &why) != 0);
    CHECK(why.find("CREATE_CQ ring of 7 pages") != std::string::npos);
    // Refused: no guest error was said, and the device is as after reset.
    CHECK(b.guestErrors() == 0);
    const pib_port_info now = queryPort(b);
    CHECK(std::memcmp(&now, &fresh, sizeof(now)) == 0);
    CHECK(b.command(PIB_CMD_QUERY_CQ, cq.cqn, 0, b.alloc(PIB_MAILBOX_SIZE)).status ==
          PIB_CMD_STATUS_BAD_STATE); // no INIT_HCA: nothing runs
}

namespace {

// The frames port 1 sent since the last call.
std::vector<wire::Frame> framesSent(FakeHost &host) {
    wire::FrameReader reader;
    reader.feed(host.portOutput[1]);
    host.portOutput[1].clear();
    std::vector<wire::Frame> frames;
    wire::FrameReader::Error error;
    while (auto frame = reader.next(&error))
        frames.push_back(*frame);
    return frames;
}

uint16_t helloFlags(const wire::Frame &frame) {
    pib_wire_hello hello{};
    REQUIRE(frame.type == PIB_WIRE_HELLO);
    REQUIRE(frame.payload.size() == sizeof(hello));
    std::memcpy(&hello, frame.payload.data(), sizeof(hello));
    return hello.flags;
}

} // namespace

TEST_CASE("a device that moves says MOVING, then nothing, and its port keeps its state",
          "[device-moves]") {
    ConfiguredDevice a;
    framesSent(a.host);
    pib_core_moving(a.host.core);
    const auto frames = framesSent(a.host);
    REQUIRE(frames.size() == 1);
    CHECK(frames[0].type == PIB_WIRE_MOVING);
    CHECK(frames[0].payload.empty());
    CHECK(queryPort(a.host).state == PIB_PORT_ACTIVE);
    // Silent: no polling HELLO however long it waits, no answer to the
    // switch's, and the port stays as it was.
    a.host.advance(3'000'000'000);
    a.host.switchHello();
    CHECK(framesSent(a.host).empty());
    CHECK(queryPort(a.host).state == PIB_PORT_ACTIVE);
}

TEST_CASE("a device whose move failed resumes its link on the same cable at once",
          "[device-moves]") {
    ConfiguredDevice a;
    pib_core_moving(a.host.core);
    framesSent(a.host);
    pib_core_move_failed(a.host.core);
    const auto frames = framesSent(a.host);
    REQUIRE(frames.size() == 1);
    CHECK(helloFlags(frames[0]) == (PIB_WIRE_HELLO_RESUMES | PIB_WIRE_HELLO_TAKES_DISCARDS));
    CHECK(queryPort(a.host).state == PIB_PORT_ACTIVE);
    pib_core_move_failed(a.host.core); // a second call changes nothing
    CHECK(framesSent(a.host).empty());
}

TEST_CASE("a loaded device resumes its link on its next cable, as the switch kept it",
          "[device-moves]") {
    ConfiguredDevice a;
    pib_core_moving(a.host.core);
    const Saved s = save(a.host);
    REQUIRE(s.result == 0);
    FakeHost b;
    REQUIRE(load(b, s.bytes) == 0);
    pib_core_port_connected(b.core, 1, 1);
    const auto frames = framesSent(b);
    REQUIRE(frames.size() == 1);
    CHECK(helloFlags(frames[0]) == (PIB_WIRE_HELLO_RESUMES | PIB_WIRE_HELLO_TAKES_DISCARDS));
    SECTION("the switch kept the link") {
        b.switchHello(PIB_WIRE_HELLO_RESUMES);
        CHECK(queryPort(b).state == PIB_PORT_ACTIVE);
        CHECK(queryPort(b).lid == 7);
    }
    SECTION("the switch did not: the link is a new one") {
        b.switchHello();
        CHECK(queryPort(b).state == PIB_PORT_INIT);
    }
}

namespace {

// A ConnectX function as mlx5_ib leaves one (a UAR page, an EQ, a CQ, a
// PD, a physical key), with an RC pair whose first SEND waits out an RNR
// NAK, a UD QP on an SRQ in a multicast group, a Q counter, a free
// UMR-enabled key, a DCI's connection to a DCT, and a process's user
// context with a CQ in its UMEM.
std::vector<uint8_t> connectXSeed() {
    using namespace testing::mlx5qp;
    Mlx5Host host;
    testing::Mlx5Function f(host);
    REQUIRE(f.setUp());
    REQUIRE(f.activatePort());
    auto a = f.createQp(kRc, 1, 3, 4), b = f.createQp(kRc, 1, 3, 4);
    REQUIRE((a && b));
    REQUIRE(f.toRts(a->qpn, {.qpn = b->qpn, .ackTimeout = 12, .retries = 7, .rnrRetries = 7}));
    REQUIRE(f.toRts(b->qpn, {.qpn = a->qpn, .ackTimeout = 12, .retries = 7, .rnrRetries = 7}));
    const auto srq = f.createSrq(2, {0, 1, 2, 3});
    REQUIRE(srq);
    const auto onSrq = f.createQpOnSrq(kUd, srq->srqn);
    REQUIRE(onSrq);
    REQUIRE(f.toRts(onSrq->qpn));
    auto attach = Mlx5Host::input(0x806, 0, 0x20); // ATTACH_TO_MCG
    set(attach, kHeld, onSrq->qpn);
    attach[0x10] = 0xff;
    attach[0x1f] = 0x01;
    REQUIRE(host.run(attach, 16).status() == 0);
    REQUIRE(host.run(Mlx5Host::input(0x771), 16).status() == 0);   // ALLOC_Q_COUNTER
    auto key = Mlx5Host::input(0x200, 0, 0x110);                   // CREATE_MKEY
    for (const auto &[at, value] : {std::pair{field(0x81, 1), 1u}, // free
                                    {field(0x90, 1), 1u},          // umr_en
                                    {field(0x95, 1), 1u},          // lr
                                    {field(0x96, 2), 1u},          // MTT
                                    {field(0xa0, 24), 0xffffffu},  // no QP
                                    {field(0xe8, 24), f.pd},       // its PD
                                    {field(0x220, 32), 4u}})       // 8 entries
        set(key, at, value);
    REQUIRE(host.run(key, 16).status() == 0);
    const uint64_t data = host.allocRandom(4096, 2);
    f.blueFlame(f.writeSend(*a, false, {.opcode = kSend, .addr = data, .length = 4096}), f.uar);
    // A DCT with a DCI's connection open: its SEND waits on an RNR NAK.
    const auto dct = host.run(f.dctInput(srq->srqn, 0x1ee7a330), 16);
    REQUIRE(dct.status() == 0);
    auto dci = f.createDci(srq->srqn);
    REQUIRE(dci);
    REQUIRE(f.toRts(dci->qpn, {.ackTimeout = 12, .retries = 7, .rnrRetries = 7}));
    f.blueFlame(f.writeDcSend(*dci, static_cast<uint32_t>(dct.get(kHeld)), 0x1ee7a330,
                              {.opcode = kSend, .addr = data, .length = 4096}),
                f.uar);
    // A process's user context with a PD and a UMEM, and a CQ in the
    // UMEM as DEVX makes one (docs/mlx5.md §16).
    const auto uctx = host.run(Mlx5Host::input(0xa04, 0, 0x40), 16);
    REQUIRE(uctx.status() == 0);
    const auto uid = static_cast<uint32_t>(uctx.get(field(0x50, 16)));
    auto pd = Mlx5Host::input(0x800);
    set(pd, pib::mlx5::kUid, uid);
    REQUIRE(host.run(pd, 16).status() == 0);
    const uint64_t pages = host.alloc(8192, 4096);
    auto umem = Mlx5Host::input(0xa08, 0, 0x40);
    set(umem, pib::mlx5::kUid, uid);
    set(umem, field(0x140, 64), 2u);
    pib::mlx5::writeBe64(&umem[0x30], pages | 0x3);
    pib::mlx5::writeBe64(&umem[0x38], (pages + 4096) | 0x3);
    const auto registered = host.run(umem, 16);
    REQUIRE(registered.status() == 0);
    const auto id = static_cast<uint32_t>(registered.get(kHeld));
    auto cq = Mlx5Host::input(0x400, 0, 0x110);
    for (const auto &[at, value] : {std::pair{pib::mlx5::kUid, uid},
                                    {field(0x80 + 0x63, 5), 4u},     // 16 CQEs
                                    {field(0x80 + 0x68, 24), f.uar}, // the kernel's page
                                    {field(0x80 + 0xa0, 32), f.eqn},
                                    {field(0x80 + 0x06, 1), 1u},        // dbr_umem_valid
                                    {field(0x80 + 0x20, 32), id},       // dbr_umem_id
                                    {field(0x80 + 0x1c0, 64), 0x1000u}, // its offset
                                    {field(0x2e0, 1), 1u},              // cq_umem_valid
                                    {field(0x2c0, 32), id}})            // cq_umem_id
        set(cq, at, value);
    REQUIRE(host.run(cq, 16).status() == 0);
    return save(host).bytes;
}

// The states fuzz-state starts from (tests/fuzz/inputs/state): a device an
// SM configured, alone and with a driver's first objects; a ConnectX
// function in the middle of its work.
std::vector<std::vector<uint8_t>> fuzzSeeds() {
    ConfiguredDevice bare;
    ConfiguredDevice probed([](FakeHost &h) {
        const auto uar = static_cast<uint32_t>(h.command(PIB_CMD_ALLOC_UAR).result);
        h.command(PIB_CMD_ALLOC_PD);
        h.command(PIB_CMD_ALLOC_XRCD);
        h.createCq(h.createEq(4, PIB_EQ_ASYNC).eqn, uar, 6);
        h.createCq(h.createEq(5, 0, 1).eqn, uar, 7, 2);
        const uint32_t pd = static_cast<uint32_t>(h.command(PIB_CMD_ALLOC_PD).result);
        h.createPhysicalMr(pd, PIB_ACCESS_LOCAL_WRITE | PIB_ACCESS_MW_BIND);
        pib_mr_context fast{};
        fast.pdn = pd;
        fast.flags = PIB_MR_FAST_REG;
        fast.mtt_index = static_cast<uint32_t>(h.command(PIB_CMD_ALLOC_MTT, 0, 4).result);
        fast.mtt_count = 4;
        h.commandIn(PIB_CMD_CREATE_MR, 0, fast);
        pib_mw_context mw{};
        mw.pdn = pd;
        mw.type = PIB_MW_TYPE_1;
        h.commandIn(PIB_CMD_CREATE_MW, 0, mw);
        // An implicit on-demand region, and its child for the first span
        // with a page mapped (docs/prm.md §6.10).
        pib_mr_context implicit{};
        implicit.length = UINT64_MAX;
        implicit.pdn = pd;
        implicit.access = PIB_ACCESS_LOCAL_WRITE;
        implicit.log_page_size = PIB_IMPLICIT_MIN_LOG_SPAN;
        implicit.flags = PIB_MR_IMPLICIT;
        pib_mr_context child = implicit;
        child.parent_key =
            static_cast<uint32_t>(h.commandIn(PIB_CMD_CREATE_MR, 0, implicit).result);
        child.length = uint64_t{1} << PIB_IMPLICIT_MIN_LOG_SPAN;
        child.mtt_count = static_cast<uint32_t>(child.length / PIB_PAGE_SIZE);
        child.mtt_index =
            static_cast<uint32_t>(h.command(PIB_CMD_ALLOC_MTT, 0, child.mtt_count).result);
        child.log_page_size = 12;
        child.flags = PIB_MR_ON_DEMAND;
        h.commandIn(PIB_CMD_CREATE_MR, 0, child);
        pib_mtt_write page{};
        page.count = 1;
        page.entries[0] = h.alloc(PIB_PAGE_SIZE) | PIB_MTT_READ | PIB_MTT_WRITE;
        h.commandIn(PIB_CMD_WRITE_MTT, child.mtt_index, page);
    });
    // Two RC QPs in the middle of a transfer: a SEND, a WRITE and a READ
    // out, the answers to some lost.
    testing::Pair pair(PIB_QPT_RC);
    const uint64_t buffer = pair.a.host.allocRandom(8192, 1);
    pair.b.postRecv(1, pair.b.host.alloc(8192), 8192);
    pair.a.postSend(1, {.local = buffer, .length = 8192});
    pair.a.postSend(2, {.opcode = PIB_WR_RDMA_WRITE,
                        .local = buffer,
                        .length = 8192,
                        .remote = pair.b.host.alloc(8192)});
    pair.a.postSend(3, {.opcode = PIB_WR_RDMA_READ,
                        .local = buffer,
                        .length = 4096,
                        .remote = pair.b.host.alloc(4096)});
    int passed = 0;
    pair.wire.filter = [&](bool, iba::Packet &) { return ++passed <= 40; };
    pair.wire.run();
    return {save(bare.host).bytes, save(probed.host).bytes, save(pair.a.host).bytes,
            save(pair.b.host).bytes, connectXSeed()};
}

std::filesystem::path seedDir() {
    const char *root = std::getenv("PIB_SOURCE_ROOT");
    INFO("PIB_SOURCE_ROOT names the source tree: " << (root ? root : "(unset)"));
    REQUIRE(root != nullptr);
    return std::filesystem::path(root) / "tests/fuzz/inputs/state";
}

std::vector<uint8_t> readFile(const std::filesystem::path &path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

} // namespace

// A seed of another format version would only teach the fuzzer the
// header's refusal: each checked-in seed is one this version writes.
// PIB_WRITE_STATE_SEEDS=1 writes them instead (after a format change).
TEST_CASE("fuzz-state's seeds are the states this version saves", "[device-state]") {
    const auto dir = seedDir();
    auto seeds = fuzzSeeds();
    if (const char *write = std::getenv("PIB_WRITE_STATE_SEEDS"); write && *write == '1') {
        for (const auto &entry : std::filesystem::directory_iterator(dir))
            if (entry.path().filename().string().starts_with("seed-"))
                std::filesystem::remove(entry.path());
        int n = 0;
        for (const auto &seed : seeds) {
            std::ofstream out(dir / ("seed-" + std::to_string(++n)), std::ios::binary);
            out.write(reinterpret_cast<const char *>(seed.data()), static_cast<long>(seed.size()));
        }
    }
    // Each pib-hca seed (all but the last, the ConnectX function's) loads
    // whole into a fresh device: the fuzzer starts from states that work.
    for (size_t i = 0; i + 1 < seeds.size(); ++i) {
        FakeHost fresh;
        INFO("seed " << i + 1);
        CHECK(fresh.loadState(seeds[i]) == "");
    }
    // The seeds, not the regression inputs beside them (fuzzers' findings).
    std::vector<std::vector<uint8_t>> checkedIn;
    for (const auto &entry : std::filesystem::directory_iterator(dir))
        if (entry.path().filename().string().starts_with("seed-"))
            checkedIn.push_back(readFile(entry.path()));
    std::sort(checkedIn.begin(), checkedIn.end());
    std::sort(seeds.begin(), seeds.end());
    INFO("write them again: PIB_WRITE_STATE_SEEDS=1 core-tests '[device-state]'");
    CHECK(checkedIn == seeds);
}
