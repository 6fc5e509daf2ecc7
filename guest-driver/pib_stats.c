// SPDX-License-Identifier: GPL-2.0-only
/*
 * Per-port hardware counters for `rdma statistic` and
 * /sys/class/infiniband/pib_0/ports/N/hw_counters: the device's
 * transport counters (QUERY_COUNTERS, docs/prm.md §4.9), named as rxe
 * names its own.
 */
#include "pib.h"

/* In the order of struct pib_port_counters, whose fields they are. */
static const struct rdma_stat_desc pib_port_stat_descs[] = {
	{.name = "sent_pkts"},
	{.name = "rcvd_pkts"},
	{.name = "duplicate_request"},
	{.name = "out_of_seq_request"},
	{.name = "send_rnr_err"},
	{.name = "invalid_request"},
	{.name = "rcvd_rnr_err"},
	{.name = "rcvd_seq_err"},
	{.name = "ack_timeout"},
	{.name = "retry_exceeded_err"},
	{.name = "retry_rnr_exceeded_err"},
	{.name = "rx_write_requests"},
	{.name = "rx_read_requests"},
	{.name = "rx_atomic_requests"},
	{.name = "implied_nak_seq_err"},
	{.name = "out_of_buffer"},
};

#define PIB_PORT_STATS ARRAY_SIZE(pib_port_stat_descs)

static_assert(PIB_PORT_STATS * sizeof(u64) == sizeof(struct pib_port_counters));

struct rdma_hw_stats *pib_alloc_hw_port_stats(struct ib_device *ibdev,
					      u32 port_num)
{
	return rdma_alloc_hw_stats_struct(pib_port_stat_descs, PIB_PORT_STATS,
					  RDMA_HW_STATS_DEFAULT_LIFESPAN);
}

int pib_get_hw_stats(struct ib_device *ibdev, struct rdma_hw_stats *stats,
		     u32 port, int index)
{
	struct pib_dev *dev = to_pdev(ibdev);
	struct pib_port_counters counters;
	const u64 *values = (const u64 *)&counters;
	int err, i;

	if (!port)
		return -EOPNOTSUPP; /* only per-port counters */
	err = pib_cmd_box(dev, PIB_CMD_QUERY_COUNTERS, 0, port, NULL, 0,
			  &counters, sizeof(counters), NULL);
	if (err)
		return err;
	for (i = 0; i < PIB_PORT_STATS; i++)
		stats->value[i] = values[i];
	return PIB_PORT_STATS;
}
