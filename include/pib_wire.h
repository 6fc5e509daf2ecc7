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

struct pib_wire_hello {
    uint64_t node_guid;
    uint64_t port_guid;
    uint8_t node_type; /* PIB_WIRE_NODE_* */
    uint8_t port;      /* the sender's port number */
    uint16_t reserved0;
    uint32_t reserved1;
};

/*
 * Largest IBA packet: LRH 8 + GRH 40 + BTH 12 + extension headers (at most
 * 28: RETH 16 + ImmDt 4 + DETH 8) + 4096 payload + pad 3 + ICRC 4 + VCRC 2.
 */
#define PIB_WIRE_MAX_PACKET 4200u

#endif /* PIB_WIRE_H */
