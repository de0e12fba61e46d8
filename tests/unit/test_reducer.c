/*
 * test_reducer.c - bucket assignment (reverse order, 1 MiB first bucket, cap, no split),
 * gradients as views into one block, issue order with and without overlap, misuse errors,
 * and the averaged result over a real CPU comm with 2 and 3 ranks on threads.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "ddp/comm.h"
#include "ddp/rdzv.h"
#include "ddp/reducer.h"
#include "ddp/trace.h"
#include "tests/unit/testutil.h"

/* The main MLP 784-256-128-10: W0 b0 W1 b1 W2 b2. */
static const size_t mlp_counts[6] = {784 * 256, 256, 256 * 128, 128, 128 * 10, 10};

static void test_reducer_one_bucket_for_the_main_mlp(void **state)
{
    (void)state;
    struct reducer_opts o = {
        .first_cap_bytes = REDUCER_FIRST_BUCKET_BYTES, .cap_bytes = 25u << 20, .overlap = 1};
    struct reducer *r;
    struct ddp_err err;
    assert_int_equal(reducer_new(NULL, 1, mlp_counts, 6, &o, NULL, &r, &err), 0);
    /* 918.5 KiB in all: below the 1 MiB first bucket. */
    assert_int_equal(reducer_bucket_count(r), 1);
    size_t total;
    float *block = reducer_grad_block(r, &total);
    assert_int_equal(total, 235146);
    /* Reverse order of definition: b2 first, W0 last. */
    assert_ptr_equal(reducer_grad(r, 5), block);
    assert_ptr_equal(reducer_grad(r, 4), block + 10);
    assert_ptr_equal(reducer_grad(r, 0), block + total - 784 * 256);
    reducer_free(r);
}

static void test_reducer_caps_and_never_splits(void **state)
{
    (void)state;
    /* First cap 100 KiB, then 64 KiB. */
    struct reducer_opts o = {.first_cap_bytes = 100 << 10, .cap_bytes = 64 << 10, .overlap = 1};
    struct reducer *r;
    struct ddp_err err;
    size_t counts[8] = {30000, 100, 20000, 100, 5000, 5000, 40000, 10};
    assert_int_equal(reducer_new(NULL, 1, counts, 8, &o, NULL, &r, &err), 0);
    /* reverse: 10, 40000 (160 KiB >= 100 KiB: closes bucket 0)
     *          5000, 5000, 100 (40.4 KB), +20000 -> closes bucket 1
     *          100, 30000 -> bucket 2 (last, may be under the cap) */
    assert_int_equal(reducer_bucket_count(r), 3);
    size_t off, cnt;
    int first, last;
    reducer_bucket_info(r, 0, &off, &cnt, &first, &last);
    assert_int_equal(off, 0);
    assert_int_equal(cnt, 40010);
    assert_int_equal(first, 7);
    assert_int_equal(last, 6);
    reducer_bucket_info(r, 1, &off, &cnt, &first, &last);
    assert_int_equal(off, 40010);
    assert_int_equal(cnt, 30100);
    assert_int_equal(first, 5);
    assert_int_equal(last, 2);
    reducer_bucket_info(r, 2, &off, &cnt, &first, &last);
    assert_int_equal(cnt, 30100);
    assert_int_equal(reducer_tensor_bucket(r, 0), 2);
    assert_int_equal(reducer_tensor_bucket(r, 3), 1);
    /* Views are disjoint and tile the block in bucket order. */
    size_t total;
    float *block = reducer_grad_block(r, &total);
    size_t expect = 0;
    for (int t = 7; t >= 0; t--) {
        assert_ptr_equal(reducer_grad(r, t), block + expect);
        expect += counts[t];
    }
    assert_int_equal(expect, total);
    reducer_free(r);
}

static int count_kind(const char *path, const char *kind, int index)
{
    FILE *f = fopen(path, "r");
    assert_non_null(f);
    char line[128], k[32];
    long long t;
    unsigned long long step;
    int idx, n = 0;
    while (fgets(line, sizeof(line), f)) {
        if (sscanf(line, "%lld %llu %31s %d", &t, &step, k, &idx) == 4 && strcmp(k, kind) == 0 &&
            idx == index)
            n++;
    }
    fclose(f);
    return n;
}

static void test_reducer_issues_in_bucket_order(void **state)
{
    (void)state;
    /* 4 tensors of 1 float each, caps of 1 byte: one bucket per tensor, bucket b holds
     * tensor 3 - b. */
    size_t counts[4] = {1, 1, 1, 1};
    struct reducer_opts o = {.first_cap_bytes = 1, .cap_bytes = 1, .overlap = 1};
    struct reducer *r;
    struct ddp_err err;
    struct trace *tr = trace_new(100);
    assert_int_equal(reducer_new(NULL, 1, counts, 4, &o, tr, &r, &err), 0);
    assert_int_equal(reducer_bucket_count(r), 4);
    /* Tensor 2 (bucket 1) ready first: nothing may start before bucket 0. */
    assert_int_equal(reducer_mark_ready(r, 2, &err), 0);
    assert_int_equal(reducer_buckets_issued(r), 0);
    assert_int_equal(reducer_mark_ready(r, 3, &err), 0);
    assert_int_equal(reducer_buckets_issued(r), 2);
    assert_int_equal(reducer_mark_ready(r, 1, &err), 0);
    assert_int_equal(reducer_buckets_issued(r), 3);
    /* Marking twice is a bug. */
    assert_int_equal(reducer_mark_ready(r, 1, &err), DDP_EINTERNAL);
    assert_non_null(strstr(err.msg, "twice"));
    /* Finishing with tensor 0 never marked is a bug too. */
    assert_int_equal(reducer_finish(r, &err), DDP_EINTERNAL);
    assert_int_equal(reducer_mark_ready(r, 0, &err), 0);
    assert_int_equal(reducer_buckets_issued(r), 4);
    assert_int_equal(reducer_finish(r, &err), 0);
    /* The next step starts clean. */
    assert_int_equal(reducer_buckets_issued(r), 0);
    assert_int_equal(reducer_mark_ready(r, 3, &err), 0);
    assert_int_equal(reducer_buckets_issued(r), 1);
    reducer_free(r);
    char path[] = "/tmp/test_reducer_trace.XXXXXX";
    int fd = mkstemp(path);
    assert_true(fd >= 0);
    close(fd);
    assert_int_equal(trace_write(tr, path, &err), 0);
    for (int b = 0; b < 4; b++) {
        assert_int_equal(count_kind(path, "ar_issue", b), b == 0 ? 2 : 1);
        assert_int_equal(count_kind(path, "ar_done", b), 1);
    }
    unlink(path);
    trace_free(tr);
}

static void test_reducer_no_overlap_waits_for_finish(void **state)
{
    (void)state;
    size_t counts[4] = {1, 1, 1, 1};
    struct reducer_opts o = {.first_cap_bytes = 1, .cap_bytes = 1, .overlap = 0};
    struct reducer *r;
    struct ddp_err err;
    assert_int_equal(reducer_new(NULL, 1, counts, 4, &o, NULL, &r, &err), 0);
    for (int t = 3; t >= 0; t--) {
        assert_int_equal(reducer_mark_ready(r, t, &err), 0);
        assert_int_equal(reducer_buckets_issued(r), 0);
    }
    assert_int_equal(reducer_finish(r, &err), 0);
    reducer_free(r);
    /* A world of 2 needs a comm. */
    assert_int_equal(reducer_new(NULL, 2, counts, 4, &o, NULL, &r, &err), DDP_EINVAL);
}

/* ---- real comm on threads ---- */

#define NT 6
static const size_t rcounts[NT] = {3000, 30, 1000, 17, 501, 3};

struct rank_ctx {
    int rank, world, port, overlap;
    size_t cap;
    int rc;
    char msg[DDP_ERR_MSG_MAX];
    float *result; /* the averaged gradient of every tensor, definition order */
};

static float grad_value(int rank, int t, size_t i)
{
    return (float)(rank + 1) * 0.5f + (float)t - (float)(i % 7) * 0.125f;
}

static void *rank_main(void *arg)
{
    struct rank_ctx *c = arg;
    struct rdzv *rz = NULL;
    struct comm *cm = NULL;
    struct reducer *r = NULL;
    struct ddp_err err;
    err_clear(&err);
    c->rc = rdzv_open("127.0.0.1", c->port, c->rank, c->world, "", 20000, &rz, &err);
    if (c->rc)
        goto out;
    struct comm_opts co;
    comm_opts_default(&co);
    co.timeout_ms = 20000;
    c->rc = comm_new("cpu", rz, c->rank, c->world, &co, &cm, &err);
    if (c->rc)
        goto out;
    struct reducer_opts o = {.first_cap_bytes = c->cap, .cap_bytes = c->cap, .overlap = c->overlap};
    c->rc = reducer_new(cm, c->world, rcounts, NT, &o, NULL, &r, &err);
    if (c->rc)
        goto out;
    for (int step = 0; step < 3 && c->rc == 0; step++) {
        for (int t = NT - 1; t >= 0 && c->rc == 0; t--) {
            float *g = reducer_grad(r, t);
            for (size_t i = 0; i < rcounts[t]; i++)
                g[i] = grad_value(c->rank, t, i) * (float)(step + 1);
            c->rc = reducer_mark_ready(r, t, &err);
        }
        if (c->rc == 0)
            c->rc = reducer_finish(r, &err);
    }
    if (c->rc == 0) {
        size_t o2 = 0;
        for (int t = 0; t < NT; t++) {
            memcpy(c->result + o2, reducer_grad(r, t), rcounts[t] * sizeof(float));
            o2 += rcounts[t];
        }
    }
out:
    snprintf(c->msg, sizeof(c->msg), "%s", err.msg);
    reducer_free(r);
    if (cm)
        comm_free(cm);
    rdzv_close(rz);
    return NULL;
}

static void run_world(int world, size_t cap, int overlap)
{
    pthread_t th[4];
    struct rank_ctx ctx[4];
    int port = testutil_free_port();
    size_t total = 0;
    for (int t = 0; t < NT; t++)
        total += rcounts[t];
    for (int i = 0; i < world; i++) {
        ctx[i] = (struct rank_ctx){
            .rank = i, .world = world, .port = port, .cap = cap, .overlap = overlap};
        ctx[i].result = calloc(total, sizeof(float));
        assert_int_equal(pthread_create(&th[i], NULL, rank_main, &ctx[i]), 0);
    }
    for (int i = 0; i < world; i++)
        assert_int_equal(pthread_join(th[i], NULL), 0);
    for (int i = 0; i < world; i++)
        if (ctx[i].rc != 0)
            fail_msg("rank %d: %d %s", i, ctx[i].rc, ctx[i].msg);
    /* Step 3's gradients (x3), averaged over ranks. */
    size_t o = 0;
    for (int t = 0; t < NT; t++) {
        for (size_t i = 0; i < rcounts[t]; i++) {
            double want = 0;
            for (int k = 0; k < world; k++)
                want += (double)grad_value(k, t, i) * 3.0;
            want /= world;
            for (int k = 0; k < world; k++) {
                double got = ctx[k].result[o + i];
                if (got < want - 1e-4 * (1 + want) || got > want + 1e-4 * (1 + want))
                    fail_msg("world %d rank %d tensor %d [%zu]: %g want %g", world, k, t, i, got,
                             want);
            }
        }
        o += rcounts[t];
    }
    for (int i = 0; i < world; i++)
        free(ctx[i].result);
}

static void test_reducer_averages_over_real_ranks(void **state)
{
    (void)state;
    run_world(2, 1, 1);        /* one bucket per tensor, overlapped */
    run_world(3, 4000, 1);     /* a few buckets */
    run_world(2, 1u << 20, 0); /* one bucket, after the backward */
}

int main(void)
{
    log_init("test_reducer", LOG_WARN);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_reducer_one_bucket_for_the_main_mlp),
        cmocka_unit_test(test_reducer_caps_and_never_splits),
        cmocka_unit_test(test_reducer_issues_in_bucket_order),
        cmocka_unit_test(test_reducer_no_overlap_waits_for_finish),
        cmocka_unit_test(test_reducer_averages_over_real_ranks),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
