// SPDX-License-Identifier: GPL-2.0-only
/*
 * debugfs: /sys/kernel/debug/pib/<device>/{pd,mr,cq,qp,srq} list live
 * objects.
 *
 * Each dump walks its table under the xarray's lock. The destroy paths
 * erase an object from its table (xa_erase() takes the same lock) before
 * its memory is freed, so a dump sees every object whole or not at all.
 * Nothing in a walk sleeps: seq_printf() only fills the seq_file buffer.
 * The plain xa_lock() is the right variant: the tables are only locked in
 * process context (the EQ handlers look up with xa_load(), under RCU).
 * Counters and states are read without their own locks: a snapshot.
 */
#include <linux/init.h>
#include <linux/seq_file.h>

#include "pib.h"

/* Made at module load, before any device probes, and removed at unload. */
static struct dentry *pib_debugfs_root;

static const char *const pib_qp_states[] = {
	[IB_QPS_RESET] = "RESET", [IB_QPS_INIT] = "INIT", [IB_QPS_RTR] = "RTR",
	[IB_QPS_RTS] = "RTS",	  [IB_QPS_SQD] = "SQD",	  [IB_QPS_SQE] = "SQE",
	[IB_QPS_ERR] = "ERR",
};

static int pib_qp_show(struct seq_file *s, void *unused)
{
	struct pib_dev *dev = s->private;
	struct pib_qp *qp;
	unsigned long qpn;

	seq_puts(s, "qpn    wire-qpn type state port  sq(pi/ci/size)        "
		    "rq(pi/ci/size)\n");
	xa_lock(&dev->qps);
	xa_for_each (&dev->qps, qpn, qp)
		seq_printf(s, "%-6lu %-8u %-4u %-5s %-4u  %u/%u/%u  %u/%u/%u\n",
			   qpn, qp->ibqp.qp_num, qp->type,
			   pib_qp_states[qp->state], qp->port, qp->sq.pi,
			   qp->sq.ci, 1u << qp->sq.log_count, qp->rq.pi,
			   qp->rq.ci,
			   qp->ibqp.srq ? 0 : 1u << qp->rq.log_count);
	xa_unlock(&dev->qps);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(pib_qp);

static int pib_cq_show(struct seq_file *s, void *unused)
{
	struct pib_dev *dev = s->private;
	struct pib_cq *cq;
	unsigned long cqn;

	seq_puts(s, "cqn    size    ci       uar  user\n");
	xa_lock(&dev->cqs);
	xa_for_each (&dev->cqs, cqn, cq)
		seq_printf(s, "%-6lu %-7u %-8u %-4u %s\n", cqn,
			   1u << cq->log_size, cq->ci, cq->uar,
			   cq->ci_umem ? "yes" : "no");
	xa_unlock(&dev->cqs);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(pib_cq);

static int pib_srq_show(struct seq_file *s, void *unused)
{
	struct pib_dev *dev = s->private;
	struct pib_srq *srq;
	unsigned long srqn;

	seq_puts(s, "srqn   size    max_sge limit\n");
	xa_lock(&dev->srqs);
	xa_for_each (&dev->srqs, srqn, srq)
		seq_printf(s, "%-6lu %-7u %-7u %u\n", srqn,
			   1u << srq->log_wqe_count, srq->max_sge, srq->limit);
	xa_unlock(&dev->srqs);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(pib_srq);

static int pib_pd_show(struct seq_file *s, void *unused)
{
	struct pib_dev *dev = s->private;
	struct pib_pd *pd;
	unsigned long pdn;

	seq_puts(s, "pdn    user\n");
	xa_lock(&dev->pds);
	xa_for_each (&dev->pds, pdn, pd)
		seq_printf(s, "%-6lu %s\n", pdn,
			   pd->ibpd.uobject ? "yes" : "no");
	xa_unlock(&dev->pds);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(pib_pd);

static int pib_mr_show(struct seq_file *s, void *unused)
{
	struct pib_dev *dev = s->private;
	struct pib_mr *mr;
	unsigned long index;

	seq_puts(s, "key        pdn    access iova               length        "
		    "     pages page_shift\n");
	xa_lock(&dev->mrs);
	xa_for_each (&dev->mrs, index, mr)
		seq_printf(s,
			   "0x%08x %-6u 0x%-4x 0x%016llx 0x%016llx %-5u %u\n",
			   READ_ONCE(mr->ibmr.lkey), mr->pdn, mr->access,
			   mr->iova, mr->length, mr->npages, mr->page_shift);
	xa_unlock(&dev->mrs);
	return 0;
}
DEFINE_SHOW_ATTRIBUTE(pib_mr);

void __init pib_debugfs_module_init(void)
{
	pib_debugfs_root = debugfs_create_dir(PIB_DRV_NAME, NULL);
}

void pib_debugfs_module_exit(void)
{
	debugfs_remove(pib_debugfs_root);
	pib_debugfs_root = NULL;
}

void pib_debugfs_init(struct pib_dev *dev)
{
	dev->debugfs =
		debugfs_create_dir(dev_name(&dev->ibdev.dev), pib_debugfs_root);
	debugfs_create_file("qp", 0400, dev->debugfs, dev, &pib_qp_fops);
	debugfs_create_file("cq", 0400, dev->debugfs, dev, &pib_cq_fops);
	debugfs_create_file("srq", 0400, dev->debugfs, dev, &pib_srq_fops);
	debugfs_create_file("pd", 0400, dev->debugfs, dev, &pib_pd_fops);
	debugfs_create_file("mr", 0400, dev->debugfs, dev, &pib_mr_fops);
}

/* Waits for running dumps: debugfs removal drains the file's users. */
void pib_debugfs_cleanup(struct pib_dev *dev)
{
	debugfs_remove_recursive(dev->debugfs);
	dev->debugfs = NULL;
}
