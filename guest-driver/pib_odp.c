// SPDX-License-Identifier: GPL-2.0-only
/*
 * On-demand paging (docs/prm.md §6.9): user MRs whose pages the kernel's
 * ODP code maps when the device faults on them or a process prefetches
 * them (ibv_advise_mr), and unmaps when the process's mapping changes.
 * The device's MTT entries of such an MR say which pages it maps now.
 */
#include <rdma/ib_umem_odp.h>
#include <rdma/rdma_netlink.h>

#include "pib.h"

/*
 * The device faults on every side of RC and XRC, IBA 1.5's FLUSH and
 * ATOMIC WRITE among them (bits 6 and 7 of the verbs' odp_caps, which the
 * kernel passes on without naming), and on a UD send; a UD receive cannot
 * wait for a page (prm §6.9), nor can a UC responder.
 */
#define PIB_ODP_SUPPORT_FLUSH (1 << 6)
#define PIB_ODP_SUPPORT_ATOMIC_WRITE (1 << 7)
#define PIB_ODP_ALL_SIDES                                                   \
	(IB_ODP_SUPPORT_SEND | IB_ODP_SUPPORT_RECV | IB_ODP_SUPPORT_WRITE | \
	 IB_ODP_SUPPORT_READ | IB_ODP_SUPPORT_ATOMIC |                      \
	 IB_ODP_SUPPORT_SRQ_RECV | PIB_ODP_SUPPORT_FLUSH |                  \
	 PIB_ODP_SUPPORT_ATOMIC_WRITE)

void pib_odp_caps(struct pib_dev *dev, struct ib_device_attr *attr)
{
	if (!(dev->caps.device_cap_flags & PIB_DEV_CAP_ON_DEMAND_PAGING))
		return;
	attr->kernel_cap_flags |= IBK_ON_DEMAND_PAGING;
	attr->odp_caps.general_caps = IB_ODP_SUPPORT;
	if (dev->caps.device_cap_flags & PIB_DEV_CAP_IMPLICIT_ON_DEMAND)
		attr->odp_caps.general_caps |= IB_ODP_SUPPORT_IMPLICIT;
	attr->odp_caps.per_transport_caps.rc_odp_caps = PIB_ODP_ALL_SIDES;
	attr->odp_caps.per_transport_caps.xrc_odp_caps = PIB_ODP_ALL_SIDES;
	attr->odp_caps.per_transport_caps.ud_odp_caps = IB_ODP_SUPPORT_SEND;
}

static struct ib_umem_odp *pib_mr_odp(struct pib_mr *mr)
{
	return to_ib_umem_odp(mr->umem);
}

/*
 * Writes the device's entries for pages [first, first + count) of the
 * MR's umem as the umem maps them now (0: absent, or all absent with
 * `zap`), never a write enable on a region the process may not write.
 * Called with the umem's mutex held, so the mapping cannot change
 * meanwhile; uses the MR's own mailbox, as an invalidation may come under
 * memory pressure and must not allocate.
 */
static int pib_odp_write(struct pib_dev *dev, struct pib_mr *mr, u64 first,
			 u64 count, bool zap)
{
	struct ib_umem_odp *odp = pib_mr_odp(mr);
	struct pib_mtt_write *box = mr->odp_box;
	u64 keep = mr->umem->writable ? ~0ULL : ~(u64)PIB_MTT_WRITE;
	int err = 0;

	lockdep_assert_held(&odp->umem_mutex);
	while (count && !err) {
		u32 n = min_t(u64, count, PIB_MTT_WRITE_MAX), i;

		memset(box, 0, offsetof(struct pib_mtt_write, entries));
		box->count = n;
		for (i = 0; i < n && !err; i++) {
			box->entries[i] = 0;
			if (!zap)
				err = pib_odp_entry(odp, first + i,
						    &box->entries[i]);
			box->entries[i] &= keep;
		}
		if (!err)
			err = pib_cmd_box(dev, PIB_CMD_WRITE_MTT, 0,
					  mr->mtt + first, box, sizeof(*box),
					  NULL, 0, NULL);
		first += n;
		count -= n;
	}
	return err;
}

/*
 * The process's mapping of [range->start, range->end) changes: the device
 * stops reaching those pages before the kernel lets them go.
 */
static bool pib_odp_invalidate(struct mmu_interval_notifier *mni,
			       const struct mmu_notifier_range *range,
			       unsigned long cur_seq)
{
	struct ib_umem_odp *odp =
		container_of(mni, struct ib_umem_odp, notifier);
	struct pib_mr *mr;
	u64 start, end, first, last;

	if (!mmu_notifier_range_blockable(range))
		return false;
	mutex_lock(&odp->umem_mutex);
	mmu_interval_set_seq(mni, cur_seq);
	mr = odp->private; /* under the mutex: dereg clears it under it too */
	start = max_t(u64, ib_umem_start(odp), range->start);
	end = min_t(u64, ib_umem_end(odp), range->end);
	if (mr && start < end &&
	    odp->npages) { /* nothing mapped: nothing to zap */
		first = (start - ib_umem_start(odp)) >> odp->page_shift;
		last = (end - 1 - ib_umem_start(odp)) >> odp->page_shift;
		/* A device that fails the command is in its fatal state. */
		pib_odp_write(mr->dev, mr, first, last - first + 1, true);
	}
	if (start < end)
		ib_umem_odp_unmap_dma_pages(odp, start, end);
	mutex_unlock(&odp->umem_mutex);
	return true;
}

const struct mmu_interval_notifier_ops pib_odp_notifier_ops = {
	.invalidate = pib_odp_invalidate,
};

/*
 * Maps [va, va + len) of the MR's range (in its iova space) for the
 * device: faults the pages in (`fault`), or takes those the process has
 * already (a prefetch without faults); for writes too when `write`.
 */
int pib_odp_map(struct pib_dev *dev, struct pib_mr *mr, u64 va, u64 len,
		bool write, bool fault)
{
	struct ib_umem_odp *odp = pib_mr_odp(mr);
	u64 user_va, access = PIB_ODP_READ, first;
	int npages, err;

	if (mr->implicit)
		return pib_odp_map_implicit(dev, mr, va, len, write, fault);
	if (va < mr->iova || va - mr->iova >= mr->length || !len)
		return -EFAULT;
	if (write && !mr->umem->writable)
		return -EPERM;
	user_va = mr->umem->address + (va - mr->iova);
	len = min(len, mr->length - (va - mr->iova));
	if (write)
		access |= PIB_ODP_WRITE;
	npages = ib_umem_odp_map_dma_and_lock(odp, user_va, len, access, fault);
	if (npages < 0)
		return npages;
	first = (ALIGN_DOWN(user_va, 1ULL << odp->page_shift) -
		 ib_umem_start(odp)) >>
		odp->page_shift;
	err = pib_odp_write(dev, mr, first, npages, false);
	mutex_unlock(&odp->umem_mutex);
	return err;
}

/*
 * The on-demand MR `key` names, held; NULL if there is none. An implicit
 * MR's children are in dev->mrs too: the device faults on their keys.
 */
struct pib_mr *pib_odp_mr_get(struct pib_dev *dev, u32 key)
{
	struct pib_mr *mr;

	xa_lock(&dev->mrs);
	mr = xa_load(&dev->mrs, PIB_KEY_INDEX(key));
	if (mr && (!mr->odp_box || mr->ibmr.lkey != key ||
		   !refcount_inc_not_zero(&mr->odp_users)))
		mr = NULL;
	xa_unlock(&dev->mrs);
	return mr;
}

void pib_odp_mr_put(struct pib_mr *mr)
{
	if (refcount_dec_and_test(&mr->odp_users))
		complete(&mr->odp_idle);
}

struct pib_page_fault {
	struct work_struct work;
	struct pib_dev *dev;
	u64 token;
	u64 va;
	u32 key;
	u32 length;
	bool write;
};

static void pib_odp_fault_work(struct work_struct *work)
{
	struct pib_page_fault *f =
		container_of(work, struct pib_page_fault, work);
	struct pib_mr *mr = pib_odp_mr_get(f->dev, f->key);
	int err = -ENOENT;

	if (mr) {
		/*
		 * Writable pages of a writable region are mapped for writes at
		 * once, as mlx5_ib maps them: a read now and a write later
		 * would fault twice.
		 */
		err = pib_odp_map(f->dev, mr, f->va, f->length,
				  f->write || mr->umem->writable, true);
		pib_odp_mr_put(mr);
	}
	if (err)
		dev_dbg(&f->dev->pdev->dev,
			"page fault of key 0x%x at 0x%llx not mapped: %d\n",
			f->key, f->va, err);
	/* A failed command: the device is in its fatal state, which ends it. */
	pib_cmd(f->dev, PIB_CMD_PAGE_FAULT_RESUME, err ? 1 : 0, f->token, NULL);
	kfree(f);
}

/*
 * A PAGE_FAULT EQE, on the async EQ's thread: the fault is mapped by the
 * ODP workqueue, as mapping it takes commands whose completions this
 * thread delivers. Without memory for it, the device fails it after its
 * 10 s wait (prm §6.9).
 */
void pib_odp_fault_event(struct pib_dev *dev, const struct pib_eqe *eqe)
{
	struct workqueue_struct *wq = READ_ONCE(dev->odp_wq);
	struct pib_page_fault *f;

	if (!wq) /* the device goes (pib_remove) */
		return;
	/* Not GFP_KERNEL: reclaim may invalidate, which waits for this thread.
	 */
	f = kzalloc(sizeof(*f), GFP_NOWAIT | __GFP_NOWARN);
	if (!f)
		return;
	INIT_WORK(&f->work, pib_odp_fault_work);
	f->dev = dev;
	f->token = eqe->data.page_fault.token;
	f->va = eqe->data.page_fault.va;
	f->key = eqe->data.page_fault.key;
	f->length = eqe->data.page_fault.length;
	f->write = eqe->subtype & PIB_PAGE_FAULT_WRITE;
	queue_work(wq, &f->work);
}

/* A prefetch's buffer: an on-demand MR of `pd`, writable for `write`. */
static int pib_odp_prefetchable(struct pib_dev *dev, struct ib_pd *pd,
				const struct ib_sge *sge, bool write)
{
	struct pib_mr *mr = pib_odp_mr_get(dev, sge->lkey);
	int err = 0;

	if (!mr)
		return -ENOENT;
	if (mr->pdn != to_ppd(pd)->pdn || (write && !mr->umem->writable))
		err = -EPERM;
	pib_odp_mr_put(mr);
	return err;
}

/*
 * ibv_advise_mr, as mlx5_ib answers it: every buffer checked first (an
 * on-demand MR of the PD, writable for PREFETCH_WRITE), then the pages
 * of each mapped now, for reads (PREFETCH), writes too (PREFETCH_WRITE),
 * or only those the process has already (PREFETCH_NO_FAULT). Mapping is
 * done at once, whether the caller waits (FLUSH) or not; only a caller
 * that waits hears of a mapping failure.
 */
int pib_advise_mr(struct ib_pd *pd, enum ib_uverbs_advise_mr_advice advice,
		  u32 flags, struct ib_sge *sg_list, u32 num_sge,
		  struct uverbs_attr_bundle *attrs)
{
	struct pib_dev *dev = to_pdev(pd->device);
	bool write = advice == IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE;
	bool fault = advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT;
	int err = 0;
	u32 i;

	if (advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH &&
	    advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_WRITE &&
	    advice != IB_UVERBS_ADVISE_MR_ADVICE_PREFETCH_NO_FAULT)
		return -EOPNOTSUPP;
	for (i = 0; i < num_sge; i++) {
		err = pib_odp_prefetchable(dev, pd, &sg_list[i], write);
		if (err)
			return err;
	}
	for (i = 0; i < num_sge && !err; i++) {
		struct pib_mr *mr = pib_odp_mr_get(dev, sg_list[i].lkey);

		if (!mr) /* deregistered meanwhile */
			return flags & IB_UVERBS_ADVISE_MR_FLAG_FLUSH ? -ENOENT
								      : 0;
		if (sg_list[i].length)
			err = pib_odp_map(dev, mr, sg_list[i].addr,
					  sg_list[i].length, write, fault);
		pib_odp_mr_put(mr);
	}
	return flags & IB_UVERBS_ADVISE_MR_FLAG_FLUSH ? err : 0;
}

/*
 * What `rdma resource show mr -dd` says of an MR (ib_device_ops'
 * fill_res_mr_entry): an on-demand MR says so, as mlx5_ib's do, so that
 * a user (or a test) sees which registrations are on demand.
 */
int pib_odp_fill_res_mr_entry(struct sk_buff *msg, struct ib_mr *ibmr)
{
	struct pib_mr *mr = to_pmr(ibmr);
	struct nlattr *table;

	if (!mr->odp_box)
		return 0;
	table = nla_nest_start(msg, RDMA_NLDEV_ATTR_DRIVER);
	if (!table)
		return -EMSGSIZE;
	if (rdma_nl_put_driver_string(msg, "odp",
				      mr->implicit ? "implicit" : "explicit")) {
		nla_nest_cancel(msg, table);
		return -EMSGSIZE;
	}
	nla_nest_end(msg, table);
	return 0;
}

/*
 * Makes `mr` the on-demand MR of `odp` at `virt` in its iova space, and
 * fills the device's context of it but for its PD and access: a mailbox
 * for its entries, an MTT range with every entry absent. An implicit MR
 * (pib_odp_implicit.c) has no range: its children have. On failure `odp`
 * is the caller's still.
 */
int pib_odp_setup(struct pib_dev *dev, struct pib_mr *mr,
		  struct ib_umem_odp *odp, u64 virt, struct pib_mr_context *ctx)
{
	int err;

	mr->odp_box = kzalloc(sizeof(*mr->odp_box), GFP_KERNEL);
	if (!mr->odp_box)
		return -ENOMEM;
	if (!mr->implicit) {
		mr->npages = ib_umem_odp_num_pages(odp);
		err = pib_mtt_alloc(dev, mr->npages, &mr->mtt);
		if (err) {
			kfree(mr->odp_box);
			mr->odp_box = NULL;
			return err;
		}
	}
	mr->umem = &odp->umem;
	mr->dev = dev;
	mr->page_shift = odp->page_shift;
	refcount_set(&mr->odp_users, 1);
	init_completion(&mr->odp_idle);
	ctx->iova = virt;
	ctx->length = odp->umem.length;
	ctx->mtt_index = mr->mtt;
	ctx->mtt_count = mr->npages;
	ctx->log_page_size = mr->page_shift;
	ctx->flags = PIB_MR_ON_DEMAND;
	return 0;
}

/*
 * An on-demand MR over [start, start + length) of the process, at `virt`
 * in its iova space, on the same page offset: its MTT entries all absent
 * until the device faults on them. Over the whole address space, an
 * implicit one (pib_odp_implicit.c).
 */
int pib_odp_reg(struct pib_dev *dev, struct ib_pd *pd, struct pib_mr *mr,
		u64 start, u64 length, u64 virt, int access,
		struct pib_mr_context *ctx)
{
	struct ib_umem_odp *odp;
	int err;

	if (!(dev->caps.device_cap_flags & PIB_DEV_CAP_ON_DEMAND_PAGING))
		return -EOPNOTSUPP;
	if (!start && length == U64_MAX)
		return pib_odp_reg_implicit(dev, pd, mr, virt, access, ctx);
	odp = ib_umem_odp_get(pd->device, start, length,
			      PIB_ODP_GET_ACCESS(access),
			      &pib_odp_notifier_ops);
	if (IS_ERR(odp))
		return PTR_ERR(odp);
	err = -EINVAL;
	if ((virt ^ start) & ((1ULL << odp->page_shift) - 1))
		goto release;
	err = pib_odp_setup(dev, mr, odp, virt, ctx);
	if (err)
		goto release;
	return 0;

release:
	ib_umem_odp_release(odp);
	return err;
}

/* The MR is the device's now: invalidations write its entries. */
void pib_odp_publish(struct pib_mr *mr)
{
	struct ib_umem_odp *odp = pib_mr_odp(mr);

	mutex_lock(&odp->umem_mutex);
	odp->private = mr;
	mutex_unlock(&odp->umem_mutex);
}

/*
 * Once the MR left dev->mrs: no fault or prefetch uses it any more (a
 * stuck one, in a userfaultfd, holds dereg as it holds mlx5_ib's), and
 * the device reaches none of its pages before the caller destroys the
 * device's MR; nor does an invalidation write its entries after that
 * (the MTT range then takes no entries with present bits).
 */
void pib_odp_quiesce(struct pib_mr *mr)
{
	struct ib_umem_odp *odp = pib_mr_odp(mr);

	pib_odp_mr_put(mr);
	wait_for_completion(&mr->odp_idle);
	if (mr->implicit) { /* its pages are its children's */
		pib_odp_destroy_children(mr);
		return;
	}
	mutex_lock(&odp->umem_mutex);
	if (odp->npages)
		pib_odp_write(mr->dev, mr, 0, mr->npages, true);
	ib_umem_odp_unmap_dma_pages(odp, ib_umem_start(odp), ib_umem_end(odp));
	odp->private = NULL;
	mutex_unlock(&odp->umem_mutex);
}

/*
 * After the device's MR is gone (`destroyed`), its pages, then its MTT
 * range; if the device kept it, the pages still go (the device reaches
 * none of them: pib_odp_quiesce()), and only the range stays the MR's.
 */
void pib_odp_release(struct pib_dev *dev, struct pib_mr *mr, bool destroyed)
{
	ib_umem_odp_release(pib_mr_odp(mr));
	if (destroyed && !mr->implicit)
		pib_mtt_free(dev, mr->mtt);
	kfree(mr->odp_box);
}
