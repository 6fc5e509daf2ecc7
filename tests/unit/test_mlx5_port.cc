// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX personality's port commands (docs/mlx5.md §4.4): MAD_IFC
// through the core's SMA and PMA, and QUERY_HCA_VPORT_CONTEXT.
#include <catch2/catch.hpp>

#include <functional>
#include <string>

#include "conditions.hh"
#include "mad.hh"
#include "mlx5_host.hh"
#include "smp.hh"
#include "version.hh"

using namespace pib;
using namespace pib::mlx5;

namespace {

constexpr uint16_t kMadIfc = 0x50d, kQueryVport = 0x762;
constexpr uint16_t kIgnoreMkey = 1;

struct PortFunction {
    Mlx5Host host;
    PortFunction() { REQUIRE(host.bringUp()); }

    // MAD_IFC of a MAD of class `cls` on `port`, the header from the
    // arguments and the rest from `fill`; the response MAD is the reply's
    // bytes 0x10 on.
    Mlx5Host::Reply mad(uint8_t cls, uint8_t method, uint16_t attr, uint16_t opMod,
                        const std::function<void(iba::Mad &)> &fill = {}, unsigned port = 1) {
        auto in = Mlx5Host::input(kMadIfc, opMod, 0x110);
        set(in, field(0x58, 8), port);
        iba::Mad m(std::span<uint8_t>(in).subspan(0x10, 256));
        m.set8(0, 1); // base version
        m.set8(1, cls);
        m.set8(2, 1);
        m.set8(3, method);
        m.set16(16, attr);
        m.set32(20, 1); // attribute modifier: port 1, where it matters
        if (fill)
            fill(m);
        return host.run(in, 0x110);
    }
    static iba::Mad response(Mlx5Host::Reply &r) {
        return iba::Mad(std::span<uint8_t>(r.out).subspan(0x10, 256));
    }
};

} // namespace

TEST_CASE("mlx5: MAD_IFC is answered by the core's SMA", "[mlx5]") {
    PortFunction f;
    auto r = f.mad(iba::kClassSmpLid, iba::kGet, iba::kAttrNodeInfo, kIgnoreMkey);
    REQUIRE(r.status() == 0);
    iba::Mad m = PortFunction::response(r);
    CHECK(m.method() == iba::kGetResp);
    CHECK(m.status() == 0);
    const iba::NodeInfo node = iba::readNodeInfo(m);
    CHECK(node.nodeGuid == Mlx5Host::mlx5Config().node_guid);
    CHECK(node.partitionCap >= 1);
    CHECK(node.deviceId == 0x1017);   // a ConnectX-5
    CHECK(node.vendorId == 0x0002c9); // Mellanox's OUI
    // PortInfo: the port is down, its link width and speed valid.
    r = f.mad(iba::kClassSmpLid, iba::kGet, iba::kAttrPortInfo, kIgnoreMkey);
    REQUIRE(r.status() == 0);
    const iba::PortInfo port = iba::readPortInfo(PortFunction::response(r));
    CHECK(port.portState == PIB_PORT_DOWN);
    CHECK(port.linkWidthActive != 0);
    CHECK(f.host.guestErrors() == 0);
}

TEST_CASE("mlx5: the NODE_DESC register is the SMA's NodeDescription", "[mlx5]") {
    PortFunction f;
    constexpr uint16_t kAccessReg = 0x805, kNodeDesc = 0x6001, kWrite = 0, kRead = 1;
    const std::string desc = "vm2 mlx5_0";
    auto in = Mlx5Host::input(kAccessReg, kWrite, 0x50);
    set(in, field(0x50, 16), kNodeDesc);
    std::copy(desc.begin(), desc.end(), in.begin() + 0x10);
    auto r = f.host.run(in, 0x50);
    REQUIRE(r.status() == 0);
    CHECK(f.host.traces("mlx5_access_reg") == 1);
    r = f.mad(iba::kClassSmpLid, iba::kGet, iba::kAttrNodeDescription, kIgnoreMkey);
    REQUIRE(r.status() == 0);
    const iba::Mad m = PortFunction::response(r);
    CHECK(std::string(reinterpret_cast<const char *>(r.out.data() + 0x10 + 64)) == desc);
    CHECK(m.status() == 0);
    // Read back; a register of 64 bytes does not fit a short input.
    in = Mlx5Host::input(kAccessReg, kRead, 0x50);
    set(in, field(0x50, 16), kNodeDesc);
    r = f.host.run(in, 0x50);
    REQUIRE(r.status() == 0);
    CHECK(std::string(reinterpret_cast<const char *>(r.out.data() + 0x10)) == desc);
    in.resize(0x20);
    f.host.clear();
    CHECK(f.host.run(in, 0x50).status() == status::kBadInputLength);
    CHECK(f.host.guestErrors(pib::err::kMlx5CmdShortInput.token) == 1);
}

TEST_CASE("mlx5: the PCAP register sets the port's CapabilityMask", "[mlx5]") {
    PortFunction f;
    constexpr uint16_t kAccessReg = 0x805, kPcap = 0x5001, kWrite = 0;
    constexpr uint32_t kCmSupported = 1u << 16, kSmDisabled = 1u << 10;
    auto in = Mlx5Host::input(kAccessReg, kWrite, 0x24);
    set(in, field(0x50, 16), kPcap);
    in[0x11] = 1; // local_port
    writeBe32(&in[0x14], kCmSupported | kSmDisabled);
    REQUIRE(f.host.run(in, 0x24).status() == 0);
    auto r = f.mad(iba::kClassSmpLid, iba::kGet, iba::kAttrPortInfo, kIgnoreMkey);
    REQUIRE(r.status() == 0);
    CHECK(iba::readPortInfo(PortFunction::response(r)).capabilityMask ==
          (kCmSupported | kSmDisabled));
    // A port the function lacks.
    in[0x11] = 2;
    f.host.clear();
    r = f.host.run(in, 0x24);
    CHECK(r.status() == status::kBadParam);
    CHECK(f.host.guestErrors(pib::err::kMlx5CmdBadParam.token) == 1);
}

TEST_CASE("mlx5: MCAM, MCQS and MCQI give devlink the firmware's version", "[mlx5]") {
    PortFunction f;
    constexpr uint16_t kAccessReg = 0x805, kMcqs = 0x9060, kMcqi = 0x9061, kMcam = 0x907f;
    constexpr uint16_t kWrite = 0, kRead = 1;
    const auto reg = [&](uint16_t id, uint16_t opMod, size_t bytes,
                         const std::function<void(std::vector<uint8_t> &)> &fill) {
        auto in = Mlx5Host::input(kAccessReg, opMod, 0x10 + bytes);
        set(in, field(0x50, 16), id);
        fill(in);
        return f.host.run(in, static_cast<uint32_t>(0x10 + bytes));
    };
    // Group 0 names MCQS and MCQI, and nothing else; group 2 nothing.
    auto r = reg(kMcam, kRead, 72, [](auto &) {});
    REQUIRE(r.status() == 0);
    CHECK(readBe32(r.out.data() + 0x10 + 8) == 0x3);
    for (size_t i = 12; i < 72; ++i)
        CHECK(r.out[0x10 + i] == 0);
    r = reg(kMcam, kRead, 72, [](auto &in) { in[0x10 + 3] = 2; });
    REQUIRE(r.status() == 0);
    CHECK(r.out[0x10 + 3] == 2);
    CHECK(readBe32(r.out.data() + 0x10 + 8) == 0);
    // One component, the boot image, idle.
    r = reg(kMcqs, kRead, 16, [](auto &) {});
    REQUIRE(r.status() == 0);
    CHECK(r.out[0x10] >> 7 == 1);                  // last_index_flag
    CHECK(readBe16(r.out.data() + 0x10 + 6) == 1); // boot image
    CHECK((r.out[0x10 + 11] & 0xf) == 0);          // idle
    CHECK(reg(kMcqs, kRead, 16, [](auto &in) { in[0x10 + 3] = 1; }).status() == status::kBadParam);
    // Its version, as the initialization segment's.
    const auto version = [](auto &in) {
        in[0x10 + 11] = 1;    // info_type: version
        in[0x10 + 23] = 0x7c; // data_size: mcqi_version's 124 bytes
    };
    r = reg(kMcqi, kRead, 24 + 0x7c, version);
    REQUIRE(r.status() == 0);
    CHECK(readBe32(r.out.data() + 0x10 + 24 + 4) ==
          (kFirmwareMajor << 24 | kFirmwareMinor << 16 | kFirmwarePatch));
    CHECK(reg(kMcqi, kRead, 24 + 0x7c, [](auto &in) { in[0x10 + 11] = 0; }).status() ==
          status::kBadParam);
    CHECK(reg(kMcqi, kRead, 24 + 4, version).status() == status::kBadParam); // no room
    // Written, they are refused.
    f.host.clear();
    CHECK(reg(kMcam, kWrite, 72, [](auto &) {}).status() == status::kBadParam);
    CHECK(f.host.guestErrors(pib::err::kMlx5CmdBadParam.token) == 1);
}

TEST_CASE("mlx5: MAD_IFC answers classes no agent takes, refuses bad ports", "[mlx5]") {
    PortFunction f;
    auto r = f.mad(0x09, iba::kGet, 0x10, kIgnoreMkey); // a vendor class
    REQUIRE(r.status() == 0);
    iba::Mad m = PortFunction::response(r);
    CHECK(m.method() == iba::kGetResp);
    CHECK(m.status() == iba::kStatusBadAttribute);
    r = f.mad(iba::kClassSmpLid, iba::kGet, iba::kAttrNodeInfo, kIgnoreMkey, {}, 2);
    CHECK(r.status() == status::kBadParam);
    CHECK(f.host.guestErrors("mlx5-cmd-bad-param") == 1);
}

TEST_CASE("mlx5: an SMP with a bad M_Key fails MAD_IFC: nothing is sent", "[mlx5]") {
    PortFunction f;
    // The port's M_Key is 0x1234, protect bits 2: a Get with another key
    // is dropped.
    auto r = f.mad(iba::kClassSmpLid, iba::kSet, iba::kAttrPortInfo, kIgnoreMkey, [](iba::Mad &m) {
        iba::writePortInfo(m, {.mkey = 0x1234, .mkeyProtectBits = 2});
    });
    REQUIRE(r.status() == 0);
    REQUIRE(PortFunction::response(r).status() == 0);
    r = f.mad(iba::kClassSmpLid, iba::kGet, iba::kAttrPortInfo, 0,
              [](iba::Mad &m) { m.set64(24, 0x9999); });
    CHECK(r.status() == status::kBadResourceState);
    CHECK(r.syndrome() == err::kMlx5MadDropped.syndrome);
    // With the right key it is answered.
    r = f.mad(iba::kClassSmpLid, iba::kGet, iba::kAttrPortInfo, 0,
              [](iba::Mad &m) { m.set64(24, 0x1234); });
    CHECK(r.status() == 0);
    CHECK(f.host.guestErrors() == 0); // a refusal, not the driver's error
}

TEST_CASE("mlx5: QUERY_HCA_VPORT_CONTEXT reports the port as the SMA knows it", "[mlx5]") {
    PortFunction f;
    // The SM gives the port LID 0x11 (it stays down: no link).
    auto r = f.mad(iba::kClassSmpLid, iba::kSet, iba::kAttrPortInfo, kIgnoreMkey,
                   [](iba::Mad &m) { iba::writePortInfo(m, {.lid = 0x11, .masterSmLid = 0x22}); });
    REQUIRE(r.status() == 0);
    r = f.host.run(Mlx5Host::input(kQueryVport), 0x210);
    REQUIRE(r.status() == 0);
    CHECK(r.get(field(0x181, 1)) == 1); // has_smi
    CHECK(r.get(field(0x198, 4)) == PIB_PORT_DOWN);
    CHECK(r.get(field(0x380, 16)) == 0x11);
    CHECK(r.get(field(0x3a0, 16)) == 0x22);
    CHECK(r.get(field(0x240, 64)) == Mlx5Host::mlx5Config().node_guid);
    CHECK(r.get(field(0x200, 64)) != 0); // the port GUID
    // Another function's vport, or a port the function lacks.
    auto in = Mlx5Host::input(kQueryVport);
    set(in, field(0x40, 1), 1);
    CHECK(f.host.run(in, 0x210).status() == status::kBadParam);
    in = Mlx5Host::input(kQueryVport);
    set(in, field(0x4c, 4), 2);
    CHECK(f.host.run(in, 0x210).status() == status::kBadParam);
}
