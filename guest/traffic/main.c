// SPDX-License-Identifier: GPL-2.0-or-later
/* pib-traffic's command line, the session with the peer, and the summary. */
#include <getopt.h>
#include <openssl/evp.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "traffic.h"

static const char usage[] =
    "usage: pib-traffic [OPTIONS]          (server)\n"
    "       pib-traffic [OPTIONS] HOST     (client)\n"
    "\n"
    "Moves random data to or from the server over InfiniBand verbs and checks\n"
    "every byte at both ends. The client's options apply to both ends, but\n"
    "--odp, which says how the side that gives it registers its buffers.\n"
    "\n"
    "  -p, --port PORT       TCP port of the side channel (default 18800)\n"
    "  -d, --ib-dev DEV      the RDMA device (default: the first)\n"
    "  -i, --ib-port N       its port (default 1)\n"
    "  -g, --gid-idx N       send with a GRH from this GID index\n"
    "  -t, --tests LIST      comma-separated, default all: send send-imm send-inline\n"
    "                        write write-imm read cas fadd uc-send uc-write ud-send\n"
    "  -s, --sizes LIST      message sizes, K and M allowed (default\n"
    "                        0,1,7,4096,4097,65536,1M+3,16M)\n"
    "  -q, --qps N           QPs per test, a thread each (default 2, at most 16)\n"
    "  -n, --iters N         messages per size and QP (default 2)\n"
    "  -S, --seed N          the data's seed (default 1)\n"
    "  -T, --timeout N       RC local ACK timeout exponent (default 14)\n"
    "  -r, --retry N         RC retry count (default 7)\n"
    "  -l, --lossy           UC and UD messages may be lost (faults on the path)\n"
    "  -w, --wait S          seconds an operation may take (default 60; a UC\n"
    "                        or UD message is lost after 10 s, with --lossy 0.5)\n"
    "  -e, --events C,US     wait for completions by events, on CQs whose\n"
    "                        events ibv_modify_cq moderates to C completions\n"
    "                        or US microseconds (0,0: events, no moderation)\n"
    "  -P, --parallel        the tests at once (default: one after the other)\n"
    "  -o, --odp MODE        this side's buffers on demand: explicit (an on-demand\n"
    "                        MR each) or implicit (one MR over the address space)\n"
    "\n"
    "Prints a line per test and a total; each test's sha256 covers every byte\n"
    "that arrived, and must be the same at both ends. Exits 1 on any\n"
    "difference, error or (without --lossy) lost message.\n"
    "\n"
    "SIGUSR1 to the client ends the traffic early: the test under way ends\n"
    "after its rounds in progress, once it has moved each size, and each test\n"
    "after it moves each size once.\n";

static const struct option long_options[] = {
    {"port", required_argument, NULL, 'p'},    {"ib-dev", required_argument, NULL, 'd'},
    {"ib-port", required_argument, NULL, 'i'}, {"gid-idx", required_argument, NULL, 'g'},
    {"tests", required_argument, NULL, 't'},   {"sizes", required_argument, NULL, 's'},
    {"qps", required_argument, NULL, 'q'},     {"iters", required_argument, NULL, 'n'},
    {"seed", required_argument, NULL, 'S'},    {"timeout", required_argument, NULL, 'T'},
    {"retry", required_argument, NULL, 'r'},   {"lossy", no_argument, NULL, 'l'},
    {"wait", required_argument, NULL, 'w'},    {"events", required_argument, NULL, 'e'},
    {"parallel", no_argument, NULL, 'P'},      {"odp", required_argument, NULL, 'o'},
    {"help", no_argument, NULL, 'h'},          {NULL, 0, NULL, 0},
};

atomic_bool traffic_stop_asked;

static void *wait_for_stop(void *arg) {
    const sigset_t *stop = arg;
    int sig;

    if (!sigwait(stop, &sig))
        atomic_store(&traffic_stop_asked, true);
    return NULL;
}

/* SIGUSR1 is taken by a thread of its own, blocked in every other: a
 * handler would interrupt the others' socket calls, which SO_RCVTIMEO
 * keeps from being restarted. */
static int take_stop_signal(void) {
    static sigset_t stop;
    pthread_t waiter;

    sigemptyset(&stop);
    sigaddset(&stop, SIGUSR1);
    if (pthread_sigmask(SIG_BLOCK, &stop, NULL) ||
        pthread_create(&waiter, NULL, wait_for_stop, &stop))
        return -1;
    return pthread_detach(waiter);
}

/* The largest message: a 16 MiB transfer, with room to spare. */
#define MAX_MESSAGE (64ull << 20)

static int parse_tests(const char *text, uint32_t *mask) {
    char *copy = strdup(text), *word, *save = NULL;
    int t;

    *mask = 0;
    for (word = strtok_r(copy, ",", &save); word; word = strtok_r(NULL, ",", &save)) {
        for (t = 0; t < T_COUNT && strcmp(word, tests[t].name); t++)
            ;
        if (t == T_COUNT) {
            fprintf(stderr, "pib-traffic: no test %s\n", word);
            free(copy);
            return -1;
        }
        *mask |= 1u << t;
    }
    free(copy);
    return *mask ? 0 : -1;
}

/* "4096", "64K", "1M+3" (a megabyte and three bytes). */
static int parse_sizes(const char *text, struct params *p) {
    const char *at = text;

    p->nsizes = 0;
    while (*at) {
        char *end;
        unsigned long long v = strtoull(at, &end, 0);

        if (end == at || p->nsizes == MAX_SIZES)
            return -1;
        if (*end == 'K' || *end == 'M') {
            v <<= *end == 'K' ? 10 : 20;
            end++;
        }
        if (*end == '+') {
            at = end + 1;
            v += strtoull(at, &end, 0);
            if (end == at)
                return -1;
        }
        if (v > MAX_MESSAGE)
            return -1;
        p->sizes[p->nsizes++] = v;
        if (*end == ',')
            end++;
        else if (*end)
            return -1;
        at = end;
    }
    return p->nsizes ? 0 : -1;
}

static int parse_args(int argc, char **argv, struct session *s, const char **dev) {
    struct params *p = &s->p;
    int c;

    p->magic = TRAFFIC_MAGIC;
    p->version = TRAFFIC_VERSION;
    p->seed = 1;
    p->tests = (1u << T_COUNT) - 1;
    p->qps = 2;
    p->iters = 2;
    p->timeout = 14;
    p->retry = 7;
    p->op_timeout_s = 60;
    parse_sizes("0,1,7,4096,4097,65536,1M+3,16M", p);
    s->tcp_port = "18800";
    s->port = 1;
    while ((c = getopt_long(argc, argv, "p:d:i:g:t:s:q:n:S:T:r:lw:e:Po:h", long_options, NULL)) !=
           -1) {
        switch (c) {
        case 'p':
            s->tcp_port = optarg;
            break;
        case 'd':
            *dev = optarg;
            break;
        case 'i':
            s->port = (uint8_t)atoi(optarg);
            break;
        case 'g':
            p->gid_index_plus_one = (uint8_t)(atoi(optarg) + 1);
            break;
        case 't':
            if (parse_tests(optarg, &p->tests))
                return -1;
            break;
        case 's':
            if (parse_sizes(optarg, p)) {
                fprintf(stderr, "pib-traffic: bad sizes %s\n", optarg);
                return -1;
            }
            break;
        case 'q':
            p->qps = (uint32_t)atoi(optarg);
            break;
        case 'n':
            p->iters = (uint32_t)atoi(optarg);
            break;
        case 'S':
            p->seed = strtoull(optarg, NULL, 0);
            break;
        case 'T':
            p->timeout = (uint8_t)atoi(optarg);
            break;
        case 'r':
            p->retry = (uint8_t)atoi(optarg);
            break;
        case 'l':
            p->lossy = 1;
            break;
        case 'w':
            p->op_timeout_s = (uint32_t)atoi(optarg);
            break;
        case 'P':
            p->parallel = 1;
            break;
        case 'o':
            if (!strcmp(optarg, "explicit"))
                s->odp = ODP_EXPLICIT;
            else if (!strcmp(optarg, "implicit"))
                s->odp = ODP_IMPLICIT;
            else {
                fprintf(stderr, "pib-traffic: bad --odp %s\n", optarg);
                return -1;
            }
            break;
        case 'e': {
            unsigned int count, period;

            if (sscanf(optarg, "%u,%u", &count, &period) != 2 || count > 0xffff ||
                period > 0xffff) {
                fprintf(stderr, "pib-traffic: bad --events %s\n", optarg);
                return -1;
            }
            p->events = 1;
            p->moderation_count = (uint16_t)count;
            p->moderation_period_us = (uint16_t)period;
            break;
        }
        default:
            fputs(usage, c == 'h' ? stdout : stderr);
            exit(c == 'h' ? 0 : 2);
        }
    }
    if (optind < argc)
        s->peer = argv[optind];
    s->server = !s->peer;
    return 0;
}

/* The server takes the client's parameters, but never blindly. */
static int check_params(const struct params *p) {
    uint32_t i;

    if (p->magic != TRAFFIC_MAGIC || p->version != TRAFFIC_VERSION) {
        fprintf(stderr, "pib-traffic: the peer speaks another version\n");
        return -1;
    }
    if (p->qps < 1 || p->qps > MAX_QPS || p->iters < 1 || p->iters > 1000 || p->nsizes < 1 ||
        p->nsizes > MAX_SIZES || p->retry > 7 || p->timeout > 31 || p->op_timeout_s < 1 ||
        p->tests >= 1u << T_COUNT || p->events > 1 || p->parallel > 1) {
        fprintf(stderr, "pib-traffic: parameters out of range\n");
        return -1;
    }
    for (i = 0; i < p->nsizes; i++)
        if (p->sizes[i] > MAX_MESSAGE)
            return -1;
    return 0;
}

static int open_device(struct session *s, const char *name) {
    struct ibv_device **list = ibv_get_device_list(NULL);
    int i;

    for (i = 0; list && list[i]; i++)
        if (!name || !strcmp(ibv_get_device_name(list[i]), name))
            break;
    if (!list || !list[i]) {
        fprintf(stderr, "pib-traffic: no RDMA device %s\n", name ? name : "at all");
        return -1;
    }
    s->ctx = ibv_open_device(list[i]);
    ibv_free_device_list(list);
    if (!s->ctx || ibv_query_port(s->ctx, s->port, &s->port_attr) ||
        !(s->pd = ibv_alloc_pd(s->ctx))) {
        fprintf(stderr, "pib-traffic: cannot open the device or its port %u\n", s->port);
        return -1;
    }
    if (s->p.gid_index_plus_one &&
        ibv_query_gid(s->ctx, s->port, s->p.gid_index_plus_one - 1, &s->gid))
        return -1;
    if (s->odp == ODP_IMPLICIT &&
        !(s->implicit_mr =
              ibv_reg_mr(s->pd, NULL, SIZE_MAX, TRAFFIC_ACCESS | IBV_ACCESS_ON_DEMAND))) {
        perror("pib-traffic: ibv_reg_mr of the whole address space (implicit ODP)");
        return -1;
    }
    return 0;
}

/* Each QP's rounds get their own TCP connection, so threads never share one. */
static int open_sync_channels(struct session *s, struct endpoint *eps) {
    uint32_t q, index;

    for (q = 0; q < s->p.qps; q++) {
        if (!s->server) {
            eps[q].sync = net_connect(s->peer, s->tcp_port);
            if (eps[q].sync < 0 || send_all(eps[q].sync, &q, sizeof(q)))
                return -1;
            net_set_timeout(eps[q].sync, s->p.op_timeout_s + 30);
            continue;
        }
        int fd = net_accept(s->listen_fd);

        if (fd < 0 || recv_all(fd, &index, sizeof(index)) || index >= s->p.qps ||
            eps[index].sync >= 0)
            return -1;
        eps[index].sync = fd;
        net_set_timeout(fd, s->p.op_timeout_s + 30);
    }
    return 0;
}

static int exchange(struct session *s, struct endpoint *eps) {
    struct qp_info mine[MAX_QPS], theirs[MAX_QPS];
    const size_t len = s->p.qps * sizeof(struct qp_info);
    uint32_t q;

    for (q = 0; q < s->p.qps; q++)
        mine[q] = eps[q].local;
    if (s->server ? recv_all(s->control, theirs, len) || send_all(s->control, mine, len)
                  : send_all(s->control, mine, len) || recv_all(s->control, theirs, len))
        return -1;
    for (q = 0; q < s->p.qps; q++)
        eps[q].remote = theirs[q];
    return 0;
}

struct totals {
    uint64_t messages, bytes, lost, errors, events;
};

static void report(const struct session *s, enum test_kind t, struct endpoint *eps,
                   struct totals *sum) {
    EVP_MD_CTX *all = EVP_MD_CTX_new();
    uint8_t digest[32];
    struct totals here = {0};
    unsigned int len;
    uint32_t q;
    int i;

    EVP_DigestInit_ex(all, EVP_sha256(), NULL);
    for (q = 0; q < s->p.qps; q++) {
        EVP_DigestFinal_ex(eps[q].hash, eps[q].digest, &len);
        EVP_DigestUpdate(all, eps[q].digest, sizeof(eps[q].digest));
        here.messages += eps[q].messages;
        here.bytes += eps[q].bytes;
        here.lost += eps[q].lost;
        here.errors += eps[q].errors;
        here.events += eps[q].events;
    }
    EVP_DigestFinal_ex(all, digest, &len);
    EVP_MD_CTX_free(all);
    printf("%-11s %2u QPs %6llu messages %11llu bytes %4llu lost %3llu errors sha256 ",
           tests[t].name, s->p.qps, (unsigned long long)here.messages,
           (unsigned long long)here.bytes, (unsigned long long)here.lost,
           (unsigned long long)here.errors);
    for (i = 0; i < 32; i++)
        printf("%02x", digest[i]);
    if (s->p.events)
        printf(" events %llu", (unsigned long long)here.events);
    printf("\n");
    fflush(stdout);
    sum->messages += here.messages;
    sum->bytes += here.bytes;
    sum->lost += here.lost;
    sum->errors += here.errors;
    sum->events += here.events;
}

/* A test on its QPs: set up, then its threads running until it ends. */
struct test_run {
    enum test_kind test;
    struct endpoint eps[MAX_QPS];
    pthread_t threads[MAX_QPS];
    uint32_t started;
    int err;
};

/* Sets the test's QPs up with the peer's and starts a thread on each. */
static void start_test(struct session *s, struct test_run *run) {
    struct endpoint *eps = run->eps;
    uint32_t q;

    for (q = 0; q < s->p.qps; q++) {
        eps[q] = (struct endpoint){.s = s, .test = run->test, .index = q, .sync = -1};
        run->err = run->err || endpoint_create(&eps[q]);
    }
    run->err = run->err || exchange(s, eps);
    for (q = 0; q < s->p.qps && !run->err; q++)
        run->err = endpoint_connect(&eps[q]);
    run->err = run->err || open_sync_channels(s, eps);
    for (q = 0; q < s->p.qps && !run->err; q++, run->started++)
        run->err = pthread_create(&run->threads[q], NULL, s->server ? server_thread : client_thread,
                                  &eps[q]);
}

/* Waits for the test's threads, reports it and takes its QPs down. */
static int finish_test(struct session *s, struct test_run *run, struct totals *sum) {
    uint32_t q;

    for (q = 0; q < run->started; q++)
        pthread_join(run->threads[q], NULL);
    if (!run->err)
        report(s, run->test, run->eps, sum);
    for (q = 0; q < s->p.qps; q++) {
        if (run->eps[q].sync >= 0)
            close(run->eps[q].sync);
        endpoint_destroy(&run->eps[q]);
    }
    if (run->err)
        fprintf(stderr, "pib-traffic: %s: could not set up its QPs\n", tests[run->test].name);
    return run->err;
}

/* The tests asked for, one after the other or (--parallel) all at once;
 * returns how many could not be set up. */
static int run_tests(struct session *s, struct totals *sum) {
    struct test_run *runs = calloc(T_COUNT, sizeof(*runs));
    int t, count = 0, started = 0, failed = 0;

    if (!runs)
        return 1;
    for (t = 0; t < T_COUNT; t++)
        if (s->p.tests & (1u << t))
            runs[count++].test = (enum test_kind)t;
    for (t = 0; t < count && !failed; t++) {
        start_test(s, &runs[t]);
        started++;
        /* The peer is gone or out of step: the other tests cannot run. */
        if (runs[t].err || !s->p.parallel)
            failed += finish_test(s, &runs[t], sum) != 0;
    }
    for (t = 0; s->p.parallel && t < started; t++)
        if (!runs[t].err)
            failed += finish_test(s, &runs[t], sum) != 0;
    free(runs);
    return failed;
}

int main(int argc, char **argv) {
    struct session s = {0};
    const char *dev = NULL;
    struct totals sum = {0};

    if (parse_args(argc, argv, &s, &dev))
        return 2;
    if (s.server) {
        s.listen_fd = net_listen(s.tcp_port);
        if (s.listen_fd < 0 || (s.control = net_accept(s.listen_fd)) < 0 ||
            recv_all(s.control, &s.p, sizeof(s.p)) || check_params(&s.p))
            return 1;
    } else {
        if (take_stop_signal())
            return 1;
        s.control = net_connect(s.peer, s.tcp_port);
        if (s.control < 0 || send_all(s.control, &s.p, sizeof(s.p)))
            return 1;
    }
    net_set_timeout(s.control, s.p.op_timeout_s + 30);
    if (open_device(&s, dev))
        return 1;
    sum.errors += run_tests(&s, &sum);
    printf("total %llu messages %llu bytes %llu lost %llu errors", (unsigned long long)sum.messages,
           (unsigned long long)sum.bytes, (unsigned long long)sum.lost,
           (unsigned long long)sum.errors);
    if (s.p.events)
        printf(" events %llu", (unsigned long long)sum.events);
    printf("\n");
    if (s.implicit_mr)
        ibv_dereg_mr(s.implicit_mr);
    ibv_dealloc_pd(s.pd);
    ibv_close_device(s.ctx);
    return sum.errors ? 1 : 0;
}
