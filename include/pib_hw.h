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

/*
 * The structures below are used in place, without byte swapping, by the
 * device, the driver and the provider alike: they are right on
 * little-endian machines only, and the header refuses any other.
 */
#if defined(__BYTE_ORDER__) && __BYTE_ORDER__ != __ORDER_LITTLE_ENDIAN__
#error "pib_hw.h describes little-endian layouts used in place: big-endian hosts are not supported"
#endif

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
#define PIB_IF_VERSION_CURRENT PIB_IF_VERSION(0, 15)

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

/*
 * RO: the core clock, a free-running 64-bit count of nanoseconds
 * (pib_dev_cap.hca_core_clock_khz) that stands still while the VM is
 * stopped; CQEs carry its value (pib_cqe.timestamp). The two halves are
 * separate reads: read HI, LO, then HI again, and read again if HI moved.
 * Each doorbell page also shows it, whole, at PIB_DB_CLOCK.
 */
#define PIB_REG_CORE_CLOCK_LO 0x038
#define PIB_REG_CORE_CLOCK_HI 0x03c

/* ---- BAR0: command interface (docs/prm.md §4) -------------------------- */
/*
 * One command runs at a time. The driver fills IN, OUT, MODIFIER and TOKEN,
 * then writes CTRL with GO set. GO reads as 1 until the command has
 * finished; then STATUS, SYNDROME and RESULT hold its outcome. With EVENT set in the
 * CTRL write the device also posts a PIB_EQE_COMMAND to the async event
 * queue when the command finishes.
 */
#define PIB_REG_CMD_IN_LO 0x100 /* input mailbox address or immediate */
#define PIB_REG_CMD_IN_HI 0x104
#define PIB_REG_CMD_OUT_LO 0x108 /* output mailbox address */
#define PIB_REG_CMD_OUT_HI 0x10c
#define PIB_REG_CMD_MODIFIER 0x110  /* input modifier: object number, port */
#define PIB_REG_CMD_TOKEN 0x114     /* bits 15:0 echoed in the completion EQE */
#define PIB_REG_CMD_RESULT_LO 0x118 /* RO: immediate output */
#define PIB_REG_CMD_RESULT_HI 0x11c
#define PIB_REG_CMD_CTRL 0x120
#define PIB_CMD_CTRL_OPCODE_MASK 0xffffu
#define PIB_CMD_CTRL_OPMOD_SHIFT 16 /* bits 23:16: opcode modifier */
#define PIB_CMD_CTRL_EVENT (1u << 30)
#define PIB_CMD_CTRL_GO (1u << 31)
#define PIB_REG_CMD_STATUS 0x124 /* RO: PIB_CMD_STATUS_* of the last command */
/* RO: which check failed it (0 when it succeeded): docs/prm.md §9 */
#define PIB_REG_CMD_SYNDROME 0x128

/* Mailboxes: guest memory the device reads (IN) or writes (OUT). */
#define PIB_MAILBOX_SIZE 4096u
#define PIB_MAILBOX_ALIGN 8u

/* ---- BAR0: event queue doorbells ----------------------------------------- */
/*
 * EQ n has two write-only registers at PIB_REG_EQ_DB(n):
 *   +0 CI:  the consumer index (count of EQEs consumed, modulo 2^32);
 *   +4 ARM: the same, and arms the EQ: the next EQE raises its MSI-X vector.
 */
#define PIB_REG_EQ_DB_BASE 0x400
#define PIB_REG_EQ_DB(eqn) (PIB_REG_EQ_DB_BASE + 8u * (eqn))
#define PIB_EQ_DB_CI 0
#define PIB_EQ_DB_ARM 4

/* ---- Commands -------------------------------------------------------------- */

enum pib_cmd_opcode {
    PIB_CMD_QUERY_DEV_CAP = 0x0001, /* OUT: pib_dev_cap */
    PIB_CMD_QUERY_PORT = 0x0002,    /* MOD: port; OUT: pib_port_info */
    PIB_CMD_INIT_HCA = 0x0003,
    PIB_CMD_CLOSE_HCA = 0x0004,
    PIB_CMD_MODIFY_PORT = 0x0005,    /* MOD: port; IN imm: set 31:0, clear 63:32 */
    PIB_CMD_QUERY_PKEYS = 0x0006,    /* MOD: port; OUT: u16[PIB_PKEY_TABLE_LEN] */
    PIB_CMD_QUERY_GUIDS = 0x0007,    /* MOD: port; OUT: u64[PIB_GUID_TABLE_LEN] */
    PIB_CMD_SET_NODE_DESC = 0x0008,  /* IN: char[64], the NodeDescription */
    PIB_CMD_MAD_IFC = 0x0009,        /* MOD: port; IN, OUT: pib_mad_ifc; RESULT: 1 = reply */
    PIB_CMD_QUERY_COUNTERS = 0x000a, /* MOD: port; OUT: pib_port_counters */

    PIB_CMD_ALLOC_UAR = 0x0010,    /* RESULT: doorbell page index */
    PIB_CMD_FREE_UAR = 0x0011,     /* MOD: page index */
    PIB_CMD_ALLOC_PD = 0x0012,     /* RESULT: pdn */
    PIB_CMD_DEALLOC_PD = 0x0013,   /* MOD: pdn */
    PIB_CMD_ALLOC_MTT = 0x0014,    /* IN imm: entries; RESULT: first index */
    PIB_CMD_FREE_MTT = 0x0015,     /* MOD: first index */
    PIB_CMD_WRITE_MTT = 0x0016,    /* MOD: index; IN: pib_mtt_write */
    PIB_CMD_ALLOC_XRCD = 0x0017,   /* RESULT: xrcdn */
    PIB_CMD_DEALLOC_XRCD = 0x0018, /* MOD: xrcdn */

    PIB_CMD_CREATE_EQ = 0x0020,  /* IN: pib_eq_context; RESULT: eqn */
    PIB_CMD_DESTROY_EQ = 0x0021, /* MOD: eqn */
    PIB_CMD_QUERY_EQ = 0x0022,   /* MOD: eqn; OUT: pib_eq_context */

    PIB_CMD_CREATE_CQ = 0x0028,  /* IN: pib_cq_context; RESULT: cqn */
    PIB_CMD_DESTROY_CQ = 0x0029, /* MOD: cqn */
    PIB_CMD_QUERY_CQ = 0x002a,   /* MOD: cqn; OUT: pib_cq_context */
    /* MOD: cqn; IN: pib_cq_context (buf, log_size, ci_record); RESULT: CQEs to move */
    PIB_CMD_RESIZE_CQ = 0x002b,
    /* MOD: cqn; IN imm: count 15:0, period in us 31:16 (docs/prm.md §6.1) */
    PIB_CMD_MODIFY_CQ = 0x002c,

    PIB_CMD_CREATE_MR = 0x0030,  /* IN: pib_mr_context; RESULT: key */
    PIB_CMD_DESTROY_MR = 0x0031, /* MOD: key */
    PIB_CMD_QUERY_MR = 0x0032,   /* MOD: key; OUT: pib_mr_context */
    PIB_CMD_CREATE_MW = 0x0033,  /* IN: pib_mw_context; RESULT: rkey */
    PIB_CMD_DESTROY_MW = 0x0034, /* MOD: rkey */
    PIB_CMD_QUERY_MW = 0x0035,   /* MOD: rkey; OUT: pib_mw_context */
    PIB_CMD_REREG_MR = 0x0036,   /* MOD: key; IN: pib_mr_context (the key stays) */
    /* MOD: 1 = the driver could not map the pages; IN imm: the fault's token */
    PIB_CMD_PAGE_FAULT_RESUME = 0x0037,

    PIB_CMD_CREATE_SRQ = 0x0038,  /* IN: pib_srq_context; RESULT: srqn */
    PIB_CMD_DESTROY_SRQ = 0x0039, /* MOD: srqn */
    PIB_CMD_QUERY_SRQ = 0x003a,   /* MOD: srqn; OUT: pib_srq_context */
    PIB_CMD_ARM_SRQ = 0x003b,     /* MOD: srqn; IN imm: limit */
    /* MOD: srqn; IN: pib_srq_context (buf, log_wqe_count, log_wqe_stride, base) */
    PIB_CMD_RESIZE_SRQ = 0x003c,

    PIB_CMD_CREATE_QP = 0x0040,  /* IN: pib_qp_context; RESULT: qpn */
    PIB_CMD_DESTROY_QP = 0x0041, /* MOD: qpn */
    PIB_CMD_MODIFY_QP = 0x0042,  /* MOD: qpn; IN: pib_qp_attr */
    PIB_CMD_QUERY_QP = 0x0043,   /* MOD: qpn; OUT: pib_qp_attr */

    PIB_CMD_ATTACH_MCAST = 0x0048, /* MOD: qpn; IN: pib_mcast */
    PIB_CMD_DETACH_MCAST = 0x0049, /* MOD: qpn; IN: pib_mcast */
};

enum pib_cmd_status {
    PIB_CMD_STATUS_OK = 0x00,
    PIB_CMD_STATUS_BAD_OPCODE = 0x01,     /* unknown opcode */
    PIB_CMD_STATUS_BAD_STATE = 0x02,      /* device or object in the wrong state */
    PIB_CMD_STATUS_BAD_PARAM = 0x03,      /* a field is invalid */
    PIB_CMD_STATUS_BAD_INDEX = 0x04,      /* no such object */
    PIB_CMD_STATUS_NO_RESOURCES = 0x05,   /* a limit in pib_dev_cap is reached */
    PIB_CMD_STATUS_BUSY = 0x06,           /* object still referenced */
    PIB_CMD_STATUS_DMA_ERROR = 0x07,      /* a mailbox could not be read/written */
    PIB_CMD_STATUS_BAD_TRANSITION = 0x08, /* QP state change not allowed */
    PIB_CMD_STATUS_BAD_MASK = 0x09,       /* QP attribute mask wrong for it */
};

/* ---- Capabilities: PIB_CMD_QUERY_DEV_CAP ------------------------------------ */

/* device_cap_flags */
#define PIB_DEV_CAP_RC (1u << 0)
#define PIB_DEV_CAP_UC (1u << 1)
#define PIB_DEV_CAP_UD (1u << 2)
#define PIB_DEV_CAP_SRQ (1u << 3)
#define PIB_DEV_CAP_RNR_NAK_GEN (1u << 4)
#define PIB_DEV_CAP_PORT_ACTIVE_EVENT (1u << 5)
#define PIB_DEV_CAP_SYS_IMAGE_GUID (1u << 6)
#define PIB_DEV_CAP_BAD_PKEY_CNTR (1u << 7)
#define PIB_DEV_CAP_BAD_QKEY_CNTR (1u << 8)
/* fast registration (PIB_WR_REG_MR), local invalidation, send with
 * invalidate and remote invalidation (docs/prm.md §6.2) */
#define PIB_DEV_CAP_MEM_MGT_EXTENSIONS (1u << 9)
/* memory windows of type 1 and of type 2B (docs/prm.md §6.7) */
#define PIB_DEV_CAP_MEM_WINDOW (1u << 10)
#define PIB_DEV_CAP_MEM_WINDOW_TYPE_2B (1u << 11)
/* PIB_CMD_RESIZE_CQ (docs/prm.md §6.1) */
#define PIB_DEV_CAP_RESIZE_CQ (1u << 12)
/* PIB_CMD_RESIZE_SRQ (docs/prm.md §6.4) */
#define PIB_DEV_CAP_RESIZE_SRQ (1u << 13)
/* every CQE carries the core clock at its writing (docs/prm.md §7.3) */
#define PIB_DEV_CAP_CQE_TIMESTAMP (1u << 14)
/* XRC domains, XRC SRQs and XRC initiator and target QPs (docs/prm.md §6.8) */
#define PIB_DEV_CAP_XRC (1u << 15)
/* completion event moderation: PIB_CMD_MODIFY_CQ (docs/prm.md §6.1) */
#define PIB_DEV_CAP_CQ_MODERATION (1u << 16)
/* IBA 1.5's ATOMIC WRITE: PIB_WR_ATOMIC_WRITE, and answering it (docs/prm.md §7.4) */
#define PIB_DEV_CAP_ATOMIC_WRITE (1u << 17)
/* IBA 1.5's FLUSH to global visibility: PIB_WR_FLUSH, and answering it
 * where PIB_ACCESS_FLUSH_GLOBAL allows (docs/prm.md §7.4); persistence is
 * not offered */
#define PIB_DEV_CAP_FLUSH_GLOBAL (1u << 18)
/*
 * On-demand paging (docs/prm.md §6.9): PIB_MR_ON_DEMAND regions, whose
 * accesses to pages they do not map are page faults (PIB_EQE_PAGE_FAULT)
 * that PIB_CMD_PAGE_FAULT_RESUME ends
 */
#define PIB_DEV_CAP_ON_DEMAND_PAGING (1u << 19)
/*
 * Implicit on-demand paging (docs/prm.md §6.10): PIB_MR_IMPLICIT regions,
 * the whole address space reached through on-demand regions linked to it
 * span by span (pib_mr_context.parent_key)
 */
#define PIB_DEV_CAP_IMPLICIT_ON_DEMAND (1u << 20)

/* atomic_cap */
#define PIB_ATOMIC_NONE 0
#define PIB_ATOMIC_HCA 1 /* atomic within this HCA only */
#define PIB_ATOMIC_GLOB 2

struct pib_dev_cap {
    uint64_t node_guid;
    uint64_t sys_image_guid;
    uint64_t max_mr_size;
    uint64_t page_size_cap; /* bit n set: 2^n-byte MR pages supported */
    uint32_t fw_version;
    uint32_t vendor_id;
    uint32_t vendor_part_id;
    uint32_t hw_version;
    uint32_t device_cap_flags;
    uint32_t max_qp;
    uint32_t max_qp_wr;
    uint32_t max_send_sge;
    uint32_t max_recv_sge;
    uint32_t max_sge_rd;
    uint32_t max_cq;
    uint32_t max_cqe;
    uint32_t max_mr;
    uint32_t max_pd;
    uint32_t max_qp_rd_atom;
    uint32_t max_qp_init_rd_atom;
    uint32_t max_res_rd_atom;
    uint32_t max_srq;
    uint32_t max_srq_wr;
    uint32_t max_srq_sge;
    uint32_t max_mcast_grp;
    uint32_t max_mcast_qp_attach;
    uint32_t max_total_mcast_qp_attach;
    uint32_t max_inline_data;
    uint32_t max_mtt;
    uint32_t max_eq;
    uint32_t max_eqe;
    uint32_t max_uar;
    uint16_t max_pkeys;
    uint8_t local_ca_ack_delay;
    uint8_t num_ports;
    uint8_t atomic_cap;
    uint8_t log_max_wqe_stride; /* WQE slots are 2^6..2^this bytes */
    uint8_t reserved0[2];
    uint32_t max_fast_reg_pages; /* pages one PIB_WR_REG_MR may map; 0 without MEM_MGT */
    uint32_t max_mw;             /* memory windows; 0 without MEM_WINDOW */
    uint32_t hca_core_clock_khz; /* core clock rate; 0 without CQE_TIMESTAMP */
    uint32_t max_xrcd;           /* XRC domains; 0 without XRC */
    /* the largest moderation count and period (us); 0 without CQ_MODERATION */
    uint16_t max_cq_moderation_count;
    uint16_t max_cq_moderation_period;
    uint32_t reserved1[3];
};

/* ---- Ports: PIB_CMD_QUERY_PORT ---------------------------------------------- */

/* state: IBA PortInfo PortState; phys_state: PortPhysicalState */
#define PIB_PORT_DOWN 1
#define PIB_PORT_INIT 2
#define PIB_PORT_ARMED 3
#define PIB_PORT_ACTIVE 4
#define PIB_PHYS_SLEEP 1
#define PIB_PHYS_POLLING 2
#define PIB_PHYS_DISABLED 3
#define PIB_PHYS_LINK_UP 5

/* MTU codes as in IBA: 1 = 256 ... 5 = 4096 */
#define PIB_MTU_256 1
#define PIB_MTU_4096 5

#define PIB_PKEY_TABLE_LEN 64
#define PIB_GUID_TABLE_LEN 8

struct pib_port_info {
    uint64_t gid_prefix;
    uint64_t port_guid;
    uint32_t cap_mask; /* IBA PortInfo CapabilityMask */
    uint32_t max_msg_sz;
    uint32_t bad_pkey_cntr;
    uint32_t qkey_viol_cntr;
    uint16_t lid;
    uint16_t sm_lid;
    uint16_t pkey_tbl_len;
    uint16_t gid_tbl_len;
    uint8_t state;
    uint8_t phys_state;
    uint8_t max_mtu;
    uint8_t active_mtu;
    uint8_t lmc;
    uint8_t sm_sl;
    uint8_t max_vl_num;
    uint8_t subnet_timeout;
    uint8_t init_type_reply;
    uint8_t active_width; /* IBA LinkWidthActive: 2 = 4x */
    uint8_t active_speed; /* IBA LinkSpeedActive: 4 = QDR (10 Gb/s a lane) */
    uint8_t reserved0[5];
    uint32_t reserved1[4];
};

/* ---- The port's management agents: PIB_CMD_MAD_IFC ------------------------- */
/*
 * The driver hands the device every SMP and PerfMgt MAD addressed to the
 * HCA (from the kernel's MAD layer). The device's SMA/PMA answers it in
 * place: RESULT 1 means `mad` now holds the response to send back; 0 means
 * the device does not handle that class or attribute.
 */
/*
 * MAD_IFC opcode modifier: the MAD is the driver's own and skips the M_Key
 * check (docs/prm.md §4.7). Without it every SMP is checked against the
 * port's M_Key, as one from the fabric is.
 */
#define PIB_MAD_IFC_IGNORE_MKEY 0x1

struct pib_mad_ifc {
    uint16_t slid; /* the requester's LID */
    uint8_t reserved[6];
    uint8_t mad[256];
};

#define PIB_NODE_DESC_LEN 64

/* ---- Memory translation tables (MTT) ---------------------------------------- */
/*
 * The device keeps one table of guest page addresses. PIB_CMD_ALLOC_MTT
 * reserves a contiguous range of entries; WRITE_MTT fills entries; memory
 * regions and queue buffers name a range by its first index and length.
 */
#define PIB_MTT_WRITE_MAX 510

/* ---- Multicast: PIB_CMD_ATTACH_MCAST, PIB_CMD_DETACH_MCAST ------------------ */

/* A UD QP joins (leaves) the group a multicast GID and LID name on the
 * QP's port. Packets to the group are delivered to every QP attached. */
#define PIB_MULTICAST_LID_FIRST 0xc000u
#define PIB_MULTICAST_LID_LAST 0xfffeu

struct pib_mcast {
    uint8_t gid[16]; /* the MGID: gid[0] == 0xff */
    uint16_t mlid;   /* PIB_MULTICAST_LID_FIRST..PIB_MULTICAST_LID_LAST */
    uint16_t reserved[3];
};

struct pib_mtt_write {
    uint32_t count; /* 1..PIB_MTT_WRITE_MAX */
    uint32_t reserved;
    uint64_t reserved1;
    uint64_t entries[PIB_MTT_WRITE_MAX]; /* page addresses, page-aligned */
};

/*
 * A ring buffer in guest memory (EQ, CQ, QP and SRQ rings): 4 KiB pages
 * listed in MTT entries mtt_index .. mtt_index + npages - 1.
 */
struct pib_buf_desc {
    uint32_t mtt_index;
    uint32_t npages;
};

/*
 * A port's transport counters (QUERY_COUNTERS), counted since INIT_HCA,
 * each 64 bits, in the style of Linux's rxe. 128 bytes.
 */
struct pib_port_counters {
    uint64_t packets_sent;        /* every packet the port sent */
    uint64_t packets_received;    /* every well-formed packet it received */
    uint64_t duplicate_requests;  /* RC responder: requests seen before */
    uint64_t out_of_seq_requests; /* RC responder: a PSN gap (NAK sent) */
    uint64_t rnr_naks_sent;       /* RC responder: no receive WQE */
    uint64_t invalid_requests;    /* RC responder: requests NAKed as invalid, no access or failed */
    uint64_t rnr_naks_received;   /* RC requester: resent after the delay asked for */
    uint64_t seq_naks_received;   /* RC requester: resent from the gap */
    uint64_t ack_timeouts;        /* RC requester: local ACK timeouts, resent */
    uint64_t retry_exceeded;      /* RC requester: completed with RETRY_EXC_ERR */
    uint64_t rnr_retry_exceeded;  /* RC requester: completed with RNR_RETRY_EXC_ERR */
    uint64_t write_requests;      /* RC, UC responder: RDMA WRITE messages begun */
    uint64_t read_requests;       /* RC responder: RDMA READ requests taken */
    uint64_t atomic_requests;     /* RC responder: atomic requests taken */
    uint64_t implied_naks;        /* RC requester: a later ACK, so a READ or atomic asked again */
    uint64_t receives_dropped;    /* UC, UD: messages lost for want of a receive WQE */
};

/* ---- Event queues ------------------------------------------------------------ */

/* eq flags */
#define PIB_EQ_ASYNC (1u << 0) /* gets async events and command completions */

struct pib_eq_context {
    struct pib_buf_desc buf;
    uint32_t log_size; /* 2^log_size EQEs */
    uint16_t msix_vector;
    uint16_t flags;
    uint32_t reserved[4];
};

enum pib_eqe_type {
    PIB_EQE_COMPLETION = 0x00, /* a CQ has a new CQE and was armed */
    PIB_EQE_COMMAND = 0x01,    /* a command issued with EVENT finished */
    PIB_EQE_ASYNC = 0x02,      /* an asynchronous event, see pib_async */
    PIB_EQE_PAGE_FAULT = 0x03, /* a transfer reached a page its region does not map */
};

/* PIB_EQE_PAGE_FAULT's subtype */
#define PIB_PAGE_FAULT_WRITE (1u << 0) /* the transfer writes the page */

enum pib_async_event {
    PIB_ASYNC_CQ_ERR = 0x01,
    PIB_ASYNC_QP_FATAL = 0x02,
    PIB_ASYNC_QP_REQ_ERR = 0x03,
    PIB_ASYNC_QP_ACCESS_ERR = 0x04,
    PIB_ASYNC_COMM_EST = 0x05,
    PIB_ASYNC_SQ_DRAINED = 0x06,
    PIB_ASYNC_QP_LAST_WQE_REACHED = 0x07,
    PIB_ASYNC_SRQ_LIMIT = 0x08,
    PIB_ASYNC_SRQ_ERR = 0x09,
    PIB_ASYNC_PATH_MIG = 0x0a,     /* only injected (prm §10): no APM */
    PIB_ASYNC_PATH_MIG_ERR = 0x0b, /* only injected (prm §10): no APM */
    PIB_ASYNC_PORT_ACTIVE = 0x10,
    PIB_ASYNC_PORT_ERR = 0x11,
    PIB_ASYNC_LID_CHANGE = 0x12,
    PIB_ASYNC_PKEY_CHANGE = 0x13,
    PIB_ASYNC_SM_CHANGE = 0x14,
    PIB_ASYNC_CLIENT_REREGISTER = 0x15,
    PIB_ASYNC_GID_CHANGE = 0x16,
    PIB_ASYNC_DEVICE_FATAL = 0x20,
};

/*
 * 32 bytes. The device writes EQE i (i counted from 0 since creation) to
 * slot i mod 2^log_size with phase = ((i >> log_size) & 1) ^ 1, so an EQE
 * is new when its phase bit differs from that of the previous pass.
 */
#define PIB_EQE_PHASE (1u << 0)

struct pib_eqe {
    uint8_t type;    /* pib_eqe_type */
    uint8_t subtype; /* pib_async_event for PIB_EQE_ASYNC */
    uint8_t flags;   /* PIB_EQE_PHASE */
    uint8_t reserved0;
    uint32_t reserved1;
    union {
        struct {
            uint32_t cqn;
        } comp;
        struct {
            uint16_t token;
            uint8_t status;
            uint8_t reserved;
            uint32_t reserved1;
            uint64_t result;
        } cmd;
        struct {
            uint32_t number; /* qpn, cqn, srqn or port */
        } async;
        struct {
            uint64_t token;  /* PAGE_FAULT_RESUME names it */
            uint64_t va;     /* the first byte not mapped, in the region's range */
            uint32_t key;    /* the region's */
            uint32_t length; /* bytes from va the transfer needs (at most 4 MiB) */
        } page_fault;
        uint8_t raw[24];
    } data;
};

/* ---- Completion queues ----------------------------------------------------- */

struct pib_cq_context {
    struct pib_buf_desc buf;
    uint32_t log_size; /* 2^log_size CQEs of PIB_CQE_SIZE bytes */
    uint32_t eqn;      /* EQ for completion events */
    uint32_t uar_page; /* doorbell page allowed to arm it */
    /* completion event moderation (docs/prm.md §6.1): the event of an armed
     * CQ waits for this many CQEs or this many us after the first of them;
     * a period of 0 turns it off */
    uint16_t moderation_count;
    uint16_t moderation_period;
    uint64_t ci_record; /* guest address of a u32 consumer index */
    uint32_t reserved1[4];
};

/* ---- Memory regions -------------------------------------------------------- */

/* access flags, as IBA and ib_access_flags */
#define PIB_ACCESS_LOCAL_WRITE (1u << 0)
#define PIB_ACCESS_REMOTE_WRITE (1u << 1)
#define PIB_ACCESS_REMOTE_READ (1u << 2)
#define PIB_ACCESS_REMOTE_ATOMIC (1u << 3)
#define PIB_ACCESS_ALL 0xfu
/* MRs only: memory windows may be bound to the region (docs/prm.md §6.7) */
#define PIB_ACCESS_MW_BIND (1u << 4)
/*
 * MRs and QPs: a peer's FLUSH of placement type global may name the region
 * and may come to the QP (docs/prm.md §7.4); with PIB_DEV_CAP_FLUSH_GLOBAL
 */
#define PIB_ACCESS_FLUSH_GLOBAL (1u << 5)

/* mr flags */
#define PIB_MR_PHYSICAL (1u << 0) /* iova is the guest physical address; no MTT */
/*
 * Created free for fast registration: mtt_count entries are reserved and
 * the device writes them when a PIB_WR_REG_MR WQE maps the region; iova,
 * length, access and log_page_size must be 0 (docs/prm.md §6.2).
 */
#define PIB_MR_FAST_REG (1u << 1)
/*
 * On-demand paging (docs/prm.md §6.9), with PIB_DEV_CAP_ON_DEMAND_PAGING:
 * the region's MTT entries carry present bits in their low bits, and map
 * a page only with the bit an access needs (0: absent). CREATE_MR does not
 * look at them; WRITE_MTT writes them at any time.
 */
#define PIB_MR_ON_DEMAND (1u << 2)
#define PIB_MTT_READ (1u << 0)  /* an on-demand region's entry: reads reach the page */
#define PIB_MTT_WRITE (1u << 1) /* and writes (with PIB_MTT_READ) */
/*
 * Implicit on-demand paging (docs/prm.md §6.10), with
 * PIB_DEV_CAP_IMPLICIT_ON_DEMAND: the whole address space (iova 0, length
 * 2^64 - 1, no MTT) in spans of 2^log_page_size bytes, each reached through
 * the PIB_MR_ON_DEMAND region created for it with this region's key as its
 * parent_key; a span with none faults on this region's key.
 */
#define PIB_MR_IMPLICIT (1u << 3)
#define PIB_IMPLICIT_MIN_LOG_SPAN 21
#define PIB_IMPLICIT_MAX_LOG_SPAN 30
struct pib_mr_context {
    uint64_t iova;
    uint64_t length;
    uint32_t pdn;
    uint32_t access;
    uint32_t mtt_index;
    uint32_t mtt_count;
    uint8_t log_page_size; /* 12..30; PIB_MR_IMPLICIT: the span's */
    uint8_t flags;
    uint8_t key_variant; /* low 8 bits of the key */
    uint8_t reserved0;
    /*
     * PIB_MR_ON_DEMAND: 0, or the PIB_MR_IMPLICIT region whose span
     * [iova, iova + length) the new region is (docs/prm.md §6.10)
     */
    uint32_t parent_key;
    uint32_t reserved1[2];
};

/*
 * A key is (mr index << 8) | variant; lkey and rkey are the same key. A
 * REG_MR WQE may change a fast-registration MR's variant: DESTROY_MR and
 * QUERY_MR of such an MR compare the index only.
 */
#define PIB_KEY_INDEX(key) ((key) >> 8)

/* ---- Memory windows (docs/prm.md §6.7) -------------------------------------- */

enum pib_mw_type {
    PIB_MW_TYPE_1 = 1, /* bound by any QP of its PD, reachable through any */
    PIB_MW_TYPE_2 = 2, /* type 2B: bound to one QP, reachable through it only */
};

/*
 * CREATE_MW reads pdn, type and key_variant; QUERY_MW reports the rest. A
 * window's key index is max_mr + n, so it names no MR.
 */
struct pib_mw_context {
    uint32_t pdn;
    uint8_t type; /* pib_mw_type */
    uint8_t key_variant;
    uint8_t bound; /* QUERY: 1 while bound */
    uint8_t reserved0;
    uint64_t addr; /* QUERY: the bound range */
    uint64_t length;
    uint32_t mr_key; /* QUERY: the region it is bound to */
    uint32_t access; /* QUERY: PIB_ACCESS_REMOTE_* */
    uint32_t qpn;    /* QUERY: type 2, the QP it is bound to */
    uint32_t reserved1[3];
};

/* ---- Shared receive queues ------------------------------------------------- */

enum pib_srq_type {
    PIB_SRQT_BASIC = 0, /* used by the QPs created with it */
    PIB_SRQT_XRC = 1,   /* in an XRC domain: named by the packets an XRC TGT QP takes */
};

struct pib_srq_context {
    struct pib_buf_desc buf;
    uint32_t pdn;
    uint32_t uar_page;
    uint8_t log_wqe_count;
    uint8_t log_wqe_stride;
    uint8_t type; /* pib_srq_type */
    uint8_t reserved0;
    uint32_t limit;     /* SRQ_LIMIT fires when fewer WQEs remain; 0 = off */
    uint32_t wqe_count; /* QUERY only: WQEs posted and not consumed */
    uint32_t base;      /* RESIZE_SRQ only: the count of the WQE now in slot 0 */
    uint32_t xrcdn;     /* XRC: its XRC domain */
    uint32_t cqn;       /* XRC: the CQ its receives complete to */
};

/* ---- Queue pairs ---------------------------------------------------------- */

enum pib_qp_type {
    PIB_QPT_SMI = 0, /* QP0 of a port */
    PIB_QPT_GSI = 1, /* QP1 of a port */
    PIB_QPT_RC = 2,
    PIB_QPT_UC = 3,
    PIB_QPT_UD = 4,
    PIB_QPT_XRC_INI = 5, /* XRC initiator: sends only, to any XRC SRQ behind its peer */
    PIB_QPT_XRC_TGT = 6, /* XRC target: receives only, into its domain's XRC SRQs */
};

/*
 * QP numbers: QP0 and QP1 of port p (the SMI and GSI QPs, which are QP0 and
 * QP1 on the wire) are device QPs 2 * (p - 1) and 2 * (p - 1) + 1; QPs of
 * other types are numbered from PIB_FIRST_QPN.
 */
#define PIB_SPECIAL_QPN(port, type) (2u * ((port)-1u) + (type))
#define PIB_FIRST_QPN 16u

/* qp flags */
#define PIB_QP_SIGNAL_ALL (1u << 0) /* every send WQE completes */
#define PIB_QP_USE_SRQ (1u << 1)

struct pib_qp_context {
    struct pib_buf_desc sq_buf;
    struct pib_buf_desc rq_buf; /* npages 0 with PIB_QP_USE_SRQ */
    uint32_t pdn;
    uint32_t send_cqn;
    uint32_t recv_cqn;
    uint32_t srqn;
    uint32_t uar_page;
    uint8_t type; /* pib_qp_type */
    uint8_t flags;
    uint8_t port; /* SMI and GSI only */
    uint8_t reserved0;
    uint8_t sq_log_wqe_count;
    uint8_t sq_log_wqe_stride;
    uint8_t rq_log_wqe_count;
    uint8_t rq_log_wqe_stride;
    uint32_t xrcdn; /* XRC TGT: its XRC domain */
    uint32_t reserved1[4];
};

/* QP states, as IBA and ib_qp_state */
enum pib_qp_state {
    PIB_QPS_RESET = 0,
    PIB_QPS_INIT = 1,
    PIB_QPS_RTR = 2,
    PIB_QPS_RTS = 3,
    PIB_QPS_SQD = 4,
    PIB_QPS_SQE = 5,
    PIB_QPS_ERR = 6,
};

/* attr_mask bits, the same positions as ib_qp_attr_mask */
#define PIB_QP_STATE (1u << 0)
#define PIB_QP_CUR_STATE (1u << 1)
#define PIB_QP_EN_SQD_ASYNC_NOTIFY (1u << 2)
#define PIB_QP_ACCESS_FLAGS (1u << 3)
#define PIB_QP_PKEY_INDEX (1u << 4)
#define PIB_QP_PORT (1u << 5)
#define PIB_QP_QKEY (1u << 6)
#define PIB_QP_AV (1u << 7)
#define PIB_QP_PATH_MTU (1u << 8)
#define PIB_QP_TIMEOUT (1u << 9)
#define PIB_QP_RETRY_CNT (1u << 10)
#define PIB_QP_RNR_RETRY (1u << 11)
#define PIB_QP_RQ_PSN (1u << 12)
#define PIB_QP_MAX_QP_RD_ATOMIC (1u << 13)
#define PIB_QP_ALT_PATH (1u << 14)
#define PIB_QP_MIN_RNR_TIMER (1u << 15)
#define PIB_QP_SQ_PSN (1u << 16)
#define PIB_QP_MAX_DEST_RD_ATOMIC (1u << 17)
#define PIB_QP_PATH_MIG_STATE (1u << 18)
#define PIB_QP_CAP (1u << 19)
#define PIB_QP_DEST_QPN (1u << 20)
#define PIB_QP_ATTR_MASK_ALL 0x1fffffu

/* Address vector: where UD WQEs and connected QPs send to. 32 bytes. */
#define PIB_AV_GRH (1u << 0)

struct pib_av {
    uint16_t dlid;
    uint8_t sl;
    uint8_t src_path_bits;
    uint8_t static_rate;
    uint8_t port;
    uint8_t flags; /* PIB_AV_GRH */
    uint8_t sgid_index;
    uint8_t hop_limit;
    uint8_t traffic_class;
    uint16_t reserved;
    uint32_t flow_label;
    uint8_t dgid[16];
};

/* MODIFY_QP input and QUERY_QP output. */
struct pib_qp_attr {
    uint32_t attr_mask; /* MODIFY: which fields apply; QUERY: 0 */
    uint8_t qp_state;
    uint8_t cur_qp_state;
    uint8_t path_mtu;
    uint8_t path_mig_state;
    uint32_t qkey;
    uint32_t rq_psn;
    uint32_t sq_psn;
    uint32_t dest_qp_num;
    uint32_t qp_access_flags;
    uint16_t pkey_index;
    uint8_t port_num;
    uint8_t timeout;
    uint8_t retry_cnt;
    uint8_t rnr_retry;
    uint8_t min_rnr_timer;
    uint8_t max_rd_atomic;
    uint8_t max_dest_rd_atomic;
    uint8_t sq_draining;
    uint8_t en_sqd_async_notify;
    uint8_t reserved0;
    struct pib_av av;
    uint32_t reserved1[4];
};

/* ---- Work queue entries ------------------------------------------------------ */
/*
 * A send WQE is a control segment, then per opcode an RDMA, atomic or UD
 * segment, then data segments or one inline segment, all in 16-byte units
 * (num_ds counts them, the control segment included). WQE slots are
 * 2^log_wqe_stride bytes.
 */
enum pib_wqe_opcode {
    PIB_WR_SEND = 0x00,
    PIB_WR_SEND_IMM = 0x01,
    PIB_WR_RDMA_WRITE = 0x02,
    PIB_WR_RDMA_WRITE_IMM = 0x03,
    PIB_WR_RDMA_READ = 0x04,
    PIB_WR_ATOMIC_CMP_AND_SWP = 0x05,
    PIB_WR_ATOMIC_FETCH_AND_ADD = 0x06,
    PIB_WR_LOCAL_INV = 0x07, /* imm: the key to invalidate */
    PIB_WR_SEND_INV = 0x08,  /* RC; imm: the peer's R_Key to invalidate */
    PIB_WR_REG_MR = 0x09,    /* a pib_wqe_reg_mr segment follows */
    PIB_WR_BIND_MW = 0x0a,   /* a pib_wqe_bind_mw segment follows */
    /* RC, XRC: pib_wqe_raddr, then pib_wqe_flush; no data (docs/prm.md §7.4) */
    PIB_WR_FLUSH = 0x0b,
    /* RC, XRC: pib_wqe_raddr, then pib_wqe_atomic whose swap_add holds the
     * 8 bytes to write, in memory order; no data */
    PIB_WR_ATOMIC_WRITE = 0x0c,
};

/* wqe flags */
#define PIB_WQE_SIGNALED (1u << 0)
#define PIB_WQE_SOLICITED (1u << 1)
#define PIB_WQE_FENCE (1u << 2)
#define PIB_WQE_INLINE (1u << 3)

struct pib_wqe_ctrl {
    uint64_t wr_id;
    uint8_t opcode; /* pib_wqe_opcode; ignored in receive WQEs */
    uint8_t flags;
    uint8_t num_ds;
    uint8_t reserved;
    uint32_t imm; /* immediate data (big-endian as on the wire) or rkey */
};

/*
 * The second segment of every send WQE of an XRC INI QP: the XRC SRQ,
 * behind the peer XRC TGT QP, that the message goes to (the XRCETH).
 */
struct pib_wqe_xrc {
    uint32_t remote_srqn;
    uint32_t reserved[3];
};

struct pib_wqe_raddr {
    uint64_t remote_addr;
    uint32_t rkey;
    uint32_t reserved;
};

struct pib_wqe_atomic {
    uint64_t swap_add;
    uint64_t compare;
};

/* FLUSH's placement types (a mask) and selectivity levels, as IBA 1.5 */
#define PIB_FLUSH_GLOBAL (1u << 0)
#define PIB_FLUSH_PERSISTENT (1u << 1)
#define PIB_FLUSH_RANGE 0
#define PIB_FLUSH_MR 1

struct pib_wqe_flush {
    uint32_t length;     /* PIB_FLUSH_RANGE: bytes from remote_addr */
    uint8_t placement;   /* PIB_FLUSH_GLOBAL and/or PIB_FLUSH_PERSISTENT */
    uint8_t selectivity; /* PIB_FLUSH_RANGE or PIB_FLUSH_MR */
    uint16_t reserved0;
    uint64_t reserved1;
};

struct pib_wqe_ud {
    struct pib_av av;
    uint32_t remote_qpn;
    uint32_t remote_qkey;
    uint64_t reserved;
};

/* Fast registration of a PIB_MR_FAST_REG region (docs/prm.md §6.2). */
struct pib_wqe_reg_mr {
    uint64_t iova;
    uint64_t length;
    uint64_t page_list; /* guest address of page_count u64 page addresses, 8-aligned */
    uint32_t key;       /* the region's key with the variant it takes */
    uint32_t access;    /* PIB_ACCESS_* */
    uint32_t page_count;
    uint8_t log_page_size; /* 12..30 */
    uint8_t reserved0[3];
    uint64_t reserved1;
};

/* Binding of a memory window (docs/prm.md §6.7). */
struct pib_wqe_bind_mw {
    uint64_t addr; /* the range of the region the window reaches */
    uint64_t length;
    uint32_t mw_key;   /* the window's current key */
    uint32_t new_rkey; /* its key once bound: same index, any variant */
    uint32_t mr_key;
    uint32_t access; /* PIB_ACCESS_REMOTE_* */
};

struct pib_wqe_data {
    uint32_t byte_count;
    uint32_t lkey;
    uint64_t addr;
};

/* Inline data: byte_count | PIB_INLINE_FLAG, then the bytes, padded to 16. */
#define PIB_INLINE_FLAG (1u << 31)

struct pib_wqe_inline {
    uint32_t byte_count;
    uint8_t data[12];
};

/* ---- Completion queue entries ---------------------------------------------- */

enum pib_wc_opcode {
    PIB_WC_SEND = 0x00,
    PIB_WC_RDMA_WRITE = 0x01,
    PIB_WC_RDMA_READ = 0x02,
    PIB_WC_COMP_SWAP = 0x03,
    PIB_WC_FETCH_ADD = 0x04,
    PIB_WC_LOCAL_INV = 0x05,
    PIB_WC_REG_MR = 0x06,
    PIB_WC_BIND_MW = 0x07,
    PIB_WC_FLUSH = 0x08,
    PIB_WC_ATOMIC_WRITE = 0x09,
    PIB_WC_RECV = 0x80,
    PIB_WC_RECV_RDMA_WITH_IMM = 0x81,
};

/* Completion status, as ib_wc_status. */
enum pib_wc_status {
    PIB_WC_SUCCESS = 0,
    PIB_WC_LOC_LEN_ERR = 1,
    PIB_WC_LOC_QP_OP_ERR = 2,
    PIB_WC_LOC_EEC_OP_ERR = 3,
    PIB_WC_LOC_PROT_ERR = 4,
    PIB_WC_WR_FLUSH_ERR = 5,
    PIB_WC_MW_BIND_ERR = 6,
    PIB_WC_BAD_RESP_ERR = 7,
    PIB_WC_LOC_ACCESS_ERR = 8,
    PIB_WC_REM_INV_REQ_ERR = 9,
    PIB_WC_REM_ACCESS_ERR = 10,
    PIB_WC_REM_OP_ERR = 11,
    PIB_WC_RETRY_EXC_ERR = 12,
    PIB_WC_RNR_RETRY_EXC_ERR = 13,
    PIB_WC_GENERAL_ERR = 21,
};

/*
 * vendor_err of an error completion: what the device found (docs/prm.md
 * §7.3). An injected completion (§10) carries the host's value instead.
 */
enum pib_vendor_err {
    PIB_VENDOR_ERR_NONE = 0x00,         /* success */
    PIB_VENDOR_ERR_WQE = 0x01,          /* the WQE is malformed or cannot be read */
    PIB_VENDOR_ERR_LKEY = 0x02,         /* an L_Key does not cover its buffer */
    PIB_VENDOR_ERR_DMA = 0x03,          /* the data cannot be read or written */
    PIB_VENDOR_ERR_LENGTH = 0x04,       /* too long for the message or the buffer */
    PIB_VENDOR_ERR_FLUSHED = 0x05,      /* the QP is in the error state */
    PIB_VENDOR_ERR_RETRIES = 0x06,      /* no ACK after retry_cnt retries */
    PIB_VENDOR_ERR_RNR_RETRIES = 0x07,  /* RNR NAKs after rnr_retry retries */
    PIB_VENDOR_ERR_REMOTE_NAK = 0x08,   /* the responder NAKed the request */
    PIB_VENDOR_ERR_BAD_RESPONSE = 0x09, /* the response is not what was asked */
    PIB_VENDOR_ERR_INTERNAL = 0x0a,     /* anything else */
};

/* cqe flags */
#define PIB_CQE_PHASE (1u << 0) /* as PIB_EQE_PHASE */
#define PIB_CQE_GRH (1u << 1)
#define PIB_CQE_WITH_IMM (1u << 2)
#define PIB_CQE_WITH_INV (1u << 3)
#define PIB_CQE_SRQ (1u << 4) /* a receive that used a WQE of SRQ `srqn` */

#define PIB_CQE_SIZE 64u

struct pib_cqe {
    uint64_t wr_id;
    uint32_t byte_len;
    uint32_t imm; /* immediate data (big-endian) or invalidated rkey */
    uint32_t qpn;
    uint32_t src_qp; /* UD */
    uint16_t slid;
    uint16_t pkey_index;
    uint16_t wqe_index; /* producer count of the WQE this completes, mod 2^16 */
    uint8_t opcode;     /* pib_wc_opcode */
    uint8_t status;     /* pib_wc_status */
    uint8_t sl;
    uint8_t dlid_path_bits;
    uint8_t flags;
    uint8_t vendor_err;
    uint32_t srqn;      /* with PIB_CQE_SRQ: the SRQ whose WQE a receive used */
    uint64_t timestamp; /* core clock when the device wrote this CQE */
    uint32_t reserved[4];
};

/* ---- BAR2 doorbell pages ---------------------------------------------------- */
/*
 * Each page belongs to the context that allocated it (PIB_CMD_ALLOC_UAR),
 * and rings only the queues created with its index as uar_page. Doorbells
 * are 64-bit writes: number in bits 31:0, value in bits 63:32.
 */
#define PIB_DB_SQ 0x00     /* qpn, new SQ producer index */
#define PIB_DB_RQ 0x08     /* qpn, new RQ producer index */
#define PIB_DB_SRQ 0x10    /* srqn, new producer index */
#define PIB_DB_CQ_ARM 0x18 /* cqn, PIB_CQ_ARM_* */
#define PIB_CQ_ARM_NEXT 1
#define PIB_CQ_ARM_SOLICITED 2
/*
 * RO: the core clock (PIB_REG_CORE_CLOCK_LO), so user space can read it
 * through its mapped page: an aligned 64-bit read gets it whole, 32-bit
 * reads get a half each. Every other read of a doorbell page returns 0.
 */
#define PIB_DB_CLOCK 0x20

/* ---- Limits a device instance may be configured with -------------------- */

#define PIB_MIN_DOORBELL_PAGES 1u
#define PIB_MAX_DOORBELL_PAGES 16384u
#define PIB_MIN_MSIX_VECTORS 1u
#define PIB_MAX_MSIX_VECTORS 256u
#define PIB_MIN_PORTS 1u
#define PIB_MAX_PORTS 2u

#ifndef __cplusplus
_Static_assert(sizeof(struct pib_dev_cap) == 184, "pib_dev_cap layout");
_Static_assert(sizeof(struct pib_port_info) == 72, "pib_port_info layout");
_Static_assert(sizeof(struct pib_port_counters) == 128, "pib_port_counters layout");
_Static_assert(sizeof(struct pib_mtt_write) <= PIB_MAILBOX_SIZE, "mtt write");
_Static_assert(sizeof(struct pib_eqe) == 32, "pib_eqe layout");
_Static_assert(sizeof(struct pib_mcast) == 24, "pib_mcast layout");
_Static_assert(sizeof(struct pib_cqe) == PIB_CQE_SIZE, "pib_cqe layout");
_Static_assert(sizeof(struct pib_av) == 32, "pib_av layout");
_Static_assert(sizeof(struct pib_mad_ifc) == 264, "pib_mad_ifc layout");
_Static_assert(sizeof(struct pib_wqe_ctrl) == 16, "pib_wqe_ctrl layout");
_Static_assert(sizeof(struct pib_wqe_ud) == 48, "pib_wqe_ud layout");
_Static_assert(sizeof(struct pib_wqe_xrc) == 16, "pib_wqe_xrc layout");
_Static_assert(sizeof(struct pib_wqe_reg_mr) == 48, "pib_wqe_reg_mr layout");
_Static_assert(sizeof(struct pib_wqe_bind_mw) == 32, "pib_wqe_bind_mw layout");
_Static_assert(sizeof(struct pib_wqe_flush) == 16, "pib_wqe_flush layout");
_Static_assert(sizeof(struct pib_mw_context) == 48, "pib_mw_context layout");
_Static_assert(sizeof(struct pib_eq_context) == 32, "pib_eq_context layout");
_Static_assert(sizeof(struct pib_cq_context) == 48, "pib_cq_context layout");
_Static_assert(sizeof(struct pib_mr_context) == 48, "pib_mr_context layout");
_Static_assert(sizeof(struct pib_srq_context) == 40, "pib_srq_context layout");
_Static_assert(sizeof(struct pib_qp_context) == 64, "pib_qp_context layout");
_Static_assert(sizeof(struct pib_qp_attr) == 88, "pib_qp_attr layout");
#endif

#endif /* PIB_HW_H */
