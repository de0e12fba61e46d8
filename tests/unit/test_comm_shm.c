/*
 * test_comm_shm.c - the CPU backend's shared-memory and hierarchical transports, with ranks
 * as forked processes on this host: all-reduce against a reference sum for many counts,
 * W = 1..8, f32 and f64, both algorithms (one-round small, reduce-scatter + all-gather) and
 * pieces small enough to cycle the double buffer; broadcast from every root, barrier, async
 * FIFO issue; hierarchical layouts simulated with DDP_COMM_HOST_ID (two "hosts" in one
 * machine); two concurrent jobs; a SIGKILLed peer (DDP_EPEER, not a timeout) and a
 * SIGSTOPped one (DDP_ETIMEOUT naming it); a stale segment from a "crash" is replaced;
 * a collective mismatch reported as one on every rank of every layout;
 * registered buffers (comm_alloc_buffer) shared and reduced in place; reduce-scatter and
 * all-gather (testutil_sharded_sweep) on every layout, with a killed and a stopped peer; no
 * segment is left in /dev/shm after close.
 *
 * Tolerances as in test_comm_cpu.c: f32 within 1e-5 * (1 + sum |x|), f64 within 1e-12 *
 * (1 + sum |x|) of the sum in double; every rank must end with bit-identical buffers.
 * Ranks report through a MAP_SHARED board; the parent reaps every child with a deadline and
 * SIGKILLs what is left.
 *
 * Why one file of ~770 lines: one cmocka binary per module (docs/style.md), and every case
 * shares the forked-rank harness at the top (it covers comm_shm.c, comm_shm_coll.c and
 * comm_shm_region.c).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sched.h>
#include <sys/mman.h>
#include <sys/mount.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/timeutil.h"
#include "ddp/comm.h"
#include "libddp/comm/comm_internal.h"
#include "libddp/comm/comm_shm.h"
#include "ddp/rdzv.h"
#include "tests/unit/testutil.h"

#define MAXW 8

struct board {
    int rc[MAXW];
    char msg[MAXW][DDP_ERR_MSG_MAX];
    uint64_t digest[MAXW][64];
    char transport[MAXW][8];
    char name[MAXW][64];
    int shm_exists_after_init[MAXW];
    int shared[MAXW]; /* registered runs: the buffer lay in a shared mapping */
};

struct job;
typedef int (*body_fn)(struct job *j, int rank, struct comm *c, struct ddp_err *err);

struct job {
    int world;
    int port;
    const char *const *host_ids; /* per rank DDP_COMM_HOST_ID, NULL = all the same */
    size_t chunk, small;
    int64_t timeout_ms;
    uint64_t seed;
    body_fn body;
    int stops;      /* 1: the last rank stops itself; it is killed once the others are done */
    int few;        /* sharded_body: the small lengths only */
    int registered; /* sweep_body's buffer from comm_alloc_buffer, used at an offset */
    int fake_rank;  /* with fake: this rank runs fake() instead of a comm */
    int (*fake)(struct job *j, int rank);
    struct board *b;
};

static int shm_exists(const char *name)
{
    int fd = shm_open(name, O_RDONLY, 0);
    if (fd >= 0) {
        close(fd);
        return 1;
    }
    return 0;
}

static int child(struct job *j, int rank)
{
    struct rdzv *r = NULL;
    struct comm *c = NULL;
    struct ddp_err err;
    err_clear(&err);
    if (j->fake && rank == j->fake_rank) {
        j->b->rc[rank] = j->fake(j, rank);
        return 0;
    }
    if (j->host_ids)
        setenv("DDP_COMM_HOST_ID", j->host_ids[rank], 1);
    int rc = rdzv_open("127.0.0.1", j->port, rank, j->world, "secret", 20000, &r, &err);
    if (rc == 0) {
        struct comm_opts o;
        comm_opts_default(&o);
        o.chunk_bytes = j->chunk;
        o.small_bytes = j->small;
        o.timeout_ms = j->timeout_ms ? j->timeout_ms : 20000;
        rc = comm_new("cpu", r, rank, j->world, &o, &c, &err);
    }
    if (rc == 0) {
        snprintf(j->b->transport[rank], sizeof(j->b->transport[rank]), "%s", comm_cpu_transport(c));
        const char *nm = comm_cpu_shm_name(c);
        snprintf(j->b->name[rank], sizeof(j->b->name[rank]), "%s", nm ? nm : "");
        rc = j->body(j, rank, c, &err);
        /* The leader takes the name away before its first collective can complete. */
        j->b->shm_exists_after_init[rank] = nm ? shm_exists(nm) : 0;
    }
    comm_free(c);
    rdzv_close(r);
    j->b->rc[rank] = rc;
    memcpy(j->b->msg[rank], err.msg, sizeof(err.msg));
    return 0;
}

static struct board *board_new(void)
{
    void *m =
        mmap(NULL, sizeof(struct board), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    assert_true(m != MAP_FAILED);
    memset(m, 0, sizeof(struct board));
    return m;
}

/* Forks the ranks and reaps them, SIGKILLing whatever is left after limit_ms (or, with
 * j->stops, the stopped last rank as soon as the others are done). */
static void run_job(struct job *j, int64_t limit_ms)
{
    pid_t pids[MAXW];
    if (!j->port)
        j->port = testutil_free_port();
    fflush(stdout);
    fflush(stderr);
    for (int i = 0; i < j->world; i++) {
        j->b->rc[i] = -9999;
        pids[i] = fork();
        assert_true(pids[i] >= 0);
        if (pids[i] == 0)
            _exit(child(j, i));
    }
    int64_t deadline = time_mono_ms() + limit_ms;
    int left = j->world;
    while (left > 0) {
        for (int i = 0; i < j->world; i++) {
            if (pids[i] <= 0)
                continue;
            int st = 0;
            pid_t p = waitpid(pids[i], &st, WNOHANG);
            if (p == pids[i]) {
                pids[i] = 0;
                left--;
            }
        }
        if (left == 0)
            break;
        if (j->stops && left == 1 && pids[j->world - 1] > 0)
            deadline = 0; /* only the stopped rank is left */
        if (time_mono_ms() > deadline) {
            testutil_kill_all(pids, j->world);
            break;
        }
        time_sleep_ms(5);
    }
}

static void expect_all_ok(const struct job *j)
{
    for (int i = 0; i < j->world; i++)
        if (j->b->rc[i] != 0)
            fail_msg("W=%d rank %d failed: %d %s", j->world, i, j->b->rc[i], j->b->msg[i]);
}

static void expect_no_segments(const struct job *j)
{
    for (int i = 0; i < j->world; i++) {
        if (j->b->name[i][0] && shm_exists(j->b->name[i]))
            fail_msg("segment %s of rank %d is still in /dev/shm", j->b->name[i], i);
        for (int k = 0; k < 4 && j->b->name[i][0]; k++) {
            char rn[96];
            snprintf(rn, sizeof(rn), "%s-r%d", j->b->name[i], k);
            if (shm_exists(rn))
                fail_msg("registered segment %s of rank %d is still in /dev/shm", rn, i);
        }
        if (j->b->shm_exists_after_init[i])
            fail_msg("segment %s still had its name after the collectives", j->b->name[i]);
    }
}

static void expect_digests_equal(const struct job *j, int n)
{
    for (int i = 1; i < j->world; i++)
        for (int k = 0; k < n; k++)
            if (j->b->digest[i][k] != j->b->digest[0][k])
                fail_msg("W=%d case %d: rank %d's result differs from rank 0's", j->world, k, i);
}

/* 1 when p lies in a MAP_SHARED mapping of a ddp shared-memory file (/proc/self/maps). */
static int in_shared_region(const void *p)
{
    FILE *f = fopen("/proc/self/maps", "r");
    if (!f)
        return 0;
    char line[512];
    int found = 0;
    uintptr_t a = (uintptr_t)p;
    while (!found && fgets(line, sizeof(line), f)) {
        unsigned long lo, hi;
        char perms[8];
        if (sscanf(line, "%lx-%lx %7s", &lo, &hi, perms) != 3)
            continue;
        found = a >= lo && a < hi && perms[3] == 's' && strstr(line, "/ddp-") != NULL;
    }
    fclose(f);
    return found;
}

/* ---- bodies ---- */

static const size_t sweep[] = {0,    1,    2,     3,     7,     13,    97,    1009,
                               4095, 4096, 16383, 16384, 16385, 65537, 100003};
#define NSWEEP (sizeof(sweep) / sizeof(sweep[0]))

/* Every count of the sweep in f32 and f64, then broadcast from every root, a barrier and
 * three async all-reduces in flight at once. */
static int sweep_body(struct job *j, int rank, struct comm *c, struct ddp_err *err)
{
    int rc = 0, k = 0;
    size_t maxc = sweep[NSWEEP - 1] + (size_t)j->world * 5;
    double *buf = NULL, *block = NULL;
    if (j->registered) {
        /* Used 24 bytes in, as the reducer uses its buckets at offsets of its block. */
        if ((rc = comm_alloc_buffer(c, (maxc + 3) * sizeof(double), (void **)&block, err)) < 0)
            return rc;
        buf = block + 3;
        j->b->shared[rank] = in_shared_region(buf);
    } else {
        buf = malloc(maxc * sizeof(double));
    }
    if (!buf)
        return err_set(err, DDP_EINTERNAL, "no memory");
    for (size_t s = 0; s < NSWEEP && rc == 0; s++) {
        for (int d = 0; d < 2 && rc == 0; d++) {
            enum comm_dtype dt = d ? COMM_F64 : COMM_F32;
            size_t es = d ? 8 : 4;
            uint64_t seed = j->seed + s * 2 + (uint64_t)d;
            testutil_fill(seed, rank, buf, sweep[s], dt);
            rc = comm_allreduce(c, buf, sweep[s], dt, err);
            if (rc == 0)
                rc = testutil_check_sum(seed, j->world, buf, sweep[s], dt, err);
            j->b->digest[rank][k++] = testutil_fnv(buf, sweep[s] * es, 0xcbf29ce484222325ull);
        }
    }
    for (int root = 0; root < j->world && rc == 0; root++) {
        size_t n = 70001 + (size_t)root;
        char *bb = (char *)buf;
        for (size_t i = 0; i < n; i++)
            bb[i] = rank == root ? (char)(i * 7 + (size_t)root) : 0;
        rc = comm_broadcast(c, bb, n, root, err);
        for (size_t i = 0; i < n && rc == 0; i++)
            if (bb[i] != (char)(i * 7 + (size_t)root))
                rc = err_set(err, DDP_EINTERNAL, "broadcast from %d: byte %zu wrong", root, i);
    }
    if (rc == 0)
        rc = comm_barrier(c, err);
    if (rc == 0) {
        /* Three async all-reduces in flight, waited for in issue order. */
        size_t n = 30011;
        double *a[3];
        struct comm_work *w[3] = {NULL, NULL, NULL};
        for (int q = 0; q < 3; q++) {
            a[q] = buf + (size_t)q * (n + 8);
            testutil_fill(j->seed + 100 + (uint64_t)q, rank, a[q], n, COMM_F64);
        }
        int started = 0;
        for (int q = 0; q < 3 && rc == 0; q++, started++)
            rc = comm_allreduce_async(c, a[q], n, COMM_F64, &w[q], err);
        for (int q = 0; q < started; q++) {
            struct ddp_err e2;
            int r2 = comm_wait(c, w[q], &e2);
            if (r2 < 0 && rc == 0) {
                rc = r2;
                *err = e2;
            }
            if (rc == 0)
                rc = testutil_check_sum(j->seed + 100 + (uint64_t)q, j->world, a[q], n, COMM_F64,
                                        err);
        }
    }
    if (j->registered)
        comm_free_buffer(c, block);
    else
        free(buf);
    return rc;
}

/* registered: 0 private buffers; 1 from comm_alloc_buffer, expected shared; 2 from
 * comm_alloc_buffer, expected private (no shared memory between the ranks). */
static void run_sweep_reg(int world, size_t chunk, size_t small, const char *const *hosts,
                          const char *want_transport, int registered)
{
    struct job j = {.world = world,
                    .chunk = chunk,
                    .small = small,
                    .host_ids = hosts,
                    .seed = (uint64_t)world * 1000 + chunk + small,
                    .body = sweep_body,
                    .registered = registered,
                    .b = board_new()};
    run_job(&j, 120000);
    expect_all_ok(&j);
    expect_digests_equal(&j, (int)NSWEEP * 2);
    for (int i = 0; i < world; i++)
        if (strcmp(j.b->transport[i], want_transport) != 0)
            fail_msg("W=%d rank %d: transport %s, expected %s", world, i, j.b->transport[i],
                     want_transport);
    for (int i = 0; i < world && registered; i++)
        if (j.b->shared[i] != (registered == 1))
            fail_msg("W=%d rank %d: comm_alloc_buffer gave %s memory, expected %s", world, i,
                     j.b->shared[i] ? "shared" : "private", registered == 1 ? "shared" : "private");
    expect_no_segments(&j);
    munmap(j.b, sizeof(struct board));
}

static void run_sweep(int world, size_t chunk, size_t small, const char *const *hosts,
                      const char *want_transport)
{
    run_sweep_reg(world, chunk, small, hosts, want_transport, 0);
}

/* ---- tests ---- */

static void test_comm_shm_sum_sweep(void **state)
{
    (void)state;
    for (int w = 1; w <= MAXW; w++)
        run_sweep(w, 0, 0, NULL, w == 1 ? "none" : "shm");
}

/* Small pieces (many rounds, the double buffer cycles) with each algorithm forced. */
static void test_comm_shm_small_pieces_both_algorithms(void **state)
{
    (void)state;
    run_sweep(3, 4096, 1, NULL, "shm");        /* reduce-scatter + all-gather only */
    run_sweep(4, 4096, SIZE_MAX, NULL, "shm"); /* one round per piece only */
    run_sweep(5, 1024, 0, NULL, "shm");
}

static void test_comm_shm_hierarchical(void **state)
{
    (void)state;
    static const char *const two[] = {"a", "a", "b", "b"};
    run_sweep(4, 0, 0, two, "hier");
    static const char *const mixed[] = {"a", "b", "a", "c", "a"};
    run_sweep(5, 8192, 0, mixed, "hier");
    static const char *const apart[] = {"a", "b", "c"};
    run_sweep(3, 0, 0, apart, "tcp");
}

/* Buffers from comm_alloc_buffer: shared between same-host ranks and all-reduced where
 * they lie (sums, bit-identical results, async issue at three offsets, broadcast through
 * them), with one and many pieces, in the hierarchical layout (each host its own region),
 * and plain memory where the ranks share no host. No segment is left behind. */
static void test_comm_shm_registered_buffers(void **state)
{
    (void)state;
    for (int w = 2; w <= 4; w++)
        run_sweep_reg(w, 0, 0, NULL, "shm", 1);
    run_sweep_reg(3, 4096, 1, NULL, "shm", 1);
    run_sweep_reg(5, 1024, 0, NULL, "shm", 1);
    static const char *const two[] = {"a", "a", "b", "b"};
    run_sweep_reg(4, 0, 0, two, "hier", 1);
    static const char *const apart[] = {"a", "b", "c"};
    run_sweep_reg(3, 0, 0, apart, "tcp", 2);
}

/* Two jobs on one host at once (same DDP_JOB_ID and generation, different stores): their
 * segments differ and each gets its own sums. */
static void test_comm_shm_two_jobs_never_meet(void **state)
{
    (void)state;
    setenv("DDP_JOB_ID", "same-job", 1);
    setenv("DDP_GENERATION", "0", 1);
    struct job a = {.world = 3, .seed = 11, .body = sweep_body, .b = board_new()};
    struct job b = {.world = 3, .seed = 12, .body = sweep_body, .b = board_new()};
    a.port = testutil_free_port();
    do
        b.port = testutil_free_port();
    while (b.port == a.port);
    pid_t pa = fork();
    assert_true(pa >= 0);
    if (pa == 0) {
        run_job(&a, 120000);
        _exit(0);
    }
    run_job(&b, 120000);
    assert_int_equal(waitpid(pa, NULL, 0), pa);
    expect_all_ok(&a);
    expect_all_ok(&b);
    assert_true(strcmp(a.b->name[0], b.b->name[0]) != 0);
    expect_no_segments(&a);
    expect_no_segments(&b);
    unsetenv("DDP_JOB_ID");
    unsetenv("DDP_GENERATION");
    munmap(a.b, sizeof(struct board));
    munmap(b.b, sizeof(struct board));
}

/* Rank world-1 dies (SIGKILL) or stops (SIGSTOP) after one all-reduce; the others are in
 * the next one. */
static int victim_body(struct job *j, int rank, struct comm *c, struct ddp_err *err, int sig)
{
    double x[4096];
    for (int i = 0; i < 4096; i++)
        x[i] = 1;
    int rc = comm_allreduce(c, x, 4096, COMM_F64, err);
    if (rc < 0)
        return rc;
    if (rank == j->world - 1)
        raise(sig);
    for (int it = 0; it < 3 && rc == 0; it++)
        rc = comm_allreduce(c, x, 4096, COMM_F64, err);
    return rc == 0 ? err_set(err, DDP_EINTERNAL, "all-reduce with a lost peer succeeded") : rc;
}

static int killed_body(struct job *j, int rank, struct comm *c, struct ddp_err *err)
{
    return victim_body(j, rank, c, err, SIGKILL);
}

/* The same with 64 elements: over TCP the recursive-doubling path. */
static int killed_small_body(struct job *j, int rank, struct comm *c, struct ddp_err *err)
{
    double x[64];
    for (int i = 0; i < 64; i++)
        x[i] = 1;
    int rc = comm_allreduce(c, x, 64, COMM_F64, err);
    if (rc < 0)
        return rc;
    if (x[0] != j->world)
        return err_set(err, DDP_EINTERNAL, "wrong sum %g", x[0]);
    if (rank == j->world - 1)
        raise(SIGKILL);
    for (int it = 0; it < 3 && rc == 0; it++)
        rc = comm_allreduce(c, x, 64, COMM_F64, err);
    return rc == 0 ? err_set(err, DDP_EINTERNAL, "all-reduce with a lost peer succeeded") : rc;
}

static int stopped_body(struct job *j, int rank, struct comm *c, struct ddp_err *err)
{
    return victim_body(j, rank, c, err, SIGSTOP);
}

static void check_victims(struct job *j, int code, const char *hosts_note)
{
    char want[32];
    snprintf(want, sizeof(want), "peer rank %d", j->world - 1);
    for (int i = 0; i < j->world - 1; i++) {
        if (j->b->rc[i] != code)
            fail_msg("%s rank %d: got %d (%s), expected %d", hosts_note, i, j->b->rc[i],
                     j->b->msg[i], code);
        if (!strstr(j->b->msg[i], want))
            fail_msg("%s rank %d: '%s' does not name %s", hosts_note, i, j->b->msg[i], want);
    }
}

static void test_comm_shm_killed_peer(void **state)
{
    (void)state;
    /* The comm timeout is far longer than the test's limit: only the liveness check can end
     * the wait, with DDP_EPEER. */
    struct job j = {.world = 3, .timeout_ms = 600000, .body = killed_body, .b = board_new()};
    run_job(&j, 60000);
    check_victims(&j, DDP_EPEER, "shm");
    expect_no_segments(&j);
    static const char *const two[] = {"a", "a", "b", "b"};
    struct job h = {
        .world = 4, .timeout_ms = 600000, .host_ids = two, .body = killed_body, .b = board_new()};
    run_job(&h, 60000);
    check_victims(&h, DDP_EPEER, "hier");
    expect_no_segments(&h);
    static const char *const apart[] = {"a", "b", "c"};
    struct job t = {.world = 3,
                    .timeout_ms = 600000,
                    .host_ids = apart,
                    .body = killed_small_body,
                    .b = board_new()};
    run_job(&t, 60000);
    check_victims(&t, DDP_EPEER, "tcp recursive doubling");
    munmap(j.b, sizeof(struct board));
    munmap(h.b, sizeof(struct board));
    munmap(t.b, sizeof(struct board));
}

static void test_comm_shm_stopped_peer_times_out(void **state)
{
    (void)state;
    struct job j = {
        .world = 3, .timeout_ms = 1500, .body = stopped_body, .stops = 1, .b = board_new()};
    run_job(&j, 30000); /* SIGKILLs the stopped rank once the others are done */
    check_victims(&j, DDP_ETIMEOUT, "shm");
    expect_no_segments(&j);
    munmap(j.b, sizeof(struct board));
}

/* Hierarchical: a non-leader of the second "host" stops; its leader times out on it in
 * shared memory while the other host's ranks wait in the ring / on their leader: every live
 * rank fails (a timeout, or the notice of one) instead of hanging. */
static void test_comm_shm_hierarchical_stopped_peer(void **state)
{
    (void)state;
    static const char *const two[] = {"a", "a", "b", "b"};
    struct job j = {.world = 4,
                    .timeout_ms = 1500,
                    .host_ids = two,
                    .body = stopped_body,
                    .stops = 1,
                    .b = board_new()};
    run_job(&j, 30000);
    for (int i = 0; i < 3; i++)
        if (j.b->rc[i] != DDP_ETIMEOUT && j.b->rc[i] != DDP_EPEER)
            fail_msg("rank %d: got %d (%s), expected a timeout or a lost peer", i, j.b->rc[i],
                     j.b->msg[i]);
    /* The stopped rank's own leader saw it first. */
    assert_int_equal(j.b->rc[2], DDP_ETIMEOUT);
    assert_non_null(strstr(j.b->msg[2], "peer rank 3"));
    expect_no_segments(&j);
    munmap(j.b, sizeof(struct board));
}

/* The last rank issues one element more than the others (j->few 1: 64 doubles, 2: 2^20, so
 * that the ring's data fills the socket buffers before the header is compared; else 4096). */
static int mismatch_body(struct job *j, int rank, struct comm *c, struct ddp_err *err)
{
    size_t n = j->few == 1 ? 64 : j->few == 2 ? (size_t)1 << 20 : 4096;
    double *x = calloc(n + 1, sizeof(double));
    if (!x)
        return err_set(err, DDP_EINTERNAL, "no memory");
    int rc = comm_allreduce(c, x, rank == j->world - 1 ? n + 1 : n, COMM_F64, err);
    free(x);
    return rc == 0 ? err_set(err, DDP_EINTERNAL, "a mismatched all-reduce succeeded") : rc;
}

/* A collective mismatch is a mismatch on every rank, whichever transport carried the news
 * (shared memory, the leaders' ring, recursive doubling): DDP_EINTERNAL saying so, fast, and
 * never "peer lost", which would blame a live rank's node. */
static void test_comm_shm_mismatch_on_every_rank(void **state)
{
    (void)state;
    static const char *const one[] = {"a", "a", "a"};
    static const char *const two[] = {"a", "a", "b", "b"};
    static const char *const apart[] = {"a", "b", "c"};
    /* small 1: every all-reduce over TCP takes the ring (not recursive doubling) */
    const struct {
        const char *note;
        int world, few;
        size_t small;
        const char *const *hosts;
    } cases[] = {{"shm", 3, 0, 0, one},
                 {"hier ring", 4, 0, 1, two},
                 {"hier recursive doubling", 4, 1, 0, two},
                 {"tcp ring", 3, 0, 1, apart},
                 {"tcp ring, 8 MiB", 3, 2, 1, apart},
                 {"tcp recursive doubling", 3, 1, 0, apart}};
    for (size_t k = 0; k < sizeof(cases) / sizeof(cases[0]); k++) {
        struct job j = {.world = cases[k].world,
                        .few = cases[k].few,
                        .small = cases[k].small,
                        .host_ids = cases[k].hosts,
                        .timeout_ms = 600000,
                        .body = mismatch_body,
                        .b = board_new()};
        int64_t t0 = time_mono_ms();
        run_job(&j, 60000);
        for (int i = 0; i < j.world; i++)
            if (j.b->rc[i] != DDP_EINTERNAL || !strstr(j.b->msg[i], "collective mismatch"))
                fail_msg("%s rank %d: got %d (%s), expected a collective mismatch", cases[k].note,
                         i, j.b->rc[i], j.b->msg[i]);
        assert_true(time_mono_ms() - t0 < 60000);
        expect_no_segments(&j);
        munmap(j.b, sizeof(struct board));
    }
}

static int two_sums_body(struct job *j, int rank, struct comm *c, struct ddp_err *err)
{
    double x[100];
    testutil_fill(j->seed, rank, x, 100, COMM_F64);
    int rc = comm_allreduce(c, x, 100, COMM_F64, err);
    return rc == 0 ? testutil_check_sum(j->seed, j->world, x, 100, COMM_F64, err) : rc;
}

/* A segment left by a crashed run under the very name the job uses (wrong size, garbage)
 * and one left by the generation before: the leader removes both, and the job runs. */
static void test_comm_shm_stale_segment_cleaned(void **state)
{
    (void)state;
    setenv("DDP_JOB_ID", "stale-job", 1);
    setenv("DDP_GENERATION", "3", 1);
    struct job j = {.world = 2, .seed = 5, .body = two_sums_body, .b = board_new()};
    j.port = testutil_free_port();
    int members[2] = {0, 1};
    char name[64], old[64];
    /* One of this generation (a crashed first start), one of the generation before. */
    setenv("DDP_GENERATION", "2", 1);
    shm_segment_name("127.0.0.1", j.port, 2, 0, 0, members, 2, old, sizeof(old));
    setenv("DDP_GENERATION", "3", 1);
    shm_segment_name("127.0.0.1", j.port, 2, 0, 0, members, 2, name, sizeof(name));
    assert_true(strcmp(old, name) != 0);
    for (int k = 0; k < 2; k++) {
        int fd = shm_open(k ? old : name, O_RDWR | O_CREAT | O_EXCL, 0600);
        assert_true(fd >= 0);
        assert_int_equal(ftruncate(fd, 12345), 0);
        assert_int_equal(write(fd, "garbage", 7), 7);
        close(fd);
    }
    run_job(&j, 60000);
    int left = shm_exists(name), old_left = shm_exists(old);
    if (left)
        shm_unlink(name);
    if (old_left)
        shm_unlink(old);
    expect_all_ok(&j);
    assert_string_equal(j.b->name[0], name);
    assert_false(left);
    assert_false(old_left);
    expect_no_segments(&j);
    unsetenv("DDP_JOB_ID");
    unsetenv("DDP_GENERATION");
    munmap(j.b, sizeof(struct board));
}

static void test_comm_shm_force_tcp_env(void **state)
{
    (void)state;
    setenv("DDP_COMM_TRANSPORT", "tcp", 1);
    struct job j = {.world = 2, .seed = 9, .body = two_sums_body, .b = board_new()};
    run_job(&j, 60000);
    unsetenv("DDP_COMM_TRANSPORT");
    expect_all_ok(&j);
    assert_string_equal(j.b->transport[0], "tcp");
    assert_string_equal(j.b->name[0], "");
    munmap(j.b, sizeof(struct board));
}

/* A /dev/shm too small for the registered parts (Docker's default is 64 MiB): the leader's
 * posix_fallocate fails, every rank gets private memory and the sums are right. Runs in a
 * mount namespace of its own with a 4 MiB tmpfs on /dev/shm (root only: said and skipped
 * otherwise); the slots (3 ranks x 4 x 256 KiB) fit, the 3 x 800 KiB parts do not. */
static void test_comm_shm_registered_no_room(void **state)
{
    (void)state;
    if (geteuid() != 0) {
        print_message("skipped: needs root for a private /dev/shm (mount namespace)\n");
        skip();
    }
    if (unshare(CLONE_NEWNS) != 0 || mount("none", "/", NULL, MS_REC | MS_PRIVATE, NULL) != 0 ||
        mount("ddp-test", "/dev/shm", "tmpfs", 0, "size=4m") != 0) {
        print_message("skipped: cannot make a private /dev/shm: %s\n", strerror(errno));
        skip();
    }
    run_sweep_reg(3, 0, 0, NULL, "shm", 2);
    if (umount2("/dev/shm", MNT_DETACH) != 0)
        fail_msg("umount /dev/shm: %s", strerror(errno));
    /* Not even room for the slots: the leader says so at start instead of a SIGBUS later. */
    if (mount("ddp-test", "/dev/shm", "tmpfs", 0, "size=512k") != 0)
        fail_msg("mount a 512 KiB /dev/shm: %s", strerror(errno));
    struct job j = {
        .world = 2, .timeout_ms = 3000, .seed = 7, .body = two_sums_body, .b = board_new()};
    run_job(&j, 60000);
    if (j.b->rc[0] == 0 || !strstr(j.b->msg[0], "cannot reserve"))
        fail_msg("rank 0 with a 512 KiB /dev/shm: rc %d, '%s'", j.b->rc[0], j.b->msg[0]);
    if (j.b->rc[1] == 0)
        fail_msg("rank 1 with a 512 KiB /dev/shm went on");
    munmap(j.b, sizeof(struct board));
    if (umount2("/dev/shm", MNT_DETACH) != 0)
        fail_msg("umount /dev/shm: %s", strerror(errno));
}

/* ---- ring set-up errors name the peer's rank, not its ring position ---- */

/* The ring's hello as it travels (comm_cpu.c's wire: magic "DDPH", the sender's ring index,
 * the comm id, the receiver's nonce). */
struct test_hello {
    uint32_t magic;
    uint32_t rank;
    uint64_t id;
    char nonce[33];
    char pad[7];
};

/*
 * Rank 2 of a hierarchical layout (ranks 0 and 1 on this host, rank 2 "elsewhere", so ring
 * index 1 is rank 2) played by hand: it claims a host of its own, connects to rank 0's ring
 * port as rank 0's left neighbour with a valid hello and resets the connection at once, and
 * only then publishes its own ring address. Rank 0 finds the reset connection when it
 * accepts and cannot send its ack on it.
 */
static int fake_leader_resets(struct job *j, int rank)
{
    struct rdzv *r = NULL;
    struct ddp_err err;
    err_clear(&err);
    void *v = NULL;
    size_t len = 0;
    int fd = -1, lfd = -1;
    int rc = rdzv_open("127.0.0.1", j->port, rank, j->world, "secret", 20000, &r, &err);
    if (rc == 0)
        rc = rdzv_set(r, "comm/0/host/2", "fake-host-b", 11, &err);
    if (rc == 0)
        rc = rdzv_get(r, "comm/0/0", 20000, &v, &len, &err);
    char val[160] = "";
    if (rc == 0 && len < sizeof(val))
        memcpy(val, v, len);
    free(v);
    char *colon = strrchr(val, ':'), *sp = strchr(val, ' ');
    if (rc == 0 && (!colon || !sp || strlen(sp + 1) != 32))
        rc = err_set(&err, DDP_EINTERNAL, "fake: malformed ring address '%s'", val);
    if (rc == 0) {
        struct sockaddr_in a = {.sin_family = AF_INET,
                                .sin_port = htons((uint16_t)strtol(colon + 1, NULL, 10))};
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        struct test_hello h;
        memset(&h, 0, sizeof(h));
        h.magic = 0x44445048u;
        h.rank = 1; /* rank 0's left: ring index 1 */
        h.id = 0;
        memcpy(h.nonce, sp + 1, 32);
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd < 0 || connect(fd, (struct sockaddr *)&a, sizeof(a)) != 0 ||
            send(fd, &h, sizeof(h), MSG_NOSIGNAL) != (ssize_t)sizeof(h) ||
            setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)) != 0)
            rc = err_set(&err, DDP_EINTERNAL, "fake: cannot connect: %s", strerror(errno));
        if (fd >= 0)
            close(fd); /* a reset: the hello stays readable, the ack cannot be sent */
    }
    struct sockaddr_in la = {.sin_family = AF_INET};
    la.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t al = sizeof(la);
    if (rc == 0) {
        lfd = socket(AF_INET, SOCK_STREAM, 0);
        if (lfd < 0 || bind(lfd, (struct sockaddr *)&la, sizeof(la)) != 0 || listen(lfd, 4) != 0 ||
            getsockname(lfd, (struct sockaddr *)&la, &al) != 0)
            rc = err_set(&err, DDP_EINTERNAL, "fake: cannot listen: %s", strerror(errno));
    }
    if (rc == 0) {
        char mine[96];
        int n = snprintf(mine, sizeof(mine), "127.0.0.1:%d %032d", (int)ntohs(la.sin_port), 0);
        rc = rdzv_set(r, "comm/0/1", mine, (size_t)n, &err);
    }
    /* Stay until rank 0 gave up and closed the store (it serves it). */
    for (int i = 0; rc == 0 && i < 200; i++) {
        v = NULL;
        int g = rdzv_get(r, "test/never-set", 100, &v, &len, &err);
        free(v);
        if (g != DDP_ETIMEOUT)
            break;
    }
    if (lfd >= 0)
        close(lfd);
    rdzv_close(r);
    return rc;
}

static int report_done_body(struct job *j, int rank, struct comm *c, struct ddp_err *err)
{
    (void)j;
    (void)rank;
    (void)c;
    (void)err;
    return 0;
}

/* In a hierarchical layout a leader's ring neighbour is ring index 1 but rank 2: the set-up
 * error that ddpd reads ("peer rank N") must name rank 2. */
static void test_comm_shm_ring_setup_error_names_rank(void **state)
{
    (void)state;
    struct job j = {.world = 3,
                    .timeout_ms = 3000,
                    .body = report_done_body,
                    .fake_rank = 2,
                    .fake = fake_leader_resets,
                    .b = board_new()};
    run_job(&j, 30000);
    if (j.b->rc[2] != 0)
        fail_msg("the fake rank 2 failed: %d", j.b->rc[2]);
    if (j.b->rc[0] == 0)
        fail_msg("rank 0 formed a ring with a peer that reset it");
    if (!strstr(j.b->msg[0], "peer rank 2 ") || strstr(j.b->msg[0], "peer rank 1 "))
        fail_msg("rank 0: '%s' does not name peer rank 2", j.b->msg[0]);
    munmap(j.b, sizeof(struct board));
}

/* ---- reduce-scatter and all-gather ---- */

/* Reduce-scatter and all-gather (testutil_sharded_sweep): lengths around multiples of W,
 * fewer elements than ranks, and many pieces; j->few caps them at 1009. */
static int sharded_body(struct job *j, int rank, struct comm *c, struct ddp_err *err)
{
    size_t w = (size_t)j->world;
    size_t ns[] = {0, 1, 2, w - 1, w, w + 1, 5 * w + 3, 97, 1009, 16385, 100003};
    size_t nn = sizeof(ns) / sizeof(ns[0]);
    if (j->few)
        nn = 9;
    return testutil_sharded_sweep(c, j->seed, ns, nn, j->registered, &j->b->digest[rank][0], err);
}

static void run_sharded_reg(int world, size_t chunk, const char *const *hosts,
                            const char *want_transport, int small, int registered)
{
    struct job j = {.world = world,
                    .chunk = chunk,
                    .host_ids = hosts,
                    .seed = 900 + (uint64_t)world * 10 + chunk,
                    .body = sharded_body,
                    .few = small,
                    .registered = registered,
                    .b = board_new()};
    run_job(&j, 120000);
    expect_all_ok(&j);
    expect_digests_equal(&j, 1);
    for (int i = 0; i < world; i++)
        if (strcmp(j.b->transport[i], want_transport) != 0)
            fail_msg("W=%d rank %d: transport %s, expected %s", world, i, j.b->transport[i],
                     want_transport);
    expect_no_segments(&j);
    munmap(j.b, sizeof(struct board));
}

static void run_sharded(int world, size_t chunk, const char *const *hosts,
                        const char *want_transport, int small)
{
    run_sharded_reg(world, chunk, hosts, want_transport, small, 0);
}

/* Rank world-1 dies (SIGKILL) or stops (SIGSTOP) after one reduce-scatter + all-gather; the
 * others are in the next ones. */
static int sharded_victim_body(struct job *j, int rank, struct comm *c, struct ddp_err *err,
                               int sig)
{
    enum { SHARD = 4096 };
    static double full[SHARD * MAXW], part[SHARD];
    for (size_t i = 0; i < SHARD * (size_t)j->world; i++)
        full[i] = 1;
    int rc = comm_reduce_scatter(c, full, part, SHARD, COMM_F64, err);
    if (rc == 0)
        rc = comm_allgather(c, part, full, SHARD, COMM_F64, err);
    if (rc < 0)
        return rc;
    if (full[0] != j->world)
        return err_set(err, DDP_EINTERNAL, "wrong sum %g", full[0]);
    if (rank == j->world - 1)
        raise(sig);
    for (int it = 0; it < 3 && rc == 0; it++) {
        rc = comm_reduce_scatter(c, full, part, SHARD, COMM_F64, err);
        if (rc == 0)
            rc = comm_allgather(c, part, full, SHARD, COMM_F64, err);
    }
    return rc == 0 ? err_set(err, DDP_EINTERNAL, "sharded collectives with a lost peer succeeded")
                   : rc;
}

static int sharded_killed_body(struct job *j, int rank, struct comm *c, struct ddp_err *err)
{
    return sharded_victim_body(j, rank, c, err, SIGKILL);
}

static int sharded_stopped_body(struct job *j, int rank, struct comm *c, struct ddp_err *err)
{
    return sharded_victim_body(j, rank, c, err, SIGSTOP);
}

/* Reduce-scatter and all-gather through the shared segment, W = 1..4 and 8; pieces small
 * enough that a shard takes many rounds and the slots cycle (1024 bytes: 5 ranks get 192
 * bytes of a slot each; 64 bytes: 3 ranks get 20 or 16); the hierarchical layouts and ranks
 * on hosts of their own (the TCP ring). */
static void test_comm_shm_sharded(void **state)
{
    (void)state;
    for (int w = 1; w <= 4; w++)
        run_sharded(w, 0, NULL, w == 1 ? "none" : "shm", 0);
    run_sharded(8, 0, NULL, "shm", 1);
    run_sharded(5, 1024, NULL, "shm", 0);
    run_sharded(3, 64, NULL, "shm", 1);
    static const char *const two[] = {"a", "a", "b", "b"};
    run_sharded(4, 0, two, "hier", 0);
    static const char *const mixed[] = {"a", "b", "a", "c", "a"};
    run_sharded(5, 8192, mixed, "hier", 0);
    static const char *const apart[] = {"a", "b", "c"};
    run_sharded(3, 0, apart, "tcp", 0);
    /* Registered buffers (comm_alloc_buffer): read where they lie, no slot; hierarchically
     * and over TCP they are plain memory. */
    for (int w = 2; w <= 4; w++)
        run_sharded_reg(w, 0, NULL, "shm", 0, 1);
    run_sharded_reg(4, 0, two, "hier", 1, 1);
    run_sharded_reg(3, 0, apart, "tcp", 1, 1);
}

/* A SIGKILLed rank during reduce-scatters / all-gathers: DDP_EPEER naming it, through shared
 * memory alone (the comm timeout is far beyond the test's limit) and hierarchically. */
static void test_comm_shm_sharded_killed_peer(void **state)
{
    (void)state;
    struct job j = {
        .world = 3, .timeout_ms = 600000, .body = sharded_killed_body, .b = board_new()};
    run_job(&j, 60000);
    check_victims(&j, DDP_EPEER, "shm sharded");
    expect_no_segments(&j);
    static const char *const two[] = {"a", "a", "b", "b"};
    struct job h = {.world = 4,
                    .timeout_ms = 600000,
                    .host_ids = two,
                    .body = sharded_killed_body,
                    .b = board_new()};
    run_job(&h, 60000);
    check_victims(&h, DDP_EPEER, "hier sharded");
    expect_no_segments(&h);
    munmap(j.b, sizeof(struct board));
    munmap(h.b, sizeof(struct board));
}

/* A SIGSTOPped rank: DDP_ETIMEOUT naming it, within the 1.5 s timeout. */
static void test_comm_shm_sharded_stopped_peer_times_out(void **state)
{
    (void)state;
    struct job j = {
        .world = 3, .timeout_ms = 1500, .body = sharded_stopped_body, .stops = 1, .b = board_new()};
    run_job(&j, 30000);
    check_victims(&j, DDP_ETIMEOUT, "shm sharded");
    expect_no_segments(&j);
    munmap(j.b, sizeof(struct board));
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_comm_shm_sum_sweep),
        cmocka_unit_test(test_comm_shm_small_pieces_both_algorithms),
        cmocka_unit_test(test_comm_shm_hierarchical),
        cmocka_unit_test(test_comm_shm_registered_buffers),
        cmocka_unit_test(test_comm_shm_two_jobs_never_meet),
        cmocka_unit_test(test_comm_shm_killed_peer),
        cmocka_unit_test(test_comm_shm_stopped_peer_times_out),
        cmocka_unit_test(test_comm_shm_hierarchical_stopped_peer),
        cmocka_unit_test(test_comm_shm_mismatch_on_every_rank),
        cmocka_unit_test(test_comm_shm_stale_segment_cleaned),
        cmocka_unit_test(test_comm_shm_force_tcp_env),
        cmocka_unit_test(test_comm_shm_ring_setup_error_names_rank),
        cmocka_unit_test(test_comm_shm_sharded),
        cmocka_unit_test(test_comm_shm_sharded_killed_peer),
        cmocka_unit_test(test_comm_shm_sharded_stopped_peer_times_out),
        /* last: it runs in a mount namespace of its own */
        cmocka_unit_test(test_comm_shm_registered_no_room),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
