// SPDX-License-Identifier: GPL-2.0-or-later
/* A test's QP: its CQ, buffer and MR, the connection to the peer's QP, and
 * waiting for completions. */
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "traffic.h"

static uint64_t largest_size(const struct params *p) {
    uint64_t max = 8, i;

    for (i = 0; i < p->nsizes; i++)
        if (p->sizes[i] > max)
            max = p->sizes[i];
    return max;
}

static uint32_t recv_depth(const struct params *p) {
    uint32_t rounds = round_count(p);

    /* UC and UD may leave a receive per lost round behind. */
    return rounds < 1024 ? rounds + 1 : 1024;
}

/* --events: the CQ's events moderated as asked, then armed. */
static int moderate(struct endpoint *e) {
    struct ibv_modify_cq_attr attr = {
        .attr_mask = IBV_CQ_ATTR_MODERATE,
        .moderate = {.cq_count = e->s->p.moderation_count,
                     .cq_period = e->s->p.moderation_period_us},
    };
    int err = ibv_modify_cq(e->cq, &attr);

    if (err) {
        fprintf(stderr, "pib-traffic: ibv_modify_cq(%u, %u us): %s\n", attr.moderate.cq_count,
                attr.moderate.cq_period, strerror(err));
        return -1;
    }
    return ibv_req_notify_cq(e->cq, 0);
}

int endpoint_create(struct endpoint *e) {
    const struct session *s = e->s;
    const struct test_def *def = &tests[e->test];
    struct ibv_qp_init_attr init = {
        .qp_type = def->qpt,
        .sq_sig_all = 1,
        .cap = {.max_send_wr = 4,
                .max_recv_wr = recv_depth(&s->p),
                .max_send_sge = 1,
                .max_recv_sge = 1,
                .max_inline_data = e->test == T_SEND_INLINE ? 256 : 0},
    };
    const uint64_t area = MAX_OFFSET + UD_GRH + largest_size(&s->p);

    e->buf_len = GUARD + area + GUARD;
    if (posix_memalign((void **)&e->buf, 4096, e->buf_len) ||
        !(e->scratch = malloc(largest_size(&s->p) + 8))) {
        fprintf(stderr, "pib-traffic: out of memory for %llu-byte buffers\n",
                (unsigned long long)e->buf_len);
        return -1;
    }
    poison(e->buf, e->buf_len);
    e->mr = s->implicit_mr
                ? s->implicit_mr
                : ibv_reg_mr(s->pd, e->buf, e->buf_len,
                             TRAFFIC_ACCESS | (s->odp == ODP_EXPLICIT ? IBV_ACCESS_ON_DEMAND : 0));
    if (s->p.events && !(e->channel = ibv_create_comp_channel(s->ctx))) {
        perror("pib-traffic: ibv_create_comp_channel");
        return -1;
    }
    e->cq = ibv_create_cq(s->ctx, (int)(init.cap.max_send_wr + init.cap.max_recv_wr), NULL,
                          e->channel, 0);
    if (!e->mr || !e->cq) {
        perror("pib-traffic: ibv_reg_mr/ibv_create_cq");
        return -1;
    }
    if (s->p.events && moderate(e))
        return -1;
    init.send_cq = init.recv_cq = e->cq;
    e->qp = ibv_create_qp(s->pd, &init);
    if (!e->qp) {
        perror("pib-traffic: ibv_create_qp");
        return -1;
    }
    e->max_inline = init.cap.max_inline_data;
    e->hash = EVP_MD_CTX_new();
    if (!e->hash || !EVP_DigestInit_ex(e->hash, EVP_sha256(), NULL))
        return -1;
    e->local.qpn = e->qp->qp_num;
    e->local.psn = (uint32_t)(s->p.seed * 2654435761u + e->index * 977 + e->test) & 0xffffff;
    e->local.rkey = e->mr->rkey;
    e->local.lid = s->port_attr.lid;
    memcpy(e->local.gid, s->gid.raw, 16);
    e->local.addr = (uintptr_t)e->buf;
    return 0;
}

static void path_to_peer(const struct endpoint *e, struct ibv_ah_attr *ah) {
    const struct session *s = e->s;

    memset(ah, 0, sizeof(*ah));
    ah->dlid = e->remote.lid;
    ah->port_num = s->port;
    if (s->p.gid_index_plus_one) {
        ah->is_global = 1;
        ah->grh.hop_limit = 64;
        ah->grh.sgid_index = s->p.gid_index_plus_one - 1;
        memcpy(ah->grh.dgid.raw, e->remote.gid, 16);
    }
}

static int connect_datagram(struct endpoint *e) {
    struct ibv_qp_attr attr = {
        .qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = e->s->port, .qkey = QKEY};
    struct ibv_ah_attr ah;

    if (ibv_modify_qp(e->qp, &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_QKEY))
        return -1;
    attr.qp_state = IBV_QPS_RTR;
    if (ibv_modify_qp(e->qp, &attr, IBV_QP_STATE))
        return -1;
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = e->local.psn;
    if (ibv_modify_qp(e->qp, &attr, IBV_QP_STATE | IBV_QP_SQ_PSN))
        return -1;
    path_to_peer(e, &ah);
    e->ah = ibv_create_ah(e->s->pd, &ah);
    return e->ah ? 0 : -1;
}

static int connect_connected(struct endpoint *e) {
    const struct session *s = e->s;
    const bool rc = tests[e->test].qpt == IBV_QPT_RC;
    struct ibv_qp_attr attr = {
        .qp_state = IBV_QPS_INIT,
        .pkey_index = 0,
        .port_num = s->port,
        .qp_access_flags =
            IBV_ACCESS_REMOTE_WRITE | (rc ? IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC : 0),
    };
    int mask;

    if (ibv_modify_qp(e->qp, &attr,
                      IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        return -1;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTR;
    attr.path_mtu = s->port_attr.active_mtu;
    attr.dest_qp_num = e->remote.qpn;
    attr.rq_psn = e->remote.psn;
    path_to_peer(e, &attr.ah_attr);
    mask = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN;
    if (rc) {
        attr.max_dest_rd_atomic = 1;
        attr.min_rnr_timer = 12;
        mask |= IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
    }
    if (ibv_modify_qp(e->qp, &attr, mask))
        return -1;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_RTS;
    attr.sq_psn = e->local.psn;
    mask = IBV_QP_STATE | IBV_QP_SQ_PSN;
    if (rc) {
        attr.timeout = s->p.timeout;
        attr.retry_cnt = s->p.retry;
        attr.rnr_retry = 7;
        attr.max_rd_atomic = 1;
        mask |= IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
    }
    return ibv_modify_qp(e->qp, &attr, mask) ? -1 : 0;
}

int endpoint_connect(struct endpoint *e) {
    int err = tests[e->test].qpt == IBV_QPT_UD ? connect_datagram(e) : connect_connected(e);

    if (err)
        perror("pib-traffic: connecting the QP");
    return err;
}

void endpoint_destroy(struct endpoint *e) {
    if (e->ah)
        ibv_destroy_ah(e->ah);
    if (e->qp)
        ibv_destroy_qp(e->qp);
    if (e->cq) {
        /* Every event taken is acknowledged before the CQ goes. */
        ibv_ack_cq_events(e->cq, (unsigned int)e->events);
        ibv_destroy_cq(e->cq);
    }
    if (e->channel)
        ibv_destroy_comp_channel(e->channel);
    if (e->mr && e->mr != e->s->implicit_mr)
        ibv_dereg_mr(e->mr);
    if (e->hash)
        EVP_MD_CTX_free(e->hash);
    free(e->buf);
    free(e->scratch);
}

static double now(void) {
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec / 1e9;
}

/* --events: sleeps until the CQ's next event, then arms it again (before
 * polling, so no completion is missed). 0, or -1 after `seconds`. */
static int wait_event(struct endpoint *e, double deadline) {
    struct pollfd pfd = {.fd = e->channel->fd, .events = POLLIN};
    struct ibv_cq *cq;
    void *cq_context;
    const double left = deadline - now();

    if (left <= 0 || poll(&pfd, 1, (int)(left * 1000) + 1) != 1)
        return -1;
    if (ibv_get_cq_event(e->channel, &cq, &cq_context) || cq != e->cq)
        return -1;
    e->events++;
    return ibv_req_notify_cq(e->cq, 0) ? -1 : 0;
}

/* The deadline has passed: one more look before giving up. The thread
 * may have lost the CPU between its last empty poll and its look at the
 * clock (a loaded host runs a guest's vCPU late), and a completion that
 * came meanwhile came in time. Missing it made a UC round look lost, and
 * its data, which had landed, was poisoned for the next round before
 * its completion was taken (a cold run's uc-write "differs ... 0xa5"). */
static int last_look(struct endpoint *e, struct ibv_wc *wc) {
    return ibv_poll_cq(e->cq, 1, wc) == 1 ? 0 : -1;
}

int wait_completion(struct endpoint *e, struct ibv_wc *wc, double seconds) {
    const double deadline = now() + seconds;
    unsigned int spins = 0;

    for (;;) {
        int n = ibv_poll_cq(e->cq, 1, wc);

        if (n < 0) {
            fprintf(stderr, "pib-traffic: ibv_poll_cq failed\n");
            return -1;
        }
        if (n == 1)
            return 0;
        if (e->channel) {
            if (wait_event(e, deadline))
                return last_look(e, wc);
            continue;
        }
        if ((++spins & 1023) == 0) {
            if (now() > deadline)
                return last_look(e, wc);
            /* Give the other QPs' threads the CPU: guests have few. */
            sched_yield();
        }
    }
}
