/*
 * test_model_cnn.c - the CNN (trainer/model_cnn.h) and its instance: spec parsing and its
 * messages, the parameter layout, deterministic init, the backward against central finite
 * differences, the hooks' order, and PyTorch's gradients and 20 SGD steps
 * (tests/unit/model_cnn_torch.py; skipped, saying so, without python3-torch).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp/rng.h"
#include "trainer/dropout.h"
#include "trainer/model_cnn.h"
#include "trainer/model_ops.h"
#include "tests/unit/torchref.h"

#ifndef TEST_MODEL_CNN_TORCH_PY
#define TEST_MODEL_CNN_TORCH_PY "model_cnn_torch.py"
#endif

#define DIM 784

static void test_model_cnn_parse_spec(void **state)
{
    (void)state;
    struct cnn_spec s;
    struct ddp_err err;
    assert_int_equal(cnn_parse_spec("cnn:c32k5-p2-c64k5-p2-f1024-f10", 1ull << 34, &s, &err), 0);
    assert_int_equal(s.nlayers, 6);
    assert_int_equal(s.nparam_layers, 4);
    assert_int_equal(s.classes, 10);
    /* 32*25+32, 64*32*25+64, 3136*1024+1024, 1024*10+10 */
    assert_int_equal(s.nparams, 832 + 51264 + 3212288 + 10250);
    assert_string_equal(s.text, "cnn:c32k5-p2-c64k5-p2-f1024-f10");
    assert_int_equal(cnn_parse_spec("cnn:f10", 1ull << 30, &s, &err), 0);
    assert_int_equal(s.nparams, 7850);
    /* dropout layers hold no parameters and keep the shape */
    assert_int_equal(cnn_parse_spec("cnn:d0.1-c8k5-p2-d0.25-f32-d0.5-f10", 1ull << 30, &s, &err),
                     0);
    assert_int_equal(s.nlayers, 7);
    assert_int_equal(s.nparam_layers, 3);
    assert_int_equal(s.nparams, 8 * 25 + 8 + 1568 * 32 + 32 + 32 * 10 + 10);
    assert_true(s.layer[3].kind == CNN_DROP && s.layer[3].p == 0.25f);
    const char *bad[] = {
        "mlp:784-10",   "cnn:",         "cnn:c32k5",        "cnn:c32-f10",
        "cnn:c32k-f10", "cnn:x3-f10",   "cnn:p2-p2-f10-p2", "cnn:f10-c3k3-f10",
        "cnn:c0k3-f10", "cnn:c3k0-f10", "cnn:p29-f10",      "cnn:c3k3x-f10",
        "cnn:p2--f10",  "cnn:f10-",     "cnn:p8-p8-f10",    "cnn:c4096k5-c4096k5-f10",
        "cnn:d0-f10",   "cnn:d1-f10",   "cnn:dx-f10",       "cnn:d0.5x-f10",
        "cnn:d-f10",    "cnn:f10-d0.5", "cnn:d-0.5-f10",    "cnn:d0.96-f10"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err_clear(&err);
        if (cnn_parse_spec(bad[i], 1ull << 34, &s, &err) == 0)
            fail_msg("'%s' was accepted", bad[i]);
        if (!strstr(err.msg, "--model"))
            fail_msg("message '%s' for '%s' does not name --model", err.msg, bad[i]);
    }
    /* Too large for the memory: a usage error naming the parameter count. */
    err_clear(&err);
    assert_int_equal(cnn_parse_spec("cnn:c32k5-p2-c64k5-p2-f1024-f10", 1ull << 20, &s, &err),
                     DDP_EINVAL);
    assert_non_null(strstr(err.msg, "3274634 parameters"));
}

static struct cnn *small_cnn_on(const char *spec, size_t max_batch, enum conv_impl impl,
                                uint64_t seed)
{
    struct cnn_spec s;
    struct ddp_err err;
    struct cnn *m = NULL;
    assert_int_equal(cnn_parse_spec(spec, 1ull << 34, &s, &err), 0);
    assert_int_equal(cnn_new(&s, max_batch, impl, seed, &m, &err), 0);
    for (int i = 0; i < s.nlayers; i++)
        if (s.layer[i].kind == CNN_CONV)
            assert_int_equal(cnn_conv_impl(m, i), conv_impl_for(impl));
    return m;
}

static struct cnn *small_cnn(const char *spec, size_t max_batch, uint64_t seed)
{
    return small_cnn_on(spec, max_batch, CONV_AUTO, seed);
}

/* Skips, saying so, where this build has no oneDNN. */
static void need_onednn(void)
{
    if (!conv2d_dnnl_available()) {
        print_message("SKIP: this build has no oneDNN (libdnnl-dev): the oneDNN convolutions "
                      "are not checked\n");
        skip();
    }
}

static void fill(struct rng *r, float *a, size_t n, float scale)
{
    for (size_t i = 0; i < n; i++)
        a[i] = (2.0f * rng_uniform(r) - 1.0f) * scale;
}

static void test_model_cnn_layout_and_init(void **state)
{
    (void)state;
    const char *spec = "cnn:c4k3-p2-c6k5-p7-f8-f3";
    struct cnn *a = small_cnn(spec, 4, 5), *b = small_cnn(spec, 4, 5), *c = small_cnn(spec, 4, 6);
    size_t n = cnn_param_count(a);
    assert_int_equal(n, (4 * 9 + 4) + (6 * 4 * 25 + 6) + (6 * 2 * 2 * 8 + 8) + (8 * 3 + 3));
    assert_int_equal(cnn_tensor_count(a), 8);
    size_t off = 0;
    for (int t = 0; t < cnn_tensor_count(a); t++) {
        assert_int_equal(cnn_tensor_offset(a, t), off);
        off += cnn_tensor_size(a, t);
    }
    assert_int_equal(off, n);
    assert_memory_equal(cnn_params(a), cnn_params(b), n * sizeof(float));
    assert_memory_not_equal(cnn_params(a), cnn_params(c), n * sizeof(float));
    /* torch's bound 1/sqrt(fan_in): the first conv's fan-in is 1 * 3 * 3. */
    for (size_t i = 0; i < 40; i++)
        assert_true(fabsf(cnn_params(a)[i]) <= 1.0f / 3.0f);
    cnn_free(a);
    cnn_free(b);
    cnn_free(c);
}

struct hook_log {
    int order[16];
    int n;
};

static int log_end(void *ctx, int layer, struct ddp_err *err)
{
    (void)err;
    struct hook_log *h = ctx;
    h->order[h->n++] = layer;
    return 0;
}

static double mean_loss(struct cnn *m, const float *x, const uint8_t *y, size_t n)
{
    double ls = 0.0;
    struct ddp_err err;
    assert_int_equal(cnn_forward(m, x, y, n, &ls, &err), 0);
    return ls / (double)n;
}

static void backward_finite_diff(enum conv_impl impl)
{
    struct cnn *m = small_cnn_on("cnn:c3k3-p2-c4k5-p7-f6-f4", 3, impl, 9);
    struct rng r;
    rng_seed(&r, 10);
    float x[3 * DIM];
    uint8_t y[3] = {0, 3, 1};
    fill(&r, x, 3 * DIM, 1.0f);
    struct ddp_err err;
    mean_loss(m, x, y, 3);
    struct hook_log h = {.n = 0};
    struct model_hooks hooks = {.ctx = &h, .layer_begin = NULL, .layer_end = log_end};
    assert_int_equal(cnn_backward(m, &hooks, &err), 0);
    assert_int_equal(h.n, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(h.order[i], 3 - i); /* the reducer's order: last layer first */
    size_t np = cnn_param_count(m);
    float *ana = malloc(np * sizeof(float)), *num = malloc(np * sizeof(float));
    assert_non_null(ana);
    assert_non_null(num);
    for (int t = 0; t < cnn_tensor_count(m); t++)
        memcpy(ana + cnn_tensor_offset(m, t), cnn_grad(m, t), cnn_tensor_size(m, t) * 4);
    float *p = cnn_params(m);
    const float eps = 3e-3f;
    for (size_t i = 0; i < np; i++) {
        float keep = p[i];
        p[i] = keep + eps;
        double hi = mean_loss(m, x, y, 3);
        p[i] = keep - eps;
        double lo = mean_loss(m, x, y, 3);
        p[i] = keep;
        num[i] = (float)((hi - lo) / (2.0 * (double)eps));
    }
    /* The loss is computed in fp32 (about 1e-6 of noise, 2e-4 in a quotient of step 3e-3),
     * and a perturbation of a conv weight moves every position of its channel, so a few of
     * them cross a ReLU's or a pool's kink, where the quotient is not the gradient: at most
     * 1 element in 25 of a tensor (and 1 in any tensor) may be off beyond 5e-2 of the
     * tensor's largest gradient plus 2e-4. PyTorch's check below is the tight one. */
    for (int t = 0; t < cnn_tensor_count(m); t++) {
        const float *a = ana + cnn_tensor_offset(m, t), *nu = num + cnn_tensor_offset(m, t);
        size_t cnt = cnn_tensor_size(m, t), off = 0;
        double mag = 0.0;
        for (size_t i = 0; i < cnt; i++)
            mag = fabs((double)nu[i]) > mag ? fabs((double)nu[i]) : mag;
        for (size_t i = 0; i < cnt; i++)
            if (fabs((double)a[i] - (double)nu[i]) > 5e-2 * mag + 2e-4)
                off++;
        if (off > 1 + cnt / 25)
            fail_msg("cnn tensor %d: %zu of %zu gradients differ from finite differences", t, off,
                     cnt);
    }
    free(ana);
    free(num);
    cnn_free(m);
}

static void test_model_cnn_backward_finite_diff(void **state)
{
    (void)state;
    backward_finite_diff(CONV_IM2COL);
    if (conv2d_dnnl_available())
        backward_finite_diff(CONV_ONEDNN);
    else
        print_message("SKIP: this build has no oneDNN: its backward is not checked\n");
}

/* The dropout keys of the test's step s: sample i of the batch is sample s * batch + i. */
static void step_keys(int s, size_t batch, uint64_t *keys)
{
    for (size_t i = 0; i < batch; i++)
        keys[i] = dropout_sample_key(8, (uint64_t)s, (uint64_t)s * batch + i);
}

/* Our own steps of SGD through the instance, batch after batch of x, its gradients bound to
 * views into one block (as the reducer's buckets are); grads0 gets the first step's. Every
 * forward is a training forward (its d layers drop, with step_keys). */
static void train_ours(struct model_inst *mi, const float *x, const uint8_t *y, size_t batch,
                       int steps, float lr, float *grads0, double *loss0)
{
    uint64_t keys[16];
    assert_true(batch <= 16);
    struct ddp_err err;
    size_t np = mi->ops->param_count(mi);
    int nt = mi->ops->tensor_count(mi);
    float *block = calloc(np, sizeof(float));
    float **views = calloc((size_t)nt, sizeof(float *));
    assert_non_null(block);
    assert_non_null(views);
    size_t off = 0;
    for (int t = 0; t < nt; t++) {
        views[t] = block + off;
        off += mi->ops->tensor_size(mi, t);
    }
    mi->ops->bind_grads(mi, views);
    for (int s = 0; s < steps; s++) {
        double ls = 0.0;
        step_keys(s, batch, keys);
        mi->ops->set_sample_keys(mi, keys, batch);
        assert_int_equal(mi->ops->forward(mi, x + (size_t)s * batch * DIM, y + (size_t)s * batch,
                                          batch, &ls, &err),
                         0);
        assert_int_equal(mi->ops->backward(mi, NULL, &err), 0);
        if (s == 0) {
            *loss0 = ls;
            memcpy(grads0, block, np * sizeof(float));
        }
        assert_int_equal(mi->ops->step(mi, lr, 1.0f, &err), 0);
    }
    free(block);
    free(views);
}

/* The masks of every step's d layers, keep bytes in the order the torch module draws them:
 * per step, per d layer in the spec's order, [batch x the layer's count]. */
static void write_masks(const struct torchref_dir *d, const struct cnn *m, size_t batch, int steps)
{
    const struct cnn_spec *s = cnn_spec_of(m);
    size_t per_step = 0;
    for (int i = 0; i < s->nlayers; i++)
        if (s->layer[i].kind == CNN_DROP)
            per_step += batch * cnn_layer_out_count(m, i);
    uint8_t *keep = malloc(per_step * (size_t)steps), *out = keep;
    float *ones = malloc(batch * DIM * sizeof(float));
    assert_non_null(keep);
    assert_non_null(ones);
    uint64_t keys[16];
    for (int st = 0; st < steps; st++) {
        step_keys(st, batch, keys);
        for (int i = 0; i < s->nlayers; i++) {
            if (s->layer[i].kind != CNN_DROP)
                continue;
            size_t count = cnn_layer_out_count(m, i);
            assert_true(count <= DIM);
            for (size_t j = 0; j < batch * count; j++)
                ones[j] = 1.0f;
            dropout_apply(ones, ones, batch, count, keys, (uint32_t)i, 0, s->layer[i].p);
            for (size_t j = 0; j < batch * count; j++)
                *out++ = ones[j] != 0.0f;
        }
    }
    assert_true(out == keep + per_step * (size_t)steps);
    torchref_write(d, "keep.u8", keep, per_step * (size_t)steps);
    free(keep);
    free(ones);
}

static void matches_torch(const char *spec, enum conv_impl impl)
{
    const size_t batch = 8;
    const int steps = 20;
    const float lr = 0.05f, mom = 0.9f, wd = 1e-4f;
    struct cnn *m = small_cnn_on(spec, batch, impl, 3);
    const struct cnn_spec *cs = cnn_spec_of(m);
    int drops = 0;
    for (int i = 0; i < cs->nlayers; i++)
        drops += cs->layer[i].kind == CNN_DROP;
    size_t np = cnn_param_count(m);
    size_t nx = (size_t)steps * batch;
    float *x = malloc(nx * DIM * sizeof(float));
    uint8_t *y = malloc(nx);
    float *p0 = malloc(np * sizeof(float)), *g0 = malloc(np * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    assert_non_null(p0);
    assert_non_null(g0);
    struct rng r;
    rng_seed(&r, 4);
    fill(&r, x, nx * DIM, 1.0f);
    for (size_t i = 0; i < nx; i++)
        y[i] = (uint8_t)rng_below(&r, 10);
    memcpy(p0, cnn_params(m), np * sizeof(float));
    struct model_inst *mi = model_inst_cnn_new(m, mom, wd);
    double loss0 = 0.0;
    train_ours(mi, x, y, batch, steps, lr, g0, &loss0);

    struct torchref_dir d;
    torchref_dir_new(&d);
    torchref_write(&d, "params.f32", p0, np * sizeof(float));
    torchref_write(&d, "x.f32", x, nx * DIM * sizeof(float));
    torchref_write(&d, "labels.u8", y, nx);
    if (drops)
        write_masks(&d, m, batch, steps);
    char sb[16], ss[16], slr[32], smom[32], swd[32];
    snprintf(sb, sizeof(sb), "%zu", batch);
    snprintf(ss, sizeof(ss), "%d", steps);
    snprintf(slr, sizeof(slr), "%.9g", (double)lr);
    snprintf(smom, sizeof(smom), "%.9g", (double)mom);
    snprintf(swd, sizeof(swd), "%.9g", (double)wd);
    const char *args[] = {spec, sb, ss, slr, smom, swd, NULL};
    int rc = torchref_run(&d, TEST_MODEL_CNN_TORCH_PY, args);
    if (rc == 0) {
        double want = 0.0;
        torchref_read(&d, "loss.f64", &want, sizeof(want));
        if (fabs(loss0 - want) > 1e-5 * fabs(want))
            fail_msg("first loss %.9g, torch %.9g", loss0, want);
        torchref_compare(&d, "first step's gradients vs torch", "grads.f32", g0, np);
        float *theirs = malloc(np * sizeof(float));
        assert_non_null(theirs);
        torchref_read(&d, "params_out.f32", theirs, np * sizeof(float));
        torchref_check_close(drops ? "parameters after 20 SGD steps with dropout vs torch"
                                   : "parameters after 20 SGD steps vs torch",
                             mi->ops->params(mi), theirs, np, 1e-4);
        free(theirs);
    }
    torchref_dir_free(&d);
    mi->ops->free(mi);
    free(x);
    free(y);
    free(p0);
    free(g0);
    if (rc == 77)
        skip();
}

static void test_model_cnn_sgd_matches_torch(void **state)
{
    (void)state;
    matches_torch("cnn:c8k5-p2-c16k5-p2-f32-f10", CONV_IM2COL);
}

/* Every convolution on oneDNN (what auto is where it is built); an even kernel pads
 * unevenly. */
static void test_model_cnn_onednn_matches_torch(void **state)
{
    (void)state;
    need_onednn();
    matches_torch("cnn:c8k5-p2-c16k5-p2-f32-f10", CONV_ONEDNN);
    matches_torch("cnn:c6k4-p2-c8k3-f16-f10", CONV_ONEDNN);
}

static void test_model_cnn_dropout_matches_torch(void **state)
{
    (void)state;
    matches_torch("cnn:c8k5-p2-c16k5-p2-d0.2-f32-d0.5-f10", CONV_AUTO);
}

/* A forward given keys drops; an evaluation (count_correct, no keys) does not, also right
 * after a dropped forward: labels made the undropped argmax of each sample (one class at a
 * time through count_correct) must all count as hits after it, and P = 0.5 before the head
 * would move some of 16 argmaxes. */
static void test_model_cnn_dropout_only_in_training(void **state)
{
    (void)state;
    enum { N = 16, B = 4 };
    struct cnn *m = small_cnn("cnn:c4k3-p2-f32-d0.5-f10", B, 2);
    int classes = cnn_spec_of(m)->classes;
    float *x = malloc(N * DIM * sizeof(float));
    assert_non_null(x);
    uint8_t y[N];
    struct rng r;
    rng_seed(&r, 9);
    fill(&r, x, N * DIM, 1.0f);
    struct ddp_err err;
    for (int i = 0; i < N; i++) {
        int found = 0;
        for (int k = 0; k < classes && !found; k++) {
            uint8_t c = (uint8_t)k;
            size_t hit = 0;
            assert_int_equal(cnn_count_correct(m, x + (size_t)i * DIM, &c, 1, &hit, &err), 0);
            if (hit) {
                y[i] = c;
                found = 1;
            }
        }
        assert_true(found);
    }
    double plain = 0.0, dropped = 0.0, again = 0.0;
    assert_int_equal(cnn_forward(m, x, y, B, &plain, &err), 0);
    uint64_t keys[B];
    step_keys(0, B, keys);
    cnn_set_dropout_keys(m, keys, B);
    assert_int_equal(cnn_forward(m, x, y, B, &dropped, &err), 0);
    assert_true(fabs(dropped - plain) > 1e-6 * fabs(plain));
    size_t hits = 0;
    assert_int_equal(cnn_count_correct(m, x, y, N, &hits, &err), 0);
    assert_int_equal(hits, N);
    assert_int_equal(cnn_forward(m, x, y, B, &again, &err), 0);
    assert_true(again == plain);
    free(x);
    cnn_free(m);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_cnn_parse_spec),
        cmocka_unit_test(test_model_cnn_layout_and_init),
        cmocka_unit_test(test_model_cnn_backward_finite_diff),
        cmocka_unit_test(test_model_cnn_sgd_matches_torch),
        cmocka_unit_test(test_model_cnn_onednn_matches_torch),
        cmocka_unit_test(test_model_cnn_dropout_matches_torch),
        cmocka_unit_test(test_model_cnn_dropout_only_in_training),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
