/*
 * test_model_gpt.c - the GPT (trainer/model_gpt.h) and its instance: spec parsing and its
 * messages, the parameter layout and init, the hooks' order, the backward against central
 * finite differences, and PyTorch's loss, gradients and 20 steps of SGD and of AdamW with
 * gradient clipping (tests/unit/model_gpt_torch.py; skipped, saying so, without
 * python3-torch), and 20 AdamW steps with dropout at every site (torch given our masks in
 * place of its bernoulli draws); evaluation forwards drop nothing. Also the optimizer schedule's arithmetic and AdamW's checkpoint arrays.
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

#include "ddp/ckpt.h"
#include "ddp/rng.h"
#include "trainer/dropout.h"
#include "trainer/model_gpt.h"
#include "trainer/model_ops.h"
#include "trainer/text.h"
#include "trainer/train.h"
#include "tests/unit/torchref.h"

#ifndef TEST_MODEL_GPT_TORCH_PY
#define TEST_MODEL_GPT_TORCH_PY "model_gpt_torch.py"
#endif

static struct gpt *small_gpt(const char *spec, size_t max_batch, uint64_t seed)
{
    struct gpt_spec s;
    struct ddp_err err;
    struct gpt *m = NULL;
    assert_int_equal(gpt_parse_spec(spec, 1ull << 34, &s, &err), 0);
    assert_int_equal(gpt_new(&s, max_batch, seed, 1ull << 34, &m, &err), 0);
    return m;
}

static void test_model_gpt_parse_spec(void **state)
{
    (void)state;
    struct gpt_spec s;
    struct ddp_err err;
    assert_int_equal(gpt_parse_spec("gpt:2-4-64-32", 1ull << 34, &s, &err), 0);
    assert_int_equal(s.layers, 2);
    assert_int_equal(s.heads, 4);
    assert_int_equal(s.width, 64);
    assert_int_equal(s.ctx, 32);
    /* wte + wpe + 2 blocks (12 D^2 + 13 D) + ln_f */
    assert_int_equal(s.nparams, 256 * 64 + 32 * 64 + 2 * (12 * 64 * 64 + 13 * 64) + 2 * 64);
    const char *bad[] = {"gpt:",           "gpt:2-4-64",   "gpt:2-4-64-32-1", "gpt:0-4-64-32",
                         "gpt:2-3-64-32",  "gpt:2-4-64-0", "gpt:a-4-64-32",   "gpt:2--64-32",
                         "gpt:2-4-64-32x", "cnn:f10",      "gpt:65-1-8-8",    "gpt:2-4-64-5000"};
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        err_clear(&err);
        if (gpt_parse_spec(bad[i], 1ull << 34, &s, &err) == 0)
            fail_msg("'%s' was accepted", bad[i]);
        if (!strstr(err.msg, "--model"))
            fail_msg("message '%s' for '%s' does not name --model", err.msg, bad[i]);
    }
    err_clear(&err);
    assert_int_equal(gpt_parse_spec("gpt:2-4-64-32", 1ull << 20, &s, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "parameters"));
}

static void test_model_gpt_layout_and_init(void **state)
{
    (void)state;
    struct gpt *a = small_gpt("gpt:2-2-16-8", 2, 5), *b = small_gpt("gpt:2-2-16-8", 2, 5);
    struct gpt *c = small_gpt("gpt:2-2-16-8", 2, 6);
    assert_int_equal(gpt_tensor_count(a), 2 + 24 + 2);
    assert_int_equal(gpt_hook_layers(a), 4);
    size_t off = 0;
    for (int t = 0; t < gpt_tensor_count(a); t++) {
        assert_int_equal(gpt_tensor_offset(a, t), off);
        off += gpt_tensor_size(a, t);
    }
    assert_int_equal(off, gpt_param_count(a));
    size_t n = gpt_param_count(a);
    assert_memory_equal(gpt_params(a), gpt_params(b), n * sizeof(float));
    assert_memory_not_equal(gpt_params(a), gpt_params(c), n * sizeof(float));
    /* ln_1.weight of block 0 is ones, its bias zeros; ln_f.weight ones */
    const float *p = gpt_params(a);
    assert_true(p[gpt_tensor_offset(a, 2)] == 1.0f && p[gpt_tensor_offset(a, 3)] == 0.0f);
    assert_true(p[gpt_tensor_offset(a, 26)] == 1.0f);
    /* the hook layers cover every tensor once */
    int seen[28] = {0};
    for (int l = 0; l < gpt_hook_layers(a); l++) {
        int first = 0, count = 0;
        gpt_layer_tensors(a, l, &first, &count);
        for (int t = first; t < first + count; t++)
            seen[t]++;
    }
    for (int t = 0; t < 28; t++)
        assert_int_equal(seen[t], 1);
    gpt_free(a);
    gpt_free(b);
    gpt_free(c);
}

static void random_tokens(struct rng *r, uint8_t *tok, size_t n)
{
    /* a small alphabet with structure, so the model has something to learn */
    static const char alpha[] = "abcab cabd ";
    for (size_t i = 0; i < n; i++)
        tok[i] = rng_below(r, 4) == 0 ? (uint8_t)rng_below(r, 256)
                                      : (uint8_t)alpha[rng_below(r, sizeof(alpha) - 1)];
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

static double mean_loss(struct gpt *m, const uint8_t *tok, size_t n)
{
    double ls = 0.0;
    struct ddp_err err;
    assert_int_equal(gpt_forward(m, tok, n, &ls, &err), 0);
    return ls / (double)n;
}

static void test_model_gpt_backward_finite_diff(void **state)
{
    (void)state;
    struct gpt *m = small_gpt("gpt:2-2-8-5", 3, 9);
    struct rng r;
    rng_seed(&r, 10);
    /* larger weights than the init, so that every path carries gradient */
    float *p = gpt_params(m);
    size_t np = gpt_param_count(m);
    for (size_t i = 0; i < np; i++)
        p[i] += 0.3f * (2.0f * rng_uniform(&r) - 1.0f);
    uint8_t tok[3 * 6];
    random_tokens(&r, tok, sizeof(tok));
    struct ddp_err err;
    mean_loss(m, tok, 3);
    struct hook_log h = {.n = 0};
    struct model_hooks hooks = {.ctx = &h, .layer_begin = NULL, .layer_end = log_end};
    assert_int_equal(gpt_backward(m, &hooks, &err), 0);
    assert_int_equal(h.n, 4);
    for (int i = 0; i < 4; i++)
        assert_int_equal(h.order[i], 3 - i); /* ln_f, block 2, block 1, embeddings */
    float *ana = malloc(np * sizeof(float));
    assert_non_null(ana);
    for (int t = 0; t < gpt_tensor_count(m); t++)
        memcpy(ana + gpt_tensor_offset(m, t), gpt_grad(m, t), gpt_tensor_size(m, t) * 4);
    const float eps = 1e-2f;
    size_t bad = 0;
    double worst = 0.0;
    for (size_t i = 0; i < np; i++) {
        float keep = p[i];
        p[i] = keep + eps;
        double hi = mean_loss(m, tok, 3);
        p[i] = keep - eps;
        double lo = mean_loss(m, tok, 3);
        p[i] = keep;
        double num = (hi - lo) / (2.0 * (double)eps);
        double d = fabs(num - (double)ana[i]);
        worst = d > worst ? d : worst;
        /* fp32 loss: ~1e-6 noise, 1e-4 in the quotient; the torch test below is the tight one */
        if (d > 2e-3 + 2e-2 * fabs(num))
            bad++;
    }
    if (bad)
        fail_msg("%zu of %zu gradients differ from finite differences (worst %.3g)", bad, np,
                 worst);
    free(ana);
    gpt_free(m);
}

/* The dropout keys of the tests' step s: sample i of the batch is window s * batch + i. */
static void step_keys(int s, size_t batch, uint64_t *keys)
{
    for (size_t i = 0; i < batch; i++)
        keys[i] = dropout_sample_key(5, (uint64_t)s, (uint64_t)s * batch + i);
}

/* Our steps through the instance, batch after batch, gradients bound to views into one block
 * (as the reducer's); grads0 gets the first step's. With drop, each step's forward drops
 * with step_keys. */
static void train_ours(struct model_inst *mi, const uint8_t *tok, size_t window, size_t batch,
                       int steps, float lr, int drop, float *grads0, double *loss0)
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
        if (drop) {
            step_keys(s, batch, keys);
            mi->ops->set_sample_keys(mi, keys, batch);
        }
        assert_int_equal(
            mi->ops->forward(mi, NULL, tok + (size_t)s * batch * window, batch, &ls, &err), 0);
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

/* The masks of every step's forward, keep bytes in the order the torch module draws them:
 * per step the embeddings' [B x T x D], then per block its attention probabilities [B x H x
 * T x T], its attention's output and its MLP's output [B x T x D]. */
static void write_masks(const struct torchref_dir *d, int L, int H, int D, int T, size_t batch,
                        int steps, float p)
{
    size_t bt = (size_t)T * (size_t)D, att = (size_t)H * (size_t)T * (size_t)T;
    size_t per_step = batch * (bt + (size_t)L * (att + 2 * bt));
    uint8_t *keep = malloc(per_step * (size_t)steps);
    float *ones = malloc(batch * (att > bt ? att : bt) * sizeof(float));
    assert_non_null(keep);
    assert_non_null(ones);
    uint8_t *out = keep;
    uint64_t keys[16];
    for (int s = 0; s < steps; s++) {
        step_keys(s, batch, keys);
        for (int k = 0; k < 1 + 3 * L; k++) {
            size_t per = k > 0 && (k - 1) % 3 == 0 ? att : bt;
            uint32_t site =
                k == 0 ? GPT_DROP_EMB : GPT_DROP_SITE((k - 1) / 3, (uint32_t)(k - 1) % 3);
            for (size_t i = 0; i < batch * per; i++)
                ones[i] = 1.0f;
            dropout_apply(ones, ones, batch, per, keys, site, 0, p);
            for (size_t i = 0; i < batch * per; i++)
                *out++ = ones[i] != 0.0f;
        }
    }
    assert_true(out == keep + per_step * (size_t)steps);
    torchref_write(d, "keep.u8", keep, per_step * (size_t)steps);
    free(keep);
    free(ones);
}

static void matches_torch(const char *opt, float lr, float mom, float wd, float clip, float drop)
{
    const char *spec = "gpt:2-4-32-16";
    const size_t batch = 4, window = 17;
    const int steps = 20;
    struct gpt *m = small_gpt(spec, batch, 3);
    gpt_set_dropout(m, drop);
    size_t np = gpt_param_count(m);
    size_t ntok = (size_t)steps * batch * window;
    uint8_t *tok = malloc(ntok);
    float *p0 = malloc(np * sizeof(float)), *g0 = malloc(np * sizeof(float));
    assert_non_null(tok);
    assert_non_null(p0);
    assert_non_null(g0);
    struct rng r;
    rng_seed(&r, 4);
    random_tokens(&r, tok, ntok);
    memcpy(p0, gpt_params(m), np * sizeof(float));
    struct optim_cfg c = {.adamw = strcmp(opt, "adamw") == 0,
                          .momentum = mom,
                          .weight_decay = wd,
                          .beta1 = 0.9f,
                          .beta2 = 0.999f,
                          .eps = 1e-8f,
                          .clip_norm = clip};
    struct model_inst *mi = model_inst_gpt_new(m, &c);
    assert_int_equal(mi->ops->state_arrays(mi), c.adamw ? 2 : 1);
    double loss0 = 0.0;
    train_ours(mi, tok, window, batch, steps, lr, drop > 0.0f, g0, &loss0);

    struct torchref_dir d;
    torchref_dir_new(&d);
    torchref_write(&d, "params.f32", p0, np * sizeof(float));
    torchref_write(&d, "tokens.u8", tok, ntok);
    if (drop > 0.0f)
        write_masks(&d, 2, 4, 32, 16, batch, steps, drop);
    char sb[16], ss[16], slr[32], smom[32], swd[32], sclip[32], sdrop[32];
    snprintf(sb, sizeof(sb), "%zu", batch);
    snprintf(ss, sizeof(ss), "%d", steps);
    snprintf(slr, sizeof(slr), "%.9g", (double)lr);
    snprintf(smom, sizeof(smom), "%.9g", (double)mom);
    snprintf(swd, sizeof(swd), "%.9g", (double)wd);
    snprintf(sclip, sizeof(sclip), "%.9g", (double)clip);
    snprintf(sdrop, sizeof(sdrop), "%.9g", (double)drop);
    const char *args[] = {spec, sb, ss, opt, slr, smom, swd, sclip, sdrop, NULL};
    int rc = torchref_run(&d, TEST_MODEL_GPT_TORCH_PY, args);
    if (rc == 0) {
        double want = 0.0;
        torchref_read(&d, "loss.f64", &want, sizeof(want));
        if (fabs(loss0 - want) > 1e-5 * fabs(want))
            fail_msg("first loss %.9g, torch %.9g", loss0, want);
        torchref_compare(&d, "first step's gradients vs torch", "grads.f32", g0, np);
        float *theirs = malloc(np * sizeof(float));
        assert_non_null(theirs);
        torchref_read(&d, "params_out.f32", theirs, np * sizeof(float));
        char what[96];
        snprintf(what, sizeof(what), "parameters after 20 %s steps%s vs torch", opt,
                 drop > 0.0f ? " with dropout" : "");
        torchref_check_close(what, mi->ops->params(mi), theirs, np, 1e-4);
        /* and they moved: not a test of an optimizer that does nothing */
        double moved = 0.0;
        for (size_t i = 0; i < np; i++)
            moved = fmax(moved, fabs((double)theirs[i] - (double)p0[i]));
        assert_true(moved > 1e-3);
        free(theirs);
    }
    torchref_dir_free(&d);
    mi->ops->free(mi);
    free(tok);
    free(p0);
    free(g0);
    if (rc == 77)
        skip();
}

static void test_model_gpt_sgd_matches_torch(void **state)
{
    (void)state;
    matches_torch("sgd", 0.1f, 0.9f, 1e-4f, 0.0f, 0.0f);
}

static void test_model_gpt_adamw_matches_torch(void **state)
{
    (void)state;
    /* clip 0.5: below the gradients' norm (about 1-3 here), so clipping acts every step */
    matches_torch("adamw", 3e-3f, 0.0f, 0.1f, 0.5f, 0.0f);
}

static void test_model_gpt_dropout_matches_torch(void **state)
{
    (void)state;
    matches_torch("adamw", 3e-3f, 0.0f, 0.1f, 0.5f, 0.2f);
}

/* A forward given keys drops (another loss); one without them, as evaluation runs, drops
 * nothing (the loss of p 0, bit for bit), also right after a dropped one. */
static void test_model_gpt_dropout_only_in_training(void **state)
{
    (void)state;
    struct gpt *m = small_gpt("gpt:2-2-16-8", 3, 5);
    uint8_t tok[27];
    struct rng r;
    rng_seed(&r, 6);
    random_tokens(&r, tok, sizeof(tok));
    double plain = mean_loss(m, tok, 3);
    gpt_set_dropout(m, 0.3f);
    uint64_t keys[3];
    step_keys(0, 3, keys);
    gpt_set_dropout_keys(m, keys, 3);
    double dropped = mean_loss(m, tok, 3);
    assert_true(fabs(dropped - plain) > 1e-4 * fabs(plain));
    gpt_set_dropout_keys(m, keys, 3);
    assert_true(mean_loss(m, tok, 3) == dropped); /* the same keys drop the same */
    assert_true(mean_loss(m, tok, 3) == plain);
    gpt_free(m);
}

static void test_lr_warmup_cosine(void **state)
{
    (void)state;
    assert_true(fabs(train_lr_at_step(1.0, 0, 10, 110) - 0.1) < 1e-12);
    assert_true(fabs(train_lr_at_step(1.0, 9, 10, 110) - 1.0) < 1e-12);
    assert_true(fabs(train_lr_at_step(1.0, 10, 10, 110) - 1.0) < 1e-12);
    assert_true(fabs(train_lr_at_step(1.0, 60, 10, 110) - 0.5) < 1e-12);
    assert_true(fabs(train_lr_at_step(1.0, 110, 10, 110)) < 1e-12);
    assert_true(fabs(train_lr_at_step(2.0, 5, 0, 0) - 2.0) < 1e-12);
}

static void test_ckpt_adamw_arrays(void **state)
{
    (void)state;
    /* a checkpoint with AdamW's two state arrays round-trips, and is refused by a model that
     * steps with SGD: the spec names the optimizer and the arrays differ */
    float params[6] = {1, 2, 3, 4, 5, 6}, st[12];
    for (int i = 0; i < 12; i++)
        st[i] = (float)(i + 100);
    struct ckpt_meta meta;
    memset(&meta, 0, sizeof(meta));
    meta.epoch = 1;
    meta.step = 7;
    meta.nparams = 6;
    meta.state_arrays = 2;
    snprintf(meta.model, sizeof(meta.model), "gpt:1-1-1-1 adamw");
    uint8_t *buf = NULL;
    size_t len = 0;
    struct ddp_err err;
    assert_int_equal(ckpt_encode(&meta, params, st, &buf, &len, &err), 0);
    struct ckpt_view v;
    assert_int_equal(ckpt_decode(buf, len, "t", &v, &err), 0);
    assert_int_equal(v.meta.state_arrays, 2);
    float p2[6], s2[12];
    ckpt_copy_arrays(&v, p2, s2);
    assert_memory_equal(p2, params, sizeof(params));
    assert_memory_equal(s2, st, sizeof(st));
    struct ckpt_id id = {.spec = "gpt:1-1-1-1 adamw", .nparams = 6, .state_arrays = 2};
    assert_true(ckpt_matches_id(&v.meta, &id));
    assert_int_equal(ckpt_size_id(&id), len);
    struct ckpt_id sgd = {.spec = "gpt:1-1-1-1 sgd", .nparams = 6, .state_arrays = 1};
    assert_false(ckpt_matches_id(&v.meta, &sgd));
    /* a byte cut off is refused */
    assert_int_equal(ckpt_decode(buf, len - 1, "t", &v, &err), DDP_EINVAL);
    free(buf);
}

static void test_text_windows(void **state)
{
    (void)state;
    const uint8_t text[] = "abcdefghij"; /* 10 bytes */
    struct dataset d;
    struct ddp_err err;
    assert_int_equal(text_windows(text, 10, 3, "t", &d, &err), 0);
    assert_int_equal(d.n, 3); /* (10 - 1) / 3 */
    assert_int_equal(d.dim, 4);
    assert_memory_equal(d.y, "abcddefgghij", 12);
    data_release(&d);
    assert_int_equal(text_windows(text, 3, 3, "short.txt", &d, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "short.txt"));
    const uint8_t two[] = "abab";
    assert_true(fabs(text_unigram_entropy(two, 4) - log(2.0)) < 1e-12);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_model_gpt_parse_spec),
        cmocka_unit_test(test_model_gpt_layout_and_init),
        cmocka_unit_test(test_model_gpt_backward_finite_diff),
        cmocka_unit_test(test_model_gpt_sgd_matches_torch),
        cmocka_unit_test(test_model_gpt_adamw_matches_torch),
        cmocka_unit_test(test_model_gpt_dropout_matches_torch),
        cmocka_unit_test(test_model_gpt_dropout_only_in_training),
        cmocka_unit_test(test_lr_warmup_cosine),
        cmocka_unit_test(test_ckpt_adamw_arrays),
        cmocka_unit_test(test_text_windows),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
