// SPDX-License-Identifier: GPL-2.0-or-later
// What an address vector (struct pib_av) puts in a packet's GRH, for every
// transport that sends with one: the source GID from the port's prefix
// and the GUID at the AV's SGID index, the rest from the AV.
#pragma once

#include <algorithm>
#include <array>
#include <optional>

#include "packet.hh"
#include "pib_hw.h"

namespace pib {

// The GRH the AV asks for, or none. `guids` is the port's GUID table.
inline std::optional<iba::Grh> grhFor(const pib_av &av, uint64_t gidPrefix,
                                      const std::array<uint64_t, PIB_GUID_TABLE_LEN> &guids) {
    if (!(av.flags & PIB_AV_GRH))
        return std::nullopt;
    iba::Grh grh;
    grh.tclass = av.traffic_class;
    grh.flowLabel = av.flow_label;
    grh.hopLimit = av.hop_limit;
    const uint64_t guid = guids[av.sgid_index % PIB_GUID_TABLE_LEN];
    for (int i = 0; i < 8; ++i) {
        grh.sgid[i] = static_cast<uint8_t>(gidPrefix >> (56 - 8 * i));
        grh.sgid[8 + i] = static_cast<uint8_t>(guid >> (56 - 8 * i));
    }
    std::copy(std::begin(av.dgid), std::end(av.dgid), grh.dgid.begin());
    return grh;
}

} // namespace pib
