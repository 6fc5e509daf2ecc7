// SPDX-License-Identifier: GPL-2.0-or-later
#include "qp_lifecycle.hh"

#include "memory_keys.hh"

namespace pib {

namespace {
constexpr uint32_t kPsnMask = 0xffffff;
constexpr uint8_t kMigMigrated = 0; // IBA APM state: no alternate path armed
} // namespace

// Checks the values of the attributes `mask` names; returns a description
// of the first bad one, or nullptr.
const char *badQpAttr(const QueuePair &qp, const pib_qp_attr &a, uint32_t mask, const Ports &ports,
                      const RdAtomicLimits &limits) {
    if (mask & PIB_QP_PKEY_INDEX && a.pkey_index >= PIB_PKEY_TABLE_LEN)
        return "pkey_index";
    if (mask & PIB_QP_PORT && !ports.find(a.port_num))
        return "port_num";
    if (mask & PIB_QP_ACCESS_FLAGS && a.qp_access_flags & ~PIB_ACCESS_ALL)
        return "qp_access_flags";
    if (mask & PIB_QP_PATH_MTU) {
        const uint8_t portNum = mask & PIB_QP_PORT ? a.port_num : qp.attr.port_num;
        const PortState *p = ports.find(portNum);
        if (a.path_mtu < PIB_MTU_256 || !p || a.path_mtu > p->info.max_mtu)
            return "path_mtu";
    }
    if (mask & PIB_QP_TIMEOUT && a.timeout > 31)
        return "timeout";
    if (mask & PIB_QP_RETRY_CNT && a.retry_cnt > 7)
        return "retry_cnt";
    if (mask & PIB_QP_RNR_RETRY && a.rnr_retry > 7)
        return "rnr_retry";
    if (mask & PIB_QP_MIN_RNR_TIMER && a.min_rnr_timer > 31)
        return "min_rnr_timer";
    if (mask & PIB_QP_RQ_PSN && a.rq_psn > kPsnMask)
        return "rq_psn";
    if (mask & PIB_QP_SQ_PSN && a.sq_psn > kPsnMask)
        return "sq_psn";
    if (mask & PIB_QP_DEST_QPN && a.dest_qp_num > kPsnMask)
        return "dest_qp_num";
    if (mask & PIB_QP_MAX_QP_RD_ATOMIC && a.max_rd_atomic > limits.initiator)
        return "max_rd_atomic";
    if (mask & PIB_QP_MAX_DEST_RD_ATOMIC && a.max_dest_rd_atomic > limits.responder)
        return "max_dest_rd_atomic";
    if (mask & PIB_QP_ALT_PATH)
        return "alt_path (automatic path migration is not supported)";
    if (mask & PIB_QP_PATH_MIG_STATE && a.path_mig_state != kMigMigrated)
        return "path_mig_state";
    if (mask & PIB_QP_AV) {
        const pib_av &av = a.av;
        if (av.port && !ports.find(av.port))
            return "av.port";
        if (av.flags & ~PIB_AV_GRH || av.sl > 15 || av.src_path_bits > 127)
            return "av flags, sl or src_path_bits";
        if (av.flags & PIB_AV_GRH &&
            (av.sgid_index >= PIB_GUID_TABLE_LEN || av.flow_label > 0xfffff))
            return "av.sgid_index or av.flow_label";
    }
    return nullptr;
}

// Copies the attributes `mask` names from `in` (checked) into `a`. A QP
// going to RESET first returns to its attributes at creation.
void applyQpAttrs(pib_qp_attr &a, const pib_qp_attr &in, uint32_t mask, uint8_t next) {
    if (next == PIB_QPS_RESET) {
        const uint8_t portNum = a.port_num;
        a = pib_qp_attr{};
        a.port_num = portNum;
        a.path_mtu = PIB_MTU_256;
    }
    if (mask & PIB_QP_ACCESS_FLAGS)
        a.qp_access_flags = in.qp_access_flags;
    if (mask & PIB_QP_PKEY_INDEX)
        a.pkey_index = in.pkey_index;
    if (mask & PIB_QP_PORT)
        a.port_num = in.port_num;
    if (mask & PIB_QP_QKEY)
        a.qkey = in.qkey;
    if (mask & PIB_QP_AV)
        a.av = in.av;
    if (mask & PIB_QP_PATH_MTU)
        a.path_mtu = in.path_mtu;
    if (mask & PIB_QP_TIMEOUT)
        a.timeout = in.timeout;
    if (mask & PIB_QP_RETRY_CNT)
        a.retry_cnt = in.retry_cnt;
    if (mask & PIB_QP_RNR_RETRY)
        a.rnr_retry = in.rnr_retry;
    if (mask & PIB_QP_RQ_PSN)
        a.rq_psn = in.rq_psn;
    if (mask & PIB_QP_MAX_QP_RD_ATOMIC)
        a.max_rd_atomic = in.max_rd_atomic;
    if (mask & PIB_QP_MIN_RNR_TIMER)
        a.min_rnr_timer = in.min_rnr_timer;
    if (mask & PIB_QP_SQ_PSN)
        a.sq_psn = in.sq_psn;
    if (mask & PIB_QP_MAX_DEST_RD_ATOMIC)
        a.max_dest_rd_atomic = in.max_dest_rd_atomic;
    if (mask & PIB_QP_PATH_MIG_STATE)
        a.path_mig_state = in.path_mig_state;
    if (mask & PIB_QP_DEST_QPN)
        a.dest_qp_num = in.dest_qp_num;
    if (mask & PIB_QP_EN_SQD_ASYNC_NOTIFY)
        a.en_sqd_async_notify = in.en_sqd_async_notify;
    a.qp_state = next;
    a.sq_draining = 0;
}

std::optional<uint32_t> insertQp(ObjectTables &objects, std::unique_ptr<QueuePair> qp) {
    QueuePair *raw = qp.get();
    std::optional<uint32_t> qpn;
    if (isSpecialQp(*qp)) {
        qpn = PIB_SPECIAL_QPN(qp->ctx.port, qp->ctx.type);
        objects.specialQps[*qpn] = std::move(qp);
    } else {
        qpn = objects.qps.insert(std::move(qp));
    }
    if (qpn)
        raw->number = *qpn;
    return qpn;
}

void endQp(ObjectTables &objects, DataPath &dataPath, QueuePair &qp) {
    const uint32_t qpn = qp.number;
    objects.multicast.detachAll(qpn);
    // Its type 2 windows are bound to nothing that can reach them now.
    objects.mws.forEach([&](uint32_t, MemoryWindow &mw) {
        if (mw.ctx.type == PIB_MW_TYPE_2 && mw.ctx.bound && mw.ctx.qpn == qpn)
            MemoryKeys::unbind(objects.mrs, mw);
    });
    dataPath.forgetQp(qp);
    if (qpn < objects.specialQps.size())
        objects.specialQps[qpn].reset();
    else
        objects.qps.erase(qpn);
}

} // namespace pib
