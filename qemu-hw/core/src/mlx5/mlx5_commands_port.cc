// SPDX-License-Identifier: GPL-2.0-or-later
// The ConnectX commands about a port (docs/mlx5.md §4.4): MAD_IFC hands a
// MAD to the port's agents, the core's SMA and PMA, the same that answer
// the fabric and the pib personality's driver; QUERY_HCA_VPORT_CONTEXT
// reports the port as the SMA knows it.
#include "mlx5_commands.hh"

#include <algorithm>

#include "mad.hh"
#include "mlx5_ifc.hh"

namespace pib::mlx5 {

namespace {

// mad_ifc_in and _out (mlx5_ifc.h).
constexpr Field kMadIfcPort = field(0x58, 8); // ifc: mad_ifc_in.port
constexpr uint32_t kMadBytes = 256;
constexpr uint32_t kMad = 0x10; // the MAD in the input, the response in the output
constexpr uint16_t kMadIfcIgnoreMkey = 0x1;

// query_hca_vport_context_in, and the context in its output.
constexpr Field kOtherVport = field(0x40, 1);   // ifc: query_hca_vport_context_in.other_vport
constexpr Field kPortNumber = field(0x4c, 4);   // ifc: query_hca_vport_context_in.port_num
constexpr Field kVportNumber = field(0x50, 16); // ifc: query_hca_vport_context_in.vport_number
// ifc fields: query_hca_vport_context_out.hca_vport_context
namespace vport {
constexpr Field kHasSmi = field(0x181, 1);
constexpr Field kPortPhysicalState = field(0x190, 4);
constexpr Field kPortState = field(0x198, 4);
constexpr Field kVportState = field(0x19c, 4);
constexpr Field kSystemImageGuid = field(0x1c0, 64);
constexpr Field kPortGuid = field(0x200, 64);
constexpr Field kNodeGuid = field(0x240, 64);
constexpr Field kCapMask1 = field(0x280, 32);
constexpr Field kLid = field(0x380, 16);
constexpr Field kInitTypeReply = field(0x394, 4);
constexpr Field kLmc = field(0x398, 3);
constexpr Field kSubnetTimeout = field(0x39b, 5);
constexpr Field kSmLid = field(0x3a0, 16);
constexpr Field kSmSl = field(0x3b0, 4);
constexpr Field kQkeyViolations = field(0x3c0, 16); // ifc: qkey_violation_counter
constexpr Field kPkeyViolations = field(0x3d0, 16); // ifc: pkey_violation_counter
} // namespace vport

// A counter in a 16-bit field: it stops at the top, as IBA's do.
uint32_t saturated16(uint32_t count) {
    return std::min<uint32_t>(count, 0xffff);
}

} // namespace

// The driver hands over SMPs and GMPs it received or makes itself; the
// response goes back in the output, and the driver sends it. A class no
// agent of the device takes is answered "method/attribute not supported",
// as a port with no agent for it answers; an SMP with a bad M_Key is not
// answered at all, which only a failed command can say.
const err::Condition *Commands::madIfc(const Request &r) {
    const auto port = static_cast<unsigned>(get(r.in, kMadIfcPort));
    if (!core_.ports.find(port))
        return fail(err::kMlx5CmdBadParam, "MAD_IFC on port %u: the function has %u", port,
                    config_.num_ports);
    std::span<uint8_t> mad = r.out.subspan(kMad, kMadBytes);
    std::copy_n(r.in.begin() + kMad, kMadBytes, mad.begin());
    switch (core_.agents.answerMad(port, mad, r.opMod & kMadIfcIgnoreMkey)) {
    case PortAgents::MadOutcome::kAnswered:
        return nullptr;
    case PortAgents::MadOutcome::kNotOurs: {
        iba::Mad response(mad);
        response.setMethod(iba::kGetResp);
        response.setStatus(iba::kStatusBadAttribute);
        return nullptr;
    }
    case PortAgents::MadOutcome::kDropped:
        break;
    }
    return &err::kMlx5MadDropped; // the SMA traced it, and sent its trap
}

const err::Condition *Commands::queryHcaVportContext(const Request &r) {
    // Port 0 is the function's only port (the driver names one only on a
    // two-port function); there are no other vports.
    const auto number = std::max<unsigned>(1, static_cast<unsigned>(get(r.in, kPortNumber)));
    const PortState *port = core_.ports.find(number);
    if (!port || get(r.in, kOtherVport) || get(r.in, kVportNumber))
        return fail(err::kMlx5CmdBadParam, "QUERY_HCA_VPORT_CONTEXT of port %u vport %u%s", number,
                    static_cast<unsigned>(get(r.in, kVportNumber)),
                    get(r.in, kOtherVport) ? " (another function's)" : "");
    const pib_port_info &info = port->info;
    set(r.out, vport::kHasSmi, 1);
    set(r.out, vport::kPortPhysicalState, info.phys_state);
    set(r.out, vport::kPortState, info.state);
    set(r.out, vport::kVportState, info.state);
    set(r.out, vport::kSystemImageGuid, config_.node_guid);
    set(r.out, vport::kPortGuid, info.port_guid);
    set(r.out, vport::kNodeGuid, config_.node_guid);
    set(r.out, vport::kCapMask1, info.cap_mask);
    set(r.out, vport::kLid, info.lid);
    set(r.out, vport::kInitTypeReply, info.init_type_reply);
    set(r.out, vport::kLmc, info.lmc);
    set(r.out, vport::kSubnetTimeout, info.subnet_timeout);
    set(r.out, vport::kSmLid, info.sm_lid);
    set(r.out, vport::kSmSl, info.sm_sl);
    set(r.out, vport::kQkeyViolations, saturated16(info.qkey_viol_cntr));
    set(r.out, vport::kPkeyViolations, saturated16(info.bad_pkey_cntr));
    return nullptr;
}

} // namespace pib::mlx5
