/*
 * bench_allreduce.c - ddp-bench-allreduce: times libddp's all-reduce (or reduce-scatter, or
 * all-gather) the way nccl-tests' all_reduce_perf (reduce_scatter_perf, all_gather_perf)
 * does and prints its columns.
 *
 *   ddp-bench-allreduce --world W [--backend cpu] [--min-bytes 4096] [--max-bytes 64M]
 *                       [--factor 4] [--warmup 3] [--iters 0 (auto)] [--chunk BYTES]
 *                       [--port P] [--memcpy] [--transport auto|tcp] [--small BYTES]
 *                       [--buffer user|comm] [--op allreduce|reduce-scatter|all-gather]
 *
 * Forks W rank processes on 127.0.0.1 (a rendezvous store on a free port, then comm_new).
 * For each size: warm-up iterations, then timed iterations each preceded by a barrier; an
 * iteration's time is the slowest rank's, the reported time the median over iterations.
 * algbw = bytes / time, busbw = algbw * 2(W-1)/W (nccl-tests' definition for all-reduce).
 * --op reduce-scatter / all-gather time comm_reduce_scatter / comm_allgather out of place
 * instead; as in nccl-tests, size is the full buffer (the reduce-scatter's input, the
 * all-gather's output: W shards of size / W) and busbw = algbw * (W-1)/W.
 * --memcpy prints the machine's memcpy bandwidth (64 MiB, median of 7) as the reference row.
 * --transport tcp forces the TCP ring (comm_opts.force_tcp; DDP_COMM_TRANSPORT=tcp in the
 * environment does the same); auto (default) takes shared memory between these same-host
 * ranks. --small sets comm_opts.small_bytes: 1 = never the one-round small-message
 * algorithm, a huge value = always (to measure the threshold). --buffer comm takes the
 * buffer from comm_alloc_buffer (shared between same-host ranks: all-reduced where it lies,
 * as the reducer's gradients are; nccl-tests' registered buffers), user (default) from
 * malloc, as an application's own array.
 */
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/args.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "ddp/comm.h"
#include "libddp/comm/comm_internal.h"
#include "ddp/rdzv.h"

struct bench_opts {
    int world;
    const char *backend;
    long min_bytes, max_bytes, factor;
    long warmup, iters;
    long chunk;
    int port;
    int memcpy_row;
    int force_tcp;
    long small;
    int comm_buffer;
    int op; /* 0 all-reduce, 1 reduce-scatter, 2 all-gather */
};

static const char *const op_names[] = {"all-reduce", "reduce-scatter", "all-gather"};

/* One collective of --op over bytes of buf (the full buffer; part holds one shard). */
static int run_op(const struct bench_opts *o, struct comm *c, float *buf, float *part, size_t count,
                  struct ddp_err *err)
{
    size_t shard = count / (size_t)o->world;
    if (o->op == 1)
        return comm_reduce_scatter(c, buf, part, shard, COMM_F32, err);
    if (o->op == 2)
        return comm_allgather(c, part, buf, shard, COMM_F32, err);
    return comm_allreduce(c, buf, count, COMM_F32, err);
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, int n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

static void memcpy_row(void)
{
    size_t n = (size_t)64 << 20;
    char *a = xmalloc(n), *b = xmalloc(n);
    memset(a, 1, n);
    memset(b, 2, n);
    double t[7];
    for (int i = 0; i < 7; i++) {
        int64_t t0 = time_mono_ns();
        memcpy(i % 2 ? a : b, i % 2 ? b : a, n);
        t[i] = (double)(time_mono_ns() - t0) / 1e9;
    }
    /* Keep the copies observable. */
    volatile char sink = a[n / 2] + b[n / 3];
    (void)sink;
    double s = median(t, 7);
    printf("# memcpy %zu bytes: %.2f GB/s (median of 7, one thread)\n", n, (double)n / s / 1e9);
    free(a);
    free(b);
}

static long auto_iters(long bytes)
{
    long it = (256L << 20) / (bytes > 0 ? bytes : 1);
    if (it < 5)
        it = 5;
    if (it > 50)
        it = 50;
    return it;
}

static int rank_main(const struct bench_opts *o, int rank)
{
    struct rdzv *r = NULL;
    struct comm *c = NULL;
    struct ddp_err err;
    int ret = 0;
    float *buf = NULL, *part = NULL;
    double *times = NULL;
    if ((ret = rdzv_open("127.0.0.1", o->port, rank, o->world, "bench", 30000, &r, &err)) < 0)
        goto out;
    struct comm_opts co;
    comm_opts_default(&co);
    co.chunk_bytes = (size_t)o->chunk;
    co.force_tcp = o->force_tcp;
    co.small_bytes = (size_t)o->small;
    if ((ret = comm_new(o->backend, r, rank, o->world, &co, &c, &err)) < 0)
        goto out;
    if (o->comm_buffer) {
        if ((ret = comm_alloc_buffer(c, (size_t)o->max_bytes, (void **)&buf, &err)) < 0)
            goto out;
    } else {
        buf = xmalloc((size_t)o->max_bytes);
    }
    for (long i = 0; i < o->max_bytes / 4; i++)
        buf[i] = (float)(i % 17) * 0.25f;
    size_t part_bytes = (size_t)o->max_bytes / (size_t)o->world + 64;
    part = xmalloc(part_bytes);
    for (size_t i = 0; i < part_bytes / 4; i++)
        part[i] = (float)(i % 13) * 0.5f;
    if (rank == 0) {
        char small[32] = "default";
        if (o->small)
            snprintf(small, sizeof(small), "%ld", o->small);
        printf("# ddp %s, backend %s, transport %s, %d ranks (processes) on 127.0.0.1, "
               "chunk %ld, small %s, buffer %s\n",
               op_names[o->op], comm_backend_name(c),
               strcmp(comm_backend_name(c), "cpu") == 0 ? comm_cpu_transport(c) : "-", o->world,
               o->chunk ? o->chunk : 262144L, small, o->comm_buffer ? "comm" : "user");
        printf("%12s %12s %6s %12s %10s %10s\n", "size(B)", "count", "type", "time(us)",
               "algbw(GB/s)", "busbw(GB/s)");
        fflush(stdout);
    }
    for (long bytes = o->min_bytes; bytes <= o->max_bytes; bytes *= o->factor) {
        size_t count = (size_t)bytes / sizeof(float);
        long iters = o->iters > 0 ? o->iters : auto_iters(bytes);
        for (long i = 0; i < o->warmup && ret == 0; i++)
            ret = run_op(o, c, buf, part, count, &err);
        /* times[i * W + rank] = this rank's time of iteration i; summed over ranks below. */
        times = xcalloc((size_t)(iters * o->world), sizeof(double));
        for (long i = 0; i < iters && ret == 0; i++) {
            ret = comm_barrier(c, &err);
            int64_t t0 = time_mono_ns();
            if (ret == 0)
                ret = run_op(o, c, buf, part, count, &err);
            times[i * o->world + rank] = (double)(time_mono_ns() - t0) / 1e3;
        }
        if (ret == 0)
            ret = comm_allreduce(c, times, (size_t)(iters * o->world), COMM_F64, &err);
        if (ret < 0)
            goto out;
        if (rank == 0) {
            double *slow = xcalloc((size_t)iters, sizeof(double));
            for (long i = 0; i < iters; i++)
                for (int q = 0; q < o->world; q++)
                    if (times[i * o->world + q] > slow[i])
                        slow[i] = times[i * o->world + q];
            double us = median(slow, (int)iters);
            double algbw = (double)bytes / (us * 1e-6) / 1e9;
            double busbw = algbw * (o->op == 0 ? 2.0 : 1.0) * (o->world - 1) / o->world;
            printf("%12ld %12zu %6s %12.1f %10.3f %10.3f\n", bytes, count, "float", us, algbw,
                   busbw);
            fflush(stdout);
            free(slow);
        }
        free(times);
        times = NULL;
    }
out:
    if (ret < 0)
        fprintf(stderr, "rank %d: %s\n", rank, err.msg);
    free(times);
    free(part);
    if (o->comm_buffer)
        comm_free_buffer(c, buf);
    else
        free(buf);
    comm_free(c);
    rdzv_close(r);
    return ret < 0 ? 1 : 0;
}

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    if (fd < 0)
        return -1;
    struct sockaddr_in a;
    memset(&a, 0, sizeof(a));
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t sl = sizeof(a);
    int port = -1;
    if (bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0 &&
        getsockname(fd, (struct sockaddr *)&a, &sl) == 0)
        port = ntohs(a.sin_port);
    close(fd);
    return port;
}

static void usage(void)
{
    fprintf(stderr, "usage: ddp-bench-allreduce --world W [--backend cpu] [--min-bytes N] "
                    "[--max-bytes N] [--factor F] [--warmup N] [--iters N] [--chunk BYTES] "
                    "[--port P] [--memcpy] [--transport auto|tcp] [--small BYTES] "
                    "[--buffer user|comm] [--op allreduce|reduce-scatter|all-gather]\n");
}

int main(int argc, char **argv)
{
    struct bench_opts o = {.world = 2,
                           .backend = "cpu",
                           .min_bytes = 4096,
                           .max_bytes = 64L << 20,
                           .factor = 4,
                           .warmup = 3};
    struct ddp_err err;
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        long x = 0;
        int rc = 0;
        if (strcmp(a, "--memcpy") == 0) {
            o.memcpy_row = 1;
            continue;
        }
        if (!v) {
            usage();
            return 2;
        }
        i++;
        if (strcmp(a, "--world") == 0) {
            rc = args_parse_long(a, v, 1, 64, &x, &err);
            o.world = (int)x;
        } else if (strcmp(a, "--backend") == 0) {
            o.backend = v;
        } else if (strcmp(a, "--min-bytes") == 0) {
            rc = args_parse_long(a, v, 4, 1L << 30, &o.min_bytes, &err);
        } else if (strcmp(a, "--max-bytes") == 0) {
            rc = args_parse_long(a, v, 4, 1L << 30, &o.max_bytes, &err);
        } else if (strcmp(a, "--factor") == 0) {
            rc = args_parse_long(a, v, 2, 1024, &o.factor, &err);
        } else if (strcmp(a, "--warmup") == 0) {
            rc = args_parse_long(a, v, 0, 1000, &o.warmup, &err);
        } else if (strcmp(a, "--iters") == 0) {
            rc = args_parse_long(a, v, 0, 100000, &o.iters, &err);
        } else if (strcmp(a, "--chunk") == 0) {
            rc = args_parse_long(a, v, 0, 64L << 20, &o.chunk, &err);
        } else if (strcmp(a, "--transport") == 0) {
            if (strcmp(v, "tcp") != 0 && strcmp(v, "auto") != 0 && strcmp(v, "shm") != 0) {
                usage();
                return 2;
            }
            o.force_tcp = strcmp(v, "tcp") == 0;
        } else if (strcmp(a, "--buffer") == 0) {
            if (strcmp(v, "user") != 0 && strcmp(v, "comm") != 0) {
                fprintf(stderr, "ddp-bench-allreduce: --buffer: '%s' is not one of user, comm\n",
                        v);
                return 2;
            }
            o.comm_buffer = strcmp(v, "comm") == 0;
        } else if (strcmp(a, "--op") == 0) {
            if (strcmp(v, "allreduce") == 0)
                o.op = 0;
            else if (strcmp(v, "reduce-scatter") == 0)
                o.op = 1;
            else if (strcmp(v, "all-gather") == 0)
                o.op = 2;
            else {
                fprintf(stderr,
                        "ddp-bench-allreduce: --op: '%s' is not one of allreduce, "
                        "reduce-scatter, all-gather\n",
                        v);
                return 2;
            }
        } else if (strcmp(a, "--small") == 0) {
            rc = args_parse_long(a, v, 0, 1L << 40, &o.small, &err);
        } else if (strcmp(a, "--port") == 0) {
            rc = args_parse_long(a, v, 1, 65535, &x, &err);
            o.port = (int)x;
        } else {
            usage();
            return 2;
        }
        if (rc < 0) {
            fprintf(stderr, "ddp-bench-allreduce: %s\n", err.msg);
            return 2;
        }
    }
    if (o.min_bytes > o.max_bytes) {
        fprintf(stderr, "ddp-bench-allreduce: --min-bytes is over --max-bytes\n");
        return 2;
    }
    if (o.op != 0 && (o.min_bytes % (4L * o.world) != 0)) {
        fprintf(stderr,
                "ddp-bench-allreduce: --op %s: --min-bytes must be a multiple of 4 * "
                "--world (one float shard per rank)\n",
                op_names[o.op]);
        return 2;
    }
    if (o.memcpy_row)
        memcpy_row();
    if (!o.port)
        o.port = free_port();
    if (o.port < 0) {
        fprintf(stderr, "ddp-bench-allreduce: no free port: %s\n", strerror(errno));
        return 1;
    }
    fflush(stdout);
    pid_t pids[64];
    for (int r = 0; r < o.world; r++) {
        pids[r] = fork();
        if (pids[r] < 0) {
            fprintf(stderr, "ddp-bench-allreduce: fork: %s\n", strerror(errno));
            for (int q = 0; q < r; q++)
                kill(pids[q], SIGKILL);
            return 1;
        }
        if (pids[r] == 0)
            _exit(rank_main(&o, r));
    }
    int status = 0;
    for (int r = 0; r < o.world; r++) {
        int st = 0;
        if (waitpid(pids[r], &st, 0) < 0 || !WIFEXITED(st) || WEXITSTATUS(st) != 0)
            status = 1;
    }
    return status;
}
