/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * C interface of the pib-hca device core.
 *
 * The core is a C++20 library that models the whole adapter but knows
 * nothing of QEMU. A host (the QEMU glue, or a unit test's fake host)
 * creates one core per device, forwards every BAR access to it, and
 * receives everything the core wants to say through struct pib_host_ops.
 *
 * No function here lets a C++ exception escape. Functions are not
 * thread-safe: the host serialises calls for one core (QEMU holds the BQL).
 */
#ifndef PIB_CORE_H
#define PIB_CORE_H

#include <stddef.h>
#include <stdint.h>

#include "pib_events.h"

#ifdef __cplusplus
extern "C" {
#endif

struct pib_core;

/* Callbacks from the core into its host. opaque is passed back as given. */
struct pib_host_ops {
    /*
     * The guest did something the hardware interface forbids. error is an
     * enum pib_guest_error (pib_guest_error_token() names it, e.g.
     * "regs-bad-offset"), detail is free text.
     */
    void (*guest_error)(void *opaque, unsigned error, const char *detail);
    /*
     * Optional: nonzero when guest error `error` is reported anywhere now.
     * The core then formats its detail only when someone reads it. NULL:
     * always.
     */
    int (*guest_error_enabled)(void *opaque, unsigned error);
    /*
     * Trace event `event` (enum pib_event) happened. args holds its
     * arguments in the order qemu-hw/core/events.list gives them: integers
     * as they are, a `const char *` as (uintptr_t), valid for the call.
     */
    void (*event)(void *opaque, unsigned event, const uint64_t *args);
    /*
     * Optional: nonzero when trace event `event` is enabled. The core then
     * computes an event's arguments only when someone reads them. NULL:
     * always.
     */
    int (*event_enabled)(void *opaque, unsigned event);
    /*
     * Bus-master DMA to and from guest memory. Return 0 on success, nonzero
     * when any part of [addr, addr + len) is not accessible. Writes must
     * reach guest memory in the order they are made (a CPU that sees one
     * sees every earlier one): the core writes a CQE's or an EQE's owner
     * byte after the rest of it.
     */
    int (*dma_read)(void *opaque, uint64_t addr, void *buf, uint64_t len);
    int (*dma_write)(void *opaque, uint64_t addr, const void *buf, uint64_t len);
    /*
     * Optional: an ATOMIC WRITE's one store of 8 bytes at an 8-aligned
     * addr, which a CPU sees whole or not at all; `value` is the 8 bytes
     * as they are to land in memory, read as a little-endian number.
     * Ordered as dma_write: a CPU that sees it sees every earlier write.
     * Returns as dma_write. NULL: dma_write, whose bytes a CPU could see
     * land in pieces.
     */
    int (*dma_store64)(void *opaque, uint64_t addr, uint64_t value);
    /*
     * Optional (both NULL, or both set). Maps [addr, addr + len) for the
     * core to read in place, or returns NULL when the range is not guest
     * RAM the device reaches whole: the core then uses dma_read, which
     * reports errors. The core unmaps each mapping before it returns to
     * the host. Reading a payload in place lets the device checksum it in
     * the pass that copies it into the packet.
     */
    const void *(*dma_map_read)(void *opaque, uint64_t addr, uint64_t len);
    void (*dma_unmap_read)(void *opaque, const void *ptr, uint64_t len);
    /* Signals MSI-X vector `vector` (< the configured count). */
    void (*msix_notify)(void *opaque, unsigned vector);
    /*
     * Writes bytes to the stream of port `port` (1-based), whose peer is a
     * switch port (docs/wire.md). The host never blocks: it queues what
     * the stream cannot take yet. It returns PIB_PORT_SEND_FULL when its
     * queue for the port is full: the core then starts no new work on the
     * port until pib_core_port_writable(). A few packets the core must
     * still answer with (ACKs, replies to management) may follow; a host
     * may drop those beyond a hard limit of its own, as a congested link
     * would. port_disconnect drops the connection, after which the host
     * reconnects when it can.
     */
    int (*port_send)(void *opaque, unsigned port, const void *buf, size_t len);
    void (*port_disconnect)(void *opaque, unsigned port);
    /*
     * Optional (both NULL, or both set): ring cables (docs/wire.md). When
     * the switch takes rings, the core offers them: port_send_fds writes
     * `buf` to the port's stream after everything queued before it, with
     * `fds` attached in SCM_RIGHTS, and returns 0, or -1 when the stream
     * cannot carry descriptors (the port then stays on the stream); a host
     * may refuse when bytes still wait in its queue (the core offers as the
     * switch's first HELLO arrives, before the link's events send
     * anything). Once
     * the switch accepts, port_watch asks the host to call
     * pib_core_port_bell() whenever `fd` (the core's end of the cable's
     * doorbell line, a socket) is readable; fd -1 stops that. The core
     * closes the descriptor after port_watch(-1). port_send_fds has passed
     * the descriptors when it returns 0: the core closes its copies.
     */
    int (*port_send_fds)(void *opaque, unsigned port, const void *buf, size_t len, const int *fds,
                         size_t nfds);
    void (*port_watch)(void *opaque, unsigned port, int fd);
    /*
     * Optional: what port `port`'s stream still carries (docs/wire.md,
     * "Stalls"). *untaken: bytes the core gave port_send that the switch
     * has not read yet (the host's queue, and the socket's send queue);
     * *unread: bytes the switch wrote that the host has not given the core
     * yet (the socket's receive queue). Both 0 when unknown. The core asks
     * only when a transport timer runs out, never per packet.
     */
    void (*port_backlog)(void *opaque, unsigned port, uint64_t *untaken, uint64_t *unread);
    /*
     * The transport's clock (retransmission and RNR timers): monotonic
     * nanoseconds that stand still while the VM is stopped. timer_arm asks
     * for one call of pib_core_timer_expired() once clock_ns reaches
     * deadline_ns, replacing any earlier request; UINT64_MAX cancels it.
     */
    uint64_t (*clock_ns)(void *opaque);
    void (*timer_arm)(void *opaque, uint64_t deadline_ns);
    /*
     * Asks for one call of pib_core_run() soon, from the host's main loop
     * (a bottom half), never from inside a core call. The core asks when
     * it has more work than one event may do: no BAR access, received
     * chunk or timer makes it send more than a bounded number of packets.
     * Requests made before that call are one request.
     */
    void (*schedule)(void *opaque);
};

/* port_send's answers. */
#define PIB_PORT_SEND_OK 0
#define PIB_PORT_SEND_FULL 1

/* Static configuration of one device instance. */
/* The hardware interface the device presents to its driver. */
enum pib_personality {
    PIB_PERSONALITY_PIB = 0,  /* pib-hca's own (docs/prm.md) */
    PIB_PERSONALITY_MLX5 = 1, /* a ConnectX function (docs/mlx5.md) */
};

struct pib_core_config {
    uint64_t node_guid;
    uint32_t doorbell_pages; /* PIB_MIN_DOORBELL_PAGES..PIB_MAX_DOORBELL_PAGES */
    uint32_t msix_vectors;   /* PIB_MIN_MSIX_VECTORS..PIB_MAX_MSIX_VECTORS */
    uint32_t num_ports;      /* PIB_MIN_PORTS..PIB_MAX_PORTS */
    uint32_t personality;    /* enum pib_personality */
};

/*
 * Checks a configuration. Returns NULL when it is valid, else a static
 * string that says what is wrong.
 */
const char *pib_core_config_error(const struct pib_core_config *config);

/*
 * Creates a core. Returns NULL if the configuration is invalid (see
 * pib_core_config_error) or memory runs out.
 */
struct pib_core *pib_core_new(const struct pib_core_config *config, const struct pib_host_ops *ops,
                              void *opaque);
void pib_core_free(struct pib_core *core);

/* Power-on reset, as from PCI function-level or bus reset. */
void pib_core_reset(struct pib_core *core);

/*
 * BAR accesses. bar is PIB_BAR_REGS or PIB_BAR_DOORBELL, offset is relative
 * to the BAR, size is the access width in bytes (1, 2, 4 or 8). Invalid
 * accesses are reported through ops->guest_error; reads then return 0.
 */
uint64_t pib_core_bar_read(struct pib_core *core, int bar, uint64_t offset, unsigned size);
void pib_core_bar_write(struct pib_core *core, int bar, uint64_t offset, uint64_t value,
                        unsigned size);

/*
 * The stream of port `port` (1-based) was connected or disconnected, or
 * delivered bytes. Ports without a stream stay down.
 */
void pib_core_port_connected(struct pib_core *core, unsigned port, int connected);
void pib_core_port_receive(struct pib_core *core, unsigned port, const void *buf, size_t len);

/* The deadline last given to ops->timer_arm has passed. */
void pib_core_timer_expired(struct pib_core *core);

/* Continues the work the core asked for with ops->schedule. */
void pib_core_run(struct pib_core *core);

/*
 * The host's queue for `port`, which port_send said was full, has room
 * again.
 */
void pib_core_port_writable(struct pib_core *core, unsigned port);

/* The descriptor given to ops->port_watch for `port` is readable. */
void pib_core_port_bell(struct pib_core *core, unsigned port);

/*
 * Test facility (docs/prm.md §10): the device goes FATAL as if an internal
 * error had happened, `reason` being what its trace event says.
 */
void pib_core_inject_fatal(struct pib_core *core, const char *reason);

/*
 * Host-side management, for QEMU's `info pib`, `pib_capture` and
 * `pib_inject` and the x-pib-query, x-pib-capture and x-pib-inject QMP
 * commands (docs/user-guide.md,
 * "Inspecting a device" and "Packet capture"). Each returns 0 with its
 * answer in *answer, or -1 with the reason there; the host frees *answer
 * with free() (it may be NULL if memory ran out).
 */

/*
 * The device's state, as JSON (json != 0) or as text: `what` is NULL or ""
 * for the whole device, or "port N", "eq N", "cq N", "qp N", "srq N",
 * "mr KEY" or "mw KEY".
 */
int pib_core_inspect(struct pib_core *core, const char *what, int json, char **answer);

/*
 * Records every packet port `port` sends and receives, from the LRH to
 * the VCRC, to a pcap file at `path` (LINKTYPE_ERF records of type
 * InfiniBand, which Wireshark reads), `limit` packets at most (0: no
 * limit). `path` NULL stops the capture and closes the file.
 */
int pib_core_capture(struct pib_core *core, unsigned port, const char *path, uint64_t limit,
                     char **answer);

/*
 * Test facilities (docs/prm.md §10): arms an injection, or does it at once.
 * `injection` is one line: "command OPCODE STATUS", "wqe QPN STATUS
 * [VENDOR_ERR]", "drop QPN [COUNT]", "corrupt QPN [COUNT]", "event EVENT
 * [NUMBER]", "stop eq|cq N", "resume eq|cq N", "fatal [REASON]" or "clear".
 */
int pib_core_inject(struct pib_core *core, const char *injection, char **answer);

/*
 * Migration and snapshots (docs/migration.md), while the VM is stopped.
 * pib_core_save puts the device's state in a buffer of *len bytes at
 * *state, which the host frees with free(), and returns 0; or returns -1
 * with the reason in *error (freed likewise), among them state this
 * version cannot save yet. pib_core_load gives a core created with the
 * same configuration a saved state. The bytes are untrusted input: any
 * fault in them refuses them (-1, the reason in *error) and leaves the
 * core as after pib_core_reset. A device of the ConnectX personality, or
 * with armed injections, refuses to save.
 */
int pib_core_save(struct pib_core *core, void **state, size_t *len, char **error);
int pib_core_load(struct pib_core *core, const void *state, size_t len, char **error);
/*
 * The VM stops to move (docs/wire.md, "A device that moves"): every port
 * whose link is up sends MOVING on its stream, and then sends and takes
 * nothing, its port state kept. A loaded device whose saved links were up
 * resumes them on its next cable (its HELLO says PIB_WIRE_HELLO_RESUMES),
 * so the host connects its cables only after pib_core_load. If the move
 * fails, pib_core_move_failed resumes the links here. pib_core_moving does
 * no other work and writes no guest memory: the host calls it once the VM
 * has stopped, whose memory the migration is sending, and gives the core
 * no other work until the VM runs.
 */
void pib_core_moving(struct pib_core *core);
void pib_core_move_failed(struct pib_core *core);

/* How the function presents itself in PCI configuration space. */
struct pib_pci_identity {
    uint16_t vendor_id;
    uint16_t device_id;
    uint16_t subsystem_vendor_id;
    uint16_t subsystem_id;
    uint8_t revision;
    uint16_t class_code; /* base class 15:8, subclass 7:0 */
};

/* The identity of the personality the core was created with. */
void pib_core_pci_identity(const struct pib_core *core, struct pib_pci_identity *identity);

/* Size in bytes the host must give each BAR; 0 for a BAR not implemented. */
uint64_t pib_core_bar_size(const struct pib_core *core, int bar);

/*
 * The personality's vendor-specific capability in PCI configuration space
 * (a ConnectX's VSC gateway, docs/mlx5.md §2.1): its size in bytes, 0 when
 * it has none. Reads and writes are of the dword at `offset` from its
 * start, past its 4-byte header; any other offset reads 0 and takes no
 * write.
 */
uint32_t pib_core_vsc_size(const struct pib_core *core);
uint32_t pib_core_vsc_read(struct pib_core *core, uint32_t offset);
void pib_core_vsc_write(struct pib_core *core, uint32_t offset, uint32_t value);

#ifdef __cplusplus
}
#endif

#endif /* PIB_CORE_H */
