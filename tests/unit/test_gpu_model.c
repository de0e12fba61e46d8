/*
 * test_gpu_model.c - the GPU MLP (trainer/gpu/model_gpu.c) against the CPU MLP
 * (trainer/model.c) on the same parameters and data: forward loss, every gradient, the hooks'
 * order, and SGD steps with momentum and weight decay, to relative 1e-4, for the main job's
 * shape and for odd ones; gpu_alloc's zeroing; and the NCCL backend at world size 1 on
 * device and host buffers (all-reduce, broadcast, barrier, reduce-scatter, all-gather).
 *
 * Without a GPU the whole binary reports itself skipped (exit 77, ctest's SKIP_RETURN_CODE)
 * and says why; nothing is claimed as passed. With DDP_GPU_REQUIRED=1 (tests/gpu/check.sh,
 * on a GPU machine) that skip is a failure instead.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "ddp/comm.h"
#include "ddp/gpu.h"
#include "trainer/gpu/model_gpu.h"
#include "trainer/model.h"

#define N 64

static const int widths[] = {784, 256, 128, 10};

/* Uniform inputs in [0, 1) and labels below classes, from seed. */
static void fill_shape(float *x, uint8_t *y, size_t n, int dim, int classes, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n * (size_t)dim; i++)
        x[i] = (float)rand() / (float)RAND_MAX;
    for (size_t i = 0; i < n; i++)
        y[i] = (uint8_t)(rand() % classes);
}

/* max |a-b| / max(|b|, tiny) over n floats. */
static double rel_diff(const float *a, const float *b, size_t n)
{
    double num = 0.0, den = 1e-12;
    for (size_t i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        num = d > num ? d : num;
        den = fabs((double)b[i]) > den ? fabs((double)b[i]) : den;
    }
    return num / den;
}

/* The hooks' calls, in order: +l for layer_begin(l), -(l+1) for layer_end(l). */
struct hook_log {
    int calls[64];
    int n;
};

static void log_begin(void *ctx, int layer)
{
    struct hook_log *h = ctx;
    if (h->n < 64)
        h->calls[h->n++] = layer;
}

static int log_end(void *ctx, int layer, struct ddp_err *err)
{
    (void)err;
    struct hook_log *h = ctx;
    if (h->n < 64)
        h->calls[h->n++] = -(layer + 1);
    return 0;
}

/*
 * The GPU model against the CPU model for one shape: loss, every gradient, the hooks' order,
 * `steps` SGD steps with momentum and weight decay, and the hit count. n rows per batch
 * (max_batch n + 3, so a batch smaller than the buffers is exercised too).
 */
static void compare_with_cpu(const int *w, int nw, size_t n, int steps)
{
    struct ddp_err err = {0};
    struct model *cpu = NULL;
    struct gpu_model *gpu = NULL;
    int dim = w[0], classes = w[nw - 1];
    assert_int_equal(model_new(w, nw, n + 3, 42, &cpu, &err), 0);
    size_t np = model_param_count(cpu);
    assert_int_equal(gpu_model_new(w, nw, n + 3, model_params(cpu), &gpu, &err), 0);
    float *x = malloc(n * (size_t)dim * sizeof(float));
    uint8_t *y = malloc(n);
    fill_shape(x, y, n, dim, classes, 7);

    double lc = 0, lg = 0;
    assert_int_equal(model_forward(cpu, x, y, n, &lc, &err), 0);
    assert_int_equal(gpu_model_forward(gpu, x, y, n, &lg, &err), 0);
    printf("shape %d..%d, %zu rows: loss cpu %.8f gpu %.8f\n", dim, classes, n, lc, lg);
    assert_true(fabs(lc - lg) / fabs(lc) < 1e-5);
    struct hook_log hc = {.n = 0}, hg = {.n = 0};
    struct model_hooks kc = {.ctx = &hc, .layer_begin = log_begin, .layer_end = log_end};
    struct model_hooks kg = {.ctx = &hg, .layer_begin = log_begin, .layer_end = log_end};
    assert_int_equal(model_backward(cpu, &kc, &err), 0);
    assert_int_equal(gpu_model_backward(gpu, &kg, &err), 0);
    assert_int_equal(hc.n, 2 * (nw - 1));
    assert_int_equal(hg.n, hc.n);
    assert_memory_equal(hg.calls, hc.calls, (size_t)hc.n * sizeof(int));
    float *g = malloc(np * sizeof(float));
    for (int t = 0; t < model_tensor_count(cpu); t++) {
        size_t k = model_tensor_size(cpu, t);
        assert_int_equal(gpu_to_host(g, gpu_model_grad(gpu, t), k * sizeof(float), &err), 0);
        double d = rel_diff(g, model_grad(cpu, t), k);
        printf("grad tensor %d: relative difference %.2e\n", t, d);
        assert_true(d < 1e-4);
    }

    /* SGD (momentum 0.9, weight decay 1e-4) on fresh batches, trainer/optim.c's order. */
    float *mom_cpu = calloc(np, sizeof(float));
    float *mom_gpu = NULL;
    assert_int_equal(gpu_alloc((void **)&mom_gpu, np * sizeof(float), &err), 0);
    for (int step = 0; step < steps; step++) {
        fill_shape(x, y, n, dim, classes, 100 + (unsigned)step);
        assert_int_equal(model_forward(cpu, x, y, n, &lc, &err), 0);
        assert_int_equal(model_backward(cpu, NULL, &err), 0);
        float *p = model_params(cpu);
        for (int t = 0; t < model_tensor_count(cpu); t++) {
            const float *gr = model_grad(cpu, t);
            size_t off = model_tensor_offset(cpu, t);
            for (size_t i = 0; i < model_tensor_size(cpu, t); i++) {
                float d = gr[i] + 1e-4f * p[off + i];
                mom_cpu[off + i] = 0.9f * mom_cpu[off + i] + d;
                p[off + i] -= 0.05f * mom_cpu[off + i];
            }
        }
        assert_int_equal(gpu_model_forward(gpu, x, y, n, &lg, &err), 0);
        assert_int_equal(gpu_model_backward(gpu, NULL, &err), 0);
        assert_int_equal(gpu_model_sgd(gpu, mom_gpu, 0.05f, 0.9f, 1e-4f, &err), 0);
    }
    float *pg = malloc(np * sizeof(float));
    assert_int_equal(gpu_to_host(pg, gpu_model_params(gpu), np * sizeof(float), &err), 0);
    double d = rel_diff(pg, model_params(cpu), np);
    printf("parameters after %d steps: relative difference %.2e\n", steps, d);
    assert_true(d < 1e-4);
    assert_int_equal(gpu_to_host(pg, mom_gpu, np * sizeof(float), &err), 0);
    d = rel_diff(pg, mom_cpu, np);
    printf("momentum after %d steps: relative difference %.2e\n", steps, d);
    assert_true(d < 1e-4);

    size_t cc = model_count_correct(cpu, x, y, n), cg = 0;
    assert_int_equal(gpu_model_count_correct(gpu, x, y, n, &cg, &err), 0);
    printf("hits cpu %zu gpu %zu of %zu\n", cc, cg, n);
    assert_int_equal(cc, cg);
    /* A label beyond the outputs is refused before anything runs. */
    y[0] = (uint8_t)classes;
    assert_int_equal(gpu_model_forward(gpu, x, y, n, &lg, &err), DDP_EINVAL);

    gpu_free(mom_gpu);
    free(mom_cpu);
    free(pg);
    free(g);
    free(x);
    free(y);
    gpu_model_free(gpu);
    model_free(cpu);
}

static void test_gpu_model_matches_cpu(void **state)
{
    (void)state;
    compare_with_cpu(widths, 4, N, 20);
}

/* Shapes where no dimension is a multiple of another or of a warp: a transposed operand or a
 * wrong leading dimension in an SGEMM cannot hide behind a square or aligned shape. */
static void test_gpu_model_odd_shapes(void **state)
{
    (void)state;
    static const int w1[] = {37, 19, 11, 3};
    static const int w2[] = {29, 7}; /* one layer: its input gradient is never computed */
    compare_with_cpu(w1, 4, 13, 5);
    compare_with_cpu(w2, 2, 1, 5);
    compare_with_cpu(w1, 4, 1, 3);
}

/* gpu_alloc returns zeroed memory, also where a freed block with data is handed out again. */
static void test_gpu_alloc_zeroed(void **state)
{
    (void)state;
    struct ddp_err err = {0};
    enum { K = 1 << 20 };
    float *h = malloc(K * sizeof(float));
    for (int i = 0; i < K; i++)
        h[i] = 1.0f + (float)i;
    for (int round = 0; round < 3; round++) {
        float *d = NULL;
        assert_int_equal(gpu_alloc((void **)&d, K * sizeof(float), &err), 0);
        assert_int_equal(gpu_to_host(h, d, K * sizeof(float), &err), 0);
        for (int i = 0; i < K; i++)
            if (h[i] != 0.0f)
                fail_msg("round %d: element %d is %g, not 0", round, i, (double)h[i]);
        for (int i = 0; i < K; i++)
            h[i] = 1.0f + (float)i;
        assert_int_equal(gpu_to_device(d, h, K * sizeof(float), &err), 0);
        gpu_free(d);
    }
    free(h);
}

static void test_gpu_model_nccl_world_one(void **state)
{
    (void)state;
    struct ddp_err err = {0};
    struct comm *c = NULL;
    struct comm_opts o;
    comm_opts_default(&o);
    o.timeout_ms = 20000;
    assert_int_equal(comm_new("nccl", NULL, 0, 1, &o, &c, &err), 0);
    assert_string_equal(comm_backend_name(c), "nccl");
    float host[5] = {1, 2, 3, 4, 5}, back[5];
    float *dev = NULL;
    assert_int_equal(gpu_alloc((void **)&dev, sizeof(host), &err), 0);
    assert_int_equal(gpu_to_device(dev, host, sizeof(host), &err), 0);
    assert_int_equal(comm_allreduce(c, dev, 5, COMM_F32, &err), 0);
    assert_int_equal(gpu_sync(&err), 0);
    assert_int_equal(gpu_to_host(back, dev, sizeof(back), &err), 0);
    assert_memory_equal(back, host, sizeof(host));
    /* Async on device memory, then a kernel on the compute stream that must run after it. */
    struct comm_work *w = NULL;
    assert_int_equal(comm_allreduce_async(c, dev, 5, COMM_F32, &w, &err), 0);
    assert_int_equal(comm_wait(c, w, &err), 0);
    assert_int_equal(gpu_scale(dev, 5, 2.0f, &err), 0);
    assert_int_equal(gpu_to_host(back, dev, sizeof(back), &err), 0);
    for (int i = 0; i < 5; i++)
        assert_true(back[i] == 2.0f * host[i]);
    double sums[2] = {1.5, 2.5};
    assert_int_equal(comm_allreduce(c, sums, 2, COMM_F64, &err), 0); /* host buffer staged */
    assert_true(sums[0] == 1.5 && sums[1] == 2.5);
    /* Host buffers larger than the staging so far (it grows), async form. */
    size_t big = 3u << 20;
    double *hb = malloc(big * sizeof(double));
    for (size_t i = 0; i < big; i++)
        hb[i] = (double)i;
    assert_int_equal(comm_allreduce_async(c, hb, big, COMM_F64, &w, &err), 0);
    assert_int_equal(comm_wait(c, w, &err), 0);
    for (size_t i = 0; i < big; i++)
        if (hb[i] != (double)i)
            fail_msg("host all-reduce: element %zu is %g", i, hb[i]);
    free(hb);
    assert_int_equal(comm_broadcast(c, host, sizeof(host), 0, &err), 0);
    assert_true(host[0] == 1.0f && host[4] == 5.0f);
    assert_int_equal(comm_broadcast(c, dev, sizeof(host), 0, &err), 0); /* device memory */
    assert_int_equal(gpu_to_host(back, dev, sizeof(back), &err), 0);
    assert_true(back[0] == 2.0f && back[4] == 10.0f);
    assert_int_equal(comm_barrier(c, &err), 0);
    gpu_free(dev);
    comm_free(c);
}

/* Reduce-scatter and all-gather through ncclReduceScatter / ncclAllGather at world size 1
 * (one GPU: a copy of the one shard), on device memory in place and out of place, async
 * with an ordered kernel after it, and on host memory (staged). */
static void test_gpu_model_nccl_sharded_world_one(void **state)
{
    (void)state;
    struct ddp_err err = {0};
    struct comm *c = NULL;
    struct comm_opts o;
    comm_opts_default(&o);
    o.timeout_ms = 20000;
    assert_int_equal(comm_new("nccl", NULL, 0, 1, &o, &c, &err), 0);
    enum { K = 1000 };
    float *host = malloc(K * sizeof(float)), *back = malloc(K * sizeof(float));
    for (int i = 0; i < K; i++)
        host[i] = 0.5f * (float)i - 7.0f;
    float *din = NULL, *dout = NULL;
    assert_int_equal(gpu_alloc((void **)&din, K * sizeof(float), &err), 0);
    assert_int_equal(gpu_alloc((void **)&dout, K * sizeof(float), &err), 0);
    assert_int_equal(gpu_to_device(din, host, K * sizeof(float), &err), 0);
    assert_int_equal(comm_reduce_scatter(c, din, dout, K, COMM_F32, &err), 0);
    assert_int_equal(gpu_to_host(back, dout, K * sizeof(float), &err), 0);
    assert_memory_equal(back, host, K * sizeof(float));
    assert_int_equal(comm_reduce_scatter(c, din, din, K, COMM_F32, &err), 0); /* in place */
    struct comm_work *w = NULL;
    assert_int_equal(comm_allgather_async(c, din, dout, K, COMM_F32, &w, &err), 0);
    assert_int_equal(comm_wait(c, w, &err), 0);
    assert_int_equal(gpu_scale(dout, K, 2.0f, &err), 0); /* ordered after the all-gather */
    assert_int_equal(gpu_to_host(back, dout, K * sizeof(float), &err), 0);
    for (int i = 0; i < K; i++)
        if (back[i] != 2.0f * host[i])
            fail_msg("device all-gather: element %d is %g", i, (double)back[i]);
    /* Host memory, staged; f64. */
    double hin[3] = {1.5, -2.5, 3.25}, hout[3] = {0, 0, 0};
    assert_int_equal(comm_reduce_scatter(c, hin, hout, 3, COMM_F64, &err), 0);
    assert_true(hout[0] == 1.5 && hout[1] == -2.5 && hout[2] == 3.25);
    memset(hout, 0, sizeof(hout));
    assert_int_equal(comm_allgather_async(c, hin, hout, 3, COMM_F64, &w, &err), 0);
    assert_int_equal(comm_wait(c, w, &err), 0);
    assert_true(hout[0] == 1.5 && hout[2] == 3.25);
    /* One device and one host buffer: refused. */
    assert_int_equal(comm_allgather(c, hin, dout, 3, COMM_F64, &err), DDP_EINVAL);
    gpu_free(din);
    gpu_free(dout);
    free(host);
    free(back);
    comm_free(c);
}

int main(void)
{
    const char *why = NULL;
    if (gpu_count(&why) == 0) {
        /* On a machine that has a GPU (tests/gpu/check.sh sets DDP_GPU_REQUIRED=1) a skip
         * would hide a broken load of libddpgpu.so or of the CUDA libraries: fail there. */
        const char *req = getenv("DDP_GPU_REQUIRED");
        if (req && strcmp(req, "1") == 0) {
            printf("FAILED: DDP_GPU_REQUIRED=1 but no usable GPU: %s\n", why ? why : "none found");
            return 1;
        }
        printf("SKIPPED: test_gpu_model needs a GPU: %s\n", why ? why : "none found");
        return 77;
    }
    struct ddp_err err = {0};
    if (gpu_init(0, &err) < 0) {
        printf("gpu_init: %s\n", err.msg);
        return 1;
    }
    /* DDP_GPU_TEST_FILTER=pattern runs the matching tests only (check.sh uses it to keep a
     * run under compute-sanitizer short). */
    const char *filter = getenv("DDP_GPU_TEST_FILTER");
    if (filter && filter[0])
        cmocka_set_test_filter(filter);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_model_matches_cpu),
        cmocka_unit_test(test_gpu_model_odd_shapes),
        cmocka_unit_test(test_gpu_alloc_zeroed),
        cmocka_unit_test(test_gpu_model_nccl_world_one),
        cmocka_unit_test(test_gpu_model_nccl_sharded_world_one),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    gpu_shutdown();
    return rc;
}
