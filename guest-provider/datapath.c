// SPDX-License-Identifier: GPL-2.0-only OR Linux-OpenIB
/*
 * The kernel-bypass data path: WQEs written straight into the rings the
 * device fetches from, doorbells written to the mmap'd doorbell page, and
 * CQEs read from the CQ ring by their phase bit (docs/prm.md §6, §7).
 */
#include <errno.h>
#include <string.h>

#include <util/udma_barrier.h>

#include "pib.h"

static int pib_wr_opcode(enum ibv_wr_opcode op)
{
	switch (op) {
	case IBV_WR_SEND:
		return PIB_WR_SEND;
	case IBV_WR_SEND_WITH_IMM:
		return PIB_WR_SEND_IMM;
	case IBV_WR_RDMA_WRITE:
		return PIB_WR_RDMA_WRITE;
	case IBV_WR_RDMA_WRITE_WITH_IMM:
		return PIB_WR_RDMA_WRITE_IMM;
	case IBV_WR_RDMA_READ:
		return PIB_WR_RDMA_READ;
	case IBV_WR_ATOMIC_CMP_AND_SWP:
		return PIB_WR_ATOMIC_CMP_AND_SWP;
	case IBV_WR_ATOMIC_FETCH_AND_ADD:
		return PIB_WR_ATOMIC_FETCH_AND_ADD;
	case IBV_WR_LOCAL_INV:
		return PIB_WR_LOCAL_INV;
	case IBV_WR_SEND_WITH_INV:
		return PIB_WR_SEND_INV;
	case IBV_WR_BIND_MW:
		return PIB_WR_BIND_MW;
	default:
		return -1; /* TSO, atomic write, flush: not offered */
	}
}

/* Writes one send WQE into `wqe`; 0 or an errno. */
/* Whether a QP of `type` has operation `opcode` (IBA 10.7.2.2). */
static bool pib_opcode_allowed(enum ibv_qp_type type, int opcode)
{
	bool send = opcode == PIB_WR_SEND || opcode == PIB_WR_SEND_IMM;
	bool rdma_write =
		opcode == PIB_WR_RDMA_WRITE || opcode == PIB_WR_RDMA_WRITE_IMM;
	bool local = opcode == PIB_WR_LOCAL_INV || opcode == PIB_WR_BIND_MW;

	if (type == IBV_QPT_UD)
		return send;
	if (type == IBV_QPT_UC)
		return send || rdma_write || local;
	return true;
}

/*
 * The segments between the control segment and the data: the address
 * vector of a datagram, the remote address of an RDMA operation, and an
 * atomic's operands. Returns where the data goes.
 */
static char *pib_put_remote(struct pib_qp *qp, const struct ibv_send_wr *wr,
			    int opcode, char *seg)
{
	struct pib_wqe_raddr *r = (struct pib_wqe_raddr *)seg;
	struct pib_wqe_atomic *a = (struct pib_wqe_atomic *)(r + 1);
	struct pib_wqe_ud *ud = (struct pib_wqe_ud *)seg;

	if (qp->vqp.qp.qp_type == IBV_QPT_UD) {
		ud->av = container_of(wr->wr.ud.ah, struct pib_ah, ibv_ah)->av;
		ud->remote_qpn = wr->wr.ud.remote_qpn;
		ud->remote_qkey = wr->wr.ud.remote_qkey;
		ud->reserved = 0;
		return (char *)(ud + 1);
	}
	switch (opcode) {
	case PIB_WR_ATOMIC_CMP_AND_SWP:
	case PIB_WR_ATOMIC_FETCH_AND_ADD:
		r->remote_addr = wr->wr.atomic.remote_addr;
		r->rkey = wr->wr.atomic.rkey;
		r->reserved = 0;
		a->swap_add = opcode == PIB_WR_ATOMIC_CMP_AND_SWP
				      ? wr->wr.atomic.swap
				      : wr->wr.atomic.compare_add;
		a->compare = wr->wr.atomic.compare_add;
		return (char *)(a + 1);
	case PIB_WR_SEND:
	case PIB_WR_SEND_IMM:
	case PIB_WR_SEND_INV:
	case PIB_WR_LOCAL_INV:
	case PIB_WR_BIND_MW:
		return seg;
	default:
		r->remote_addr = wr->wr.rdma.remote_addr;
		r->rkey = wr->wr.rdma.rkey;
		r->reserved = 0;
		return (char *)(r + 1);
	}
}

/* The WR's data copied into the WQE; its end, or NULL if it does not fit. */
static char *pib_put_inline(struct pib_qp *qp, const struct ibv_send_wr *wr,
			    int opcode, char *seg, char *end)
{
	struct pib_wqe_inline *in = (struct pib_wqe_inline *)seg;
	uint8_t *data = in->data;
	uint32_t len = 0;
	int i;

	/* What a READ or an atomic fetches lands in memory: never inline. */
	if (opcode == PIB_WR_RDMA_READ || opcode == PIB_WR_ATOMIC_CMP_AND_SWP ||
	    opcode == PIB_WR_ATOMIC_FETCH_AND_ADD)
		return NULL;
	for (i = 0; i < wr->num_sge; i++)
		len += wr->sg_list[i].length;
	if (len > qp->max_inline_data || seg + ((4 + len + 15) & ~15u) > end)
		return NULL;
	for (i = 0; i < wr->num_sge; i++) {
		memcpy(data, (void *)(uintptr_t)wr->sg_list[i].addr,
		       wr->sg_list[i].length);
		data += wr->sg_list[i].length;
	}
	in->byte_count = len | PIB_INLINE_FLAG;
	return seg + ((4 + len + 15) & ~15u);
}

/* The WR's scatter/gather list; its end, or NULL if it does not fit. */
static char *pib_put_sges(const struct ibv_send_wr *wr, char *seg, char *end)
{
	struct pib_wqe_data *d = (struct pib_wqe_data *)seg;
	int i;

	if (seg + wr->num_sge * sizeof(*d) > end)
		return NULL;
	for (i = 0; i < wr->num_sge; i++, d++) {
		d->byte_count = wr->sg_list[i].length;
		d->lkey = wr->sg_list[i].lkey;
		d->addr = wr->sg_list[i].addr;
	}
	return (char *)d;
}

/*
 * A BIND_MW WQE's segment (docs/prm.md §6.7). A window grants remote
 * access only: local write, which the verbs allow in the flags, means
 * nothing for it; a zero-based window is not offered.
 */
char *pib_put_bind(const struct ibv_mw *mw, uint32_t rkey,
		   const struct ibv_mw_bind_info *info, char *seg)
{
	const unsigned int remote = IBV_ACCESS_REMOTE_READ |
				    IBV_ACCESS_REMOTE_WRITE |
				    IBV_ACCESS_REMOTE_ATOMIC;
	struct pib_wqe_bind_mw *b = (struct pib_wqe_bind_mw *)seg;

	if (info->mw_access_flags & ~(remote | IBV_ACCESS_LOCAL_WRITE))
		return NULL;
	b->addr = info->addr;
	b->length = info->length;
	b->mw_key = mw->rkey;
	b->new_rkey = rkey;
	b->mr_key = info->mr ? info->mr->lkey : 0;
	b->access = info->mw_access_flags & remote;
	return (char *)(b + 1);
}

/* The data of a WQE that carries any: inline or a scatter/gather list. */
static char *pib_put_data(struct pib_qp *qp, const struct ibv_send_wr *wr,
			  int opcode, struct pib_wqe_ctrl *ctrl, char *seg,
			  char *end)
{
	switch (opcode) {
	case PIB_WR_LOCAL_INV:
		return seg; /* the control segment alone */
	case PIB_WR_BIND_MW:
		return pib_put_bind(wr->bind_mw.mw, wr->bind_mw.rkey,
				    &wr->bind_mw.bind_info, seg);
	}
	if (wr->send_flags & IBV_SEND_INLINE) {
		ctrl->flags |= PIB_WQE_INLINE;
		return pib_put_inline(qp, wr, opcode, seg, end);
	}
	return pib_put_sges(wr, seg, end);
}

static int pib_build_send_wqe(struct pib_qp *qp, const struct ibv_send_wr *wr,
			      void *wqe)
{
	struct pib_wqe_ctrl *ctrl = wqe;
	char *end = (char *)wqe + ((size_t)1 << qp->sq.log_stride);
	int opcode = pib_wr_opcode(wr->opcode);
	char *seg;

	if (opcode < 0)
		return EOPNOTSUPP;
	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > qp->sq.max_sge ||
	    !pib_opcode_allowed(qp->vqp.qp.qp_type, opcode))
		return EINVAL;
	memset(ctrl, 0, sizeof(*ctrl));
	pib_wqe_ctrl_init(ctrl, qp, wr->wr_id, opcode, wr->send_flags);
	if (opcode == PIB_WR_SEND_IMM || opcode == PIB_WR_RDMA_WRITE_IMM)
		ctrl->imm = wr->imm_data; /* already in wire order */
	if (opcode == PIB_WR_SEND_INV || opcode == PIB_WR_LOCAL_INV)
		ctrl->imm = wr->invalidate_rkey;
	seg = (char *)(ctrl + 1);
	if (qp->vqp.qp.qp_type == IBV_QPT_XRC_SEND) {
		/* The XRC SRQ behind the peer it goes to (docs/prm.md §6.8). */
		struct pib_wqe_xrc *x = (struct pib_wqe_xrc *)seg;

		memset(x, 0, sizeof(*x));
		x->remote_srqn = wr->qp_type.xrc.remote_srqn;
		seg = (char *)(x + 1);
	}
	seg = pib_put_remote(qp, wr, opcode, seg);
	seg = pib_put_data(qp, wr, opcode, ctrl, seg, end);
	if (!seg)
		return EINVAL;
	ctrl->num_ds = (seg - (char *)wqe) / 16;
	return 0;
}

/*
 * Type 1 windows are bound through ibv_bind_mw only (pib_bind_mw), as the
 * verbs say; type 2 windows through IBV_WR_BIND_MW.
 */
static bool pib_bind_through_post(const struct ibv_send_wr *wr)
{
	return wr->opcode != IBV_WR_BIND_MW ||
	       (wr->bind_mw.mw && wr->bind_mw.mw->type == IBV_MW_TYPE_2);
}

int pib_post_send(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		  struct ibv_send_wr **bad_wr)
{
	struct ibv_send_wr *w;

	for (w = wr; w; w = w->next) {
		if (!pib_bind_through_post(w)) {
			*bad_wr = w;
			return EINVAL;
		}
	}
	return pib_post_send_any(ibqp, wr, bad_wr);
}

/* Binds a type 1 window with a BIND_MW WQE; its new R_Key once posted. */
int pib_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw,
		struct ibv_mw_bind *mw_bind)
{
	struct ibv_send_wr wr = {}, *bad;
	int err;

	if (mw->type != IBV_MW_TYPE_1 ||
	    pib_protection_of(mw->pd) != pib_protection_of(qp->pd))
		return EINVAL;
	wr.wr_id = mw_bind->wr_id;
	wr.opcode = IBV_WR_BIND_MW;
	wr.send_flags = mw_bind->send_flags;
	wr.bind_mw.mw = mw;
	wr.bind_mw.rkey = ibv_inc_rkey(mw->rkey);
	wr.bind_mw.bind_info = mw_bind->bind_info;
	err = pib_post_send_any(qp, &wr, &bad);
	if (!err)
		mw->rkey = wr.bind_mw.rkey;
	return err;
}

int pib_post_send_any(struct ibv_qp *ibqp, struct ibv_send_wr *wr,
		      struct ibv_send_wr **bad_wr)
{
	struct pib_qp *qp = to_pqp(ibqp);
	struct pib_wq *sq = &qp->sq;
	uint32_t posted;
	int err = 0;

	/* Nothing may be posted yet; an XRC receive QP has no SQ at all. */
	if (ibqp->state == IBV_QPS_RESET || ibqp->qp_type == IBV_QPT_XRC_RECV) {
		*bad_wr = wr;
		return EINVAL;
	}
	pthread_spin_lock(&sq->lock);
	posted = sq->pi;
	for (; wr; wr = wr->next) {
		if (sq->pi - __atomic_load_n(&sq->ci, __ATOMIC_ACQUIRE) >=
		    (1u << sq->log_count)) {
			err = ENOMEM;
			break;
		}
		err = pib_build_send_wqe(qp, wr, pib_wq_slot(sq, sq->pi));
		if (err)
			break;
		sq->pi++;
	}
	if (err)
		*bad_wr = wr;
	if (sq->pi != posted) {
		/* The WQEs must be in memory before the device hears of them.
		 */
		udma_to_device_barrier();
		pib_ring_doorbell(ibqp->context, PIB_DB_SQ, qp->qpn, sq->pi);
	}
	pthread_spin_unlock(&sq->lock);
	return err;
}

static int pib_write_recv_wqe(struct pib_wq *wq, const struct ibv_recv_wr *wr)
{
	struct pib_wqe_ctrl *ctrl = pib_wq_slot(wq, wq->pi);
	struct pib_wqe_data *d = (struct pib_wqe_data *)(ctrl + 1);
	int i;

	if (wr->num_sge < 0 || (uint32_t)wr->num_sge > wq->max_sge ||
	    sizeof(*ctrl) + wr->num_sge * sizeof(*d) >
		    ((size_t)1 << wq->log_stride))
		return EINVAL;
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

/* Posts receive WQEs to `wq`, then rings `doorbell` for object `number`. */
static int pib_post_to_rq(struct ibv_context *context, struct pib_wq *wq,
			  uint32_t doorbell, uint32_t number,
			  struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr)
{
	uint32_t posted;
	int err = 0;

	pthread_spin_lock(&wq->lock);
	posted = wq->pi;
	for (; wr; wr = wr->next) {
		if (wq->pi - __atomic_load_n(&wq->ci, __ATOMIC_ACQUIRE) >=
		    (1u << wq->log_count)) {
			err = ENOMEM;
			break;
		}
		err = pib_write_recv_wqe(wq, wr);
		if (err)
			break;
		wq->pi++;
	}
	if (err)
		*bad_wr = wr;
	if (wq->pi != posted) {
		udma_to_device_barrier();
		pib_ring_doorbell(context, doorbell, number, wq->pi);
	}
	pthread_spin_unlock(&wq->lock);
	return err;
}

int pib_post_recv(struct ibv_qp *ibqp, struct ibv_recv_wr *wr,
		  struct ibv_recv_wr **bad_wr)
{
	struct pib_qp *qp = to_pqp(ibqp);

	/* XRC QPs receive through XRC SRQs only. */
	if (ibqp->srq || ibqp->state == IBV_QPS_RESET ||
	    ibqp->qp_type == IBV_QPT_XRC_SEND ||
	    ibqp->qp_type == IBV_QPT_XRC_RECV) {
		*bad_wr = wr;
		return EINVAL;
	}
	return pib_post_to_rq(ibqp->context, &qp->rq, PIB_DB_RQ, qp->qpn, wr,
			      bad_wr);
}

int pib_post_srq_recv(struct ibv_srq *ibsrq, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr)
{
	struct pib_srq *srq = to_psrq(ibsrq);

	return pib_post_to_rq(ibsrq->context, &srq->wq, PIB_DB_SRQ, srq->srqn,
			      wr, bad_wr);
}

static const enum ibv_wc_opcode pib_wc_opcodes[] = {
	[PIB_WC_SEND] = IBV_WC_SEND,
	[PIB_WC_RDMA_WRITE] = IBV_WC_RDMA_WRITE,
	[PIB_WC_RDMA_READ] = IBV_WC_RDMA_READ,
	[PIB_WC_COMP_SWAP] = IBV_WC_COMP_SWAP,
	[PIB_WC_FETCH_ADD] = IBV_WC_FETCH_ADD,
	[PIB_WC_LOCAL_INV] = IBV_WC_LOCAL_INV,
	[PIB_WC_BIND_MW] = IBV_WC_BIND_MW,
	[PIB_WC_FLUSH] = IBV_WC_FLUSH,
	[PIB_WC_ATOMIC_WRITE] = IBV_WC_ATOMIC_WRITE,
};

/* The WQE a CQE completes is free again. */
static void pib_retire(struct pib_context *ctx, const struct pib_cqe *cqe)
{
	struct pib_qp *qp =
		cqe->qpn < ctx->qp_table_size ? ctx->qp_table[cqe->qpn] : NULL;
	struct pib_wq *wq;

	/* The device takes receive WQEs in ring order and copies them. A
	 * receive names the SRQ it used: an XRC SRQ's QP is not this
	 * process's. */
	if (cqe->opcode & 0x80 && cqe->flags & PIB_CQE_SRQ) {
		struct pib_srq *srq = pib_srq_lookup(ctx, cqe->srqn);

		if (srq)
			__atomic_fetch_add(&srq->wq.ci, 1, __ATOMIC_RELEASE);
		return;
	}
	if (!qp)
		return;
	if (cqe->opcode & 0x80) {
		wq = &qp->rq;
		__atomic_fetch_add(&wq->ci, 1, __ATOMIC_RELEASE);
		return;
	}
	/* The SQ completes in order; this also retires unsignalled WQEs. */
	wq = &qp->sq;
	__atomic_store_n(&wq->ci,
			 wq->ci + (uint16_t)(cqe->wqe_index + 1 - wq->ci),
			 __ATOMIC_RELEASE);
}

static void pib_cqe_to_wc(const struct pib_cqe *cqe, struct ibv_wc *wc)
{
	memset(wc, 0, sizeof(*wc));
	wc->wr_id = cqe->wr_id;
	wc->status = cqe->status;
	wc->vendor_err = cqe->vendor_err;
	wc->qp_num = cqe->qpn;
	if (cqe->opcode == PIB_WC_RECV)
		wc->opcode = IBV_WC_RECV;
	else if (cqe->opcode == PIB_WC_RECV_RDMA_WITH_IMM)
		wc->opcode = IBV_WC_RECV_RDMA_WITH_IMM;
	else if (cqe->opcode <
		 sizeof(pib_wc_opcodes) / sizeof(pib_wc_opcodes[0]))
		wc->opcode = pib_wc_opcodes[cqe->opcode];
	wc->byte_len = cqe->byte_len;
	if (cqe->flags & PIB_CQE_WITH_IMM) {
		wc->imm_data = cqe->imm;
		wc->wc_flags |= IBV_WC_WITH_IMM;
	}
	if (cqe->flags & PIB_CQE_WITH_INV) {
		wc->invalidated_rkey = cqe->imm;
		wc->wc_flags |= IBV_WC_WITH_INV;
	}
	if (cqe->flags & PIB_CQE_GRH)
		wc->wc_flags |= IBV_WC_GRH;
	wc->src_qp = cqe->src_qp;
	wc->slid = cqe->slid;
	wc->sl = cqe->sl;
	wc->dlid_path_bits = cqe->dlid_path_bits;
	wc->pkey_index = cqe->pkey_index;
}

static struct pib_cqe *pib_cq_slot(struct pib_cq *cq, uint32_t index)
{
	return (struct pib_cqe *)((char *)cq->buf.addr +
				  (size_t)(index & ((1u << cq->log_size) - 1)) *
					  PIB_CQE_SIZE);
}

/* CQE `index` if the device has written it, or NULL; under the CQ lock. */
static struct pib_cqe *pib_cqe_at(struct pib_cq *cq, uint32_t index)
{
	struct pib_cqe *cqe = pib_cq_slot(cq, index);
	uint8_t phase = ((index >> cq->log_size) & 1) ^ 1;

	if ((*(volatile uint8_t *)&cqe->flags & PIB_CQE_PHASE) != phase)
		return NULL;
	udma_from_device_barrier(); /* the entry only after its phase bit */
	return cqe;
}

static struct pib_cqe *pib_next_cqe(struct pib_cq *cq)
{
	return pib_cqe_at(cq, cq->ci);
}

/* The index after the last CQE written; the caller holds the lock. */
static uint32_t pib_cq_end(struct pib_cq *cq)
{
	uint32_t end = cq->ci;

	while (end - cq->ci < 1u << cq->log_size && pib_cqe_at(cq, end))
		end++;
	return end;
}

uint32_t pib_cq_waiting(struct pib_cq *cq)
{
	return pib_cq_end(cq) - cq->ci;
}

/*
 * A QP went to RESET: its CQEs not yet polled are dropped, as if polled
 * (an SRQ's WQEs they consumed are retired), and the others keep their
 * order. They move towards the producer end, so the device, which writes
 * after the last valid CQE, and the consumer still agree on every index;
 * each slot written keeps the phase bit its index has.
 */
void pib_cq_clean(struct pib_cq *cq, uint32_t qpn)
{
	struct pib_context *ctx = to_pctx(cq->verbs_cq.cq.context);
	uint32_t end, dropped = 0, k;

	pthread_spin_lock(&cq->lock);
	end = pib_cq_end(cq);
	for (k = end - cq->ci; k-- > 0;) {
		struct pib_cqe *cqe = pib_cq_slot(cq, cq->ci + k);
		struct pib_cqe *to;
		uint8_t phase;

		if (cqe->qpn == qpn) {
			pib_retire(ctx, cqe);
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
		*cq->ci_record = cq->ci;
	}
	pthread_spin_unlock(&cq->lock);
}

/* Consumes a CQE: its WQE is free again. */
static void pib_consume(struct pib_cq *cq, const struct pib_cqe *cqe)
{
	pib_retire(to_pctx(cq->verbs_cq.cq.context), cqe);
	cq->ci++;
}

int pib_poll_cq(struct ibv_cq *ibcq, int num, struct ibv_wc *wc)
{
	struct pib_cq *cq = to_pcq(ibcq);
	struct pib_cqe *cqe;
	int n = 0;

	pthread_spin_lock(&cq->lock);
	while (n < num && (cqe = pib_next_cqe(cq))) {
		pib_cqe_to_wc(cqe, &wc[n++]);
		pib_consume(cq, cqe);
	}
	/* Tell the device how far we got, so it can tell an overrun. */
	if (n)
		*cq->ci_record = cq->ci;
	pthread_spin_unlock(&cq->lock);
	return n;
}

/* ---- extended polling (ibv_start_poll and the ibv_wc_read_*() calls)
 * ---------- */

static int pib_poll_one(struct ibv_cq_ex *cqex)
{
	struct pib_cq *cq = to_pcq_ex(cqex);
	struct pib_cqe *cqe = pib_next_cqe(cq);

	if (!cqe)
		return ENOENT;
	cq->current = cqe;
	cqex->wr_id = cqe->wr_id;
	cqex->status = cqe->status;
	pib_consume(cq, cqe);
	return 0;
}

static int pib_start_poll(struct ibv_cq_ex *cqex, struct ibv_poll_cq_attr *attr)
{
	struct pib_cq *cq = to_pcq_ex(cqex);
	int err;

	if (attr->comp_mask)
		return EINVAL;
	pthread_spin_lock(&cq->lock);
	err = pib_poll_one(cqex);
	if (err) /* ibv_end_poll() is called only after a success */
		pthread_spin_unlock(&cq->lock);
	return err;
}

static int pib_next_poll(struct ibv_cq_ex *cqex)
{
	return pib_poll_one(cqex);
}

static void pib_end_poll(struct ibv_cq_ex *cqex)
{
	struct pib_cq *cq = to_pcq_ex(cqex);

	*cq->ci_record = cq->ci;
	cq->current = NULL;
	pthread_spin_unlock(&cq->lock);
}

/* The CQE the poll stands on. It was consumed, but the device cannot
 * reuse its slot before the CI record says so, at ibv_end_poll(). */
static const struct pib_cqe *pib_current(struct ibv_cq_ex *cqex)
{
	return to_pcq_ex(cqex)->current;
}

static enum ibv_wc_opcode pib_read_opcode(struct ibv_cq_ex *cqex)
{
	struct ibv_wc wc;

	pib_cqe_to_wc(pib_current(cqex), &wc);
	return wc.opcode;
}

static uint32_t pib_read_vendor_err(struct ibv_cq_ex *cqex)
{
	return pib_current(cqex)->vendor_err;
}

static uint32_t pib_read_byte_len(struct ibv_cq_ex *cqex)
{
	return pib_current(cqex)->byte_len;
}

/* Immediate data is kept in wire order; an invalidated R_Key is not. */
static __be32 pib_read_imm_data(struct ibv_cq_ex *cqex)
{
	const struct pib_cqe *cqe = pib_current(cqex);

	if (cqe->flags & PIB_CQE_WITH_INV)
		return htobe32(cqe->imm);
	return (__be32)cqe->imm;
}

static uint32_t pib_read_qp_num(struct ibv_cq_ex *cqex)
{
	return pib_current(cqex)->qpn;
}

static uint32_t pib_read_src_qp(struct ibv_cq_ex *cqex)
{
	return pib_current(cqex)->src_qp;
}

static unsigned int pib_read_wc_flags(struct ibv_cq_ex *cqex)
{
	struct ibv_wc wc;

	pib_cqe_to_wc(pib_current(cqex), &wc);
	return wc.wc_flags;
}

static uint32_t pib_read_slid(struct ibv_cq_ex *cqex)
{
	return pib_current(cqex)->slid;
}

static uint8_t pib_read_sl(struct ibv_cq_ex *cqex)
{
	return pib_current(cqex)->sl;
}

static uint8_t pib_read_dlid_path_bits(struct ibv_cq_ex *cqex)
{
	return pib_current(cqex)->dlid_path_bits;
}

/* The core clock when the device wrote the CQE (docs/prm.md §7.3). */
static uint64_t pib_read_completion_ts(struct ibv_cq_ex *cqex)
{
	return pib_current(cqex)->timestamp;
}

void pib_cq_ex_set_ops(struct ibv_cq_ex *cq)
{
	cq->start_poll = pib_start_poll;
	cq->next_poll = pib_next_poll;
	cq->end_poll = pib_end_poll;
	cq->read_opcode = pib_read_opcode;
	cq->read_vendor_err = pib_read_vendor_err;
	cq->read_byte_len = pib_read_byte_len;
	cq->read_imm_data = pib_read_imm_data;
	cq->read_qp_num = pib_read_qp_num;
	cq->read_src_qp = pib_read_src_qp;
	cq->read_wc_flags = pib_read_wc_flags;
	cq->read_slid = pib_read_slid;
	cq->read_sl = pib_read_sl;
	cq->read_dlid_path_bits = pib_read_dlid_path_bits;
	cq->read_completion_ts = pib_read_completion_ts;
}

int pib_arm_cq(struct ibv_cq *ibcq, int solicited_only)
{
	struct pib_cq *cq = to_pcq(ibcq);

	pib_ring_doorbell(ibcq->context, PIB_DB_CQ_ARM, cq->cqn,
			  solicited_only ? PIB_CQ_ARM_SOLICITED
					 : PIB_CQ_ARM_NEXT);
	return 0;
}
