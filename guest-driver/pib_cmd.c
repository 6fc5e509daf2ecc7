// SPDX-License-Identifier: GPL-2.0-only
/*
 * The command interface (docs/prm.md §4): one command at a time, completed
 * by polling CMD_CTRL.GO until the async EQ exists, by its event after.
 */
#include <linux/delay.h>

#include "pib.h"

static int pib_status_to_errno(u8 status)
{
	switch (status) {
	case PIB_CMD_STATUS_OK:
		return 0;
	case PIB_CMD_STATUS_BAD_OPCODE:
		return -EOPNOTSUPP;
	case PIB_CMD_STATUS_NO_RESOURCES:
		return -ENOMEM;
	case PIB_CMD_STATUS_BUSY:
		return -EBUSY;
	case PIB_CMD_STATUS_DMA_ERROR:
		return -EIO;
	default: /* bad state, parameter, index, transition or mask */
		return -EINVAL;
	}
}

int pib_cmd_init(struct pib_dev *dev)
{
	mutex_init(&dev->cmd_lock);
	spin_lock_init(&dev->cmd_event_lock);
	init_completion(&dev->cmd_done);
	return pib_kbuf_alloc(dev, &dev->mailbox, 2 * PIB_MAILBOX_SIZE);
}

void pib_cmd_cleanup(struct pib_dev *dev)
{
	pib_kbuf_free(dev, &dev->mailbox);
}

static void pib_write64(struct pib_dev *dev, u32 lo, u64 value)
{
	writel(lower_32_bits(value), dev->regs + lo);
	writel(upper_32_bits(value), dev->regs + lo + 4);
}

static int pib_cmd_wait_polling(struct pib_dev *dev)
{
	unsigned long timeout = jiffies + msecs_to_jiffies(PIB_CMD_TIMEOUT_MS);

	while (readl(dev->regs + PIB_REG_CMD_CTRL) & PIB_CMD_CTRL_GO) {
		if (time_after(jiffies, timeout))
			return -ETIMEDOUT;
		usleep_range(10, 100);
	}
	return 0;
}

/*
 * Arms cmd_done for a new command and returns the token its completion
 * event will carry. The token and the reinit change together under
 * cmd_event_lock, so an event that pib_cmd_event() matched against the
 * previous token (the late completion of a command that timed out) cannot
 * complete this one: either it completes before the reinit, which undoes
 * it, or it is checked after, against the new token.
 */
static u16 pib_cmd_new_token(struct pib_dev *dev)
{
	u16 token;

	spin_lock(&dev->cmd_event_lock);
	token = ++dev->cmd_token;
	reinit_completion(&dev->cmd_done);
	spin_unlock(&dev->cmd_event_lock);
	return token;
}

/*
 * What a command returns once the device is FATAL, which executes none
 * (docs/prm.md §2.2). One that only releases an object, or moves a QP to
 * RESET or ERR, succeeds: the reset that ends the FATAL state does that to
 * everything anyway, and so the kernel tears down its objects before it
 * resets the function, as mlx5 does. Any other fails. `in` is the input
 * mailbox, if the caller knows it.
 */
static int pib_cmd_on_fatal(u16 opcode, const void *in)
{
	const struct pib_qp_attr *attr = in;

	switch (opcode) {
	case PIB_CMD_MODIFY_QP:
		return attr && (attr->attr_mask & PIB_QP_STATE) &&
				       (attr->qp_state == PIB_QPS_RESET ||
					attr->qp_state == PIB_QPS_ERR)
			       ? 0
			       : -EIO;
	case PIB_CMD_CLOSE_HCA:
	case PIB_CMD_FREE_UAR:
	case PIB_CMD_DEALLOC_PD:
	case PIB_CMD_FREE_MTT:
	case PIB_CMD_DESTROY_EQ:
	case PIB_CMD_DESTROY_CQ:
	case PIB_CMD_DESTROY_MR:
	case PIB_CMD_DESTROY_SRQ:
	case PIB_CMD_DESTROY_QP:
	case PIB_CMD_DETACH_MCAST:
		return 0;
	default:
		return -EIO;
	}
}

/*
 * Whether the device is FATAL: it said so by an event, or STATUS says so
 * now (the event may never come if what broke is the EQ).
 */
static bool pib_dev_fatal(struct pib_dev *dev)
{
	if (test_bit(PIB_DEV_FATAL, &dev->state))
		return true;
	if (!(readl(dev->regs + PIB_REG_STATUS) & PIB_STATUS_FATAL))
		return false;
	pib_enter_error_state(dev, "STATUS reads FATAL");
	return true;
}

/* Runs one command; the caller holds cmd_lock. */
static int pib_cmd_exec(struct pib_dev *dev, u16 opcode, u8 opmod, u32 modifier,
			u64 in, u64 out, u64 *result)
{
	u32 ctrl = opcode | (u32)opmod << PIB_CMD_CTRL_OPMOD_SHIFT |
		   PIB_CMD_CTRL_GO;
	u8 status;
	int err;

	pib_write64(dev, PIB_REG_CMD_IN_LO, in);
	pib_write64(dev, PIB_REG_CMD_OUT_LO, out);
	writel(modifier, dev->regs + PIB_REG_CMD_MODIFIER);
	if (dev->cmd_events) {
		writel(pib_cmd_new_token(dev), dev->regs + PIB_REG_CMD_TOKEN);
		ctrl |= PIB_CMD_CTRL_EVENT;
	}
	writel(ctrl, dev->regs + PIB_REG_CMD_CTRL);

	if (dev->cmd_events) {
		if (!wait_for_completion_timeout(
			    &dev->cmd_done,
			    msecs_to_jiffies(PIB_CMD_TIMEOUT_MS)))
			err = -ETIMEDOUT;
		else
			err = 0;
	} else {
		err = pib_cmd_wait_polling(dev);
	}
	if (err) {
		if (!pib_dev_fatal(dev))
			dev_err(&dev->pdev->dev, "command 0x%04x timed out\n",
				opcode);
		return err;
	}
	status = readl(dev->regs + PIB_REG_CMD_STATUS);
	if (result)
		*result = readl(dev->regs + PIB_REG_CMD_RESULT_LO) |
			  (u64)readl(dev->regs + PIB_REG_CMD_RESULT_HI) << 32;
	if (status == PIB_CMD_STATUS_BAD_STATE)
		pib_dev_fatal(dev); /* the caller then sees the state */
	/* The syndrome names the device's check (docs/prm.md section 9). */
	if (status)
		dev_dbg(&dev->pdev->dev,
			"command 0x%04x (0x%x): status %u syndrome 0x%08x\n",
			opcode, modifier, status,
			readl(dev->regs + PIB_REG_CMD_SYNDROME));
	return pib_status_to_errno(status);
}

/*
 * A command completion event, from the async EQ's handler thread (process
 * context, as is every other user of cmd_event_lock). The check and the
 * complete() are one step under the lock; see pib_cmd_new_token().
 */
void pib_cmd_event(struct pib_dev *dev, u16 token, u8 status, u64 result)
{
	u16 expected;

	spin_lock(&dev->cmd_event_lock);
	expected = dev->cmd_token;
	if (token == expected)
		complete(&dev->cmd_done);
	spin_unlock(&dev->cmd_event_lock);
	if (token != expected)
		dev_warn_ratelimited(
			&dev->pdev->dev,
			"completion for command token 0x%x, expected 0x%x\n",
			token, expected);
}

int pib_cmd_opmod(struct pib_dev *dev, u16 opcode, u8 opmod, u32 modifier,
		  u64 in, u64 *result)
{
	int err;

	if (pib_dev_fatal(dev))
		return pib_cmd_on_fatal(opcode, NULL);
	mutex_lock(&dev->cmd_lock);
	err = pib_cmd_exec(dev, opcode, opmod, modifier, in, 0, result);
	mutex_unlock(&dev->cmd_lock);
	/* The command that finds the device FATAL ends as those after it. */
	if (err && test_bit(PIB_DEV_FATAL, &dev->state))
		return pib_cmd_on_fatal(opcode, NULL);
	return err;
}

int pib_cmd(struct pib_dev *dev, u16 opcode, u32 modifier, u64 in, u64 *result)
{
	return pib_cmd_opmod(dev, opcode, 0, modifier, in, result);
}

int pib_cmd_box(struct pib_dev *dev, u16 opcode, u8 opmod, u32 modifier,
		const void *in, size_t inlen, void *out, size_t outlen,
		u64 *result)
{
	void *in_box = dev->mailbox.va;
	void *out_box = dev->mailbox.va + PIB_MAILBOX_SIZE;
	u64 in_dma = dev->mailbox.dma;
	u64 out_dma = dev->mailbox.dma + PIB_MAILBOX_SIZE;
	int err;

	if (WARN_ON(inlen > PIB_MAILBOX_SIZE || outlen > PIB_MAILBOX_SIZE))
		return -EINVAL;
	if (pib_dev_fatal(dev))
		return pib_cmd_on_fatal(opcode, in);
	mutex_lock(&dev->cmd_lock);
	memset(in_box, 0, PIB_MAILBOX_SIZE);
	if (in)
		memcpy(in_box, in, inlen);
	err = pib_cmd_exec(dev, opcode, opmod, modifier, in ? in_dma : 0,
			   out ? out_dma : 0, result);
	if (!err && out)
		memcpy(out, out_box, outlen);
	mutex_unlock(&dev->cmd_lock);
	if (err && test_bit(PIB_DEV_FATAL, &dev->state))
		return pib_cmd_on_fatal(opcode, in);
	return err;
}
