/*
 * test_gpu_model.c - the GPU MLP (worker/gpu/model_gpu.c) against the CPU MLP
 * (worker/model.c) on the same parameters and data: forward loss, every gradient, and 20
 * SGD steps with momentum and weight decay, to relative 1e-4; and the NCCL backend at world
 * size 1 on device and host buffers.
 *
 * Without a GPU the whole binary reports itself skipped (exit 77, ctest's SKIP_RETURN_CODE)
 * and says why; nothing is claimed as passed.
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

#include "worker/comm.h"
#include "worker/gpu/gpu.h"
#include "worker/gpu/model_gpu.h"
#include "worker/model.h"

#define N 64

static const int widths[] = {784, 256, 128, 10};

static void fill(float *x, uint8_t *y, size_t n, unsigned seed)
{
    srand(seed);
    for (size_t i = 0; i < n * 784; i++)
        x[i] = (float)rand() / (float)RAND_MAX;
    for (size_t i = 0; i < n; i++)
        y[i] = (uint8_t)(rand() % 10);
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

static void test_gpu_model_matches_cpu(void **state)
{
    (void)state;
    struct ddp_err err = {0};
    struct model *cpu = NULL;
    struct gpu_model *gpu = NULL;
    assert_int_equal(model_new(widths, 4, N, 42, &cpu, &err), 0);
    size_t np = model_param_count(cpu);
    assert_int_equal(gpu_model_new(widths, 4, N, model_params(cpu), &gpu, &err), 0);
    float *x = malloc(N * 784 * sizeof(float));
    uint8_t y[N];
    fill(x, y, N, 7);

    double lc = 0, lg = 0;
    assert_int_equal(model_forward(cpu, x, y, N, &lc, &err), 0);
    assert_int_equal(gpu_model_forward(gpu, x, y, N, &lg, &err), 0);
    printf("loss cpu %.8f gpu %.8f\n", lc, lg);
    assert_true(fabs(lc - lg) / fabs(lc) < 1e-5);
    assert_int_equal(model_backward(cpu, NULL, &err), 0);
    assert_int_equal(gpu_model_backward(gpu, NULL, &err), 0);
    float *g = malloc(np * sizeof(float));
    for (int t = 0; t < model_tensor_count(cpu); t++) {
        size_t n = model_tensor_size(cpu, t);
        assert_int_equal(gpu_to_host(g, gpu_model_grad(gpu, t), n * sizeof(float), &err), 0);
        double d = rel_diff(g, model_grad(cpu, t), n);
        printf("grad tensor %d: relative difference %.2e\n", t, d);
        assert_true(d < 1e-4);
    }

    /* 20 steps of SGD (momentum 0.9, weight decay 1e-4) on fresh batches. */
    float *mom_cpu = calloc(np, sizeof(float));
    float *mom_gpu = NULL;
    assert_int_equal(gpu_alloc((void **)&mom_gpu, np * sizeof(float), &err), 0);
    for (int step = 0; step < 20; step++) {
        fill(x, y, N, 100 + (unsigned)step);
        assert_int_equal(model_forward(cpu, x, y, N, &lc, &err), 0);
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
        assert_int_equal(gpu_model_forward(gpu, x, y, N, &lg, &err), 0);
        assert_int_equal(gpu_model_backward(gpu, NULL, &err), 0);
        assert_int_equal(gpu_model_sgd(gpu, mom_gpu, 0.05f, 0.9f, 1e-4f, &err), 0);
    }
    float *pg = malloc(np * sizeof(float));
    assert_int_equal(gpu_to_host(pg, gpu_model_params(gpu), np * sizeof(float), &err), 0);
    double d = rel_diff(pg, model_params(cpu), np);
    printf("parameters after 20 steps: relative difference %.2e\n", d);
    assert_true(d < 1e-4);

    size_t cc = model_count_correct(cpu, x, y, N), cg = 0;
    assert_int_equal(gpu_model_count_correct(gpu, x, y, N, &cg, &err), 0);
    assert_int_equal(cc, cg);

    gpu_free(mom_gpu);
    free(mom_cpu);
    free(pg);
    free(g);
    free(x);
    gpu_model_free(gpu);
    model_free(cpu);
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
    double sums[2] = {1.5, 2.5};
    assert_int_equal(comm_allreduce(c, sums, 2, COMM_F64, &err), 0); /* host buffer staged */
    assert_true(sums[0] == 1.5 && sums[1] == 2.5);
    assert_int_equal(comm_broadcast(c, host, sizeof(host), 0, &err), 0);
    assert_int_equal(comm_barrier(c, &err), 0);
    gpu_free(dev);
    comm_free(c);
}

int main(void)
{
    const char *why = NULL;
    if (gpu_count(&why) == 0) {
        printf("SKIPPED: test_gpu_model needs a GPU: %s\n", why ? why : "none found");
        return 77;
    }
    struct ddp_err err = {0};
    if (gpu_init(0, &err) < 0) {
        printf("gpu_init: %s\n", err.msg);
        return 1;
    }
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_gpu_model_matches_cpu),
        cmocka_unit_test(test_gpu_model_nccl_world_one),
    };
    int rc = cmocka_run_group_tests(tests, NULL, NULL);
    gpu_shutdown();
    return rc;
}
