// SPDX-License-Identifier: GPL-2.0-only
/*
 * DMA memory the device reads and writes, and the memory translation
 * table (MTT) that lists its pages for the device (docs/prm.md §5).
 */
#include <rdma/ib_umem.h>

#include "pib.h"

int pib_kbuf_alloc(struct pib_dev *dev, struct pib_kbuf *buf, size_t size)
{
	buf->size = PAGE_ALIGN(size);
	buf->va = dma_alloc_coherent(&dev->pdev->dev, buf->size, &buf->dma,
				     GFP_KERNEL);
	if (!buf->va)
		return -ENOMEM;
	atomic_inc(&dev->kbufs);
	return 0;
}

void pib_kbuf_free(struct pib_dev *dev, struct pib_kbuf *buf)
{
	if (!buf->va)
		return;
	dma_free_coherent(&dev->pdev->dev, buf->size, buf->va, buf->dma);
	atomic_dec(&dev->kbufs);
	buf->va = NULL;
}

/* Fills MTT entries [first, first + count) in chunks of one mailbox. */
struct pib_mtt_writer {
	struct pib_dev *dev;
	struct pib_mtt_write *box;
	u32 next;
	int err;
};

static void pib_mtt_flush(struct pib_mtt_writer *w)
{
	u32 count = w->box->count;

	if (!count || w->err)
		return;
	w->err = pib_cmd_box(w->dev, PIB_CMD_WRITE_MTT, 0, w->next, w->box,
			     sizeof(*w->box), NULL, 0, NULL);
	w->next += count;
	w->box->count = 0;
}

static void pib_mtt_add(struct pib_mtt_writer *w, u64 addr)
{
	w->box->entries[w->box->count++] = addr;
	if (w->box->count == PIB_MTT_WRITE_MAX)
		pib_mtt_flush(w);
}

int pib_mtt_alloc(struct pib_dev *dev, u32 count, u32 *mtt)
{
	u64 first;
	int err = pib_cmd(dev, PIB_CMD_ALLOC_MTT, 0, count, &first);

	if (!err)
		*mtt = first;
	return err;
}

void pib_mtt_free(struct pib_dev *dev, u32 mtt)
{
	int err = pib_cmd(dev, PIB_CMD_FREE_MTT, mtt, 0, NULL);

	WARN_ONCE(err, "pib: FREE_MTT %u failed: %d\n", mtt, err);
}

int pib_mtt_write_umem(struct pib_dev *dev, struct ib_umem *umem,
		       unsigned long pgsz, u32 *mtt, u32 *npages)
{
	struct pib_mtt_writer w = {.dev = dev};
	struct ib_block_iter biter;
	int err;

	*npages = ib_umem_num_dma_blocks(umem, pgsz);
	err = pib_mtt_alloc(dev, *npages, mtt);
	if (err)
		return err;
	w.box = kzalloc(sizeof(*w.box), GFP_KERNEL);
	if (!w.box) {
		pib_mtt_free(dev, *mtt);
		return -ENOMEM;
	}
	w.next = *mtt;
	rdma_umem_for_each_dma_block (umem, &biter, pgsz)
		pib_mtt_add(&w, rdma_block_iter_dma_address(&biter));
	pib_mtt_flush(&w);
	kfree(w.box);
	if (w.err)
		pib_mtt_free(dev, *mtt);
	return w.err;
}

static int pib_mtt_write_kbuf(struct pib_dev *dev, struct pib_kbuf *buf,
			      u32 *mtt, u32 *npages)
{
	struct pib_mtt_writer w = {.dev = dev};
	u32 i;
	int err;

	*npages = buf->size / PIB_PAGE_SIZE;
	err = pib_mtt_alloc(dev, *npages, mtt);
	if (err)
		return err;
	w.box = kzalloc(sizeof(*w.box), GFP_KERNEL);
	if (!w.box) {
		pib_mtt_free(dev, *mtt);
		return -ENOMEM;
	}
	w.next = *mtt;
	for (i = 0; i < *npages; i++)
		pib_mtt_add(&w, buf->dma + (u64)i * PIB_PAGE_SIZE);
	pib_mtt_flush(&w);
	kfree(w.box);
	if (w.err)
		pib_mtt_free(dev, *mtt);
	return w.err;
}

int pib_ring_kernel(struct pib_dev *dev, struct pib_ring *ring, size_t size)
{
	int err = pib_kbuf_alloc(dev, &ring->kbuf, size);

	if (err)
		return err;
	err = pib_mtt_write_kbuf(dev, &ring->kbuf, &ring->mtt, &ring->npages);
	if (err)
		pib_kbuf_free(dev, &ring->kbuf);
	return err;
}

int pib_ring_user(struct pib_dev *dev, struct pib_ring *ring, u64 addr,
		  size_t size)
{
	int err;

	if (!addr || addr & (PIB_PAGE_SIZE - 1) || size & (PIB_PAGE_SIZE - 1))
		return -EINVAL;
	ring->umem =
		pib_umem_get(&dev->ibdev, addr, size, IB_ACCESS_LOCAL_WRITE);
	if (IS_ERR(ring->umem)) {
		err = PTR_ERR(ring->umem);
		ring->umem = NULL;
		return err;
	}
	err = pib_mtt_write_umem(dev, ring->umem, PIB_PAGE_SIZE, &ring->mtt,
				 &ring->npages);
	if (err) {
		ib_umem_release(ring->umem);
		ring->umem = NULL;
		return err;
	}
	atomic_inc(&dev->user_rings);
	return 0;
}

void pib_ring_free(struct pib_dev *dev, struct pib_ring *ring)
{
	if (!ring->npages)
		return;
	pib_mtt_free(dev, ring->mtt);
	ring->npages = 0;
	if (ring->umem) {
		ib_umem_release(ring->umem);
		atomic_dec(&dev->user_rings);
	}
	ring->umem = NULL;
	pib_kbuf_free(dev, &ring->kbuf);
}
