// SPDX-License-Identifier: GPL-2.0-or-later
#include "config.hh"

#include "pib_hw.h"

namespace pib {

const char *configError(const pib_core_config &config) {
    if (config.node_guid == 0)
        return "node GUID must not be 0";
    if (config.doorbell_pages < PIB_MIN_DOORBELL_PAGES ||
        config.doorbell_pages > PIB_MAX_DOORBELL_PAGES)
        return "doorbell page count out of range";
    if (config.msix_vectors < PIB_MIN_MSIX_VECTORS || config.msix_vectors > PIB_MAX_MSIX_VECTORS)
        return "MSI-X vector count out of range";
    if (config.num_ports < PIB_MIN_PORTS || config.num_ports > PIB_MAX_PORTS)
        return "port count out of range";
    if (config.personality != PIB_PERSONALITY_PIB && config.personality != PIB_PERSONALITY_MLX5)
        return "unknown personality";
    return nullptr;
}

} // namespace pib
