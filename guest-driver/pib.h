/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * pib: driver for the pib-hca emulated InfiniBand HCA.
 * The hardware interface is include/pib_hw.h, explained in docs/prm.md.
 */
#ifndef PIB_H
#define PIB_H

#include <linux/debugfs.h>
#include <linux/interrupt.h>
#include <linux/mutex.h>
#include <linux/pci.h>
#include <linux/xarray.h>
#include <rdma/ib_umem.h>
#include <rdma/ib_verbs.h>
#include <rdma/iter.h>

#include "pib_compat.h"
#include "pib_hw.h"
#include "pib_user_abi.h"

#define PIB_DRV_NAME "pib"
#define PIB_CMD_TIMEOUT_MS 5000

enum pib_vector {
	PIB_VEC_ASYNC = 0, /* async events and command completions */
	PIB_VEC_COMP =
		1, /* completion events: EQ i on vector PIB_VEC_COMP + i */
};

/*
 * Completion vectors: one per online CPU, at least 2 (consumers that
 * spread their CQs over vectors find more than one), at most 8, and no
 * more than the device's MSI-X vectors and EQs allow.
 */
#define PIB_MIN_COMP_VECS 2
#define PIB_MAX_COMP_VECS 8

/* A ring or mailbox the kernel owns: contiguous DMA memory. */
struct pib_kbuf {
	void *va;
	dma_addr_t dma;
	size_t size;
};

/* Pages of a queue ring as the device sees them: an MTT range. */
struct pib_ring {
	struct pib_kbuf kbuf; /* kernel rings */
	struct ib_umem *umem; /* user rings */
	u32 mtt;
	u32 npages;
};

struct pib_eq {
	struct pib_dev *dev;
	struct pib_ring ring;
	u32 eqn;
	u32 log_size;
	u32 ci;
	int irq;
	char name[16]; /* of its interrupt: pib-comp0 ... */
	bool created;
};

struct pib_dev {
	struct ib_device ibdev;
	struct pci_dev *pdev;
	void __iomem *regs;
	void __iomem *kdb; /* the kernel's doorbell page */
	u32 kernel_uar;
	struct pib_dev_cap caps;

	/* Command interface. */
	struct mutex cmd_lock;
	struct pib_kbuf mailbox; /* input page, then output page */
	bool cmd_events;
	/*
	 * The async EQ's handler thread matches command completion events
	 * against cmd_token: both are changed under cmd_event_lock too.
	 */
	spinlock_t cmd_event_lock;
	struct completion cmd_done;
	u16 cmd_token;
	u8 cmd_status;
	u64 cmd_result;

	struct pib_eq async_eq;
	struct pib_eq comp_eqs[PIB_MAX_COMP_VECS]; /* by completion vector */
	unsigned int num_comp_eqs;

	/* Objects by number, for events. */
	struct xarray cqs;
	struct xarray qps;
	struct xarray srqs;
	struct xarray pds;
	struct xarray mrs; /* by key */

	struct dentry *debugfs;

	/*
	 * The device went FATAL (docs/prm.md §2.2): commands are no longer
	 * sent to it, kernel QPs' outstanding WQEs complete flushed
	 * (flush_work makes their CQs' users poll), and a recovery resets
	 * the function (pib_main.c).
	 */
	unsigned long state; /* PIB_DEV_* bits */
	struct work_struct flush_work;
	/* Kernel QPs, for flush_work. */
	struct list_head kernel_qps;
	spinlock_t kernel_qps_lock;

	/* On-demand paging: where page faults are mapped (pib_odp.c). */
	struct workqueue_struct *odp_wq;

	/* Outstanding DMA buffers and pinned user rings: 0 at remove. */
	atomic_t kbufs;
	atomic_t user_rings;
};

enum {
	PIB_DEV_LIVE, /* probed and registered: a fatal error is recovered */
	PIB_DEV_FATAL, /* the device reported, or showed, a fatal error */
};

struct pib_ucontext {
	struct ib_ucontext ibuc;
	u32 uar;
	struct rdma_user_mmap_entry *uar_entry;
};

struct pib_user_mmap_entry {
	struct rdma_user_mmap_entry rdma_entry;
	u64 address; /* bus address of the doorbell page */
};

struct pib_pd {
	struct ib_pd ibpd;
	u32 pdn;
};

/* An XRC domain (docs/prm.md §6.8). */
struct pib_xrcd {
	struct ib_xrcd ibxrcd;
	u32 xrcdn;
};

/* A memory window: userspace binds it with WQEs (docs/prm.md §6.7). */
struct pib_mw {
	struct ib_mw ibmw;
};

struct pib_ah {
	struct ib_ah ibah;
	struct pib_av av;
};

struct pib_cq {
	struct ib_cq ibcq;
	struct pib_ring ring;
	struct pib_kbuf ci_record; /* kernel CQs */
	struct ib_umem *ci_umem; /* user CQs */
	u32 cqn;
	u32 log_size;
	u32 ci;
	u32 uar;
	spinlock_t lock;
	struct mutex resize_lock; /* user CQs: RESIZE_CQ and its ring swap */
	/* Kernel QPs that send or receive on this CQ, under lock: a FATAL
	 * device's flushed completions come from their queues. */
	struct list_head send_qps;
	struct list_head recv_qps;
};

struct pib_srq {
	struct ib_srq ibsrq;
	struct pib_ring ring;
	u32 srqn;
	u8 log_wqe_count;
	u8 log_wqe_stride;
	u32 max_sge;
	u32 limit;
	u32 pi; /* kernel SRQs: WQEs posted */
	spinlock_t lock;
	struct mutex resize_lock; /* user SRQs: RESIZE_SRQ and its ring swap */
};

/* A work queue of a QP (kernel QPs post into it; user QPs in user space). */
struct pib_wq {
	struct pib_ring ring;
	u8 log_count;
	u8 log_stride;
	u32 pi; /* WQEs posted */
	u32 ci; /* WQEs completed */
	spinlock_t lock;
};

struct pib_qp {
	struct ib_qp ibqp;
	struct pib_wq sq;
	struct pib_wq rq;
	/* Ours: ib_core sets ibqp.send_cq and recv_cq only after create_qp. */
	struct pib_cq *send_cq;
	struct pib_cq *recv_cq;
	u32 qpn; /* the device's number (QP0/QP1 differ from ibqp.qp_num) */
	u8 type; /* pib_qp_type */
	u8 port;
	bool signal_all;
	struct ib_qp_cap cap;
	enum ib_qp_state state;
	/* Kernel QPs: on their CQs' lists and the device's (pib_cq.c). */
	bool tracked;
	struct list_head send_cq_node;
	struct list_head recv_cq_node;
	struct list_head dev_node;
};

struct pib_mr {
	struct ib_mr ibmr;
	struct ib_umem *umem;
	u64 iova;
	u64 length;
	int access;
	u32 pdn; /* ib_core sets ibmr.pd only after the MR is published */
	u32 mtt;
	u32 npages;
	u8 page_shift; /* of its MTT pages; 0: no MTT (physical) */
	/* Fast registration: the page list REG_MR WQEs hand the device. */
	struct pib_kbuf page_list;
	u32 max_pages;
	/*
	 * On-demand paging (pib_odp.c): the mailbox its entries are written
	 * from (non-NULL for an on-demand MR), and the faults and prefetches
	 * using it, which dereg waits out.
	 */
	struct pib_dev *dev;
	struct pib_mtt_write *odp_box;
	refcount_t odp_users;
	struct completion odp_idle;
	/*
	 * Implicit on-demand paging (pib_odp_implicit.c): the whole address
	 * space, through children made span by span (by span number).
	 */
	bool implicit;
	struct xarray children;
	struct mutex children_lock; /* making a child, and finding it */
};

/*
 * The device's access bits are ib_access_flags' for local write, the
 * remote rights and MW_BIND; FLUSH_GLOBAL has a bit of its own.
 */
#define PIB_ACCESS_SAME_BITS                              \
	(IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | \
	 IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC | IB_ACCESS_MW_BIND)

/* What an on-demand MR may ask for beyond those (pib_odp.c). */
#define PIB_ACCESS_ON_DEMAND (IB_ACCESS_ON_DEMAND | IB_ACCESS_HUGETLB)

static inline u32 pib_access_to_hw(int access)
{
	return (access & PIB_ACCESS_SAME_BITS) |
	       (access & PIB_IB_ACCESS_FLUSH_GLOBAL ? PIB_ACCESS_FLUSH_GLOBAL
						    : 0);
}

static inline int pib_access_from_hw(u32 bits)
{
	return (bits & PIB_ACCESS_SAME_BITS) |
	       (bits & PIB_ACCESS_FLUSH_GLOBAL ? PIB_IB_ACCESS_FLUSH_GLOBAL
					       : 0);
}

static inline struct pib_dev *to_pdev(struct ib_device *ibdev)
{
	return container_of(ibdev, struct pib_dev, ibdev);
}
#define PIB_TO(type, member, ptr) container_of(ptr, struct type, member)
#define to_puc(p) PIB_TO(pib_ucontext, ibuc, p)
#define to_ppd(p) PIB_TO(pib_pd, ibpd, p)
#define to_pxrcd(p) PIB_TO(pib_xrcd, ibxrcd, p)
#define to_pah(p) PIB_TO(pib_ah, ibah, p)
#define to_pcq(p) PIB_TO(pib_cq, ibcq, p)
#define to_psrq(p) PIB_TO(pib_srq, ibsrq, p)
#define to_pqp(p) PIB_TO(pib_qp, ibqp, p)
#define to_pmr(p) PIB_TO(pib_mr, ibmr, p)
#define to_pmw(p) PIB_TO(pib_mw, ibmw, p)

/* pib_cmd.c */
int pib_cmd_init(struct pib_dev *dev);
void pib_cmd_cleanup(struct pib_dev *dev);
int pib_cmd(struct pib_dev *dev, u16 opcode, u32 modifier, u64 in, u64 *result);
int pib_cmd_opmod(struct pib_dev *dev, u16 opcode, u8 opmod, u32 modifier,
		  u64 in, u64 *result);
int pib_cmd_box(struct pib_dev *dev, u16 opcode, u8 opmod, u32 modifier,
		const void *in, size_t inlen, void *out, size_t outlen,
		u64 *result);
void pib_cmd_event(struct pib_dev *dev, u16 token, u8 status, u64 result);

/* pib_eq.c */
int pib_eq_setup(struct pib_dev *dev);
void pib_eq_teardown(struct pib_dev *dev);

/* pib_mtt.c */
int pib_kbuf_alloc(struct pib_dev *dev, struct pib_kbuf *buf, size_t size);
void pib_kbuf_free(struct pib_dev *dev, struct pib_kbuf *buf);
int pib_ring_kernel(struct pib_dev *dev, struct pib_ring *ring, size_t size);
int pib_ring_user(struct pib_dev *dev, struct pib_ring *ring, u64 addr,
		  size_t size);
void pib_ring_free(struct pib_dev *dev, struct pib_ring *ring);
int pib_mtt_write_umem(struct pib_dev *dev, struct ib_umem *umem,
		       unsigned long pgsz, u32 *mtt, u32 *npages);
void pib_mtt_free(struct pib_dev *dev, u32 mtt);
int pib_mtt_alloc(struct pib_dev *dev, u32 count, u32 *mtt);

/* pib_verbs.c */
int pib_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
		     struct ib_udata *udata);
int pib_query_port(struct ib_device *ibdev, u32 port,
		   struct ib_port_attr *attr);
int pib_get_port_immutable(struct ib_device *ibdev, u32 port,
			   struct ib_port_immutable *immutable);
int pib_query_gid(struct ib_device *ibdev, u32 port, int index,
		  union ib_gid *gid);
int pib_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey);
int pib_modify_port(struct ib_device *ibdev, u32 port, int mask,
		    struct ib_port_modify *props);
void pib_get_dev_fw_str(struct ib_device *ibdev, char *str);
int pib_publish_object(struct xarray *table, u32 id, void *obj,
		       struct ib_udata *udata, void *resp, size_t resp_len);
void pib_unpublish_object(struct pib_dev *dev, struct xarray *table, u32 id,
			  void *obj);
void pib_destroy_failed(struct pib_dev *dev, const char *what, u32 num,
			int err);
int pib_alloc_ucontext(struct ib_ucontext *ibuc, struct ib_udata *udata);
void pib_dealloc_ucontext(struct ib_ucontext *ibuc);
void pib_disassociate_ucontext(struct ib_ucontext *ibuc);
void pib_enter_error_state(struct pib_dev *dev, const char *why);

/* A user verb's command from the provider: all of it, or -EINVAL. */
static inline int pib_udata_cmd(struct ib_udata *udata, void *cmd, size_t len)
{
	if (udata->inlen < len)
		return -EINVAL;
	return ib_copy_from_udata(cmd, udata, len);
}
void pib_cq_notify(struct pib_cq *cq);
void pib_cq_track_qp(struct pib_dev *dev, struct pib_qp *qp);
void pib_cq_untrack_qp(struct pib_dev *dev, struct pib_qp *qp);
void pib_flush_work(struct work_struct *work);
void pib_request_flush(struct pib_dev *dev);
void *pib_wq_slot(struct pib_wq *wq, u32 index);
int pib_mmap(struct ib_ucontext *ibuc, struct vm_area_struct *vma);
void pib_mmap_free(struct rdma_user_mmap_entry *entry);
int pib_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
int pib_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata);
int pib_alloc_xrcd(struct ib_xrcd *ibxrcd, struct ib_udata *udata);
int pib_dealloc_xrcd(struct ib_xrcd *ibxrcd, struct ib_udata *udata);
int pib_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
		  struct ib_udata *udata);
int pib_query_ah(struct ib_ah *ibah, struct rdma_ah_attr *attr);
int pib_destroy_ah(struct ib_ah *ibah, u32 flags);
void pib_av_from_ah_attr(struct pib_av *av, const struct rdma_ah_attr *attr);
void pib_av_to_ah_attr(struct pib_dev *dev, const struct pib_av *av,
		       struct rdma_ah_attr *attr);

/* pib_cq.c */
int pib_create_cq(struct ib_cq *ibcq, const struct ib_cq_init_attr *attr,
		  struct pib_create_cq_arg *arg);
int pib_resize_cq(struct ib_cq *ibcq, int cqe, struct ib_udata *udata);
int pib_modify_cq(struct ib_cq *ibcq, u16 cq_count, u16 cq_period);
int pib_resize_user_cq(struct ib_cq *ibcq, unsigned int cqe,
		       struct ib_udata *udata);
void pib_cq_clean(struct pib_cq *cq, u32 qpn);
int pib_destroy_cq(struct ib_cq *ibcq, struct ib_udata *udata);
int pib_poll_cq(struct ib_cq *ibcq, int num, struct ib_wc *wc);
int pib_req_notify_cq(struct ib_cq *ibcq, enum ib_cq_notify_flags flags);

/* pib_mcast.c */
int pib_attach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid);
int pib_detach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid);

/* pib_qp.c */
int pib_create_qp(struct ib_qp *ibqp, struct ib_qp_init_attr *init,
		  struct ib_udata *udata);
int pib_modify_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		  struct ib_udata *udata);
int pib_query_qp(struct ib_qp *ibqp, struct ib_qp_attr *attr, int mask,
		 struct ib_qp_init_attr *init);
int pib_destroy_qp(struct ib_qp *ibqp, struct ib_udata *udata);
int pib_post_send(struct ib_qp *ibqp, const struct ib_send_wr *wr,
		  const struct ib_send_wr **bad_wr);
int pib_post_recv(struct ib_qp *ibqp, const struct ib_recv_wr *wr,
		  const struct ib_recv_wr **bad_wr);
void pib_qp_completed(struct pib_qp *qp, const struct pib_cqe *cqe);
int pib_write_recv_wqe(struct pib_wqe_ctrl *ctrl, size_t stride,
		       const struct ib_recv_wr *wr, u32 max_sge);

/* pib_srq.c */
int pib_create_srq(struct ib_srq *ibsrq, struct ib_srq_init_attr *init,
		   struct ib_udata *udata);
int pib_modify_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr,
		   enum ib_srq_attr_mask mask, struct ib_udata *udata);
int pib_query_srq(struct ib_srq *ibsrq, struct ib_srq_attr *attr);
int pib_destroy_srq(struct ib_srq *ibsrq, struct ib_udata *udata);
int pib_post_srq_recv(struct ib_srq *ibsrq, const struct ib_recv_wr *wr,
		      const struct ib_recv_wr **bad_wr);

/* pib_mr.c */
struct ib_mr *pib_get_dma_mr(struct ib_pd *ibpd, int access);
struct ib_mr *pib_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
			      u64 virt, int access,
			      PIB_DMAH_PARAM struct ib_udata *udata);
int pib_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata);
/* and for an implicit on-demand MR's children (pib_odp_implicit.c) */
int pib_create_mr_cmd(struct pib_dev *dev, struct pib_mr *mr,
		      struct pib_mr_context *ctx);
struct ib_mr *pib_mr_publish(struct pib_dev *dev, struct pib_mr *mr);
void pib_mr_destroy(struct pib_dev *dev, struct pib_mr *mr);

/* pib_odp.c; without the kernel's on-demand paging, no ODP at all. */
#if IS_ENABLED(CONFIG_INFINIBAND_ON_DEMAND_PAGING)
void pib_odp_caps(struct pib_dev *dev, struct ib_device_attr *attr);
void pib_odp_fault_event(struct pib_dev *dev, const struct pib_eqe *eqe);
int pib_advise_mr(struct ib_pd *pd, enum ib_uverbs_advise_mr_advice advice,
		  u32 flags, struct ib_sge *sg_list, u32 num_sge,
		  struct uverbs_attr_bundle *attrs);
int pib_odp_fill_res_mr_entry(struct sk_buff *msg, struct ib_mr *ibmr);
int pib_odp_reg(struct pib_dev *dev, struct ib_pd *pd, struct pib_mr *mr,
		u64 start, u64 length, u64 virt, int access,
		struct pib_mr_context *ctx);
void pib_odp_publish(struct pib_mr *mr);
void pib_odp_quiesce(struct pib_mr *mr);
void pib_odp_release(struct pib_dev *dev, struct pib_mr *mr, bool destroyed);
/* shared by pib_odp.c and pib_odp_implicit.c */
extern const struct mmu_interval_notifier_ops pib_odp_notifier_ops;
struct ib_umem_odp;
int pib_odp_setup(struct pib_dev *dev, struct pib_mr *mr,
		  struct ib_umem_odp *odp, u64 virt,
		  struct pib_mr_context *ctx);
int pib_odp_map(struct pib_dev *dev, struct pib_mr *mr, u64 va, u64 len,
		bool write, bool fault);
struct pib_mr *pib_odp_mr_get(struct pib_dev *dev, u32 key);
void pib_odp_mr_put(struct pib_mr *mr);
int pib_odp_reg_implicit(struct pib_dev *dev, struct ib_pd *pd,
			 struct pib_mr *mr, u64 virt, int access,
			 struct pib_mr_context *ctx);
int pib_odp_map_implicit(struct pib_dev *dev, struct pib_mr *parent, u64 va,
			 u64 len, bool write, bool fault);
void pib_odp_destroy_children(struct pib_mr *parent);
#else
static inline void pib_odp_caps(struct pib_dev *dev,
				struct ib_device_attr *attr)
{
}
static inline void pib_odp_fault_event(struct pib_dev *dev,
				       const struct pib_eqe *eqe)
{
}
#define pib_advise_mr NULL
#define pib_odp_fill_res_mr_entry NULL
static inline int pib_odp_reg(struct pib_dev *dev, struct ib_pd *pd,
			      struct pib_mr *mr, u64 start, u64 length,
			      u64 virt, int access, struct pib_mr_context *ctx)
{
	return -EOPNOTSUPP;
}
static inline void pib_odp_publish(struct pib_mr *mr)
{
}
static inline void pib_odp_quiesce(struct pib_mr *mr)
{
}
static inline void pib_odp_release(struct pib_dev *dev, struct pib_mr *mr,
				   bool destroyed)
{
}
#endif
struct ib_mr *pib_alloc_mr(struct ib_pd *ibpd, enum ib_mr_type mr_type,
			   u32 max_num_sg);
int pib_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		  unsigned int *sg_offset);
int pib_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata);
struct ib_mr *pib_rereg_user_mr(struct ib_mr *ibmr, int flags, u64 start,
				u64 length, u64 virt, int access,
				struct ib_pd *pd, struct ib_udata *udata);
int pib_dealloc_mw(struct ib_mw *ibmw);

/* pib_mad.c */
int pib_process_mad(struct ib_device *ibdev, int flags, u32 port,
		    const struct ib_wc *in_wc, const struct ib_grh *in_grh,
		    const struct ib_mad *in, struct ib_mad *out,
		    size_t *out_mad_size, u16 *out_mad_pkey_index);
int pib_set_node_desc(struct pib_dev *dev, const char *desc);
int pib_modify_device(struct ib_device *ibdev, int mask,
		      struct ib_device_modify *props);

/* pib_stats.c */
struct rdma_hw_stats *pib_alloc_hw_port_stats(struct ib_device *ibdev,
					      u32 port_num);
int pib_get_hw_stats(struct ib_device *ibdev, struct rdma_hw_stats *stats,
		     u32 port, int index);

/* pib_debugfs.c */
void pib_debugfs_module_init(void);
void pib_debugfs_module_exit(void);
void pib_debugfs_init(struct pib_dev *dev);
void pib_debugfs_cleanup(struct pib_dev *dev);

#endif /* PIB_H */
