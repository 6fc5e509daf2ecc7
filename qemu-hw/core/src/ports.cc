// SPDX-License-Identifier: GPL-2.0-or-later
#include "ports.hh"

#include "limits.hh"
#include "packet.hh"

namespace pib {

void Ports::reset() {
    for (uint32_t i = 0; i < PIB_MAX_PORTS; ++i) {
        PortState &p = ports_[i];
        p = PortState{};
        // Until a link exists the port is down and polling for a peer.
        p.info.state = PIB_PORT_DOWN;
        p.info.phys_state = PIB_PHYS_POLLING;
        p.info.max_mtu = PIB_MTU_4096;
        p.info.active_mtu = PIB_MTU_256;
        p.info.gid_prefix = 0xfe80000000000000ull;
        p.info.port_guid = config_.node_guid + 1 + i;
        p.info.max_msg_sz = limits::kMaxMsgSize;
        p.info.pkey_tbl_len = PIB_PKEY_TABLE_LEN;
        p.info.gid_tbl_len = PIB_GUID_TABLE_LEN;
        // IsClientReregistrationSupported: the SMA honours ClientReregister.
        p.info.cap_mask = 1u << 25;
        p.info.max_vl_num = 1;
        p.info.subnet_timeout = 0;
        p.info.active_width = iba::kLinkWidth4x;
        p.info.active_speed = iba::kLinkSpeedQdr;
        p.pkeys[0] = 0xffff; // the default partition, full member
        p.guids[0] = p.info.port_guid;
    }
}

} // namespace pib
