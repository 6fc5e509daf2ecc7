// SPDX-License-Identifier: GPL-2.0-only
/* Device and port queries, user contexts and their doorbell page, PDs, AHs. */
#include <rdma/ib_mad.h>
#include <rdma/uverbs_ioctl.h>

#include "pib.h"

int pib_query_device(struct ib_device *ibdev, struct ib_device_attr *attr,
		     struct ib_udata *udata)
{
	const struct pib_dev_cap *c = &to_pdev(ibdev)->caps;

	if (udata && (udata->inlen || udata->outlen))
		return -EINVAL;
	memset(attr, 0, sizeof(*attr));
	attr->fw_ver = (u64)(c->fw_version >> 24) << 32 |
		       ((c->fw_version >> 16) & 0xff) << 16 |
		       (c->fw_version & 0xffff);
	attr->sys_image_guid = cpu_to_be64(c->sys_image_guid);
	attr->max_mr_size = c->max_mr_size;
	attr->page_size_cap = c->page_size_cap;
	attr->vendor_id = c->vendor_id;
	attr->vendor_part_id = c->vendor_part_id;
	attr->hw_ver = c->hw_version;
	attr->max_qp = c->max_qp;
	attr->max_qp_wr = c->max_qp_wr;
	if (c->device_cap_flags & PIB_DEV_CAP_SYS_IMAGE_GUID)
		attr->device_cap_flags |= IB_DEVICE_SYS_IMAGE_GUID;
	if (c->device_cap_flags & PIB_DEV_CAP_PORT_ACTIVE_EVENT)
		attr->device_cap_flags |= IB_DEVICE_PORT_ACTIVE_EVENT;
	if (c->device_cap_flags & PIB_DEV_CAP_RNR_NAK_GEN)
		attr->device_cap_flags |= IB_DEVICE_RC_RNR_NAK_GEN;
	if (c->device_cap_flags & PIB_DEV_CAP_BAD_PKEY_CNTR)
		attr->device_cap_flags |= IB_DEVICE_BAD_PKEY_CNTR;
	if (c->device_cap_flags & PIB_DEV_CAP_BAD_QKEY_CNTR)
		attr->device_cap_flags |= IB_DEVICE_BAD_QKEY_CNTR;
	if (c->device_cap_flags & PIB_DEV_CAP_MEM_MGT_EXTENSIONS) {
		attr->device_cap_flags |= IB_DEVICE_MEM_MGT_EXTENSIONS;
		attr->max_fast_reg_page_list_len = c->max_fast_reg_pages;
	}
	if (c->device_cap_flags & PIB_DEV_CAP_MEM_WINDOW)
		attr->device_cap_flags |= IB_DEVICE_MEM_WINDOW;
	if (c->device_cap_flags & PIB_DEV_CAP_MEM_WINDOW_TYPE_2B)
		attr->device_cap_flags |= IB_DEVICE_MEM_WINDOW_TYPE_2B;
	if (c->device_cap_flags & PIB_DEV_CAP_RESIZE_SRQ)
		attr->device_cap_flags |= IB_DEVICE_SRQ_RESIZE;
	if (c->device_cap_flags & PIB_DEV_CAP_XRC)
		attr->device_cap_flags |= IB_DEVICE_XRC;
	if (c->device_cap_flags & PIB_DEV_CAP_FLUSH_GLOBAL)
		attr->device_cap_flags |= PIB_IB_DEVICE_FLUSH_GLOBAL;
	if (c->device_cap_flags & PIB_DEV_CAP_ATOMIC_WRITE)
		attr->device_cap_flags |= PIB_IB_DEVICE_ATOMIC_WRITE;
	attr->max_mw = c->max_mw;
	pib_odp_caps(to_pdev(ibdev), attr);
	/* The core clock counts on in 64 bits: every bit is significant. */
	if (c->device_cap_flags & PIB_DEV_CAP_CQE_TIMESTAMP) {
		attr->hca_core_clock = c->hca_core_clock_khz;
		attr->timestamp_mask = U64_MAX;
	}
	attr->max_send_sge = c->max_send_sge;
	attr->max_recv_sge = c->max_recv_sge;
	attr->max_sge_rd = c->max_sge_rd;
	attr->max_cq = c->max_cq;
	attr->max_cqe = c->max_cqe;
	if (c->device_cap_flags & PIB_DEV_CAP_CQ_MODERATION) {
		attr->cq_caps.max_cq_moderation_count =
			c->max_cq_moderation_count;
		attr->cq_caps.max_cq_moderation_period =
			c->max_cq_moderation_period;
	}
	attr->max_mr = c->max_mr;
	attr->max_pd = c->max_pd;
	attr->max_qp_rd_atom = c->max_qp_rd_atom;
	attr->max_qp_init_rd_atom = c->max_qp_init_rd_atom;
	attr->max_res_rd_atom = c->max_res_rd_atom;
	attr->max_srq = c->max_srq;
	attr->max_srq_wr = c->max_srq_wr;
	attr->max_srq_sge = c->max_srq_sge;
	attr->max_pkeys = c->max_pkeys;
	attr->local_ca_ack_delay = c->local_ca_ack_delay;
	attr->atomic_cap = c->atomic_cap == PIB_ATOMIC_GLOB  ? IB_ATOMIC_GLOB
			   : c->atomic_cap == PIB_ATOMIC_HCA ? IB_ATOMIC_HCA
							     : IB_ATOMIC_NONE;
	attr->max_mcast_grp = c->max_mcast_grp;
	attr->max_mcast_qp_attach = c->max_mcast_qp_attach;
	attr->max_total_mcast_qp_attach = c->max_total_mcast_qp_attach;
	/* Address handles live in host memory, not in the device. */
	attr->max_ah = INT_MAX;
	return 0;
}

static int pib_port_info(struct pib_dev *dev, u32 port,
			 struct pib_port_info *info)
{
	return pib_cmd_box(dev, PIB_CMD_QUERY_PORT, 0, port, NULL, 0, info,
			   sizeof(*info), NULL);
}

int pib_query_port(struct ib_device *ibdev, u32 port, struct ib_port_attr *attr)
{
	struct pib_port_info info;
	int err = pib_port_info(to_pdev(ibdev), port, &info);

	if (err)
		return err;
	/* IBA encodings: the same numbers as the ib_* enums. */
	attr->state = info.state;
	attr->phys_state = info.phys_state;
	attr->max_mtu = info.max_mtu;
	attr->active_mtu = info.active_mtu;
	attr->gid_tbl_len = info.gid_tbl_len;
	attr->port_cap_flags = info.cap_mask;
	attr->max_msg_sz = info.max_msg_sz;
	attr->bad_pkey_cntr = info.bad_pkey_cntr;
	attr->qkey_viol_cntr = info.qkey_viol_cntr;
	attr->pkey_tbl_len = info.pkey_tbl_len;
	attr->lid = info.lid;
	attr->sm_lid = info.sm_lid;
	attr->lmc = info.lmc;
	attr->max_vl_num = info.max_vl_num;
	attr->sm_sl = info.sm_sl;
	attr->subnet_timeout = info.subnet_timeout;
	attr->init_type_reply = info.init_type_reply;
	attr->active_width = info.active_width;
	attr->active_speed = info.active_speed;
	return 0;
}

int pib_get_port_immutable(struct ib_device *ibdev, u32 port,
			   struct ib_port_immutable *immutable)
{
	struct ib_port_attr attr = {};
	int err = pib_query_port(ibdev, port, &attr);

	if (err)
		return err;
	immutable->pkey_tbl_len = attr.pkey_tbl_len;
	immutable->gid_tbl_len = attr.gid_tbl_len;
	immutable->core_cap_flags = RDMA_CORE_PORT_IBA_IB;
	immutable->max_mad_size = IB_MGMT_MAD_SIZE;
	return 0;
}

int pib_query_gid(struct ib_device *ibdev, u32 port, int index,
		  union ib_gid *gid)
{
	struct pib_dev *dev = to_pdev(ibdev);
	u64 guids[PIB_GUID_TABLE_LEN];
	struct pib_port_info info;
	int err;

	if (index < 0 || index >= PIB_GUID_TABLE_LEN)
		return -EINVAL;
	err = pib_port_info(dev, port, &info);
	if (!err)
		err = pib_cmd_box(dev, PIB_CMD_QUERY_GUIDS, 0, port, NULL, 0,
				  guids, sizeof(guids), NULL);
	if (err)
		return err;
	gid->global.subnet_prefix = cpu_to_be64(info.gid_prefix);
	gid->global.interface_id = cpu_to_be64(guids[index]);
	return 0;
}

int pib_query_pkey(struct ib_device *ibdev, u32 port, u16 index, u16 *pkey)
{
	u16 pkeys[PIB_PKEY_TABLE_LEN];
	int err;

	if (index >= PIB_PKEY_TABLE_LEN)
		return -EINVAL;
	err = pib_cmd_box(to_pdev(ibdev), PIB_CMD_QUERY_PKEYS, 0, port, NULL, 0,
			  pkeys, sizeof(pkeys), NULL);
	if (!err)
		*pkey = pkeys[index];
	return err;
}

int pib_modify_port(struct ib_device *ibdev, u32 port, int mask,
		    struct ib_port_modify *props)
{
	u64 in = props->set_port_cap_mask | (u64)props->clr_port_cap_mask << 32;

	if (mask & ~(IB_PORT_RESET_QKEY_CNTR))
		return -EOPNOTSUPP; /* shutting a port down is not offered */
	return pib_cmd_opmod(to_pdev(ibdev), PIB_CMD_MODIFY_PORT,
			     mask & IB_PORT_RESET_QKEY_CNTR ? 1 : 0, port, in,
			     NULL);
}

void pib_get_dev_fw_str(struct ib_device *ibdev, char *str)
{
	u32 v = to_pdev(ibdev)->caps.fw_version;

	snprintf(str, IB_FW_VERSION_NAME_MAX, "%u.%u.%u", v >> 24,
		 (v >> 16) & 0xff, v & 0xffff);
}

/* ---- user contexts ------------------------------------------------------ */

/*
 * Makes a freshly created device object findable by its number (events and
 * completions look it up) and tells user space that number.  On failure the
 * caller destroys the object, which unpublishes it again: an event handler
 * may have found it in the meantime.
 */
int pib_publish_object(struct xarray *table, u32 id, void *obj,
		       struct ib_udata *udata, void *resp, size_t resp_len)
{
	int err = xa_err(xa_store(table, id, obj, GFP_KERNEL));

	if (err || !udata)
		return err;
	return ib_copy_to_udata(udata, resp, min(resp_len, udata->outlen));
}

/*
 * Makes an object unfindable before its memory goes.  debugfs walks the
 * table under the lock xa_cmpxchg() takes, so it sees the object whole or
 * not at all.  The EQ handlers look objects up without a reference (the
 * async one QPs, SRQs and CQs, the completion one CQs): one that runs after
 * the erase finds nothing, and one that found the object before it has
 * returned once synchronize_irq() has, threaded handler included.
 * Callers unpublish after the destroy command, when the device may already
 * have given the number to an object another process made: that one's
 * entry stays, only `obj` is erased.
 */
void pib_unpublish_object(struct pib_dev *dev, struct xarray *table, u32 id,
			  void *obj)
{
	unsigned int i;

	xa_cmpxchg(table, id, obj, NULL, 0);
	synchronize_irq(dev->async_eq.irq);
	for (i = 0; i < dev->num_comp_eqs; i++)
		synchronize_irq(dev->comp_eqs[i].irq);
}

/*
 * A destroy command failed.  A failed command changes nothing (docs/prm.md
 * §4.3), so the device may still own the object and DMA to or from its
 * memory: the caller keeps that memory (rings, pinned pages, MTT range)
 * for good rather than hand out pages the device may still write.  The
 * verb succeeds all the same, as in rxe and siw: uverbs cleanup at process
 * exit and device removal must get rid of every object, and a caller could
 * only retry a destroy that fails again.
 */
void pib_destroy_failed(struct pib_dev *dev, const char *what, u32 num, int err)
{
	dev_warn_ratelimited(&dev->pdev->dev,
			     "destroying %s %u failed (%d), leaking it\n", what,
			     num, err);
}

int pib_alloc_ucontext(struct ib_ucontext *ibuc, struct ib_udata *udata)
{
	struct pib_dev *dev = to_pdev(ibuc->device);
	struct pib_ucontext *uc = to_puc(ibuc);
	struct pib_alloc_ucontext_resp resp = {};
	struct pib_user_mmap_entry *entry;
	u64 uar;
	int err;

	err = pib_cmd(dev, PIB_CMD_ALLOC_UAR, 0, 0, &uar);
	if (err)
		return err;
	uc->uar = uar;
	entry = kzalloc(sizeof(*entry), GFP_KERNEL);
	if (!entry) {
		err = -ENOMEM;
		goto free_uar;
	}
	entry->address = pci_resource_start(dev->pdev, PIB_BAR_DOORBELL) +
			 uar * PIB_PAGE_SIZE;
	err = rdma_user_mmap_entry_insert(ibuc, &entry->rdma_entry,
					  PIB_PAGE_SIZE);
	if (err) {
		kfree(entry);
		goto free_uar;
	}
	uc->uar_entry = &entry->rdma_entry;

	resp.uar_page = uar;
	resp.uar_mmap_offset = rdma_user_mmap_get_offset(uc->uar_entry);
	resp.cqe_size = PIB_CQE_SIZE;
	resp.log_max_wqe_stride = dev->caps.log_max_wqe_stride;
	resp.max_inline_data = dev->caps.max_inline_data;
	err = ib_copy_to_udata(udata, &resp, min(sizeof(resp), udata->outlen));
	if (err) {
		rdma_user_mmap_entry_remove(uc->uar_entry);
		return err; /* the UAR is freed with the entry */
	}
	return 0;

free_uar:
	pib_cmd(dev, PIB_CMD_FREE_UAR, uc->uar, 0, NULL);
	return err;
}

void pib_dealloc_ucontext(struct ib_ucontext *ibuc)
{
	/* The doorbell page is freed when its last mapping is gone. */
	rdma_user_mmap_entry_remove(to_puc(ibuc)->uar_entry);
}

/*
 * The device is going away under a user context (the function is reset
 * after a fatal error): the RDMA core zaps its doorbell mappings, made with
 * rdma_user_mmap_io(), itself; nothing else of ours is mapped.
 */
void pib_disassociate_ucontext(struct ib_ucontext *ibuc)
{
}

int pib_mmap(struct ib_ucontext *ibuc, struct vm_area_struct *vma)
{
	struct rdma_user_mmap_entry *rdma_entry;
	struct pib_user_mmap_entry *entry;
	int err;

	rdma_entry = rdma_user_mmap_entry_get(ibuc, vma);
	if (!rdma_entry)
		return -EINVAL;
	entry = container_of(rdma_entry, struct pib_user_mmap_entry,
			     rdma_entry);
	err = rdma_user_mmap_io(
		ibuc, vma, entry->address >> PAGE_SHIFT, PIB_PAGE_SIZE,
		pgprot_noncached(vma->vm_page_prot), rdma_entry);
	rdma_user_mmap_entry_put(rdma_entry);
	return err;
}

void pib_mmap_free(struct rdma_user_mmap_entry *rdma_entry)
{
	struct pib_user_mmap_entry *entry = container_of(
		rdma_entry, struct pib_user_mmap_entry, rdma_entry);
	struct pib_dev *dev = to_pdev(rdma_entry->ucontext->device);
	u32 uar = (entry->address -
		   pci_resource_start(dev->pdev, PIB_BAR_DOORBELL)) /
		  PIB_PAGE_SIZE;

	/*
	 * No mapping of the page is left, so handing it to another
	 * context cannot let this one ring that context's queues.
	 */
	pib_cmd(dev, PIB_CMD_FREE_UAR, uar, 0, NULL);
	kfree(entry);
}

/* ---- protection domains ---------------------------------------------------
 */

/* No event names a PD: erasing it is enough for debugfs. */
static void pib_pd_destroy(struct pib_dev *dev, u32 pdn)
{
	int err = pib_cmd(dev, PIB_CMD_DEALLOC_PD, pdn, 0, NULL);

	xa_erase(&dev->pds, pdn);
	if (err)
		pib_destroy_failed(dev, "PD", pdn, err);
}

int pib_alloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	struct pib_dev *dev = to_pdev(ibpd->device);
	u64 pdn;
	int err = pib_cmd(dev, PIB_CMD_ALLOC_PD, 0, 0, &pdn);

	if (err)
		return err;
	to_ppd(ibpd)->pdn = pdn;
	err = xa_err(xa_store(&dev->pds, pdn, to_ppd(ibpd), GFP_KERNEL));
	if (err)
		pib_pd_destroy(dev, pdn);
	return err;
}

int pib_dealloc_pd(struct ib_pd *ibpd, struct ib_udata *udata)
{
	pib_pd_destroy(to_pdev(ibpd->device), to_ppd(ibpd)->pdn);
	return 0; /* see pib_destroy_failed() */
}

/* ---- XRC domains (docs/prm.md §6.8) ---------------------------------------
 */

int pib_alloc_xrcd(struct ib_xrcd *ibxrcd, struct ib_udata *udata)
{
	u64 xrcdn;
	int err = pib_cmd(to_pdev(ibxrcd->device), PIB_CMD_ALLOC_XRCD, 0, 0,
			  &xrcdn);

	if (err)
		return err;
	to_pxrcd(ibxrcd)->xrcdn = xrcdn;
	return 0;
}

int pib_dealloc_xrcd(struct ib_xrcd *ibxrcd, struct ib_udata *udata)
{
	struct pib_dev *dev = to_pdev(ibxrcd->device);
	u32 xrcdn = to_pxrcd(ibxrcd)->xrcdn;
	int err = pib_cmd(dev, PIB_CMD_DEALLOC_XRCD, xrcdn, 0, NULL);

	if (err)
		pib_destroy_failed(dev, "XRCD", xrcdn, err);
	return 0; /* see pib_destroy_failed() */
}

/* ---- address handles: an address vector kept in host memory ------------- */

void pib_av_from_ah_attr(struct pib_av *av, const struct rdma_ah_attr *attr)
{
	memset(av, 0, sizeof(*av));
	av->dlid = rdma_ah_get_dlid(attr);
	av->sl = rdma_ah_get_sl(attr);
	av->src_path_bits = rdma_ah_get_path_bits(attr);
	av->static_rate = rdma_ah_get_static_rate(attr);
	av->port = rdma_ah_get_port_num(attr);
	if (rdma_ah_get_ah_flags(attr) & IB_AH_GRH) {
		const struct ib_global_route *grh = rdma_ah_read_grh(attr);

		av->flags = PIB_AV_GRH;
		av->sgid_index = grh->sgid_index;
		av->hop_limit = grh->hop_limit;
		av->traffic_class = grh->traffic_class;
		av->flow_label = grh->flow_label;
		memcpy(av->dgid, grh->dgid.raw, sizeof(av->dgid));
	}
}

void pib_av_to_ah_attr(struct pib_dev *dev, const struct pib_av *av,
		       struct rdma_ah_attr *attr)
{
	memset(attr, 0, sizeof(*attr));
	attr->type = RDMA_AH_ATTR_TYPE_IB;
	rdma_ah_set_dlid(attr, av->dlid);
	rdma_ah_set_sl(attr, av->sl);
	rdma_ah_set_path_bits(attr, av->src_path_bits);
	rdma_ah_set_static_rate(attr, av->static_rate);
	rdma_ah_set_port_num(attr, av->port);
	if (av->flags & PIB_AV_GRH) {
		union ib_gid dgid;

		memcpy(dgid.raw, av->dgid, sizeof(dgid.raw));
		rdma_ah_set_grh(attr, &dgid, av->flow_label, av->sgid_index,
				av->hop_limit, av->traffic_class);
	}
}

int pib_create_ah(struct ib_ah *ibah, struct rdma_ah_init_attr *init,
		  struct ib_udata *udata)
{
	struct pib_dev *dev = to_pdev(ibah->device);
	const struct rdma_ah_attr *attr = init->ah_attr;

	if (attr->type != RDMA_AH_ATTR_TYPE_IB)
		return -EINVAL;
	if (rdma_ah_get_port_num(attr) < 1 ||
	    rdma_ah_get_port_num(attr) > dev->caps.num_ports)
		return -EINVAL;
	if (rdma_ah_get_ah_flags(attr) & IB_AH_GRH &&
	    rdma_ah_read_grh(attr)->sgid_index >= PIB_GUID_TABLE_LEN)
		return -EINVAL;
	pib_av_from_ah_attr(&to_pah(ibah)->av, attr);
	return 0;
}

int pib_query_ah(struct ib_ah *ibah, struct rdma_ah_attr *attr)
{
	pib_av_to_ah_attr(to_pdev(ibah->device), &to_pah(ibah)->av, attr);
	return 0;
}

int pib_destroy_ah(struct ib_ah *ibah, u32 flags)
{
	return 0;
}
