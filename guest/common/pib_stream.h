/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * The pseudo-random byte streams the guests' checking programs send
 * (pib-traffic, pib-mpi-check): both ends derive a message's bytes from
 * one key, so the receiver knows what it must find without being told.
 */
#ifndef PIB_STREAM_H
#define PIB_STREAM_H

#include <stdint.h>
#include <string.h>

/* splitmix64: one 64-bit step of the stream of `state`. */
static inline uint64_t pib_stream_next(uint64_t *state) {
    uint64_t z = (*state += 0x9e3779b97f4a7c15ull);

    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

/* Fills `len` bytes with the stream that starts from `key`. */
static inline void pib_stream_fill(uint8_t *dst, uint64_t len, uint64_t key) {
    uint64_t state = key;

    while (len >= 8) {
        uint64_t v = pib_stream_next(&state);

        memcpy(dst, &v, 8);
        dst += 8;
        len -= 8;
    }
    if (len) {
        uint64_t v = pib_stream_next(&state);

        memcpy(dst, &v, len);
    }
}

#endif
