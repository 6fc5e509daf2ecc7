// SPDX-License-Identifier: GPL-2.0-or-later
#include "qp_lifecycle.hh"

#include "memory_keys.hh"
#include "qp_state.hh"

namespace pib {

namespace {
constexpr uint32_t kPsnMask = 0xffffff;
constexpr uint8_t kMigMigrated = 0; // IBA APM state: no alternate path armed

// The attributes a loaded QP's are checked with (badQpAttr): every one a
// state change may set, but an alternate path, which the device refuses
// whatever its value (so never has one).
constexpr uint32_t kCheckedAttrs =
    PIB_QP_ATTR_MASK_ALL &
    ~(PIB_QP_STATE | PIB_QP_CUR_STATE | PIB_QP_ALT_PATH | PIB_QP_EN_SQD_ASYNC_NOTIFY);
} // namespace

// Checks the values of the attributes `mask` names; returns a description
// of the first bad one, or nullptr.
const char *badQpAttr(const QueuePair &qp, const pib_qp_attr &a, uint32_t mask, const Ports &ports,
                      const RdAtomicLimits &limits) {
    if (mask & PIB_QP_PKEY_INDEX && a.pkey_index >= PIB_PKEY_TABLE_LEN)
        return "pkey_index";
    if (mask & PIB_QP_PORT && !ports.find(a.port_num))
        return "port_num";
    if (mask & PIB_QP_ACCESS_FLAGS &&
        a.qp_access_flags & ~(PIB_ACCESS_ALL | PIB_ACCESS_FLUSH_GLOBAL))
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

// The saved attributes are checked as a state change checks them, the
// transport loaded, and then the state set: an ERR QP enters it as a
// state change to ERR does, which flushes nothing (a QP in error has
// nothing left to flush) but watches its receive records again; the
// others take theirs as saved.
void loadQpState(StateReader &r, QueuePair &qp, const pib_qp_attr &attr, const Ports &ports,
                 const RdAtomicLimits &limits, DataPath &dataPath) {
    const uint8_t state = attr.qp_state;
    const auto refuse = [&](const char *why) {
        r.fail("QP " + std::to_string(qp.number) + ": " + why);
    };
    if (state > PIB_QPS_ERR ||
        (state == PIB_QPS_SQE && !transitionRule(qp.ctx.type, PIB_QPS_SQE, PIB_QPS_RTS).allowed))
        return refuse("a state its type cannot be in");
    if (attr.en_sqd_async_notify > 1)
        return refuse("an SQD notification that is not a truth value");
    if (const char *bad = badQpAttr(qp, attr, kCheckedAttrs, ports, limits))
        return refuse(bad);
    qp.attr = attr;
    if (state == PIB_QPS_ERR) // entered below
        qp.attr.qp_state = PIB_QPS_RESET;
    dataPath.loadTransport(qp, r);
    if (!r.ok() || state != PIB_QPS_ERR)
        return;
    qp.attr.qp_state = PIB_QPS_ERR;
    dataPath.qpStateEntered(qp, PIB_QPS_RESET, PIB_QPS_ERR, PIB_QP_STATE);
    qp.attr = attr;
}

void saveSpecialQps(StateWriter &w, uint32_t tag, const ObjectTables &objects,
                    const std::function<void(const QueuePair &)> &each) {
    w.beginSection(tag);
    for (const auto &qp : objects.specialQps)
        w.boolean(qp != nullptr);
    for (const auto &qp : objects.specialQps)
        if (qp)
            each(*qp);
    w.endSection();
}

void loadSpecialQps(StateReader &r, uint32_t tag, const std::function<void(uint32_t)> &load) {
    r.enterSection(tag, "QP0 and QP1");
    std::array<bool, 2 * PIB_MAX_PORTS> present{};
    for (bool &p : present)
        p = r.boolean("a special QP");
    for (uint32_t qpn = 0; qpn < present.size() && r.ok(); ++qpn)
        if (present[qpn])
            load(qpn);
    r.leaveSection("QP0 and QP1");
}

void saveMulticast(StateWriter &w, uint32_t tag, const MulticastGroups &groups) {
    w.beginSection(tag);
    w.u32(groups.attachments());
    groups.forEach(
        [&](unsigned port, const MulticastGroups::Gid &mgid, uint16_t mlid, uint32_t qpn) {
            w.u32(qpn);
            w.u8(static_cast<uint8_t>(port));
            for (uint8_t b : mgid)
                w.u8(b);
            w.u16(mlid);
        });
    w.endSection();
}

void loadMulticast(StateReader &r, uint32_t tag, const ObjectTables &objects,
                   const std::function<std::string(const SavedAttachment &)> &attach) {
    r.enterSection(tag, "multicast attachments");
    const uint32_t count = r.count(UINT32_MAX, 23, "multicast attachments");
    for (uint32_t i = 0; i < count && r.ok(); ++i) {
        SavedAttachment a{};
        a.qpn = r.u32();
        const uint8_t port = r.u8();
        for (uint8_t &b : a.gid)
            b = r.u8();
        a.mlid = r.u16();
        const QueuePair *qp = objects.findQp(a.qpn);
        if (r.ok() && (!qp || qp->attr.port_num != port)) {
            r.fail("a multicast attachment of QP " + std::to_string(a.qpn) + " on port " +
                   std::to_string(port) + ", which is not its port");
            break;
        }
        if (const std::string why = r.ok() ? attach(a) : ""; !why.empty())
            r.fail("a multicast attachment of QP " + std::to_string(a.qpn) + ": " + why);
    }
    r.leaveSection("multicast attachments");
}

void resumeLoadedQps(const ObjectTables &objects, DataPath &dataPath) {
    objects.qps.forEach([&](uint32_t, QueuePair &qp) { dataPath.resumeLoaded(qp); });
    for (const auto &qp : objects.specialQps)
        if (qp)
            dataPath.resumeLoaded(*qp);
}

} // namespace pib
