/* SPDX-License-Identifier: GPL-2.0-only OR Linux-OpenIB */
/*
 * The few provider-interface calls whose arguments changed between the
 * rdma-core versions the provider builds against: 56.1 (private ABI 34,
 * Debian trixie) and 65 (private ABI 65, Debian sid). rdma-core's
 * config.h names the private ABI it was built with.
 */
#ifndef PIB_PROVIDER_COMPAT_H
#define PIB_PROVIDER_COMPAT_H

#include <config.h>
#include <infiniband/driver.h>

/* rdma-core 57 (private ABI 57) passes file descriptors along. */
static inline int pib_cmd_get_context(struct verbs_context *context,
				      struct ibv_get_context *cmd,
				      size_t cmd_size,
				      struct ib_uverbs_get_context_resp *resp,
				      size_t resp_size)
{
#if IBVERBS_PABI_VERSION >= 57
	return ibv_cmd_get_context(context, cmd, cmd_size, NULL, resp,
				   resp_size);
#else
	return ibv_cmd_get_context(context, cmd, cmd_size, resp, resp_size);
#endif
}

/* rdma-core 59 lets a provider hand the kernel a CQ buffer of its own. */
static inline int pib_cmd_create_cq_ex(
	struct ibv_context *context, const struct ibv_cq_init_attr_ex *attr,
	struct verbs_cq *cq, struct ibv_create_cq_ex *cmd, size_t cmd_size,
	struct ib_uverbs_ex_create_cq_resp *resp, size_t resp_size)
{
#if IBVERBS_PABI_VERSION >= 59
	return ibv_cmd_create_cq_ex(context, attr, NULL, cq, cmd, cmd_size,
				    resp, resp_size, 0);
#else
	return ibv_cmd_create_cq_ex(context, attr, cq, cmd, cmd_size, resp,
				    resp_size, 0);
#endif
}

#endif /* PIB_PROVIDER_COMPAT_H */
