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
#define PIB_IB_ACCESS_FLUSH_GLOBAL (1 << 8)
#define PIB_IB_ACCESS_FLUSH ((1 << 8) | (1 << 9))
#else
#define PIB_IB_ACCESS_FLUSH_GLOBAL IB_ACCESS_FLUSH_GLOBAL
#define PIB_IB_ACCESS_FLUSH \
	(IB_ACCESS_FLUSH_GLOBAL | IB_ACCESS_FLUSH_PERSISTENT)
#endif

/*
 * 6.2 also added the capabilities that tell user space of FLUSH and
 * ATOMIC WRITE. 6.1 cannot say them: there the device's are not told.
 */
#if LINUX_VERSION_CODE < KERNEL_VERSION(6, 2, 0)
#define PIB_IB_DEVICE_FLUSH_GLOBAL 0
#define PIB_IB_DEVICE_ATOMIC_WRITE 0
#else
#define PIB_IB_DEVICE_FLUSH_GLOBAL IB_DEVICE_FLUSH_GLOBAL
#define PIB_IB_DEVICE_ATOMIC_WRITE IB_DEVICE_ATOMIC_WRITE
#endif

/*
 * 6.17 passes reg_user_mr a DMA handle (struct ib_dmah, from alloc_dmah,
 * which this driver does not offer: it is always NULL here).
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 17, 0)
#define PIB_DMAH_PARAM struct ib_dmah *dmah,
#define PIB_DMAH_GIVEN (dmah != NULL)
#else
#define PIB_DMAH_PARAM
#define PIB_DMAH_GIVEN false
#endif

/*
 * The 7.x series names pinning a user buffer by its address
 * ib_umem_get_va (ib_umem_get is gone), gives user CQs their own
 * create_user_cq entry point, and resizes them through resize_user_cq
 * (resize_cq is gone). The newest Debian kernel, 7.3, has all three.
 */
#if LINUX_VERSION_CODE >= KERNEL_VERSION(7, 0, 0)
#include <rdma/ib_umem.h>
static inline struct ib_umem *
pib_umem_get(struct ib_device *dev, unsigned long addr, size_t size, int access)
{
	return ib_umem_get_va(dev, addr, size, access);
}
#define PIB_USER_CQ_OPS \
	.create_user_cq = pib_create_cq, .resize_user_cq = pib_resize_user_cq
#else
#define pib_umem_get ib_umem_get
#define PIB_USER_CQ_OPS .resize_cq = pib_resize_cq
#endif

/*
 * 6.16 keeps an on-demand umem's pages in an hmm_dma_map: a pfn_list with
 * HMM_PFN_VALID and HMM_PFN_WRITE, and ib_umem_odp_map_dma_and_lock()
 * faults pages in without DMA-mapping them, which the driver does page
 * by page (hmm_dma_map_pfn, counted in npages, which the unmap takes
 * back). That list has an entry per 4 KiB page whatever the umem's page
 * size, so an on-demand MR there is of 4 KiB pages (PIB_ODP_GET_ACCESS
 * drops IB_ACCESS_HUGETLB). Before, ib_umem_odp_map_dma_and_lock() mapped
 * them, and each DMA address carries ODP_READ_ALLOWED_BIT and
 * ODP_WRITE_ALLOWED_BIT, which are the device's PIB_MTT_READ and
 * PIB_MTT_WRITE (docs/prm.md §6.9).
 */
#include <rdma/ib_umem_odp.h>

#include "pib_hw.h"

#if LINUX_VERSION_CODE >= KERNEL_VERSION(6, 16, 0)
#include <linux/hmm.h>
#include <linux/pci-p2pdma.h>
#define PIB_ODP_READ HMM_PFN_REQ_FAULT
#define PIB_ODP_WRITE HMM_PFN_REQ_WRITE
#define PIB_ODP_GET_ACCESS(access) ((access) & ~IB_ACCESS_HUGETLB)
/* Page `i`'s MTT entry in *entry (0: absent); the umem's mutex is held. */
static inline int pib_odp_entry(struct ib_umem_odp *odp, u64 i, u64 *entry)
{
	struct ib_device *ibdev = odp->umem.ibdev;
	struct pci_p2pdma_map_state p2p = {};
	unsigned long pfn = odp->map.pfn_list[i];
	dma_addr_t dma;

	*entry = 0;
	if (!(pfn & HMM_PFN_VALID))
		return 0;
	dma = hmm_dma_map_pfn(ibdev->dma_device, &odp->map, i, &p2p);
	if (ib_dma_mapping_error(ibdev, dma))
		return -EFAULT;
	if (!(pfn & HMM_PFN_DMA_MAPPED))
		odp->npages++;
	*entry = dma | PIB_MTT_READ | (pfn & HMM_PFN_WRITE ? PIB_MTT_WRITE : 0);
	return 0;
}
#else
#define PIB_ODP_READ ODP_READ_ALLOWED_BIT
#define PIB_ODP_WRITE ODP_WRITE_ALLOWED_BIT
#define PIB_ODP_GET_ACCESS(access) (access)
static inline int pib_odp_entry(struct ib_umem_odp *odp, u64 i, u64 *entry)
{
	static_assert(ODP_READ_ALLOWED_BIT == PIB_MTT_READ &&
		      ODP_WRITE_ALLOWED_BIT == PIB_MTT_WRITE);
	*entry = odp->dma_list[i];
	return 0;
}
#endif

#endif /* PIB_COMPAT_H */
