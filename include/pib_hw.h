/* SPDX-License-Identifier: (GPL-2.0-or-later OR BSD-2-Clause) */
/*
 * pib-hca hardware interface: the one description of what the device looks
 * like from the bus. The QEMU device core, the Linux driver and the
 * rdma-core provider all include this file; docs/prm.md explains it.
 *
 * Every multi-byte field is little-endian. Register offsets are byte
 * offsets into the BAR named in their prefix.
 */
#ifndef PIB_HW_H
#define PIB_HW_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdint.h>
#endif

/* ---- PCI identity ------------------------------------------------------ */

/*
 * 0x1234 is the vendor ID QEMU itself uses for its emulated-only devices
 * (std VGA, edu). pib-hca is emulated-only too and never ships as silicon.
 */
#define PIB_PCI_VENDOR_ID 0x1234
#define PIB_PCI_DEVICE_ID 0x1b1b
#define PIB_PCI_SUBSYSTEM_VENDOR_ID PIB_PCI_VENDOR_ID
#define PIB_PCI_SUBSYSTEM_ID 0x0001
#define PIB_PCI_REVISION 0x01
/* PCI class 0x02 (network controller), subclass 0x07 (InfiniBand). */
#define PIB_PCI_CLASS 0x0207

/* ---- BARs -------------------------------------------------------------- */

#define PIB_BAR_REGS 0     /* control registers, PIB_REGS_SIZE bytes */
#define PIB_BAR_DOORBELL 2 /* doorbell (UAR) pages, PIB_PAGE_SIZE each */
#define PIB_BAR_MSIX 4     /* MSI-X table and PBA */

#define PIB_PAGE_SIZE 4096u
#define PIB_REGS_SIZE 0x1000u

/* ---- BAR0 registers ----------------------------------------------------- */
/*
 * All registers are 32 bits wide and accessed with naturally aligned 32-bit
 * reads and writes. Any other access size, an unaligned access, or an
 * offset that names no register is a guest error: writes are dropped and
 * reads return 0.
 */

/* RO: identifies the device; always PIB_ID_MAGIC ("PIBH"). */
#define PIB_REG_ID 0x000
#define PIB_ID_MAGIC 0x48424950u /* bytes 'P' 'I' 'B' 'H' in memory order */

/* RO: version of this interface, PIB_IF_VERSION(major, minor). */
#define PIB_REG_IF_VERSION 0x004
#define PIB_IF_VERSION(major, minor) (((uint32_t)(major) << 16) | (minor))
#define PIB_IF_VERSION_MAJOR(v) ((v) >> 16)
#define PIB_IF_VERSION_MINOR(v) ((v)&0xffffu)
#define PIB_IF_VERSION_CURRENT PIB_IF_VERSION(0, 1)

/* RO: firmware version, major << 24 | minor << 16 | patch. */
#define PIB_REG_FW_VERSION 0x008
#define PIB_FW_VERSION(major, minor, patch)                                                        \
    (((uint32_t)(major) << 24) | ((uint32_t)(minor) << 16) | (patch))

/*
 * WO: writing PIB_RESET_MAGIC resets the device to its power-on state
 * (SCRATCH cleared, every later-defined object destroyed). Any other value
 * is a guest error and is ignored. Reads return 0.
 */
#define PIB_REG_RESET 0x010
#define PIB_RESET_MAGIC 0x52534554u /* "RSET" */

/* RO: device status. */
#define PIB_REG_STATUS 0x014
#define PIB_STATUS_READY (1u << 0) /* accepts register accesses */
#define PIB_STATUS_FATAL (1u << 1) /* a fatal internal error occurred */

/* RW: 32 bits the driver may use freely; 0 after reset. */
#define PIB_REG_SCRATCH 0x018

/* RO: the node GUID, low and high 32 bits. */
#define PIB_REG_NODE_GUID_LO 0x020
#define PIB_REG_NODE_GUID_HI 0x024

/* RO: sizes of the other BARs' contents and the port count. */
#define PIB_REG_NUM_DOORBELL_PAGES 0x028
#define PIB_REG_NUM_MSIX_VECTORS 0x02c
#define PIB_REG_NUM_PORTS 0x030

/* ---- BAR2 doorbell pages ------------------------------------------------ */
/*
 * BAR2 holds PIB_REG_NUM_DOORBELL_PAGES pages of PIB_PAGE_SIZE bytes. Each
 * page belongs to at most one user context. Interface version 0.1 defines
 * no doorbell yet: every write to BAR2 is a guest error and is dropped,
 * every read returns 0.
 */

/* ---- Limits a device instance may be configured with -------------------- */

#define PIB_MIN_DOORBELL_PAGES 1u
#define PIB_MAX_DOORBELL_PAGES 16384u
#define PIB_MIN_MSIX_VECTORS 1u
#define PIB_MAX_MSIX_VECTORS 256u
#define PIB_MIN_PORTS 1u
#define PIB_MAX_PORTS 2u

#endif /* PIB_HW_H */
