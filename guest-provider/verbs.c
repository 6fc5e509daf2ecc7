// SPDX-License-Identifier: GPL-2.0-only OR Linux-OpenIB
/* Device and port queries, PDs, MRs and address handles. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pib.h"

int pib_query_device(struct ibv_context *context,
		     const struct ibv_query_device_ex_input *input,
		     struct ibv_device_attr_ex *attr, size_t attr_size)
{
	struct ib_uverbs_ex_query_device_resp resp;
	size_t resp_size = sizeof(resp);
	uint64_t fw;
	int err;

	err = ibv_cmd_query_device_any(context, input, attr, attr_size, &resp,
				       &resp_size);
	if (err)
		return err;
	fw = resp.base.fw_ver;
	snprintf(attr->orig_attr.fw_ver, sizeof(attr->orig_attr.fw_ver),
		 "%u.%u.%u", (unsigned int)(fw >> 32) & 0xffff,
		 (unsigned int)(fw >> 16) & 0xffff, (unsigned int)fw & 0xffff);
	return 0;
}

/*
 * ibv_query_rt_values_ex: the core clock in nanoseconds, in raw_clock's
 * tv_nsec as every provider gives a raw count (tv_sec 0), read from the
 * context's doorbell page with no system call.
 */
int pib_query_rt_values(struct ibv_context *context,
			struct ibv_values_ex *values)
{
	uint32_t comp_mask = 0;

	if (values->comp_mask & IBV_VALUES_MASK_RAW_CLOCK) {
		values->raw_clock.tv_sec = 0;
		values->raw_clock.tv_nsec = (long)pib_read_clock(context);
		comp_mask |= IBV_VALUES_MASK_RAW_CLOCK;
	}
	values->comp_mask = comp_mask;
	return 0;
}

int pib_query_port(struct ibv_context *context, uint8_t port,
		   struct ibv_port_attr *attr)
{
	struct ibv_query_port cmd;

	return ibv_cmd_query_port(context, port, attr, &cmd, sizeof(cmd));
}

struct ibv_mr *pib_reg_mr(struct ibv_pd *pd, void *addr, size_t length,
			  uint64_t hca_va, int access)
{
	struct ib_uverbs_reg_mr_resp resp;
	struct ibv_reg_mr cmd;
	struct verbs_mr *vmr = calloc(1, sizeof(*vmr));

	if (!vmr)
		return NULL;
	if (ibv_cmd_reg_mr(pd, addr, length, hca_va, access, vmr, &cmd,
			   sizeof(cmd), &resp, sizeof(resp))) {
		free(vmr);
		return NULL;
	}
	return &vmr->ibv_mr;
}

/*
 * Prefetch of an on-demand MR's pages (docs/prm.md §6.9): the kernel
 * driver maps them, as it maps a page fault's.
 */
int pib_advise_mr(struct ibv_pd *pd, enum ibv_advise_mr_advice advice,
		  uint32_t flags, struct ibv_sge *sg_list, uint32_t num_sge)
{
	return ibv_cmd_advise_mr(pd, advice, flags, sg_list, num_sge);
}

/* In place: the device keeps the keys (REREG_MR, docs/prm.md §6.2). */
int pib_rereg_mr(struct verbs_mr *vmr, int flags, struct ibv_pd *pd, void *addr,
		 size_t length, int access)
{
	struct ib_uverbs_rereg_mr_resp resp;
	struct ibv_rereg_mr cmd;

	return ibv_cmd_rereg_mr(vmr, flags, addr, length, (uintptr_t)addr,
				access, pd, &cmd, sizeof(cmd), &resp,
				sizeof(resp));
}

int pib_dereg_mr(struct verbs_mr *vmr)
{
	int err = ibv_cmd_dereg_mr(vmr);

	if (!err)
		free(vmr);
	return err;
}

struct ibv_mw *pib_alloc_mw(struct ibv_pd *pd, enum ibv_mw_type type)
{
	struct ib_uverbs_alloc_mw_resp resp;
	struct ibv_alloc_mw cmd;
	struct ibv_mw *mw = calloc(1, sizeof(*mw));

	if (!mw)
		return NULL;
	if (ibv_cmd_alloc_mw(pd, type, mw, &cmd, sizeof(cmd), &resp,
			     sizeof(resp))) {
		free(mw);
		return NULL;
	}
	return mw;
}

int pib_dealloc_mw(struct ibv_mw *mw)
{
	int err = ibv_cmd_dealloc_mw(mw);

	if (!err)
		free(mw);
	return err;
}

/*
 * Address handles are built here, with no system call: the address vector
 * is copied into each UD work request.
 */
struct ibv_ah *pib_create_ah(struct ibv_pd *pd, struct ibv_ah_attr *attr)
{
	struct pib_context *ctx = to_pctx(pd->context);
	struct pib_ah *ah;

	if (attr->port_num < 1 || attr->port_num > ctx->num_ports ||
	    attr->sl > 15 ||
	    (attr->is_global && attr->grh.sgid_index >= PIB_GUID_TABLE_LEN)) {
		errno = EINVAL;
		return NULL;
	}
	ah = calloc(1, sizeof(*ah));
	if (!ah)
		return NULL;
	ah->av.dlid = attr->dlid;
	ah->av.sl = attr->sl;
	ah->av.src_path_bits = attr->src_path_bits;
	ah->av.static_rate = attr->static_rate;
	ah->av.port = attr->port_num;
	if (attr->is_global) {
		ah->av.flags = PIB_AV_GRH;
		ah->av.sgid_index = attr->grh.sgid_index;
		ah->av.hop_limit = attr->grh.hop_limit;
		ah->av.traffic_class = attr->grh.traffic_class;
		ah->av.flow_label = attr->grh.flow_label;
		memcpy(ah->av.dgid, attr->grh.dgid.raw, sizeof(ah->av.dgid));
	}
	return &ah->ibv_ah;
}

int pib_destroy_ah(struct ibv_ah *ah)
{
	free(container_of(ah, struct pib_ah, ibv_ah));
	return 0;
}
