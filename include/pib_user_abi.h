/* SPDX-License-Identifier: (GPL-2.0-or-later OR BSD-2-Clause) */
/*
 * The private uverbs ABI between the pib kernel driver and the pib
 * rdma-core provider: what each verb's driver-specific request and
 * response carry. This is software, not hardware; include/pib_hw.h is
 * the hardware interface.
 */
#ifndef PIB_USER_ABI_H
#define PIB_USER_ABI_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdint.h>
#endif

/* ib_device.uverbs_abi_ver; the provider accepts exactly this. */
#define PIB_UVERBS_ABI_VERSION 1

/* mmap offsets the driver hands out are opaque; only this one is fixed. */
struct pib_alloc_ucontext_resp {
    uint32_t uar_page; /* the context's doorbell page */
    uint32_t reserved;
    uint64_t uar_mmap_offset; /* mmap() this to reach it */
    uint32_t cqe_size;
    uint32_t log_max_wqe_stride;
    uint32_t max_inline_data;
    uint32_t reserved1;
};

/*
 * Queue rings live in provider memory: page-aligned, a whole number of
 * 4 KiB pages. The driver pins them and lists them in the device's MTT.
 */
struct pib_create_cq_cmd {
    uint64_t buf_addr;
    uint64_t ci_record_addr; /* a u32, 4-byte aligned */
    uint32_t log_size;
    uint32_t reserved;
};

struct pib_create_cq_resp {
    uint32_t cqn;
    uint32_t reserved;
};

/* ibv_resize_cq: the new ring and CI record (docs/prm.md §6.1) */
struct pib_resize_cq_cmd {
    uint64_t buf_addr;
    uint64_t ci_record_addr; /* a u32, 4-byte aligned */
    uint32_t log_size;
    uint32_t reserved;
};

struct pib_resize_cq_resp {
    uint32_t pending; /* CQEs to copy from the old ring to slots 0 .. pending-1 */
    uint32_t reserved;
};

/* ibv_modify_srq(IBV_SRQ_MAX_WR): the new ring, and the producer count of
 * the WQE copied to its slot 0 (docs/prm.md §6.4). Same stride. */
struct pib_resize_srq_cmd {
    uint64_t buf_addr;
    uint32_t log_wqe_count;
    uint32_t base;
};

struct pib_create_qp_cmd {
    uint64_t sq_buf_addr;
    uint64_t rq_buf_addr; /* 0 with an SRQ */
    uint8_t sq_log_wqe_count;
    uint8_t sq_log_wqe_stride;
    uint8_t rq_log_wqe_count;
    uint8_t rq_log_wqe_stride;
    uint32_t reserved;
};

struct pib_create_qp_resp {
    uint32_t qpn;
    uint32_t reserved;
};

struct pib_create_srq_cmd {
    uint64_t buf_addr;
    uint8_t log_wqe_count;
    uint8_t log_wqe_stride;
    uint16_t reserved;
    uint32_t reserved1;
};

struct pib_create_srq_resp {
    uint32_t srqn;
    uint32_t reserved;
};

#endif /* PIB_USER_ABI_H */
