// SPDX-License-Identifier: GPL-2.0-or-later
/*
 * pib-mpi-check: MPI between the guests, every byte checked.
 *
 *   pib-mpi-check [--seed N]          the check (default)
 *   pib-mpi-check --pingpong [ITERS]  ranks 0 and 1: latency at 8 B and
 *                                     bandwidth at 1 MiB, for ./pib bench
 *
 * The check: each rank sends each other rank one message of every size
 * from 1 B to 4 MiB, with non-blocking point-to-point calls, and the
 * receiver compares every byte with the pseudo-random stream it derives
 * from the seed, the sender, itself and the size. Then an allreduce, a
 * broadcast and an alltoall whose results every rank computes and checks
 * by itself. Rank 0 prints one line per part and the sum of the errors
 * all ranks found; the exit status is 0 only when that sum is 0.
 *
 * Built twice (tools/pibctl/mpi_build.py), against the headers of the
 * guest image's Open MPI and of its MPICH: the two have different ABIs.
 */
#include <inttypes.h>
#include <mpi.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "pib_stream.h"

#define MAX_SIZE (4u << 20)
#define BCAST_SIZE (1u << 20)
#define REDUCE_COUNT 100000
#define ALLTOALL_COUNT 4096 /* uint64_t per block */
#define TAG_CHECK 7
#define TAG_PINGPONG 8

static const uint32_t sizes[] = {1,     7,      64,       1000,    4096,    4097,
                                 65536, 200000, 1u << 20, 3000001, MAX_SIZE};
#define NSIZES (sizeof(sizes) / sizeof(sizes[0]))

struct totals {
    uint64_t messages;
    uint64_t bytes;
    uint64_t errors;
};

static uint64_t stream_key(uint64_t seed, uint64_t a, uint64_t b, uint64_t c) {
    uint64_t state = seed ^ (a << 48) ^ (b << 32) ^ c;

    return pib_stream_next(&state);
}

/* Counts the bytes of `got` that differ from the stream of `key`; reports
 * the first one. */
static uint64_t check(const char *what, int me, int from, const uint8_t *got, uint8_t *want,
                      size_t len, uint64_t key) {
    uint64_t bad = 0;
    size_t first = 0;

    pib_stream_fill(want, len, key);
    for (size_t i = 0; i < len; i++) {
        if (got[i] != want[i] && bad++ == 0)
            first = i;
    }
    if (bad)
        fprintf(stderr,
                "rank %d: %s from rank %d, %zu bytes: %" PRIu64
                " bytes differ, the first at %zu (0x%02x, not 0x%02x)\n",
                me, what, from, len, bad, first, got[first], want[first]);
    return bad;
}

static void *alloc_or_abort(size_t len) {
    void *p = malloc(len ? len : 1);

    if (!p) {
        fprintf(stderr, "out of memory (%zu bytes)\n", len);
        MPI_Abort(MPI_COMM_WORLD, 2);
    }
    return p;
}

/* Every rank sends every other rank one message of each size. */
static void point_to_point(uint64_t seed, int me, int n, struct totals *t) {
    int peers = n - 1;
    uint8_t **in = alloc_or_abort(sizeof(*in) * (size_t)peers);
    uint8_t **out = alloc_or_abort(sizeof(*out) * (size_t)peers);
    MPI_Request *req = alloc_or_abort(sizeof(*req) * 2 * (size_t)peers);
    uint8_t *want = alloc_or_abort(MAX_SIZE);

    for (int i = 0; i < peers; i++) {
        in[i] = alloc_or_abort(MAX_SIZE);
        out[i] = alloc_or_abort(MAX_SIZE);
    }
    for (size_t s = 0; s < NSIZES; s++) {
        uint32_t len = sizes[s];

        for (int i = 0, peer = 0; peer < n; peer++) {
            if (peer == me)
                continue;
            memset(in[i], 0xa5, len);
            pib_stream_fill(out[i], len, stream_key(seed, (uint64_t)me, (uint64_t)peer, len));
            MPI_Irecv(in[i], (int)len, MPI_BYTE, peer, TAG_CHECK, MPI_COMM_WORLD, &req[2 * i]);
            MPI_Isend(out[i], (int)len, MPI_BYTE, peer, TAG_CHECK, MPI_COMM_WORLD, &req[2 * i + 1]);
            i++;
        }
        MPI_Waitall(2 * peers, req, MPI_STATUSES_IGNORE);
        for (int i = 0, peer = 0; peer < n; peer++) {
            if (peer == me)
                continue;
            t->errors += check("message", me, peer, in[i], want, len,
                               stream_key(seed, (uint64_t)peer, (uint64_t)me, len));
            t->messages++;
            t->bytes += len;
            i++;
        }
    }
    for (int i = 0; i < peers; i++) {
        free(in[i]);
        free(out[i]);
    }
    free(want);
    free(req);
    free(out);
    free(in);
}

/* Element i of rank r's contribution; the sum wraps around modulo 2^64. */
static uint64_t reduce_input(uint64_t seed, int rank, int i) {
    return stream_key(seed, 0xaa, (uint64_t)rank, (uint64_t)i);
}

static uint64_t allreduce(uint64_t seed, int me, int n) {
    uint64_t *in = alloc_or_abort(sizeof(*in) * REDUCE_COUNT);
    uint64_t *sum = alloc_or_abort(sizeof(*sum) * REDUCE_COUNT);
    uint64_t bad = 0;

    for (int i = 0; i < REDUCE_COUNT; i++)
        in[i] = reduce_input(seed, me, i);
    MPI_Allreduce(in, sum, REDUCE_COUNT, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    for (int i = 0; i < REDUCE_COUNT; i++) {
        uint64_t want = 0;

        for (int r = 0; r < n; r++)
            want += reduce_input(seed, r, i);
        if (sum[i] != want && bad++ == 0)
            fprintf(stderr, "rank %d: allreduce element %d is %" PRIu64 ", not %" PRIu64 "\n", me,
                    i, sum[i], want);
    }
    free(sum);
    free(in);
    return bad;
}

static uint64_t broadcast(uint64_t seed, int me, int n) {
    uint8_t *buf = alloc_or_abort(BCAST_SIZE);
    uint8_t *want = alloc_or_abort(BCAST_SIZE);
    int root = n - 1; /* on the other guest than rank 0 when ranks are packed by guest */
    uint64_t key = stream_key(seed, 0xbb, (uint64_t)root, BCAST_SIZE);
    uint64_t bad;

    if (me == root)
        pib_stream_fill(buf, BCAST_SIZE, key);
    else
        memset(buf, 0xa5, BCAST_SIZE);
    MPI_Bcast(buf, BCAST_SIZE, MPI_BYTE, root, MPI_COMM_WORLD);
    bad = check("broadcast", me, root, buf, want, BCAST_SIZE, key);
    free(want);
    free(buf);
    return bad;
}

static uint64_t alltoall(uint64_t seed, int me, int n) {
    size_t block = ALLTOALL_COUNT * sizeof(uint64_t);
    uint8_t *out = alloc_or_abort(block * (size_t)n);
    uint8_t *in = alloc_or_abort(block * (size_t)n);
    uint8_t *want = alloc_or_abort(block);
    uint64_t bad = 0;

    for (int to = 0; to < n; to++)
        pib_stream_fill(out + block * (size_t)to, block,
                        stream_key(seed, 0xcc, (uint64_t)me, (uint64_t)to));
    memset(in, 0xa5, block * (size_t)n);
    MPI_Alltoall(out, ALLTOALL_COUNT, MPI_UINT64_T, in, ALLTOALL_COUNT, MPI_UINT64_T,
                 MPI_COMM_WORLD);
    for (int from = 0; from < n; from++)
        bad += check("alltoall block", me, from, in + block * (size_t)from, want, block,
                     stream_key(seed, 0xcc, (uint64_t)from, (uint64_t)me));
    free(want);
    free(in);
    free(out);
    return bad;
}

static uint64_t sum_over_ranks(uint64_t mine) {
    uint64_t all = 0;

    MPI_Allreduce(&mine, &all, 1, MPI_UINT64_T, MPI_SUM, MPI_COMM_WORLD);
    return all;
}

/* Where the ranks run: rank 0 prints "rank@host" for every rank. */
static void show_placement(int me, int n) {
    char name[MPI_MAX_PROCESSOR_NAME] = "";
    char *all = NULL;
    int len;

    MPI_Get_processor_name(name, &len);
    if (me == 0)
        all = alloc_or_abort((size_t)n * MPI_MAX_PROCESSOR_NAME);
    MPI_Gather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, all, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, 0,
               MPI_COMM_WORLD);
    if (me == 0) {
        printf("ranks:");
        for (int r = 0; r < n; r++)
            printf(" %d@%s", r, all + (size_t)r * MPI_MAX_PROCESSOR_NAME);
        printf("\n");
        free(all);
    }
}

static int run_check(uint64_t seed, int me, int n) {
    struct totals t = {0};
    uint64_t reduce_bad, bcast_bad, a2a_bad, all;
    double start = MPI_Wtime();

    show_placement(me, n);
    point_to_point(seed, me, n, &t);
    t.messages = sum_over_ranks(t.messages);
    t.bytes = sum_over_ranks(t.bytes);
    t.errors = sum_over_ranks(t.errors);
    reduce_bad = sum_over_ranks(allreduce(seed, me, n));
    bcast_bad = sum_over_ranks(broadcast(seed, me, n));
    a2a_bad = sum_over_ranks(alltoall(seed, me, n));
    all = t.errors + reduce_bad + bcast_bad + a2a_bad;
    if (me == 0) {
        printf("point-to-point: %" PRIu64 " messages of 1 B to 4 MiB, %" PRIu64 " bytes, %" PRIu64
               " bytes wrong\n",
               t.messages, t.bytes, t.errors);
        printf("allreduce: %d x uint64 sums, %" PRIu64 " wrong\n", REDUCE_COUNT, reduce_bad);
        printf("broadcast: %u bytes from rank %d, %" PRIu64 " bytes wrong\n", BCAST_SIZE, n - 1,
               bcast_bad);
        printf("alltoall: %d blocks of %zu bytes, %" PRIu64 " bytes wrong\n", n * n,
               ALLTOALL_COUNT * sizeof(uint64_t), a2a_bad);
        printf("pib-mpi-check: %d ranks, seed %" PRIu64 ", %.1f s: %s\n", n, seed,
               MPI_Wtime() - start, all ? "ERRORS" : "every byte checked, all equal");
    }
    return all ? 1 : 0;
}

/* Half the round trip at 8 B, and one-way bandwidth at 1 MiB. */
static int run_pingpong(int me, int n, int iters) {
    static const uint32_t pp_sizes[] = {8, 1u << 20};
    uint8_t *buf = alloc_or_abort(1u << 20);

    if (n < 2) {
        if (me == 0)
            fprintf(stderr, "--pingpong needs 2 ranks\n");
        return 1;
    }
    memset(buf, 0x5a, 1u << 20);
    for (size_t s = 0; s < 2; s++) {
        int len = (int)pp_sizes[s];
        double start;

        MPI_Barrier(MPI_COMM_WORLD);
        start = MPI_Wtime();
        for (int i = 0; i < iters && me < 2; i++) {
            if (me == 0) {
                MPI_Send(buf, len, MPI_BYTE, 1, TAG_PINGPONG, MPI_COMM_WORLD);
                MPI_Recv(buf, len, MPI_BYTE, 1, TAG_PINGPONG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            } else {
                MPI_Recv(buf, len, MPI_BYTE, 0, TAG_PINGPONG, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
                MPI_Send(buf, len, MPI_BYTE, 0, TAG_PINGPONG, MPI_COMM_WORLD);
            }
        }
        if (me == 0) {
            double half = (MPI_Wtime() - start) / iters / 2;

            printf("pingpong %d B: %d round trips, %.1f us one way, %.2f MB/s\n", len, iters,
                   half * 1e6, len / half / 1e6);
        }
    }
    free(buf);
    return 0;
}

int main(int argc, char **argv) {
    char version[MPI_MAX_LIBRARY_VERSION_STRING];
    uint64_t seed = 1;
    int me, n, len, pingpong = 0, iters = 100, status;

    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &me);
    MPI_Comm_size(MPI_COMM_WORLD, &n);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--seed") && i + 1 < argc) {
            seed = strtoull(argv[++i], NULL, 0);
        } else if (!strcmp(argv[i], "--pingpong")) {
            pingpong = 1;
            if (i + 1 < argc && argv[i + 1][0] != '-')
                iters = atoi(argv[++i]);
        } else {
            if (me == 0)
                fprintf(stderr, "usage: %s [--seed N] | --pingpong [ITERS]\n", argv[0]);
            MPI_Finalize();
            return 2;
        }
    }
    if (iters < 1)
        iters = 1;
    MPI_Get_library_version(version, &len);
    if (me == 0)
        printf("library: %.*s\n", (int)strcspn(version, "\n"), version);
    status = pingpong ? run_pingpong(me, n, iters) : run_check(seed, me, n);
    MPI_Finalize();
    return status;
}
