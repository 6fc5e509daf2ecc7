// SPDX-License-Identifier: GPL-2.0-only OR Linux-OpenIB
/*
 * The extended send API (ibv_wr_start, ibv_wr_send, ibv_wr_set_sge, …,
 * ibv_wr_complete): WQEs built field by field straight in the send ring,
 * then one doorbell for the batch. ibv_wr_abort forgets the batch.
 */
#include <errno.h>
#include <string.h>

#include <util/udma_barrier.h>

#include "pib.h"

static struct pib_qp *to_pqp_ex(struct ibv_qp_ex *q)
{
	return container_of(q, struct pib_qp, vqp.qp_ex);
}

static void pib_wr_start(struct ibv_qp_ex *ibqp)
{
	struct pib_qp *qp = to_pqp_ex(ibqp);

	pthread_spin_lock(&qp->sq.lock);
	qp->wr_first = qp->sq.pi;
	qp->wr_cur = NULL;
	qp->wr_err = 0;
}

/* Begins a WQE with `opcode`; returns where its opcode's segment goes. */
static void *pib_wr_begin(struct pib_qp *qp, uint8_t opcode, size_t segment)
{
	struct ibv_qp_ex *ibqp = &qp->vqp.qp_ex;
	struct pib_wqe_ctrl *ctrl;
	size_t xrc = 0;

	if (qp->wr_err)
		return NULL;
	if (qp->sq.pi - __atomic_load_n(&qp->sq.ci, __ATOMIC_ACQUIRE) >=
	    (1u << qp->sq.log_count)) {
		qp->wr_err = ENOMEM;
		return NULL;
	}
	/* UD QPs keep room for the address, which ibv_wr_set_ud_addr fills;
	 * XRC send QPs for the XRC segment, ibv_wr_set_xrc_srqn's. */
	if (qp->vqp.qp.qp_type == IBV_QPT_UD)
		segment = sizeof(struct pib_wqe_ud);
	if (qp->vqp.qp.qp_type == IBV_QPT_XRC_SEND)
		xrc = sizeof(struct pib_wqe_xrc);
	ctrl = pib_wq_slot(&qp->sq, qp->sq.pi);
	memset(ctrl, 0, sizeof(*ctrl) + xrc + segment);
	pib_wqe_ctrl_init(ctrl, qp, ibqp->wr_id, opcode, ibqp->wr_flags);
	ctrl->num_ds = (sizeof(*ctrl) + xrc + segment) / 16;
	qp->wr_cur = ctrl;
	qp->sq.pi++;
	return (char *)(ctrl + 1) + xrc;
}

static void pib_wr_send(struct ibv_qp_ex *ibqp)
{
	pib_wr_begin(to_pqp_ex(ibqp), PIB_WR_SEND, 0);
}

static void pib_wr_send_imm(struct ibv_qp_ex *ibqp, __be32 imm)
{
	struct pib_qp *qp = to_pqp_ex(ibqp);

	if (pib_wr_begin(qp, PIB_WR_SEND_IMM, 0))
		qp->wr_cur->imm = (uint32_t)imm; /* wire order, as it came */
}

/* Invalidation: the key goes where immediate data would. */
static void pib_wr_send_inv(struct ibv_qp_ex *ibqp, uint32_t invalidate_rkey)
{
	struct pib_qp *qp = to_pqp_ex(ibqp);

	if (pib_wr_begin(qp, PIB_WR_SEND_INV, 0))
		qp->wr_cur->imm = invalidate_rkey;
}

static void pib_wr_local_inv(struct ibv_qp_ex *ibqp, uint32_t invalidate_rkey)
{
	struct pib_qp *qp = to_pqp_ex(ibqp);

	if (pib_wr_begin(qp, PIB_WR_LOCAL_INV, 0))
		qp->wr_cur->imm = invalidate_rkey;
}

/* Type 2 windows only, as through ibv_post_send (type 1: ibv_bind_mw). */
static void pib_wr_bind_mw(struct ibv_qp_ex *ibqp, struct ibv_mw *mw,
			   uint32_t rkey,
			   const struct ibv_mw_bind_info *bind_info)
{
	struct pib_qp *qp = to_pqp_ex(ibqp);
	char *seg;

	if (!qp->wr_err && (!mw || mw->type != IBV_MW_TYPE_2))
		qp->wr_err = EINVAL;
	seg = pib_wr_begin(qp, PIB_WR_BIND_MW, sizeof(struct pib_wqe_bind_mw));
	if (seg && !pib_put_bind(mw, rkey, bind_info, seg))
		qp->wr_err = EINVAL;
}

static void pib_wr_remote(struct pib_qp *qp, uint8_t opcode, uint32_t rkey,
			  uint64_t addr, __be32 imm)
{
	struct pib_wqe_raddr *r = pib_wr_begin(qp, opcode, sizeof(*r));

	if (!r)
		return;
	r->remote_addr = addr;
	r->rkey = rkey;
	qp->wr_cur->imm = (uint32_t)imm;
}

static void pib_wr_rdma_write(struct ibv_qp_ex *ibqp, uint32_t rkey,
			      uint64_t addr)
{
	pib_wr_remote(to_pqp_ex(ibqp), PIB_WR_RDMA_WRITE, rkey, addr, 0);
}

static void pib_wr_rdma_write_imm(struct ibv_qp_ex *ibqp, uint32_t rkey,
				  uint64_t addr, __be32 imm)
{
	pib_wr_remote(to_pqp_ex(ibqp), PIB_WR_RDMA_WRITE_IMM, rkey, addr, imm);
}

static void pib_wr_rdma_read(struct ibv_qp_ex *ibqp, uint32_t rkey,
			     uint64_t addr)
{
	pib_wr_remote(to_pqp_ex(ibqp), PIB_WR_RDMA_READ, rkey, addr, 0);
}

static void pib_wr_atomic(struct pib_qp *qp, uint8_t opcode, uint32_t rkey,
			  uint64_t addr, uint64_t swap_add, uint64_t compare)
{
	struct pib_wqe_raddr *r = pib_wr_begin(
		qp, opcode, sizeof(*r) + sizeof(struct pib_wqe_atomic));
	struct pib_wqe_atomic *a;

	if (!r)
		return;
	r->remote_addr = addr;
	r->rkey = rkey;
	a = (struct pib_wqe_atomic *)(r + 1);
	a->swap_add = swap_add;
	a->compare = compare;
}

static void pib_wr_atomic_cmp_swp(struct ibv_qp_ex *ibqp, uint32_t rkey,
				  uint64_t addr, uint64_t compare,
				  uint64_t swap)
{
	pib_wr_atomic(to_pqp_ex(ibqp), PIB_WR_ATOMIC_CMP_AND_SWP, rkey, addr,
		      swap, compare);
}

static void pib_wr_atomic_fetch_add(struct ibv_qp_ex *ibqp, uint32_t rkey,
				    uint64_t addr, uint64_t add)
{
	pib_wr_atomic(to_pqp_ex(ibqp), PIB_WR_ATOMIC_FETCH_AND_ADD, rkey, addr,
		      add, 0);
}

/* IBA 1.5: the range (or region) and the placement; no data segments. */
static void pib_wr_flush(struct ibv_qp_ex *ibqp, uint32_t rkey, uint64_t addr,
			 size_t len, uint8_t type, uint8_t level)
{
	struct pib_qp *qp = to_pqp_ex(ibqp);
	struct pib_wqe_raddr *r;
	struct pib_wqe_flush *f;

	/* A range is a message at most (2 GiB); a whole region's length is
	 * not looked at. */
	if (!qp->wr_err && level == IBV_FLUSH_RANGE && len > 1u << 31)
		qp->wr_err = EINVAL;
	if (len > UINT32_MAX)
		len = 0;
	r = pib_wr_begin(qp, PIB_WR_FLUSH, sizeof(*r) + sizeof(*f));
	if (!r)
		return;
	r->remote_addr = addr;
	r->rkey = rkey;
	f = (struct pib_wqe_flush *)(r + 1);
	f->length = len;
	f->placement = type;
	f->selectivity = level;
}

/* IBA 1.5: the 8 bytes at atomic_wr land at addr in one store. */
static void pib_wr_atomic_write(struct ibv_qp_ex *ibqp, uint32_t rkey,
				uint64_t addr, const void *atomic_wr)
{
	uint64_t bytes;

	memcpy(&bytes, atomic_wr, sizeof(bytes)); /* memory order, kept */
	pib_wr_atomic(to_pqp_ex(ibqp), PIB_WR_ATOMIC_WRITE, rkey, addr, bytes,
		      0);
}

static void pib_wr_set_ud_addr(struct ibv_qp_ex *ibqp, struct ibv_ah *ah,
			       uint32_t remote_qpn, uint32_t remote_qkey)
{
	struct pib_qp *qp = to_pqp_ex(ibqp);
	struct pib_wqe_ud *ud;

	if (qp->wr_err || !qp->wr_cur)
		return;
	ud = (struct pib_wqe_ud *)(qp->wr_cur + 1);
	ud->av = container_of(ah, struct pib_ah, ibv_ah)->av;
	ud->remote_qpn = remote_qpn;
	ud->remote_qkey = remote_qkey;
}

/* The XRC SRQ behind the peer the current WQE goes to (docs/prm.md §6.8). */
static void pib_wr_set_xrc_srqn(struct ibv_qp_ex *ibqp, uint32_t remote_srqn)
{
	struct pib_qp *qp = to_pqp_ex(ibqp);

	if (qp->wr_err || !qp->wr_cur)
		return;
	((struct pib_wqe_xrc *)(qp->wr_cur + 1))->remote_srqn = remote_srqn;
}

/* Room for `bytes` more in the current WQE's slot, or an error. */
static void *pib_wr_room(struct pib_qp *qp, size_t bytes)
{
	size_t used;

	if (qp->wr_err || !qp->wr_cur)
		return NULL;
	used = (size_t)qp->wr_cur->num_ds * 16;
	if (used + bytes > ((size_t)1 << qp->sq.log_stride)) {
		qp->wr_err = EINVAL;
		return NULL;
	}
	return (char *)qp->wr_cur + used;
}

static void pib_wr_set_sge_list(struct ibv_qp_ex *ibqp, size_t num_sge,
				const struct ibv_sge *sg_list)
{
	struct pib_qp *qp = to_pqp_ex(ibqp);
	struct pib_wqe_data *d;
	size_t i;

	if (num_sge > qp->sq.max_sge) {
		qp->wr_err = EINVAL;
		return;
	}
	d = pib_wr_room(qp, num_sge * sizeof(*d));
	if (!d)
		return;
	for (i = 0; i < num_sge; i++) {
		d[i].byte_count = sg_list[i].length;
		d[i].lkey = sg_list[i].lkey;
		d[i].addr = sg_list[i].addr;
	}
	qp->wr_cur->num_ds += num_sge;
}

static void pib_wr_set_sge(struct ibv_qp_ex *ibqp, uint32_t lkey, uint64_t addr,
			   uint32_t length)
{
	struct ibv_sge sge = {.addr = addr, .length = length, .lkey = lkey};

	pib_wr_set_sge_list(ibqp, 1, &sge);
}

static void pib_wr_set_inline_data_list(struct ibv_qp_ex *ibqp, size_t num_buf,
					const struct ibv_data_buf *buf_list)
{
	struct pib_qp *qp = to_pqp_ex(ibqp);
	struct pib_wqe_inline *in;
	size_t len = 0, i;
	uint8_t *data;

	for (i = 0; i < num_buf; i++)
		len += buf_list[i].length;
	if (len > qp->max_inline_data) {
		qp->wr_err = EINVAL;
		return;
	}
	in = pib_wr_room(qp, (4 + len + 15) & ~(size_t)15);
	if (!in)
		return;
	data = in->data;
	for (i = 0; i < num_buf; i++) {
		memcpy(data, buf_list[i].addr, buf_list[i].length);
		data += buf_list[i].length;
	}
	in->byte_count = len | PIB_INLINE_FLAG;
	qp->wr_cur->flags |= PIB_WQE_INLINE;
	qp->wr_cur->num_ds += (4 + len + 15) / 16;
}

static void pib_wr_set_inline_data(struct ibv_qp_ex *ibqp, void *addr,
				   size_t length)
{
	struct ibv_data_buf buf = {.addr = addr, .length = length};

	pib_wr_set_inline_data_list(ibqp, 1, &buf);
}

static int pib_wr_complete(struct ibv_qp_ex *ibqp)
{
	struct pib_qp *qp = to_pqp_ex(ibqp);
	int err = ibqp->qp_base.state == IBV_QPS_RESET ? EINVAL : qp->wr_err;

	if (err) {
		qp->sq.pi =
			qp->wr_first; /* nothing of a failed batch is posted */
	} else if (qp->sq.pi != qp->wr_first) {
		udma_to_device_barrier();
		pib_ring_doorbell(ibqp->qp_base.context, PIB_DB_SQ, qp->qpn,
				  qp->sq.pi);
	}
	pthread_spin_unlock(&qp->sq.lock);
	return err;
}

static void pib_wr_abort(struct ibv_qp_ex *ibqp)
{
	struct pib_qp *qp = to_pqp_ex(ibqp);

	qp->sq.pi = qp->wr_first;
	pthread_spin_unlock(&qp->sq.lock);
}

/* The operations a QP of `type` can do through the extended API. */
uint64_t pib_qp_ex_supported_ops(const struct pib_context *ctx,
				 enum ibv_qp_type type)
{
	uint64_t ops = IBV_QP_EX_WITH_SEND | IBV_QP_EX_WITH_SEND_WITH_IMM;

	bool reliable = type == IBV_QPT_RC || type == IBV_QPT_XRC_SEND;

	if (reliable || type == IBV_QPT_UC)
		ops |= IBV_QP_EX_WITH_RDMA_WRITE |
		       IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM |
		       IBV_QP_EX_WITH_LOCAL_INV | IBV_QP_EX_WITH_BIND_MW;
	if (reliable)
		ops |= IBV_QP_EX_WITH_RDMA_READ |
		       IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP |
		       IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD |
		       IBV_QP_EX_WITH_SEND_WITH_INV | ctx->placement_ops;
	return ops;
}

void pib_qp_ex_set_ops(struct pib_qp *qp, uint64_t ops)
{
	struct ibv_qp_ex *q = &qp->vqp.qp_ex;

	qp->vqp.comp_mask |= VERBS_QP_EX;
	q->wr_start = pib_wr_start;
	q->wr_complete = pib_wr_complete;
	q->wr_abort = pib_wr_abort;
	q->wr_set_sge = pib_wr_set_sge;
	q->wr_set_sge_list = pib_wr_set_sge_list;
	q->wr_set_inline_data = pib_wr_set_inline_data;
	q->wr_set_inline_data_list = pib_wr_set_inline_data_list;
	if (qp->vqp.qp.qp_type == IBV_QPT_UD)
		q->wr_set_ud_addr = pib_wr_set_ud_addr;
	if (qp->vqp.qp.qp_type == IBV_QPT_XRC_SEND)
		q->wr_set_xrc_srqn = pib_wr_set_xrc_srqn;
	if (ops & IBV_QP_EX_WITH_SEND)
		q->wr_send = pib_wr_send;
	if (ops & IBV_QP_EX_WITH_SEND_WITH_IMM)
		q->wr_send_imm = pib_wr_send_imm;
	if (ops & IBV_QP_EX_WITH_RDMA_WRITE)
		q->wr_rdma_write = pib_wr_rdma_write;
	if (ops & IBV_QP_EX_WITH_RDMA_WRITE_WITH_IMM)
		q->wr_rdma_write_imm = pib_wr_rdma_write_imm;
	if (ops & IBV_QP_EX_WITH_RDMA_READ)
		q->wr_rdma_read = pib_wr_rdma_read;
	if (ops & IBV_QP_EX_WITH_ATOMIC_CMP_AND_SWP)
		q->wr_atomic_cmp_swp = pib_wr_atomic_cmp_swp;
	if (ops & IBV_QP_EX_WITH_ATOMIC_FETCH_AND_ADD)
		q->wr_atomic_fetch_add = pib_wr_atomic_fetch_add;
	if (ops & IBV_QP_EX_WITH_SEND_WITH_INV)
		q->wr_send_inv = pib_wr_send_inv;
	if (ops & IBV_QP_EX_WITH_LOCAL_INV)
		q->wr_local_inv = pib_wr_local_inv;
	if (ops & IBV_QP_EX_WITH_BIND_MW)
		q->wr_bind_mw = pib_wr_bind_mw;
	if (ops & IBV_QP_EX_WITH_FLUSH)
		q->wr_flush = pib_wr_flush;
	if (ops & IBV_QP_EX_WITH_ATOMIC_WRITE)
		q->wr_atomic_write = pib_wr_atomic_write;
}
