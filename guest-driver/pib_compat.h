/* SPDX-License-Identifier: GPL-2.0-only */
/*
 * What differs between the kernels the driver builds against: Debian 12's
 * 6.1, bookworm-backports' 6.12 (the guests'), and the newest Debian
 * offers. Each difference is one definition here, so the rest of the
 * driver is written once, against the newest interface.
 */
#ifndef PIB_COMPAT_H
#define PIB_COMPAT_H

#include <linux/version.h>
#include <rdma/ib_verbs.h>

/* 6.10 passes create_cq the attribute bundle instead of the udata. */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 10, 0)
#define pib_create_cq_arg ib_udata
static inline struct ib_udata *pib_create_cq_udata(struct ib_udata *udata)
{
	return udata;
}
#else
#include <rdma/uverbs_ioctl.h>
#define pib_create_cq_arg uverbs_attr_bundle
static inline struct ib_udata *
pib_create_cq_udata(struct uverbs_attr_bundle *attrs)
{
	return attrs ? &attrs->driver_udata : NULL;
}
#endif

/*
 * 6.2 added the FLUSH access flags, which a QP may be given. Older kernels
 * pass rdma-core's bits for them (IB_UVERBS_ACCESS_FLUSH_*) through
 * unnamed, so they are known by value there.
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 2, 0)
#define PIB_IB_ACCESS_FLUSH ((1 << 8) | (1 << 9))
#else
#define PIB_IB_ACCESS_FLUSH \
	(IB_ACCESS_FLUSH_GLOBAL | IB_ACCESS_FLUSH_PERSISTENT)
#endif

#endif /* PIB_COMPAT_H */
