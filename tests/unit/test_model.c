/*
 * test_model.c - the MLP: spec parsing, deterministic init, forward against a naive
 * reference, backward against central finite differences, hook order, SGD update.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "trainer/model.h"
#include "trainer/optim.h"
#include "ddp/rng.h"

static void test_model_parse_spec(void **state)
{
    (void)state;
    int w[MODEL_MAX_LAYERS + 1], n = 0;
    struct ddp_err err;
    assert_int_equal(model_parse_spec("mlp:784-256-128-10", w, &n, &err), 0);
    assert_int_equal(n, 4);
    assert_int_equal(w[0], 784);
    assert_int_equal(w[3], 10);
    const char *bad[] = {"784-10",  "mlp:",      "mlp:10",  "mlp:10--5",    "mlp:10-x",
                         "mlp:0-3", "mlp:10-5-", "cnn:1-2", "mlp:9999999-2"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err_clear(&err);
        assert_int_not_equal(model_parse_spec(bad[i], w, &n, &err), 0);
        if (!strstr(err.msg, "--model"))
            fail_msg("message '%s' for '%s' does not name --model", err.msg, bad[i]);
    }
    /* Too large to train: a usage error naming the memory, never an abort in the allocator. */
    err_clear(&err);
    assert_int_equal(model_parse_spec("mlp:20-1048576-1048576-4", w, &n, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "--model"));
    assert_non_null(strstr(err.msg, "1099538890756 parameters"));
    int big[] = {20, 20000, 20000, 4}; /* 400 M parameters: 7.5 GiB to train */
    err_clear(&err);
    assert_int_equal(model_check_size("mlp:20-20000-20000-4", big, 4, 1ull << 30, &err),
                     DDP_EINVAL);
    if (!strstr(err.msg, "--model") || !strstr(err.msg, "7.5 GiB") || !strstr(err.msg, "1.0 GiB"))
        fail_msg("message '%s' does not name --model and both sizes", err.msg);
    assert_int_equal(model_check_size("mlp:20-20000-20000-4", big, 4, 16ull << 30, &err), 0);
    assert_int_equal(model_check_size("mlp:784-256-128-10", w, 4, 1ull << 30, &err), 0);
}

static void test_model_init_deterministic(void **state)
{
    (void)state;
    int w[3] = {30, 20, 5};
    struct model *a, *b, *c;
    struct ddp_err err;
    assert_int_equal(model_new(w, 3, 8, 7, &a, &err), 0);
    assert_int_equal(model_new(w, 3, 8, 7, &b, &err), 0);
    assert_int_equal(model_new(w, 3, 8, 8, &c, &err), 0);
    size_t n = model_param_count(a);
    assert_int_equal(n, 30 * 20 + 20 + 20 * 5 + 5);
    assert_memory_equal(model_params(a), model_params(b), n * sizeof(float));
    assert_memory_not_equal(model_params(a), model_params(c), n * sizeof(float));
    /* torch.nn.Linear's bound 1/sqrt(fan_in), per layer. */
    float *p = model_params(a);
    for (int t = 0; t < model_tensor_count(a); t++) {
        float bound = 1.0f / sqrtf((float)w[model_tensor_layer(t)]);
        for (size_t i = 0; i < model_tensor_size(a, t); i++)
            assert_true(fabsf(p[model_tensor_offset(a, t) + i]) <= bound);
    }
    assert_int_equal(model_tensor_offset(a, 1), 600);
    model_free(a);
    model_free(b);
    model_free(c);
}

/* Mean cross-entropy of the model on (x, y), computed with plain loops in double. */
static double reference_loss(struct model *m, const float *x, const uint8_t *y, size_t n)
{
    const int *w = model_widths(m);
    int L = model_nlayers(m);
    const float *p = model_params(m);
    double total = 0.0;
    double a[64], z[64];
    for (size_t s = 0; s < n; s++) {
        for (int i = 0; i < w[0]; i++)
            a[i] = x[s * (size_t)w[0] + (size_t)i];
        for (int l = 0; l < L; l++) {
            const float *W = p + model_tensor_offset(m, 2 * l);
            const float *b = p + model_tensor_offset(m, 2 * l + 1);
            for (int o = 0; o < w[l + 1]; o++) {
                double acc = b[o];
                for (int i = 0; i < w[l]; i++)
                    acc += (double)W[o * w[l] + i] * a[i];
                z[o] = acc;
            }
            for (int o = 0; o < w[l + 1]; o++)
                a[o] = (l < L - 1 && z[o] < 0) ? 0.0 : z[o];
        }
        double mx = a[0];
        for (int c = 1; c < w[L]; c++)
            mx = a[c] > mx ? a[c] : mx;
        double se = 0;
        for (int c = 0; c < w[L]; c++)
            se += exp(a[c] - mx);
        total += mx + log(se) - a[y[s]];
    }
    return total / (double)n;
}

static void fill_batch(float *x, uint8_t *y, size_t n, int dim, int classes, uint64_t seed)
{
    struct rng r;
    rng_seed(&r, seed);
    for (size_t i = 0; i < n * (size_t)dim; i++)
        x[i] = rng_normal(&r);
    for (size_t i = 0; i < n; i++)
        y[i] = (uint8_t)rng_below(&r, (uint64_t)classes);
}

static void test_model_forward_matches_reference(void **state)
{
    (void)state;
    int w[4] = {9, 13, 7, 4};
    struct model *m;
    struct ddp_err err;
    float x[6 * 9];
    uint8_t y[6];
    fill_batch(x, y, 6, 9, 4, 3);
    assert_int_equal(model_new(w, 4, 6, 11, &m, &err), 0);
    double ls = 0;
    assert_int_equal(model_forward(m, x, y, 6, &ls, &err), 0);
    double ref = reference_loss(m, x, y, 6);
    assert_true(fabs(ls / 6.0 - ref) < 1e-5 * fabs(ref) + 1e-6);
    /* A batch beyond max_batch, or a label beyond the outputs, is refused. */
    assert_int_equal(model_forward(m, x, y, 7, &ls, &err), DDP_EINVAL);
    y[2] = 4;
    assert_int_equal(model_forward(m, x, y, 6, &ls, &err), DDP_EINVAL);
    model_free(m);
}

static void test_model_backward_matches_finite_differences(void **state)
{
    (void)state;
    int w[4] = {6, 8, 5, 3};
    struct model *m;
    struct ddp_err err;
    float x[5 * 6];
    uint8_t y[5];
    fill_batch(x, y, 5, 6, 3, 5);
    assert_int_equal(model_new(w, 4, 5, 2, &m, &err), 0);
    double ls;
    assert_int_equal(model_forward(m, x, y, 5, &ls, &err), 0);
    assert_int_equal(model_backward(m, NULL, &err), 0);
    float *p = model_params(m);
    double max_rel = 0;
    for (int t = 0; t < model_tensor_count(m); t++) {
        const float *g = model_grad(m, t);
        for (size_t i = 0; i < model_tensor_size(m, t); i++) {
            float *q = &p[model_tensor_offset(m, t) + i];
            float keep = *q;
            const float h = 1e-3f;
            *q = keep + h;
            double up = reference_loss(m, x, y, 5);
            *q = keep - h;
            double down = reference_loss(m, x, y, 5);
            *q = keep;
            double fd = (up - down) / (2.0 * (double)h);
            double d = fabs(fd - (double)g[i]) / (fabs(fd) + 1e-3);
            if (d > max_rel)
                max_rel = d;
        }
    }
    if (max_rel > 2e-2)
        fail_msg("gradient differs from finite differences: max relative %g", max_rel);
    model_free(m);
}

struct hook_log {
    int events[16];
    int n;
    int fail_at;
};

static void log_begin(void *ctx, int layer)
{
    struct hook_log *h = ctx;
    h->events[h->n++] = 100 + layer;
}

static int log_end(void *ctx, int layer, struct ddp_err *err)
{
    struct hook_log *h = ctx;
    h->events[h->n++] = 200 + layer;
    if (layer == h->fail_at)
        return err_set(err, DDP_EPEER, "peer rank 1 lost");
    return 0;
}

static void test_model_hooks_in_reverse_layer_order(void **state)
{
    (void)state;
    int w[4] = {4, 4, 4, 2};
    struct model *m;
    struct ddp_err err;
    float x[2 * 4];
    uint8_t y[2];
    fill_batch(x, y, 2, 4, 2, 9);
    assert_int_equal(model_new(w, 4, 2, 1, &m, &err), 0);
    struct hook_log h = {.n = 0, .fail_at = -1};
    struct model_hooks hooks = {.ctx = &h, .layer_begin = log_begin, .layer_end = log_end};
    double ls;
    assert_int_equal(model_forward(m, x, y, 2, &ls, &err), 0);
    assert_int_equal(model_backward(m, &hooks, &err), 0);
    int want[6] = {102, 202, 101, 201, 100, 200};
    assert_int_equal(h.n, 6);
    assert_memory_equal(h.events, want, sizeof(want));
    /* An error from a hook stops the backward and comes back. */
    h.n = 0;
    h.fail_at = 1;
    assert_int_equal(model_forward(m, x, y, 2, &ls, &err), 0);
    assert_int_equal(model_backward(m, &hooks, &err), DDP_EPEER);
    assert_int_equal(h.n, 4);
    model_free(m);
}

static void test_model_bound_grads_are_written_in_place(void **state)
{
    (void)state;
    int w[3] = {3, 4, 2};
    struct model *m;
    struct ddp_err err;
    assert_int_equal(model_new(w, 3, 2, 1, &m, &err), 0);
    size_t n = model_param_count(m);
    float *block = calloc(n, sizeof(float));
    float *views[4];
    size_t off = 0;
    for (int t = 3; t >= 0; t--) { /* reverse order, like the reducer */
        views[t] = block + off;
        off += model_tensor_size(m, t);
    }
    model_bind_grads(m, views);
    float x[6] = {1, 2, 3, -1, 0.5f, 2};
    uint8_t y[2] = {0, 1};
    double ls;
    assert_int_equal(model_forward(m, x, y, 2, &ls, &err), 0);
    assert_int_equal(model_backward(m, NULL, &err), 0);
    for (int t = 0; t < 4; t++)
        assert_ptr_equal(model_grad(m, t), views[t]);
    double s = 0;
    for (size_t i = 0; i < n; i++)
        s += fabs(block[i]);
    assert_true(s > 0);
    free(block);
    model_free(m);
}

static void test_model_sgd_momentum_weight_decay(void **state)
{
    (void)state;
    int w[2] = {1, 1};
    struct model *m;
    struct ddp_err err;
    assert_int_equal(model_new(w, 2, 1, 1, &m, &err), 0);
    float *p = model_params(m);
    p[0] = 1.0f; /* W */
    p[1] = 0.5f; /* b */
    struct optim o;
    optim_init(&o, m, 0.1f, 0.9f, 0.01f);
    model_grad(m, 0)[0] = 2.0f;
    model_grad(m, 1)[0] = 0.0f;
    optim_step(&o, m, 1.0f);
    /* d = 2 + 0.01*1 = 2.01; buf = 2.01; p = 1 - 0.201 */
    assert_float_equal(p[0], 0.799f, 1e-6);
    assert_float_equal(p[1], 0.5f - 0.1f * 0.005f, 1e-6);
    optim_step(&o, m, 1.0f);
    /* d = 2 + 0.00799 ; buf = 0.9*2.01 + d */
    float buf = 0.9f * 2.01f + (2.0f + 0.01f * 0.799f);
    assert_float_equal(p[0], 0.799f - 0.1f * buf, 1e-5);
    optim_release(&o);
    model_free(m);
}

static void test_model_count_correct(void **state)
{
    (void)state;
    int w[2] = {2, 2};
    struct model *m;
    struct ddp_err err;
    assert_int_equal(model_new(w, 2, 2, 1, &m, &err), 0);
    float *p = model_params(m);
    /* Identity weights, zero bias: predicts the larger coordinate. */
    p[0] = 1;
    p[1] = 0;
    p[2] = 0;
    p[3] = 1;
    p[4] = 0;
    p[5] = 0;
    float x[10] = {1, 0, 0, 1, 2, 1, 0, 3, 5, 4};
    uint8_t y[5] = {0, 1, 1, 1, 0};
    /* 5 samples with max_batch 2: three pieces. */
    assert_int_equal(model_count_correct(m, x, y, 5), 4);
    model_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_parse_spec),
        cmocka_unit_test(test_model_init_deterministic),
        cmocka_unit_test(test_model_forward_matches_reference),
        cmocka_unit_test(test_model_backward_matches_finite_differences),
        cmocka_unit_test(test_model_hooks_in_reverse_layer_order),
        cmocka_unit_test(test_model_bound_grads_are_written_in_place),
        cmocka_unit_test(test_model_sgd_momentum_weight_decay),
        cmocka_unit_test(test_model_count_correct),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
