// SPDX-License-Identifier: GPL-2.0-only
/*
 * Multicast: a UD QP joins or leaves a group (docs/prm.md §5.9). The SA
 * join that gives the MLID is the ULP's business (IPoIB, rdma_cm); the
 * device only learns which of its QPs receive the group's packets.
 */
#include "pib.h"

static int pib_mcast_cmd(struct ib_qp *ibqp, union ib_gid *gid, u16 lid,
			 u16 opcode)
{
	struct pib_dev *dev = to_pdev(ibqp->device);
	struct pib_mcast m = {.mlid = lid};

	memcpy(m.gid, gid->raw, sizeof(m.gid));
	return pib_cmd_box(dev, opcode, 0, to_pqp(ibqp)->qpn, &m, sizeof(m),
			   NULL, 0, NULL);
}

int pib_attach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid)
{
	return pib_mcast_cmd(ibqp, gid, lid, PIB_CMD_ATTACH_MCAST);
}

int pib_detach_mcast(struct ib_qp *ibqp, union ib_gid *gid, u16 lid)
{
	return pib_mcast_cmd(ibqp, gid, lid, PIB_CMD_DETACH_MCAST);
}
