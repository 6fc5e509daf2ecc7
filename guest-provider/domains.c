// SPDX-License-Identifier: GPL-2.0-only OR Linux-OpenIB
/*
 * Protection domains and parent domains (ibv_alloc_parent_domain). A
 * parent domain stands for its PD in every command (it carries the PD's
 * handle) and holds the application's allocator, which then gives the
 * rings of the QPs, SRQs and CQs made on it (queues.c). The device needs
 * nothing of it: a ring is pages in process memory whoever allocated
 * them, as long as they are page-aligned (docs/prm.md §3.2).
 */
#include <errno.h>
#include <stdlib.h>

#include "pib.h"

struct ibv_pd *pib_alloc_pd(struct ibv_context *context)
{
	struct ib_uverbs_alloc_pd_resp resp;
	struct ibv_alloc_pd cmd;
	struct pib_pd *pd = calloc(1, sizeof(*pd));

	if (!pd)
		return NULL;
	if (ibv_cmd_alloc_pd(context, &pd->ibv_pd, &cmd, sizeof(cmd), &resp,
			     sizeof(resp))) {
		free(pd);
		return NULL;
	}
	return &pd->ibv_pd;
}

/* Thread domains are not offered (ibv_alloc_td fails), so none is named. */
struct ibv_pd *pib_alloc_parent_domain(struct ibv_context *context,
				       struct ibv_parent_domain_init_attr *attr)
{
	struct pib_pd *domain, *pd;

	if (ibv_check_alloc_parent_domain(attr))
		return NULL;
	pd = to_ppd(attr->pd);
	if (attr->comp_mask &
		    ~(uint32_t)(IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS |
				IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT) ||
	    attr->td || pd->protection || attr->pd->context != context) {
		errno = EINVAL;
		return NULL;
	}
	domain = calloc(1, sizeof(*domain));
	if (!domain)
		return NULL;
	ibv_initialize_parent_domain(&domain->ibv_pd, attr->pd);
	domain->protection = pd;
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_ALLOCATORS &&
	    attr->alloc && attr->free) {
		domain->alloc = attr->alloc;
		domain->free = attr->free;
	}
	if (attr->comp_mask & IBV_PARENT_DOMAIN_INIT_ATTR_PD_CONTEXT)
		domain->pd_context = attr->pd_context;
	__atomic_add_fetch(&pd->users, 1, __ATOMIC_RELAXED);
	return &domain->ibv_pd;
}

/*
 * A PD goes once no parent domain stands for it; a parent domain once no
 * QP, SRQ or CQ made on it is left (EBUSY until then).
 */
int pib_dealloc_pd(struct ibv_pd *ibpd)
{
	struct pib_pd *pd = to_ppd(ibpd);
	int err;

	if (__atomic_load_n(&pd->users, __ATOMIC_RELAXED))
		return EBUSY;
	if (pd->protection) {
		__atomic_sub_fetch(&pd->protection->users, 1, __ATOMIC_RELAXED);
		free(pd);
		return 0;
	}
	err = ibv_cmd_dealloc_pd(ibpd);
	if (!err)
		free(pd);
	return err;
}

/* The parent domain `ibpd` is, held by an object made on it; NULL for a PD. */
struct pib_pd *pib_domain_hold(struct ibv_pd *ibpd)
{
	struct pib_pd *pd = ibpd ? to_ppd(ibpd) : NULL;

	if (!pd || !pd->protection)
		return NULL;
	__atomic_add_fetch(&pd->users, 1, __ATOMIC_RELAXED);
	return pd;
}

void pib_domain_release(struct pib_pd *domain)
{
	if (domain)
		__atomic_sub_fetch(&domain->users, 1, __ATOMIC_RELAXED);
}

/* The PD itself: a parent domain's, or the PD. */
struct ibv_pd *pib_protection_of(struct ibv_pd *ibpd)
{
	struct pib_pd *pd = ibpd ? to_ppd(ibpd) : NULL;

	return pd && pd->protection ? &pd->protection->ibv_pd : ibpd;
}
