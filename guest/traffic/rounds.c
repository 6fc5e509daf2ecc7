// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * A QP's rounds. Per round, over the QP's TCP connection:
 *   client: PREPARE r      server: posts a receive, fills what will be
 *                          read or poisons what will be written; READY
 *   client: the operation, its completion, its own checks; DONE r
 *   server: waits for what should arrive and checks every byte and the
 *           bytes around; OK, LOST or BAD
 * Both hash the bytes of each OK round, so the two ends' hashes agree
 * exactly when the same bytes left and arrived.
 */
#include <endian.h>
#include <stdio.h>
#include <string.h>

#include "traffic.h"

enum msg_kind { M_PREPARE = 1, M_READY, M_DONE, M_OK, M_LOST, M_BAD, M_FINISH };

struct msg {
    uint32_t round, kind;
    uint64_t value; /* DONE of an atomic: the value the client expects */
};

/* A message of a lossy UC or UD round that arrived after its round was
 * given up may take this long to show up. */
#define LOSSY_WAIT_S 0.5
/* Without --lossy, a UC or UD message that has not come this long after
 * the client's DONE (its send had completed: the packets had left) is
 * lost: nothing resends it, so the whole operation timeout (60 s by
 * default) would only be spent waiting. A switch that discards packets to
 * a starved guest loses some; the tests excuse that by the switch's log. */
#define UNRELIABLE_WAIT_S 10.0

const struct test_def tests[T_COUNT] = {
    [T_SEND] = {"send", IBV_QPT_RC, IBV_WR_SEND, true},
    [T_SEND_IMM] = {"send-imm", IBV_QPT_RC, IBV_WR_SEND_WITH_IMM, true},
    [T_SEND_INLINE] = {"send-inline", IBV_QPT_RC, IBV_WR_SEND, true},
    [T_WRITE] = {"write", IBV_QPT_RC, IBV_WR_RDMA_WRITE, false},
    [T_WRITE_IMM] = {"write-imm", IBV_QPT_RC, IBV_WR_RDMA_WRITE_WITH_IMM, true},
    [T_READ] = {"read", IBV_QPT_RC, IBV_WR_RDMA_READ, false},
    [T_CAS] = {"cas", IBV_QPT_RC, IBV_WR_ATOMIC_CMP_AND_SWP, false},
    [T_FADD] = {"fadd", IBV_QPT_RC, IBV_WR_ATOMIC_FETCH_AND_ADD, false},
    [T_UC_SEND] = {"uc-send", IBV_QPT_UC, IBV_WR_SEND_WITH_IMM, true},
    [T_UC_WRITE] = {"uc-write", IBV_QPT_UC, IBV_WR_RDMA_WRITE_WITH_IMM, true},
    [T_UD_SEND] = {"ud-send", IBV_QPT_UD, IBV_WR_SEND_WITH_IMM, true},
};

uint32_t round_count(const struct params *p) {
    return p->nsizes * p->iters;
}

/* The sizes take turns, so that a client stopped early (SIGUSR1) has
 * moved every size once it has done as many rounds as there are sizes. */
uint64_t round_size(const struct params *p, uint32_t round) {
    return p->sizes[round % p->nsizes];
}

/* Whether the client goes on to round `round`: until the last, or once
 * asked to stop, until each size has been moved once. */
static bool client_goes_on(const struct params *p, uint32_t round) {
    return round < round_count(p) && (!atomic_load(&traffic_stop_asked) || round < p->nsizes);
}

static bool atomic(enum test_kind t) {
    return t == T_CAS || t == T_FADD;
}

static bool unreliable(enum test_kind t) {
    return tests[t].qpt != IBV_QPT_RC;
}

bool test_takes_size(const struct endpoint *e, uint64_t size) {
    if (e->test == T_UD_SEND)
        return size <= (128u << e->s->port_attr.active_mtu);
    if (e->test == T_SEND_INLINE)
        return size <= e->max_inline;
    return true;
}

/* Where round `round`'s bytes go in a QP's buffer: never aligned, and not
 * the same place twice in a row (atomics: 8-byte aligned). */
static uint64_t round_offset(const struct endpoint *e, uint32_t round) {
    if (atomic(e->test))
        return GUARD + (round * 8 + e->index * 16) % MAX_OFFSET;
    return GUARD + (round * 13 + e->index * 5 + 1) % MAX_OFFSET;
}

static uint64_t payload_size(const struct endpoint *e, uint32_t round) {
    return atomic(e->test) ? 8 : round_size(&e->s->p, round);
}

static int say(struct endpoint *e, uint32_t round, enum msg_kind kind, uint64_t value) {
    struct msg m = {.round = round, .kind = kind, .value = value};

    return send_all(e->sync, &m, sizeof(m));
}

static int hear(struct endpoint *e, struct msg *m) {
    return recv_all(e->sync, m, sizeof(*m));
}

static void count_ok(struct endpoint *e, const void *bytes, uint64_t len) {
    e->messages++;
    e->bytes += len;
    EVP_DigestUpdate(e->hash, bytes, len);
}

/* ---- The client ---- */

static int post_operation(struct endpoint *e, uint32_t round, uint64_t offset) {
    const struct params *p = &e->s->p;
    const uint64_t size = payload_size(e, round);
    uint64_t remote = e->remote.addr + round_offset(e, round);
    struct ibv_sge sge = {
        .addr = (uintptr_t)(e->buf + offset), .length = (uint32_t)size, .lkey = e->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = round,
                             .sg_list = &sge,
                             .num_sge = size || atomic(e->test) ? 1 : 0,
                             .opcode = tests[e->test].opcode,
                             .imm_data = htobe32(round)};
    struct ibv_send_wr *bad;

    if (e->test == T_SEND_INLINE)
        wr.send_flags = IBV_SEND_INLINE;
    switch (e->test) {
    case T_WRITE:
    case T_WRITE_IMM:
    case T_UC_WRITE:
    case T_READ:
        wr.wr.rdma.remote_addr = remote;
        wr.wr.rdma.rkey = e->remote.rkey;
        break;
    case T_CAS:
        wr.wr.atomic.remote_addr = remote;
        wr.wr.atomic.rkey = e->remote.rkey;
        wr.wr.atomic.compare_add = round_value(p, e->test, e->index, round, 0);
        wr.wr.atomic.swap = round_value(p, e->test, e->index, round, 2);
        break;
    case T_FADD:
        wr.wr.atomic.remote_addr = remote;
        wr.wr.atomic.rkey = e->remote.rkey;
        wr.wr.atomic.compare_add = round_value(p, e->test, e->index, round, 1);
        break;
    case T_UD_SEND:
        wr.wr.ud.ah = e->ah;
        wr.wr.ud.remote_qpn = e->remote.qpn;
        wr.wr.ud.remote_qkey = QKEY;
        break;
    default:
        break;
    }
    if (ibv_post_send(e->qp, &wr, &bad)) {
        perror("pib-traffic: ibv_post_send");
        return -1;
    }
    return 0;
}

static int client_completion(struct endpoint *e, uint32_t round) {
    struct ibv_wc wc;

    if (wait_completion(e, &wc, e->s->p.op_timeout_s)) {
        fprintf(stderr, "pib-traffic: %s QP %u round %u: no completion in %u s\n",
                tests[e->test].name, e->index, round, e->s->p.op_timeout_s);
        return -1;
    }
    if (wc.status != IBV_WC_SUCCESS || wc.wr_id != round) {
        fprintf(stderr, "pib-traffic: %s QP %u round %u: completion %s (wr_id %llu)\n",
                tests[e->test].name, e->index, round, ibv_wc_status_str(wc.status),
                (unsigned long long)wc.wr_id);
        return -1;
    }
    return 0;
}

/* An atomic returned the value it found; FADD's must be the start value,
 * CAS's too (it swaps). Returns the value memory must hold now. */
static int check_atomic(struct endpoint *e, uint32_t round, uint64_t offset, uint64_t *final) {
    const struct params *p = &e->s->p;
    const uint64_t start = round_value(p, e->test, e->index, round, 0);
    uint64_t found;

    memcpy(&found, e->buf + offset, 8);
    if (found != start) {
        fprintf(stderr, "pib-traffic: %s QP %u round %u: returned 0x%llx, not 0x%llx\n",
                tests[e->test].name, e->index, round, (unsigned long long)found,
                (unsigned long long)start);
        return 1;
    }
    *final = e->test == T_FADD ? start + round_value(p, e->test, e->index, round, 1)
                               : round_value(p, e->test, e->index, round, 2);
    return 0;
}

static int client_round(struct endpoint *e, uint32_t round) {
    const struct params *p = &e->s->p;
    const uint64_t size = payload_size(e, round);
    const uint64_t offset = round_offset(e, round);
    uint64_t final = 0;
    int bad = 0;
    struct msg m;

    if (say(e, round, M_PREPARE, 0) || hear(e, &m) || m.kind != M_READY || m.round != round)
        return -1;
    poison(e->buf + offset - GUARD, size + 2 * GUARD);
    if (e->test != T_READ && !atomic(e->test))
        fill_round(e->buf + offset, size, p, e->test, e->index, round);
    if (post_operation(e, round, offset) || client_completion(e, round))
        return -1;
    if (e->test == T_READ) {
        fill_round(e->scratch, size, p, e->test, e->index, round);
        bad = compare("READ data", e, round, e->scratch, e->buf + offset, size) ||
              check_poison("before the READ data", e, round, e->buf + offset - GUARD, GUARD) ||
              check_poison("after the READ data", e, round, e->buf + offset + size, GUARD);
    } else if (atomic(e->test)) {
        bad = check_atomic(e, round, offset, &final);
    }
    if (say(e, round, M_DONE, final) || hear(e, &m) || m.round != round)
        return -1;
    if (m.kind == M_OK && !bad) {
        count_ok(e, atomic(e->test) ? (const void *)&final : e->buf + offset, size);
    } else if (m.kind == M_LOST) {
        e->lost++;
        if (!(p->lossy && unreliable(e->test)))
            e->errors++;
    } else {
        e->errors++;
    }
    return 0;
}

void *client_thread(void *arg) {
    struct endpoint *e = arg;
    uint32_t round;

    for (round = 0; client_goes_on(&e->s->p, round); round++) {
        if (!test_takes_size(e, round_size(&e->s->p, round)))
            continue;
        if (client_round(e, round)) {
            e->errors++;
            break;
        }
    }
    say(e, 0, M_FINISH, 0);
    return NULL;
}

/* ---- The server ---- */

static uint64_t receive_offset(const struct endpoint *e, uint32_t round) {
    return round_offset(e, round) + (e->test == T_UD_SEND ? UD_GRH : 0);
}

static int post_receive(struct endpoint *e, uint32_t round) {
    const uint64_t start = round_offset(e, round);
    /* Room for the largest message (and UD's GRH), whatever round fills it. */
    struct ibv_sge sge = {.addr = (uintptr_t)(e->buf + start),
                          .length = (uint32_t)(e->buf_len - GUARD - start),
                          .lkey = e->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = round, .sg_list = &sge, .num_sge = 1}, *bad;

    if (e->test == T_WRITE_IMM || e->test == T_UC_WRITE)
        wr.num_sge = 0; /* the immediate only: the data goes where the WRITE says */
    if (ibv_post_recv(e->qp, &wr, &bad)) {
        perror("pib-traffic: ibv_post_recv");
        return -1;
    }
    return 0;
}

static int server_prepare(struct endpoint *e, uint32_t round) {
    const struct params *p = &e->s->p;
    const uint64_t size = payload_size(e, round);
    const uint64_t offset = round_offset(e, round);

    poison(e->buf + offset - GUARD, size + 2 * GUARD + (e->test == T_UD_SEND ? UD_GRH : 0));
    if (e->test == T_READ) {
        fill_round(e->buf + offset, size, p, e->test, e->index, round);
    } else if (atomic(e->test)) {
        const uint64_t start = round_value(p, e->test, e->index, round, 0);

        memcpy(e->buf + offset, &start, 8);
    }
    return tests[e->test].server_receives ? post_receive(e, round) : 0;
}

/* Checks a message that a receive WQE took while round `waited` was
 * awaited: the round it carries (its immediate, or the WQE's own round on
 * RC), its length and every byte, and that nothing was written past it.
 * Returns the round, or -1. The bytes of a UC or UD message of a round
 * given up earlier that comes late are not compared: they landed in that
 * round's area, which the rounds prepared since poisoned again
 * (consecutive rounds' areas overlap), before or after they landed. */
static int64_t check_received(struct endpoint *e, const struct ibv_wc *wc, uint32_t waited) {
    const bool has_imm = tests[e->test].opcode != IBV_WR_SEND;
    const uint32_t posted = (uint32_t)wc->wr_id;
    uint32_t round = posted;
    uint64_t size, at, len;

    if (wc->status != IBV_WC_SUCCESS) {
        fprintf(stderr, "pib-traffic: %s QP %u: receive completion %s\n", tests[e->test].name,
                e->index, ibv_wc_status_str(wc->status));
        return -1;
    }
    if (has_imm) {
        if (!(wc->wc_flags & IBV_WC_WITH_IMM)) {
            fprintf(stderr, "pib-traffic: %s QP %u: no immediate data\n", tests[e->test].name,
                    e->index);
            return -1;
        }
        round = be32toh(wc->imm_data);
    }
    if (round >= round_count(&e->s->p) || (!unreliable(e->test) && round != posted)) {
        fprintf(stderr, "pib-traffic: %s QP %u: round %u arrived for round %u\n",
                tests[e->test].name, e->index, round, posted);
        return -1;
    }
    size = round_size(&e->s->p, round);
    len = wc->byte_len - (e->test == T_UD_SEND ? UD_GRH : 0);
    /* WRITE with immediate: the data is where the client wrote it. */
    at = e->test == T_WRITE_IMM || e->test == T_UC_WRITE ? round_offset(e, round)
                                                         : receive_offset(e, posted);
    if (e->test != T_WRITE_IMM && e->test != T_UC_WRITE && len != size) {
        fprintf(stderr, "pib-traffic: %s QP %u round %u: %llu bytes arrived, not %llu\n",
                tests[e->test].name, e->index, round, (unsigned long long)len,
                (unsigned long long)size);
        return -1;
    }
    if (unreliable(e->test) && round < waited)
        return round;
    fill_round(e->scratch, size, &e->s->p, e->test, e->index, round);
    if (compare("received data", e, round, e->scratch, e->buf + at, size) ||
        (!unreliable(e->test) &&
         check_poison("after the received data", e, round, e->buf + at + size, GUARD)))
        return -1;
    return round;
}

/* Waits for round `round`'s message; messages of rounds given up earlier
 * may come first (UC, UD): their immediate and length must be right too
 * (check_received says why not their bytes). */
static enum msg_kind server_receive(struct endpoint *e, uint32_t round) {
    const double wait = !unreliable(e->test) ? e->s->p.op_timeout_s
                        : e->s->p.lossy      ? LOSSY_WAIT_S
                                             : UNRELIABLE_WAIT_S;
    struct ibv_wc wc;
    int64_t got;

    for (;;) {
        if (wait_completion(e, &wc, wait)) {
            if (unreliable(e->test))
                return M_LOST;
            fprintf(stderr, "pib-traffic: %s QP %u round %u: nothing arrived in %.0f s\n",
                    tests[e->test].name, e->index, round, wait);
            return M_BAD;
        }
        got = check_received(e, &wc, round);
        if (got < 0)
            return M_BAD;
        if (got == round) {
            const uint64_t at = e->test == T_WRITE_IMM || e->test == T_UC_WRITE
                                    ? round_offset(e, round)
                                    : receive_offset(e, (uint32_t)wc.wr_id);

            count_ok(e, e->buf + at, round_size(&e->s->p, round));
            return M_OK;
        }
    }
}

static enum msg_kind server_check(struct endpoint *e, uint32_t round, uint64_t expected) {
    const uint64_t size = payload_size(e, round);
    const uint64_t offset = round_offset(e, round);
    uint64_t found;

    if (tests[e->test].server_receives)
        return server_receive(e, round);
    if (e->test == T_WRITE) {
        fill_round(e->scratch, size, &e->s->p, e->test, e->index, round);
        if (compare("written data", e, round, e->scratch, e->buf + offset, size))
            return M_BAD;
    }
    if (atomic(e->test)) {
        memcpy(&found, e->buf + offset, 8);
        if (found != expected) {
            fprintf(stderr, "pib-traffic: %s QP %u round %u: memory holds 0x%llx, not 0x%llx\n",
                    tests[e->test].name, e->index, round, (unsigned long long)found,
                    (unsigned long long)expected);
            return M_BAD;
        }
    }
    if (check_poison("before the target", e, round, e->buf + offset - GUARD, GUARD) ||
        check_poison("after the target", e, round, e->buf + offset + size, GUARD))
        return M_BAD;
    count_ok(e, e->buf + offset, size);
    return M_OK;
}

void *server_thread(void *arg) {
    struct endpoint *e = arg;
    struct msg m;

    for (;;) {
        if (hear(e, &m)) {
            e->errors++;
            break;
        }
        if (m.kind == M_FINISH)
            break;
        if (m.kind == M_PREPARE && m.round < round_count(&e->s->p) &&
            test_takes_size(e, round_size(&e->s->p, m.round))) {
            if (server_prepare(e, m.round) || say(e, m.round, M_READY, 0)) {
                e->errors++;
                break;
            }
        } else if (m.kind == M_DONE && m.round < round_count(&e->s->p)) {
            const enum msg_kind verdict = server_check(e, m.round, m.value);

            if (verdict == M_LOST)
                e->lost++;
            if (verdict == M_BAD || (verdict == M_LOST && !e->s->p.lossy))
                e->errors++;
            if (say(e, m.round, verdict, 0))
                break;
        } else {
            fprintf(stderr, "pib-traffic: %s QP %u: unexpected message %u for round %u\n",
                    tests[e->test].name, e->index, m.kind, m.round);
            e->errors++;
            break;
        }
    }
    return NULL;
}
