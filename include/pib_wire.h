/* SPDX-License-Identifier: (GPL-2.0-or-later OR BSD-2-Clause) */
/*
 * pib-hca wire format: how a device port and a switch port (or two switch
 * ports) exchange InfiniBand packets over a byte stream (a QEMU chardev
 * socket, a UNIX or TCP socket). docs/wire.md explains it.
 *
 * Every frame is a 16-byte header followed by `length` bytes of payload.
 * Header fields are little-endian; the payload of a PACKET frame is a
 * real IBA packet, big-endian as on an InfiniBand link, from the LRH to
 * the VCRC.
 */
#ifndef PIB_WIRE_H
#define PIB_WIRE_H

#ifdef __KERNEL__
#include <linux/types.h>
#else
#include <stdint.h>
#endif

#define PIB_WIRE_MAGIC 0x57424950u /* bytes 'P' 'I' 'B' 'W' in memory order */
#define PIB_WIRE_VERSION 1

enum pib_wire_type {
    PIB_WIRE_HELLO = 1,  /* first frame each side sends: pib_wire_hello */
    PIB_WIRE_PACKET = 2, /* an IBA packet, LRH .. VCRC */
    PIB_WIRE_RINGS = 3,  /* a shared-memory ring offer, or its answer */
    PIB_WIRE_MOVING = 4, /* a device's VM moves: keep its link (no payload) */
    /* the switch discarded packets to this port, which took nothing for its
     * head-of-queue lifetime (no payload; only to an end whose HELLO set
     * PIB_WIRE_HELLO_TAKES_DISCARDS) */
    PIB_WIRE_DISCARDED = 5,
};

struct pib_wire_header {
    uint32_t magic;
    uint8_t version;
    uint8_t type;
    uint16_t reserved0;
    uint32_t length; /* payload bytes */
    uint32_t reserved1;
};

/* A HELLO says who is at the other end of the link. */
#define PIB_WIRE_NODE_CA 1
#define PIB_WIRE_NODE_SWITCH 2

/* pib_wire_hello.flags */
#define PIB_WIRE_HELLO_TAKES_RINGS 0x0001u    /* the sender accepts a PIB_WIRE_RINGS offer */
#define PIB_WIRE_HELLO_RESUMES 0x0002u        /* the sender continues a link it said MOVING on */
#define PIB_WIRE_HELLO_TAKES_DISCARDS 0x0004u /* the sender takes PIB_WIRE_DISCARDED */

struct pib_wire_hello {
    uint64_t node_guid;
    uint64_t port_guid;
    uint8_t node_type; /* PIB_WIRE_NODE_* */
    uint8_t port;      /* the sender's port number */
    uint16_t flags;    /* PIB_WIRE_HELLO_*; 0 from a sender that predates them */
    uint32_t reserved1;
};

/*
 * Shared-memory rings (docs/wire.md, "Ring cables"). An end that heard a
 * HELLO with PIB_WIRE_HELLO_TAKES_RINGS may send a RINGS frame whose
 * pib_wire_rings has flags 0 on a UNIX socket, with two descriptors in
 * SCM_RIGHTS: a sealed memfd laid out as pib_wire_ring_layout, and the
 * accepter's end of the doorbell line, a UNIX stream socket pair whose
 * other end the offerer keeps (each end rings the other by sending a
 * byte; neither waits on it: MSG_DONTWAIT). The answer is a RINGS frame with
 * PIB_WIRE_RINGS_ACCEPTED (packets now travel in the rings, both ways) or
 * without it (they stay on the stream). HELLOs stay on the stream.
 */
#define PIB_WIRE_RINGS_ACCEPTED 0x1u

struct pib_wire_rings {
    uint32_t ring_size; /* data bytes of each ring: a power of two */
    uint32_t flags;     /* PIB_WIRE_RINGS_*, in the answer */
};

#define PIB_WIRE_RING_MIN_SIZE (64u * 1024)
#define PIB_WIRE_RING_MAX_SIZE (16u * 1024 * 1024)
#define PIB_WIRE_RING_MAGIC 0x474e4952u /* 'R' 'I' 'N' 'G' */
#define PIB_WIRE_RING_DATA 4096u        /* ring 0's data; ring 1's follows it */

/*
 * One direction. Indices count bytes and wrap at 2^32; a frame (the same
 * header and payload as on the stream) may wrap around the data's end.
 * The producer stores `produced` after the frame's bytes; the consumer
 * stores `consumed` after copying frames out. Doorbells follow virtio's
 * event index: a producer rings the consumer (its doorbell line) only when
 * `produced` passes `wake_consumer_at`, which a consumer sets to where it
 * stopped before it sleeps; likewise for room and `wake_producer_at`.
 * Each index has a cache line of its own.
 */
struct pib_wire_ring_ctrl {
    uint32_t produced;
    uint8_t pad0[60];
    uint32_t consumed;
    uint8_t pad1[60];
    uint32_t wake_consumer_at;
    uint8_t pad2[60];
    uint32_t wake_producer_at;
    uint8_t pad3[60];
};

struct pib_wire_ring_layout {
    uint32_t magic;     /* PIB_WIRE_RING_MAGIC */
    uint32_t ring_size; /* as in the offer */
    uint8_t pad[56];
    struct pib_wire_ring_ctrl ring[2]; /* [0] offerer to accepter, [1] back */
};

/*
 * Largest IBA packet: LRH 8 + GRH 40 + BTH 12 + extension headers (at most
 * 28: RETH 16 + ImmDt 4 + DETH 8) + 4096 payload + pad 3 + ICRC 4 + VCRC 2.
 */
#define PIB_WIRE_MAX_PACKET 4200u

#endif /* PIB_WIRE_H */
