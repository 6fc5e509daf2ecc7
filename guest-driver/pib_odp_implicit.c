// SPDX-License-Identifier: GPL-2.0-only
/*
 * Implicit on-demand paging (docs/prm.md §6.10): one MR over the whole
 * address space of a process (ibv_reg_mr(pd, NULL, SIZE_MAX, ..._ON_DEMAND)).
 * The device reaches each span of PIB_ODP_SPAN bytes through a child: an
 * on-demand MR over that span, which this file creates the first time the
 * device faults on the span (or a prefetch reaches it) and links to the
 * implicit MR by its parent_key. A child then faults and is invalidated as
 * any on-demand MR (pib_odp.c); it stays until the implicit MR goes, unless
 * the mapping it was made for failed and mapped nothing. (mlx5_ib also
 * frees a child its invalidations emptied; this driver does not yet.)
 */
#include <rdma/ib_umem_odp.h>

#include "pib.h"

/*
 * 2 MiB spans: a child's MTT range is 512 entries, so the device's MTT
 * holds children for 4 GiB of touched memory, and a fault (at most 4 MiB,
 * prm §6.9) creates at most three of them.
 */
#define PIB_ODP_LOG_SPAN PIB_IMPLICIT_MIN_LOG_SPAN
#define PIB_ODP_SPAN (1ULL << PIB_ODP_LOG_SPAN)

/*
 * An implicit MR of `pd`, at iova 0 as the process's addresses are: no
 * pages and no MTT range of its own (its mailbox unused but for marking
 * it on demand); the device's context is filled but for its PD and access.
 */
int pib_odp_reg_implicit(struct pib_dev *dev, struct ib_pd *pd,
			 struct pib_mr *mr, u64 virt, int access,
			 struct pib_mr_context *ctx)
{
	struct ib_umem_odp *odp;
	int err;

	if (!(dev->caps.device_cap_flags & PIB_DEV_CAP_IMPLICIT_ON_DEMAND))
		return -EOPNOTSUPP;
	if (virt)
		return -EINVAL;
	odp = ib_umem_odp_alloc_implicit(pd->device,
					 PIB_ODP_GET_ACCESS(access));
	if (IS_ERR(odp))
		return PTR_ERR(odp);
	mr->implicit = true;
	xa_init(&mr->children);
	mutex_init(&mr->children_lock);
	err = pib_odp_setup(dev, mr, odp, 0, ctx);
	if (err) {
		ib_umem_odp_release(odp);
		return err;
	}
	ctx->length = U64_MAX;
	ctx->log_page_size = PIB_ODP_LOG_SPAN;
	ctx->flags = PIB_MR_IMPLICIT;
	return 0;
}

/* A new child of `parent` for the span at `base`, in dev->mrs. */
static struct pib_mr *pib_odp_child_new(struct pib_dev *dev,
					struct pib_mr *parent, u64 base)
{
	struct pib_mr_context ctx = {};
	struct ib_umem_odp *odp;
	struct pib_mr *child;
	struct ib_mr *published;
	int err;

	child = kzalloc(sizeof(*child), GFP_KERNEL);
	if (!child)
		return ERR_PTR(-ENOMEM);
	odp = ib_umem_odp_alloc_child(to_ib_umem_odp(parent->umem), base,
				      PIB_ODP_SPAN, &pib_odp_notifier_ops);
	if (IS_ERR(odp)) {
		kfree(child);
		return ERR_CAST(odp);
	}
	err = pib_odp_setup(dev, child, odp, base, &ctx);
	if (err) {
		ib_umem_odp_release(odp);
		kfree(child);
		return ERR_PTR(err);
	}
	ctx.pdn = parent->pdn;
	ctx.access = parent->access;
	ctx.parent_key = parent->ibmr.lkey;
	err = pib_create_mr_cmd(dev, child, &ctx);
	if (err) {
		pib_odp_release(dev, child, true);
		kfree(child);
		return ERR_PTR(err);
	}
	pib_odp_publish(child);
	published = pib_mr_publish(dev, child); /* destroys it on failure */
	return IS_ERR(published) ? ERR_CAST(published) : child;
}

/*
 * The child of `parent` for the span holding `va`, made if need be
 * (*made says so); held.
 */
static struct pib_mr *pib_odp_child_get(struct pib_dev *dev,
					struct pib_mr *parent, u64 va,
					bool *made)
{
	unsigned long span = va >> PIB_ODP_LOG_SPAN;
	struct pib_mr *child;
	int err;

	mutex_lock(&parent->children_lock);
	child = xa_load(&parent->children, span);
	*made = !child;
	if (!child) {
		child = pib_odp_child_new(dev, parent,
					  (u64)span << PIB_ODP_LOG_SPAN);
		if (!IS_ERR(child)) {
			err = xa_err(xa_store(&parent->children, span, child,
					      GFP_KERNEL));
			if (err) {
				pib_mr_destroy(dev, child);
				child = ERR_PTR(err);
			}
		}
	}
	if (!IS_ERR(child))
		refcount_inc(&child->odp_users);
	mutex_unlock(&parent->children_lock);
	return child;
}

/*
 * A child made for a mapping that failed and mapped nothing (an address
 * the process has no page at, or a prefetch without faults) goes again:
 * children are made for what the process uses, not for what it names.
 */
static void pib_odp_child_drop(struct pib_dev *dev, struct pib_mr *parent,
			       struct pib_mr *child)
{
	unsigned long span = child->iova >> PIB_ODP_LOG_SPAN;
	bool unused;

	mutex_lock(&parent->children_lock);
	unused = xa_load(&parent->children, span) == child &&
		 !to_ib_umem_odp(child->umem)->npages;
	if (unused)
		xa_erase(&parent->children, span);
	mutex_unlock(&parent->children_lock);
	if (unused)
		pib_mr_destroy(dev, child);
}

/*
 * Maps [va, va + len) of the process for the device through `parent`'s
 * children, span by span, as pib_odp_map() maps an MR's range. Only a
 * process's own addresses have children: the range ends at TASK_SIZE.
 */
int pib_odp_map_implicit(struct pib_dev *dev, struct pib_mr *parent, u64 va,
			 u64 len, bool write, bool fault)
{
	struct pib_mr *child;
	u64 end, next;
	bool made;
	int err = 0;

	if (!len || va >= TASK_SIZE)
		return -EFAULT;
	if (check_add_overflow(va, len, &end) || end > TASK_SIZE)
		end = TASK_SIZE;
	if (write && !parent->umem->writable)
		return -EPERM;
	for (; va < end && !err; va = next) {
		next = min(end, ALIGN_DOWN(va, PIB_ODP_SPAN) + PIB_ODP_SPAN);
		child = pib_odp_child_get(dev, parent, va, &made);
		if (IS_ERR(child))
			return PTR_ERR(child);
		err = pib_odp_map(dev, child, va, next - va, write, fault);
		pib_odp_mr_put(child);
		if (err && made)
			pib_odp_child_drop(dev, parent, child);
	}
	return err;
}

/*
 * The implicit MR goes: no fault or prefetch uses it any more, so no
 * child is made meanwhile. Each child goes first, as any on-demand MR
 * (the device keeps an implicit region while it has children).
 */
void pib_odp_destroy_children(struct pib_mr *parent)
{
	struct pib_mr *child;
	unsigned long span;

	xa_for_each (&parent->children, span, child) {
		xa_erase(&parent->children, span);
		pib_mr_destroy(parent->dev, child);
	}
	xa_destroy(&parent->children);
	mutex_destroy(&parent->children_lock);
}
