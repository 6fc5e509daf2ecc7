/* SPDX-License-Identifier: GPL-2.0-only OR Linux-OpenIB */
/*
 * libpib: the rdma-core provider of the pib-hca emulated InfiniBand HCA.
 * Control verbs go to the kernel driver; queue rings live in this
 * process's memory and doorbells are written to the mmap'd doorbell page.
 */
#ifndef PIB_PROVIDER_H
#define PIB_PROVIDER_H

#include <endian.h>
#include <infiniband/driver.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>
#include <util/mmio.h>

#include "pib_hw.h"
#include "pib_user_abi.h"

struct pib_device {
	struct verbs_device ibv_dev;
};

struct pib_context {
	struct verbs_context ibv_ctx;
	void *uar; /* the context's doorbell page */
	uint32_t uar_page;
	uint32_t log_max_wqe_stride;
	uint32_t max_inline_data;
	uint8_t num_ports;
	uint32_t max_send_sge;
	uint32_t max_recv_sge;
	/* IBV_QP_EX_WITH_FLUSH and _ATOMIC_WRITE, as the device offers them */
	uint64_t placement_ops;
	/* QPs by number, for poll_cq to retire WQEs: read without a lock,
	 * changed under qp_table_lock. */
	pthread_mutex_t qp_table_lock;
	struct pib_qp **qp_table;
	uint32_t qp_table_size;
	/* SRQs by number, the same way (a receive CQE names its SRQ). */
	struct pib_srq **srq_table;
	uint32_t srq_table_size;
};

/*
 * A PD, or a parent domain (domains.c): the PD it stands for, and the
 * application's allocator for the rings made on it (both NULL: the
 * provider's own). `users` counts a PD's parent domains, and the QPs,
 * SRQs and CQs made on a parent domain.
 */
struct pib_pd {
	struct ibv_pd ibv_pd;
	struct pib_pd *protection; /* a parent domain's PD; NULL for a PD */
	void *(*alloc)(struct ibv_pd *pd, void *pd_context, size_t size,
		       size_t alignment, uint64_t resource_type);
	void (*free)(struct ibv_pd *pd, void *pd_context, void *ptr,
		     uint64_t resource_type);
	void *pd_context;
	int users;
};

/*
 * The resource types a parent domain's allocator is asked for. pib has no
 * driver ID of its own (RDMA_DRIVER_UNKNOWN, 0): the upper 32 bits are 0.
 */
enum pib_resource_type {
	PIB_RES_CQ = 1,
	PIB_RES_SQ = 2,
	PIB_RES_RQ = 3,
	PIB_RES_SRQ = 4,
};

/*
 * A ring in process memory, page-aligned, that the driver pins: the
 * provider's, or one a parent domain's allocator gave (`domain` then
 * names it, and `type` what it was asked for).
 */
struct pib_buf {
	void *addr;
	size_t length;
	struct pib_pd *domain;
	uint64_t type;
};

struct pib_cq {
	struct verbs_cq verbs_cq; /* an ibv_cq, or an ibv_cq_ex */
	struct pib_buf buf; /* CQE ring, then one page for the CI record */
	struct pib_pd *domain; /* the parent domain it was made on, or NULL */
	pthread_spinlock_t lock;
	uint32_t cqn;
	uint32_t log_size;
	uint32_t ci;
	volatile uint32_t *ci_record;
	struct pib_cqe *current; /* extended polling: the CQE it stands on */
};

/* A work queue: pi counts WQEs posted, ci WQEs the device is done with. */
struct pib_wq {
	struct pib_buf buf;
	pthread_spinlock_t lock;
	uint8_t log_count;
	uint8_t log_stride;
	uint32_t pi;
	uint32_t ci; /* advanced by poll_cq */
	uint32_t max_sge;
};

struct pib_qp {
	struct verbs_qp vqp;
	struct pib_wq sq;
	struct pib_wq rq;
	struct pib_pd *domain; /* the parent domain it was made on, or NULL */
	uint32_t qpn;
	uint32_t max_inline_data;
	bool signal_all;
	/* The extended send API's batch: from wr_start to wr_complete. */
	uint32_t wr_first;
	struct pib_wqe_ctrl *wr_cur;
	int wr_err;
};

struct pib_srq {
	struct verbs_srq vsrq;
	struct pib_wq wq;
	struct pib_pd *domain; /* the parent domain it was made on, or NULL */
	uint32_t srqn;
};

struct pib_xrcd {
	struct verbs_xrcd vxrcd;
};

static inline struct pib_srq *pib_srq_lookup(struct pib_context *ctx,
					     uint32_t srqn)
{
	return srqn < ctx->srq_table_size
		       ? __atomic_load_n(&ctx->srq_table[srqn],
					 __ATOMIC_ACQUIRE)
		       : NULL;
}

struct pib_ah {
	struct ibv_ah ibv_ah;
	struct pib_av av;
};

#define to_pctx(ctx) container_of(ctx, struct pib_context, ibv_ctx.context)
#define to_pcq(c) container_of(c, struct pib_cq, verbs_cq.cq)
#define to_pcq_ex(c) container_of(c, struct pib_cq, verbs_cq.cq_ex)
#define to_pqp(q) container_of(q, struct pib_qp, vqp.qp)
#define to_psrq(s) container_of(s, struct pib_srq, vsrq.srq)

static inline struct pib_pd *to_ppd(struct ibv_pd *pd)
{
	return container_of(pd, struct pib_pd, ibv_pd);
}

/* Slot `index` of a work queue's ring. */
static inline void *pib_wq_slot(struct pib_wq *wq, uint32_t index)
{
	return (char *)wq->buf.addr +
	       ((size_t)(index & ((1u << wq->log_count) - 1))
		<< wq->log_stride);
}

/* A doorbell: one 64-bit store to the context's doorbell page. */
static inline void pib_ring_doorbell(struct ibv_context *context,
				     uint32_t offset, uint32_t number,
				     uint32_t value)
{
	mmio_write64_le((char *)to_pctx(context)->uar + offset,
			htole64((uint64_t)value << 32 | number));
}

/* The core clock, as every doorbell page shows it (docs/prm.md §7.1). */
static inline uint64_t pib_read_clock(struct ibv_context *context)
{
	return le64toh(
		mmio_read64_le((char *)to_pctx(context)->uar + PIB_DB_CLOCK));
}

/* A send WQE's control segment, for both send APIs. */
static inline void pib_wqe_ctrl_init(struct pib_wqe_ctrl *ctrl,
				     const struct pib_qp *qp, uint64_t wr_id,
				     uint8_t opcode, unsigned int send_flags)
{
	ctrl->wr_id = wr_id;
	ctrl->opcode = opcode;
	ctrl->flags = 0;
	if (send_flags & IBV_SEND_SIGNALED || qp->signal_all)
		ctrl->flags |= PIB_WQE_SIGNALED;
	if (send_flags & IBV_SEND_SOLICITED)
		ctrl->flags |= PIB_WQE_SOLICITED;
	if (send_flags & IBV_SEND_FENCE)
		ctrl->flags |= PIB_WQE_FENCE;
}

/* verbs.c */
int pib_query_device(struct ibv_context *context,
		     const struct ibv_query_device_ex_input *input,
		     struct ibv_device_attr_ex *attr, size_t attr_size);
int pib_query_rt_values(struct ibv_context *context,
			struct ibv_values_ex *values);
int pib_query_port(struct ibv_context *context, uint8_t port,
		   struct ibv_port_attr *attr);
struct ibv_mr *pib_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			  uint64_t hca_va, int access);
int pib_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		  uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge);
int pib_dereg_mr(struct verbs_mr *vmr);
struct ibv_ah *pib_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr);
int pib_destroy_ah(struct ibv_ah *ah);

/* queues.c */
struct ibv_cq *pib_create_cq(struct ibv_context *context, int cqe,
			     struct ibv_comp_channel *channel, int comp_vector);
int pib_destroy_cq(struct ibv_cq *cq);
int pib_modify_cq(struct ibv_cq *ibcq, struct ibv_modify_cq_attr *attr);
int pib_resize_cq(struct ibv_cq *cq, int cqe);
struct ibv_cq_ex *pib_create_cq_ex(struct ibv_context *context,
				   struct ibv_cq_init_attr_ex *attr);
/* domains.c */
struct ibv_pd *pib_alloc_pd(struct ibv_context *context);
struct ibv_pd *
pib_alloc_parent_domain(struct ibv_context *context,
			struct ibv_parent_domain_init_attr *attr);
int pib_dealloc_pd(struct ibv_pd *pd);
struct pib_pd *pib_domain_hold(struct ibv_pd *pd);
void pib_domain_release(struct pib_pd *domain);
struct ibv_pd *pib_protection_of(struct ibv_pd *pd);

struct ibv_qp *pib_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
struct ibv_qp *pib_create_qp_ex(struct ibv_context *context,
				struct ibv_qp_init_attr_ex *attr);
int pib_query_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask,
		 struct ibv_qp_init_attr *init_attr);
int pib_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int attr_mask);
int pib_destroy_qp(struct ibv_qp *qp);
struct ibv_srq *pib_create_srq(struct ibv_pd *pd,
			       struct ibv_srq_init_attr *attr);
struct ibv_srq *pib_create_srq_ex(struct ibv_context *context,
				  struct ibv_srq_init_attr_ex *attr);
int pib_get_srq_num(struct ibv_srq *srq, uint32_t *srq_num);
struct ibv_xrcd *pib_open_xrcd(struct ibv_context *context,
			       struct ibv_xrcd_init_attr *attr);
int pib_close_xrcd(struct ibv_xrcd *xrcd);
int pib_modify_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr,
		   int attr_mask);
int pib_query_srq(struct ibv_srq *srq, struct ibv_srq_attr *attr);
int pib_destroy_srq(struct ibv_srq *srq);
int pib_qp_table_add(struct pib_context *ctx, struct pib_qp *qp);
void pib_qp_table_remove(struct pib_context *ctx, struct pib_qp *qp);

/* datapath.c: posting and polling, no system call on the way */
int pib_post_send_any(struct ibv_qp *qp, struct ibv_send_wr *wr,
		      struct ibv_send_wr **bad_wr);
char *pib_put_bind(const struct ibv_mw *mw, uint32_t rkey,
		   const struct ibv_mw_bind_info *info, char *seg);
int pib_bind_mw(struct ibv_qp *qp, struct ibv_mw *mw,
		struct ibv_mw_bind *mw_bind);
struct ibv_mw *pib_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type);
int pib_rereg_mr(struct verbs_mr *vmr, int flags, struct ibv_pd *pd, void *addr,
		 size_t length, int access);
int pib_dealloc_mw(struct ibv_mw *mw);
int pib_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr,
		  struct ibv_send_wr **bad_wr);
int pib_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr,
		  struct ibv_recv_wr **bad_wr);
int pib_post_srq_recv(struct ibv_srq *srq, struct ibv_recv_wr *wr,
		      struct ibv_recv_wr **bad_wr);
int pib_poll_cq(struct ibv_cq *cq, int num, struct ibv_wc *wc);
void pib_cq_clean(struct pib_cq *cq, uint32_t qpn);
uint32_t pib_cq_waiting(struct pib_cq *cq);
int pib_arm_cq(struct ibv_cq *cq, int solicited_only);
void pib_cq_ex_set_ops(struct ibv_cq_ex *cq);

/* wr.c: the extended send API */
uint64_t pib_qp_ex_supported_ops(const struct pib_context *ctx,
				 enum ibv_qp_type type);
void pib_qp_ex_set_ops(struct pib_qp *qp, uint64_t ops);

#endif /* PIB_PROVIDER_H */
