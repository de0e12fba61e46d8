/*
 * testutil.c - helpers shared by the loopback cmocka tests.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>

#include <cmocka.h>

#include <arpa/inet.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "ddp/shard.h"
#include "tests/unit/testutil.h"

int testutil_free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(fd >= 0);
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&a, sizeof(a)), 0);
    socklen_t sl = sizeof(a);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&a, &sl), 0);
    close(fd);
    return ntohs(a.sin_port);
}

double testutil_input(uint64_t s, int r, size_t i)
{
    uint64_t x = s * 0x9E3779B97F4A7C15ull ^ ((uint64_t)r << 40) ^ (uint64_t)i;
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    x ^= x >> 33;
    return (double)(x >> 11) / (double)(1ull << 52) - 1.0;
}

void testutil_fill(uint64_t seed, int rank, void *buf, size_t count, enum comm_dtype dt)
{
    for (size_t i = 0; i < count; i++) {
        if (dt == COMM_F32)
            ((float *)buf)[i] = (float)testutil_input(seed, rank, i);
        else
            ((double *)buf)[i] = testutil_input(seed, rank, i);
    }
}

int testutil_check_sum(uint64_t seed, int world, const void *buf, size_t count, enum comm_dtype dt,
                       struct ddp_err *err)
{
    return testutil_check_sum_at(seed, world, buf, 0, count, dt, err);
}

int testutil_check_sum_at(uint64_t seed, int world, const void *buf, size_t first, size_t count,
                          enum comm_dtype dt, struct ddp_err *err)
{
    for (size_t j = 0; j < count; j++) {
        size_t i = first + j;
        double ref = 0, mag = 0;
        for (int q = 0; q < world; q++) {
            double x = testutil_input(seed, q, i);
            if (dt == COMM_F32)
                x = (double)(float)x;
            ref += x;
            mag += fabs(x);
        }
        double got = dt == COMM_F32 ? (double)((const float *)buf)[j] : ((const double *)buf)[j];
        double tol = (dt == COMM_F32 ? 1e-5 : 1e-12) * (1.0 + mag);
        if (!(fabs(got - ref) <= tol))
            return err_set(err, DDP_EINTERNAL,
                           "W=%d count %zu %s element %zu: got %.17g, reference %.17g", world,
                           count, dt == COMM_F32 ? "f32" : "f64", i, got, ref);
    }
    return 0;
}

/* 0 when the n bytes at p are all zero (the padding), else the error naming what. */
static int check_zero(const void *p, size_t n, const char *what, size_t nel, struct ddp_err *err)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        if (b[i] != 0)
            return err_set(err, DDP_EINTERNAL, "N=%zu: %s padding byte %zu is %u, not 0", nel, what,
                           i, b[i]);
    return 0;
}

/* One N and dtype of testutil_sharded_sweep. */
static int sharded_case(struct comm *c, uint64_t seed, size_t N, enum comm_dtype dt, int registered,
                        uint64_t *digest, struct ddp_err *err)
{
    int W = comm_world_size(c), rank = comm_rank(c), rc = 0;
    size_t es = dt == COMM_F64 ? sizeof(double) : sizeof(float);
    struct shard sh;
    if ((rc = shard_of(N, W, rank, &sh, err)) < 0)
        return rc;
    size_t fb = sh.padded * es, sb = sh.count * es;
    /* The full-size buffers: private (+1: never malloc(0)), or registered, at the same
     * offsets of one comm_alloc_buffer block on every rank. */
    size_t slot = (fb + 1 + 63) & ~(size_t)63;
    char *block = NULL;
    if (registered && (rc = comm_alloc_buffer(c, 7 * slot, (void **)&block, err)) < 0)
        return rc;
    char *full = NULL, *inpl = NULL, *gath = NULL, *gin = NULL, *a3 = NULL, *g3 = NULL, *ar = NULL;
    char **fulls[7] = {&full, &inpl, &gath, &gin, &a3, &g3, &ar};
    for (int q = 0; q < 7; q++) {
        *fulls[q] = block ? block + (size_t)q * slot : malloc(fb + 1);
        memset(*fulls[q], 0, fb + 1);
    }
    char *keep = calloc(1, fb + 1), *shard = malloc(sb + 1), *s3 = malloc(sb + 1);
    testutil_fill(seed, rank, full, N, dt);
    memcpy(keep, full, fb);
    memcpy(inpl, full, fb);
    memcpy(a3, full, fb);
    memcpy(ar, full, fb);
    memset(shard, 0x7f, sb + 1);
    memset(gath, 0x7f, fb + 1);
    memset(gin, 0x7f, fb + 1);
    memset(g3, 0x7f, fb + 1);
    const char *step = "reduce-scatter";
    /* Reduce-scatter out of place: the own shard's sums, zero padding, in untouched. */
    rc = comm_reduce_scatter(c, full, shard, sh.count, dt, err);
    if (rc == 0)
        rc = testutil_check_sum_at(seed, W, shard, sh.offset, sh.valid, dt, err);
    if (rc == 0)
        rc = check_zero(shard + sh.valid * es, sb - sh.valid * es, "reduce-scatter", N, err);
    if (rc == 0 && memcmp(full, keep, fb) != 0)
        rc = err_set(err, DDP_EINTERNAL, "N=%zu: reduce-scatter wrote its input", N);
    /* In place: the same bits in the own shard, the other shards untouched. */
    if (rc == 0)
        step = "in-place reduce-scatter";
    if (rc == 0 &&
        (rc = comm_reduce_scatter(c, inpl, inpl + sh.offset * es, sh.count, dt, err)) == 0) {
        if (memcmp(inpl + sh.offset * es, shard, sb) != 0)
            rc = err_set(err, DDP_EINTERNAL, "N=%zu: in-place reduce-scatter differs", N);
        else if (memcmp(inpl, keep, sh.offset * es) != 0 ||
                 memcmp(inpl + sh.offset * es + sb, keep + sh.offset * es + sb,
                        fb - sh.offset * es - sb) != 0)
            rc =
                err_set(err, DDP_EINTERNAL, "N=%zu: in-place reduce-scatter wrote other shards", N);
    }
    /* All-gather out of place: every shard's sums, bit for bit what each rank reduced. */
    if (rc == 0)
        step = "all-gather";
    if (rc == 0 && (rc = comm_allgather(c, shard, gath, sh.count, dt, err)) == 0) {
        rc = testutil_check_sum_at(seed, W, gath, 0, N, dt, err);
        if (rc == 0)
            rc = check_zero(gath + N * es, fb - N * es, "all-gather", N, err);
        if (rc == 0 && memcmp(gath + sh.offset * es, shard, sb) != 0)
            rc = err_set(err, DDP_EINTERNAL, "N=%zu: all-gather changed the own shard", N);
        if (rc == 0 && gath[fb] != 0x7f)
            rc = err_set(err, DDP_EINTERNAL, "N=%zu: all-gather wrote past its output", N);
    }
    /* In place. */
    if (rc == 0)
        step = "in-place all-gather";
    if (rc == 0) {
        memcpy(gin + sh.offset * es, shard, sb);
        rc = comm_allgather(c, gin + sh.offset * es, gin, sh.count, dt, err);
        if (rc == 0 && memcmp(gin, gath, fb) != 0)
            rc = err_set(err, DDP_EINTERNAL, "N=%zu: in-place all-gather differs", N);
    }
    /* Async: reduce-scatter, all-reduce, all-gather in flight together, waited in order. */
    if (rc == 0)
        step = "async";
    if (rc == 0) {
        struct comm_work *w[3] = {NULL, NULL, NULL};
        int started = 0;
        rc = comm_reduce_scatter_async(c, a3, s3, sh.count, dt, &w[0], err);
        started += rc == 0;
        if (rc == 0 && (rc = comm_allreduce_async(c, ar, sh.padded, dt, &w[1], err)) == 0)
            started++;
        /* The gathered input is the out-of-place result: s3 is not final before the wait. */
        if (rc == 0 && (rc = comm_allgather_async(c, shard, g3, sh.count, dt, &w[2], err)) == 0)
            started++;
        for (int q = 0; q < started; q++) {
            struct ddp_err e2;
            int r2 = comm_wait(c, w[q], &e2);
            if (r2 < 0 && rc == 0) {
                rc = r2;
                *err = e2;
            }
        }
        if (rc == 0 && memcmp(s3, shard, sb) != 0)
            rc = err_set(err, DDP_EINTERNAL, "N=%zu: async reduce-scatter differs", N);
        if (rc == 0 && memcmp(g3, gath, fb) != 0)
            rc = err_set(err, DDP_EINTERNAL, "N=%zu: async all-gather differs", N);
        if (rc == 0)
            rc = testutil_check_sum_at(seed, W, ar, 0, N, dt, err);
    }
    if (rc < 0 && !strstr(err->msg, "N=")) {
        char why[DDP_ERR_MSG_MAX];
        snprintf(why, sizeof(why), "%s", err->msg);
        err_set(err, rc, "N=%zu %s (%s): %.200s", N, step, dt == COMM_F64 ? "f64" : "f32", why);
    }
    *digest = testutil_fnv(gath, fb, *digest);
    for (int q = 0; q < 7 && !block; q++)
        free(*fulls[q]);
    comm_free_buffer(c, block);
    free(keep);
    free(shard);
    free(s3);
    return rc;
}

int testutil_sharded_sweep(struct comm *c, uint64_t seed, const size_t *ns, size_t nn,
                           int registered, uint64_t *digest, struct ddp_err *err)
{
    int rc = 0;
    uint64_t d = 0xcbf29ce484222325ull;
    for (size_t k = 0; k < nn && rc == 0; k++)
        for (int f = 0; f < 2 && rc == 0; f++)
            rc = sharded_case(c, seed + k * 2 + (uint64_t)f, ns[k], f ? COMM_F64 : COMM_F32,
                              registered, &d, err);
    *digest = d;
    return rc;
}

uint64_t testutil_fnv(const void *p, size_t n, uint64_t h)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++)
        h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

void testutil_kill_all(pid_t *pids, int n)
{
    for (int i = 0; i < n; i++)
        if (pids[i] > 0) {
            kill(pids[i], SIGKILL);
            waitpid(pids[i], NULL, 0);
            pids[i] = 0;
        }
}
