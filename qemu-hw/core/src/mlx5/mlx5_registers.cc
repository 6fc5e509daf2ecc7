// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_registers.hh"

#include <algorithm>

#include "mlx5_ifc.hh"
#include "version.hh"

namespace pib::mlx5 {

namespace {

// The registers' IDs and sizes (mlx5_ifc.h, and the driver's own layout
// of PCAP: struct mlx5_reg_pcap).
struct Spec {
    uint16_t id;
    const char *name;
    uint32_t bytes;
};
constexpr uint16_t kPcap = 0x5001, kNodeDesc = 0x6001, kHostEndianness = 0x7004, kMcqs = 0x9060,
                   kMcqi = 0x9061, kMcam = 0x907f;
// The sizes are what the driver's in and out hold at least: MCQI's out
// holds its data after them.
constexpr Spec kRegisters[] = {
    {kPcap, "PCAP", 20},
    {kNodeDesc, "NODE_DESC", PIB_NODE_DESC_LEN},
    {kHostEndianness, "HOST_ENDIANNESS", 16},
    {kMcqs, "MCQS", 16},
    {kMcqi, "MCQI", 24},
    {kMcam, "MCAM", 72},
};

const Spec *find(uint16_t id) {
    for (const Spec &s : kRegisters)
        if (s.id == id)
            return &s;
    return nullptr;
}

// PCAP: the port (byte 1), then its capability mask's four dwords, the
// first of which is IBA PortInfo's CapabilityMask.
constexpr uint32_t kPcapPort = 1;
constexpr uint32_t kPcapIbCapabilities = 4;

// MCAM (mcam_reg): the management registers there are, 128 IDs a group
// (access_reg_group 0: 0x9000 to 0x907f): MCQS and MCQI, which devlink's
// firmware version needs; none of the flashing ones (MCC, MCDA), no
// features.
namespace mcam {
constexpr Field kFeatureGroup = field(0x08, 8);
constexpr Field kAccessRegGroup = field(0x18, 8);
constexpr Field kMcqi = field(0x40 + 0x1e, 1);
constexpr Field kMcqs = field(0x40 + 0x1f, 1);
constexpr uint32_t kFirst128 = 0;
} // namespace mcam

// MCQS (mcqs_reg): the firmware's components. The device has one, the
// boot image, with no update under way.
namespace mcqs {
constexpr Field kLastIndex = field(0x00, 1);
constexpr Field kComponentIndex = field(0x10, 16);
constexpr Field kIdentifier = field(0x30, 16);
constexpr Field kUpdateState = field(0x5c, 4);
constexpr uint32_t kBootImage = 1;
constexpr uint32_t kIdle = 0;
} // namespace mcqs

// MCQI (mcqi_reg): a component's information; of the boot image, its
// version (mcqi_version, after the 24 bytes of the register).
namespace mcqi {
constexpr Field kComponentIndex = field(0x10, 16);
constexpr Field kInfoType = field(0x5b, 5);
constexpr Field kDataSize = field(0xb0, 16);
constexpr uint32_t kVersionType = 1;
constexpr uint32_t kData = 24;
constexpr uint32_t kVersion = kData + 4; // mcqi_version's version
} // namespace mcqi

// A register the device keeps as bytes: written whole, read back.
void store(bool write, std::span<const uint8_t> in, std::span<uint8_t> kept,
           std::span<uint8_t> out) {
    if (write)
        std::copy_n(in.begin(), kept.size(), kept.begin());
    std::copy_n(kept.begin(), kept.size(), out.begin());
}

} // namespace

uint32_t Registers::size(uint16_t id) {
    const Spec *s = find(id);
    return s ? s->bytes : 0;
}

const char *Registers::name(uint16_t id) {
    const Spec *s = find(id);
    return s ? s->name : "unknown";
}

const char *Registers::access(uint16_t id, bool write, std::span<const uint8_t> in,
                              std::span<uint8_t> out) {
    switch (id) {
    case kPcap:
        return portCapabilities(write, in, out);
    case kMcqs:
    case kMcqi:
    case kMcam:
        return write ? "a register only read" : firmware(id, in, out);
    case kNodeDesc: // what the SMA's NodeDescription reports
        store(write, in,
              {reinterpret_cast<uint8_t *>(ports_.nodeDesc.data()), ports_.nodeDesc.size()}, out);
        return nullptr;
    default:
        store(write, in, hostEndianness_, out);
        return nullptr;
    }
}

// The firmware's management registers: what devlink dev info reads.
const char *Registers::firmware(uint16_t id, std::span<const uint8_t> in, std::span<uint8_t> out) {
    if (id == kMcam) {
        const uint64_t group = get(in, mcam::kAccessRegGroup);
        set(out, mcam::kFeatureGroup, get(in, mcam::kFeatureGroup));
        set(out, mcam::kAccessRegGroup, group);
        set(out, mcam::kMcqi, group == mcam::kFirst128);
        set(out, mcam::kMcqs, group == mcam::kFirst128);
        return nullptr;
    }
    const Field index = id == kMcqs ? mcqs::kComponentIndex : mcqi::kComponentIndex;
    if (get(in, index) != 0)
        return "component_index: the device has one component, the boot image (0)";
    if (id == kMcqs) {
        set(out, mcqs::kLastIndex, 1);
        set(out, mcqs::kIdentifier, mcqs::kBootImage);
        set(out, mcqs::kUpdateState, mcqs::kIdle);
        return nullptr;
    }
    if (get(in, mcqi::kInfoType) != mcqi::kVersionType)
        return "info_type: the device reports the version only";
    const uint64_t dataSize = get(in, mcqi::kDataSize);
    if (dataSize < 8 || out.size() < mcqi::kData + dataSize)
        return "data_size: no room for mcqi_version's version";
    set(out, mcqi::kInfoType, mcqi::kVersionType);
    set(out, mcqi::kDataSize, dataSize);
    // Running and stored alike: major.minor.subminor, as the initialization
    // segment reports them.
    writeBe32(out.data() + mcqi::kVersion,
              kFirmwareMajor << 24 | kFirmwareMinor << 16 | kFirmwarePatch);
    return nullptr;
}

// The driver sets the whole mask (ib_modify_port's set and clear bits
// applied to what it read), as the pib personality's MODIFY_PORT does.
const char *Registers::portCapabilities(bool write, std::span<const uint8_t> in,
                                        std::span<uint8_t> out) {
    const uint8_t port = in[kPcapPort];
    PortState *p = ports_.find(port);
    if (!p)
        return "local_port: a port the function does not have";
    if (write)
        p->info.cap_mask = readBe32(in.data() + kPcapIbCapabilities);
    out[kPcapPort] = port;
    writeBe32(out.data() + kPcapIbCapabilities, p->info.cap_mask);
    return nullptr;
}

} // namespace pib::mlx5
