// SPDX-License-Identifier: GPL-2.0-only
/*
 * pib: the Linux driver of the pib-hca emulated InfiniBand HCA.
 *
 * Probe brings the device up the way docs/prm.md §2 prescribes (identify,
 * reset, read capabilities, INIT_HCA), sets up the event queues and
 * registers an ib_device whose verbs are in the other pib_*.c files.
 */
#include <linux/module.h>
#include <linux/utsname.h>

#include "pib.h"

MODULE_AUTHOR("pib-hca developers");
MODULE_DESCRIPTION("pib-hca emulated InfiniBand HCA driver");
MODULE_LICENSE("GPL");

static const struct ib_device_ops pib_dev_ops = {
	.owner = THIS_MODULE,
	.driver_id = RDMA_DRIVER_UNKNOWN,
	.uverbs_abi_ver = PIB_UVERBS_ABI_VERSION,

	.alloc_hw_port_stats = pib_alloc_hw_port_stats,
	.alloc_pd = pib_alloc_pd,
	.alloc_xrcd = pib_alloc_xrcd,
	.alloc_mr = pib_alloc_mr,
	.alloc_mw = pib_alloc_mw,
	.alloc_ucontext = pib_alloc_ucontext,
	.attach_mcast = pib_attach_mcast,
	.create_ah = pib_create_ah,
	.create_cq = pib_create_cq,
	.create_qp = pib_create_qp,
	.create_srq = pib_create_srq,
	.dealloc_mw = pib_dealloc_mw,
	.dealloc_pd = pib_dealloc_pd,
	.dealloc_xrcd = pib_dealloc_xrcd,
	.dealloc_ucontext = pib_dealloc_ucontext,
	.dereg_mr = pib_dereg_mr,
	.destroy_ah = pib_destroy_ah,
	.destroy_cq = pib_destroy_cq,
	.destroy_qp = pib_destroy_qp,
	.destroy_srq = pib_destroy_srq,
	.detach_mcast = pib_detach_mcast,
	.get_dev_fw_str = pib_get_dev_fw_str,
	.get_hw_stats = pib_get_hw_stats,
	.get_dma_mr = pib_get_dma_mr,
	.get_port_immutable = pib_get_port_immutable,
	.map_mr_sg = pib_map_mr_sg,
	.disassociate_ucontext = pib_disassociate_ucontext,
	.mmap = pib_mmap,
	.mmap_free = pib_mmap_free,
	.modify_cq = pib_modify_cq,
	.modify_device = pib_modify_device,
	.modify_port = pib_modify_port,
	.modify_qp = pib_modify_qp,
	.modify_srq = pib_modify_srq,
	.poll_cq = pib_poll_cq,
	.post_recv = pib_post_recv,
	.post_send = pib_post_send,
	.post_srq_recv = pib_post_srq_recv,
	.process_mad = pib_process_mad,
	.query_ah = pib_query_ah,
	.query_device = pib_query_device,
	.query_gid = pib_query_gid,
	.query_pkey = pib_query_pkey,
	.query_port = pib_query_port,
	.query_qp = pib_query_qp,
	.query_srq = pib_query_srq,
	.reg_user_mr = pib_reg_user_mr,
	.rereg_user_mr = pib_rereg_user_mr,
	.req_notify_cq = pib_req_notify_cq,
	PIB_USER_CQ_OPS,

	INIT_RDMA_OBJ_SIZE(ib_ah, pib_ah, ibah),
	INIT_RDMA_OBJ_SIZE(ib_cq, pib_cq, ibcq),
	INIT_RDMA_OBJ_SIZE(ib_mw, pib_mw, ibmw),
	INIT_RDMA_OBJ_SIZE(ib_pd, pib_pd, ibpd),
	INIT_RDMA_OBJ_SIZE(ib_qp, pib_qp, ibqp),
	INIT_RDMA_OBJ_SIZE(ib_srq, pib_srq, ibsrq),
	INIT_RDMA_OBJ_SIZE(ib_ucontext, pib_ucontext, ibuc),
	INIT_RDMA_OBJ_SIZE(ib_xrcd, pib_xrcd, ibxrcd),
};

/* Prefetch of on-demand MRs, with the device's page faults (pib_odp.c). */
static const struct ib_device_ops pib_odp_ops = {
	.advise_mr = pib_advise_mr,
	.fill_res_mr_entry = pib_odp_fill_res_mr_entry,
};

/* Identify and reset the device (docs/prm.md §2, "Reset and initialisation").
 */
static int pib_hw_reset(struct pib_dev *dev)
{
	struct device *d = &dev->pdev->dev;
	u32 id = readl(dev->regs + PIB_REG_ID);
	u32 version = readl(dev->regs + PIB_REG_IF_VERSION);

	if (id != PIB_ID_MAGIC) {
		dev_err(d, "ID register reads 0x%08x, not a pib-hca\n", id);
		return -ENODEV;
	}
	if (PIB_IF_VERSION_MAJOR(version) !=
		    PIB_IF_VERSION_MAJOR(PIB_IF_VERSION_CURRENT) ||
	    PIB_IF_VERSION_MINOR(version) <
		    PIB_IF_VERSION_MINOR(PIB_IF_VERSION_CURRENT)) {
		dev_err(d, "interface version %u.%u; this driver needs %u.%u\n",
			PIB_IF_VERSION_MAJOR(version),
			PIB_IF_VERSION_MINOR(version),
			PIB_IF_VERSION_MAJOR(PIB_IF_VERSION_CURRENT),
			PIB_IF_VERSION_MINOR(PIB_IF_VERSION_CURRENT));
		return -ENODEV;
	}
	writel(PIB_RESET_MAGIC, dev->regs + PIB_REG_RESET);
	if (!(readl(dev->regs + PIB_REG_STATUS) & PIB_STATUS_READY)) {
		dev_err(d, "device not ready after reset\n");
		return -EIO;
	}
	return 0;
}

static int pib_hw_init(struct pib_dev *dev)
{
	u64 uar;
	int err;

	err = pib_cmd_box(dev, PIB_CMD_QUERY_DEV_CAP, 0, 0, NULL, 0, &dev->caps,
			  sizeof(dev->caps), NULL);
	if (err)
		return err;
	if (!dev->caps.num_ports || dev->caps.num_ports > PIB_MAX_PORTS)
		return -EIO;
	err = pib_cmd(dev, PIB_CMD_INIT_HCA, 0, 0, NULL);
	if (err)
		return err;
	/* The kernel's own doorbell page. */
	err = pib_cmd(dev, PIB_CMD_ALLOC_UAR, 0, 0, &uar);
	if (err)
		return err;
	dev->kernel_uar = uar;
	dev->kdb = pci_iomap_range(dev->pdev, PIB_BAR_DOORBELL,
				   uar * PIB_PAGE_SIZE, PIB_PAGE_SIZE);
	return dev->kdb ? 0 : -ENOMEM;
}

static void pib_hw_close(struct pib_dev *dev)
{
	if (dev->kdb)
		pci_iounmap(dev->pdev, dev->kdb);
	dev->kdb = NULL;
	pib_cmd(dev, PIB_CMD_CLOSE_HCA, 0, 0, NULL);
	writel(PIB_RESET_MAGIC, dev->regs + PIB_REG_RESET);
}

static void pib_init_ibdev(struct pib_dev *dev)
{
	struct ib_device *ibdev = &dev->ibdev;

	/* The PCI function is the parent: user space matches providers by it.
	 */
	ibdev->dev.parent = &dev->pdev->dev;
	ibdev->node_type = RDMA_NODE_IB_CA;
	ibdev->phys_port_cnt = dev->caps.num_ports;
	ibdev->num_comp_vectors = dev->num_comp_eqs;
	ibdev->node_guid = cpu_to_be64(dev->caps.node_guid);
	ibdev->local_dma_lkey = 0;
	snprintf(ibdev->node_desc, sizeof(ibdev->node_desc), "%s pib_hca",
		 init_utsname()->nodename);
	ib_set_device_ops(ibdev, &pib_dev_ops);
	if (dev->caps.device_cap_flags & PIB_DEV_CAP_ON_DEMAND_PAGING)
		ib_set_device_ops(ibdev, &pib_odp_ops);
	/* ib_core moderates its own CQs' events as the load goes (rdma_dim);
	 * `rdma dev set <dev> adaptive-moderation off` stops it. */
	ibdev->use_cq_dim =
		!!(dev->caps.device_cap_flags & PIB_DEV_CAP_CQ_MODERATION);
}

/*
 * After a fatal error the device does nothing until it is reset (docs/prm.md
 * §2.2). Every user hears IB_EVENT_DEVICE_FATAL first; then the function
 * is unbound and bound again, as mlx5's health recovery does: pib_remove()
 * unregisters the IB device (kernel users let go of it, user contexts are
 * disassociated) and pib_probe() resets the function and brings it up anew.
 * May sleep (it runs in the async EQ's handler thread or a command).
 */
static struct pci_driver pib_pci_driver;
static struct workqueue_struct *pib_recovery_wq;

/*
 * The recovery of a function after a fatal error. It holds the PCI
 * device, not the pib_dev, which goes away as the driver is unbound and
 * bound again under it.
 */
struct pib_recovery {
	struct work_struct work;
	struct pci_dev *pdev;
};

static void pib_recover(struct work_struct *work)
{
	struct pib_recovery *r = container_of(work, struct pib_recovery, work);
	struct pci_dev *pdev = r->pdev;
	struct pib_dev *dev;
	bool failed;

	/* Only while the device that failed is bound: an unbind since ends
	 * the matter, and a new binding has a new device. */
	device_lock(&pdev->dev);
	dev = pdev->dev.driver == &pib_pci_driver.driver ? pci_get_drvdata(pdev)
							 : NULL;
	failed = dev && test_bit(PIB_DEV_FATAL, &dev->state);
	device_unlock(&pdev->dev);
	/* pib_remove() unregisters the IB device (kernel users let go of it,
	 * user contexts are disassociated); pib_probe() resets the function
	 * and brings it up anew. */
	if (failed && device_reprobe(&pdev->dev))
		dev_err(&pdev->dev, "not bound again after a fatal error\n");
	pci_dev_put(pdev);
	kfree(r);
}

static void pib_schedule_recovery(struct pib_dev *dev)
{
	struct pib_recovery *r = kzalloc(sizeof(*r), GFP_ATOMIC);

	if (!r) {
		dev_err(&dev->pdev->dev, "no memory to recover\n");
		return;
	}
	INIT_WORK(&r->work, pib_recover);
	r->pdev = pci_dev_get(dev->pdev);
	queue_work(pib_recovery_wq, &r->work);
}

/*
 * After a fatal error the device does nothing until it is reset (docs/prm.md
 * §2.2). Every user hears IB_EVENT_DEVICE_FATAL, kernel QPs' work completes
 * flushed (pib_cq.c), then the function is unbound and bound again, which
 * resets it, as mlx5's health recovery reloads the device. Only a device
 * that is registered and not being removed recovers: during probe the
 * failing commands end the probe, during removal the reset that ends it.
 */
void pib_enter_error_state(struct pib_dev *dev, const char *why)
{
	struct ib_event event = {
		.device = &dev->ibdev,
		.event = IB_EVENT_DEVICE_FATAL,
		.element.port_num = 1,
	};

	if (test_and_set_bit(PIB_DEV_FATAL, &dev->state))
		return;
	dev_err(&dev->pdev->dev,
		"fatal device error (%s); resetting the function\n", why);
	queue_work(system_wq, &dev->flush_work);
	if (!test_bit(PIB_DEV_LIVE, &dev->state))
		return;
	ib_dispatch_event(&event);
	pib_schedule_recovery(dev);
}

static int pib_probe(struct pci_dev *pdev, const struct pci_device_id *id)
{
	struct pib_dev *dev;
	int err;

	dev = ib_alloc_device(pib_dev, ibdev);
	if (!dev)
		return -ENOMEM;
	dev->pdev = pdev;
	xa_init(&dev->cqs);
	xa_init(&dev->qps);
	xa_init(&dev->srqs);
	xa_init(&dev->pds);
	xa_init(&dev->mrs);
	INIT_WORK(&dev->flush_work, pib_flush_work);
	INIT_LIST_HEAD(&dev->kernel_qps);
	spin_lock_init(&dev->kernel_qps_lock);
	pci_set_drvdata(pdev, dev);

	err = pci_enable_device_mem(pdev);
	if (err)
		goto free_dev;
	err = pci_request_regions(pdev, PIB_DRV_NAME);
	if (err)
		goto disable;
	pci_set_master(pdev);
	err = dma_set_mask_and_coherent(&pdev->dev, DMA_BIT_MASK(64));
	if (err)
		goto release;
	dev->regs = pci_iomap(pdev, PIB_BAR_REGS, PIB_REGS_SIZE);
	if (!dev->regs) {
		err = -ENOMEM;
		goto release;
	}
	err = pib_hw_reset(dev);
	if (err)
		goto unmap;
	err = pib_cmd_init(dev);
	if (err)
		goto unmap;
	err = pib_hw_init(dev);
	if (err)
		goto close;
	/* Page faults are mapped here, not on the async EQ's thread
	 * (pib_odp.c). */
	dev->odp_wq =
		alloc_workqueue("pib_odp", WQ_UNBOUND | WQ_MEM_RECLAIM, 0);
	if (!dev->odp_wq) {
		err = -ENOMEM;
		goto close;
	}
	err = pib_eq_setup(dev);
	if (err)
		goto odp;

	pib_init_ibdev(dev);
	err = pib_set_node_desc(dev, dev->ibdev.node_desc);
	if (err)
		goto eq;
	err = ib_register_device(&dev->ibdev, "pib_%d", &pdev->dev);
	if (err)
		goto eq;
	pib_debugfs_init(dev);
	set_bit(PIB_DEV_LIVE, &dev->state);
	/* A fatal error while it registered is recovered now. */
	if (test_bit(PIB_DEV_FATAL, &dev->state))
		pib_schedule_recovery(dev);
	dev_info(&pdev->dev,
		 "%s: node GUID %016llx, %u port(s), firmware %u.%u.%u\n",
		 dev_name(&dev->ibdev.dev), dev->caps.node_guid,
		 dev->caps.num_ports, dev->caps.fw_version >> 24,
		 (dev->caps.fw_version >> 16) & 0xff,
		 dev->caps.fw_version & 0xffff);
	return 0;

eq:
	pib_eq_teardown(dev);
odp:
	destroy_workqueue(dev->odp_wq);
close:
	pib_hw_close(dev);
	pib_cmd_cleanup(dev);
unmap:
	pci_iounmap(pdev, dev->regs);
release:
	pci_release_regions(pdev);
disable:
	pci_disable_device(pdev);
free_dev:
	cancel_work_sync(&dev->flush_work);
	ib_dealloc_device(&dev->ibdev);
	return err;
}

static void pib_remove(struct pci_dev *pdev)
{
	struct pib_dev *dev = pci_get_drvdata(pdev);
	struct workqueue_struct *odp_wq;

	clear_bit(PIB_DEV_LIVE, &dev->state); /* no recovery from now on */
	pib_debugfs_cleanup(dev);
	ib_unregister_device(&dev->ibdev);
	/*
	 * No fault is queued from now on (the async EQ's thread may be at one:
	 * synchronize_irq waits for it); those queued resume (or fail) while
	 * commands still run.
	 */
	odp_wq = dev->odp_wq;
	WRITE_ONCE(dev->odp_wq, NULL);
	synchronize_irq(dev->async_eq.irq);
	destroy_workqueue(odp_wq);
	pib_eq_teardown(dev);
	pib_hw_close(dev);
	pib_cmd_cleanup(dev);
	pci_iounmap(pdev, dev->regs);
	pci_release_regions(pdev);
	pci_disable_device(pdev);
	cancel_work_sync(&dev->flush_work); /* nothing can queue it now */
	WARN(atomic_read(&dev->kbufs) || atomic_read(&dev->user_rings),
	     "pib: leaked %d DMA buffers and %d pinned user rings\n",
	     atomic_read(&dev->kbufs), atomic_read(&dev->user_rings));
	WARN_ON(!xa_empty(&dev->cqs) || !xa_empty(&dev->qps) ||
		!xa_empty(&dev->srqs) || !xa_empty(&dev->pds) ||
		!xa_empty(&dev->mrs));
	ib_dealloc_device(&dev->ibdev);
}

static const struct pci_device_id pib_pci_table[] = {
	{PCI_DEVICE(PIB_PCI_VENDOR_ID, PIB_PCI_DEVICE_ID)}, {}};
MODULE_DEVICE_TABLE(pci, pib_pci_table);

static struct pci_driver pib_pci_driver = {
	.name = PIB_DRV_NAME,
	.id_table = pib_pci_table,
	.probe = pib_probe,
	.remove = pib_remove,
};

static int __init pib_init(void)
{
	int err;

	/*
	 * Recovery runs on any CPU; saying so (WQ_UNBOUND) is required since
	 * the kernel made per-CPU workqueues an explicit choice (WQ_PERCPU).
	 */
	pib_recovery_wq = alloc_workqueue("pib_recovery", WQ_UNBOUND, 0);
	if (!pib_recovery_wq)
		return -ENOMEM;
	/* Once, before any probe can add a device directory under it. */
	pib_debugfs_module_init();
	err = pci_register_driver(&pib_pci_driver);
	if (err) {
		pib_debugfs_module_exit();
		destroy_workqueue(pib_recovery_wq);
	}
	return err;
}
module_init(pib_init);

static void __exit pib_exit(void)
{
	pci_unregister_driver(&pib_pci_driver);
	/* A recovery still queued finds no device bound, and ends. */
	destroy_workqueue(pib_recovery_wq);
	pib_debugfs_module_exit();
}
module_exit(pib_exit);
