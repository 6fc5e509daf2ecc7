// SPDX-License-Identifier: GPL-2.0-only
/* Queue pairs: creation, the state machine, query, and the kernel's posting. */
#include <rdma/uverbs_ioctl.h>

#include "pib.h"

/* Largest header a send WQE can have: control + UD (or RDMA + atomic). */
#define PIB_SEND_HDR_SIZE \
	(sizeof(struct pib_wqe_ctrl) + sizeof(struct pib_wqe_ud))
#define PIB_RECV_HDR_SIZE sizeof(struct pib_wqe_ctrl)
#define PIB_LOG_MIN_STRIDE 6

static u8 pib_qp_type(enum ib_qp_type type)
{
	switch (type) {
	case IB_QPT_SMI:
		return PIB_QPT_SMI;
	case IB_QPT_GSI:
		return PIB_QPT_GSI;
	case IB_QPT_RC:
		return PIB_QPT_RC;
	case IB_QPT_UC:
		return PIB_QPT_UC;
	case IB_QPT_UD:
		return PIB_QPT_UD;
	case IB_QPT_XRC_INI:
		return PIB_QPT_XRC_INI;
	case IB_QPT_XRC_TGT:
		return PIB_QPT_XRC_TGT;
	default:
		return 0xff;
	}
}

static size_t pib_wq_size(const struct pib_wq *wq)
{
	return max_t(size_t, PIB_PAGE_SIZE,
		     (size_t)1 << (wq->log_count + wq->log_stride));
}

/* Ring geometry for a kernel QP from the capabilities asked for. */
static int pib_qp_kernel_geometry(struct pib_dev *dev, struct pib_qp *qp,
				  struct ib_qp_init_attr *init)
{
	struct ib_qp_cap *cap = &init->cap;
	u32 max_stride = 1u << dev->caps.log_max_wqe_stride;
	size_t send_data, stride;

	if (cap->max_send_wr > dev->caps.max_qp_wr ||
	    cap->max_recv_wr > dev->caps.max_qp_wr ||
	    cap->max_send_sge > dev->caps.max_send_sge ||
	    cap->max_recv_sge > dev->caps.max_recv_sge ||
	    cap->max_inline_data > dev->caps.max_inline_data)
		return -EINVAL;
	send_data =
		max_t(size_t, cap->max_send_sge * sizeof(struct pib_wqe_data),
		      ALIGN(cap->max_inline_data + 4, 16));
	stride = roundup_pow_of_two(PIB_SEND_HDR_SIZE + send_data);
	if (stride > max_stride)
		return -EINVAL;
	qp->sq.log_stride = max(PIB_LOG_MIN_STRIDE, ilog2(stride));
	qp->sq.log_count = order_base_2(max(cap->max_send_wr, 1u));
	if (!init->srq) {
		stride = roundup_pow_of_two(
			PIB_RECV_HDR_SIZE +
			cap->max_recv_sge * sizeof(struct pib_wqe_data));
		qp->rq.log_stride = max(PIB_LOG_MIN_STRIDE, ilog2(stride));
		qp->rq.log_count = order_base_2(max(cap->max_recv_wr, 1u));
	}
	return 0;
}

/*
 * What the rings can hold, reported back to the consumer. Send SGEs are
 * reported as asked, not as many as the slot could hold (the inline room
 * may make it hold more), as libmlx5 reports them: consumers size their
 * own arrays by the number (UCX 1.13's ud_verbs overruns one of 8 when
 * told 9 or more). A ring too small for what was asked is refused.
 */
static int pib_qp_fill_cap(struct pib_dev *dev, struct pib_qp *qp,
			   const struct ib_qp_cap *asked, bool srq)
{
	size_t send_room = (1u << qp->sq.log_stride) - PIB_SEND_HDR_SIZE;

	if (asked->max_send_sge > send_room / sizeof(struct pib_wqe_data))
		return -EINVAL;
	qp->cap.max_send_wr = 1u << qp->sq.log_count;
	qp->cap.max_send_sge = asked->max_send_sge;
	qp->cap.max_inline_data =
		min_t(u32, dev->caps.max_inline_data, send_room - 4);
	if (!srq) {
		qp->cap.max_recv_wr = 1u << qp->rq.log_count;
		qp->cap.max_recv_sge =
			min_t(u32, dev->caps.max_recv_sge,
			      ((1u << qp->rq.log_stride) - PIB_RECV_HDR_SIZE) /
				      sizeof(struct pib_wqe_data));
	}
	return 0;
}

static int pib_qp_user_rings(struct pib_dev *dev, struct pib_qp *qp,
			     struct ib_qp_init_attr *init,
			     struct ib_udata *udata)
{
	struct pib_create_qp_cmd cmd;
	u8 max_log_stride = dev->caps.log_max_wqe_stride;
	int err;

	err = pib_udata_cmd(udata, &cmd, sizeof(cmd));
	if (err)
		return err;
	if ((1ull << cmd.sq_log_wqe_count) > dev->caps.max_qp_wr ||
	    cmd.sq_log_wqe_stride < PIB_LOG_MIN_STRIDE ||
	    cmd.sq_log_wqe_stride > max_log_stride ||
	    (1ull << cmd.sq_log_wqe_count) < init->cap.max_send_wr)
		return -EINVAL;
	qp->sq.log_count = cmd.sq_log_wqe_count;
	qp->sq.log_stride = cmd.sq_log_wqe_stride;
	err = pib_ring_user(dev, &qp->sq.ring, cmd.sq_buf_addr,
			    pib_wq_size(&qp->sq));
	if (err)
		return err;
	if (init->srq || qp->type == PIB_QPT_XRC_INI) /* no RQ of its own */
		return 0;
	if ((1ull << cmd.rq_log_wqe_count) > dev->caps.max_qp_wr ||
	    cmd.rq_log_wqe_stride < PIB_LOG_MIN_STRIDE ||
	    cmd.rq_log_wqe_stride > max_log_stride ||
	    (1ull << cmd.rq_log_wqe_count) < init->cap.max_recv_wr) {
		pib_ring_free(dev, &qp->sq.ring);
		return -EINVAL;
	}
	qp->rq.log_count = cmd.rq_log_wqe_count;
	qp->rq.log_stride = cmd.rq_log_wqe_stride;
	err = pib_ring_user(dev, &qp->rq.ring, cmd.rq_buf_addr,
			    pib_wq_size(&qp->rq));
	if (err)
		pib_ring_free(dev, &qp->sq.ring);
	return err;
}

static int pib_qp_kernel_rings(struct pib_dev *dev, struct pib_qp *qp,
			       struct ib_qp_init_attr *init)
{
	int err = pib_qp_kernel_geometry(dev, qp, init);

	if (err)
		return err;
	err = pib_ring_kernel(dev, &qp->sq.ring, pib_wq_size(&qp->sq));
	if (err || init->srq)
		return err;
	err = pib_ring_kernel(dev, &qp->rq.ring, pib_wq_size(&qp->rq));
	if (err)
		pib_ring_free(dev, &qp->sq.ring);
	return err;
}

static void pib_qp_free_rings(struct pib_dev *dev, struct pib_qp *qp)
{
	pib_ring_free(dev, &qp->sq.ring);
	pib_ring_free(dev, &qp->rq.ring);
}

/*
 * pib_poll_cq() looks a CQE's QP up and updates it under the CQ's lock,
 * and takes only a QP that uses that CQ.  Once the QP is out of the table,
 * taking each of its CQs' locks waits out any poller still holding it.
 */
static void pib_qp_flush_pollers(struct pib_qp *qp)
{
	/* An XRC INI QP has no receive CQ, an XRC TGT QP no CQ at all. */
	if (qp->send_cq) {
		spin_lock_irq(&qp->send_cq->lock);
		spin_unlock_irq(&qp->send_cq->lock);
	}
	if (qp->recv_cq) {
		spin_lock_irq(&qp->recv_cq->lock);
		spin_unlock_irq(&qp->recv_cq->lock);
	}
}

/*
 * Destroys the device's QP and frees its rings, unless the device refused:
 * then it may still read WQEs from them, and the rings are kept.
 */
static void pib_qp_destroy(struct pib_dev *dev, struct pib_qp *qp)
{
	int err = pib_cmd(dev, PIB_CMD_DESTROY_QP, qp->qpn, 0, NULL);

	pib_unpublish_object(dev, &dev->qps, qp->qpn, qp);
	pib_cq_untrack_qp(dev, qp);
	pib_qp_flush_pollers(qp);
	if (err)
		pib_destroy_failed(dev, "QP", qp->qpn, err);
	else
		pib_qp_free_rings(dev, qp);
}

/*
 * An XRC TGT QP (docs/prm.md §6.8): ib_core makes it for user space
 * without a udata; it has no queue, PD, CQ or doorbell page, only its
 * XRC domain.
 */
static int pib_create_xrc_tgt(struct pib_dev *dev, struct pib_qp *qp,
			      struct ib_qp_init_attr *init)
{
	struct pib_qp_context ctx = {};
	u64 qpn;
	int err;

	ctx.type = PIB_QPT_XRC_TGT;
	ctx.xrcdn = to_pxrcd(init->xrcd)->xrcdn;
	err = pib_cmd_box(dev, PIB_CMD_CREATE_QP, 0, 0, &ctx, sizeof(ctx), NULL,
			  0, &qpn);
	if (err)
		return err;
	qp->qpn = qpn;
	qp->ibqp.qp_num = qpn;
	qp->port = 1;
	qp->state = IB_QPS_RESET;
	memset(&init->cap, 0, sizeof(init->cap));
	err = pib_publish_object(&dev->qps, qp->qpn, qp, NULL, NULL, 0);
	if (err)
		pib_qp_destroy(dev, qp);
	return err;
}

int pib_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
		  struct ib_udata *udata)
{
	struct pib_dev *dev = to_pdev(ibqp->device);
	struct pib_qp *qp = to_pqp(ibqp);
	struct pib_qp_context ctx = {};
	struct pib_create_qp_resp resp = {};
	u64 qpn;
	int err;

	qp->type = pib_qp_type(init->qp_type);
	/* NETDEV_USE only tells that IPoIB owns the QP; no other flag exists.
	 */
	if (qp->type == 0xff || init->create_flags & ~IB_QP_CREATE_NETDEV_USE) {
		dev_dbg(&dev->pdev->dev,
			"create_qp: type %d flags 0x%x not supported\n",
			init->qp_type, init->create_flags);
		return -EOPNOTSUPP;
	}
	if ((qp->type == PIB_QPT_SMI || qp->type == PIB_QPT_GSI) && udata)
		return -EINVAL;
	/* XRC serves user space: an INI QP has its rings there. */
	if ((qp->type == PIB_QPT_XRC_INI || qp->type == PIB_QPT_XRC_TGT) &&
	    !(dev->caps.device_cap_flags & PIB_DEV_CAP_XRC))
		return -EOPNOTSUPP;
	if (qp->type == PIB_QPT_XRC_TGT)
		return pib_create_xrc_tgt(dev, qp, init);
	if (qp->type == PIB_QPT_XRC_INI && !udata)
		return -EOPNOTSUPP;
	qp->port = init->port_num ? init->port_num : 1;
	qp->signal_all = init->sq_sig_type == IB_SIGNAL_ALL_WR;
	qp->send_cq = to_pcq(init->send_cq);
	qp->recv_cq = init->recv_cq ? to_pcq(init->recv_cq) : NULL;
	spin_lock_init(&qp->sq.lock);
	spin_lock_init(&qp->rq.lock);
	err = udata ? pib_qp_user_rings(dev, qp, init, udata)
		    : pib_qp_kernel_rings(dev, qp, init);
	if (err)
		return err;
	err = pib_qp_fill_cap(dev, qp, &init->cap,
			      init->srq || qp->type == PIB_QPT_XRC_INI);
	if (err) {
		pib_qp_free_rings(dev, qp);
		return err;
	}

	ctx.sq_buf.mtt_index = qp->sq.ring.mtt;
	ctx.sq_buf.npages = qp->sq.ring.npages;
	ctx.rq_buf.mtt_index = qp->rq.ring.mtt;
	ctx.rq_buf.npages = qp->rq.ring.npages;
	ctx.pdn = to_ppd(ibqp->pd)->pdn;
	ctx.send_cqn = qp->send_cq->cqn;
	ctx.recv_cqn = qp->recv_cq ? qp->recv_cq->cqn : 0; /* none: XRC INI */
	ctx.uar_page = udata ? rdma_udata_to_drv_context(
				       udata, struct pib_ucontext, ibuc)
				       ->uar
			     : dev->kernel_uar;
	ctx.type = qp->type;
	ctx.port = qp->port;
	ctx.flags = qp->signal_all ? PIB_QP_SIGNAL_ALL : 0;
	if (init->srq) {
		ctx.flags |= PIB_QP_USE_SRQ;
		ctx.srqn = to_psrq(init->srq)->srqn;
	} else {
		ctx.rq_log_wqe_count = qp->rq.log_count;
		ctx.rq_log_wqe_stride = qp->rq.log_stride;
	}
	ctx.sq_log_wqe_count = qp->sq.log_count;
	ctx.sq_log_wqe_stride = qp->sq.log_stride;
	err = pib_cmd_box(dev, PIB_CMD_CREATE_QP, 0, 0, &ctx, sizeof(ctx), NULL,
			  0, &qpn);
	if (err) {
		pib_qp_free_rings(dev, qp);
		return err;
	}
	qp->qpn = qpn;
	ibqp->qp_num = qp->type == PIB_QPT_SMI	 ? 0
		       : qp->type == PIB_QPT_GSI ? 1
						 : qp->qpn;
	qp->state = IB_QPS_RESET;
	init->cap = qp->cap;
	resp.qpn = qp->qpn;
	if (!udata)
		pib_cq_track_qp(dev, qp);
	err = pib_publish_object(&dev->qps, qp->qpn, qp, udata, &resp,
				 sizeof(resp));
	if (err)
		pib_qp_destroy(dev, qp);
	return err;
}

int pib_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata)
{
	pib_qp_destroy(to_pdev(ibqp->device), to_pqp(ibqp));
	return 0; /* see pib_destroy_failed() */
}

int pib_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		  struct ib_udata *udata)
{
	struct pib_dev *dev = to_pdev(ibqp->device);
	struct pib_qp *qp = to_pqp(ibqp);
	enum ib_qp_state cur, next;
	struct pib_qp_attr a = {};
	int err;

	if (mask & ~PIB_QP_ATTR_MASK_ALL)
		return -EOPNOTSUPP;
	cur = mask & IB_QP_CUR_STATE ? attr->cur_qp_state : qp->state;
	next = mask & IB_QP_STATE ? attr->qp_state : cur;
	if (!ib_modify_qp_is_ok(cur, next, ibqp->qp_type, mask))
		return -EINVAL;

	/* ib_qp_attr_mask bits are the device's PIB_QP_* bits. */
	a.attr_mask = mask;
	a.qp_state = next;
	a.cur_qp_state = cur;
	a.path_mtu = attr->path_mtu;
	a.path_mig_state = attr->path_mig_state;
	a.qkey = attr->qkey;
	a.rq_psn = attr->rq_psn;
	a.sq_psn = attr->sq_psn;
	a.dest_qp_num = attr->dest_qp_num;
	/*
	 * Remote write, read and atomic are the device's, and FLUSH to
	 * global visibility; FLUSH for persistence grants an operation the
	 * device never accepts (it offers no persistence), so that bit is
	 * dropped here rather than failing the transition. On-demand paging
	 * is a region's, not a QP's: a QP granted it (as rdma-core's ODP
	 * tests grant their QPs their regions' rights) takes faults on any
	 * on-demand region it reaches, as every QP does.
	 */
	if (mask & IB_QP_ACCESS_FLAGS &&
	    attr->qp_access_flags &
		    ~(IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ |
		      IB_ACCESS_REMOTE_ATOMIC | IB_ACCESS_LOCAL_WRITE |
		      PIB_IB_ACCESS_FLUSH | IB_ACCESS_ON_DEMAND))
		return -EINVAL;
	a.qp_access_flags = pib_access_to_hw(
		attr->qp_access_flags &
		(IB_ACCESS_REMOTE_WRITE | IB_ACCESS_REMOTE_READ |
		 IB_ACCESS_REMOTE_ATOMIC | PIB_IB_ACCESS_FLUSH_GLOBAL));
	a.pkey_index = attr->pkey_index;
	a.port_num = attr->port_num;
	a.timeout = attr->timeout;
	a.retry_cnt = attr->retry_cnt;
	a.rnr_retry = attr->rnr_retry;
	a.min_rnr_timer = attr->min_rnr_timer;
	a.max_rd_atomic = attr->max_rd_atomic;
	a.max_dest_rd_atomic = attr->max_dest_rd_atomic;
	a.en_sqd_async_notify = attr->en_sqd_async_notify;
	if (mask & IB_QP_AV)
		pib_av_from_ah_attr(&a.av, &attr->ah_attr);
	err = pib_cmd_box(dev, PIB_CMD_MODIFY_QP, 0, qp->qpn, &a, sizeof(a),
			  NULL, 0, NULL);
	if (err)
		return err;
	qp->state = next;
	if (mask & IB_QP_PORT)
		qp->port = attr->port_num;
	if (next == IB_QPS_RESET) {
		/* A kernel QP starts over: its leftover completions (flushes
		 * of its ERROR state) must not reach its next user. */
		if (qp->tracked) {
			pib_cq_clean(to_pcq(ibqp->send_cq), qp->qpn);
			if (ibqp->recv_cq != ibqp->send_cq)
				pib_cq_clean(to_pcq(ibqp->recv_cq), qp->qpn);
		}
		qp->sq.pi = qp->sq.ci = 0;
		qp->rq.pi = qp->rq.ci = 0;
	}
	return 0;
}

int pib_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		 struct ib_qp_init_attr *init)
{
	struct pib_dev *dev = to_pdev(ibqp->device);
	struct pib_qp *qp = to_pqp(ibqp);
	struct pib_qp_attr a;
	int err;

	err = pib_cmd_box(dev, PIB_CMD_QUERY_QP, 0, qp->qpn, NULL, 0, &a,
			  sizeof(a), NULL);
	if (err)
		return err;
	memset(attr, 0, sizeof(*attr));
	attr->qp_state = a.qp_state;
	attr->cur_qp_state = a.qp_state;
	attr->path_mtu = a.path_mtu;
	attr->path_mig_state = a.path_mig_state;
	attr->qkey = a.qkey;
	attr->rq_psn = a.rq_psn;
	attr->sq_psn = a.sq_psn;
	attr->dest_qp_num = a.dest_qp_num;
	attr->qp_access_flags = pib_access_from_hw(a.qp_access_flags);
	attr->pkey_index = a.pkey_index;
	attr->port_num = a.port_num;
	attr->timeout = a.timeout;
	attr->retry_cnt = a.retry_cnt;
	attr->rnr_retry = a.rnr_retry;
	attr->min_rnr_timer = a.min_rnr_timer;
	attr->max_rd_atomic = a.max_rd_atomic;
	attr->max_dest_rd_atomic = a.max_dest_rd_atomic;
	attr->sq_draining = a.sq_draining;
	attr->en_sqd_async_notify = a.en_sqd_async_notify;
	attr->cap = qp->cap;
	pib_av_to_ah_attr(dev, &a.av, &attr->ah_attr);

	memset(init, 0, sizeof(*init));
	init->qp_type = ibqp->qp_type;
	init->send_cq = ibqp->send_cq;
	init->recv_cq = ibqp->recv_cq;
	init->srq = ibqp->srq;
	init->cap = qp->cap;
	init->sq_sig_type =
		qp->signal_all ? IB_SIGNAL_ALL_WR : IB_SIGNAL_REQ_WR;
	return 0;
}

/* ---- posting work requests (kernel consumers) ------------------------------
 */

void *pib_wq_slot(struct pib_wq *wq, u32 index)
{
	return wq->ring.kbuf.va + ((size_t)(index & ((1u << wq->log_count) - 1))
				   << wq->log_stride);
}

void pib_qp_completed(struct pib_qp *qp, const struct pib_cqe *cqe)
{
	if (cqe->opcode & 0x80) {
		if (!qp->ibqp.srq)
			WRITE_ONCE(qp->rq.ci, qp->rq.ci + 1);
		return;
	}
	/* The SQ completes in order; this also retires unsignalled WQEs. */
	WRITE_ONCE(qp->sq.ci,
		   qp->sq.ci + (u16)(cqe->wqe_index + 1 - qp->sq.ci));
}

static int pib_send_opcode(enum ib_wr_opcode op)
{
	switch (op) {
	case IB_WR_SEND:
		return PIB_WR_SEND;
	case IB_WR_SEND_WITH_IMM:
		return PIB_WR_SEND_IMM;
	case IB_WR_RDMA_WRITE:
		return PIB_WR_RDMA_WRITE;
	case IB_WR_RDMA_WRITE_WITH_IMM:
		return PIB_WR_RDMA_WRITE_IMM;
	case IB_WR_RDMA_READ:
		return PIB_WR_RDMA_READ;
	case IB_WR_ATOMIC_CMP_AND_SWP:
		return PIB_WR_ATOMIC_CMP_AND_SWP;
	case IB_WR_ATOMIC_FETCH_AND_ADD:
		return PIB_WR_ATOMIC_FETCH_AND_ADD;
	case IB_WR_LOCAL_INV:
		return PIB_WR_LOCAL_INV;
	case IB_WR_SEND_WITH_INV:
		return PIB_WR_SEND_INV;
	case IB_WR_REG_MR:
		return PIB_WR_REG_MR;
	default:
		return -EINVAL;
	}
}

/* The control segment of a send WQE (docs/prm.md §7.2). */
static void pib_fill_ctrl(struct pib_qp *qp, const struct ib_send_wr *wr,
			  int opcode, struct pib_wqe_ctrl *ctrl)
{
	memset(ctrl, 0, sizeof(*ctrl));
	ctrl->wr_id = wr->wr_id;
	ctrl->opcode = opcode;
	if (wr->send_flags & IB_SEND_SIGNALED || qp->signal_all)
		ctrl->flags |= PIB_WQE_SIGNALED;
	if (wr->send_flags & IB_SEND_SOLICITED)
		ctrl->flags |= PIB_WQE_SOLICITED;
	if (wr->send_flags & IB_SEND_FENCE)
		ctrl->flags |= PIB_WQE_FENCE;
	if (opcode == PIB_WR_SEND_IMM || opcode == PIB_WR_RDMA_WRITE_IMM)
		ctrl->imm = (__force u32)wr->ex.imm_data;
	if (opcode == PIB_WR_SEND_INV || opcode == PIB_WR_LOCAL_INV)
		ctrl->imm = wr->ex.invalidate_rkey;
}

/*
 * A REG_MR WQE maps the MR with the page list ib_map_mr_sg() wrote
 * (docs/prm.md §6.2); returns where the WQE ends.
 */
static void *pib_fill_reg_mr(const struct ib_reg_wr *wr, void *seg)
{
	struct pib_mr *mr = to_pmr(wr->mr);
	struct pib_wqe_reg_mr *r = seg;

	memset(r, 0, sizeof(*r));
	r->iova = mr->ibmr.iova;
	r->length = mr->ibmr.length;
	r->page_list = mr->page_list.dma;
	r->key = wr->key;
	r->access = wr->access & PIB_ACCESS_ALL;
	r->page_count = mr->npages;
	r->log_page_size = ilog2(mr->ibmr.page_size);
	return r + 1;
}

/*
 * The segments between the control segment and the data: the address
 * vector of a datagram, the remote address of an RDMA operation, and an
 * atomic's operands. Returns where the data goes.
 */
static void *pib_fill_remote(struct pib_qp *qp, const struct ib_send_wr *wr,
			     int opcode, void *seg)
{
	struct pib_wqe_raddr *r = seg;
	struct pib_wqe_atomic *a = (void *)(r + 1);
	struct pib_wqe_ud *u = seg;

	if (qp->type == PIB_QPT_UD || qp->type == PIB_QPT_GSI ||
	    qp->type == PIB_QPT_SMI) {
		u->av = to_pah(ud_wr(wr)->ah)->av;
		u->remote_qpn = ud_wr(wr)->remote_qpn;
		u->remote_qkey = ud_wr(wr)->remote_qkey;
		return u + 1;
	}
	switch (opcode) {
	case PIB_WR_RDMA_WRITE:
	case PIB_WR_RDMA_WRITE_IMM:
	case PIB_WR_RDMA_READ:
		r->remote_addr = rdma_wr(wr)->remote_addr;
		r->rkey = rdma_wr(wr)->rkey;
		return r + 1;
	case PIB_WR_ATOMIC_CMP_AND_SWP:
	case PIB_WR_ATOMIC_FETCH_AND_ADD:
		r->remote_addr = atomic_wr(wr)->remote_addr;
		r->rkey = atomic_wr(wr)->rkey;
		a->swap_add = opcode == PIB_WR_ATOMIC_CMP_AND_SWP
				      ? atomic_wr(wr)->swap
				      : atomic_wr(wr)->compare_add;
		a->compare = atomic_wr(wr)->compare_add;
		return a + 1;
	default:
		return seg;
	}
}

/* The WR's data copied into the WQE; returns the end of it, or NULL. */
static void *pib_fill_inline(struct pib_qp *qp, const struct ib_send_wr *wr,
			     void *seg)
{
	struct pib_wqe_inline *in = seg;
	u8 *data = in->data;
	u32 len = 0;
	int i;

	for (i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len > qp->cap.max_inline_data)
		return NULL;
	for (i = 0; i < wr->num_sge; i++) {
		memcpy(data, (void *)(uintptr_t)wr->sg_list[i].addr,
		       wr->sg_list[i].length);
		data += wr->sg_list[i].length;
	}
	in->byte_count = len | PIB_INLINE_FLAG;
	return (void *)in + ALIGN(4 + len, 16);
}

/* The WR's scatter/gather list; returns the end of it. */
static void *pib_fill_sges(const struct ib_send_wr *wr, void *seg)
{
	struct pib_wqe_data *d = seg;
	int i;

	for (i = 0; i < wr->num_sge; i++, d++) {
		d->byte_count = wr->sg_list[i].length;
		d->lkey = wr->sg_list[i].lkey;
		d->addr = wr->sg_list[i].addr;
	}
	return d;
}

/* Writes the send WQE of `wr` into slot `wqe`; 0 or an error. */
static int pib_build_send_wqe(struct pib_qp *qp, const struct ib_send_wr *wr,
			      void *wqe)
{
	struct pib_wqe_ctrl *ctrl = wqe;
	void *end = wqe + (1u << qp->sq.log_stride);
	int opcode = pib_send_opcode(wr->opcode);
	void *seg;

	if (opcode < 0)
		return opcode;
	if (wr->num_sge > qp->cap.max_send_sge)
		return -EINVAL;
	pib_fill_ctrl(qp, wr, opcode, ctrl);
	seg = pib_fill_remote(qp, wr, opcode, ctrl + 1);
	switch (opcode) {
	case PIB_WR_REG_MR:
		seg = pib_fill_reg_mr(reg_wr(wr), seg);
		break;
	case PIB_WR_LOCAL_INV:
		break; /* the control segment alone */
	default:
		if (wr->send_flags & IB_SEND_INLINE) {
			seg = pib_fill_inline(qp, wr, seg);
			ctrl->flags |= PIB_WQE_INLINE;
		} else {
			seg = pib_fill_sges(wr, seg);
		}
	}
	if (!seg || seg > end)
		return -EINVAL;
	ctrl->num_ds = (seg - wqe) / 16;
	return 0;
}

int pib_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		  const struct ib_send_wr **bad_wr)
{
	struct pib_dev *dev = to_pdev(ibqp->device);
	struct pib_qp *qp = to_pqp(ibqp);
	struct pib_wq *sq = &qp->sq;
	unsigned long flags;
	int err = 0;

	spin_lock_irqsave(&sq->lock, flags);
	for (; wr; wr = wr->next) {
		if (sq->pi - READ_ONCE(sq->ci) >= (1u << sq->log_count)) {
			err = -ENOMEM;
			break;
		}
		err = pib_build_send_wqe(qp, wr, pib_wq_slot(sq, sq->pi));
		if (err)
			break;
		sq->pi++;
	}
	if (err)
		*bad_wr = wr;
	/* WQEs must be in memory before the device hears of them. */
	wmb();
	writeq((u64)sq->pi << 32 | qp->qpn, dev->kdb + PIB_DB_SQ);
	spin_unlock_irqrestore(&sq->lock, flags);
	pib_request_flush(dev); /* a FATAL device completes them so */
	return err;
}

int pib_write_recv_wqe(struct pib_wqe_ctrl *ctrl, size_t stride,
		       const struct ib_recv_wr *wr, u32 max_sge)
{
	struct pib_wqe_data *d = (void *)(ctrl + 1);
	int i;

	if (wr->num_sge > max_sge ||
	    sizeof(*ctrl) + wr->num_sge * sizeof(*d) > stride)
		return -EINVAL;
	memset(ctrl, 0, sizeof(*ctrl));
	ctrl->wr_id = wr->wr_id;
	ctrl->num_ds = 1 + wr->num_sge;
	for (i = 0; i < wr->num_sge; i++, d++) {
		d->byte_count = wr->sg_list[i].length;
		d->lkey = wr->sg_list[i].lkey;
		d->addr = wr->sg_list[i].addr;
	}
	return 0;
}

int pib_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		  const struct ib_recv_wr **bad_wr)
{
	struct pib_dev *dev = to_pdev(ibqp->device);
	struct pib_qp *qp = to_pqp(ibqp);
	struct pib_wq *rq = &qp->rq;
	unsigned long flags;
	int err = 0;

	if (ibqp->srq) {
		*bad_wr = wr;
		return -EINVAL;
	}
	spin_lock_irqsave(&rq->lock, flags);
	for (; wr; wr = wr->next) {
		if (rq->pi - READ_ONCE(rq->ci) >= (1u << rq->log_count)) {
			err = -ENOMEM;
			break;
		}
		err = pib_write_recv_wqe(pib_wq_slot(rq, rq->pi),
					 1u << rq->log_stride, wr,
					 qp->cap.max_recv_sge);
		if (err)
			break;
		rq->pi++;
	}
	if (err)
		*bad_wr = wr;
	wmb();
	writeq((u64)rq->pi << 32 | qp->qpn, dev->kdb + PIB_DB_RQ);
	spin_unlock_irqrestore(&rq->lock, flags);
	pib_request_flush(dev);
	return err;
}
