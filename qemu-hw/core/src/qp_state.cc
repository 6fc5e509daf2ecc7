// SPDX-License-Identifier: GPL-2.0-or-later
#include "qp_state.hh"

#include "core_operations.hh"
#include "pib_hw.h"

namespace pib {

namespace {

// XRC's initiator and target are RC's two halves, with the attributes of
// the half each has (IBA A14.7, as ib_modify_qp_is_ok has them). A DCI
// is a requester whose path and peer each WQE gives (docs/mlx5.md §15):
// it takes a port, a path MTU and RC's requester attributes.
enum Kind { kSpecial, kRc, kUc, kUd, kXrcIni, kXrcTgt, kDci };

Kind kindOf(uint8_t type) {
    switch (type) {
    case PIB_QPT_RC:
        return kRc;
    case PIB_QPT_UC:
        return kUc;
    case PIB_QPT_UD:
        return kUd;
    case PIB_QPT_XRC_INI:
        return kXrcIni;
    case PIB_QPT_XRC_TGT:
        return kXrcTgt;
    case kQptDci:
        return kDci;
    default:
        return kSpecial; // SMI and GSI
    }
}

// Attributes that configure a connection's addressing and access.
constexpr uint32_t kAccess = PIB_QP_ACCESS_FLAGS;
constexpr uint32_t kPath = PIB_QP_ALT_PATH | PIB_QP_PATH_MIG_STATE;

TransitionRule rule(uint32_t required, uint32_t optional) {
    return {true, required, optional};
}

TransitionRule resetToInit(Kind k) {
    switch (k) {
    case kRc:
    case kUc:
    case kXrcIni:
    case kXrcTgt:
        return rule(PIB_QP_PKEY_INDEX | PIB_QP_PORT | kAccess, 0);
    case kUd:
        return rule(PIB_QP_PKEY_INDEX | PIB_QP_PORT | PIB_QP_QKEY, 0);
    case kSpecial:
        return rule(PIB_QP_PKEY_INDEX | PIB_QP_QKEY, 0);
    case kDci:
        return rule(PIB_QP_PKEY_INDEX | PIB_QP_PORT, 0);
    }
    return {};
}

TransitionRule initToInit(Kind k) {
    switch (k) {
    case kRc:
    case kUc:
    case kXrcIni:
    case kXrcTgt:
        return rule(0, PIB_QP_PKEY_INDEX | PIB_QP_PORT | kAccess);
    case kUd:
        return rule(0, PIB_QP_PKEY_INDEX | PIB_QP_PORT | PIB_QP_QKEY);
    case kSpecial:
        return rule(0, PIB_QP_PKEY_INDEX | PIB_QP_QKEY);
    case kDci:
        return rule(0, PIB_QP_PKEY_INDEX | PIB_QP_PORT);
    }
    return {};
}

TransitionRule initToRtr(Kind k) {
    constexpr uint32_t connect = PIB_QP_AV | PIB_QP_PATH_MTU | PIB_QP_DEST_QPN | PIB_QP_RQ_PSN;
    switch (k) {
    case kRc:
    case kXrcTgt:
        return rule(connect | PIB_QP_MAX_DEST_RD_ATOMIC | PIB_QP_MIN_RNR_TIMER,
                    PIB_QP_ALT_PATH | kAccess | PIB_QP_PKEY_INDEX);
    case kUc:
    case kXrcIni:
        return rule(connect, PIB_QP_ALT_PATH | kAccess | PIB_QP_PKEY_INDEX);
    case kUd:
    case kSpecial:
        return rule(0, PIB_QP_PKEY_INDEX | PIB_QP_QKEY);
    case kDci:
        return rule(PIB_QP_PATH_MTU, PIB_QP_PKEY_INDEX);
    }
    return {};
}

TransitionRule rtrToRts(Kind k) {
    switch (k) {
    case kRc:
        return rule(PIB_QP_TIMEOUT | PIB_QP_RETRY_CNT | PIB_QP_RNR_RETRY | PIB_QP_SQ_PSN |
                        PIB_QP_MAX_QP_RD_ATOMIC,
                    PIB_QP_CUR_STATE | kPath | kAccess | PIB_QP_MIN_RNR_TIMER);
    case kXrcIni:
        return rule(PIB_QP_TIMEOUT | PIB_QP_RETRY_CNT | PIB_QP_RNR_RETRY | PIB_QP_SQ_PSN |
                        PIB_QP_MAX_QP_RD_ATOMIC,
                    PIB_QP_CUR_STATE | kPath | kAccess);
    case kDci:
        return rule(PIB_QP_TIMEOUT | PIB_QP_RETRY_CNT | PIB_QP_RNR_RETRY | PIB_QP_SQ_PSN |
                        PIB_QP_MAX_QP_RD_ATOMIC,
                    PIB_QP_CUR_STATE);
    case kXrcTgt:
        return rule(PIB_QP_TIMEOUT | PIB_QP_SQ_PSN,
                    PIB_QP_CUR_STATE | kPath | kAccess | PIB_QP_MIN_RNR_TIMER);
    case kUc:
        return rule(PIB_QP_SQ_PSN, PIB_QP_CUR_STATE | kPath | kAccess);
    case kUd:
    case kSpecial:
        return rule(PIB_QP_SQ_PSN, PIB_QP_CUR_STATE | PIB_QP_QKEY);
    }
    return {};
}

// RTS -> RTS and SQD -> RTS.
TransitionRule toRts(Kind k) {
    switch (k) {
    case kRc:
    case kXrcTgt:
        return rule(0, PIB_QP_CUR_STATE | kPath | kAccess | PIB_QP_MIN_RNR_TIMER);
    case kUc:
    case kXrcIni:
        return rule(0, PIB_QP_CUR_STATE | kPath | kAccess);
    case kUd:
    case kSpecial:
        return rule(0, PIB_QP_CUR_STATE | PIB_QP_QKEY);
    case kDci:
        return rule(0, PIB_QP_CUR_STATE);
    }
    return {};
}

TransitionRule sqdToSqd(Kind k) {
    switch (k) {
    case kRc:
    case kXrcIni:
    case kXrcTgt:
        return rule(0, PIB_QP_PORT | PIB_QP_AV | PIB_QP_TIMEOUT | PIB_QP_RETRY_CNT |
                           PIB_QP_RNR_RETRY | PIB_QP_MAX_QP_RD_ATOMIC | PIB_QP_MAX_DEST_RD_ATOMIC |
                           kPath | kAccess | PIB_QP_PKEY_INDEX | PIB_QP_MIN_RNR_TIMER);
    case kUc:
        return rule(0, PIB_QP_AV | kPath | kAccess | PIB_QP_PKEY_INDEX);
    case kUd:
    case kSpecial:
        return rule(0, PIB_QP_PKEY_INDEX | PIB_QP_QKEY);
    case kDci:
        return rule(0, PIB_QP_TIMEOUT | PIB_QP_RETRY_CNT | PIB_QP_RNR_RETRY |
                           PIB_QP_MAX_QP_RD_ATOMIC | PIB_QP_PKEY_INDEX);
    }
    return {};
}

TransitionRule sqeToRts(Kind k) {
    switch (k) {
    case kUc:
        return rule(0, PIB_QP_CUR_STATE | kAccess);
    case kUd:
    case kSpecial:
        return rule(0, PIB_QP_CUR_STATE | PIB_QP_QKEY);
    case kRc: // a reliable QP never enters SQE
    case kXrcIni:
    case kXrcTgt:
    case kDci:
        return {};
    }
    return {};
}

} // namespace

TransitionRule transitionRule(uint8_t type, uint8_t cur, uint8_t next) {
    if (cur > PIB_QPS_ERR || next > PIB_QPS_ERR)
        return {};
    // Every state may go to Reset or Error, with no attributes.
    if (next == PIB_QPS_RESET || next == PIB_QPS_ERR)
        return rule(0, 0);
    const Kind k = kindOf(type);
    switch (cur) {
    case PIB_QPS_RESET:
        return next == PIB_QPS_INIT ? resetToInit(k) : TransitionRule{};
    case PIB_QPS_INIT:
        if (next == PIB_QPS_INIT)
            return initToInit(k);
        return next == PIB_QPS_RTR ? initToRtr(k) : TransitionRule{};
    case PIB_QPS_RTR:
        return next == PIB_QPS_RTS ? rtrToRts(k) : TransitionRule{};
    case PIB_QPS_RTS:
        if (next == PIB_QPS_RTS)
            return toRts(k);
        return next == PIB_QPS_SQD ? rule(0, PIB_QP_EN_SQD_ASYNC_NOTIFY) : TransitionRule{};
    case PIB_QPS_SQD:
        if (next == PIB_QPS_RTS)
            return toRts(k);
        return next == PIB_QPS_SQD ? sqdToSqd(k) : TransitionRule{};
    case PIB_QPS_SQE:
        return next == PIB_QPS_RTS ? sqeToRts(k) : TransitionRule{};
    default:
        return {};
    }
}

bool maskFitsRule(const TransitionRule &rule, uint32_t mask, uint32_t *missing, uint32_t *extra) {
    const uint32_t given = mask & ~PIB_QP_STATE;
    *missing = rule.required & ~given;
    *extra = given & ~(rule.required | rule.optional);
    return rule.allowed && !*missing && !*extra;
}

} // namespace pib
