// SPDX-License-Identifier: GPL-2.0-or-later
// Queue pairs: creation, the state machine of MODIFY_QP, query, destroy.
#include <cinttypes>

#include "limits.hh"
#include "pib_commands.hh"
#include "qp_lifecycle.hh"
#include "qp_state.hh"
#include "ring.hh"
#include "trace.hh"

namespace pib {

namespace {

bool validType(uint8_t type) {
    return type == PIB_QPT_SMI || type == PIB_QPT_GSI || type == PIB_QPT_RC || type == PIB_QPT_UC ||
           type == PIB_QPT_UD || type == PIB_QPT_XRC_INI || type == PIB_QPT_XRC_TGT;
}

bool validStride(uint8_t log_stride) {
    return log_stride >= limits::kLogMinWqeStride && log_stride <= limits::kLogMaxWqeStride;
}

} // namespace

// The SQ's and RQ's geometry, and their rings in the MTT. A QP with an
// SRQ has no RQ at all, an XRC INI QP neither, an XRC TGT QP no queue.
CommandOutcome CommandProcessor::checkQpRings(const pib_qp_context &ctx, bool useSrq) {
    if (!hasSendQueue(ctx.type)) {
        if (ctx.sq_buf.npages || ctx.sq_log_wqe_count || ctx.sq_log_wqe_stride)
            return fail(err::kCmdBadParam, "CREATE_QP XRC TGT QP with an SQ");
    } else if (ctx.sq_log_wqe_count > limits::kLogMaxQpWr || !validStride(ctx.sq_log_wqe_stride)) {
        return fail(err::kCmdBadParam, "CREATE_QP SQ of 2^%u WQEs of 2^%u bytes",
                    ctx.sq_log_wqe_count, ctx.sq_log_wqe_stride);
    } else if (!validRing(ctx.sq_buf, ringPages(ctx.sq_log_wqe_count, ctx.sq_log_wqe_stride))) {
        return fail(err::kCmdBadRing, "CREATE_QP SQ ring of %u pages at MTT %u", ctx.sq_buf.npages,
                    ctx.sq_buf.mtt_index);
    }
    if (useSrq || !hasReceiveSide(ctx.type)) {
        if (ctx.rq_buf.npages || ctx.rq_log_wqe_count || ctx.rq_log_wqe_stride)
            return fail(err::kCmdBadParam, "CREATE_QP with %s and an RQ",
                        useSrq ? "an SRQ" : "no receive side (XRC)");
        return {};
    }
    if (ctx.rq_log_wqe_count > limits::kLogMaxQpWr || !validStride(ctx.rq_log_wqe_stride))
        return fail(err::kCmdBadParam, "CREATE_QP RQ of 2^%u WQEs of 2^%u bytes",
                    ctx.rq_log_wqe_count, ctx.rq_log_wqe_stride);
    if (!validRing(ctx.rq_buf, ringPages(ctx.rq_log_wqe_count, ctx.rq_log_wqe_stride)))
        return fail(err::kCmdBadRing, "CREATE_QP RQ ring of %u pages at MTT %u", ctx.rq_buf.npages,
                    ctx.rq_buf.mtt_index);
    return {};
}

// The objects a QP of its type is built on must exist (objects.hh says
// which): its PD, CQs, doorbell page, basic SRQ, or an XRC TGT QP's domain.
CommandOutcome CommandProcessor::checkQpObjects(const pib_qp_context &ctx) {
    const bool useSrq = ctx.flags & PIB_QP_USE_SRQ;
    const SharedReceiveQueue *srq = useSrq ? objects_.srqs.find(ctx.srqn) : nullptr;
    const char *missing = nullptr;
    if (ctx.type == PIB_QPT_XRC_TGT) {
        if (!objects_.xrcds.find(ctx.xrcdn))
            missing = "XRCD";
    } else if (!objects_.pds.find(ctx.pdn)) {
        missing = "PD";
    } else if (!objects_.cqs.find(ctx.send_cqn)) {
        missing = "send CQ";
    } else if (hasReceiveSide(ctx.type) && !objects_.cqs.find(ctx.recv_cqn)) {
        missing = "receive CQ";
    } else if (!objects_.uars.find(ctx.uar_page)) {
        missing = "doorbell page";
    } else if (useSrq && (!srq || srq->isXrc())) {
        missing = "basic SRQ";
    }
    if (missing)
        return fail(err::kCmdBadIndex,
                    "CREATE_QP type %u with PD %u, CQs %u/%u, SRQ %s%u, doorbell page %u, XRCD "
                    "%u: %s missing",
                    ctx.type, ctx.pdn, ctx.send_cqn, ctx.recv_cqn, useSrq ? "" : "(none) ",
                    ctx.srqn, ctx.uar_page, ctx.xrcdn, missing);
    return {};
}

// Takes (+1) or gives back (-1) a QP's hold on what it is built on.
void CommandProcessor::holdQpObjects(const pib_qp_context &ctx, int delta) {
    const auto adjust = [delta](Referenced *o) { o->refs += static_cast<uint32_t>(delta); };
    if (ctx.type == PIB_QPT_XRC_TGT) {
        adjust(objects_.xrcds.find(ctx.xrcdn));
        return;
    }
    adjust(objects_.pds.find(ctx.pdn));
    adjust(objects_.cqs.find(ctx.send_cqn));
    adjust(objects_.uars.find(ctx.uar_page));
    const auto ring = [&](const pib_buf_desc &buf) {
        if (delta > 0)
            objects_.mtt.hold(buf.mtt_index);
        else
            objects_.mtt.unhold(buf.mtt_index);
    };
    ring(ctx.sq_buf);
    if (!hasReceiveSide(ctx.type))
        return;
    adjust(objects_.cqs.find(ctx.recv_cqn));
    if (ctx.flags & PIB_QP_USE_SRQ)
        adjust(objects_.srqs.find(ctx.srqn));
    else
        ring(ctx.rq_buf);
}

CommandOutcome CommandProcessor::createQp(const Command &cmd) {
    pib_qp_context ctx;
    if (!readMailbox(cmd, ctx))
        return mailboxFailed();
    return createQp(ctx);
}

CommandOutcome CommandProcessor::createQp(const pib_qp_context &ctx) {
    if (!validType(ctx.type) || ctx.flags & ~(PIB_QP_SIGNAL_ALL | PIB_QP_USE_SRQ) ||
        (isXrcType(ctx.type) && ctx.flags & PIB_QP_USE_SRQ) ||
        (ctx.type != PIB_QPT_XRC_TGT && ctx.xrcdn))
        return fail(err::kCmdBadParam, "CREATE_QP type %u flags 0x%x XRCD %u", ctx.type, ctx.flags,
                    ctx.xrcdn);
    const bool special = ctx.type == PIB_QPT_SMI || ctx.type == PIB_QPT_GSI;
    const bool useSrq = ctx.flags & PIB_QP_USE_SRQ;
    if (special && (useSrq || !core_.ports.find(ctx.port)))
        return fail(err::kCmdBadParam, "CREATE_QP special QP on port %u%s", ctx.port,
                    useSrq ? " with an SRQ" : "");
    if (const CommandOutcome bad = checkQpObjects(ctx); bad.status != PIB_CMD_STATUS_OK)
        return bad;
    if (const CommandOutcome bad = checkQpRings(ctx, useSrq); bad.status != PIB_CMD_STATUS_OK)
        return bad;

    auto qp = std::make_unique<QueuePair>();
    qp->ctx = ctx;
    qp->attr.qp_state = PIB_QPS_RESET;
    qp->attr.port_num = special ? ctx.port : 1;
    qp->attr.path_mtu = PIB_MTU_256;
    if (special && objects_.specialQps[PIB_SPECIAL_QPN(ctx.port, ctx.type)])
        return fail(err::kCmdBadState, "CREATE_QP: QP%u of port %u exists", ctx.type, ctx.port);
    const auto number = insertQp(objects_, std::move(qp));
    if (!number)
        return fail(err::kCmdNoResources, "all %u QPs in use", objects_.qps.capacity());
    const uint32_t qpn = *number;
    holdQpObjects(ctx, +1);
    return {PIB_CMD_STATUS_OK, qpn};
}

void CommandProcessor::releaseQp(QueuePair &qp) {
    holdQpObjects(qp.ctx, -1);
}

CommandOutcome CommandProcessor::destroyQp(const Command &cmd) {
    QueuePair *qp = objects_.findQp(cmd.modifier);
    if (!qp)
        return fail(err::kCmdBadIndex, "DESTROY_QP of QP %u", cmd.modifier);
    releaseQp(*qp);
    endQp(objects_, core_.dataPath, *qp);
    return {};
}

CommandOutcome CommandProcessor::queryQp(const Command &cmd) {
    QueuePair *qp = objects_.findQp(cmd.modifier);
    if (!qp)
        return fail(err::kCmdBadIndex, "QUERY_QP of QP %u", cmd.modifier);
    pib_qp_attr out = qp->attr;
    out.attr_mask = 0;
    out.cur_qp_state = out.qp_state;
    if (!writeMailbox(cmd, out))
        return mailboxFailed();
    return {};
}

// The 64-bit number in 8 bytes of a GID, most significant first.
static uint64_t bigEndian64(const uint8_t *bytes) {
    uint64_t v = 0;
    for (int i = 0; i < 8; ++i)
        v = v << 8 | bytes[i];
    return v;
}

// Multicast (IBA 10.5, 11.3): a UD QP with a port joins or leaves a group.
CommandOutcome CommandProcessor::attachOrDetachMcast(const Command &cmd) {
    pib_mcast m;
    if (!readMailbox(cmd, m))
        return mailboxFailed();
    return attachOrDetachMcast(cmd, m);
}

CommandOutcome CommandProcessor::attachOrDetachMcast(const Command &cmd, const pib_mcast &m) {
    const bool attach = cmd.opcode == PIB_CMD_ATTACH_MCAST;
    const char *name = attach ? "ATTACH_MCAST" : "DETACH_MCAST";
    QueuePair *qp = objects_.findQp(cmd.modifier);
    if (!qp)
        return fail(err::kCmdBadIndex, "%s of QP %u", name, cmd.modifier);
    if (qp->ctx.type != PIB_QPT_UD || cmd.modifier < PIB_FIRST_QPN)
        return fail(err::kCmdBadParam, "%s of QP %u, which is not UD", name, cmd.modifier);
    if (m.gid[0] != 0xff || (attach && !iba::isMulticastLid(m.mlid)))
        return fail(err::kCmdBadParam,
                    "%s of QP %u: GID starting 0x%02x, LID 0x%x is not a multicast group", name,
                    cmd.modifier, m.gid[0], m.mlid);
    if (qp->attr.qp_state == PIB_QPS_RESET || !core_.ports.find(qp->attr.port_num))
        return fail(err::kCmdBadState, "%s of QP %u, which has no port yet (state %u)", name,
                    cmd.modifier, qp->attr.qp_state);
    MulticastGroups::Gid gid;
    std::copy(std::begin(m.gid), std::end(m.gid), gid.begin());
    const uint8_t status =
        attach ? objects_.multicast.attach(qp->attr.port_num, gid, m.mlid, cmd.modifier)
               : objects_.multicast.detach(qp->attr.port_num, gid, cmd.modifier);
    if (status != PIB_CMD_STATUS_OK)
        return fail(attach ? err::kCmdNoResources : err::kCmdBadParam, "%s of QP %u: %s", name,
                    cmd.modifier, attach ? "a multicast limit is reached" : "it is not attached");
    trace::mcast_attach(host_, cmd.modifier, attach, m.mlid, qp->attr.port_num,
                        bigEndian64(gid.data()), bigEndian64(gid.data() + 8));
    return {};
}

CommandOutcome CommandProcessor::modifyQp(const Command &cmd) {
    QueuePair *qp = objects_.findQp(cmd.modifier);
    if (!qp)
        return fail(err::kCmdBadIndex, "MODIFY_QP of QP %u", cmd.modifier);
    pib_qp_attr in;
    if (!readMailbox(cmd, in))
        return mailboxFailed();
    return modifyQp(*qp, in);
}

CommandOutcome CommandProcessor::modifyQp(QueuePair &target, const pib_qp_attr &in) {
    QueuePair *qp = &target;
    const Command cmd{.modifier = qp->number};
    const uint32_t mask = in.attr_mask;
    const uint8_t cur = qp->attr.qp_state;
    const uint8_t next = mask & PIB_QP_STATE ? in.qp_state : cur;
    if (mask & ~PIB_QP_ATTR_MASK_ALL || next > PIB_QPS_ERR)
        return fail(err::kCmdBadParam, "MODIFY_QP %u mask 0x%x state %u", cmd.modifier, mask, next);
    if (mask & PIB_QP_CUR_STATE && in.cur_qp_state != cur)
        return fail(err::kCmdBadState, "MODIFY_QP %u says current state %u, but it is %u",
                    cmd.modifier, in.cur_qp_state, cur);
    const TransitionRule rule = transitionRule(qp->ctx.type, cur, next);
    if (!rule.allowed)
        return fail(err::kCmdBadTransition, "MODIFY_QP %u (type %u) from state %u to %u",
                    cmd.modifier, qp->ctx.type, cur, next);
    uint32_t missing, extra;
    if (!maskFitsRule(rule, mask, &missing, &extra))
        return fail(err::kCmdBadMask,
                    "MODIFY_QP %u (type %u) %u->%u: mask 0x%x lacks 0x%x, has extra 0x%x",
                    cmd.modifier, qp->ctx.type, cur, next, mask, missing, extra);
    if (const char *bad = badQpAttr(*qp, in, mask, core_.ports,
                                    {caps_.max_qp_init_rd_atom, caps_.max_qp_rd_atom}))
        return fail(err::kCmdBadParam, "MODIFY_QP %u: invalid %s", cmd.modifier, bad);

    core_.dataPath.qpStateLeaving(*qp, next);
    applyQpAttrs(qp->attr, in, mask, next);
    core_.dataPath.qpStateEntered(*qp, cur, next, mask);
    return {};
}

} // namespace pib
