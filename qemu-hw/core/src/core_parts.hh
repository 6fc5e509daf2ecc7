// SPDX-License-Identifier: GPL-2.0-or-later
// What a front end's commands act on: the shared core's parts, and the
// device-wide steps a command may take (INIT_HCA's end, CLOSE_HCA or
// TEARDOWN_HCA). Both personalities are given the same, by the device.
#pragma once

#include <functional>

#include "data_path.hh"
#include "event_writer.hh"
#include "injection.hh"
#include "object_tables.hh"
#include "port_agents.hh"
#include "ports.hh"

namespace pib {

struct CoreParts {
    ObjectTables &objects;
    Ports &ports;
    PortAgents &agents;                    // the SMA and PMA, for MAD_IFC
    EventWriter &events;                   // which takes the front end's CQE layout and EQs
    DataPath &dataPath;                    // which reads the front end's WQEs
    ArmedInjections &injections;           // the host's, which commands and WQEs take
    std::function<void(uint32_t)> srqEnds; // the data path forgets an SRQ (XRC targets)
    // Every object ends, and the data path holds none of them.
    std::function<void()> endObjects;
    // The ports go back to their power-on state; the links of those the
    // SM had configured train again (Device::retrainLinks).
    std::function<void()> resetPorts;
};

} // namespace pib
