// SPDX-License-Identifier: GPL-2.0-or-later
#include "mlx5_registers.hh"

#include <algorithm>

#include "mlx5_ifc.hh"

namespace pib::mlx5 {

namespace {

// The registers' IDs and sizes (mlx5_ifc.h, and the driver's own layout
// of PCAP: struct mlx5_reg_pcap).
struct Spec {
    uint16_t id;
    const char *name;
    uint32_t bytes;
};
constexpr uint16_t kPcap = 0x5001, kNodeDesc = 0x6001, kHostEndianness = 0x7004;
constexpr Spec kRegisters[] = {
    {kPcap, "PCAP", 20},
    {kNodeDesc, "NODE_DESC", PIB_NODE_DESC_LEN},
    {kHostEndianness, "HOST_ENDIANNESS", 16},
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
    case kNodeDesc: // what the SMA's NodeDescription reports
        store(write, in,
              {reinterpret_cast<uint8_t *>(ports_.nodeDesc.data()), ports_.nodeDesc.size()}, out);
        return nullptr;
    default:
        store(write, in, hostEndianness_, out);
        return nullptr;
    }
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
