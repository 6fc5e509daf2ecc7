// SPDX-License-Identifier: GPL-2.0-only OR Linux-OpenIB
/* Device matching and user contexts. */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "compat.h"
#include "pib.h"

static void pib_free_context(struct ibv_context *ibctx)
{
	struct pib_context *ctx = to_pctx(ibctx);

	if (ctx->uar)
		munmap(ctx->uar, PIB_PAGE_SIZE);
	free(ctx->qp_table);
	free(ctx->srq_table);
	pthread_mutex_destroy(&ctx->qp_table_lock);
	verbs_uninit_context(&ctx->ibv_ctx);
	free(ctx);
}

static const struct verbs_context_ops pib_ctx_ops = {
	.alloc_mw = pib_alloc_mw,
	.alloc_parent_domain = pib_alloc_parent_domain,
	.alloc_pd = pib_alloc_pd,
	.bind_mw = pib_bind_mw,
	.close_xrcd = pib_close_xrcd,
	.advise_mr = pib_advise_mr,
	.attach_mcast = ibv_cmd_attach_mcast,
	.create_ah = pib_create_ah,
	.create_cq = pib_create_cq,
	.create_cq_ex = pib_create_cq_ex,
	.create_qp = pib_create_qp,
	.create_qp_ex = pib_create_qp_ex,
	.create_srq = pib_create_srq,
	.create_srq_ex = pib_create_srq_ex,
	.dealloc_mw = pib_dealloc_mw,
	.dealloc_pd = pib_dealloc_pd,
	.dereg_mr = pib_dereg_mr,
	.destroy_ah = pib_destroy_ah,
	.destroy_cq = pib_destroy_cq,
	.destroy_qp = pib_destroy_qp,
	.destroy_srq = pib_destroy_srq,
	.detach_mcast = ibv_cmd_detach_mcast,
	.free_context = pib_free_context,
	.get_srq_num = pib_get_srq_num,
	.modify_cq = pib_modify_cq,
	.modify_qp = pib_modify_qp,
	.modify_srq = pib_modify_srq,
	.open_xrcd = pib_open_xrcd,
	.poll_cq = pib_poll_cq,
	.post_recv = pib_post_recv,
	.post_send = pib_post_send,
	.post_srq_recv = pib_post_srq_recv,
	.query_device_ex = pib_query_device,
	.query_port = pib_query_port,
	.query_qp = pib_query_qp,
	.query_rt_values = pib_query_rt_values,
	.query_srq = pib_query_srq,
	.reg_mr = pib_reg_mr,
	.rereg_mr = pib_rereg_mr,
	.req_notify_cq = pib_arm_cq,
	.resize_cq = pib_resize_cq,
};

struct pib_get_context_resp {
	struct ib_uverbs_get_context_resp ibv_resp;
	struct pib_alloc_ucontext_resp drv;
};

static int pib_read_limits(struct pib_context *ctx)
{
	struct ibv_device_attr_ex attr = {};
	int err = pib_query_device(&ctx->ibv_ctx.context, NULL, &attr,
				   sizeof(attr));

	if (err)
		return err;
	ctx->num_ports = attr.orig_attr.phys_port_cnt;
	ctx->max_send_sge = attr.orig_attr.max_sge;
	ctx->max_recv_sge = attr.orig_attr.max_sge;
	if (attr.device_cap_flags_ex & IB_UVERBS_DEVICE_FLUSH_GLOBAL)
		ctx->placement_ops |= IBV_QP_EX_WITH_FLUSH;
	if (attr.device_cap_flags_ex & IB_UVERBS_DEVICE_ATOMIC_WRITE)
		ctx->placement_ops |= IBV_QP_EX_WITH_ATOMIC_WRITE;
	/* QP numbers run from PIB_FIRST_QPN, one per QP the device has. */
	ctx->qp_table_size = PIB_FIRST_QPN + attr.orig_attr.max_qp;
	ctx->qp_table = calloc(ctx->qp_table_size, sizeof(*ctx->qp_table));
	ctx->srq_table_size = attr.orig_attr.max_srq;
	ctx->srq_table = calloc(ctx->srq_table_size, sizeof(*ctx->srq_table));
	return ctx->qp_table && ctx->srq_table ? 0 : ENOMEM;
}

static struct verbs_context *pib_alloc_context(struct ibv_device *ibdev,
					       int cmd_fd, void *private_data)
{
	struct pib_get_context_resp resp = {};
	struct ibv_get_context cmd;
	struct pib_context *ctx;

	ctx = verbs_init_and_alloc_context(ibdev, cmd_fd, ctx, ibv_ctx,
					   RDMA_DRIVER_UNKNOWN);
	if (!ctx)
		return NULL;
	pthread_mutex_init(&ctx->qp_table_lock, NULL);
	if (pib_cmd_get_context(&ctx->ibv_ctx, &cmd, sizeof(cmd),
				&resp.ibv_resp, sizeof(resp)))
		goto err;
	ctx->uar_page = resp.drv.uar_page;
	ctx->log_max_wqe_stride = resp.drv.log_max_wqe_stride;
	ctx->max_inline_data = resp.drv.max_inline_data;
	if (resp.drv.cqe_size != PIB_CQE_SIZE) {
		errno = EPROTO;
		goto err;
	}
	/* Written for doorbells, read for the core clock. */
	ctx->uar = mmap(NULL, PIB_PAGE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED,
			cmd_fd, resp.drv.uar_mmap_offset);
	if (ctx->uar == MAP_FAILED) {
		ctx->uar = NULL;
		goto err;
	}
	verbs_set_ops(&ctx->ibv_ctx, &pib_ctx_ops);
	if (pib_read_limits(ctx))
		goto err;
	return &ctx->ibv_ctx;

err:
	/* What exists so far is what a context frees: the same release. */
	pib_free_context(&ctx->ibv_ctx.context);
	return NULL;
}

static struct verbs_device *pib_device_alloc(struct verbs_sysfs_dev *sysfs)
{
	struct pib_device *dev = calloc(1, sizeof(*dev));

	return dev ? &dev->ibv_dev : NULL;
}

static void pib_uninit_device(struct verbs_device *vdev)
{
	free(container_of(vdev, struct pib_device, ibv_dev));
}

static const struct verbs_match_ent pib_match_table[] = {
	VERBS_PCI_MATCH(PIB_PCI_VENDOR_ID, PIB_PCI_DEVICE_ID, NULL), {}};

static const struct verbs_device_ops pib_dev_ops = {
	.name = "pib",
	.match_min_abi_version = PIB_UVERBS_ABI_VERSION,
	.match_max_abi_version = PIB_UVERBS_ABI_VERSION,
	.match_table = pib_match_table,
	.alloc_device = pib_device_alloc,
	.uninit_device = pib_uninit_device,
	.alloc_context = pib_alloc_context,
};
PROVIDER_DRIVER(pib, pib_dev_ops);
