/*
 * test_layers_gpt.c - the transformer's layers (trainer/layernorm.h, gelu.h, attention.h,
 * embedding.h, dropout.h): each backward against central finite differences of L = sum(y * r), and each
 * forward and backward against PyTorch's own (tests/unit/layers_torch.py), max |ours - torch|
 * <= 1e-5 * max |torch| per array. Without python3-torch the comparisons skip, saying so.
 * Dropout's mask is ours (torch's RNG cannot be given it), so torch gets it as its input in
 * place of its bernoulli draw, and its own dropout arithmetic and autograd do the rest; the
 * mask itself is checked for its rate, scale, determinism and independence of the batch.
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
#include "trainer/attention.h"
#include "trainer/dropout.h"
#include "trainer/embedding.h"
#include "trainer/gelu.h"
#include "trainer/layernorm.h"
#include "tests/unit/torchref.h"

#ifndef TEST_LAYERS_TORCH_PY
#define TEST_LAYERS_TORCH_PY "layers_torch.py"
#endif

/* One layer under test: forward(ctx) writes y (ny floats) from the inputs. */
struct lcase {
    void (*forward)(struct lcase *k);
    float *y, *r;
    size_t ny;
    /* layer-specific */
    size_t n, b;
    int c, t, heads, tmax;
    float *x, *w, *bias, *mean, *rstd, *qkv, *att, *wte, *wpe;
    uint8_t *tok;
    const struct dropout_site *drop; /* attention's, or NULL */
    float *scratch;
};

static double lcase_loss(struct lcase *k)
{
    k->forward(k);
    double s = 0.0;
    for (size_t i = 0; i < k->ny; i++)
        s += (double)k->y[i] * (double)k->r[i];
    return s;
}

/* Checks the analytic gradient ana of L with respect to p[0..n) against central differences:
 * every element within tol * max|numeric| + 1e-3. */
static void check_fd(const char *what, struct lcase *k, float *p, size_t n, const float *ana,
                     float eps, double tol)
{
    double mag = 0.0;
    float *num = torchref_zeros(n);
    for (size_t i = 0; i < n; i++) {
        float keep = p[i];
        p[i] = keep + eps;
        double hi = lcase_loss(k);
        p[i] = keep - eps;
        double lo = lcase_loss(k);
        p[i] = keep;
        num[i] = (float)((hi - lo) / (2.0 * (double)eps));
        mag = fabs((double)num[i]) > mag ? fabs((double)num[i]) : mag;
    }
    for (size_t i = 0; i < n; i++)
        if (fabs((double)ana[i] - (double)num[i]) > tol * mag + 1e-3)
            fail_msg("%s: element %zu: analytic %.6g, finite differences %.6g (max %.3g)", what, i,
                     (double)ana[i], (double)num[i], mag);
    free(num);
    k->forward(k); /* leaves the forward's state as it was */
}

static void ln_fwd(struct lcase *k)
{
    layernorm_forward(k->x, k->n, k->c, k->w, k->bias, k->y, k->mean, k->rstd);
}

static void gelu_fwd(struct lcase *k)
{
    gelu_forward(k->x, k->y, k->ny);
}

static void att_fwd(struct lcase *k)
{
    attention_forward(k->qkv, k->b, k->t, k->c, k->heads, k->y, k->att, k->drop, k->scratch);
}

static void emb_fwd(struct lcase *k)
{
    embedding_forward(k->tok, k->b, k->t, (size_t)k->t, k->c, k->wte, k->wpe, k->y);
}

static void ln_case(struct lcase *k, struct rng *r, size_t n, int c)
{
    memset(k, 0, sizeof(*k));
    k->forward = ln_fwd;
    k->n = n;
    k->c = c;
    k->ny = n * (size_t)c;
    k->x = torchref_rand(r, k->ny, 2.0f);
    k->w = torchref_rand(r, (size_t)c, 1.0f);
    k->bias = torchref_rand(r, (size_t)c, 1.0f);
    k->r = torchref_rand(r, k->ny, 1.0f);
    k->y = torchref_zeros(k->ny);
    k->mean = torchref_zeros(n);
    k->rstd = torchref_zeros(n);
}

static void att_case(struct lcase *k, struct rng *r, size_t b, int t, int c, int heads)
{
    memset(k, 0, sizeof(*k));
    k->forward = att_fwd;
    k->b = b;
    k->t = t;
    k->c = c;
    k->heads = heads;
    k->ny = b * (size_t)t * (size_t)c;
    k->qkv = torchref_rand(r, 3 * k->ny, 1.0f);
    k->att = torchref_zeros(b * (size_t)heads * (size_t)t * (size_t)t);
    k->scratch = torchref_zeros(2 * (size_t)t * (size_t)t);
    k->r = torchref_rand(r, k->ny, 1.0f);
    k->y = torchref_zeros(k->ny);
}

static void emb_case(struct lcase *k, struct rng *r, size_t b, int t, int c, int tmax)
{
    memset(k, 0, sizeof(*k));
    k->forward = emb_fwd;
    k->b = b;
    k->t = t;
    k->c = c;
    k->tmax = tmax;
    k->ny = b * (size_t)t * (size_t)c;
    k->wte = torchref_rand(r, 256 * (size_t)c, 1.0f);
    k->wpe = torchref_rand(r, (size_t)tmax * (size_t)c, 1.0f);
    k->tok = malloc(b * (size_t)t);
    assert_non_null(k->tok);
    for (size_t i = 0; i < b * (size_t)t; i++)
        k->tok[i] = (uint8_t)(i % 3 == 0 ? 7 : rng_below(r, 256)); /* repeats: accumulation */
    k->r = torchref_rand(r, k->ny, 1.0f);
    k->y = torchref_zeros(k->ny);
}

static void lcase_free(struct lcase *k)
{
    free(k->y);
    free(k->r);
    free(k->x);
    free(k->w);
    free(k->bias);
    free(k->mean);
    free(k->rstd);
    free(k->qkv);
    free(k->att);
    free(k->wte);
    free(k->wpe);
    free(k->tok);
    free(k->scratch);
}

static void test_layernorm_finite_diff(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 1);
    struct lcase k;
    ln_case(&k, &r, 5, 12);
    k.forward(&k);
    float *dx = torchref_zeros(k.ny), *dw = torchref_zeros(12), *db = torchref_zeros(12);
    layernorm_backward(k.x, k.n, k.c, k.w, k.mean, k.rstd, k.r, dx, dw, db);
    check_fd("layernorm dx", &k, k.x, k.ny, dx, 1e-2f, 1e-2);
    check_fd("layernorm dw", &k, k.w, 12, dw, 1e-2f, 1e-2);
    check_fd("layernorm db", &k, k.bias, 12, db, 1e-2f, 1e-2);
    /* dx is added to, not written: a second backward doubles it. */
    float keep = dx[3];
    layernorm_backward(k.x, k.n, k.c, k.w, k.mean, k.rstd, k.r, dx, dw, db);
    assert_true(fabsf(dx[3] - 2.0f * keep) <= 1e-5f * fabsf(keep) + 1e-7f);
    free(dx);
    free(dw);
    free(db);
    lcase_free(&k);
}

static void test_gelu_finite_diff(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 2);
    struct lcase k;
    memset(&k, 0, sizeof(k));
    k.forward = gelu_fwd;
    k.ny = 200;
    k.x = torchref_rand(&r, k.ny, 4.0f);
    k.r = torchref_rand(&r, k.ny, 1.0f);
    k.y = torchref_zeros(k.ny);
    float *dx = torchref_zeros(k.ny);
    gelu_backward(k.x, k.r, dx, k.ny);
    check_fd("gelu dx", &k, k.x, k.ny, dx, 1e-2f, 1e-2);
    lcase_free(&k);
    free(dx);
}

static void test_attention_finite_diff(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 3);
    struct lcase k;
    att_case(&k, &r, 2, 5, 8, 2);
    k.forward(&k);
    /* causality: the first position's output is its own v */
    for (int j = 0; j < 8; j++)
        assert_true(fabsf(k.y[j] - k.qkv[16 + j]) < 1e-6f);
    float *dqkv = torchref_zeros(3 * k.ny), *scratch = torchref_zeros(25);
    attention_backward(k.qkv, k.att, k.r, k.b, k.t, k.c, k.heads, NULL, dqkv, scratch);
    check_fd("attention dqkv", &k, k.qkv, 3 * k.ny, dqkv, 1e-2f, 1e-2);
    free(dqkv);
    free(scratch);
    lcase_free(&k);
}

static void test_embedding_finite_diff(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 4);
    struct lcase k;
    emb_case(&k, &r, 3, 4, 6, 5);
    k.forward(&k);
    float *dwte = torchref_zeros(256 * 6), *dwpe = torchref_zeros(5 * 6);
    embedding_backward(k.tok, k.b, k.t, (size_t)k.t, k.c, k.r, dwte, dwpe);
    check_fd("embedding dwte", &k, k.wte, 256 * 6, dwte, 1e-2f, 1e-2);
    check_fd("embedding dwpe", &k, k.wpe, 5 * 6, dwpe, 1e-2f, 1e-2);
    free(dwte);
    free(dwpe);
    lcase_free(&k);
}

/* The mask of dropout_apply for n samples of per floats: 1 where kept (its value divided by
 * x's is 1 / (1 - p)), 0 where dropped; caller frees. */
static uint8_t *keep_mask(size_t n, size_t per, const uint64_t *keys, uint32_t site, float p)
{
    float *ones = malloc(n * per * sizeof(float));
    uint8_t *keep = malloc(n * per);
    assert_non_null(ones);
    assert_non_null(keep);
    for (size_t i = 0; i < n * per; i++)
        ones[i] = 1.0f;
    dropout_apply(ones, ones, n, per, keys, site, 0, p);
    for (size_t i = 0; i < n * per; i++)
        keep[i] = ones[i] != 0.0f;
    free(ones);
    return keep;
}

static void test_dropout_mask(void **state)
{
    (void)state;
    enum { N = 8, PER = 50000 };
    const float p = 0.3f;
    uint64_t keys[N];
    for (int s = 0; s < N; s++)
        keys[s] = dropout_sample_key(9, 4, (uint64_t)(100 + s));
    float *x = malloc(N * PER * sizeof(float)), *y = malloc(N * PER * sizeof(float));
    assert_non_null(x);
    assert_non_null(y);
    struct rng r;
    rng_seed(&r, 5);
    for (size_t i = 0; i < (size_t)N * PER; i++)
        x[i] = 0.5f + rng_uniform(&r); /* never 0: a 0 in y is a drop */
    dropout_apply(y, x, N, PER, keys, 3, 0, p);
    /* rate: 400,000 draws, sd of the kept fraction 7e-4; scale: exactly x * (1 / (1 - p)) */
    size_t kept = 0;
    float scale = 1.0f / (1.0f - p);
    for (size_t i = 0; i < (size_t)N * PER; i++) {
        if (y[i] != 0.0f) {
            kept++;
            assert_true(y[i] == x[i] * scale);
        }
    }
    double frac = (double)kept / (double)(N * PER);
    if (fabs(frac - 0.7) > 0.005)
        fail_msg("kept %.4f of the elements, want 0.7", frac);
    /* in place equals out of place; the same keys give the same mask */
    float *z = malloc(N * PER * sizeof(float));
    assert_non_null(z);
    memcpy(z, x, N * PER * sizeof(float));
    dropout_apply(z, z, N, PER, keys, 3, 0, p);
    assert_memory_equal(z, y, N * PER * sizeof(float));
    /* a sample's mask is its own: sample 5 alone, at batch position 0, drops the same */
    dropout_apply(z, x + 5 * PER, 1, PER, keys + 5, 3, 0, p);
    assert_memory_equal(z, y + 5 * PER, PER * sizeof(float));
    /* in pieces with offsets (as attention walks heads) equals the whole */
    dropout_apply(z, x, 1, 1000, keys, 3, 0, p);
    dropout_apply(z + 1000, x + 1000, 1, PER - 1000, keys, 3, 1000, p);
    assert_memory_equal(z, y, PER * sizeof(float));
    /* other samples, sites, steps and seeds drop elsewhere: masks agree on about
     * p^2 + (1-p)^2 = 0.58 of the elements, not all */
    uint64_t other[4] = {keys[1], keys[0], dropout_sample_key(9, 5, 100),
                         dropout_sample_key(10, 4, 100)};
    uint32_t sites[4] = {3, 4, 3, 3};
    for (int v = 0; v < 4; v++) {
        dropout_apply(z, x, 1, PER, &other[v], sites[v], 0, p);
        size_t same = 0;
        for (size_t i = 0; i < PER; i++)
            same += (z[i] != 0.0f) == (y[i] != 0.0f);
        double f = (double)same / PER;
        if (fabs(f - 0.58) > 0.02)
            fail_msg("variant %d: masks agree on %.3f of the elements, want about 0.58", v, f);
    }
    /* p 0 copies */
    dropout_apply(z, x, N, PER, keys, 3, 0, 0.0f);
    assert_memory_equal(z, x, N * PER * sizeof(float));
    free(x);
    free(y);
    free(z);
}

static void test_attention_dropout_finite_diff(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 6);
    struct lcase k;
    att_case(&k, &r, 2, 5, 8, 2);
    uint64_t keys[2] = {dropout_sample_key(1, 0, 0), dropout_sample_key(1, 0, 1)};
    struct dropout_site drop = {keys, 7, 0.25f};
    k.drop = &drop;
    k.forward(&k);
    float *dqkv = torchref_zeros(3 * k.ny);
    attention_backward(k.qkv, k.att, k.r, k.b, k.t, k.c, k.heads, &drop, dqkv, k.scratch);
    check_fd("attention with dropout dqkv", &k, k.qkv, 3 * k.ny, dqkv, 1e-2f, 1e-2);
    free(dqkv);
    lcase_free(&k);
}

static int run_torch(struct torchref_dir *d, const char *kind, const char *const *sizes)
{
    const char *args[12];
    int i = 0;
    args[i++] = kind;
    for (int j = 0; sizes[j] && i < 11; j++)
        args[i++] = sizes[j];
    args[i] = NULL;
    return torchref_run(d, TEST_LAYERS_TORCH_PY, args);
}

static void test_layernorm_torch(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 11);
    struct lcase k;
    ln_case(&k, &r, 17, 48);
    k.forward(&k);
    float *dx = torchref_zeros(k.ny), *dw = torchref_zeros(48), *db = torchref_zeros(48);
    layernorm_backward(k.x, k.n, k.c, k.w, k.mean, k.rstd, k.r, dx, dw, db);
    struct torchref_dir d;
    torchref_dir_new(&d);
    torchref_write(&d, "x.f32", k.x, k.ny * 4);
    torchref_write(&d, "w.f32", k.w, 48 * 4);
    torchref_write(&d, "b.f32", k.bias, 48 * 4);
    torchref_write(&d, "dy.f32", k.r, k.ny * 4);
    const char *sizes[] = {"17", "48", NULL};
    int rc = run_torch(&d, "layernorm", sizes);
    if (rc == 0) {
        torchref_compare(&d, "layernorm y", "y.f32", k.y, k.ny);
        torchref_compare(&d, "layernorm dx", "dx.f32", dx, k.ny);
        torchref_compare(&d, "layernorm dw", "dw.f32", dw, 48);
        torchref_compare(&d, "layernorm db", "db.f32", db, 48);
    }
    torchref_dir_free(&d);
    free(dx);
    free(dw);
    free(db);
    lcase_free(&k);
    if (rc == 77)
        skip();
}

static void test_gelu_torch(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 12);
    size_t n = 1000;
    float *x = torchref_rand(&r, n, 6.0f), *dy = torchref_rand(&r, n, 1.0f);
    float *y = torchref_zeros(n), *dx = torchref_zeros(n);
    gelu_forward(x, y, n);
    gelu_backward(x, dy, dx, n);
    struct torchref_dir d;
    torchref_dir_new(&d);
    torchref_write(&d, "x.f32", x, n * 4);
    torchref_write(&d, "dy.f32", dy, n * 4);
    const char *sizes[] = {"1000", NULL};
    int rc = run_torch(&d, "gelu", sizes);
    if (rc == 0) {
        torchref_compare(&d, "gelu y", "y.f32", y, n);
        torchref_compare(&d, "gelu dx", "dx.f32", dx, n);
    }
    torchref_dir_free(&d);
    free(x);
    free(dy);
    free(y);
    free(dx);
    if (rc == 77)
        skip();
}

static void test_attention_torch(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 13);
    struct lcase k;
    att_case(&k, &r, 3, 16, 32, 4);
    k.forward(&k);
    float *dqkv = torchref_zeros(3 * k.ny), *scratch = torchref_zeros(256);
    attention_backward(k.qkv, k.att, k.r, k.b, k.t, k.c, k.heads, NULL, dqkv, scratch);
    struct torchref_dir d;
    torchref_dir_new(&d);
    torchref_write(&d, "qkv.f32", k.qkv, 3 * k.ny * 4);
    torchref_write(&d, "dy.f32", k.r, k.ny * 4);
    const char *sizes[] = {"3", "16", "32", "4", NULL};
    int rc = run_torch(&d, "attention", sizes);
    if (rc == 0) {
        torchref_compare(&d, "attention y", "y.f32", k.y, k.ny);
        torchref_compare(&d, "attention dqkv", "dqkv.f32", dqkv, 3 * k.ny);
    }
    torchref_dir_free(&d);
    free(dqkv);
    free(scratch);
    lcase_free(&k);
    if (rc == 77)
        skip();
}

static void test_embedding_torch(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 14);
    struct lcase k;
    emb_case(&k, &r, 4, 9, 16, 12);
    k.forward(&k);
    float *dwte = torchref_zeros(256 * 16), *dwpe = torchref_zeros(12 * 16);
    embedding_backward(k.tok, k.b, k.t, (size_t)k.t, k.c, k.r, dwte, dwpe);
    struct torchref_dir d;
    torchref_dir_new(&d);
    torchref_write(&d, "wte.f32", k.wte, 256 * 16 * 4);
    torchref_write(&d, "wpe.f32", k.wpe, 12 * 16 * 4);
    torchref_write(&d, "dy.f32", k.r, k.ny * 4);
    torchref_write(&d, "tokens.u8", k.tok, k.b * (size_t)k.t);
    const char *sizes[] = {"4", "9", "16", "12", NULL};
    int rc = run_torch(&d, "embedding", sizes);
    if (rc == 0) {
        torchref_compare(&d, "embedding y", "y.f32", k.y, k.ny);
        torchref_compare(&d, "embedding dwte", "dwte.f32", dwte, 256 * 16);
        /* wpe rows beyond t get no gradient: torch's are zero there too */
        torchref_compare(&d, "embedding dwpe", "dwpe.f32", dwpe, 12 * 16);
    }
    torchref_dir_free(&d);
    free(dwte);
    free(dwpe);
    lcase_free(&k);
    if (rc == 77)
        skip();
}

static void test_dropout_torch(void **state)
{
    (void)state;
    enum { N = 4, PER = 3000 };
    const float p = 0.3f;
    struct rng r;
    rng_seed(&r, 15);
    uint64_t keys[N];
    for (int s = 0; s < N; s++)
        keys[s] = dropout_sample_key(2, 1, (uint64_t)s);
    float *x = torchref_rand(&r, N * PER, 3.0f), *dy = torchref_rand(&r, N * PER, 1.0f);
    float *y = torchref_zeros(N * PER), *dx = torchref_zeros(N * PER);
    dropout_apply(y, x, N, PER, keys, 0, 0, p);
    dropout_apply(dx, dy, N, PER, keys, 0, 0, p);
    uint8_t *keep = keep_mask(N, PER, keys, 0, p);
    struct torchref_dir d;
    torchref_dir_new(&d);
    torchref_write(&d, "x.f32", x, N * PER * 4);
    torchref_write(&d, "dy.f32", dy, N * PER * 4);
    torchref_write(&d, "keep.u8", keep, N * PER);
    const char *sizes[] = {"12000", "0.3", NULL};
    int rc = run_torch(&d, "dropout", sizes);
    if (rc == 0) {
        torchref_compare(&d, "dropout y", "y.f32", y, N * PER);
        torchref_compare(&d, "dropout dx", "dx.f32", dx, N * PER);
    }
    torchref_dir_free(&d);
    free(x);
    free(dy);
    free(y);
    free(dx);
    free(keep);
    if (rc == 77)
        skip();
}

static void test_attention_dropout_torch(void **state)
{
    (void)state;
    struct rng r;
    rng_seed(&r, 16);
    struct lcase k;
    att_case(&k, &r, 3, 16, 32, 4);
    uint64_t keys[3];
    for (int s = 0; s < 3; s++)
        keys[s] = dropout_sample_key(3, 2, (uint64_t)(40 + s));
    struct dropout_site drop = {keys, 11, 0.2f};
    k.drop = &drop;
    k.forward(&k);
    float *dqkv = torchref_zeros(3 * k.ny);
    attention_backward(k.qkv, k.att, k.r, k.b, k.t, k.c, k.heads, &drop, dqkv, k.scratch);
    uint8_t *keep = keep_mask(3, 4 * 16 * 16, keys, 11, 0.2f);
    struct torchref_dir d;
    torchref_dir_new(&d);
    torchref_write(&d, "qkv.f32", k.qkv, 3 * k.ny * 4);
    torchref_write(&d, "dy.f32", k.r, k.ny * 4);
    torchref_write(&d, "keep.u8", keep, 3 * 4 * 16 * 16);
    const char *sizes[] = {"3", "16", "32", "4", "0.2", NULL};
    int rc = run_torch(&d, "attention", sizes);
    if (rc == 0) {
        torchref_compare(&d, "attention with dropout y", "y.f32", k.y, k.ny);
        torchref_compare(&d, "attention with dropout dqkv", "dqkv.f32", dqkv, 3 * k.ny);
    }
    torchref_dir_free(&d);
    free(dqkv);
    free(keep);
    lcase_free(&k);
    if (rc == 77)
        skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layernorm_finite_diff),
        cmocka_unit_test(test_gelu_finite_diff),
        cmocka_unit_test(test_attention_finite_diff),
        cmocka_unit_test(test_embedding_finite_diff),
        cmocka_unit_test(test_layernorm_torch),
        cmocka_unit_test(test_gelu_torch),
        cmocka_unit_test(test_attention_torch),
        cmocka_unit_test(test_embedding_torch),
        cmocka_unit_test(test_dropout_mask),
        cmocka_unit_test(test_attention_dropout_finite_diff),
        cmocka_unit_test(test_dropout_torch),
        cmocka_unit_test(test_attention_dropout_torch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
