/*
 * pib-hca: an emulated InfiniBand host channel adapter (PCIe endpoint).
 *
 * This file is only the QEMU side of the device: it registers the QOM type,
 * maps the BARs, wires MSI-X and forwards every access to the device core,
 * a C++ library behind include/pib_core.h that models the adapter itself.
 * The hardware interface is include/pib_hw.h, explained in docs/prm.md.
 *
 * SPDX-License-Identifier: GPL-2.0-or-later
 */

#include "qemu/osdep.h"
#include <sys/ioctl.h>
#include <linux/sockios.h>
#include "qemu/error-report.h"
#include "qemu/log.h"
#include "qemu/main-loop.h"
#include "qemu/module.h"
#include "qemu/timer.h"
#include "qemu/units.h"
#include "qapi/error.h"
#include "hw/pci/msix.h"
#include "hw/pci/pci_device.h"
#include "hw/pci/pcie.h"
#include "hw/qdev-properties.h"
#include "hw/qdev-properties-system.h"
#include "chardev/char-fe.h"
#include "chardev/char-socket.h"
#include "migration/qemu-file-types.h"
#include "migration/vmstate.h"
#include "system/runstate.h"
#include "trace.h"

#include "pib_core.h"
#include "pib_hw.h"
#include "pib-hca-compat.h"
#include "pib-hca-events.h"
#include "pib-hca.h"

#define TYPE_PIB_HCA "pib-hca"
OBJECT_DECLARE_SIMPLE_TYPE(PibHcaState, PIB_HCA)

/* Where the PCI Express capability sits in configuration space. */
#define PIB_HCA_PCIE_CAP_OFFSET 0xa0

/*
 * What a port may queue for a peer that does not read: the core hears
 * "full" beyond PIB_HCA_TX_FULL and starts no new work on the port until
 * the queue is back under PIB_HCA_TX_RESUME; the few packets it must still
 * answer with are dropped beyond PIB_HCA_TX_LIMIT, as a congested link
 * drops them.
 */
#define PIB_HCA_TX_FULL (1 * MiB)
#define PIB_HCA_TX_RESUME (256 * KiB)
#define PIB_HCA_TX_LIMIT (4 * MiB)

/*
 * One InfiniBand port's cable: a chardev stream to a switch port, and once
 * the switch takes the core's offer, a ring cable in shared memory whose
 * doorbell line (a socket) the main loop watches (docs/wire.md).
 */
typedef struct PibHcaPort {
    struct PibHcaState *hca;
    unsigned number; /* 1-based */
    CharFrontend chr;
    /* Bytes the stream has not taken yet: [tx_head, txq->len). */
    GByteArray *txq;
    size_t tx_head;
    guint tx_watch;        /* waiting for the stream to take more */
    bool tx_full;          /* the core was told the queue is full */
    bool writable_pending; /* tell the core from the bottom half */
    bool tx_batched;       /* txq gained bytes in a batch not flushed yet */
    int bell_fd;           /* a ring cable's doorbell we watch, or -1 */
    bool open;             /* the chardev is connected */
    bool core_open;        /* what the core was last told of it */
} PibHcaPort;

/* The core's saved state on its way through the migration stream. */
typedef struct PibHcaSaved {
    uint8_t *bytes;
    uint32_t len;
} PibHcaSaved;

struct PibHcaState {
    PCIDevice parent_obj;

    MemoryRegion regs;
    MemoryRegion doorbells;
    struct pib_core *core;
    uint8_t vsc_offset; /* the vendor-specific capability's; 0 for none */
    QEMUTimer *transport_timer; /* the core's retransmission/RNR timer */
    QEMUBH *bh;                 /* continues the core's postponed work */
    bool run_pending;           /* the core asked for pib_core_run() */
    bool batching; /* in a core call whose packets leave in one write */
    /* Migration and snapshots (docs/migration.md). */
    PibHcaSaved saved;
    /*
     * A VM that waits for an incoming migration: its cables reach the core
     * only once the loaded state says which links it resumes.
     */
    bool cables_held;
    /*
     * The VM is stopped: the core does no work, for it would write guest
     * memory that a migration may have sent already (TCG lets the main
     * loop run during the final RAM pass) or that a snapshot holds. The
     * cables are not read: what arrives waits in them.
     */
    bool stopped;
    bool moving; /* pre_save told the core the VM moves */
    VMChangeStateEntry *vm_state;

    /* Properties. */
    char *personality; /* "pib" (NULL) or "mlx5" */
    uint64_t node_guid;
    uint32_t doorbell_pages;
    uint32_t msix_vectors;
    uint32_t ports;
    bool rings; /* offer ring cables to switches that take them */
    PibHcaPort port[PIB_MAX_PORTS];
};

static void pib_hca_vm_state(void *opaque, bool running, RunState state);

static void pib_hca_guest_error(void *opaque, unsigned error,
                                const char *detail)
{
    PibHcaState *s = opaque;

    pib_hca_trace_guest_error(error, detail);
    qemu_log_mask(LOG_GUEST_ERROR, "pib-hca %s: %s: %s\n",
                  DEVICE(s)->id ? DEVICE(s)->id : "",
                  pib_guest_error_token(error), detail);
}

/* The core formats a guest error's detail only when someone reads it. */
static int pib_hca_guest_error_enabled(void *opaque, unsigned error)
{
    return qemu_loglevel_mask(LOG_GUEST_ERROR) ||
           pib_hca_guest_error_traced(error);
}

static void pib_hca_core_event(void *opaque, unsigned event,
                               const uint64_t *args)
{
    pib_hca_trace_event(event, args);
}

static int pib_hca_core_event_enabled(void *opaque, unsigned event)
{
    return pib_hca_event_enabled(event);
}

/*
 * Whether every byte of [addr, addr + len) is guest RAM that the
 * function's bus-master address space reaches. DMA into anything else is
 * refused: MMIO (another device's registers, or this device's own BARs,
 * which would re-enter the core in the middle of its work) or a hole.
 * A disabled bus master reaches nothing, as on real hardware.
 */
static bool pib_hca_dma_is_ram(PCIDevice *pdev, uint64_t addr, uint64_t len,
                               bool is_write)
{
    AddressSpace *as = pci_get_address_space(pdev);

    RCU_READ_LOCK_GUARD();
    while (len) {
        hwaddr xlat, plen = len;
        MemoryRegion *mr = address_space_translate(
            as, addr, &xlat, &plen, is_write, MEMTXATTRS_UNSPECIFIED);

        if (plen == 0 ||
            !memory_access_is_direct(mr, is_write, MEMTXATTRS_UNSPECIFIED)) {
            return false;
        }
        addr += plen;
        len -= MIN(plen, len);
    }
    return true;
}

static int pib_hca_dma_refused(PibHcaState *s, uint64_t addr, uint64_t len,
                               bool is_write)
{
    trace_pib_hca_dma_not_ram(addr, len, is_write);
    qemu_log_mask(LOG_GUEST_ERROR,
                  "pib-hca %s: dma-not-ram: %s of %" PRIu64
                  " bytes at 0x%" PRIx64 " reaches no guest RAM\n",
                  DEVICE(s)->id ? DEVICE(s)->id : "",
                  is_write ? "write" : "read", len, addr);
    return -1;
}

/*
 * DMA goes through the function's bus-master address space, so it fails
 * when the driver has not enabled bus mastering, as on real hardware.
 */
static int pib_hca_dma_read(void *opaque, uint64_t addr, void *buf,
                            uint64_t len)
{
    PibHcaState *s = opaque;
    MemTxResult r;

    if (!pib_hca_dma_is_ram(PCI_DEVICE(s), addr, len, false)) {
        return pib_hca_dma_refused(s, addr, len, false);
    }
    r = pci_dma_read(PCI_DEVICE(s), addr, buf, len);
    trace_pib_hca_dma_read(addr, len, r);
    return r == MEMTX_OK ? 0 : -1;
}

static int pib_hca_dma_write(void *opaque, uint64_t addr, const void *buf,
                             uint64_t len)
{
    PibHcaState *s = opaque;
    MemTxResult r;

    if (!pib_hca_dma_is_ram(PCI_DEVICE(s), addr, len, true)) {
        return pib_hca_dma_refused(s, addr, len, true);
    }
    /* Ordered after every earlier write, as pib_core.h asks (dma_barrier). */
    r = pci_dma_write(PCI_DEVICE(s), addr, buf, len);
    trace_pib_hca_dma_write(addr, len, r);
    return r == MEMTX_OK ? 0 : -1;
}

/*
 * An ATOMIC WRITE's 8 bytes in one store: address_space_stq_le stores to
 * RAM with one aligned 8-byte access, which a vCPU sees whole, where
 * pci_dma_write copies bytes.
 */
static int pib_hca_dma_store64(void *opaque, uint64_t addr, uint64_t value)
{
    PibHcaState *s = opaque;
    MemTxResult r;

    if (!pib_hca_dma_is_ram(PCI_DEVICE(s), addr, 8, true)) {
        return pib_hca_dma_refused(s, addr, 8, true);
    }
    /* Ordered after every earlier write, as pci_dma_write is. */
    smp_mb();
    address_space_stq_le(pci_get_address_space(PCI_DEVICE(s)), addr, value,
                         MEMTXATTRS_UNSPECIFIED, &r);
    trace_pib_hca_dma_write(addr, 8, r);
    return r == MEMTX_OK ? 0 : -1;
}

/* Whether [addr, addr + len) is guest RAM the device reaches directly. */
static bool pib_hca_is_direct_ram(PCIDevice *pdev, uint64_t addr, uint64_t len)
{
    hwaddr xlat, plen = len;
    MemoryRegion *mr;

    RCU_READ_LOCK_GUARD();
    mr = address_space_translate(pci_get_address_space(pdev), addr, &xlat,
                                 &plen, false, MEMTXATTRS_UNSPECIFIED);
    return plen == len &&
           memory_access_is_direct(mr, false, MEMTXATTRS_UNSPECIFIED);
}

/*
 * Reading in place: only guest RAM that the bus-master address space maps
 * directly and whole. Anything else (MMIO, a disabled bus master, a range
 * that runs into a hole) goes through pci_dma_read, which reports errors.
 */
static const void *pib_hca_dma_map_read(void *opaque, uint64_t addr,
                                        uint64_t len)
{
    PCIDevice *pdev = PCI_DEVICE(opaque);
    dma_addr_t mapped = len;
    void *p = NULL;

    if (pib_hca_is_direct_ram(pdev, addr, len)) {
        p = pci_dma_map(pdev, addr, &mapped, DMA_DIRECTION_TO_DEVICE);
        if (p && mapped < len) {
            pci_dma_unmap(pdev, p, mapped, DMA_DIRECTION_TO_DEVICE, 0);
            p = NULL;
        }
    }
    trace_pib_hca_dma_map_read(addr, len, p != NULL);
    return p;
}

static void pib_hca_dma_unmap_read(void *opaque, const void *ptr, uint64_t len)
{
    pci_dma_unmap(PCI_DEVICE(opaque), (void *) ptr, len,
                  DMA_DIRECTION_TO_DEVICE, 0);
}

static void pib_hca_msix_notify(void *opaque, unsigned vector)
{
    PCIDevice *pdev = PCI_DEVICE(opaque);

    trace_pib_hca_msix_notify(vector, msix_enabled(pdev));
    if (msix_enabled(pdev)) {
        msix_notify(pdev, vector);
    }
}

static size_t pib_hca_tx_pending(const PibHcaPort *port)
{
    return port->txq->len - port->tx_head;
}

static gboolean pib_hca_port_writable(void *do_not_use, GIOCondition cond,
                                      void *opaque);

static void pib_hca_port_tx_reset(PibHcaPort *port)
{
    if (port->tx_watch) {
        g_source_remove(port->tx_watch);
        port->tx_watch = 0;
    }
    g_byte_array_set_size(port->txq, 0);
    port->tx_head = 0;
    if (port->tx_full) {
        port->tx_full = false;
        port->writable_pending = true;
        qemu_bh_schedule(port->hca->bh);
    }
}

/*
 * Writes what the stream takes without blocking; the rest waits for a
 * write watch. Never waits for the peer: a switch that stops reading
 * fills this queue, not the vCPU's time.
 */
static void pib_hca_port_flush(PibHcaPort *port)
{
    while (pib_hca_tx_pending(port)) {
        int n = qemu_chr_fe_write(&port->chr, port->txq->data + port->tx_head,
                                  MIN(pib_hca_tx_pending(port), INT_MAX));

        /* A failed write may have closed the stream, and emptied txq. */
        if (n <= 0 || (size_t) n > pib_hca_tx_pending(port)) {
            break;
        }
        port->tx_head += n;
    }
    if (port->tx_head == port->txq->len) {
        g_byte_array_set_size(port->txq, 0);
        port->tx_head = 0;
    } else if (port->tx_head > port->txq->len / 2) {
        g_byte_array_remove_range(port->txq, 0, port->tx_head);
        port->tx_head = 0;
    }
    if (pib_hca_tx_pending(port) && !port->tx_watch) {
        port->tx_watch = qemu_chr_fe_add_watch(&port->chr, G_IO_OUT | G_IO_HUP,
                                               pib_hca_port_writable, port);
        if (!port->tx_watch) { /* a stream that cannot say: nothing waits */
            trace_pib_hca_port_send_failed(port->number,
                                           pib_hca_tx_pending(port));
            pib_hca_port_tx_reset(port);
        }
    }
}

/* Runs from the main loop: never inside a core call. */
static gboolean pib_hca_port_writable(void *do_not_use, GIOCondition cond,
                                      void *opaque)
{
    PibHcaPort *port = opaque;

    port->tx_watch = 0;
    pib_hca_port_flush(port);
    if (port->tx_full && pib_hca_tx_pending(port) <= PIB_HCA_TX_RESUME) {
        port->tx_full = false;
        trace_pib_hca_port_writable(port->number, pib_hca_tx_pending(port));
        if (port->hca->stopped) {
            port->writable_pending = true; /* the bottom half, on resume */
        } else {
            pib_core_port_writable(port->hca->core, port->number);
        }
    }
    return G_SOURCE_REMOVE;
}

static int pib_hca_port_send(void *opaque, unsigned number, const void *buf,
                             size_t len)
{
    PibHcaState *s = opaque;
    PibHcaPort *port = &s->port[number - 1];

    trace_pib_hca_port_send(number, len);
    if (!qemu_chr_fe_backend_open(&port->chr)) {
        return PIB_PORT_SEND_OK; /* no cable: the packet is lost */
    }
    if (pib_hca_tx_pending(port) + len > PIB_HCA_TX_LIMIT) {
        trace_pib_hca_port_send_failed(number, len);
        return PIB_PORT_SEND_FULL;
    }
    g_byte_array_append(port->txq, buf, len);
    if (s->batching) {
        port->tx_batched = true;
    } else {
        pib_hca_port_flush(port);
    }
    if (pib_hca_tx_pending(port) >= PIB_HCA_TX_FULL) {
        if (!port->tx_full) {
            trace_pib_hca_port_full(number, pib_hca_tx_pending(port));
        }
        port->tx_full = true;
        return PIB_PORT_SEND_FULL;
    }
    return PIB_PORT_SEND_OK;
}

/*
 * A doorbell, a received chunk, a timer or the bottom half may make the
 * core send many packets: they are queued during the call and leave in
 * as few writes as the stream takes after it, not one write each.
 */
static void pib_hca_batch_begin(PibHcaState *s)
{
    s->batching = true;
}

static void pib_hca_batch_end(PibHcaState *s)
{
    unsigned i;

    s->batching = false;
    for (i = 0; i < PIB_MAX_PORTS; i++) {
        PibHcaPort *port = &s->port[i];

        if (!port->tx_batched) {
            continue;
        }
        port->tx_batched = false;
        pib_hca_port_flush(port);
        /* Said full during the call, and the stream took it all since. */
        if (port->tx_full && pib_hca_tx_pending(port) <= PIB_HCA_TX_RESUME) {
            port->tx_full = false;
            port->writable_pending = true;
            qemu_bh_schedule(s->bh);
        }
    }
}

/*
 * A ring cable's offer: its descriptors go with these bytes, so nothing
 * may wait in the queue before them. The chardev must be a UNIX socket
 * (one that passes descriptors).
 */
static int pib_hca_port_send_fds(void *opaque, unsigned number, const void *buf,
                                 size_t len, const int *fds, size_t nfds)
{
    PibHcaState *s = opaque;
    PibHcaPort *port = &s->port[number - 1];
    int n;

    if (!s->rings || !qemu_chr_fe_backend_open(&port->chr) || len > INT_MAX) {
        return -1;
    }
    pib_hca_port_flush(port);
    if (pib_hca_tx_pending(port) ||
        qemu_chr_fe_set_msgfds(&port->chr, (int *) fds, nfds) < 0) {
        return -1;
    }
    n = qemu_chr_fe_write(&port->chr, buf, len);
    if (n <= 0) {
        qemu_chr_fe_set_msgfds(&port->chr, NULL, 0);
        return -1;
    }
    if ((size_t) n < len) { /* the descriptors went with the first part */
        g_byte_array_append(port->txq, (const uint8_t *) buf + n, len - n);
        pib_hca_port_flush(port);
    }
    trace_pib_hca_port_rings_offered(number, len);
    return 0;
}

/* A ring cable's doorbell rang: frames to read, or room to write. */
static void pib_hca_port_bell(void *opaque)
{
    PibHcaPort *port = opaque;

    pib_hca_batch_begin(port->hca);
    pib_core_port_bell(port->hca->core, port->number);
    pib_hca_batch_end(port->hca);
}

static void pib_hca_port_watch(void *opaque, unsigned number, int fd)
{
    PibHcaState *s = opaque;
    PibHcaPort *port = &s->port[number - 1];

    if (port->bell_fd >= 0) {
        qemu_set_fd_handler(port->bell_fd, NULL, NULL, NULL);
    }
    port->bell_fd = fd;
    if (fd >= 0 && !s->stopped) {
        qemu_set_fd_handler(fd, pib_hca_port_bell, NULL, port);
    }
    trace_pib_hca_port_watch(number, fd);
}

/* The socket under port's chardev, or -1 when it is no socket or closed. */
static int pib_hca_port_socket(PibHcaPort *port)
{
    Chardev *chr = qemu_chr_fe_get_driver(&port->chr);
    SocketChardev *sock;

    if (!chr || !object_dynamic_cast(OBJECT(chr), TYPE_CHARDEV_SOCKET)) {
        return -1;
    }
    sock = SOCKET_CHARDEV(chr);
    return sock->sioc ? sock->sioc->fd : -1;
}

/*
 * What the port's stream still carries: our queue and the socket's send
 * queue (a UNIX socket's counts what the switch has not read), and the
 * socket's receive queue. Asked only when a transport timer ran out, so
 * that a switch or a QEMU waiting for a CPU does not cost RC its retries.
 */
static void pib_hca_port_backlog(void *opaque, unsigned number,
                                 uint64_t *untaken, uint64_t *unread)
{
    PibHcaState *s = opaque;
    PibHcaPort *port = &s->port[number - 1];
    int fd = pib_hca_port_socket(port);
    int out = 0, in = 0;

    *untaken = pib_hca_tx_pending(port);
    *unread = 0;
    if (fd < 0) {
        return;
    }
    if (ioctl(fd, SIOCOUTQ, &out) == 0 && out > 0) {
        *untaken += out;
    }
    if (ioctl(fd, SIOCINQ, &in) == 0 && in > 0) {
        *unread = in;
    }
    trace_pib_hca_port_backlog(number, *untaken, *unread);
}

static void pib_hca_port_disconnect(void *opaque, unsigned port)
{
    PibHcaState *s = opaque;

    qemu_chr_fe_disconnect(&s->port[port - 1].chr);
}

static uint64_t pib_hca_clock_ns(void *opaque)
{
    return qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL);
}

static void pib_hca_timer_arm(void *opaque, uint64_t deadline_ns)
{
    PibHcaState *s = opaque;

    if (deadline_ns == UINT64_MAX) {
        timer_del(s->transport_timer);
    } else {
        timer_mod(s->transport_timer, MIN(deadline_ns, INT64_MAX));
    }
}

static void pib_hca_transport_timer(void *opaque)
{
    PibHcaState *s = opaque;

    if (s->stopped) { /* a virtual-clock timer: not before the VM runs */
        timer_mod(s->transport_timer,
                  qemu_clock_get_ns(QEMU_CLOCK_VIRTUAL) + SCALE_MS);
        return;
    }
    pib_hca_batch_begin(s);
    pib_core_timer_expired(s->core);
    pib_hca_batch_end(s);
}

static void pib_hca_schedule(void *opaque)
{
    PibHcaState *s = opaque;

    s->run_pending = true;
    qemu_bh_schedule(s->bh);
}

/* The core's postponed work, and ports whose queue has room again. */
static void pib_hca_bh(void *opaque)
{
    PibHcaState *s = opaque;
    unsigned i;

    if (s->stopped) {
        return; /* the work stays pending until the VM runs */
    }
    pib_hca_batch_begin(s);
    for (i = 0; i < PIB_MAX_PORTS; i++) {
        if (s->port[i].writable_pending) {
            s->port[i].writable_pending = false;
            pib_core_port_writable(s->core, i + 1);
        }
    }
    if (s->run_pending) {
        s->run_pending = false;
        trace_pib_hca_run();
        pib_core_run(s->core);
    }
    pib_hca_batch_end(s);
}

static const struct pib_host_ops pib_hca_host_ops = {
    .guest_error = pib_hca_guest_error,
    .guest_error_enabled = pib_hca_guest_error_enabled,
    .event = pib_hca_core_event,
    .event_enabled = pib_hca_core_event_enabled,
    .dma_read = pib_hca_dma_read,
    .dma_write = pib_hca_dma_write,
    .dma_store64 = pib_hca_dma_store64,
    .dma_map_read = pib_hca_dma_map_read,
    .dma_unmap_read = pib_hca_dma_unmap_read,
    .msix_notify = pib_hca_msix_notify,
    .port_send = pib_hca_port_send,
    .port_disconnect = pib_hca_port_disconnect,
    .port_send_fds = pib_hca_port_send_fds,
    .port_watch = pib_hca_port_watch,
    .port_backlog = pib_hca_port_backlog,
    .clock_ns = pib_hca_clock_ns,
    .timer_arm = pib_hca_timer_arm,
    .schedule = pib_hca_schedule,
};

/* The core learns whether the port's cable is connected. */
static void pib_hca_tell_cable(PibHcaPort *port)
{
    port->core_open = port->open;
    pib_core_port_connected(port->hca->core, port->number, port->open);
}

static int pib_hca_port_can_receive(void *opaque)
{
    PibHcaPort *port = opaque;

    return port->hca->cables_held || port->hca->stopped ? 0 : 64 * KiB;
}

static void pib_hca_port_receive(void *opaque, const uint8_t *buf, int size)
{
    PibHcaPort *port = opaque;

    pib_hca_batch_begin(port->hca);
    pib_core_port_receive(port->hca->core, port->number, buf, size);
    pib_hca_batch_end(port->hca);
}

static void pib_hca_port_event(void *opaque, QEMUChrEvent event)
{
    PibHcaPort *port = opaque;

    if (event == CHR_EVENT_OPENED || event == CHR_EVENT_CLOSED) {
        trace_pib_hca_port_link(port->number, event == CHR_EVENT_OPENED);
        port->open = event == CHR_EVENT_OPENED;
        pib_hca_port_tx_reset(port); /* nothing queued survives a cable */
        if (!port->hca->cables_held && !port->hca->stopped) {
            pib_hca_tell_cable(port);
        }
    }
}

/* The cables held for an incoming migration reach the core now. */
static void pib_hca_release_cables(PibHcaState *s)
{
    unsigned i;

    if (!s->cables_held) {
        return;
    }
    s->cables_held = false;
    for (i = 0; i < s->ports; i++) {
        PibHcaPort *port = &s->port[i];

        if (port->open) {
            pib_hca_tell_cable(port);
            qemu_chr_fe_accept_input(&port->chr);
        }
    }
}

static uint64_t pib_hca_regs_read(void *opaque, hwaddr addr, unsigned size)
{
    PibHcaState *s = opaque;
    uint64_t val = pib_core_bar_read(s->core, PIB_BAR_REGS, addr, size);

    trace_pib_hca_regs_read(addr, size, val);
    return val;
}

static void pib_hca_regs_write(void *opaque, hwaddr addr, uint64_t val,
                               unsigned size)
{
    PibHcaState *s = opaque;

    trace_pib_hca_regs_write(addr, size, val);
    pib_hca_batch_begin(s);
    pib_core_bar_write(s->core, PIB_BAR_REGS, addr, val, size);
    pib_hca_batch_end(s);
}

static uint64_t pib_hca_doorbell_read(void *opaque, hwaddr addr, unsigned size)
{
    PibHcaState *s = opaque;
    uint64_t val = pib_core_bar_read(s->core, PIB_BAR_DOORBELL, addr, size);

    trace_pib_hca_doorbell_read(addr, size, val);
    return val;
}

static void pib_hca_doorbell_write(void *opaque, hwaddr addr, uint64_t val,
                                   unsigned size)
{
    PibHcaState *s = opaque;

    trace_pib_hca_doorbell_write(addr, size, val);
    pib_hca_batch_begin(s);
    pib_core_bar_write(s->core, PIB_BAR_DOORBELL, addr, val, size);
    pib_hca_batch_end(s);
}

/*
 * Every width and alignment reaches the core, which decides what is valid
 * and reports the rest as a guest error with a precise reason.
 */
#define PIB_HCA_ANY_ACCESS                                                     \
    .valid = {.min_access_size = 1, .max_access_size = 8, .unaligned = true},  \
    .impl = {.min_access_size = 1, .max_access_size = 8, .unaligned = true}

static const MemoryRegionOps pib_hca_regs_ops = {
    .read = pib_hca_regs_read,
    .write = pib_hca_regs_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    PIB_HCA_ANY_ACCESS,
};

static const MemoryRegionOps pib_hca_doorbell_ops = {
    .read = pib_hca_doorbell_read,
    .write = pib_hca_doorbell_write,
    .endianness = DEVICE_LITTLE_ENDIAN,
    PIB_HCA_ANY_ACCESS,
};

/*
 * Without a node-guid property, derive a locally administered EUI-64 from
 * the process id and an instance counter: unique on one host, stable for
 * the life of the VM.
 */
static uint64_t pib_hca_default_guid(void)
{
    static uint32_t instances;

    return 0x0200000000000000ULL | ((uint64_t) (getpid() & 0xffffff) << 16) |
           (++instances & 0xffff);
}

static void pib_hca_free(PibHcaState *s)
{
    unsigned i;

    if (s->vm_state) {
        qemu_del_vm_change_state_handler(s->vm_state);
        s->vm_state = NULL;
    }
    g_free(s->saved.bytes);
    s->saved.bytes = NULL;

    pib_core_free(s->core);
    s->core = NULL;
    timer_free(s->transport_timer);
    s->transport_timer = NULL;
    if (s->bh) {
        qemu_bh_delete(s->bh);
        s->bh = NULL;
    }
    for (i = 0; i < PIB_MAX_PORTS; i++) {
        PibHcaPort *port = &s->port[i];

        if (port->tx_watch) {
            g_source_remove(port->tx_watch);
            port->tx_watch = 0;
        }
        if (port->txq) {
            g_byte_array_free(port->txq, true);
            port->txq = NULL;
        }
    }
}

/* The personality property's value as the core's enum; false if unknown. */
static bool pib_hca_personality(const char *name, uint32_t *personality)
{
    if (!name || !strcmp(name, "pib")) {
        *personality = PIB_PERSONALITY_PIB;
    } else if (!strcmp(name, "mlx5")) {
        *personality = PIB_PERSONALITY_MLX5;
    } else {
        return false;
    }
    return true;
}

/* The core's personality decides what configuration space says. */
static void pib_hca_set_identity(PCIDevice *pdev, struct pib_core *core)
{
    struct pib_pci_identity id;

    pib_core_pci_identity(core, &id);
    pci_config_set_vendor_id(pdev->config, id.vendor_id);
    pci_config_set_device_id(pdev->config, id.device_id);
    pci_set_word(pdev->config + PCI_SUBSYSTEM_VENDOR_ID,
                 id.subsystem_vendor_id);
    pci_set_word(pdev->config + PCI_SUBSYSTEM_ID, id.subsystem_id);
    pci_config_set_revision(pdev->config, id.revision);
    pci_config_set_class(pdev->config, id.class_code);
}

/*
 * The personality's vendor-specific capability (a ConnectX's VSC gateway):
 * dword accesses to its registers go to the core; the rest of
 * configuration space is QEMU's.
 */
static bool pib_hca_in_vsc(PibHcaState *s, uint32_t addr, int len)
{
    return s->vsc_offset && len == 4 && addr >= s->vsc_offset &&
           addr + len <= s->vsc_offset + pib_core_vsc_size(s->core);
}

static uint32_t pib_hca_config_read(PCIDevice *pdev, uint32_t addr, int len)
{
    PibHcaState *s = PIB_HCA(pdev);

    if (pib_hca_in_vsc(s, addr, len) && addr > s->vsc_offset) {
        return pib_core_vsc_read(s->core, addr - s->vsc_offset);
    }
    return pci_default_read_config(pdev, addr, len);
}

static void pib_hca_config_write(PCIDevice *pdev, uint32_t addr, uint32_t val,
                                 int len)
{
    PibHcaState *s = PIB_HCA(pdev);

    if (pib_hca_in_vsc(s, addr, len)) {
        pib_core_vsc_write(s->core, addr - s->vsc_offset, val);
        return;
    }
    pci_default_write_config(pdev, addr, val, len);
}

static bool pib_hca_add_vsc(PibHcaState *s, Error **errp)
{
    uint32_t size = pib_core_vsc_size(s->core);
    int offset;

    if (!size) {
        return true;
    }
    offset = pci_add_capability(PCI_DEVICE(s), PCI_CAP_ID_VNDR, 0, size, errp);
    if (offset < 0) {
        return false;
    }
    s->vsc_offset = offset;
    PCI_DEVICE(s)->config[offset + PCI_CAP_FLAGS] = size; /* its length */
    return true;
}

static void pib_hca_realize(PCIDevice *pdev, Error **errp)
{
    PibHcaState *s = PIB_HCA(pdev);
    struct pib_core_config config = {
        .node_guid = s->node_guid ? s->node_guid : pib_hca_default_guid(),
        .doorbell_pages = s->doorbell_pages,
        .msix_vectors = s->msix_vectors,
        .num_ports = s->ports,
    };
    const char *invalid;
    unsigned i;

    if (!pib_hca_personality(s->personality, &config.personality)) {
        error_setg(errp, "pib-hca: personality '%s': pib or mlx5",
                   s->personality);
        return;
    }
    invalid = pib_core_config_error(&config);
    if (invalid) {
        error_setg(errp, "pib-hca: %s", invalid);
        return;
    }
    for (i = s->ports; i < PIB_MAX_PORTS; i++) {
        if (qemu_chr_fe_backend_connected(&s->port[i].chr)) {
            error_setg(errp, "pib-hca: port%u given, but the device has %u",
                       i + 1, s->ports);
            return;
        }
    }
    s->transport_timer =
        timer_new_ns(QEMU_CLOCK_VIRTUAL, pib_hca_transport_timer, s);
    s->bh =
        qemu_bh_new_guarded(pib_hca_bh, s, &DEVICE(s)->mem_reentrancy_guard);
    for (i = 0; i < PIB_MAX_PORTS; i++) {
        s->port[i].txq = g_byte_array_new();
    }
    s->core = pib_core_new(&config, &pib_hca_host_ops, s);
    if (!s->core) {
        error_setg(errp, "pib-hca: cannot create the device core");
        goto fail;
    }

    pib_hca_set_identity(pdev, s->core);
    memory_region_init_io(&s->regs, OBJECT(s), &pib_hca_regs_ops, s,
                          "pib-hca-regs",
                          pib_core_bar_size(s->core, PIB_BAR_REGS));
    pci_register_bar(
        pdev, PIB_BAR_REGS,
        PCI_BASE_ADDRESS_SPACE_MEMORY | PCI_BASE_ADDRESS_MEM_TYPE_64, &s->regs);

    /* The ConnectX personality has its doorbells in BAR0's UAR pages. */
    if (pib_core_bar_size(s->core, PIB_BAR_DOORBELL)) {
        memory_region_init_io(&s->doorbells, OBJECT(s), &pib_hca_doorbell_ops,
                              s, "pib-hca-doorbells",
                              pib_core_bar_size(s->core, PIB_BAR_DOORBELL));
        pci_register_bar(pdev, PIB_BAR_DOORBELL,
                         PCI_BASE_ADDRESS_SPACE_MEMORY |
                             PCI_BASE_ADDRESS_MEM_TYPE_64,
                         &s->doorbells);
    }

    if (pcie_endpoint_cap_init(pdev, PIB_HCA_PCIE_CAP_OFFSET) < 0) {
        error_setg(errp, "pib-hca: cannot add the PCI Express capability");
        goto fail;
    }
    if (msix_init_exclusive_bar(pdev, s->msix_vectors, PIB_BAR_MSIX, errp)) {
        goto fail;
    }
    if (!pib_hca_add_vsc(s, errp)) {
        goto fail;
    }
    for (i = 0; i < s->msix_vectors; i++) {
        msix_vector_use(pdev, i);
    }

    /*
     * A VM that has not run yet (-S) trains its links as hardware does at
     * power-on: no driver has given the core any of the guest's memory to
     * write. Only a VM that stops holds the core's work back.
     */
    s->stopped = false;
    for (i = 0; i < PIB_MAX_PORTS; i++) {
        PibHcaPort *port = &s->port[i];

        port->hca = s;
        port->number = i + 1;
        port->bell_fd = -1;
        if (qemu_chr_fe_backend_connected(&port->chr)) {
            qemu_chr_fe_set_handlers(&port->chr, pib_hca_port_can_receive,
                                     pib_hca_port_receive, pib_hca_port_event,
                                     NULL, port, NULL, true);
        }
    }

    s->cables_held = runstate_check(RUN_STATE_INMIGRATE);
    s->vm_state = qemu_add_vm_change_state_handler(pib_hca_vm_state, s);
    trace_pib_hca_realize(config.node_guid, s->doorbell_pages, s->msix_vectors,
                          s->ports);
    return;

fail:
    pib_hca_free(s);
}

static void pib_hca_exit(PCIDevice *pdev)
{
    PibHcaState *s = PIB_HCA(pdev);
    unsigned i;

    for (i = 0; i < PIB_MAX_PORTS; i++) {
        qemu_chr_fe_deinit(&s->port[i].chr, false);
    }
    msix_unuse_all_vectors(pdev);
    msix_uninit_exclusive_bar(pdev);
    pib_hca_free(s);
}

static void pib_hca_reset(DeviceState *dev)
{
    PibHcaState *s = PIB_HCA(dev);

    trace_pib_hca_reset();
    pib_core_reset(s->core);
}

static const Property pib_hca_properties[] = {
    DEFINE_PROP_STRING("personality", PibHcaState, personality),
    DEFINE_PROP_UINT64("node-guid", PibHcaState, node_guid, 0),
    DEFINE_PROP_UINT32("doorbell-pages", PibHcaState, doorbell_pages, 1024),
    DEFINE_PROP_UINT32("msix-vectors", PibHcaState, msix_vectors, 16),
    DEFINE_PROP_UINT32("ports", PibHcaState, ports, 1),
    DEFINE_PROP_BOOL("rings", PibHcaState, rings, true),
    DEFINE_PROP_CHR("port1", PibHcaState, port[0].chr),
    DEFINE_PROP_CHR("port2", PibHcaState, port[1].chr),
};

/*
 * Test facility (docs/prm.md §10): `qom-set <device> x-inject-fatal REASON`
 * puts the device in the FATAL state, as an internal error would.
 */
static void pib_hca_inject_fatal(Object *obj, const char *reason, Error **errp)
{
    PibHcaState *s = PIB_HCA(obj);

    if (!s->core) {
        error_setg(errp, "pib-hca: the device is not realized");
        return;
    }
    pib_core_inject_fatal(s->core, reason);
}

struct pib_core *pib_hca_find_core(const char *id, Error **errp)
{
    bool ambiguous = false;
    Object *obj =
        object_resolve_path_type(id ? id : "", TYPE_PIB_HCA, &ambiguous);

    if (!obj) {
        if (ambiguous) {
            error_setg(errp, "there are several pib-hca devices: name one");
        } else if (id) {
            error_setg(errp, "no pib-hca device '%s'", id);
        } else {
            error_setg(errp, "there is no pib-hca device");
        }
        return NULL;
    }
    if (!PIB_HCA(obj)->core) {
        error_setg(errp, "pib-hca: the device is not realized");
        return NULL;
    }
    return PIB_HCA(obj)->core;
}

/*
 * Migration and snapshots (docs/migration.md). The stream carries the PCI
 * function (configuration space, MSI-X) and the core's own state, which
 * the core saves when the VM has stopped and checks as untrusted input
 * when it loads. When the VM stops to move, the core tells each switch
 * port (MOVING) and goes quiet; if the VM runs here again (the migration
 * failed, or a snapshot was taken), its links resume.
 */

/* The most a core's state may take in the stream (a 64 KiB QP table). */
#define PIB_HCA_STATE_MAX (256 * MiB)

/* The VM stopped: the core does nothing until it runs again. */
static void pib_hca_stop(PibHcaState *s)
{
    unsigned i;

    s->stopped = true;
    for (i = 0; i < s->ports; i++) {
        if (s->port[i].bell_fd >= 0) {
            qemu_set_fd_handler(s->port[i].bell_fd, NULL, NULL, NULL);
        }
    }
}

/*
 * The VM runs: the core learns what became of its cables meanwhile, reads
 * what waited in them and goes on with the work it had pending.
 */
static void pib_hca_resume(PibHcaState *s)
{
    bool pending = s->run_pending;
    unsigned i;

    for (i = 0; i < s->ports; i++) {
        PibHcaPort *port = &s->port[i];

        if (!s->cables_held && port->open != port->core_open) {
            pib_hca_tell_cable(port);
        }
        if (port->bell_fd >= 0) {
            qemu_set_fd_handler(port->bell_fd, pib_hca_port_bell, NULL, port);
        }
        if (port->open) {
            qemu_chr_fe_accept_input(&port->chr);
        }
        pending |= port->writable_pending;
    }
    if (pending) {
        qemu_bh_schedule(s->bh);
    }
}

static void pib_hca_vm_state(void *opaque, bool running, RunState state)
{
    PibHcaState *s = opaque;

    if (!running) {
        pib_hca_stop(s);
        return;
    }
    s->stopped = false;
    pib_hca_release_cables(s);
    if (s->moving) {
        s->moving = false;
        pib_core_move_failed(s->core);
    }
    pib_hca_resume(s);
}

static int pib_hca_pre_save(void *opaque)
{
    PibHcaState *s = opaque;
    void *state = NULL;
    size_t len = 0;
    char *why = NULL;

    if (!s->moving) {
        s->moving = true;
        pib_core_moving(s->core);
    }
    if (pib_core_save(s->core, &state, &len, &why) != 0 ||
        len > PIB_HCA_STATE_MAX) {
        error_report("pib-hca: the device cannot be saved: %s",
                     why ? why : "its state is too large");
        free(state);
        free(why);
        return -EINVAL;
    }
    g_free(s->saved.bytes);
    s->saved.bytes = g_memdup2(state, len);
    s->saved.len = len;
    free(state);
    return 0;
}

static int pib_hca_post_save(void *opaque)
{
    PibHcaState *s = opaque;

    g_free(s->saved.bytes);
    s->saved.bytes = NULL;
    s->saved.len = 0;
    return 0;
}

static int pib_hca_post_load(void *opaque, int version_id)
{
    PibHcaState *s = opaque;
    char *why = NULL;
    int loaded = pib_core_load(s->core, s->saved.bytes, s->saved.len, &why);

    pib_hca_post_save(s);
    if (loaded != 0) {
        error_report("pib-hca: the device state is refused: %s",
                     why ? why : "no reason given");
        free(why);
        return -EINVAL;
    }
    free(why);
    /* A snapshot loaded into a running QEMU: its cables are new ones. */
    if (!s->cables_held) {
        unsigned i;

        for (i = 0; i < s->ports; i++) {
            if (s->port[i].open) {
                pib_hca_tell_cable(&s->port[i]);
            }
        }
    }
    pib_hca_release_cables(s);
    return 0;
}

/* The core's state: its length, refused above PIB_HCA_STATE_MAX, then it. */
static int pib_hca_get_state(QEMUFile *f, void *pv, size_t size,
                             const VMStateField *field)
{
    PibHcaSaved *saved = pv;
    uint32_t len = qemu_get_be32(f);

    if (len > PIB_HCA_STATE_MAX) {
        error_report("pib-hca: a device state of %u bytes (at most %u)", len,
                     (unsigned) PIB_HCA_STATE_MAX);
        return -EINVAL;
    }
    g_free(saved->bytes);
    saved->bytes = g_malloc(len ? len : 1);
    saved->len = len;
    if (qemu_get_buffer(f, saved->bytes, len) != len) {
        return -EIO;
    }
    return 0;
}

static int pib_hca_put_state(QEMUFile *f, void *pv, size_t size,
                             const VMStateField *field, JSONWriter *vmdesc)
{
    PibHcaSaved *saved = pv;

    qemu_put_be32(f, saved->len);
    qemu_put_buffer(f, saved->bytes, saved->len);
    return 0;
}

static const VMStateInfo pib_hca_state_info = {
    .name = "pib-hca-core-state",
    .get = pib_hca_get_state,
    .put = pib_hca_put_state,
};

static const VMStateDescription pib_hca_vmstate = {
    .name = TYPE_PIB_HCA,
    .version_id = 1,
    .minimum_version_id = 1,
    .pre_save = pib_hca_pre_save,
    .post_save = pib_hca_post_save,
    .post_load = pib_hca_post_load,
    .fields =
        (const VMStateField[]){
            VMSTATE_PCI_DEVICE(parent_obj, PibHcaState),
            VMSTATE_MSIX(parent_obj, PibHcaState),
            {
                .name = "core",
                .info = &pib_hca_state_info,
                .size = sizeof(PibHcaSaved),
                .flags = VMS_SINGLE,
                .offset = offsetof(PibHcaState, saved),
            },
            VMSTATE_END_OF_LIST(),
        },
};

static void pib_hca_class_init(ObjectClass *klass, PibClassData *data)
{
    DeviceClass *dc = DEVICE_CLASS(klass);
    PCIDeviceClass *pc = PCI_DEVICE_CLASS(klass);

    pc->realize = pib_hca_realize;
    pc->exit = pib_hca_exit;
    pc->config_read = pib_hca_config_read;
    pc->config_write = pib_hca_config_write;
    pc->vendor_id = PIB_PCI_VENDOR_ID;
    pc->device_id = PIB_PCI_DEVICE_ID;
    pc->subsystem_vendor_id = PIB_PCI_SUBSYSTEM_VENDOR_ID;
    pc->subsystem_id = PIB_PCI_SUBSYSTEM_ID;
    pc->revision = PIB_PCI_REVISION;
    pc->class_id = PIB_PCI_CLASS;

    dc->desc = "pib-hca emulated InfiniBand host channel adapter";
    dc->vmsd = &pib_hca_vmstate;
    set_bit(DEVICE_CATEGORY_NETWORK, dc->categories);
    device_class_set_props(dc, pib_hca_properties);
    object_class_property_set_description(
        klass, "personality",
        "the interface its driver sees: pib (pib_hw.h, the default) or mlx5 "
        "(a ConnectX-5, docs/mlx5.md)");
    object_class_property_set_description(
        klass, "node-guid",
        "Node GUID (EUI-64); 0 derives one from the process id");
    object_class_property_set_description(
        klass, "doorbell-pages",
        "4 KiB doorbell (UAR) pages in BAR2, one per user context (1-16384)");
    object_class_property_set_description(klass, "msix-vectors",
                                          "MSI-X vectors (1-256)");
    object_class_property_set_description(klass, "ports",
                                          "InfiniBand ports (1-2)");
    object_class_property_set_description(
        klass, "port1", "chardev cabled to a switch port (docs/wire.md)");
    object_class_property_set_description(klass, "port2", "chardev for port 2");
    object_class_property_add_str(klass, "x-inject-fatal", NULL,
                                  pib_hca_inject_fatal);
    object_class_property_set_description(
        klass, "x-inject-fatal",
        "test facility: set to a reason to make the device FATAL");
    device_class_set_legacy_reset(dc, pib_hca_reset);
}

static const TypeInfo pib_hca_info = {
    .name = TYPE_PIB_HCA,
    .parent = TYPE_PCI_DEVICE,
    .instance_size = sizeof(PibHcaState),
    .class_init = pib_hca_class_init,
    .interfaces = (InterfaceInfo[]){{INTERFACE_PCIE_DEVICE}, {}},
};

static void pib_hca_register_types(void)
{
    type_register_static(&pib_hca_info);
}

type_init(pib_hca_register_types)
