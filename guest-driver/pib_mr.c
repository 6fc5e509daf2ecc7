// SPDX-License-Identifier: GPL-2.0-only
/*
 * Memory regions: a DMA MR for kernel users, user MRs through the MTT,
 * and fast-registration MRs that REG_MR WQEs map (docs/prm.md §6.2).
 */
#include "pib.h"

/* What a region may grant: a peer's FLUSH too (docs/prm.md §6.2). */
#define PIB_ACCESS_SUPPORTED (PIB_ACCESS_SAME_BITS | PIB_IB_ACCESS_FLUSH_GLOBAL)

static u8 pib_next_key_variant(void)
{
	static atomic_t variant = ATOMIC_INIT(0);

	return atomic_inc_return(&variant);
}

int pib_create_mr_cmd(struct pib_dev *dev, struct pib_mr *mr,
		      struct pib_mr_context *ctx)
{
	u64 key;
	int err;

	ctx->key_variant = pib_next_key_variant();
	err = pib_cmd_box(dev, PIB_CMD_CREATE_MR, 0, 0, ctx, sizeof(*ctx), NULL,
			  0, &key);
	if (err)
		return err;
	mr->ibmr.lkey = mr->ibmr.rkey = key;
	mr->iova = ctx->iova;
	mr->length = ctx->length;
	mr->access = ctx->access;
	mr->pdn = ctx->pdn;
	return 0;
}

/* Undoes what pib_reg_user_mr() or pib_alloc_mr() did for the device. */
static void pib_mr_free_pages(struct pib_dev *dev, struct pib_mr *mr)
{
	if (mr->odp_box) {
		pib_odp_release(dev, mr, true);
		return;
	}
	if (mr->max_pages) {
		pib_mtt_free(dev, mr->mtt);
		pib_kbuf_free(dev, &mr->page_list);
	}
	if (!mr->umem)
		return;
	pib_mtt_free(dev, mr->mtt);
	ib_umem_release(mr->umem);
}

/*
 * Destroys the device's MR and frees the MR.  If the device refused, the
 * key still lets it (and remote peers) write the pages: they stay pinned
 * and in the MTT for good, and only our bookkeeping is freed.
 */
void pib_mr_destroy(struct pib_dev *dev, struct pib_mr *mr)
{
	u32 key = mr->ibmr.lkey;
	int err;

	/* debugfs walks the table under the lock xa_erase() takes. */
	xa_erase(&dev->mrs, PIB_KEY_INDEX(key));
	if (mr->odp_box) /* its faults are done before the device's MR goes */
		pib_odp_quiesce(mr);
	err = pib_cmd(dev, PIB_CMD_DESTROY_MR, key, 0, NULL);
	if (err)
		pib_destroy_failed(dev, "MR", key, err);
	if (err && mr->odp_box) /* its pages go all the same (pib_odp.c) */
		pib_odp_release(dev, mr, false);
	else if (!err)
		pib_mr_free_pages(dev, mr);
	kfree(mr);
}

/* Makes a created MR visible to debugfs; destroys it if that fails. */
struct ib_mr *pib_mr_publish(struct pib_dev *dev, struct pib_mr *mr)
{
	/* By index: a fast-registration MR's key changes with each REG_MR. */
	int err = xa_err(xa_store(&dev->mrs, PIB_KEY_INDEX(mr->ibmr.lkey), mr,
				  GFP_KERNEL));

	if (err) {
		pib_mr_destroy(dev, mr);
		return ERR_PTR(err);
	}
	return &mr->ibmr;
}

struct ib_mr *pib_get_dma_mr(struct ib_pd *ibpd, int access)
{
	struct pib_dev *dev = to_pdev(ibpd->device);
	struct pib_mr_context ctx = {};
	struct pib_mr *mr;
	int err;

	if (access & ~(PIB_ACCESS_SUPPORTED | IB_ACCESS_OPTIONAL))
		return ERR_PTR(-EOPNOTSUPP);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	ctx.pdn = to_ppd(ibpd)->pdn;
	ctx.access = pib_access_to_hw(access);
	ctx.flags = PIB_MR_PHYSICAL;
	ctx.length = ~0ull;
	err = pib_create_mr_cmd(dev, mr, &ctx);
	if (err) {
		kfree(mr);
		return ERR_PTR(err);
	}
	return pib_mr_publish(dev, mr);
}

/* The pages of a new translation, pinned and in a fresh MTT range. */
struct pib_mr_pages {
	struct ib_umem *umem;
	u32 mtt;
	u32 npages;
	u8 page_shift;
};

static int pib_mr_pin(struct pib_dev *dev, struct ib_pd *pd, u64 start,
		      u64 length, u64 virt, int access, struct pib_mr_pages *p)
{
	unsigned long pgsz;
	int err;

	p->umem = pib_umem_get(pd->device, start, length, access);
	if (IS_ERR(p->umem))
		return PTR_ERR(p->umem);
	pgsz = ib_umem_find_best_pgsz(p->umem, dev->caps.page_size_cap, virt);
	err = pgsz ? pib_mtt_write_umem(dev, p->umem, pgsz, &p->mtt, &p->npages)
		   : -EINVAL;
	if (err) {
		ib_umem_release(p->umem);
		return err;
	}
	p->page_shift = order_base_2(pgsz);
	return 0;
}

/*
 * An on-demand MR (docs/prm.md §6.9): nothing pinned, its pages mapped as
 * the device faults on them (pib_odp.c).
 */
static struct ib_mr *pib_reg_odp_mr(struct pib_dev *dev, struct ib_pd *ibpd,
				    struct pib_mr *mr, u64 start, u64 length,
				    u64 virt, int access)
{
	struct pib_mr_context ctx = {};
	int err;

	err = pib_odp_reg(dev, ibpd, mr, start, length, virt, access, &ctx);
	if (err)
		goto free;
	ctx.pdn = to_ppd(ibpd)->pdn;
	ctx.access = pib_access_to_hw(access);
	err = pib_create_mr_cmd(dev, mr, &ctx);
	if (err) {
		pib_odp_release(dev, mr, true);
		goto free;
	}
	pib_odp_publish(mr);
	return pib_mr_publish(dev, mr);

free:
	kfree(mr);
	return ERR_PTR(err);
}

struct ib_mr *pib_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
			      u64 virt, int access,
			      PIB_DMAH_PARAM struct ib_udata *udata)
{
	struct pib_dev *dev = to_pdev(ibpd->device);
	struct pib_mr_context ctx = {};
	struct pib_mr_pages pages;
	struct pib_mr *mr;
	int err;

	if (access & ~(PIB_ACCESS_SUPPORTED | IB_ACCESS_OPTIONAL |
		       PIB_ACCESS_ON_DEMAND) ||
	    PIB_DMAH_GIVEN)
		return ERR_PTR(-EOPNOTSUPP);
	if (!length || (length > dev->caps.max_mr_size && length != U64_MAX))
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	if (access & IB_ACCESS_ON_DEMAND)
		return pib_reg_odp_mr(dev, ibpd, mr, start, length, virt,
				      access);
	if (length > dev->caps.max_mr_size) {
		err = -EINVAL;
		goto free;
	}
	err = pib_mr_pin(dev, ibpd, start, length, virt, access, &pages);
	if (err)
		goto free;
	mr->umem = pages.umem;
	mr->mtt = pages.mtt;
	mr->npages = pages.npages;
	mr->page_shift = pages.page_shift;

	ctx.iova = virt;
	ctx.length = length;
	ctx.pdn = to_ppd(ibpd)->pdn;
	ctx.access = pib_access_to_hw(access);
	ctx.mtt_index = mr->mtt;
	ctx.mtt_count = mr->npages;
	ctx.log_page_size = mr->page_shift;
	err = pib_create_mr_cmd(dev, mr, &ctx);
	if (err)
		goto unpin;
	return pib_mr_publish(dev, mr);

unpin:
	pib_mtt_free(dev, mr->mtt);
	ib_umem_release(mr->umem);
free:
	kfree(mr);
	return ERR_PTR(err);
}

/*
 * A free fast-registration MR for kernel ULPs: ib_map_mr_sg() fills its
 * page list and an IB_WR_REG_MR maps it (pib_qp.c).
 */
struct ib_mr *pib_alloc_mr(struct ib_pd *ibpd, enum ib_mr_type mr_type,
			   u32 max_num_sg)
{
	struct pib_dev *dev = to_pdev(ibpd->device);
	struct pib_mr_context ctx = {};
	struct pib_mr *mr;
	int err;

	if (mr_type != IB_MR_TYPE_MEM_REG)
		return ERR_PTR(-EOPNOTSUPP);
	if (!max_num_sg || max_num_sg > dev->caps.max_fast_reg_pages)
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	err = pib_kbuf_alloc(dev, &mr->page_list, max_num_sg * sizeof(u64));
	if (err)
		goto free;
	err = pib_mtt_alloc(dev, max_num_sg, &mr->mtt);
	if (err)
		goto free_list;
	mr->max_pages = max_num_sg;
	ctx.pdn = to_ppd(ibpd)->pdn;
	ctx.flags = PIB_MR_FAST_REG;
	ctx.mtt_index = mr->mtt;
	ctx.mtt_count = max_num_sg;
	err = pib_create_mr_cmd(dev, mr, &ctx);
	if (err)
		goto free_mtt;
	return pib_mr_publish(dev, mr);

free_mtt:
	pib_mtt_free(dev, mr->mtt);
free_list:
	pib_kbuf_free(dev, &mr->page_list);
free:
	kfree(mr);
	return ERR_PTR(err);
}

static int pib_set_page(struct ib_mr *ibmr, u64 addr)
{
	struct pib_mr *mr = to_pmr(ibmr);
	__le64 *pages = mr->page_list.va;

	if (mr->npages == mr->max_pages)
		return -ENOMEM;
	pages[mr->npages++] = cpu_to_le64(addr);
	return 0;
}

int pib_map_mr_sg(struct ib_mr *ibmr, struct scatterlist *sg, int sg_nents,
		  unsigned int *sg_offset)
{
	struct pib_mr *mr = to_pmr(ibmr);

	mr->npages = 0;
	return ib_sg_to_pages(ibmr, sg, sg_nents, sg_offset, pib_set_page);
}

int pib_alloc_mw(struct ib_mw *ibmw, struct ib_udata *udata)
{
	struct pib_dev *dev = to_pdev(ibmw->device);
	struct pib_mw_context ctx = {};
	u64 key;
	int err;

	ctx.pdn = to_ppd(ibmw->pd)->pdn;
	switch (ibmw->type) {
	case IB_MW_TYPE_1:
		ctx.type = PIB_MW_TYPE_1;
		break;
	case IB_MW_TYPE_2:
		ctx.type = PIB_MW_TYPE_2;
		break;
	default:
		return -EOPNOTSUPP;
	}
	ctx.key_variant = pib_next_key_variant();
	err = pib_cmd_box(dev, PIB_CMD_CREATE_MW, 0, 0, &ctx, sizeof(ctx), NULL,
			  0, &key);
	if (err)
		return err;
	ibmw->rkey = key;
	return 0;
}

/* The device finds a window by its index: binds change the variant. */
int pib_dealloc_mw(struct ib_mw *ibmw)
{
	struct pib_dev *dev = to_pdev(ibmw->device);
	int err = pib_cmd(dev, PIB_CMD_DESTROY_MW, ibmw->rkey, 0, NULL);

	if (err)
		pib_destroy_failed(dev, "MW", ibmw->rkey, err);
	return 0; /* see pib_destroy_failed() */
}

/*
 * ibv_rereg_mr, in place (REREG_MR, docs/prm.md §6.2): the keys stay, as
 * users of the old ones expect. A new translation is pinned and written
 * first; the old one is let go only once the device has switched.
 */
struct ib_mr *pib_rereg_user_mr(struct ib_mr *ibmr, int flags, u64 start,
				u64 length, u64 virt, int access,
				struct ib_pd *pd, struct ib_udata *udata)
{
	struct pib_dev *dev = to_pdev(ibmr->device);
	struct pib_mr *mr = to_pmr(ibmr);
	struct pib_mr_pages now = {
		.umem = mr->umem,
		.mtt = mr->mtt,
		.npages = mr->npages,
		.page_shift = mr->page_shift,
	};
	struct pib_mr_context ctx = {};
	int err;

	/* Not an on-demand MR, nor into one: deregister and register. */
	if (flags & ~IB_MR_REREG_SUPPORTED || !mr->umem || mr->odp_box ||
	    (flags & IB_MR_REREG_ACCESS && access & IB_ACCESS_ON_DEMAND))
		return ERR_PTR(-EOPNOTSUPP);
	if (!(flags & IB_MR_REREG_PD) || !pd)
		pd = ibmr->pd;
	if (!(flags & IB_MR_REREG_ACCESS))
		access = pib_access_from_hw(mr->access);
	if (access & ~(PIB_ACCESS_SUPPORTED | IB_ACCESS_OPTIONAL))
		return ERR_PTR(-EOPNOTSUPP);
	if (flags & IB_MR_REREG_TRANS) {
		if (!length || length > dev->caps.max_mr_size)
			return ERR_PTR(-EINVAL);
		err = pib_mr_pin(dev, pd, start, length, virt, access, &now);
		if (err)
			return ERR_PTR(err);
	} else {
		virt = mr->iova;
		length = mr->length;
	}
	ctx.iova = virt;
	ctx.length = length;
	ctx.pdn = to_ppd(pd)->pdn;
	ctx.access = pib_access_to_hw(access);
	ctx.mtt_index = now.mtt;
	ctx.mtt_count = now.npages;
	ctx.log_page_size = now.page_shift;
	err = pib_cmd_box(dev, PIB_CMD_REREG_MR, 0, ibmr->lkey, &ctx,
			  sizeof(ctx), NULL, 0, NULL);
	if (err) {
		if (now.umem != mr->umem) {
			pib_mtt_free(dev, now.mtt);
			ib_umem_release(now.umem);
		}
		return ERR_PTR(err);
	}
	if (now.umem != mr->umem) {
		pib_mtt_free(dev, mr->mtt);
		ib_umem_release(mr->umem);
	}
	mr->umem = now.umem;
	mr->mtt = now.mtt;
	mr->npages = now.npages;
	mr->page_shift = now.page_shift;
	mr->iova = virt;
	mr->length = length;
	mr->access = ctx.access;
	mr->pdn = ctx.pdn;
	return NULL;
}

int pib_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	pib_mr_destroy(to_pdev(ibmr->device), to_pmr(ibmr));
	return 0; /* see pib_destroy_failed() */
}
