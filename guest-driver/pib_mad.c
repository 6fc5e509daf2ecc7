// SPDX-License-Identifier: GPL-2.0-only
/*
 * The port's management agents live in the device: every SMP and PerfMgt
 * MAD the kernel's MAD layer gives us goes to MAD_IFC, which answers it
 * (docs/prm.md §4.4). Sets that change the port come back as async
 * events, which pib_eq.c turns into IB events.
 */
#include <linux/utsname.h>
#include <rdma/ib_mad.h>

#include "pib.h"

int pib_process_mad(struct ib_device *ibdev, int flags, u32 port,
		    const struct ib_wc *in_wc, const struct ib_grh *in_grh,
		    const struct ib_mad *in, struct ib_mad *out,
		    size_t *out_mad_size, u16 *out_mad_pkey_index)
{
	struct pib_dev *dev = to_pdev(ibdev);
	u8 cls = in->mad_hdr.mgmt_class;
	struct pib_mad_ifc *ifc;
	u64 reply = 0;
	int err;

	if (cls != IB_MGMT_CLASS_SUBN_LID_ROUTED &&
	    cls != IB_MGMT_CLASS_SUBN_DIRECTED_ROUTE &&
	    cls != IB_MGMT_CLASS_PERF_MGMT)
		return IB_MAD_RESULT_SUCCESS;
	ifc = kzalloc(sizeof(*ifc), GFP_KERNEL);
	if (!ifc)
		return IB_MAD_RESULT_FAILURE;
	ifc->slid = in_wc ? ib_lid_cpu16(in_wc->slid) : 0;
	BUILD_BUG_ON(sizeof(ifc->mad) != sizeof(*in));
	memcpy(ifc->mad, in, sizeof(ifc->mad));
	/* The device checks every SMP's M_Key but the kernel's own. */
	err = pib_cmd_box(dev, PIB_CMD_MAD_IFC,
			  flags & IB_MAD_IGNORE_MKEY ? PIB_MAD_IFC_IGNORE_MKEY
						     : 0,
			  port, ifc, sizeof(*ifc), ifc, sizeof(*ifc), &reply);
	if (!err && reply) {
		memcpy(out, ifc->mad, sizeof(*out));
		*out_mad_size = sizeof(*out);
	}
	kfree(ifc);
	if (err)
		return IB_MAD_RESULT_FAILURE;
	return reply ? IB_MAD_RESULT_SUCCESS | IB_MAD_RESULT_REPLY
		     : IB_MAD_RESULT_SUCCESS;
}

int pib_set_node_desc(struct pib_dev *dev, const char *desc)
{
	char buf[PIB_NODE_DESC_LEN] = {};

	strscpy(buf, desc, sizeof(buf));
	return pib_cmd_box(dev, PIB_CMD_SET_NODE_DESC, 0, 0, buf, sizeof(buf),
			   NULL, 0, NULL);
}

int pib_modify_device(struct ib_device *ibdev, int mask,
		      struct ib_device_modify *props)
{
	int err;

	if (mask & ~IB_DEVICE_MODIFY_NODE_DESC)
		return -EOPNOTSUPP;
	if (!(mask & IB_DEVICE_MODIFY_NODE_DESC))
		return 0;
	err = pib_set_node_desc(to_pdev(ibdev), props->node_desc);
	if (!err)
		memcpy(ibdev->node_desc, props->node_desc,
		       sizeof(ibdev->node_desc));
	return err;
}
