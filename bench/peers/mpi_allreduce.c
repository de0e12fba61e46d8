/*
 * mpi_allreduce.c - the Open MPI peer of bench/allreduce: times MPI_Allreduce (float32, sum)
 * the way ddp-bench-allreduce times ours and prints the same columns (nccl-tests'
 * all_reduce_perf columns).
 *
 *   mpirun --allow-run-as-root --oversubscribe -np W --mca btl self,vader \
 *       mpi_allreduce [--min-bytes 4096] [--max-bytes 67108864] [--factor 4] [--warmup 3]
 *                     [--iters 0 (auto)] [--op allreduce|reduce_scatter|allgather]
 *
 * --op reduce_scatter times MPI_Reduce_scatter_block (size = the whole send buffer, a block of
 * size / W per rank), --op allgather MPI_Allgather (size = the whole receive buffer), both out
 * of place, with busbw = algbw * (W-1)/W (nccl-tests, and ddp-bench-allreduce --op).
 *
 * Built by bench/peers/setup.sh with mpicc, not by our CMake (Open MPI is a peer, not a
 * dependency). Same method as ours: for each size, warm-up iterations, then timed
 * iterations each preceded by a barrier; an iteration's time is the slowest rank's (a
 * MAX reduce of the per-rank times), the reported time the median over iterations.
 * algbw = bytes / time, busbw = algbw * 2(W-1)/W. The iteration count rule is ours:
 * 256 MiB / size, clamped to 5..50.
 */
#include <errno.h>
#include <mpi.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median(double *v, long n)
{
    qsort(v, (size_t)n, sizeof(double), cmp_double);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
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

/* Parses a positive decimal long into *out; returns 0, or -1 on anything else. */
static int parse_long(const char *s, long *out)
{
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || end == s || *end != '\0' || v < 0)
        return -1;
    *out = v;
    return 0;
}

/* One collective of op over count floats of buf (the whole buffer; part holds one block). */
static int run(int op, float *buf, float *part, int count, int world)
{
    int block = count / world;
    if (op == 1)
        return MPI_Reduce_scatter_block(buf, part, block, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    if (op == 2)
        return MPI_Allgather(part, block, MPI_FLOAT, buf, block, MPI_FLOAT, MPI_COMM_WORLD);
    return MPI_Allreduce(MPI_IN_PLACE, buf, count, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
}

int main(int argc, char **argv)
{
    long min_bytes = 4096, max_bytes = 64L << 20, factor = 4, warmup = 3, iters = 0;
    int rank = 0, world = 1, ret = 1;
    float *buf = NULL, *part = NULL;
    double *t = NULL, *slow = NULL;
    int op = 0; /* 0 MPI_Allreduce, 1 MPI_Reduce_scatter_block, 2 MPI_Allgather */
    static const char *const names[] = {"MPI_Allreduce", "MPI_Reduce_scatter_block",
                                        "MPI_Allgather"};

    if (MPI_Init(&argc, &argv) != MPI_SUCCESS)
        return 1;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &world);
    for (int i = 1; i < argc; i++) {
        long *dst = NULL;
        if (strcmp(argv[i], "--op") == 0 && i + 1 < argc) {
            const char *v = argv[++i];
            op = strcmp(v, "allreduce") == 0        ? 0
                 : strcmp(v, "reduce_scatter") == 0 ? 1
                 : strcmp(v, "allgather") == 0      ? 2
                                                    : -1;
            if (op < 0) {
                if (rank == 0)
                    fprintf(stderr, "mpi_allreduce: bad --op '%s'\n", v);
                goto out;
            }
            continue;
        }
        if (strcmp(argv[i], "--min-bytes") == 0)
            dst = &min_bytes;
        else if (strcmp(argv[i], "--max-bytes") == 0)
            dst = &max_bytes;
        else if (strcmp(argv[i], "--factor") == 0)
            dst = &factor;
        else if (strcmp(argv[i], "--warmup") == 0)
            dst = &warmup;
        else if (strcmp(argv[i], "--iters") == 0)
            dst = &iters;
        if (!dst || i + 1 >= argc || parse_long(argv[i + 1], dst) < 0) {
            if (rank == 0)
                fprintf(stderr, "mpi_allreduce: bad argument '%s'\n", argv[i]);
            goto out;
        }
        i++;
    }
    if (min_bytes < 4 || max_bytes < min_bytes || factor < 2) {
        if (rank == 0)
            fprintf(stderr, "mpi_allreduce: need 4 <= min-bytes <= max-bytes, factor >= 2\n");
        goto out;
    }
    buf = malloc((size_t)max_bytes);
    part = malloc((size_t)max_bytes / (size_t)world + 64);
    t = malloc((size_t)(iters > 50 ? iters : 50) * sizeof(double));
    slow = malloc((size_t)(iters > 50 ? iters : 50) * sizeof(double));
    if (!buf || !part || !t || !slow) {
        fprintf(stderr, "mpi_allreduce: out of memory\n");
        goto out;
    }
    for (long i = 0; i < max_bytes / 4; i++)
        buf[i] = (float)(i % 17) * 0.25f;
    if (rank == 0) {
        int vlen = 0;
        char ver[MPI_MAX_LIBRARY_VERSION_STRING];
        MPI_Get_library_version(ver, &vlen);
        char *nl = strchr(ver, ',');
        if (nl)
            *nl = '\0';
        printf("# %s (%s), %d ranks (processes), float sum\n", names[op], ver, world);
        printf("%12s %12s %6s %12s %10s %10s\n", "size(B)", "count", "type", "time(us)",
               "algbw(GB/s)", "busbw(GB/s)");
        fflush(stdout);
    }
    for (long bytes = min_bytes; bytes <= max_bytes; bytes *= factor) {
        int count = (int)(bytes / 4);
        long n = iters > 0 ? iters : auto_iters(bytes);
        for (long i = 0; i < warmup; i++)
            if (run(op, buf, part, count, world) != MPI_SUCCESS)
                goto out;
        for (long i = 0; i < n; i++) {
            MPI_Barrier(MPI_COMM_WORLD);
            double t0 = MPI_Wtime();
            if (run(op, buf, part, count, world) != MPI_SUCCESS)
                goto out;
            t[i] = (MPI_Wtime() - t0) * 1e6;
        }
        if (MPI_Reduce(t, slow, (int)n, MPI_DOUBLE, MPI_MAX, 0, MPI_COMM_WORLD) != MPI_SUCCESS)
            goto out;
        if (rank == 0) {
            double us = median(slow, n);
            double algbw = (double)bytes / (us * 1e-6) / 1e9;
            double busbw = algbw * (op == 0 ? 2.0 : 1.0) * (world - 1) / world;
            printf("%12ld %12d %6s %12.1f %10.3f %10.3f\n", bytes, count, "float", us, algbw,
                   busbw);
            fflush(stdout);
        }
    }
    ret = 0;
out:
    free(buf);
    free(part);
    free(t);
    free(slow);
    MPI_Finalize();
    return ret;
}
