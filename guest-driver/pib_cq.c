// SPDX-License-Identifier: GPL-2.0-only
/* Completion queues: rings of 64-byte CQEs with a phase bit (docs/prm.md). */
#include <rdma/uverbs_ioctl.h>

#include "pib.h"

static size_t pib_cq_ring_size(u32 log_size)
{
	return max_t(size_t, PIB_PAGE_SIZE, (size_t)PIB_CQE_SIZE << log_size);
}

/* A user CQ's memory: its ring and its CI record, pinned. */
struct pib_cq_user_mem {
	struct pib_ring ring;
	struct ib_umem *ci_umem;
	u64 ci_dma;
};

static int pib_cq_pin_user(struct pib_dev *dev, u64 buf_addr, u64 ci_addr,
			   u32 log_size, struct pib_cq_user_mem *m)
{
	struct ib_block_iter biter;
	int err;

	err = pib_ring_user(dev, &m->ring, buf_addr,
			    pib_cq_ring_size(log_size));
	if (err)
		return err;
	m->ci_umem =
		pib_umem_get(&dev->ibdev, ci_addr, 4, IB_ACCESS_LOCAL_WRITE);
	if (IS_ERR(m->ci_umem)) {
		err = PTR_ERR(m->ci_umem);
		m->ci_umem = NULL;
		pib_ring_free(dev, &m->ring);
		return err;
	}
	rdma_umem_for_each_dma_block (m->ci_umem, &biter, PAGE_SIZE) {
		m->ci_dma = rdma_block_iter_dma_address(&biter) +
			    (ci_addr & ~PAGE_MASK);
		break;
	}
	return 0;
}

static bool pib_cq_user_size_ok(struct pib_dev *dev, u32 log_size, int cqe,
				u64 ci_addr)
{
	return log_size >= 1 && (1ull << log_size) <= dev->caps.max_cqe &&
	       (1ull << log_size) >= cqe && !(ci_addr & 3);
}

static int pib_cq_user(struct pib_dev *dev, struct pib_cq *cq,
		       const struct ib_cq_init_attr *attr,
		       struct ib_udata *udata, u64 *ci_dma)
{
	struct pib_ucontext *uc =
		rdma_udata_to_drv_context(udata, struct pib_ucontext, ibuc);
	struct pib_create_cq_cmd cmd;
	struct pib_cq_user_mem m = {};
	int err;

	err = pib_udata_cmd(udata, &cmd, sizeof(cmd));
	if (err)
		return err;
	if (!pib_cq_user_size_ok(dev, cmd.log_size, attr->cqe,
				 cmd.ci_record_addr))
		return -EINVAL;
	err = pib_cq_pin_user(dev, cmd.buf_addr, cmd.ci_record_addr,
			      cmd.log_size, &m);
	if (err)
		return err;
	cq->log_size = cmd.log_size;
	cq->uar = uc->uar;
	cq->ring = m.ring;
	cq->ci_umem = m.ci_umem;
	*ci_dma = m.ci_dma;
	return 0;
}

static int pib_cq_kernel(struct pib_dev *dev, struct pib_cq *cq,
			 const struct ib_cq_init_attr *attr, u64 *ci_dma)
{
	int err;

	cq->log_size = max(1, order_base_2(attr->cqe));
	cq->uar = dev->kernel_uar;
	err = pib_ring_kernel(dev, &cq->ring, pib_cq_ring_size(cq->log_size));
	if (err)
		return err;
	err = pib_kbuf_alloc(dev, &cq->ci_record, sizeof(u32));
	if (err) {
		pib_ring_free(dev, &cq->ring);
		return err;
	}
	*ci_dma = cq->ci_record.dma;
	return 0;
}

static void pib_cq_free_memory(struct pib_dev *dev, struct pib_cq *cq)
{
	pib_ring_free(dev, &cq->ring);
	pib_kbuf_free(dev, &cq->ci_record);
	if (cq->ci_umem)
		ib_umem_release(cq->ci_umem);
	cq->ci_umem = NULL;
}

/*
 * Destroys the device's CQ and frees the CQ's memory, unless the device
 * refused: then it may still write CQEs, and the memory is kept.
 */
static void pib_cq_destroy(struct pib_dev *dev, struct pib_cq *cq)
{
	int err = pib_cmd(dev, PIB_CMD_DESTROY_CQ, cq->cqn, 0, NULL);

	pib_unpublish_object(dev, &dev->cqs, cq->cqn, cq);
	if (err)
		pib_destroy_failed(dev, "CQ", cq->cqn, err);
	else
		pib_cq_free_memory(dev, cq);
}

int pib_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		  struct pib_create_cq_arg *arg)
{
	struct ib_udata *udata = pib_create_cq_udata(arg);
	struct pib_dev *dev = to_pdev(ibcq->device);
	struct pib_cq *cq = to_pcq(ibcq);
	struct pib_cq_context ctx = {};
	struct pib_create_cq_resp resp = {};
	u64 ci_dma = 0, cqn;
	int err;

	/* Every CQE carries its time (docs/prm.md §7.3): asking is free. */
	if (attr->flags & ~IB_UVERBS_CQ_FLAGS_TIMESTAMP_COMPLETION ||
	    (attr->flags &&
	     !(dev->caps.device_cap_flags & PIB_DEV_CAP_CQE_TIMESTAMP)))
		return -EOPNOTSUPP;
	if (attr->cqe < 1 || attr->cqe > dev->caps.max_cqe ||
	    attr->comp_vector >= ibcq->device->num_comp_vectors)
		return -EINVAL;
	spin_lock_init(&cq->lock);
	mutex_init(&cq->resize_lock);
	INIT_LIST_HEAD(&cq->send_qps);
	INIT_LIST_HEAD(&cq->recv_qps);
	err = udata ? pib_cq_user(dev, cq, attr, udata, &ci_dma)
		    : pib_cq_kernel(dev, cq, attr, &ci_dma);
	if (err)
		return err;

	ctx.buf.mtt_index = cq->ring.mtt;
	ctx.buf.npages = cq->ring.npages;
	ctx.log_size = cq->log_size;
	ctx.eqn = dev->comp_eqs[attr->comp_vector].eqn;
	ctx.uar_page = cq->uar;
	ctx.ci_record = ci_dma;
	err = pib_cmd_box(dev, PIB_CMD_CREATE_CQ, 0, 0, &ctx, sizeof(ctx), NULL,
			  0, &cqn);
	if (err) {
		pib_cq_free_memory(dev, cq);
		return err;
	}
	cq->cqn = cqn;
	ibcq->cqe = 1 << cq->log_size;
	resp.cqn = cq->cqn;
	err = pib_publish_object(&dev->cqs, cq->cqn, cq, udata, &resp,
				 sizeof(resp));
	if (err)
		pib_cq_destroy(dev, cq);
	return err;
}

/*
 * ibv_resize_cq (RESIZE_CQ, docs/prm.md §6.1): the provider gives a new
 * ring and CI record, and copies the CQEs the device reports unconsumed
 * once the device has switched; the old ring is let go only then. Kernel
 * CQs are not resized: their pollers run in interrupt context and cannot
 * wait for a command (no kernel ULP resizes a CQ).
 */
/* resize_user_cq of the 7.x series: the same, with an unsigned count. */
int pib_resize_user_cq(struct ib_cq *ibcq, unsigned int cqe,
		       struct ib_udata *udata)
{
	return cqe > INT_MAX ? -EINVAL : pib_resize_cq(ibcq, cqe, udata);
}

int pib_resize_cq(struct ib_cq *ibcq, int cqe, struct ib_udata *udata)
{
	struct pib_dev *dev = to_pdev(ibcq->device);
	struct pib_cq *cq = to_pcq(ibcq);
	struct pib_resize_cq_resp resp = {};
	struct pib_resize_cq_cmd cmd;
	struct pib_cq_context ctx = {};
	struct pib_cq_user_mem m = {};
	u64 pending;
	int err;

	if (!udata || !(dev->caps.device_cap_flags & PIB_DEV_CAP_RESIZE_CQ))
		return -EOPNOTSUPP;
	err = pib_udata_cmd(udata, &cmd, sizeof(cmd));
	if (err)
		return err;
	if (cqe < 1 ||
	    !pib_cq_user_size_ok(dev, cmd.log_size, cqe, cmd.ci_record_addr))
		return -EINVAL;
	err = pib_cq_pin_user(dev, cmd.buf_addr, cmd.ci_record_addr,
			      cmd.log_size, &m);
	if (err)
		return err;
	ctx.buf.mtt_index = m.ring.mtt;
	ctx.buf.npages = m.ring.npages;
	ctx.log_size = cmd.log_size;
	ctx.ci_record = m.ci_dma;
	mutex_lock(&cq->resize_lock); /* one resize at a time per CQ */
	err = pib_cmd_box(dev, PIB_CMD_RESIZE_CQ, 0, cq->cqn, &ctx, sizeof(ctx),
			  NULL, 0, &pending);
	if (err) {
		mutex_unlock(&cq->resize_lock);
		pib_ring_free(dev, &m.ring);
		ib_umem_release(m.ci_umem);
		return err;
	}
	swap(cq->ring, m.ring);
	swap(cq->ci_umem, m.ci_umem);
	WRITE_ONCE(cq->log_size, cmd.log_size);
	ibcq->cqe = 1 << cmd.log_size;
	mutex_unlock(&cq->resize_lock);
	pib_ring_free(dev, &m.ring);
	ib_umem_release(m.ci_umem);
	resp.pending = pending;
	return ib_copy_to_udata(udata, &resp, min(udata->outlen, sizeof(resp)));
}

/*
 * ibv_modify_cq and the kernel's adaptive moderation (rdma_dim, which
 * ib_core runs for a kernel CQ polled from softirq or a workqueue when
 * use_cq_dim is set): MODIFY_CQ, docs/prm.md §6.1. A period of 0 turns
 * moderation off. May sleep: both callers run in process context.
 */
int pib_modify_cq(struct ib_cq *ibcq, u16 cq_count, u16 cq_period)
{
	struct pib_dev *dev = to_pdev(ibcq->device);

	if (!(dev->caps.device_cap_flags & PIB_DEV_CAP_CQ_MODERATION))
		return -EOPNOTSUPP;
	if (cq_count > dev->caps.max_cq_moderation_count ||
	    cq_period > dev->caps.max_cq_moderation_period)
		return -EINVAL;
	return pib_cmd(dev, PIB_CMD_MODIFY_CQ, to_pcq(ibcq)->cqn,
		       (u64)cq_period << 16 | cq_count, NULL);
}

int pib_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata)
{
	pib_cq_destroy(to_pdev(ibcq->device), to_pcq(ibcq));
	return 0; /* see pib_destroy_failed() */
}

static struct pib_cqe *pib_cq_slot(struct pib_cq *cq, u32 index)
{
	return cq->ring.kbuf.va +
	       (size_t)(index & ((1u << cq->log_size) - 1)) * PIB_CQE_SIZE;
}

/* CQE `index` if the device has written it, or NULL; under the CQ's lock. */
static struct pib_cqe *pib_cqe_at(struct pib_cq *cq, u32 index)
{
	struct pib_cqe *cqe = pib_cq_slot(cq, index);
	u8 phase = ((index >> cq->log_size) & 1) ^ 1;

	if ((READ_ONCE(cqe->flags) & PIB_CQE_PHASE) != phase)
		return NULL;
	dma_rmb(); /* read the entry only after its phase bit */
	return cqe;
}

static struct pib_cqe *pib_next_cqe(struct pib_cq *cq)
{
	return pib_cqe_at(cq, cq->ci);
}

/*
 * A kernel QP went to RESET: its CQEs not yet polled are dropped, and the
 * others keep their order. They move towards the producer end, so the
 * device, which writes after the last valid CQE, and the poller still
 * agree on every index; each slot written keeps its index's phase bit.
 */
void pib_cq_clean(struct pib_cq *cq, u32 qpn)
{
	u32 end, dropped = 0, k;
	unsigned long flags;

	spin_lock_irqsave(&cq->lock, flags);
	end = cq->ci;
	while (end - cq->ci < 1u << cq->log_size && pib_cqe_at(cq, end))
		end++;
	for (k = end - cq->ci; k-- > 0;) {
		struct pib_cqe *cqe = pib_cq_slot(cq, cq->ci + k);
		struct pib_cqe *to;
		u8 phase;

		if (cqe->qpn == qpn) {
			dropped++;
			continue;
		}
		if (!dropped)
			continue;
		to = pib_cq_slot(cq, cq->ci + k + dropped);
		phase = to->flags & PIB_CQE_PHASE;
		*to = *cqe;
		to->flags = (to->flags & ~PIB_CQE_PHASE) | phase;
	}
	if (dropped) {
		cq->ci += dropped;
		WRITE_ONCE(*(u32 *)cq->ci_record.va, cq->ci);
	}
	spin_unlock_irqrestore(&cq->lock, flags);
}

static const enum ib_wc_opcode pib_wc_opcodes[] = {
	[PIB_WC_SEND] = IB_WC_SEND,
	[PIB_WC_RDMA_WRITE] = IB_WC_RDMA_WRITE,
	[PIB_WC_RDMA_READ] = IB_WC_RDMA_READ,
	[PIB_WC_COMP_SWAP] = IB_WC_COMP_SWAP,
	[PIB_WC_FETCH_ADD] = IB_WC_FETCH_ADD,
	[PIB_WC_LOCAL_INV] = IB_WC_LOCAL_INV,
	[PIB_WC_REG_MR] = IB_WC_REG_MR,
	[PIB_WC_BIND_MW] = IB_WC_BIND_MW,
};

/*
 * The QP a CQE belongs to, looked up under the CQ's lock.  Only a QP that
 * uses this CQ counts: a stale CQE of a destroyed QP must not be charged
 * to a new QP with its number on another CQ, and pib_qp_flush_pollers()
 * relies on it to know which CQ locks to wait for.
 */
static struct pib_qp *pib_cqe_qp(struct pib_dev *dev, struct pib_cq *cq,
				 const struct pib_cqe *cqe)
{
	struct pib_qp *qp = xa_load(&dev->qps, cqe->qpn);

	if (qp && qp->send_cq != cq && qp->recv_cq != cq)
		return NULL;
	return qp;
}

static void pib_cqe_to_wc(struct pib_dev *dev, struct pib_cq *cq,
			  const struct pib_cqe *cqe, struct ib_wc *wc)
{
	struct pib_qp *qp = pib_cqe_qp(dev, cq, cqe);

	memset(wc, 0, sizeof(*wc));
	wc->wr_id = cqe->wr_id;
	wc->status = cqe->status;
	wc->vendor_err = cqe->vendor_err;
	wc->qp = qp ? &qp->ibqp : NULL;
	if (cqe->opcode == PIB_WC_RECV)
		wc->opcode = IB_WC_RECV;
	else if (cqe->opcode == PIB_WC_RECV_RDMA_WITH_IMM)
		wc->opcode = IB_WC_RECV_RDMA_WITH_IMM;
	else if (cqe->opcode < ARRAY_SIZE(pib_wc_opcodes))
		wc->opcode = pib_wc_opcodes[cqe->opcode];
	wc->byte_len = cqe->byte_len;
	if (cqe->flags & PIB_CQE_WITH_IMM) {
		wc->ex.imm_data = (__force __be32)cqe->imm;
		wc->wc_flags |= IB_WC_WITH_IMM;
	} else if (cqe->flags & PIB_CQE_WITH_INV) {
		wc->ex.invalidate_rkey = cqe->imm;
		wc->wc_flags |= IB_WC_WITH_INVALIDATE;
	}
	if (cqe->flags & PIB_CQE_GRH)
		wc->wc_flags |= IB_WC_GRH;
	wc->src_qp = cqe->src_qp;
	wc->slid = cqe->slid;
	wc->sl = cqe->sl;
	wc->dlid_path_bits = cqe->dlid_path_bits;
	wc->pkey_index = cqe->pkey_index;
	wc->port_num = qp ? qp->port : 1;
	if (qp)
		pib_qp_completed(qp, cqe);
}

void pib_cq_notify(struct pib_cq *cq)
{
	if (cq->ibcq.comp_handler)
		cq->ibcq.comp_handler(&cq->ibcq, cq->ibcq.cq_context);
}

/*
 * A FATAL device completes nothing more (docs/prm.md §2.2). What kernel
 * QPs still have outstanding then completes in software, flushed, as mlx5
 * does, so that their users (the MAD layer, IPoIB, ib_drain_qp) see every
 * WQE end and let go of the device before the function is reset. User
 * QPs' rings belong to user space, whose context is disassociated instead.
 *
 * A kernel QP is on its CQs' lists from creation to destruction, under the
 * CQs' locks, and on the device's list under kernel_qps_lock.
 */
void pib_cq_track_qp(struct pib_dev *dev, struct pib_qp *qp)
{
	unsigned long flags;

	spin_lock_irqsave(&qp->send_cq->lock, flags);
	list_add_tail(&qp->send_cq_node, &qp->send_cq->send_qps);
	spin_unlock_irqrestore(&qp->send_cq->lock, flags);
	spin_lock_irqsave(&qp->recv_cq->lock, flags);
	list_add_tail(&qp->recv_cq_node, &qp->recv_cq->recv_qps);
	spin_unlock_irqrestore(&qp->recv_cq->lock, flags);
	spin_lock_irqsave(&dev->kernel_qps_lock, flags);
	list_add_tail(&qp->dev_node, &dev->kernel_qps);
	spin_unlock_irqrestore(&dev->kernel_qps_lock, flags);
	qp->tracked = true;
}

void pib_cq_untrack_qp(struct pib_dev *dev, struct pib_qp *qp)
{
	unsigned long flags;

	if (!qp->tracked)
		return;
	spin_lock_irqsave(&dev->kernel_qps_lock, flags);
	list_del(&qp->dev_node);
	spin_unlock_irqrestore(&dev->kernel_qps_lock, flags);
	spin_lock_irqsave(&qp->send_cq->lock, flags);
	list_del(&qp->send_cq_node);
	spin_unlock_irqrestore(&qp->send_cq->lock, flags);
	spin_lock_irqsave(&qp->recv_cq->lock, flags);
	list_del(&qp->recv_cq_node);
	spin_unlock_irqrestore(&qp->recv_cq->lock, flags);
	qp->tracked = false;
}

static bool pib_wq_outstanding(struct pib_wq *wq)
{
	return READ_ONCE(wq->ci) != READ_ONCE(wq->pi);
}

/* Completes up to `num` outstanding WQEs of `wq` as flushed; the caller
 * holds the CQ's lock. */
static int pib_flush_wq(struct pib_qp *qp, struct pib_wq *wq, bool recv,
			int num, struct ib_wc *wc)
{
	const struct pib_wqe_ctrl *ctrl;
	int n;

	spin_lock(&wq->lock); /* the slots up to pi are written */
	for (n = 0; n < num && wq->ci != wq->pi; n++) {
		ctrl = pib_wq_slot(wq, wq->ci);
		memset(&wc[n], 0, sizeof(wc[n]));
		wc[n].wr_id = ctrl->wr_id;
		wc[n].status = IB_WC_WR_FLUSH_ERR;
		wc[n].opcode = recv ? IB_WC_RECV : IB_WC_SEND;
		wc[n].qp = &qp->ibqp;
		wc[n].port_num = qp->port;
		WRITE_ONCE(wq->ci, wq->ci + 1);
	}
	spin_unlock(&wq->lock);
	return n;
}

static int pib_poll_flushed(struct pib_cq *cq, int num, struct ib_wc *wc)
{
	struct pib_qp *qp;
	int n = 0;

	list_for_each_entry (qp, &cq->send_qps, send_cq_node)
		n += pib_flush_wq(qp, &qp->sq, false, num - n, wc + n);
	list_for_each_entry (qp, &cq->recv_qps, recv_cq_node)
		if (!qp->ibqp.srq)
			n += pib_flush_wq(qp, &qp->rq, true, num - n, wc + n);
	return n;
}

/* Whether pib_poll_flushed() has something to give; under the CQ's lock. */
static bool pib_cq_flushable(struct pib_cq *cq)
{
	struct pib_qp *qp;

	list_for_each_entry (qp, &cq->send_qps, send_cq_node)
		if (pib_wq_outstanding(&qp->sq))
			return true;
	list_for_each_entry (qp, &cq->recv_qps, recv_cq_node)
		if (!qp->ibqp.srq && pib_wq_outstanding(&qp->rq))
			return true;
	return false;
}

/*
 * Makes the users of the CQs of every kernel QP with outstanding WQEs poll
 * them. From a work item, with bottom halves off, so that a completion
 * handler that schedules NAPI or irq_poll runs its softirq when they are
 * back on, and never from inside a caller's post_send.
 */
void pib_flush_work(struct work_struct *work)
{
	struct pib_dev *dev = container_of(work, struct pib_dev, flush_work);
	struct pib_qp *qp;
	unsigned long flags;

	local_bh_disable();
	spin_lock_irqsave(&dev->kernel_qps_lock, flags);
	list_for_each_entry (qp, &dev->kernel_qps, dev_node) {
		if (pib_wq_outstanding(&qp->sq))
			pib_cq_notify(qp->send_cq);
		if (!qp->ibqp.srq && pib_wq_outstanding(&qp->rq))
			pib_cq_notify(qp->recv_cq);
	}
	spin_unlock_irqrestore(&dev->kernel_qps_lock, flags);
	local_bh_enable();
}

void pib_request_flush(struct pib_dev *dev)
{
	if (unlikely(test_bit(PIB_DEV_FATAL, &dev->state)))
		queue_work(system_wq, &dev->flush_work);
}

int pib_poll_cq(struct ib_cq *ibcq, int num, struct ib_wc *wc)
{
	struct pib_dev *dev = to_pdev(ibcq->device);
	struct pib_cq *cq = to_pcq(ibcq);
	struct pib_cqe *cqe;
	unsigned long flags;
	int n = 0;

	spin_lock_irqsave(&cq->lock, flags);
	while (n < num && (cqe = pib_next_cqe(cq))) {
		pib_cqe_to_wc(dev, cq, cqe, &wc[n++]);
		cq->ci++;
	}
	if (unlikely(test_bit(PIB_DEV_FATAL, &dev->state)))
		n += pib_poll_flushed(cq, num - n, wc + n);
	/* Tell the device how far we got, so it can detect overruns. */
	WRITE_ONCE(*(u32 *)cq->ci_record.va, cq->ci);
	spin_unlock_irqrestore(&cq->lock, flags);
	return n;
}

int pib_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags)
{
	struct pib_dev *dev = to_pdev(ibcq->device);
	struct pib_cq *cq = to_pcq(ibcq);
	u32 arm = (flags & IB_CQ_SOLICITED_MASK) == IB_CQ_SOLICITED
			  ? PIB_CQ_ARM_SOLICITED
			  : PIB_CQ_ARM_NEXT;
	unsigned long irqflags;
	int missed = 0;

	writeq((u64)arm << 32 | cq->cqn, dev->kdb + PIB_DB_CQ_ARM);
	if (flags & IB_CQ_REPORT_MISSED_EVENTS) {
		spin_lock_irqsave(&cq->lock, irqflags);
		missed = pib_next_cqe(cq) != NULL ||
			 (test_bit(PIB_DEV_FATAL, &dev->state) &&
			  pib_cq_flushable(cq));
		spin_unlock_irqrestore(&cq->lock, irqflags);
	}
	return missed;
}
