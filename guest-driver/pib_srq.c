// SPDX-License-Identifier: GPL-2.0-only
/* Shared receive queues. */
#include <rdma/uverbs_ioctl.h>

#include "pib.h"

#define PIB_LOG_MIN_STRIDE 6

static size_t pib_srq_ring_size(u8 log_wqe_count, u8 log_wqe_stride)
{
	return max_t(size_t, PIB_PAGE_SIZE,
		     (size_t)1 << (log_wqe_count + log_wqe_stride));
}

static size_t pib_srq_size(const struct pib_srq *srq)
{
	return pib_srq_ring_size(srq->log_wqe_count, srq->log_wqe_stride);
}

/*
 * Destroys the device's SRQ and frees its ring, unless the device refused:
 * then it may still read WQEs from it, and the ring is kept.
 */
static void pib_srq_destroy(struct pib_dev *dev, struct pib_srq *srq)
{
	int err = pib_cmd(dev, PIB_CMD_DESTROY_SRQ, srq->srqn, 0, NULL);

	pib_unpublish_object(dev, &dev->srqs, srq->srqn, srq);
	if (err)
		pib_destroy_failed(dev, "SRQ", srq->srqn, err);
	else
		pib_ring_free(dev, &srq->ring);
}

/* The ring of a user SRQ: the shape the provider chose, checked, and its
 * pages pinned. */
static int pib_srq_user_ring(struct pib_dev *dev, struct pib_srq *srq,
			     const struct ib_srq_attr *attr,
			     struct ib_udata *udata, u32 *uar)
{
	struct pib_create_srq_cmd cmd;
	int err;

	err = pib_udata_cmd(udata, &cmd, sizeof(cmd));
	if (err)
		return err;
	/* An SRQ ring holds 2 WQEs at least (docs/prm.md §6.4). */
	if (cmd.log_wqe_count < 1 ||
	    (1ull << cmd.log_wqe_count) < attr->max_wr ||
	    (1ull << cmd.log_wqe_count) > dev->caps.max_srq_wr ||
	    cmd.log_wqe_stride < PIB_LOG_MIN_STRIDE ||
	    cmd.log_wqe_stride > dev->caps.log_max_wqe_stride)
		return -EINVAL;
	srq->log_wqe_count = cmd.log_wqe_count;
	srq->log_wqe_stride = cmd.log_wqe_stride;
	*uar = rdma_udata_to_drv_context(udata, struct pib_ucontext, ibuc)->uar;
	return pib_ring_user(dev, &srq->ring, cmd.buf_addr, pib_srq_size(srq));
}

/* The ring of a kernel SRQ, shaped for the attributes asked for. */
static int pib_srq_kernel_ring(struct pib_dev *dev, struct pib_srq *srq,
			       const struct ib_srq_attr *attr)
{
	size_t stride =
		roundup_pow_of_two(sizeof(struct pib_wqe_ctrl) +
				   attr->max_sge * sizeof(struct pib_wqe_data));

	/* An SRQ ring holds 2 WQEs at least (docs/prm.md §6.4). */
	srq->log_wqe_count = max(1, order_base_2(attr->max_wr));
	srq->log_wqe_stride = max(PIB_LOG_MIN_STRIDE, ilog2(stride));
	if (srq->log_wqe_stride > dev->caps.log_max_wqe_stride)
		return -EINVAL;
	return pib_ring_kernel(dev, &srq->ring, pib_srq_size(srq));
}

int pib_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		   struct ib_udata *udata)
{
	struct pib_dev *dev = to_pdev(ibsrq->device);
	struct pib_srq *srq = to_psrq(ibsrq);
	struct ib_srq_attr *attr = &init->attr;
	struct pib_srq_context ctx = {};
	struct pib_create_srq_resp resp = {};
	u32 uar = dev->kernel_uar;
	u64 srqn;
	int err;

	/* XRC SRQs serve user space's XRC TGT QPs; no kernel ULP uses XRC. */
	if (init->srq_type != IB_SRQT_BASIC &&
	    (init->srq_type != IB_SRQT_XRC || !udata ||
	     !(dev->caps.device_cap_flags & PIB_DEV_CAP_XRC)))
		return -EOPNOTSUPP;
	if (!attr->max_wr || attr->max_wr > dev->caps.max_srq_wr ||
	    attr->max_sge > dev->caps.max_srq_sge ||
	    attr->srq_limit >= attr->max_wr)
		return -EINVAL;
	spin_lock_init(&srq->lock);
	mutex_init(&srq->resize_lock);
	err = udata ? pib_srq_user_ring(dev, srq, attr, udata, &uar)
		    : pib_srq_kernel_ring(dev, srq, attr);
	if (err)
		return err;
	srq->max_sge = min_t(
		u32, dev->caps.max_srq_sge,
		((1u << srq->log_wqe_stride) - sizeof(struct pib_wqe_ctrl)) /
			sizeof(struct pib_wqe_data));
	srq->limit = attr->srq_limit;

	ctx.buf.mtt_index = srq->ring.mtt;
	ctx.buf.npages = srq->ring.npages;
	ctx.pdn = to_ppd(ibsrq->pd)->pdn;
	ctx.uar_page = uar;
	ctx.log_wqe_count = srq->log_wqe_count;
	ctx.log_wqe_stride = srq->log_wqe_stride;
	ctx.limit = srq->limit;
	if (init->srq_type == IB_SRQT_XRC) {
		ctx.type = PIB_SRQT_XRC;
		ctx.xrcdn = to_pxrcd(init->ext.xrc.xrcd)->xrcdn;
		ctx.cqn = to_pcq(init->ext.cq)->cqn;
	}
	err = pib_cmd_box(dev, PIB_CMD_CREATE_SRQ, 0, 0, &ctx, sizeof(ctx),
			  NULL, 0, &srqn);
	if (err) {
		pib_ring_free(dev, &srq->ring);
		return err;
	}
	srq->srqn = srqn;
	if (init->srq_type == IB_SRQT_XRC) /* uverbs reports it */
		ibsrq->ext.xrc.srq_num = srqn;
	attr->max_wr = 1u << srq->log_wqe_count;
	attr->max_sge = srq->max_sge;
	resp.srqn = srq->srqn;
	err = pib_publish_object(&dev->srqs, srq->srqn, srq, udata, &resp,
				 sizeof(resp));
	if (err)
		pib_srq_destroy(dev, srq);
	return err;
}

/*
 * IB_SRQ_MAX_WR (RESIZE_SRQ, docs/prm.md §6.4): the provider has copied
 * the WQEs it has not seen completed to the new ring; the device switches
 * and renumbers from `base`, and the old ring is let go once it has.
 * Kernel SRQs are not resized: their driver does not track which WQEs
 * have completed, which the device needs to be told.
 */
static int pib_srq_resize(struct pib_dev *dev, struct pib_srq *srq,
			  const struct ib_srq_attr *attr,
			  struct ib_udata *udata)
{
	struct pib_srq_context ctx = {};
	struct pib_resize_srq_cmd cmd;
	struct pib_ring ring = {};
	int err;

	if (!udata || !(dev->caps.device_cap_flags & PIB_DEV_CAP_RESIZE_SRQ))
		return -EOPNOTSUPP;
	err = pib_udata_cmd(udata, &cmd, sizeof(cmd));
	if (err)
		return err;
	if (!attr->max_wr || cmd.log_wqe_count < 1 ||
	    (1ull << cmd.log_wqe_count) < attr->max_wr ||
	    (1ull << cmd.log_wqe_count) > dev->caps.max_srq_wr)
		return -EINVAL;
	err = pib_ring_user(
		dev, &ring, cmd.buf_addr,
		pib_srq_ring_size(cmd.log_wqe_count, srq->log_wqe_stride));
	if (err)
		return err;
	ctx.buf.mtt_index = ring.mtt;
	ctx.buf.npages = ring.npages;
	ctx.log_wqe_count = cmd.log_wqe_count;
	ctx.log_wqe_stride = srq->log_wqe_stride;
	ctx.base = cmd.base;
	mutex_lock(&srq->resize_lock); /* one resize at a time per SRQ */
	err = pib_cmd_box(dev, PIB_CMD_RESIZE_SRQ, 0, srq->srqn, &ctx,
			  sizeof(ctx), NULL, 0, NULL);
	if (!err) {
		swap(srq->ring, ring);
		WRITE_ONCE(srq->log_wqe_count, cmd.log_wqe_count);
	}
	mutex_unlock(&srq->resize_lock);
	pib_ring_free(dev, &ring);
	return err;
}

int pib_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		   enum ib_srq_attr_mask mask, struct ib_udata *udata)
{
	struct pib_srq *srq = to_psrq(ibsrq);
	int err;

	if (mask & IB_SRQ_MAX_WR) {
		err = pib_srq_resize(to_pdev(ibsrq->device), srq, attr, udata);
		if (err)
			return err;
	}
	if (!(mask & IB_SRQ_LIMIT))
		return 0;
	err = pib_cmd(to_pdev(ibsrq->device), PIB_CMD_ARM_SRQ, srq->srqn,
		      attr->srq_limit, NULL);
	if (!err)
		srq->limit = attr->srq_limit;
	return err;
}

int pib_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr)
{
	struct pib_srq *srq = to_psrq(ibsrq);
	struct pib_srq_context ctx;
	int err;

	err = pib_cmd_box(to_pdev(ibsrq->device), PIB_CMD_QUERY_SRQ, 0,
			  srq->srqn, NULL, 0, &ctx, sizeof(ctx), NULL);
	if (err)
		return err;
	attr->max_wr = 1u << srq->log_wqe_count;
	attr->max_sge = srq->max_sge;
	attr->srq_limit = ctx.limit;
	return 0;
}

int pib_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata)
{
	pib_srq_destroy(to_pdev(ibsrq->device), to_psrq(ibsrq));
	return 0; /* see pib_destroy_failed() */
}

int pib_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
		      const struct ib_recv_wr **bad_wr)
{
	struct pib_dev *dev = to_pdev(ibsrq->device);
	struct pib_srq *srq = to_psrq(ibsrq);
	unsigned long flags;
	int err = 0;

	spin_lock_irqsave(&srq->lock, flags);
	for (; wr; wr = wr->next) {
		void *slot =
			srq->ring.kbuf.va +
			((size_t)(srq->pi & ((1u << srq->log_wqe_count) - 1))
			 << srq->log_wqe_stride);

		err = pib_write_recv_wqe(slot, 1u << srq->log_wqe_stride, wr,
					 srq->max_sge);
		if (err)
			break;
		srq->pi++;
	}
	if (err)
		*bad_wr = wr;
	wmb();
	writeq((u64)srq->pi << 32 | srq->srqn, dev->kdb + PIB_DB_SRQ);
	spin_unlock_irqrestore(&srq->lock, flags);
	return err;
}
