// SPDX-License-Identifier: GPL-2.0-or-later
// What every personality does alike with a QP, whatever its commands look
// like: checking and applying the attributes of a state change (the rules
// of which are qp_state.hh's), and giving it its place in the object
// tables and taking it away.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>

#include "data_path.hh"
#include "object_tables.hh"
#include "pib_hw.h"
#include "ports.hh"

namespace pib {

// The most RDMA READs and atomics a QP may have outstanding as initiator
// and as responder.
struct RdAtomicLimits {
    uint32_t initiator;
    uint32_t responder;
};

// Checks the values of the attributes `mask` names; returns a description
// of the first bad one, or nullptr.
const char *badQpAttr(const QueuePair &qp, const pib_qp_attr &a, uint32_t mask, const Ports &ports,
                      const RdAtomicLimits &limits);
// Copies the attributes `mask` names from `in` (checked) into `a`, in
// state `next`. A QP going to RESET first returns to its attributes at
// creation.
void applyQpAttrs(pib_qp_attr &a, const pib_qp_attr &in, uint32_t mask, uint8_t next);

// Puts `qp` in the tables: QP0 and QP1 in their port's slot (which must
// be free), any other under a new number. The number, or nullopt when
// every one is in use.
std::optional<uint32_t> insertQp(ObjectTables &objects, std::unique_ptr<QueuePair> qp);
// Takes `qp` out of the tables once the personality gave back what it
// held: it leaves its multicast groups, type 2 windows bound through it
// are unbound, and the data path forgets it.
void endQp(ObjectTables &objects, DataPath &dataPath, QueuePair &qp);

} // namespace pib
