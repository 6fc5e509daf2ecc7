// SPDX-License-Identifier: GPL-2.0-only OR Linux-OpenIB
/* CQs, QPs and SRQs: rings in process memory, created through the driver. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>

#include "compat.h"
#include "pib.h"

#define PIB_SEND_HDR_SIZE \
	(sizeof(struct pib_wqe_ctrl) + sizeof(struct pib_wqe_ud))
#define PIB_RECV_HDR_SIZE sizeof(struct pib_wqe_ctrl)
#define PIB_LOG_MIN_STRIDE 6

static unsigned int pib_log2_ceil(uint64_t n)
{
	unsigned int log = 0;

	while ((1ull << log) < n)
		log++;
	return log;
}

/*
 * Whole pages, zeroed: from the application's allocator when `domain` is a
 * parent domain that has one (unless it says IBV_ALLOCATOR_USE_DEFAULT),
 * else the provider's own. The device takes rings of whole pages only
 * (docs/prm.md §3.2): an allocator must honour the alignment asked. The
 * application's memory is its own to keep from a fork's copy-on-write
 * (the allocator's contract, ibv_alloc_parent_domain(3)).
 */
static int pib_buf_alloc(struct pib_buf *buf, size_t length,
			 struct pib_pd *domain, enum pib_resource_type type)
{
	length = (length + PIB_PAGE_SIZE - 1) & ~(size_t)(PIB_PAGE_SIZE - 1);
	buf->domain = NULL;
	buf->type = type;
	if (domain && domain->alloc) {
		void *addr = domain->alloc(&domain->ibv_pd, domain->pd_context,
					   length, PIB_PAGE_SIZE, type);

		if (!addr)
			return ENOMEM;
		if (addr != IBV_ALLOCATOR_USE_DEFAULT) {
			if ((uintptr_t)addr % PIB_PAGE_SIZE) {
				domain->free(&domain->ibv_pd,
					     domain->pd_context, addr, type);
				return EINVAL;
			}
			memset(addr, 0, length);
			buf->addr = addr;
			buf->length = length;
			buf->domain = domain;
			return 0;
		}
	}
	if (posix_memalign(&buf->addr, PIB_PAGE_SIZE, length))
		return ENOMEM;
	memset(buf->addr, 0, length);
	buf->length = length;
	/* A fork must not move the pages the device DMAs to. */
	if (ibv_dontfork_range(buf->addr, length)) {
		free(buf->addr);
		buf->addr = NULL;
		return ENOMEM;
	}
	return 0;
}

static void pib_buf_free(struct pib_buf *buf)
{
	if (!buf->addr)
		return;
	if (buf->domain) {
		buf->domain->free(&buf->domain->ibv_pd, buf->domain->pd_context,
				  buf->addr, buf->type);
	} else {
		ibv_dofork_range(buf->addr, buf->length);
		free(buf->addr);
	}
	buf->addr = NULL;
}

static size_t pib_wq_bytes(const struct pib_wq *wq)
{
	return (size_t)1 << (wq->log_count + wq->log_stride);
}

/* ---- completion queues -----------------------------------------------------
 */

struct pib_ucmd_create_cq {
	struct ibv_create_cq ibv_cmd;
	struct pib_create_cq_cmd drv;
};

struct pib_uresp_create_cq {
	struct ib_uverbs_create_cq_resp ibv_resp;
	struct pib_create_cq_resp drv;
};

/*
 * A CQ ring of at least `cqe` entries, then a page whose first word is
 * the CI record: for a new CQ, and for a CQ being resized.
 */
static int pib_cq_ring_alloc(int cqe, struct pib_pd *domain,
			     struct pib_buf *buf, uint32_t *log_size,
			     volatile uint32_t **ci_record)
{
	size_t ring;
	int err;

	if (cqe < 1)
		return EINVAL;
	*log_size = pib_log2_ceil(cqe < 2 ? 2 : cqe);
	ring = (size_t)PIB_CQE_SIZE << *log_size;
	if (ring < PIB_PAGE_SIZE)
		ring = PIB_PAGE_SIZE;
	err = pib_buf_alloc(buf, ring + PIB_PAGE_SIZE, domain, PIB_RES_CQ);
	if (err)
		return err;
	*ci_record = (volatile uint32_t *)((char *)buf->addr + ring);
	return 0;
}

/*
 * A CQ with its ring of at least `cqe` entries, on parent domain `pd` if
 * not NULL, not yet known to the kernel.
 */
static struct pib_cq *pib_cq_alloc(int cqe, struct ibv_pd *pd,
				   struct pib_create_cq_cmd *drv)
{
	struct pib_cq *cq;
	int err;

	cq = calloc(1, sizeof(*cq));
	if (!cq)
		return NULL;
	cq->domain = pib_domain_hold(pd);
	err = pib_cq_ring_alloc(cqe, cq->domain, &cq->buf, &cq->log_size,
				&cq->ci_record);
	if (err) {
		pib_domain_release(cq->domain);
		free(cq);
		errno = err;
		return NULL;
	}
	pthread_spin_init(&cq->lock, PTHREAD_PROCESS_PRIVATE);
	drv->buf_addr = (uintptr_t)cq->buf.addr;
	drv->ci_record_addr = (uintptr_t)cq->ci_record;
	drv->log_size = cq->log_size;
	return cq;
}

static void pib_cq_free(struct pib_cq *cq)
{
	pthread_spin_destroy(&cq->lock);
	pib_buf_free(&cq->buf);
	pib_domain_release(cq->domain);
	free(cq);
}

struct ibv_cq *pib_create_cq(struct ibv_context *context, int cqe,
			     struct ibv_comp_channel *channel, int comp_vector)
{
	struct pib_uresp_create_cq resp = {};
	struct pib_ucmd_create_cq cmd = {};
	struct pib_cq *cq = pib_cq_alloc(cqe, NULL, &cmd.drv);
	int err;

	if (!cq)
		return NULL;
	err = ibv_cmd_create_cq(context, cqe, channel, comp_vector,
				&cq->verbs_cq.cq, &cmd.ibv_cmd, sizeof(cmd),
				&resp.ibv_resp, sizeof(resp));
	if (err) {
		pib_cq_free(cq);
		errno = err;
		return NULL;
	}
	cq->cqn = resp.drv.cqn;
	return &cq->verbs_cq.cq;
}

struct pib_ucmd_create_cq_ex {
	struct ibv_create_cq_ex ibv_cmd;
	struct pib_create_cq_cmd drv;
};

struct pib_uresp_create_cq_ex {
	struct ib_uverbs_ex_create_cq_resp ibv_resp;
	struct pib_create_cq_resp drv;
};

/* A CQ polled with ibv_start_poll() and the ibv_wc_read_*() accessors. */
struct ibv_cq_ex *pib_create_cq_ex(struct ibv_context *context,
				   struct ibv_cq_init_attr_ex *attr)
{
	struct pib_uresp_create_cq_ex resp = {};
	struct pib_ucmd_create_cq_ex cmd = {};
	struct pib_cq *cq;
	int err;

	/* Completion timestamps in core clock units are offered; wall-clock
	 * ones, VLANs and flow tags are not. A CQ on a parent domain takes
	 * its ring from the domain's allocator. */
	if (attr->wc_flags & ~(uint64_t)(IBV_WC_STANDARD_FLAGS |
					 IBV_WC_EX_WITH_COMPLETION_TIMESTAMP) ||
	    attr->comp_mask & ~(uint32_t)(IBV_CQ_INIT_ATTR_MASK_FLAGS |
					  IBV_CQ_INIT_ATTR_MASK_PD) ||
	    (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_FLAGS &&
	     attr->flags & ~(uint32_t)IBV_CREATE_CQ_ATTR_SINGLE_THREADED)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD &&
	    (!attr->parent_domain || !to_ppd(attr->parent_domain)->protection ||
	     attr->parent_domain->context != context)) {
		errno = EINVAL;
		return NULL;
	}
	cq = pib_cq_alloc(attr->cqe,
			  attr->comp_mask & IBV_CQ_INIT_ATTR_MASK_PD
				  ? attr->parent_domain
				  : NULL,
			  &cmd.drv);
	if (!cq)
		return NULL;
	err = pib_cmd_create_cq_ex(context, attr, &cq->verbs_cq, &cmd.ibv_cmd,
				   sizeof(cmd), &resp.ibv_resp, sizeof(resp));
	if (err) {
		pib_cq_free(cq);
		errno = err;
		return NULL;
	}
	cq->cqn = resp.drv.cqn;
	pib_cq_ex_set_ops(&cq->verbs_cq.cq_ex);
	return &cq->verbs_cq.cq_ex;
}

int pib_destroy_cq(struct ibv_cq *ibcq)
{
	struct pib_cq *cq = to_pcq(ibcq);
	int err = ibv_cmd_destroy_cq(ibcq);

	if (err)
		return err;
	pib_cq_free(cq);
	return 0;
}

/*
 * ibv_modify_cq: completion event moderation, set by the kernel's
 * MODIFY_CQ (docs/prm.md §6.1); the driver checks the limits.
 */
int pib_modify_cq(struct ibv_cq *ibcq, struct ibv_modify_cq_attr *attr)
{
	struct ibv_modify_cq cmd = {};

	return ibv_cmd_modify_cq(ibcq, attr, &cmd, sizeof(cmd));
}

struct pib_ucmd_resize_cq {
	struct ibv_resize_cq ibv_cmd;
	struct pib_resize_cq_cmd drv;
};

struct pib_uresp_resize_cq {
	struct ib_uverbs_resize_cq_resp ibv_resp;
	struct pib_resize_cq_resp drv;
};

/*
 * RESIZE_CQ (docs/prm.md §6.1): the device switches to the new ring and
 * reports how many CQEs were not yet polled; they move to the start of
 * the new ring, first-pass phase, and polling goes on from index 0.
 */
int pib_resize_cq(struct ibv_cq *ibcq, int cqe)
{
	struct pib_cq *cq = to_pcq(ibcq);
	struct pib_uresp_resize_cq resp = {};
	struct pib_ucmd_resize_cq cmd = {};
	volatile uint32_t *ci_record;
	struct pib_buf buf, old;
	uint32_t log_size, pending, k;
	int err;

	err = pib_cq_ring_alloc(cqe, cq->domain, &buf, &log_size, &ci_record);
	if (err)
		return err;
	cmd.drv.buf_addr = (uintptr_t)buf.addr;
	cmd.drv.ci_record_addr = (uintptr_t)ci_record;
	cmd.drv.log_size = log_size;
	pthread_spin_lock(&cq->lock);
	/* Too small for what waits already: the device would refuse it too. */
	if (pib_cq_waiting(cq) > 1u << log_size) {
		pthread_spin_unlock(&cq->lock);
		pib_buf_free(&buf);
		return EINVAL;
	}
	*cq->ci_record = cq->ci; /* the device counts what is left from it */
	err = ibv_cmd_resize_cq(ibcq, cqe, &cmd.ibv_cmd, sizeof(cmd),
				&resp.ibv_resp, sizeof(resp));
	if (err) {
		pthread_spin_unlock(&cq->lock);
		pib_buf_free(&buf);
		return err;
	}
	/* Never more than the new ring holds; a bad count must not overrun it.
	 */
	pending = resp.drv.pending < 1u << log_size ? resp.drv.pending
						    : 1u << log_size;
	for (k = 0; k < pending; k++) {
		struct pib_cqe *from =
			(struct pib_cqe *)((char *)cq->buf.addr +
					   (size_t)((cq->ci + k) &
						    ((1u << cq->log_size) -
						     1)) *
						   PIB_CQE_SIZE);
		struct pib_cqe *to =
			(struct pib_cqe *)((char *)buf.addr +
					   (size_t)k * PIB_CQE_SIZE);

		*to = *from;
		to->flags |= PIB_CQE_PHASE;
	}
	old = cq->buf;
	cq->buf = buf;
	cq->log_size = log_size;
	cq->ci = 0;
	cq->ci_record = ci_record;
	pthread_spin_unlock(&cq->lock);
	pib_buf_free(&old);
	return 0;
}

/* ---- queue pairs
 * -------------------------------------------------------------- */

struct pib_ucmd_create_qp {
	struct ibv_create_qp ibv_cmd;
	struct pib_create_qp_cmd drv;
};

struct pib_uresp_create_qp {
	struct ib_uverbs_create_qp_resp ibv_resp;
	struct pib_create_qp_resp drv;
};

/*
 * The shape of a work queue's ring, as the driver and the device expect it
 * (docs/prm.md §6.3): slots of a power of two, at least 2^6 bytes, that
 * hold `header` bytes and `data` bytes after them, and room for `max_wr`
 * WQEs. The same for every SQ, RQ and SRQ.
 */
static int pib_wq_shape(struct pib_context *ctx, struct pib_wq *wq,
			size_t header, size_t data, uint32_t max_wr,
			uint32_t max_sge)
{
	unsigned int log_stride = pib_log2_ceil(header + data);

	if (log_stride > ctx->log_max_wqe_stride)
		return EINVAL;
	wq->log_stride = log_stride < PIB_LOG_MIN_STRIDE ? PIB_LOG_MIN_STRIDE
							 : log_stride;
	wq->log_count = pib_log2_ceil(max_wr ? max_wr : 1);
	wq->max_sge = max_sge;
	return 0;
}

/* Ring geometry for the capabilities asked for, as the driver expects it. */
static int pib_qp_geometry(struct pib_context *ctx, struct pib_qp *qp,
			   struct ibv_qp_init_attr *attr, bool no_rq)
{
	struct ibv_qp_cap *cap = &attr->cap;
	size_t inline_room = (cap->max_inline_data + 4 + 15) & ~15u;
	size_t send_data = cap->max_send_sge * sizeof(struct pib_wqe_data);
	int err;

	if (cap->max_send_sge > ctx->max_send_sge ||
	    cap->max_recv_sge > ctx->max_recv_sge ||
	    cap->max_inline_data > ctx->max_inline_data)
		return EINVAL;
	/* A send WQE holds its SGEs or its inline data, whichever is more. */
	if (send_data < inline_room)
		send_data = inline_room;
	err = pib_wq_shape(ctx, &qp->sq, PIB_SEND_HDR_SIZE, send_data,
			   cap->max_send_wr, cap->max_send_sge);
	if (err)
		return err;
	qp->max_inline_data = cap->max_inline_data;
	if (no_rq)
		return 0;
	return pib_wq_shape(ctx, &qp->rq, PIB_RECV_HDR_SIZE,
			    cap->max_recv_sge * sizeof(struct pib_wqe_data),
			    cap->max_recv_wr, cap->max_recv_sge);
}

/* Sets SRQ `srqn`'s entry (NULL: removes it). */
static int pib_srq_table_set(struct pib_context *ctx, uint32_t srqn,
			     struct pib_srq *srq)
{
	if (srqn >= ctx->srq_table_size)
		return EPROTO;
	pthread_mutex_lock(&ctx->qp_table_lock);
	__atomic_store_n(&ctx->srq_table[srqn], srq, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ctx->qp_table_lock);
	return 0;
}

int pib_qp_table_add(struct pib_context *ctx, struct pib_qp *qp)
{
	if (qp->qpn >= ctx->qp_table_size)
		return EPROTO;
	pthread_mutex_lock(&ctx->qp_table_lock);
	__atomic_store_n(&ctx->qp_table[qp->qpn], qp, __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ctx->qp_table_lock);
	return 0;
}

void pib_qp_table_remove(struct pib_context *ctx, struct pib_qp *qp)
{
	pthread_mutex_lock(&ctx->qp_table_lock);
	if (qp->qpn < ctx->qp_table_size && ctx->qp_table[qp->qpn] == qp)
		__atomic_store_n(&ctx->qp_table[qp->qpn], NULL,
				 __ATOMIC_RELEASE);
	pthread_mutex_unlock(&ctx->qp_table_lock);
}

/* Whether the device offers what `attr` asks for beyond the capabilities. */
static bool pib_qp_attr_supported(const struct pib_context *ctx,
				  const struct ibv_qp_init_attr_ex *attr)
{
	/* No creation flag is offered; asking for none is fine. */
	if (attr->comp_mask & IBV_QP_INIT_ATTR_CREATE_FLAGS &&
	    attr->create_flags)
		return false;
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS &&
	    attr->send_ops_flags & ~pib_qp_ex_supported_ops(ctx, attr->qp_type))
		return false;
	/* An XRC receive QP is in an XRC domain and has nothing else. */
	if (attr->qp_type == IBV_QPT_XRC_RECV)
		return (attr->comp_mask & ~IBV_QP_INIT_ATTR_CREATE_FLAGS) ==
			       IBV_QP_INIT_ATTR_XRCD &&
		       attr->xrcd;
	if (attr->comp_mask &
		    ~(IBV_QP_INIT_ATTR_PD | IBV_QP_INIT_ATTR_CREATE_FLAGS |
		      IBV_QP_INIT_ATTR_SEND_OPS_FLAGS) ||
	    !attr->pd)
		return false;
	return attr->qp_type == IBV_QPT_RC || attr->qp_type == IBV_QPT_UC ||
	       attr->qp_type == IBV_QPT_UD || attr->qp_type == IBV_QPT_XRC_SEND;
}

/*
 * An XRC receive QP (XRC TGT, docs/prm.md §6.8) is the kernel's: it has no
 * ring here, takes no doorbell, and its receives complete on the XRC
 * SRQs' CQs, which name the SRQ.
 */
static struct ibv_qp *pib_create_xrc_recv_qp(struct ibv_context *context,
					     struct ibv_qp_init_attr_ex *attr)
{
	struct pib_uresp_create_qp resp = {};
	struct pib_ucmd_create_qp cmd = {};
	struct pib_qp *qp = calloc(1, sizeof(*qp));
	int err;

	if (!qp)
		return NULL;
	err = ibv_cmd_create_qp_ex(context, &qp->vqp, attr, &cmd.ibv_cmd,
				   sizeof(cmd), &resp.ibv_resp, sizeof(resp));
	if (err) {
		free(qp);
		errno = err;
		return NULL;
	}
	qp->qpn = qp->vqp.qp.qp_num;
	pthread_spin_init(&qp->sq.lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&qp->rq.lock, PTHREAD_PROCESS_PRIVATE);
	return &qp->vqp.qp;
}

/* Both creation verbs end here; attr->cap is filled with what was made. */
struct ibv_qp *pib_create_qp_ex(struct ibv_context *context,
				struct ibv_qp_init_attr_ex *attr)
{
	struct pib_context *ctx = to_pctx(context);
	struct pib_uresp_create_qp resp = {};
	struct pib_ucmd_create_qp cmd = {};
	struct ibv_qp_init_attr_ex plain;
	struct ibv_qp_init_attr geometry;
	struct pib_qp *qp;
	bool no_rq;
	int err;

	if (!pib_qp_attr_supported(ctx, attr)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (attr->qp_type == IBV_QPT_XRC_RECV)
		return pib_create_xrc_recv_qp(context, attr);
	qp = calloc(1, sizeof(*qp));
	if (!qp)
		return NULL;
	/* An XRC send QP has no receive side: no RQ, as with an SRQ. */
	no_rq = attr->srq || attr->qp_type == IBV_QPT_XRC_SEND;
	geometry = (struct ibv_qp_init_attr){.cap = attr->cap};
	if (no_rq)
		geometry.cap.max_recv_wr = geometry.cap.max_recv_sge = 0;
	err = pib_qp_geometry(ctx, qp, &geometry, no_rq);
	if (err)
		goto err_free;
	qp->domain = pib_domain_hold(attr->pd);
	err = pib_buf_alloc(&qp->sq.buf, pib_wq_bytes(&qp->sq), qp->domain,
			    PIB_RES_SQ);
	if (err)
		goto err_free;
	if (!no_rq) {
		err = pib_buf_alloc(&qp->rq.buf, pib_wq_bytes(&qp->rq),
				    qp->domain, PIB_RES_RQ);
		if (err)
			goto err_sq;
	}
	cmd.drv.sq_buf_addr = (uintptr_t)qp->sq.buf.addr;
	cmd.drv.rq_buf_addr = (uintptr_t)qp->rq.buf.addr;
	cmd.drv.sq_log_wqe_count = qp->sq.log_count;
	cmd.drv.sq_log_wqe_stride = qp->sq.log_stride;
	cmd.drv.rq_log_wqe_count = qp->rq.log_count;
	cmd.drv.rq_log_wqe_stride = qp->rq.log_stride;
	/* What the kernel command takes: the attributes without the flags. */
	plain = *attr;
	plain.comp_mask &= ~IBV_QP_INIT_ATTR_CREATE_FLAGS;
	err = ibv_cmd_create_qp_ex(context, &qp->vqp, &plain, &cmd.ibv_cmd,
				   sizeof(cmd), &resp.ibv_resp, sizeof(resp));
	if (err)
		goto err_rq;
	attr->cap = plain.cap;
	qp->qpn = resp.drv.qpn;
	qp->signal_all = attr->sq_sig_all;
	/* What the rings really hold, as the driver reported it. */
	qp->sq.max_sge = attr->cap.max_send_sge;
	qp->rq.max_sge = attr->cap.max_recv_sge;
	qp->max_inline_data = attr->cap.max_inline_data;
	pthread_spin_init(&qp->sq.lock, PTHREAD_PROCESS_PRIVATE);
	pthread_spin_init(&qp->rq.lock, PTHREAD_PROCESS_PRIVATE);
	if (attr->comp_mask & IBV_QP_INIT_ATTR_SEND_OPS_FLAGS)
		pib_qp_ex_set_ops(qp, attr->send_ops_flags);
	err = pib_qp_table_add(ctx, qp);
	if (err) {
		ibv_cmd_destroy_qp(&qp->vqp.qp);
		goto err_rq;
	}
	return &qp->vqp.qp;

err_rq:
	pib_buf_free(&qp->rq.buf);
err_sq:
	pib_buf_free(&qp->sq.buf);
err_free:
	pib_domain_release(qp->domain);
	free(qp);
	errno = err;
	return NULL;
}

struct ibv_qp *pib_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
	struct ibv_qp_init_attr_ex attr_ex = {
		.qp_context = attr->qp_context,
		.send_cq = attr->send_cq,
		.recv_cq = attr->recv_cq,
		.srq = attr->srq,
		.cap = attr->cap,
		.qp_type = attr->qp_type,
		.sq_sig_all = attr->sq_sig_all,
		.comp_mask = IBV_QP_INIT_ATTR_PD,
		.pd = pd,
	};
	struct ibv_qp *qp = pib_create_qp_ex(pd->context, &attr_ex);

	if (qp)
		attr->cap = attr_ex.cap;
	return qp;
}

int pib_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr)
{
	struct ibv_query_qp cmd;

	return ibv_cmd_query_qp(qp, attr, attr_mask, init_attr, &cmd,
				sizeof(cmd));
}

/* Drops the CQEs `ibqp` left unpolled in its CQs. */
static void pib_qp_clean_cqs(struct ibv_qp *ibqp)
{
	/* XRC QPs: a send QP has no receive CQ, a receive QP no CQ. */
	if (ibqp->recv_cq)
		pib_cq_clean(to_pcq(ibqp->recv_cq), ibqp->qp_num);
	if (ibqp->send_cq && ibqp->send_cq != ibqp->recv_cq)
		pib_cq_clean(to_pcq(ibqp->send_cq), ibqp->qp_num);
}

/*
 * A QP back in RESET starts over, as the device's does (docs/prm.md §7):
 * its queues count from 0, and the CQEs it left unpolled are dropped, so
 * a flush completion of its ERROR state does not meet its next user.
 */
int pib_modify_qp(struct ibv_qp *ibqp, struct ibv_qp_attr *attr, int attr_mask)
{
	struct pib_qp *qp = to_pqp(ibqp);
	struct ibv_modify_qp cmd;
	int err;

	err = ibv_cmd_modify_qp(ibqp, attr, attr_mask, &cmd, sizeof(cmd));
	if (err || !(attr_mask & IBV_QP_STATE) ||
	    attr->qp_state != IBV_QPS_RESET)
		return err;
	pib_qp_clean_cqs(ibqp);
	pthread_spin_lock(&qp->sq.lock);
	qp->sq.pi = 0;
	__atomic_store_n(&qp->sq.ci, 0, __ATOMIC_RELEASE);
	pthread_spin_unlock(&qp->sq.lock);
	pthread_spin_lock(&qp->rq.lock);
	qp->rq.pi = 0;
	__atomic_store_n(&qp->rq.ci, 0, __ATOMIC_RELEASE);
	pthread_spin_unlock(&qp->rq.lock);
	return 0;
}

/*
 * Once the device has let the QP go, the CQEs it left unpolled go too, as
 * mlx5's and mlx4's providers drop them: a consumer that polls after the
 * destroy (libfabric's RxM flushes its CQ once a connection's endpoint is
 * closed) would otherwise take a completion for memory it has freed.
 */
int pib_destroy_qp(struct ibv_qp *ibqp)
{
	struct pib_qp *qp = to_pqp(ibqp);
	int err = ibv_cmd_destroy_qp(ibqp);

	if (err)
		return err;
	pib_qp_clean_cqs(ibqp);
	pib_qp_table_remove(to_pctx(ibqp->context), qp);
	pthread_spin_destroy(&qp->sq.lock);
	pthread_spin_destroy(&qp->rq.lock);
	pib_buf_free(&qp->rq.buf);
	pib_buf_free(&qp->sq.buf);
	pib_domain_release(qp->domain);
	free(qp);
	return 0;
}

/* ---- shared receive queues
 * ------------------------------------------------------ */

/* An SRQ's ring: room for max_wr WQEs, and 2 at least (docs/prm.md §6.4). */
static int pib_srq_ring_alloc(struct pib_context *ctx, struct pib_srq *srq,
			      const struct ibv_srq_attr *attr)
{
	int err = pib_wq_shape(ctx, &srq->wq, PIB_RECV_HDR_SIZE,
			       attr->max_sge * sizeof(struct pib_wqe_data),
			       attr->max_wr < 2 ? 2 : attr->max_wr,
			       attr->max_sge);

	return err ? err
		   : pib_buf_alloc(&srq->wq.buf, pib_wq_bytes(&srq->wq),
				   srq->domain, PIB_RES_SRQ);
}

struct pib_uresp_create_srq {
	struct ib_uverbs_create_srq_resp ibv_resp;
	struct pib_create_srq_resp drv;
};

/* The classic verb: a basic SRQ, made as ibv_create_srq_ex makes one. */
struct ibv_srq *pib_create_srq(struct ibv_pd *pd,
			       struct ibv_srq_init_attr *attr)
{
	struct ibv_srq_init_attr_ex ex = {
		.srq_context = attr->srq_context,
		.attr = attr->attr,
		.comp_mask = IBV_SRQ_INIT_ATTR_PD,
		.pd = pd,
	};
	struct ibv_srq *srq = pib_create_srq_ex(pd->context, &ex);

	if (srq)
		attr->attr = ex.attr;
	return srq;
}

struct pib_ucmd_resize_srq {
	struct ibv_modify_srq ibv_cmd;
	struct pib_resize_srq_cmd drv;
};

/*
 * IBV_SRQ_MAX_WR (RESIZE_SRQ, docs/prm.md §6.4): the WQEs not seen
 * completed go to the start of a new ring of the same stride, then the
 * device switches and renumbers from the oldest of them. Completions
 * polled meanwhile still retire in order: the count they advance is
 * rebased, not reset.
 */
static int pib_resize_srq(struct ibv_srq *ibsrq, struct ibv_srq_attr *attr,
			  int attr_mask)
{
	struct pib_context *ctx = to_pctx(ibsrq->context);
	struct pib_srq *srq = to_psrq(ibsrq);
	struct pib_ucmd_resize_srq cmd = {};
	struct pib_wq *wq = &srq->wq;
	struct pib_wq shape = *wq;
	struct pib_buf old;
	uint32_t base, i;
	int err;

	if (!attr->max_wr)
		return EINVAL;
	err = pib_wq_shape(ctx, &shape, PIB_RECV_HDR_SIZE,
			   wq->max_sge * sizeof(struct pib_wqe_data),
			   attr->max_wr < 2 ? 2 : attr->max_wr, wq->max_sge);
	if (!err && shape.log_stride != wq->log_stride)
		err = EINVAL;
	if (!err)
		err = pib_buf_alloc(&shape.buf, pib_wq_bytes(&shape),
				    srq->domain, PIB_RES_SRQ);
	if (err)
		return err;
	pthread_spin_lock(&wq->lock);
	base = __atomic_load_n(&wq->ci, __ATOMIC_ACQUIRE);
	if (wq->pi - base > 1u << shape.log_count) {
		pthread_spin_unlock(&wq->lock);
		pib_buf_free(&shape.buf);
		return EINVAL; /* more WQEs wait than the new ring holds */
	}
	for (i = base; i != wq->pi; i++)
		memcpy(pib_wq_slot(&shape, i - base), pib_wq_slot(wq, i),
		       (size_t)1 << wq->log_stride);
	cmd.drv.buf_addr = (uintptr_t)shape.buf.addr;
	cmd.drv.log_wqe_count = shape.log_count;
	cmd.drv.base = base;
	err = ibv_cmd_modify_srq(ibsrq, attr, attr_mask, &cmd.ibv_cmd,
				 sizeof(cmd));
	if (err) {
		pthread_spin_unlock(&wq->lock);
		pib_buf_free(&shape.buf);
		return err;
	}
	old = wq->buf;
	wq->buf = shape.buf;
	wq->log_count = shape.log_count;
	wq->pi -= base;
	__atomic_fetch_sub(&wq->ci, base, __ATOMIC_RELEASE);
	pthread_spin_unlock(&wq->lock);
	pib_buf_free(&old);
	return 0;
}

int pib_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
		   int attr_mask)
{
	struct ibv_modify_srq cmd;

	if (attr_mask & IBV_SRQ_MAX_WR)
		return pib_resize_srq(srq, attr, attr_mask);
	return ibv_cmd_modify_srq(srq, attr, attr_mask, &cmd, sizeof(cmd));
}

int pib_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr)
{
	struct ibv_query_srq cmd;

	return ibv_cmd_query_srq(srq, attr, &cmd, sizeof(cmd));
}

int pib_destroy_srq(struct ibv_srq *ibsrq)
{
	struct pib_srq *srq = to_psrq(ibsrq);
	int err = ibv_cmd_destroy_srq(ibsrq);

	if (err)
		return err;
	pib_srq_table_set(to_pctx(ibsrq->context), srq->srqn, NULL);
	pthread_spin_destroy(&srq->wq.lock);
	pib_buf_free(&srq->wq.buf);
	pib_domain_release(srq->domain);
	free(srq);
	return 0;
}

/* ---- XRC (docs/prm.md §6.8) ------------------------------------------------
 */

struct pib_ucmd_create_xsrq {
	struct ibv_create_xsrq ibv_cmd;
	struct pib_create_srq_cmd drv;
};

/*
 * ibv_create_srq_ex: an XRC SRQ (in an XRC domain, completing to its own
 * CQ) or a basic one. Tag matching is not offered.
 */
struct ibv_srq *pib_create_srq_ex(struct ibv_context *context,
				  struct ibv_srq_init_attr_ex *attr)
{
	const uint32_t known = IBV_SRQ_INIT_ATTR_TYPE | IBV_SRQ_INIT_ATTR_PD |
			       IBV_SRQ_INIT_ATTR_XRCD | IBV_SRQ_INIT_ATTR_CQ;
	struct pib_context *ctx = to_pctx(context);
	struct pib_uresp_create_srq resp = {};
	struct pib_ucmd_create_xsrq cmd = {};
	bool xrc = attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE &&
		   attr->srq_type == IBV_SRQT_XRC;
	struct pib_srq *srq;
	int err;

	if (attr->comp_mask & ~known ||
	    (attr->comp_mask & IBV_SRQ_INIT_ATTR_TYPE &&
	     attr->srq_type != IBV_SRQT_BASIC && !xrc)) {
		errno = EOPNOTSUPP;
		return NULL;
	}
	if (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_PD) ||
	    (xrc && (!(attr->comp_mask & IBV_SRQ_INIT_ATTR_XRCD) ||
		     !(attr->comp_mask & IBV_SRQ_INIT_ATTR_CQ))) ||
	    !attr->attr.max_wr || attr->attr.max_sge > ctx->max_recv_sge) {
		errno = EINVAL;
		return NULL;
	}
	srq = calloc(1, sizeof(*srq));
	if (!srq)
		return NULL;
	srq->domain = pib_domain_hold(attr->pd);
	err = pib_srq_ring_alloc(ctx, srq, &attr->attr);
	if (err)
		goto err_free;
	cmd.drv.buf_addr = (uintptr_t)srq->wq.buf.addr;
	cmd.drv.log_wqe_count = srq->wq.log_count;
	cmd.drv.log_wqe_stride = srq->wq.log_stride;
	err = ibv_cmd_create_srq_ex(context, &srq->vsrq, attr, &cmd.ibv_cmd,
				    sizeof(cmd), &resp.ibv_resp, sizeof(resp));
	if (err)
		goto err_buf;
	srq->srqn = resp.drv.srqn;
	pthread_spin_init(&srq->wq.lock, PTHREAD_PROCESS_PRIVATE);
	err = pib_srq_table_set(ctx, srq->srqn, srq);
	if (err) {
		ibv_cmd_destroy_srq(&srq->vsrq.srq);
		goto err_buf;
	}
	return &srq->vsrq.srq;

err_buf:
	pib_buf_free(&srq->wq.buf);
err_free:
	pib_domain_release(srq->domain);
	free(srq);
	errno = err;
	return NULL;
}

int pib_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num)
{
	*srq_num = to_psrq(srq)->srqn;
	return 0;
}

struct ibv_xrcd *pib_open_xrcd(struct ibv_context *context,
			       struct ibv_xrcd_init_attr *attr)
{
	struct ib_uverbs_open_xrcd_resp resp;
	struct ibv_open_xrcd cmd;
	struct pib_xrcd *xrcd = calloc(1, sizeof(*xrcd));
	int err;

	if (!xrcd)
		return NULL;
	err = ibv_cmd_open_xrcd(context, &xrcd->vxrcd, sizeof(xrcd->vxrcd),
				attr, &cmd, sizeof(cmd), &resp, sizeof(resp));
	if (err) {
		free(xrcd);
		errno = err;
		return NULL;
	}
	return &xrcd->vxrcd.xrcd;
}

int pib_close_xrcd(struct ibv_xrcd *ibxrcd)
{
	struct pib_xrcd *xrcd =
		container_of(ibxrcd, struct pib_xrcd, vxrcd.xrcd);
	int err = ibv_cmd_close_xrcd(&xrcd->vxrcd);

	if (!err)
		free(xrcd);
	return err;
}
