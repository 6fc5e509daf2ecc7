// SPDX-License-Identifier: GPL-2.0-or-later
// What every personality does alike with a QP, whatever its commands look
// like: checking and applying the attributes of a state change (the rules
// of which are qp_state.hh's), and giving it its place in the object
// tables and taking it away.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "data_path.hh"
#include "object_tables.hh"
#include "pib_hw.h"
#include "ports.hh"
#include "state_archive.hh"

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
// A loaded QP, just created in RESET by its personality's command, takes
// its saved attributes `attr` (checked as a state change checks them) and
// then its transport from `r` (*r fails when either is refused).
void loadQpState(StateReader &r, QueuePair &qp, const pib_qp_attr &attr, const Ports &ports,
                 const RdAtomicLimits &limits, DataPath &dataPath);
// QP0 and QP1 in a saved state: section `tag` says whether each special
// QP number exists, then holds what `each` writes of those that do.
void saveSpecialQps(StateWriter &w, uint32_t tag, const ObjectTables &objects,
                    const std::function<void(const QueuePair &)> &each);
// That section: `load` reads and makes each one that exists, by number.
void loadSpecialQps(StateReader &r, uint32_t tag, const std::function<void(uint32_t)> &load);
// Multicast attachments in a saved state: their count, then each one's
// QP, port, MGID and MLID.
void saveMulticast(StateWriter &w, uint32_t tag, const MulticastGroups &groups);
struct SavedAttachment {
    uint32_t qpn;
    MulticastGroups::Gid gid;
    uint16_t mlid;
};
// That section: each attachment of a QP that exists, on its port, made
// again by `attach` (the personality's command), which returns why it
// refuses it or "".
void loadMulticast(StateReader &r, uint32_t tag, const ObjectTables &objects,
                   const std::function<std::string(const SavedAttachment &)> &attach);
// Every loaded QP takes up its work.
void resumeLoadedQps(const ObjectTables &objects, DataPath &dataPath);

} // namespace pib
