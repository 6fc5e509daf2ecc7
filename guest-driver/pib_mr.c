// SPDX-License-Identifier: GPL-2.0-only
/* Memory regions: a DMA MR for kernel users, user MRs through the MTT. */
#include "pib.h"

#define PIB_ACCESS_SUPPORTED                              \
	(IB_ACCESS_LOCAL_WRITE | IB_ACCESS_REMOTE_WRITE | \
	 IB_ACCESS_REMOTE_READ | IB_ACCESS_REMOTE_ATOMIC)

static u8 pib_next_key_variant(void)
{
	static atomic_t variant = ATOMIC_INIT(0);

	return atomic_inc_return(&variant);
}

static int pib_create_mr_cmd(struct pib_dev *dev, struct pib_mr *mr,
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

/* Undoes what pib_reg_user_mr() did for the device to reach the pages. */
static void pib_mr_free_pages(struct pib_dev *dev, struct pib_mr *mr)
{
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
static void pib_mr_destroy(struct pib_dev *dev, struct pib_mr *mr)
{
	u32 key = mr->ibmr.lkey;
	int err = pib_cmd(dev, PIB_CMD_DESTROY_MR, key, 0, NULL);

	/* debugfs walks the table under the lock xa_erase() takes. */
	xa_erase(&dev->mrs, key);
	if (err)
		pib_destroy_failed(dev, "MR", key, err);
	else
		pib_mr_free_pages(dev, mr);
	kfree(mr);
}

/* Makes a created MR visible to debugfs; destroys it if that fails. */
static struct ib_mr *pib_mr_publish(struct pib_dev *dev, struct pib_mr *mr)
{
	int err = xa_err(xa_store(&dev->mrs, mr->ibmr.lkey, mr, GFP_KERNEL));

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
	ctx.access = access & PIB_ACCESS_SUPPORTED;
	ctx.flags = PIB_MR_PHYSICAL;
	ctx.length = ~0ull;
	err = pib_create_mr_cmd(dev, mr, &ctx);
	if (err) {
		kfree(mr);
		return ERR_PTR(err);
	}
	return pib_mr_publish(dev, mr);
}

struct ib_mr *pib_reg_user_mr(struct ib_pd *ibpd, u64 start, u64 length,
			      u64 virt, int access, struct ib_udata *udata)
{
	struct pib_dev *dev = to_pdev(ibpd->device);
	struct pib_mr_context ctx = {};
	unsigned long pgsz;
	struct pib_mr *mr;
	int err;

	if (access & ~(PIB_ACCESS_SUPPORTED | IB_ACCESS_OPTIONAL))
		return ERR_PTR(-EOPNOTSUPP);
	if (!length || length > dev->caps.max_mr_size)
		return ERR_PTR(-EINVAL);
	mr = kzalloc(sizeof(*mr), GFP_KERNEL);
	if (!mr)
		return ERR_PTR(-ENOMEM);
	mr->umem = ib_umem_get(ibpd->device, start, length, access);
	if (IS_ERR(mr->umem)) {
		err = PTR_ERR(mr->umem);
		goto free;
	}
	pgsz = ib_umem_find_best_pgsz(mr->umem, dev->caps.page_size_cap, virt);
	if (!pgsz) {
		err = -EINVAL;
		goto release;
	}
	err = pib_mtt_write_umem(dev, mr->umem, pgsz, &mr->mtt, &mr->npages);
	if (err)
		goto release;

	ctx.iova = virt;
	ctx.length = length;
	ctx.pdn = to_ppd(ibpd)->pdn;
	ctx.access = access & PIB_ACCESS_SUPPORTED;
	ctx.mtt_index = mr->mtt;
	ctx.mtt_count = mr->npages;
	ctx.log_page_size = order_base_2(pgsz);
	mr->page_shift = ctx.log_page_size;
	err = pib_create_mr_cmd(dev, mr, &ctx);
	if (err)
		goto free_mtt;
	return pib_mr_publish(dev, mr);

free_mtt:
	pib_mtt_free(dev, mr->mtt);
release:
	ib_umem_release(mr->umem);
free:
	kfree(mr);
	return ERR_PTR(err);
}

int pib_dereg_mr(struct ib_mr *ibmr, struct ib_udata *udata)
{
	pib_mr_destroy(to_pdev(ibmr->device), to_pmr(ibmr));
	return 0; /* see pib_destroy_failed() */
}
