/* SPDX-License-Identifier: GPL-2.0-or-later */
/*
 * pib-traffic: moves random data between two hosts over InfiniBand verbs
 * and checks every byte at both ends. The client drives; the server
 * mirrors. Each test (an operation on a QP type) runs on several QPs at
 * once, a thread per QP, in rounds: the client tells the server over TCP
 * what comes, the server prepares (posts a receive, fills what will be
 * read, poisons what will be written), the client performs the operation,
 * and the server checks what arrived. Both ends hash every byte they
 * checked; the hashes must match.
 */
#ifndef PIB_TRAFFIC_H
#define PIB_TRAFFIC_H

#include <infiniband/verbs.h>
#include <openssl/evp.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stdint.h>

#define TRAFFIC_MAGIC 0x50494254u /* "PIBT" */
#define TRAFFIC_VERSION 2
#define MAX_SIZES 16
#define MAX_QPS 16
/* Offsets into the buffers vary by round, so no transfer is aligned. */
#define MAX_OFFSET 64
/* Bytes around a transfer that must stay as they were. */
#define GUARD 64
#define UD_GRH 40
#define QKEY 0x11111111u

enum test_kind {
    T_SEND,        /* RC SEND */
    T_SEND_IMM,    /* RC SEND with immediate */
    T_SEND_INLINE, /* RC SEND of inline data */
    T_WRITE,       /* RC RDMA WRITE */
    T_WRITE_IMM,   /* RC RDMA WRITE with immediate */
    T_READ,        /* RC RDMA READ */
    T_CAS,         /* RC compare-and-swap */
    T_FADD,        /* RC fetch-and-add */
    T_UC_SEND,     /* UC SEND with immediate (the round number) */
    T_UC_WRITE,    /* UC RDMA WRITE with immediate (the round number) */
    T_UD_SEND,     /* UD SEND with immediate (the round number) */
    T_COUNT
};

struct test_def {
    const char *name;
    enum ibv_qp_type qpt;
    enum ibv_wr_opcode opcode;
    bool server_receives; /* a receive WQE per round at the server */
};

extern const struct test_def tests[T_COUNT];

/* Set when the client is asked to stop early (SIGUSR1): each test then
 * ends after its rounds in progress, once every size has been moved. */
extern atomic_bool traffic_stop_asked;

/* What the client asks for; sent to the server at the start. */
struct params {
    uint32_t magic, version;
    uint64_t seed;
    uint32_t tests; /* bit per enum test_kind */
    uint32_t qps;   /* per test */
    uint32_t iters; /* rounds per size */
    uint32_t nsizes;
    uint64_t sizes[MAX_SIZES];
    uint8_t timeout;            /* RC local ACK timeout exponent */
    uint8_t retry;              /* RC retry count */
    uint8_t lossy;              /* UC and UD may lose messages */
    uint8_t gid_index_plus_one; /* 0: no GRH */
    uint32_t op_timeout_s;
    /* Completions by events (ibv_get_cq_event) on CQs moderated to this
     * count and period (ibv_modify_cq); 0: busy polling. */
    uint8_t events;
    uint8_t parallel; /* the tests run at once, not one after the other */
    uint16_t moderation_count, moderation_period_us;
};

/* A QP as its peer needs to know it. */
struct qp_info {
    uint32_t qpn, psn, rkey;
    uint16_t lid;
    uint8_t gid[16];
    uint64_t addr; /* the QP's buffer */
};

/* One QP, its buffers and its thread's results. */
struct endpoint {
    struct session *s;
    enum test_kind test;
    unsigned int index;
    struct ibv_cq *cq;
    struct ibv_comp_channel *channel; /* --events */
    struct ibv_qp *qp;
    struct ibv_ah *ah; /* UD: the peer */
    struct ibv_mr *mr;
    uint8_t *buf; /* [GUARD | MAX_OFFSET + UD_GRH + largest size | GUARD] */
    size_t buf_len;
    uint8_t *scratch; /* the expected bytes of a round */
    struct qp_info local, remote;
    int sync; /* TCP connection of this QP's rounds */
    uint32_t max_inline;
    /* Results. */
    uint64_t messages, bytes, lost, errors;
    uint64_t events; /* completion events taken (--events) */
    EVP_MD_CTX *hash;
    uint8_t digest[32];
};

#define TRAFFIC_ACCESS                                                                             \
    (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ |                   \
     IBV_ACCESS_REMOTE_ATOMIC)

/* How this side registers its buffers (--odp). */
enum odp_mode { ODP_NONE, ODP_EXPLICIT, ODP_IMPLICIT };

struct session {
    bool server;
    enum odp_mode odp;
    struct ibv_mr *implicit_mr; /* ODP_IMPLICIT: the whole address space */
    struct params p;
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    uint8_t port;
    struct ibv_port_attr port_attr;
    union ibv_gid gid;
    int listen_fd;    /* server */
    int control;      /* the first connection */
    const char *peer; /* client: the server's host name */
    const char *tcp_port;
};

/* rounds.c: a QP's rounds, on each side. */
void *client_thread(void *arg);
void *server_thread(void *arg);
/* The size of round `round` (every size `iters` times, in order). */
uint64_t round_size(const struct params *p, uint32_t round);
uint32_t round_count(const struct params *p);
/* Whether a test sends messages of this size (UD is bound by the MTU,
 * inline data by the QP). */
bool test_takes_size(const struct endpoint *e, uint64_t size);

/* data.c: the bytes of a round, and their checks. */
void fill_round(uint8_t *dst, uint64_t len, const struct params *p, enum test_kind t,
                unsigned int qp, uint32_t round);
uint64_t round_value(const struct params *p, enum test_kind t, unsigned int qp, uint32_t round,
                     unsigned int which);
void poison(uint8_t *dst, uint64_t len);
/* 0, or 1 after printing where `got` first differs from `want`. */
int compare(const char *what, const struct endpoint *e, uint32_t round, const uint8_t *want,
            const uint8_t *got, uint64_t len);
int check_poison(const char *what, const struct endpoint *e, uint32_t round, const uint8_t *got,
                 uint64_t len);

/* verbs.c: QPs, connections, completions. */
int endpoint_create(struct endpoint *e);
int endpoint_connect(struct endpoint *e);
void endpoint_destroy(struct endpoint *e);
/* Waits for one completion; 0, or -1 on a timeout (after printing). */
int wait_completion(struct endpoint *e, struct ibv_wc *wc, double seconds);

/* net.c: the TCP side channel. */
int net_listen(const char *port);
int net_accept(int listen_fd);
int net_connect(const char *host, const char *port);
/* A peer silent this long fails the run (more than one operation's time). */
void net_set_timeout(int fd, unsigned int seconds);
int send_all(int fd, const void *buf, size_t len);
int recv_all(int fd, void *buf, size_t len);

#endif
