// SPDX-License-Identifier: GPL-2.0-only
/*
 * Event queues and their MSI-X vectors: the async EQ (vector 0) carries
 * command completions and async events; completion EQ i (vector 1 + i),
 * one per completion vector, tells which of its CQs have new entries
 * (docs/prm.md §5).
 */
#include "pib.h"

#define PIB_EQ_LOG_SIZE 8
/*
 * The async EQ takes page faults too, at most two outstanding per QP (prm
 * §6.9): room for a burst of them beside the command completions.
 */
#define PIB_ASYNC_EQ_LOG_SIZE 12

static struct pib_eqe *pib_next_eqe(struct pib_eq *eq)
{
	struct pib_eqe *eqe =
		eq->ring.kbuf.va +
		(eq->ci & ((1u << eq->log_size) - 1)) * sizeof(struct pib_eqe);
	u8 phase = ((eq->ci >> eq->log_size) & 1) ^ 1;

	if ((READ_ONCE(eqe->flags) & PIB_EQE_PHASE) != phase)
		return NULL;
	dma_rmb(); /* read the entry only after its phase bit */
	return eqe;
}

static void pib_eq_arm(struct pib_eq *eq)
{
	writel(eq->ci, eq->dev->regs + PIB_REG_EQ_DB(eq->eqn) + PIB_EQ_DB_ARM);
}

static void pib_qp_event(struct pib_dev *dev, u32 qpn, enum ib_event_type type)
{
	struct pib_qp *qp = xa_load(&dev->qps, qpn);
	struct ib_event event = {.device = &dev->ibdev, .event = type};

	if (!qp || !qp->ibqp.event_handler)
		return;
	event.element.qp = &qp->ibqp;
	qp->ibqp.event_handler(&event, qp->ibqp.qp_context);
}

static void pib_async_event(struct pib_dev *dev, const struct pib_eqe *eqe)
{
	u32 number = eqe->data.async.number;
	struct ib_event event = {.device = &dev->ibdev};
	struct pib_cq *cq;
	struct pib_srq *srq;

	switch (eqe->subtype) {
	case PIB_ASYNC_QP_FATAL:
		return pib_qp_event(dev, number, IB_EVENT_QP_FATAL);
	case PIB_ASYNC_QP_REQ_ERR:
		return pib_qp_event(dev, number, IB_EVENT_QP_REQ_ERR);
	case PIB_ASYNC_QP_ACCESS_ERR:
		return pib_qp_event(dev, number, IB_EVENT_QP_ACCESS_ERR);
	case PIB_ASYNC_COMM_EST:
		return pib_qp_event(dev, number, IB_EVENT_COMM_EST);
	case PIB_ASYNC_SQ_DRAINED:
		return pib_qp_event(dev, number, IB_EVENT_SQ_DRAINED);
	case PIB_ASYNC_QP_LAST_WQE_REACHED:
		return pib_qp_event(dev, number, IB_EVENT_QP_LAST_WQE_REACHED);
	case PIB_ASYNC_PATH_MIG:
		return pib_qp_event(dev, number, IB_EVENT_PATH_MIG);
	case PIB_ASYNC_PATH_MIG_ERR:
		return pib_qp_event(dev, number, IB_EVENT_PATH_MIG_ERR);
	case PIB_ASYNC_CQ_ERR:
		cq = xa_load(&dev->cqs, number);
		if (cq && cq->ibcq.event_handler) {
			event.event = IB_EVENT_CQ_ERR;
			event.element.cq = &cq->ibcq;
			cq->ibcq.event_handler(&event, cq->ibcq.cq_context);
		}
		return;
	case PIB_ASYNC_SRQ_LIMIT:
	case PIB_ASYNC_SRQ_ERR:
		srq = xa_load(&dev->srqs, number);
		if (srq && srq->ibsrq.event_handler) {
			event.event = eqe->subtype == PIB_ASYNC_SRQ_LIMIT
					      ? IB_EVENT_SRQ_LIMIT_REACHED
					      : IB_EVENT_SRQ_ERR;
			event.element.srq = &srq->ibsrq;
			srq->ibsrq.event_handler(&event,
						 srq->ibsrq.srq_context);
		}
		return;
	case PIB_ASYNC_PORT_ACTIVE:
		event.event = IB_EVENT_PORT_ACTIVE;
		break;
	case PIB_ASYNC_PORT_ERR:
		event.event = IB_EVENT_PORT_ERR;
		break;
	case PIB_ASYNC_LID_CHANGE:
		event.event = IB_EVENT_LID_CHANGE;
		break;
	case PIB_ASYNC_PKEY_CHANGE:
		event.event = IB_EVENT_PKEY_CHANGE;
		break;
	case PIB_ASYNC_SM_CHANGE:
		event.event = IB_EVENT_SM_CHANGE;
		break;
	case PIB_ASYNC_CLIENT_REREGISTER:
		event.event = IB_EVENT_CLIENT_REREGISTER;
		break;
	case PIB_ASYNC_GID_CHANGE:
		event.event = IB_EVENT_GID_CHANGE;
		break;
	case PIB_ASYNC_DEVICE_FATAL:
		pib_enter_error_state(dev, "the device reports it");
		return;
	default:
		dev_warn(&dev->pdev->dev, "unknown async event 0x%x\n",
			 eqe->subtype);
		return;
	}
	event.element.port_num = number;
	ib_dispatch_event(&event);
}

static irqreturn_t pib_async_irq(int irq, void *data)
{
	struct pib_eq *eq = data;
	struct pib_dev *dev = eq->dev;
	struct pib_eqe *eqe;

	while ((eqe = pib_next_eqe(eq))) {
		if (eqe->type == PIB_EQE_COMMAND)
			pib_cmd_event(dev, eqe->data.cmd.token,
				      eqe->data.cmd.status,
				      eqe->data.cmd.result);
		else if (eqe->type == PIB_EQE_ASYNC)
			pib_async_event(dev, eqe);
		else if (eqe->type == PIB_EQE_PAGE_FAULT)
			pib_odp_fault_event(dev, eqe);
		eq->ci++;
	}
	pib_eq_arm(eq);
	return IRQ_HANDLED;
}

static irqreturn_t pib_comp_irq(int irq, void *data)
{
	struct pib_eq *eq = data;
	struct pib_eqe *eqe;
	struct pib_cq *cq;

	while ((eqe = pib_next_eqe(eq))) {
		if (eqe->type == PIB_EQE_COMPLETION) {
			cq = xa_load(&eq->dev->cqs, eqe->data.comp.cqn);
			if (cq)
				pib_cq_notify(cq);
		}
		eq->ci++;
	}
	pib_eq_arm(eq);
	return IRQ_HANDLED;
}

static int pib_eq_create(struct pib_dev *dev, struct pib_eq *eq,
			 unsigned int vector, u16 flags)
{
	struct pib_eq_context ctx = {};
	u64 eqn;
	int err;

	eq->dev = dev;
	eq->log_size =
		flags & PIB_EQ_ASYNC ? PIB_ASYNC_EQ_LOG_SIZE : PIB_EQ_LOG_SIZE;
	err = pib_ring_kernel(dev, &eq->ring,
			      sizeof(struct pib_eqe) << eq->log_size);
	if (err)
		return err;
	ctx.buf.mtt_index = eq->ring.mtt;
	ctx.buf.npages = eq->ring.npages;
	ctx.log_size = eq->log_size;
	ctx.msix_vector = vector;
	ctx.flags = flags;
	err = pib_cmd_box(dev, PIB_CMD_CREATE_EQ, 0, 0, &ctx, sizeof(ctx), NULL,
			  0, &eqn);
	if (err) {
		pib_ring_free(dev, &eq->ring);
		return err;
	}
	eq->eqn = eqn;
	eq->irq = pci_irq_vector(dev->pdev, vector);
	eq->created = true;
	return 0;
}

/*
 * If the device refuses (a CQ it kept after a failed destroy still uses
 * the EQ), it may still write EQEs: the ring is kept.
 */
static void pib_eq_destroy(struct pib_dev *dev, struct pib_eq *eq)
{
	int err;

	if (!eq->created)
		return;
	eq->created = false;
	err = pib_cmd(dev, PIB_CMD_DESTROY_EQ, eq->eqn, 0, NULL);
	if (err)
		pib_destroy_failed(dev, "EQ", eq->eqn, err);
	else
		pib_ring_free(dev, &eq->ring);
}

/* How many completion vectors: see PIB_MAX_COMP_VECS. */
static unsigned int pib_comp_vectors_wanted(struct pib_dev *dev)
{
	unsigned int n = clamp_t(unsigned int, num_online_cpus(),
				 PIB_MIN_COMP_VECS, PIB_MAX_COMP_VECS);

	/* pci_alloc_irq_vectors() gives no more than the device has. */
	return min_t(unsigned int, n, dev->caps.max_eq - 1);
}

static void pib_comp_eqs_destroy(struct pib_dev *dev, unsigned int count,
				 bool irqs)
{
	while (count--) {
		if (irqs)
			free_irq(dev->comp_eqs[count].irq,
				 &dev->comp_eqs[count]);
		pib_eq_destroy(dev, &dev->comp_eqs[count]);
	}
}

static int pib_comp_eqs_create(struct pib_dev *dev)
{
	unsigned int i;
	int err;

	for (i = 0; i < dev->num_comp_eqs; i++) {
		err = pib_eq_create(dev, &dev->comp_eqs[i], PIB_VEC_COMP + i,
				    0);
		if (err)
			goto fail;
		snprintf(dev->comp_eqs[i].name, sizeof(dev->comp_eqs[i].name),
			 "pib-comp%u", i);
		err = request_irq(dev->comp_eqs[i].irq, pib_comp_irq, 0,
				  dev->comp_eqs[i].name, &dev->comp_eqs[i]);
		if (err) {
			pib_eq_destroy(dev, &dev->comp_eqs[i]);
			goto fail;
		}
	}
	return 0;

fail:
	pib_comp_eqs_destroy(dev, i, true);
	return err;
}

int pib_eq_setup(struct pib_dev *dev)
{
	unsigned int i;
	int nvec, err;

	nvec = pci_alloc_irq_vectors(dev->pdev, 1 + PIB_MIN_COMP_VECS,
				     1 + pib_comp_vectors_wanted(dev),
				     PCI_IRQ_MSIX);
	if (nvec < 0)
		return nvec;
	dev->num_comp_eqs = nvec - 1;
	err = pib_eq_create(dev, &dev->async_eq, PIB_VEC_ASYNC, PIB_EQ_ASYNC);
	if (err)
		goto free_vectors;
	err = request_threaded_irq(dev->async_eq.irq, NULL, pib_async_irq,
				   IRQF_ONESHOT, "pib-async", &dev->async_eq);
	if (err)
		goto destroy_async;
	err = pib_comp_eqs_create(dev);
	if (err)
		goto free_async_irq;
	pib_eq_arm(&dev->async_eq);
	for (i = 0; i < dev->num_comp_eqs; i++)
		pib_eq_arm(&dev->comp_eqs[i]);
	/* From now on commands complete by event. */
	mutex_lock(&dev->cmd_lock);
	dev->cmd_events = true;
	mutex_unlock(&dev->cmd_lock);
	return 0;

free_async_irq:
	free_irq(dev->async_eq.irq, &dev->async_eq);
destroy_async:
	pib_eq_destroy(dev, &dev->async_eq);
free_vectors:
	pci_free_irq_vectors(dev->pdev);
	return err;
}

void pib_eq_teardown(struct pib_dev *dev)
{
	mutex_lock(&dev->cmd_lock);
	dev->cmd_events = false;
	mutex_unlock(&dev->cmd_lock);
	pib_comp_eqs_destroy(dev, dev->num_comp_eqs, true);
	free_irq(dev->async_eq.irq, &dev->async_eq);
	pib_eq_destroy(dev, &dev->async_eq);
	pci_free_irq_vectors(dev->pdev);
}
