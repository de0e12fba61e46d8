/*
 * test_comm_cpu.c - the CPU ring backend (forced over TCP; test_comm_shm.c covers the
 * shared-memory and hierarchical transports): all-reduce against a reference sum for many counts
 * and world sizes (ranks as threads on 127.0.0.1), async FIFO issue, broadcast from every
 * root, barrier, world size 1, backend selection, a collective mismatch; reduce-scatter and
 * all-gather (testutil_sharded_sweep: sums, padding, in and out of place, async) at W = 1..5
 * and 8, their mismatch, a SIGKILLed peer (peer lost) and a SIGSTOPped one (timeout) during
 * each; and (heavy, run with
 * the argument "heavy") 10^7 elements and peers in forked processes that are SIGKILLed or
 * SIGSTOPped mid-collective.
 *
 * Tolerances: inputs are uniform in [-1, 1); an f32 result must be within
 * 1e-5 * (1 + sum |x_r|) of the sum computed in double, an f64 result within
 * 1e-12 * (1 + sum |x_r|). Every rank must also end with bit-identical buffers.
 *
 * Why one file of ~890 lines: one cmocka binary per module (docs/style.md), and the ring,
 * recursive doubling, peer set-up and fault notices share the threaded-rank harness at the
 * top.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <netinet/in.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/timeutil.h"
#include "ddp/comm.h"
#include "ddp/rdzv.h"
#include "libddp/comm/comm_cpu_internal.h"
#include "libddp/comm/fault.h"
#include "libddp/comm/peer.h"
#include "tests/unit/testutil.h"

/* ---- ranks as threads ---- */

struct ring_job;
typedef int (*rank_body)(struct ring_job *job, int rank, struct comm *c, struct ddp_err *err);

struct ring_job {
    const char *addr;       /* MASTER_ADDR; NULL = 127.0.0.1 */
    const char *local_addr; /* comm_opts.local_addr; NULL = default */
    int local_addr_rank;    /* with local_addr: 0 = every rank's, r > 0 = rank r's only */
    int port, world;
    size_t chunk;
    int64_t timeout_ms;
    rank_body body;
    void *ctx;
    uint64_t *digest;      /* per rank, written by bodies that compare results across ranks */
    struct rdzv *rdzv[64]; /* each rank's store while its body runs */
    int rc[64];
    char msg[64][DDP_ERR_MSG_MAX];
};

struct rank_thread {
    struct ring_job *job;
    int rank;
};

static void *rank_thread_main(void *p)
{
    struct rank_thread *t = p;
    struct ring_job *job = t->job;
    struct rdzv *r = NULL;
    struct comm *c = NULL;
    struct ddp_err err;
    err_clear(&err);
    int rc = rdzv_open(job->addr ? job->addr : "127.0.0.1", job->port, t->rank, job->world,
                       "secret", 20000, &r, &err);
    if (rc == 0) {
        struct comm_opts o;
        comm_opts_default(&o);
        o.chunk_bytes = job->chunk;
        o.force_tcp = 1; /* this file tests the TCP ring; test_comm_shm the shared memory */
        o.timeout_ms = job->timeout_ms ? job->timeout_ms : 20000;
        if (job->local_addr && (!job->local_addr_rank || job->local_addr_rank == t->rank))
            o.local_addr = job->local_addr;
        rc = comm_new("cpu", r, t->rank, job->world, &o, &c, &err);
    }
    job->rdzv[t->rank] = r;
    if (rc == 0)
        rc = job->body(job, t->rank, c, &err);
    comm_free(c);
    rdzv_close(r);
    job->rc[t->rank] = rc;
    memcpy(job->msg[t->rank], err.msg, sizeof(err.msg));
    return NULL;
}

/* Runs body on world ranks (threads); every rank's result lands in job->rc/msg. The port
 * testutil_free_port() found free may be taken again before rank 0 binds it (tests run in
 * parallel): then the whole run goes again on another port, at most 3 times. */
static void run_ring(struct ring_job *job)
{
    static pthread_t th[64];
    static struct rank_thread rt[64];
    for (int attempt = 0; attempt < 3; attempt++) {
        memset(job->rc, 0, sizeof(job->rc));
        memset(job->msg, 0, sizeof(job->msg));
        job->port = testutil_free_port();
        for (int i = 0; i < job->world; i++) {
            rt[i] = (struct rank_thread){.job = job, .rank = i};
            assert_int_equal(pthread_create(&th[i], NULL, rank_thread_main, &rt[i]), 0);
        }
        for (int i = 0; i < job->world; i++)
            pthread_join(th[i], NULL);
        if (!(job->rc[0] == DDP_EEXIST && strstr(job->msg[0], "already in use")))
            return;
    }
}

static void expect_all_ok(const struct ring_job *job);

/* Sub-groups (hybrid sharding's): 6 ranks as 2 "nodes" of 3; one comm per node (tag 1 +
 * node) and one per local rank across the nodes (tag 1 + local), made by the same calls on
 * every rank; each sums its own members only, and the world comm still works after. */
static int subgroup_body(struct ring_job *job, int rank, struct comm *c, struct ddp_err *err)
{
    int node = rank / 3, local = rank % 3, rc;
    struct comm *nc = NULL, *xc = NULL;
    struct comm_opts o;
    comm_opts_default(&o);
    o.force_tcp = 1;
    o.timeout_ms = 20000;
    o.group_tag = (uint32_t)(1 + node);
    if ((rc = comm_new("cpu", job->rdzv[rank], local, 3, &o, &nc, err)) != 0)
        return rc;
    o.group_tag = (uint32_t)(1 + local);
    if ((rc = comm_new("cpu", job->rdzv[rank], node, 2, &o, &xc, err)) != 0)
        goto out;
    float v[1000], x[1000], w[1000];
    for (int i = 0; i < 1000; i++)
        v[i] = x[i] = w[i] = (float)(rank + 1) + (float)i;
    if ((rc = comm_allreduce(nc, v, 1000, COMM_F32, err)) != 0 ||
        (rc = comm_allreduce(xc, x, 1000, COMM_F32, err)) != 0 ||
        (rc = comm_allreduce(c, w, 1000, COMM_F32, err)) != 0)
        goto out;
    /* node: ranks 3n..3n+2; cross: ranks l and 3 + l; world: all six */
    for (int i = 0; i < 1000 && rc == 0; i++) {
        float want_n = (float)(3 * (3 * node + 2) + 3 * i), want_x = (float)(2 * local + 5 + 2 * i);
        float want_w = (float)(21 + 6 * i);
        if (v[i] != want_n || x[i] != want_x || w[i] != want_w)
            rc = err_set(err, DDP_EINTERNAL,
                         "rank %d element %d: node %g (want %g), cross %g "
                         "(want %g), world %g (want %g)",
                         rank, i, v[i], want_n, x[i], want_x, w[i], want_w);
    }
out:
    comm_free(xc);
    comm_free(nc);
    return rc;
}

static void test_comm_cpu_subgroups(void **state)
{
    (void)state;
    struct ring_job job = {.world = 6, .body = subgroup_body};
    run_ring(&job);
    expect_all_ok(&job);
}

static void expect_all_ok(const struct ring_job *job)
{
    for (int i = 0; i < job->world; i++)
        if (job->rc[i] != 0)
            fail_msg("W=%d rank %d failed: %d %s", job->world, i, job->rc[i], job->msg[i]);
}

static int small_sum_body_3(struct ring_job *job, int rank, struct comm *c, struct ddp_err *err)
{
    (void)job;
    double x[5] = {rank, 1, 2, 3, 4};
    int rc = comm_allreduce(c, x, 5, COMM_F64, err);
    if (rc == 0 && (x[0] != 3 || x[1] != 3 || x[4] != 12))
        rc = err_set(err, DDP_EINTERNAL, "wrong sum");
    return rc;
}

/* The counts of the correctness sweep for world size w (small: up to 1009 only). */
static size_t sweep_counts(int w, int small, size_t *out)
{
    size_t base[] = {0, 1, 2, 3, 7, 13, 97, 1009, 65537, 100003};
    size_t n = 0;
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
        if (!small || base[i] <= 1009)
            out[n++] = base[i];
    if (w > 1)
        out[n++] = (size_t)w - 1;
    out[n++] = (size_t)w + 1;
    out[n++] = (size_t)w * 5;
    return n;
}

/* For each count: an f32 and an f64 all-reduce issued together (async), waited in order. */
static int sweep_body(struct ring_job *job, int rank, struct comm *c, struct ddp_err *err)
{
    size_t counts[16];
    size_t n = sweep_counts(job->world, job->ctx != NULL, counts);
    uint64_t digest = 0xcbf29ce484222325ull;
    int rc = 0;
    for (size_t k = 0; rc == 0 && k < n; k++) {
        size_t cnt = counts[k];
        float *a = malloc(cnt * sizeof(float) + 1);
        double *b = malloc(cnt * sizeof(double) + 1);
        testutil_fill(k * 2, rank, a, cnt, COMM_F32);
        testutil_fill(k * 2 + 1, rank, b, cnt, COMM_F64);
        struct comm_work *wa = NULL, *wb = NULL;
        rc = comm_allreduce_async(c, a, cnt, COMM_F32, &wa, err);
        if (rc == 0) {
            rc = comm_allreduce_async(c, b, cnt, COMM_F64, &wb, err);
            int r1 = comm_wait(c, wa, err);
            if (rc == 0) {
                int r2 = comm_wait(c, wb, err);
                rc = r1 ? r1 : r2;
            }
        }
        if (rc == 0)
            rc = testutil_check_sum(k * 2, job->world, a, cnt, COMM_F32, err);
        if (rc == 0)
            rc = testutil_check_sum(k * 2 + 1, job->world, b, cnt, COMM_F64, err);
        digest = testutil_fnv(a, cnt * sizeof(float), digest);
        digest = testutil_fnv(b, cnt * sizeof(double), digest);
        free(a);
        free(b);
    }
    job->digest[rank] = digest;
    return rc;
}

static void run_sweep_small(int world, size_t chunk, int small)
{
    struct ring_job job;
    memset(&job, 0, sizeof(job));
    uint64_t digest[64] = {0};
    static int small_flag;
    job.ctx = small ? &small_flag : NULL;
    job.timeout_ms = 60000;
    job.world = world;
    job.chunk = chunk;
    job.body = sweep_body;
    job.digest = digest;
    run_ring(&job);
    expect_all_ok(&job);
    for (int i = 1; i < world; i++)
        if (digest[i] != digest[0])
            fail_msg("W=%d: rank %d's results differ from rank 0's", world, i);
}

static void run_sweep(int world, size_t chunk)
{
    run_sweep_small(world, chunk, 0);
}

static void test_comm_cpu_allreduce_w1_to_4(void **state)
{
    (void)state;
    for (int w = 1; w <= 4; w++)
        run_sweep(w, 0);
}

static void test_comm_cpu_allreduce_w5_to_8(void **state)
{
    (void)state;
    for (int w = 5; w <= 8; w++)
        run_sweep(w, 0);
}

static void test_comm_cpu_allreduce_small_chunks(void **state)
{
    (void)state;
    /* Chunks of 40 and 8 bytes: many pipeline stages per segment, partial last chunks. */
    run_sweep(3, 40);
    run_sweep(2, 8);
}

/* ---- reduce-scatter and all-gather (testutil_sharded_sweep) ---- */

/* Buffer lengths N (elements) of the sharded sweep at world size w; job->ctx != NULL: the
 * small ones only. Around multiples of w (padding of 0, 1 and w - 1 elements), fewer
 * elements than ranks, and sizes of many chunks. */
static size_t sharded_counts(int w, int small, size_t *out)
{
    size_t uw = (size_t)w, n = 0;
    size_t base[] = {0, 1, 2, 3, uw - 1, uw, uw + 1, 5 * uw, 13, 97, 1009, 65537, 100003};
    for (size_t i = 0; i < sizeof(base) / sizeof(base[0]); i++)
        if (!small || base[i] <= 1009)
            out[n++] = base[i];
    return n;
}

static int sharded_body(struct ring_job *job, int rank, struct comm *c, struct ddp_err *err)
{
    size_t ns[16];
    size_t nn = sharded_counts(job->world, job->ctx != NULL, ns);
    return testutil_sharded_sweep(c, 500 + (uint64_t)job->world, ns, nn, 0, &job->digest[rank],
                                  err);
}

static void run_sharded(int world, size_t chunk, int small)
{
    struct ring_job job;
    memset(&job, 0, sizeof(job));
    uint64_t digest[64] = {0};
    static int small_flag;
    job.ctx = small ? &small_flag : NULL;
    job.timeout_ms = 60000;
    job.world = world;
    job.chunk = chunk;
    job.body = sharded_body;
    job.digest = digest;
    run_ring(&job);
    expect_all_ok(&job);
    for (int i = 1; i < world; i++)
        if (digest[i] != digest[0])
            fail_msg("W=%d: rank %d's gathered buffers differ from rank 0's", world, i);
}

/* Reduce-scatter and all-gather over the TCP ring, W = 1..4: sums, padding, in place and
 * out of place, async with an all-reduce between them. */
static void test_comm_cpu_sharded_w1_to_4(void **state)
{
    (void)state;
    for (int w = 1; w <= 4; w++)
        run_sharded(w, 0, 0);
}

/* Many pipeline chunks per shard (40 and 8 bytes), and W = 5 and 8, where the reduce-scatter's
 * two scratch segments are reused while the ring still forwards from them. */
static void test_comm_cpu_sharded_small_chunks_and_w5_w8(void **state)
{
    (void)state;
    run_sharded(3, 40, 0);
    run_sharded(2, 8, 1);
    run_sharded(5, 40, 1);
    run_sharded(5, 0, 0);
    run_sharded(8, 0, 1);
}

/* Rank 1 issues an all-gather where the others issue a reduce-scatter of the same bytes:
 * a collective mismatch on every rank (the finder's notice tells the others), fast, never
 * mixed data. */
static int sharded_mismatch_body(struct ring_job *job, int rank, struct comm *c,
                                 struct ddp_err *err)
{
    (void)job;
    float in[12] = {0}, out[4] = {0};
    if (rank == 1)
        return comm_allgather(c, out, in, 4, COMM_F32, err);
    return comm_reduce_scatter(c, in, out, 4, COMM_F32, err);
}

static void test_comm_cpu_sharded_mismatch_detected(void **state)
{
    (void)state;
    struct ring_job job;
    memset(&job, 0, sizeof(job));
    job.world = 3;
    job.timeout_ms = 10000;
    job.body = sharded_mismatch_body;
    int64_t t0 = time_mono_ms();
    run_ring(&job);
    for (int i = 0; i < 3; i++)
        if (job.rc[i] != DDP_EINTERNAL || !strstr(job.msg[i], "collective mismatch"))
            fail_msg("rank %d: %d '%s', want a collective mismatch", i, job.rc[i], job.msg[i]);
    assert_true(time_mono_ms() - t0 < 10000);
}

static int bcast_body(struct ring_job *job, int rank, struct comm *c, struct ddp_err *err)
{
    size_t sizes[] = {0, 1, 3, 4096, 1000003};
    int rc = 0;
    for (int root = 0; rc == 0 && root < job->world; root++) {
        for (size_t k = 0; rc == 0 && k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            size_t n = sizes[k];
            unsigned char *b = malloc(n + 1);
            for (size_t i = 0; i < n; i++)
                b[i] = rank == root ? (unsigned char)(i * 7 + (size_t)root) : 0xEE;
            rc = comm_broadcast(c, b, n, root, err);
            for (size_t i = 0; rc == 0 && i < n; i++)
                if (b[i] != (unsigned char)(i * 7 + (size_t)root))
                    rc = err_set(err, DDP_EINTERNAL, "broadcast root %d size %zu byte %zu wrong",
                                 root, n, i);
            free(b);
        }
    }
    return rc;
}

/* MASTER_ADDR ::1: the store and the ring over IPv6 ("[::1]:port" addresses). */
static void test_comm_cpu_ipv6_loopback(void **state)
{
    (void)state;
    int fd = socket(AF_INET6, SOCK_STREAM, 0);
    struct sockaddr_in6 a;
    memset(&a, 0, sizeof(a));
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    if (!ok)
        skip(); /* no IPv6 loopback here */
    struct ring_job job;
    memset(&job, 0, sizeof(job));
    job.addr = "::1";
    job.world = 3;
    job.body = small_sum_body_3;
    run_ring(&job);
    expect_all_ok(&job);
}

/* opts.local_addr is what a rank publishes: a good one works, a wrong one fails in time. */
static void test_comm_cpu_local_addr(void **state)
{
    (void)state;
    struct ring_job job;
    memset(&job, 0, sizeof(job));
    job.local_addr = "127.0.0.1";
    job.world = 3;
    job.body = small_sum_body_3;
    run_ring(&job);
    expect_all_ok(&job);

    memset(&job, 0, sizeof(job));
    job.local_addr = "127.0.0.1x"; /* does not resolve */
    job.world = 3;
    job.timeout_ms = 2000;
    job.body = small_sum_body_3;
    run_ring(&job);
    for (int i = 0; i < 3; i++)
        if (job.rc[i] == 0)
            fail_msg("rank %d formed a ring with an unreachable address", i);

    /* One longer than any address: refused with a clear error, never cut short. */
    char longaddr[128];
    memset(longaddr, 'a', sizeof(longaddr) - 1);
    longaddr[sizeof(longaddr) - 1] = '\0';
    memset(&job, 0, sizeof(job));
    job.local_addr = longaddr;
    job.local_addr_rank = 1; /* rank 0 (the store) waits for rank 1's address in vain */
    job.world = 2;
    job.timeout_ms = 2000;
    job.body = small_sum_body_3;
    run_ring(&job);
    if (job.rc[1] != DDP_EINVAL || !strstr(job.msg[1], "too long"))
        fail_msg("rank 1 with a %zu-byte local address: %d '%s'", strlen(longaddr), job.rc[1],
                 job.msg[1]);
    if (job.rc[0] == 0)
        fail_msg("rank 0 formed a ring with a peer whose local address is too long");
}

/* connect()'s errno to host:port (blocking: loopback answers at once), 0 on success. */
static int connect_errno(const char *host, int port)
{
    int fd = socket(strchr(host, ':') ? AF_INET6 : AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    assert_true(fd >= 0);
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t sl = 0;
    if (strchr(host, ':')) {
        struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&ss;
        a6->sin6_family = AF_INET6;
        assert_int_equal(inet_pton(AF_INET6, host, &a6->sin6_addr), 1);
        a6->sin6_port = htons((uint16_t)port);
        sl = sizeof(*a6);
    } else {
        struct sockaddr_in *a4 = (struct sockaddr_in *)&ss;
        a4->sin_family = AF_INET;
        assert_int_equal(inet_pton(AF_INET, host, &a4->sin_addr), 1);
        a4->sin_port = htons((uint16_t)port);
        sl = sizeof(*a4);
    }
    int rc = connect(fd, (struct sockaddr *)&ss, sl) == 0 ? 0 : errno;
    close(fd);
    return rc;
}

/* Listens as a ring rank with local address la ("" = the store connection's) and checks that
 * the port answers at the address published, and not at `other`. */
static void check_listener_address(struct rdzv *r, const char *la, const char *other)
{
    struct comm c;
    memset(&c, 0, sizeof(c));
    snprintf(c.local_addr, sizeof(c.local_addr), "%s", la);
    struct peer_listener pl;
    struct ddp_err err;
    if (peer_listen(&c, r, la[0] ? "bind/la" : "bind/route", 4, "ring", &pl, &err) != 0)
        fail_msg("peer_listen with local address '%s': %s", la, err.msg);
    struct peer_addr pa;
    assert_int_equal(
        peer_fetch(&c, r, la[0] ? "bind/la" : "bind/route", 0, time_deadline_ms(1000), &pa, &err),
        0);
    char route[NET_ADDR_MAX];
    assert_int_equal(rdzv_local_host(r, route, sizeof(route)), 0);
    assert_string_equal(pa.host, la[0] ? la : route);
    assert_int_equal(connect_errno(pa.host, pa.port), 0);
    if (strcmp(pa.host, other) != 0)
        assert_int_equal(connect_errno(other, pa.port), ECONNREFUSED);
    peer_listener_close(&pl);
}

/* A rank's ring port listens at the address it publishes, not on every address (all of
 * 127.0.0.0/8 is this host's, so one on every address would answer at 127.0.0.5 too), and a
 * ring still forms with the store and the listeners on other loopback addresses. */
static void test_comm_cpu_listens_on_published_address(void **state)
{
    (void)state;
    struct rdzv *r = NULL;
    struct ddp_err err;
    /* the free port may be taken again before the store binds it (tests run in parallel):
     * another one then, at most 3 times, as run_ring does */
    int rc = DDP_EEXIST;
    for (int attempt = 0; attempt < 3 && rc == DDP_EEXIST; attempt++)
        rc = rdzv_open("127.0.0.2", testutil_free_port(), 0, 1, "s", 5000, &r, &err);
    assert_int_equal(rc, 0);
    check_listener_address(r, "", "127.0.0.5");
    check_listener_address(r, "127.0.0.3", "127.0.0.1");
    rdzv_close(r);

    struct ring_job job;
    memset(&job, 0, sizeof(job));
    job.addr = "127.0.0.2";
    job.local_addr = "127.0.0.3";
    job.world = 3;
    job.body = small_sum_body_3;
    run_ring(&job);
    expect_all_ok(&job);
    memset(&job, 0, sizeof(job));
    job.addr = "127.0.0.2";
    job.world = 3;
    job.body = small_sum_body_3;
    run_ring(&job);
    expect_all_ok(&job);
}

static void test_comm_cpu_broadcast_from_each_root(void **state)
{
    (void)state;
    for (int w = 2; w <= 4; w++) {
        struct ring_job job;
        memset(&job, 0, sizeof(job));
        job.world = w;
        job.chunk = w == 3 ? 4096 : 0;
        job.body = bcast_body;
        run_ring(&job);
        expect_all_ok(&job);
    }
}

/* Rank 0 arrives late and raises a flag first; nobody may leave the barrier without it. */
struct barrier_ctx {
    pthread_mutex_t mu;
    int flag;
};

static int barrier_body(struct ring_job *job, int rank, struct comm *c, struct ddp_err *err)
{
    struct barrier_ctx *b = job->ctx;
    int rc = 0;
    for (int round = 1; rc == 0 && round <= 3; round++) {
        if (rank == 0) {
            time_sleep_ms(30);
            pthread_mutex_lock(&b->mu);
            b->flag = round;
            pthread_mutex_unlock(&b->mu);
        }
        rc = comm_barrier(c, err);
        pthread_mutex_lock(&b->mu);
        int f = b->flag;
        pthread_mutex_unlock(&b->mu);
        if (rc == 0 && f < round)
            rc = err_set(err, DDP_EINTERNAL, "rank %d left barrier %d before rank 0 entered", rank,
                         round);
        if (rc == 0)
            rc = comm_barrier(c, err); /* keep rank 0 from raising the next flag early */
    }
    return rc;
}

static void test_comm_cpu_barrier_waits_for_all(void **state)
{
    (void)state;
    struct barrier_ctx b = {.flag = 0};
    pthread_mutex_init(&b.mu, NULL);
    struct ring_job job;
    memset(&job, 0, sizeof(job));
    job.world = 4;
    job.body = barrier_body;
    job.ctx = &b;
    run_ring(&job);
    expect_all_ok(&job);
    pthread_mutex_destroy(&b.mu);
}

static void test_comm_cpu_world_one(void **state)
{
    (void)state;
    struct comm *c = NULL;
    struct ddp_err err;
    assert_int_equal(comm_new("cpu", NULL, 0, 1, NULL, &c, &err), 0);
    assert_string_equal(comm_backend_name(c), "cpu");
    assert_int_equal(comm_rank(c), 0);
    assert_int_equal(comm_world_size(c), 1);
    float v[3] = {1.5f, -2, 3};
    struct comm_work *w = NULL;
    assert_int_equal(comm_allreduce_async(c, v, 3, COMM_F32, &w, &err), 0);
    assert_int_equal(comm_wait(c, w, &err), 0);
    assert_true(v[0] == 1.5f && v[1] == -2 && v[2] == 3);
    assert_int_equal(comm_broadcast(c, v, sizeof(v), 0, &err), 0);
    assert_int_equal(comm_barrier(c, &err), 0);
    assert_int_equal(comm_broadcast(c, v, sizeof(v), 1, &err), DDP_EINVAL);
    assert_int_equal(comm_allreduce(c, NULL, 3, COMM_F32, &err), DDP_EINVAL);
    assert_int_equal(comm_allreduce(c, v, SIZE_MAX / 4, COMM_F32, &err), DDP_EINVAL);
    assert_int_equal(comm_allreduce(c, v, 3, (enum comm_dtype)7, &err), DDP_EINVAL);
    /* Reduce-scatter and all-gather at world size 1: a copy, or nothing in place. */
    float full[3] = {1, 2, 3}, one[3] = {0};
    assert_int_equal(comm_reduce_scatter(c, full, one, 3, COMM_F32, &err), 0);
    assert_true(one[0] == 1 && one[1] == 2 && one[2] == 3);
    memset(one, 0, sizeof(one));
    assert_int_equal(comm_allgather(c, full, one, 3, COMM_F32, &err), 0);
    assert_true(one[0] == 1 && one[2] == 3);
    assert_int_equal(comm_reduce_scatter(c, full, full, 3, COMM_F32, &err), 0);
    assert_int_equal(comm_allgather_async(c, full, one, 3, COMM_F32, &w, &err), 0);
    assert_int_equal(comm_wait(c, w, &err), 0);
    assert_int_equal(comm_reduce_scatter_async(c, full, one, 0, COMM_F32, &w, &err), 0);
    assert_int_equal(comm_wait(c, w, &err), 0);
    assert_int_equal(comm_reduce_scatter(c, NULL, NULL, 0, COMM_F32, &err), 0);
    /* Refused: NULL with a count, an overlap that is not the in-place form, a bad dtype, a
     * count whose bytes overflow. */
    assert_int_equal(comm_reduce_scatter(c, NULL, one, 3, COMM_F32, &err), DDP_EINVAL);
    assert_int_equal(comm_allgather(c, full, NULL, 3, COMM_F32, &err), DDP_EINVAL);
    assert_int_equal(comm_reduce_scatter(c, full, full + 1, 2, COMM_F32, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "overlap"));
    assert_int_equal(comm_allgather(c, full + 1, full, 2, COMM_F32, &err), DDP_EINVAL);
    assert_int_equal(comm_allgather(c, full, one, 3, (enum comm_dtype)7, &err), DDP_EINVAL);
    assert_int_equal(comm_reduce_scatter(c, full, one, SIZE_MAX / 4, COMM_F32, &err), DDP_EINVAL);
    /* An un-waited work is freed by comm_free. */
    assert_int_equal(comm_allreduce_async(c, v, 3, COMM_F32, &w, &err), 0);
    comm_free(c);
    comm_free(NULL);
}

static void test_comm_cpu_backend_selection(void **state)
{
    (void)state;
    struct comm *c = NULL;
    struct ddp_err err;
    assert_int_equal(comm_new("auto", NULL, 0, 1, NULL, &c, &err), 0);
#ifndef DDP_HAVE_CUDA
    assert_string_equal(comm_backend_name(c), "cpu");
    comm_free(c);
    c = NULL;
    assert_int_equal(comm_new("nccl", NULL, 0, 1, NULL, &c, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "ddp was built without NCCL"));
#endif
    comm_free(c);
    c = NULL;
    /* a size whose rounding would wrap is refused, not a 64-byte block */
    void *huge = NULL;
    assert_int_equal(comm_alloc_buffer(NULL, SIZE_MAX - 10, &huge, &err), DDP_ETOOBIG);
    assert_null(huge);
    assert_int_equal(comm_new("mpi", NULL, 0, 1, NULL, &c, &err), DDP_EINVAL);
    assert_null(c);
    assert_int_equal(comm_new("cpu", NULL, 0, 2, NULL, &c, &err), DDP_EINVAL);
    assert_int_equal(comm_new("cpu", NULL, 2, 2, NULL, &c, &err), DDP_EINVAL);
}

/* Rank 1 issues a different count than the others: a collective mismatch on every rank,
 * never mixed data, and never "peer lost" (which would blame a live rank's node). */
static int mismatch_body(struct ring_job *job, int rank, struct comm *c, struct ddp_err *err)
{
    (void)job;
    float v[12] = {0};
    return comm_allreduce(c, v, rank == 1 ? 12 : 11, COMM_F32, err);
}

static void test_comm_cpu_mismatch_detected(void **state)
{
    (void)state;
    struct ring_job job;
    memset(&job, 0, sizeof(job));
    job.world = 3;
    job.timeout_ms = 10000;
    job.body = mismatch_body;
    int64_t t0 = time_mono_ms();
    run_ring(&job);
    for (int i = 0; i < 3; i++)
        if (job.rc[i] != DDP_EINTERNAL || !strstr(job.msg[i], "collective mismatch"))
            fail_msg("rank %d: %d '%s', want a collective mismatch", i, job.rc[i], job.msg[i]);
    assert_true(time_mono_ms() - t0 < 10000); /* failed fast, not by the timeout */
}

/* After a failure every later call returns the same error. */
static int sticky_body(struct ring_job *job, int rank, struct comm *c, struct ddp_err *err)
{
    (void)job;
    double v[4] = {0};
    int rc = comm_allreduce(c, v, rank == 0 ? 4 : 3, COMM_F64, err);
    if (rc == 0)
        return err_set(err, DDP_EINTERNAL, "mismatched all-reduce succeeded");
    struct ddp_err e2;
    int rc2 = comm_allreduce(c, v, 4, COMM_F64, &e2);
    if (rc2 != rc || strcmp(e2.msg, err->msg) != 0)
        return err_set(err, DDP_EINTERNAL, "second call gave %d '%s' after %d", rc2, e2.msg, rc);
    if (comm_barrier(c, &e2) != rc || comm_broadcast(c, v, 8, 0, &e2) != rc)
        return err_set(err, DDP_EINTERNAL, "barrier/broadcast not failed after an error");
    return 0;
}

static void test_comm_cpu_error_is_sticky(void **state)
{
    (void)state;
    struct ring_job job;
    memset(&job, 0, sizeof(job));
    job.world = 2;
    job.timeout_ms = 10000;
    job.body = sticky_body;
    run_ring(&job);
    expect_all_ok(&job);
}

/* The address of rank 0's ring port, as rank 0 published it in the store ("host:port
 * nonce"): 0, or a failure in err. */
static int ring_port_of_rank0(struct rdzv *r, struct sockaddr_in *a, struct ddp_err *err)
{
    void *v = NULL;
    size_t len = 0;
    int rc = rdzv_get(r, "comm/0/0", 20000, &v, &len, err);
    if (rc)
        return rc;
    char val[128];
    snprintf(val, sizeof(val), "%.*s", (int)len, (const char *)v);
    free(v);
    char *colon = strrchr(val, ':');
    if (!colon)
        return err_set(err, DDP_EINTERNAL, "no port in '%s'", val);
    memset(a, 0, sizeof(*a));
    a->sin_family = AF_INET;
    a->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a->sin_port = htons((uint16_t)strtol(colon + 1, NULL, 10));
    return 0;
}

/* The ring still forms when a stranger connects to a rank's ring port with a bad hello. */
static void *intruder_rank1(void *p)
{
    struct ring_job *job = p;
    struct rdzv *r = NULL;
    struct comm *c = NULL;
    struct ddp_err err;
    err_clear(&err);
    int rc = rdzv_open("127.0.0.1", job->port, 1, 2, "secret", 20000, &r, &err);
    int fd = -1;
    struct sockaddr_in a;
    if (rc == 0)
        rc = ring_port_of_rank0(r, &a, &err);
    if (rc == 0) {
        /* Connect to rank 0's ring port and send a wrong hello. */
        fd = socket(AF_INET, SOCK_STREAM, 0);
        char junk[56];
        memset(junk, 'x', sizeof(junk));
        if (connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
            send(fd, junk, sizeof(junk), MSG_NOSIGNAL) != (ssize_t)sizeof(junk))
            rc = err_set(&err, DDP_EINTERNAL, "intruder could not connect");
    }
    struct comm_opts o;
    comm_opts_default(&o);
    o.timeout_ms = 20000;
    o.force_tcp = 1;
    if (rc == 0)
        rc = comm_new("cpu", r, 1, 2, &o, &c, &err);
    float x[3] = {1, 2, 3};
    if (rc == 0)
        rc = comm_allreduce(c, x, 3, COMM_F32, &err);
    if (rc == 0 && (x[0] != 2 || x[1] != 4 || x[2] != 6))
        rc = err_set(&err, DDP_EINTERNAL, "wrong sum");
    if (rc == 0) {
        /* The stranger was dropped (or reset when rank 0 closed its listener). */
        struct timeval tv = {.tv_sec = 10};
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
        char b[4];
        if (recv(fd, b, sizeof(b), 0) > 0)
            rc = err_set(&err, DDP_EINTERNAL, "stranger got an answer");
    }
    if (fd >= 0)
        close(fd);
    comm_free(c);
    rdzv_close(r);
    job->rc[1] = rc;
    memcpy(job->msg[1], err.msg, sizeof(err.msg));
    return NULL;
}

static int small_sum_body(struct ring_job *job, int rank, struct comm *c, struct ddp_err *err)
{
    (void)job;
    (void)rank;
    float x[3] = {1, 2, 3};
    int rc = comm_allreduce(c, x, 3, COMM_F32, err);
    if (rc == 0 && (x[0] != 2 || x[1] != 4 || x[2] != 6))
        rc = err_set(err, DDP_EINTERNAL, "wrong sum");
    return rc;
}

/* Rank 0 as an ordinary rank, rank 1 as rank1_main (which also plays the outsider); both
 * must end with the right sum. */
static void run_with_outsider(void *(*rank1_main)(void *))
{
    struct ring_job job;
    memset(&job, 0, sizeof(job));
    job.world = 2;
    job.body = small_sum_body;
    job.port = testutil_free_port();
    struct rank_thread rt0 = {.job = &job, .rank = 0};
    pthread_t t0, t1;
    assert_int_equal(pthread_create(&t0, NULL, rank_thread_main, &rt0), 0);
    assert_int_equal(pthread_create(&t1, NULL, rank1_main, &job), 0);
    pthread_join(t0, NULL);
    pthread_join(t1, NULL);
    expect_all_ok(&job);
}

static void test_comm_cpu_stranger_dropped(void **state)
{
    (void)state;
    run_with_outsider(intruder_rank1);
}

/* Silent connections to rank 0's ring port (opened before the ring forms) neither hold up the
 * ring nor make it wait for each one's hello in turn: before, each held the accept loop 5 s. */
static void *silent_rank1(void *p)
{
    struct ring_job *job = p;
    struct rdzv *r = NULL;
    struct comm *c = NULL;
    struct ddp_err err;
    err_clear(&err);
    int rc = rdzv_open("127.0.0.1", job->port, 1, 2, "secret", 20000, &r, &err);
    int fds[6] = {-1, -1, -1, -1, -1, -1};
    struct sockaddr_in a;
    if (rc == 0)
        rc = ring_port_of_rank0(r, &a, &err);
    if (rc == 0) {
        for (int i = 0; i < 6 && rc == 0; i++) {
            fds[i] = socket(AF_INET, SOCK_STREAM, 0);
            if (fds[i] < 0 || connect(fds[i], (struct sockaddr *)&a, sizeof(a)) != 0)
                rc = err_set(&err, DDP_EINTERNAL, "silent peer %d could not connect", i);
        }
    }
    struct comm_opts o;
    comm_opts_default(&o);
    o.timeout_ms = 20000;
    o.force_tcp = 1;
    int64_t t0 = time_mono_ms();
    if (rc == 0)
        rc = comm_new("cpu", r, 1, 2, &o, &c, &err);
    float x[3] = {1, 2, 3};
    if (rc == 0)
        rc = comm_allreduce(c, x, 3, COMM_F32, &err);
    if (rc == 0 && (x[0] != 2 || x[1] != 4 || x[2] != 6))
        rc = err_set(&err, DDP_EINTERNAL, "wrong sum");
    if (rc == 0 && time_mono_ms() - t0 > 4000)
        rc = err_set(&err, DDP_EINTERNAL, "the ring formed only after %lld ms",
                     (long long)(time_mono_ms() - t0));
    for (int i = 0; i < 6; i++)
        if (fds[i] >= 0)
            close(fds[i]);
    comm_free(c);
    rdzv_close(r);
    job->rc[1] = rc;
    memcpy(job->msg[1], err.msg, sizeof(err.msg));
    return NULL;
}

static void test_comm_cpu_silent_connections_do_not_delay(void **state)
{
    (void)state;
    run_with_outsider(silent_rank1);
}

/* ---- failure notices carry the full rank ---- */

/* A connected loopback TCP pair: *a connects, *b is the accepted end. */
static void tcp_pair(int *a, int *b)
{
    int l = socket(AF_INET, SOCK_STREAM, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(sa);
    assert_true(l >= 0);
    assert_int_equal(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
    assert_int_equal(listen(l, 1), 0);
    assert_int_equal(getsockname(l, (struct sockaddr *)&sa, &sl), 0);
    *a = socket(AF_INET, SOCK_STREAM, 0);
    assert_true(*a >= 0);
    assert_int_equal(connect(*a, (struct sockaddr *)&sa, sizeof(sa)), 0);
    *b = accept(l, NULL, NULL);
    assert_true(*b >= 0);
    close(l);
}

/* A ring member as fault.c sees it: ring index = global rank, no shared memory. */
static void fake_member(struct comm *c, struct cpu *cpu, int rank, int world, int send_fd,
                        int recv_fd)
{
    memset(c, 0, sizeof(*c));
    memset(cpu, 0, sizeof(*cpu));
    c->rank = rank;
    c->world_size = world;
    c->opts.timeout_ms = 1000;
    c->impl = cpu;
    cpu->has_ring = 1;
    cpu->rrank = rank;
    cpu->rworld = world;
    cpu->left = (rank + world - 1) % world;
    cpu->right = (rank + 1) % world;
    cpu->send_fd = send_fd;
    cpu->recv_fd = recv_fd;
    cpu->wait_peer = -1;
    snprintf(cpu->left_name, sizeof(cpu->left_name), "left");
    snprintf(cpu->right_name, sizeof(cpu->right_name), "right");
}

/* Rank 150 of 300 gives up on rank 200 (lost) in the middle of a collective: its right
 * neighbour (urgent data, behind bytes of the collective) and its left neighbour (in-band)
 * both name rank 200, not "unknown" and not the neighbour that told them. */
static void test_comm_cpu_notice_names_high_rank(void **state)
{
    (void)state;
    int to_right, right_in, left_out, from_left;
    tcp_pair(&to_right, &right_in);  /* rank 150 -> rank 151 */
    tcp_pair(&left_out, &from_left); /* rank 149 -> rank 150 */
    struct comm c, cr, cl;
    struct cpu cpu, cpur, cpul;
    fake_member(&c, &cpu, 150, 300, to_right, from_left);
    fake_member(&cr, &cpur, 151, 300, -1, right_in);
    fake_member(&cl, &cpul, 149, 300, left_out, -1);
    char data[1000];
    memset(data, 7, sizeof(data));
    assert_int_equal(send(to_right, data, sizeof(data), 0), (ssize_t)sizeof(data));
    struct ddp_err e, er, el;
    err_set(&e, DDP_EPEER, "peer rank 200 lost during all-reduce: connection reset");
    cpu.notice = fault_notice(200, FAULT_LOST);
    fault_abort_ring(&c, &e);

    /* The right neighbour: an urgent notice, found the way the ring finds it. */
    struct pollfd p = {.fd = right_in, .events = POLLPRI};
    assert_int_equal(poll(&p, 1, 5000), 1);
    int rc = fault_urgent_notice(&cr, "all-reduce", &er);
    assert_int_equal(rc, DDP_EPEER);
    if (!strstr(er.msg, "peer rank 200 lost"))
        fail_msg("right neighbour: '%s' does not name rank 200", er.msg);
    /* The left neighbour: its send socket's reverse direction. */
    p = (struct pollfd){.fd = left_out, .events = POLLIN};
    assert_int_equal(poll(&p, 1, 5000), 1);
    rc = fault_send_failed(&cl, "all-reduce", 0, &el);
    assert_int_equal(rc, DDP_EPEER);
    if (!strstr(el.msg, "peer rank 200 lost"))
        fail_msg("left neighbour: '%s' does not name rank 200", el.msg);
    /* Every kind, up to the largest rank a comm can have. */
    const int ranks[] = {0, 62, 63, 65534, -1};
    for (size_t i = 0; i < sizeof(ranks) / sizeof(ranks[0]); i++)
        for (int k = FAULT_LOST; k <= FAULT_MISMATCH; k++) {
            uint32_t n = fault_notice(ranks[i], (enum fault_kind)k);
            assert_int_equal(fault_notice_rank(n), ranks[i]);
            assert_int_equal(fault_notice_kind(n), k);
        }
    close(to_right);
    close(right_in);
    close(left_out);
    close(from_left);
}

/* ---- heavy: many ranks, 10^7 elements ---- */

static void test_comm_cpu_allreduce_w16_w64(void **state)
{
    (void)state;
    run_sweep_small(16, 0, 1);
    run_sweep_small(64, 0, 1);
}

static int large_body(struct ring_job *job, int rank, struct comm *c, struct ddp_err *err)
{
    size_t cnt = 10000000 + 19;
    float *a = malloc(cnt * sizeof(float));
    testutil_fill(77, rank, a, cnt, COMM_F32);
    int rc = comm_allreduce(c, a, cnt, COMM_F32, err);
    if (rc == 0)
        rc = testutil_check_sum(77, job->world, a, cnt, COMM_F32, err);
    job->digest[rank] = testutil_fnv(a, cnt * sizeof(float), 0xcbf29ce484222325ull);
    free(a);
    return rc;
}

static void test_comm_cpu_allreduce_ten_million(void **state)
{
    (void)state;
    for (int w = 2; w <= 3; w++) {
        struct ring_job job;
        memset(&job, 0, sizeof(job));
        uint64_t digest[64] = {0};
        job.world = w;
        job.timeout_ms = 60000;
        job.body = large_body;
        job.digest = digest;
        run_ring(&job);
        expect_all_ok(&job);
        for (int i = 1; i < w; i++)
            assert_true(digest[i] == digest[0]);
    }
}

/* ---- heavy: peers in processes, killed or stopped mid-collective ---- */

/* What rank_process runs in a loop: 0 all-reduce, 1 reduce-scatter, 2 all-gather (set before
 * fault_run forks). */
static int fault_op;

enum { EXIT_NO_ERROR = 20, EXIT_PEER = 21, EXIT_TIMEOUT = 22, EXIT_OTHER = 23, EXIT_SETUP = 24 };

/* A rank process: all-reduces 1M floats (or reduce-scatters / all-gathers them: fault_op)
 * until an error; writes one byte to ready_fd after
 * its first success, and its error message as one line "RANK MESSAGE" to msg_fd. Never
 * returns. */
static void rank_process(int port, int rank, int world, int64_t timeout_ms, int ready_fd,
                         int msg_fd)
{
    struct rdzv *r = NULL;
    struct comm *c = NULL;
    struct ddp_err err;
    struct comm_opts o;
    comm_opts_default(&o);
    o.timeout_ms = timeout_ms;
    o.force_tcp = 1;
    if (rdzv_open("127.0.0.1", port, rank, world, "s", 20000, &r, &err) < 0 ||
        comm_new("cpu", r, rank, world, &o, &c, &err) < 0) {
        fprintf(stderr, "rank %d setup: %s\n", rank, err.msg);
        _exit(EXIT_SETUP);
    }
    size_t n = 1 << 20, shard = n / (size_t)world;
    float *v = calloc(n, sizeof(float)), *part = calloc(shard, sizeof(float));
    int code = EXIT_NO_ERROR;
    for (int i = 0; i < 100000; i++) {
        int rc = fault_op == 1   ? comm_reduce_scatter(c, v, part, shard, COMM_F32, &err)
                 : fault_op == 2 ? comm_allgather(c, part, v, shard, COMM_F32, &err)
                                 : comm_allreduce(c, v, n, COMM_F32, &err);
        if (rc < 0) {
            char line[DDP_ERR_MSG_MAX + 16];
            int ln = snprintf(line, sizeof(line), "%d %s\n", rank, err.msg);
            if (write(msg_fd, line, (size_t)ln) != ln)
                _exit(EXIT_OTHER);
            code = rc == DDP_EPEER ? EXIT_PEER : rc == DDP_ETIMEOUT ? EXIT_TIMEOUT : EXIT_OTHER;
            break;
        }
        if (i == 0 && write(ready_fd, "r", 1) != 1)
            _exit(EXIT_OTHER);
    }
    /* Leave at once: rank 0's store would otherwise wait for the victim to close. */
    _exit(code);
}

/* Waits for pid until deadline; returns its exit code, or -1 (killed then) on timeout. */
static int reap(pid_t pid, int64_t deadline)
{
    for (;;) {
        int st = 0;
        pid_t p = waitpid(pid, &st, WNOHANG);
        if (p == pid)
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        if (p < 0)
            return -2;
        if (time_mono_ms() >= deadline) {
            kill(pid, SIGKILL);
            waitpid(pid, &st, 0);
            return -1;
        }
        time_sleep_ms(10);
    }
}

/* Forks world rank processes, waits for them to run, hits `victim` with sig, and collects the
 * others' exit codes and error messages (codes[victim] and msgs[victim] are left alone).
 * Returns ms from the signal to the last exit. */
static int64_t fault_run(int world, int victim, int sig, int64_t timeout_ms, int *codes,
                         char (*msgs)[DDP_ERR_MSG_MAX + 16])
{
    int port = testutil_free_port();
    int pfd[2], mfd[2];
    assert_int_equal(pipe(pfd), 0);
    assert_int_equal(pipe(mfd), 0);
    pid_t pids[8];
    for (int i = 0; i < world; i++) {
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0) {
            close(pfd[0]);
            close(mfd[0]);
            rank_process(port, i, world, timeout_ms, pfd[1], mfd[1]);
        }
    }
    close(pfd[1]);
    close(mfd[1]);
    int ready = 0;
    int64_t deadline = time_mono_ms() + 60000;
    while (ready < world && time_mono_ms() < deadline) {
        struct pollfd p = {.fd = pfd[0], .events = POLLIN};
        if (poll(&p, 1, 100) > 0) {
            char b[8];
            ssize_t n = read(pfd[0], b, sizeof(b));
            if (n <= 0)
                break;
            ready += (int)n;
        }
    }
    close(pfd[0]);
    int64_t t0 = time_mono_ms();
    kill(pids[victim], sig);
    int64_t end = t0 + timeout_ms * 4 + 30000;
    for (int i = 0; i < world; i++)
        if (i != victim)
            codes[i] = reap(pids[i], end);
    int64_t took = time_mono_ms() - t0;
    kill(pids[victim], SIGKILL);
    kill(pids[victim], SIGCONT);
    reap(pids[victim], time_mono_ms() + 10000);
    /* Every writer is gone: the pipe holds all messages, then EOF. */
    static char all[16384];
    size_t got = 0;
    for (;;) {
        ssize_t n = read(mfd[0], all + got, sizeof(all) - 1 - got);
        if (n <= 0)
            break;
        got += (size_t)n;
    }
    all[got] = '\0';
    close(mfd[0]);
    for (char *line = all; *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = '\0';
        char *rest = NULL;
        long r = strtol(line, &rest, 10);
        if (rest != line && r >= 0 && r < world && *rest == ' ')
            snprintf(msgs[r], DDP_ERR_MSG_MAX + 16, "%s", rest + 1);
        fprintf(stderr, "  rank %s\n", line);
        if (!nl)
            break;
        line = nl + 1;
    }
    if (ready < world)
        fail_msg("only %d of %d ranks got going", ready, world);
    return took;
}

static void test_comm_cpu_killed_peer_fails_others(void **state)
{
    (void)state;
    int codes[8] = {0};
    static char msgs[8][DDP_ERR_MSG_MAX + 16];
    memset(msgs, 0, sizeof(msgs));
    int64_t timeout_ms = 20000;
    /* W=4: ranks 0 (sends to the victim), 2 (receives from it) and 3 (neither). */
    int64_t took = fault_run(4, 1, SIGKILL, timeout_ms, codes, msgs);
    for (int i = 0; i < 4; i++)
        if (i != 1 && codes[i] != EXIT_PEER)
            fail_msg("rank %d exited %d, want %d (peer lost)", i, codes[i], EXIT_PEER);
    /* The neighbours name the dead rank (rank 3 usually does too, from a notice; when the
     * notice loses the race it names the neighbour that closed on it). */
    for (int i = 0; i <= 2; i += 2)
        if (!strstr(msgs[i], "peer rank 1 ") || !strstr(msgs[i], "lost"))
            fail_msg("rank %d: '%s' does not say peer rank 1 was lost", i, msgs[i]);
    assert_non_null(strstr(msgs[3], "lost"));
    /* Well inside the timeout: the failure is noticed, not waited out. */
    assert_true(took < timeout_ms);
}

static void test_comm_cpu_stopped_peer_times_out(void **state)
{
    (void)state;
    int codes[8] = {0};
    static char msgs[8][DDP_ERR_MSG_MAX + 16];
    memset(msgs, 0, sizeof(msgs));
    int64_t timeout_ms = 1500;
    fault_run(3, 2, SIGSTOP, timeout_ms, codes, msgs);
    /* The stopped rank's neighbours time out; the first to do so closes its sockets, so a
     * rank may see that as a lost peer instead. Nobody hangs or succeeds. Rank 0 receives
     * from the stopped rank, so whatever its right neighbour says, it names rank 2. */
    for (int i = 0; i < 2; i++) {
        if (codes[i] != EXIT_TIMEOUT && codes[i] != EXIT_PEER)
            fail_msg("rank %d exited %d, want %d or %d", i, codes[i], EXIT_TIMEOUT, EXIT_PEER);
        if (codes[i] == EXIT_TIMEOUT && !strstr(msgs[i], "silent"))
            fail_msg("rank %d: '%s' does not say who was silent", i, msgs[i]);
    }
    /* Rank 1 waits on both sides (its left is stalled too) and may suspect either. */
    assert_int_equal(codes[0], EXIT_TIMEOUT);
    if (!strstr(msgs[0], "peer rank 2 "))
        fail_msg("rank 0: '%s' does not name rank 2", msgs[0]);
}

/* A rank SIGKILLed during reduce-scatters (then all-gathers): its neighbours fail with the
 * peer-lost error naming it, well inside the timeout. */
static void test_comm_cpu_sharded_killed_peer(void **state)
{
    (void)state;
    for (fault_op = 1; fault_op <= 2; fault_op++) {
        int codes[8] = {0};
        static char msgs[8][DDP_ERR_MSG_MAX + 16];
        memset(msgs, 0, sizeof(msgs));
        int64_t timeout_ms = 20000;
        int64_t took = fault_run(3, 1, SIGKILL, timeout_ms, codes, msgs);
        for (int i = 0; i <= 2; i += 2) {
            if (codes[i] != EXIT_PEER)
                fail_msg("op %d: rank %d exited %d, want %d (peer lost)", fault_op, i, codes[i],
                         EXIT_PEER);
            if (!strstr(msgs[i], "peer rank 1 ") || !strstr(msgs[i], "lost"))
                fail_msg("op %d: rank %d: '%s' does not say peer rank 1 was lost", fault_op, i,
                         msgs[i]);
        }
        assert_true(took < timeout_ms);
    }
    fault_op = 0;
}

/* A rank SIGSTOPped during all-gathers (then reduce-scatters): nobody hangs; the rank that
 * receives from it times out naming it. */
static void test_comm_cpu_sharded_stopped_peer_times_out(void **state)
{
    (void)state;
    for (fault_op = 2; fault_op >= 1; fault_op--) {
        int codes[8] = {0};
        static char msgs[8][DDP_ERR_MSG_MAX + 16];
        memset(msgs, 0, sizeof(msgs));
        fault_run(3, 2, SIGSTOP, 1500, codes, msgs);
        for (int i = 0; i < 2; i++)
            if (codes[i] != EXIT_TIMEOUT && codes[i] != EXIT_PEER)
                fail_msg("op %d: rank %d exited %d, want %d or %d", fault_op, i, codes[i],
                         EXIT_TIMEOUT, EXIT_PEER);
        assert_int_equal(codes[0], EXIT_TIMEOUT);
        if (!strstr(msgs[0], "peer rank 2 ") || !strstr(msgs[0], "silent"))
            fail_msg("op %d: rank 0: '%s' does not say rank 2 was silent", fault_op, msgs[0]);
    }
    fault_op = 0;
}

int main(int argc, char **argv)
{
    signal(SIGPIPE, SIG_DFL); /* MSG_NOSIGNAL must make this harmless */
    const struct CMUnitTest light[] = {
        cmocka_unit_test(test_comm_cpu_world_one),
        cmocka_unit_test(test_comm_cpu_subgroups),
        cmocka_unit_test(test_comm_cpu_backend_selection),
        cmocka_unit_test(test_comm_cpu_allreduce_w1_to_4),
        cmocka_unit_test(test_comm_cpu_allreduce_w5_to_8),
        cmocka_unit_test(test_comm_cpu_allreduce_small_chunks),
        cmocka_unit_test(test_comm_cpu_broadcast_from_each_root),
        cmocka_unit_test(test_comm_cpu_ipv6_loopback),
        cmocka_unit_test(test_comm_cpu_local_addr),
        cmocka_unit_test(test_comm_cpu_listens_on_published_address),
        cmocka_unit_test(test_comm_cpu_barrier_waits_for_all),
        cmocka_unit_test(test_comm_cpu_mismatch_detected),
        cmocka_unit_test(test_comm_cpu_error_is_sticky),
        cmocka_unit_test(test_comm_cpu_stranger_dropped),
        cmocka_unit_test(test_comm_cpu_silent_connections_do_not_delay),
        cmocka_unit_test(test_comm_cpu_notice_names_high_rank),
        cmocka_unit_test(test_comm_cpu_sharded_w1_to_4),
        cmocka_unit_test(test_comm_cpu_sharded_small_chunks_and_w5_w8),
        cmocka_unit_test(test_comm_cpu_sharded_mismatch_detected),
        cmocka_unit_test(test_comm_cpu_sharded_killed_peer),
        cmocka_unit_test(test_comm_cpu_sharded_stopped_peer_times_out),
    };
    const struct CMUnitTest heavy[] = {
        cmocka_unit_test(test_comm_cpu_allreduce_w16_w64),
        cmocka_unit_test(test_comm_cpu_allreduce_ten_million),
        cmocka_unit_test(test_comm_cpu_killed_peer_fails_others),
        cmocka_unit_test(test_comm_cpu_stopped_peer_times_out),
    };
    if (argc > 1 && strcmp(argv[1], "heavy") == 0)
        return cmocka_run_group_tests_name("comm_cpu_heavy", heavy, NULL, NULL);
    return cmocka_run_group_tests_name("comm_cpu", light, NULL, NULL);
}
