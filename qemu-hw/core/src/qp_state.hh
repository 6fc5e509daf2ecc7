// SPDX-License-Identifier: GPL-2.0-or-later
// The QP state machine of IBA 11.2.5 / ibv_modify_qp(3): which transitions
// exist and which attributes each requires and allows, per QP type.
#pragma once

#include <cstdint>

namespace pib {

struct TransitionRule {
    bool allowed = false;
    uint32_t required = 0; // attribute mask bits beyond PIB_QP_STATE
    uint32_t optional = 0;
};

// The rule for cur -> next on a QP of `type` (pib_qp_type).
TransitionRule transitionRule(uint8_t type, uint8_t cur, uint8_t next);

// Checks `mask` against the rule; on failure returns false and sets
// *missing to required bits not given and *extra to bits not allowed.
bool maskFitsRule(const TransitionRule &rule, uint32_t mask, uint32_t *missing, uint32_t *extra);

} // namespace pib
