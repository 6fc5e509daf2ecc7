// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * The bytes of each round: a pseudo-random stream both ends derive from
 * the seed, the test, the QP and the round, so the receiver knows what it
 * must find without being told.
 */
#include <stdio.h>
#include <string.h>

#include "pib_stream.h"
#include "traffic.h"

#define POISON 0xa5

static uint64_t round_key(const struct params *p, enum test_kind t, unsigned int qp,
                          uint32_t round) {
    uint64_t state = p->seed ^ ((uint64_t)t << 56) ^ ((uint64_t)qp << 40) ^ round;

    return pib_stream_next(&state);
}

void fill_round(uint8_t *dst, uint64_t len, const struct params *p, enum test_kind t,
                unsigned int qp, uint32_t round) {
    pib_stream_fill(dst, len, round_key(p, t, qp, round));
}

/* Operand `which` of an atomic round: 0 the start value, 1 the addend or
 * the compare value's offset, 2 the swap value. */
uint64_t round_value(const struct params *p, enum test_kind t, unsigned int qp, uint32_t round,
                     unsigned int which) {
    uint64_t state = round_key(p, t, qp, round) + which;

    return pib_stream_next(&state);
}

void poison(uint8_t *dst, uint64_t len) {
    memset(dst, POISON, len);
}

int compare(const char *what, const struct endpoint *e, uint32_t round, const uint8_t *want,
            const uint8_t *got, uint64_t len) {
    uint64_t i;

    if (!memcmp(want, got, len))
        return 0;
    for (i = 0; i < len && want[i] == got[i]; i++)
        ;
    fprintf(stderr,
            "pib-traffic: %s QP %u round %u: %s differs at byte %llu of %llu: "
            "0x%02x, not 0x%02x\n",
            tests[e->test].name, e->index, round, what, (unsigned long long)i,
            (unsigned long long)len, got[i], want[i]);
    return 1;
}

int check_poison(const char *what, const struct endpoint *e, uint32_t round, const uint8_t *got,
                 uint64_t len) {
    uint64_t i;

    for (i = 0; i < len; i++) {
        if (got[i] != POISON) {
            fprintf(stderr, "pib-traffic: %s QP %u round %u: byte %llu %s was written (0x%02x)\n",
                    tests[e->test].name, e->index, round, (unsigned long long)i, what, got[i]);
            return 1;
        }
    }
    return 0;
}
