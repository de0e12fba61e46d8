/*
 * test_layers.c - the CNN's layers (trainer/conv.h, pool.h, dense.h): each backward against
 * central finite differences of L = sum(y * r), and each forward and backward against
 * PyTorch's own (tests/unit/layers_torch.py, run with python3: the test writes the inputs
 * to a temporary folder, the script writes torch's outputs and gradients beside them).
 * Agreement with torch is max |ours - torch| <= 1e-5 * max |torch| per array. Without
 * python3-torch the comparison tests skip, saying so (tests/unit/torchref.h).
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
#include "trainer/conv.h"
#include "trainer/conv_dnnl.h"
#include "trainer/dense.h"
#include "trainer/pool.h"
#include "tests/unit/torchref.h"

#ifndef TEST_LAYERS_TORCH_PY
#define TEST_LAYERS_TORCH_PY "layers_torch.py"
#endif

static double dot(const float *a, const float *b, size_t n)
{
    double s = 0.0;
    for (size_t i = 0; i < n; i++)
        s += (double)a[i] * (double)b[i];
    return s;
}

/* ---- finite differences ---- */

/* The numeric gradient of f at p[0..n) by central differences of step eps. */
typedef double (*loss_fn)(void *ctx);

static void numeric_grad(loss_fn f, void *ctx, float *p, size_t n, float eps, float *g)
{
    for (size_t i = 0; i < n; i++) {
        float keep = p[i];
        p[i] = keep + eps;
        double hi = f(ctx);
        p[i] = keep - eps;
        double lo = f(ctx);
        p[i] = keep;
        g[i] = (float)((hi - lo) / (2.0 * (double)eps));
    }
}

struct conv_case {
    struct conv2d c;
    struct conv2d_dnnl *dn; /* the layer on oneDNN, or NULL: im2col (conv.h) */
    size_t n;
    float *x, *w, *b, *r, *y, *col;
};

/* k's forward into k->y, on its implementation. */
static void conv_case_forward(struct conv_case *k)
{
    struct ddp_err err;
    if (k->dn)
        assert_int_equal(conv2d_dnnl_forward(k->dn, k->x, k->n, k->w, k->b, k->y, &err), 0);
    else
        conv2d_forward(&k->c, k->x, k->n, k->w, k->b, k->y, k->col);
}

/* k's backward for dy = k->r, after its forward. */
static void conv_case_backward(struct conv_case *k, float *dx, float *dw, float *db)
{
    struct ddp_err err;
    if (k->dn) {
        assert_int_equal(conv2d_dnnl_backward_params(k->dn, k->x, k->n, k->r, dw, db, &err), 0);
        assert_int_equal(conv2d_dnnl_backward_input(k->dn, k->n, k->w, k->r, dx, &err), 0);
        return;
    }
    conv2d_backward_params(&k->c, k->x, k->n, k->r, dw, db, k->col);
    conv2d_backward_input(&k->c, k->n, k->w, k->r, dx, k->col);
}

static double conv_loss(void *ctx)
{
    struct conv_case *k = ctx;
    conv_case_forward(k);
    return dot(k->y, k->r, k->n * conv2d_out_count(&k->c));
}

static void conv_case_new(struct conv_case *k, enum conv_impl impl, size_t n, int cin, int h, int w,
                          int cout, int ks, int stride, int pad, uint64_t seed)
{
    struct ddp_err err;
    struct rng r;
    rng_seed(&r, seed);
    assert_int_equal(conv2d_init(&k->c, cin, h, w, cout, ks, stride, pad, &err), 0);
    k->n = n;
    k->x = torchref_rand(&r, n * conv2d_in_count(&k->c), 1.0f);
    k->w = torchref_rand(&r, conv2d_weight_count(&k->c), 0.5f);
    k->b = torchref_rand(&r, (size_t)cout, 0.5f);
    k->r = torchref_rand(&r, n * conv2d_out_count(&k->c), 1.0f);
    k->y = torchref_zeros(n * conv2d_out_count(&k->c));
    k->col = torchref_zeros(conv2d_col_count(&k->c));
    k->dn = NULL;
    if (impl == CONV_ONEDNN)
        assert_int_equal(conv2d_dnnl_new(&k->c, &k->dn, &err), 0);
}

static void conv_case_free(struct conv_case *k)
{
    free(k->x);
    free(k->w);
    free(k->b);
    free(k->r);
    free(k->y);
    free(k->col);
    conv2d_dnnl_free(k->dn);
}

static void test_layers_conv_shape(void **state)
{
    (void)state;
    struct conv2d c;
    struct ddp_err err;
    assert_int_equal(conv2d_init(&c, 1, 28, 28, 32, 5, 1, 2, &err), 0);
    assert_int_equal(c.oh, 28);
    assert_int_equal(c.ow, 28);
    assert_int_equal(conv2d_weight_count(&c), 32 * 25);
    assert_int_equal(conv2d_init(&c, 3, 7, 6, 4, 3, 2, 1, &err), 0);
    assert_int_equal(c.oh, 4);
    assert_int_equal(c.ow, 3);
    assert_int_equal(conv2d_init(&c, 1, 4, 4, 2, 7, 1, 1, &err), DDP_EINVAL);
    assert_int_equal(conv2d_init(&c, 1, 4, 4, 2, 3, 0, 1, &err), DDP_EINVAL);
    assert_int_equal(conv2d_init(&c, 0, 4, 4, 2, 3, 1, 1, &err), DDP_EINVAL);
}

/* The implementations a conv test checks: im2col always, oneDNN where it is built. */
static int conv_impls(enum conv_impl *out)
{
    int n = 0;
    out[n++] = CONV_IM2COL;
    if (conv2d_dnnl_available())
        out[n++] = CONV_ONEDNN;
    else
        print_message("SKIP: this build has no oneDNN (libdnnl-dev): its convolutions are not "
                      "checked\n");
    return n;
}

static void conv_check_fd(enum conv_impl impl, size_t n, int cin, int h, int w, int cout, int ks,
                          int stride, int pad)
{
    struct conv_case k;
    conv_case_new(&k, impl, n, cin, h, w, cout, ks, stride, pad, 11);
    size_t nx = n * conv2d_in_count(&k.c), nw = conv2d_weight_count(&k.c);
    float *dx = torchref_zeros(nx), *dw = torchref_zeros(nw), *db = torchref_zeros((size_t)cout);
    float *gx = torchref_zeros(nx), *gw = torchref_zeros(nw), *gb = torchref_zeros((size_t)cout);
    conv_case_forward(&k);
    conv_case_backward(&k, dx, dw, db);
    /* L is linear in each of x, w, b: central differences are exact up to rounding. */
    numeric_grad(conv_loss, &k, k.x, nx, 0.05f, gx);
    numeric_grad(conv_loss, &k, k.w, nw, 0.05f, gw);
    numeric_grad(conv_loss, &k, k.b, (size_t)cout, 0.05f, gb);
    torchref_check_close("conv dx vs finite differences", dx, gx, nx, 1e-3);
    torchref_check_close("conv dw vs finite differences", dw, gw, nw, 1e-3);
    torchref_check_close("conv db vs finite differences", db, gb, (size_t)cout, 1e-3);
    free(dx);
    free(dw);
    free(db);
    free(gx);
    free(gw);
    free(gb);
    conv_case_free(&k);
}

static void test_layers_conv_finite_diff(void **state)
{
    (void)state;
    enum conv_impl impl[2];
    int ni = conv_impls(impl);
    for (int i = 0; i < ni; i++) {
        conv_check_fd(impl[i], 2, 3, 7, 6, 4, 3, 2, 1);
        conv_check_fd(impl[i], 2, 2, 6, 6, 3, 5, 1, 2);
        conv_check_fd(impl[i], 1, 1, 5, 5, 2, 1, 1, 0);
        /* a kernel larger than twice the map: padding wider than the output */
        conv_check_fd(impl[i], 1, 1, 2, 2, 2, 7, 1, 3);
        conv_check_fd(impl[i], 2, 2, 1, 1, 2, 5, 1, 2);
    }
}

struct pool_case {
    struct pool2d p;
    size_t n;
    float *x, *r, *y;
    int32_t *arg;
};

static double pool_loss(void *ctx)
{
    struct pool_case *k = ctx;
    pool2d_forward(&k->p, k->x, k->n, k->y, k->arg);
    return dot(k->y, k->r, k->n * pool2d_out_count(&k->p));
}

static void test_layers_pool_finite_diff(void **state)
{
    (void)state;
    struct pool_case k;
    struct ddp_err err;
    struct rng r;
    rng_seed(&r, 12);
    assert_int_equal(pool2d_init(&k.p, 3, 7, 8, 2, &err), 0);
    assert_int_equal(k.p.oh, 3);
    assert_int_equal(k.p.ow, 4);
    assert_int_equal(pool2d_init(&k.p, 3, 1, 8, 2, &err), DDP_EINVAL);
    assert_int_equal(pool2d_init(&k.p, 3, 7, 8, 2, &err), 0);
    k.n = 2;
    size_t nx = k.n * pool2d_in_count(&k.p), ny = k.n * pool2d_out_count(&k.p);
    k.x = torchref_rand(&r, nx, 1.0f);
    k.r = torchref_rand(&r, ny, 1.0f);
    k.y = torchref_zeros(ny);
    k.arg = calloc(ny, sizeof(int32_t));
    assert_non_null(k.arg);
    float *dx = torchref_zeros(nx), *gx = torchref_zeros(nx);
    pool2d_forward(&k.p, k.x, k.n, k.y, k.arg);
    pool2d_backward(&k.p, k.r, k.n, k.arg, dx);
    /* A step well below the gaps between random inputs keeps every window's maximum. */
    numeric_grad(pool_loss, &k, k.x, nx, 1e-4f, gx);
    torchref_check_close("pool dx vs finite differences", dx, gx, nx, 1e-2);
    /* a NaN in a window is its maximum, as torch's max_pool2d has it (a diverged run's NaN is
     * not hidden), wherever it stands in the window */
    k.x[1] = NAN;
    k.x[8] = NAN; /* row 1, column 0: window (0, 0) */
    pool2d_forward(&k.p, k.x, k.n, k.y, k.arg);
    assert_true(isnan(k.y[0]));
    assert_false(isnan(k.y[1]));
    free(dx);
    free(gx);
    free(k.x);
    free(k.r);
    free(k.y);
    free(k.arg);
}

struct lin_case {
    size_t n;
    int in, out;
    float *x, *w, *b, *r, *y;
};

static double lin_loss(void *ctx)
{
    struct lin_case *k = ctx;
    linear_forward(k->x, k->n, k->in, k->out, k->w, k->b, k->y);
    relu_forward(k->y, k->n * (size_t)k->out);
    return dot(k->y, k->r, k->n * (size_t)k->out);
}

/* Linear then ReLU together: the ReLU's mask on the way back. */
static void test_layers_linear_relu_finite_diff(void **state)
{
    (void)state;
    struct lin_case k = {.n = 3, .in = 7, .out = 5};
    struct rng r;
    rng_seed(&r, 13);
    size_t nx = k.n * (size_t)k.in, nw = (size_t)(k.in * k.out), ny = k.n * (size_t)k.out;
    k.x = torchref_rand(&r, nx, 1.0f);
    k.w = torchref_rand(&r, nw, 0.5f);
    k.b = torchref_rand(&r, (size_t)k.out, 0.5f);
    k.r = torchref_rand(&r, ny, 1.0f);
    k.y = torchref_zeros(ny);
    float *dy = torchref_zeros(ny), *dx = torchref_zeros(nx), *dw = torchref_zeros(nw),
          *db = torchref_zeros((size_t)k.out);
    float *gx = torchref_zeros(nx), *gw = torchref_zeros(nw), *gb = torchref_zeros((size_t)k.out);
    lin_loss(&k);
    memcpy(dy, k.r, ny * sizeof(float));
    relu_backward(k.y, dy, ny);
    linear_backward_params(k.x, k.n, k.in, k.out, dy, dw, db);
    linear_backward_input(k.n, k.in, k.out, k.w, dy, dx);
    numeric_grad(lin_loss, &k, k.x, nx, 1e-3f, gx);
    numeric_grad(lin_loss, &k, k.w, nw, 1e-3f, gw);
    numeric_grad(lin_loss, &k, k.b, (size_t)k.out, 1e-3f, gb);
    torchref_check_close("linear dx vs finite differences", dx, gx, nx, 1e-2);
    torchref_check_close("linear dw vs finite differences", dw, gw, nw, 1e-2);
    torchref_check_close("linear db vs finite differences", db, gb, (size_t)k.out, 1e-2);
    float *bufs[] = {k.x, k.w, k.b, k.r, k.y, dy, dx, dw, db, gx, gw, gb};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        free(bufs[i]);
}

struct xent_case {
    size_t n;
    int classes;
    float *z, *tmp;
    uint8_t *y;
};

static double xent_loss(void *ctx)
{
    struct xent_case *k = ctx;
    memcpy(k->tmp, k->z, k->n * (size_t)k->classes * sizeof(float));
    return softmax_xent_forward(k->tmp, k->y, k->n, k->classes) / (double)k->n;
}

static void test_layers_xent_finite_diff(void **state)
{
    (void)state;
    struct xent_case k = {.n = 4, .classes = 5};
    uint8_t labels[4] = {0, 4, 2, 2};
    struct rng r;
    rng_seed(&r, 14);
    size_t nz = k.n * (size_t)k.classes;
    k.z = torchref_rand(&r, nz, 2.0f);
    k.tmp = torchref_zeros(nz);
    k.y = labels;
    float *dz = torchref_zeros(nz), *gz = torchref_zeros(nz);
    xent_loss(&k);
    softmax_xent_backward(k.tmp, k.y, k.n, k.classes, dz);
    numeric_grad(xent_loss, &k, k.z, nz, 1e-2f, gz);
    torchref_check_close("xent dz vs finite differences", dz, gz, nz, 1e-2);
    free(k.z);
    free(k.tmp);
    free(dz);
    free(gz);
}

/* ---- PyTorch ---- */

static void conv_check_torch(enum conv_impl impl, size_t n, int cin, int h, int w, int cout, int ks,
                             int stride, int pad)
{
    struct conv_case k;
    struct torchref_dir d;
    conv_case_new(&k, impl, n, cin, h, w, cout, ks, stride, pad, 21);
    size_t nx = n * conv2d_in_count(&k.c), nw = conv2d_weight_count(&k.c);
    size_t ny = n * conv2d_out_count(&k.c);
    float *dx = torchref_zeros(nx), *dw = torchref_zeros(nw), *db = torchref_zeros((size_t)cout);
    conv_case_forward(&k);
    conv_case_backward(&k, dx, dw, db);
    torchref_dir_new(&d);
    torchref_write(&d, "x.f32", k.x, nx * sizeof(float));
    torchref_write(&d, "w.f32", k.w, nw * sizeof(float));
    torchref_write(&d, "b.f32", k.b, (size_t)cout * sizeof(float));
    torchref_write(&d, "dy.f32", k.r, ny * sizeof(float));
    char s[8][16];
    int v[8] = {(int)n, cin, h, w, cout, ks, stride, pad};
    const char *args[10] = {"conv"};
    for (int i = 0; i < 8; i++) {
        snprintf(s[i], sizeof(s[i]), "%d", v[i]);
        args[i + 1] = s[i];
    }
    int rc = torchref_run(&d, TEST_LAYERS_TORCH_PY, args);
    if (rc == 0) {
        torchref_compare(&d, "conv y vs torch", "y.f32", k.y, ny);
        torchref_compare(&d, "conv dx vs torch", "dx.f32", dx, nx);
        torchref_compare(&d, "conv dw vs torch", "dw.f32", dw, nw);
        torchref_compare(&d, "conv db vs torch", "db.f32", db, (size_t)cout);
    }
    torchref_dir_free(&d);
    free(dx);
    free(dw);
    free(db);
    conv_case_free(&k);
    if (rc == 77)
        skip();
}

static void test_layers_conv_torch(void **state)
{
    (void)state;
    enum conv_impl impl[2];
    int ni = conv_impls(impl);
    for (int i = 0; i < ni; i++) {
        conv_check_torch(impl[i], 3, 3, 9, 8, 4, 3, 2, 1);
        conv_check_torch(impl[i], 4, 2, 12, 12, 8, 5, 1, 2); /* the CNN's cNk5 */
        conv_check_torch(impl[i], 2, 8, 7, 7, 6, 5, 1, 2);
        conv_check_torch(impl[i], 3, 16, 14, 14, 32, 5, 1, 2); /* a blocked layout's 16 */
        conv_check_torch(impl[i], 2, 5, 8, 9, 7, 4, 3, 2);     /* uneven right padding */
    }
}

static void test_layers_pool_torch(void **state)
{
    (void)state;
    struct pool2d p;
    struct ddp_err err;
    struct torchref_dir d;
    struct rng r;
    rng_seed(&r, 22);
    assert_int_equal(pool2d_init(&p, 3, 9, 8, 2, &err), 0);
    size_t n = 3, nx = n * pool2d_in_count(&p), ny = n * pool2d_out_count(&p);
    float *x = torchref_rand(&r, nx, 1.0f), *dy = torchref_rand(&r, ny, 1.0f);
    float *y = torchref_zeros(ny), *dx = torchref_zeros(nx);
    int32_t *arg = calloc(ny, sizeof(int32_t));
    assert_non_null(arg);
    pool2d_forward(&p, x, n, y, arg);
    pool2d_backward(&p, dy, n, arg, dx);
    torchref_dir_new(&d);
    torchref_write(&d, "x.f32", x, nx * sizeof(float));
    torchref_write(&d, "dy.f32", dy, ny * sizeof(float));
    const char *args[] = {"pool", "3", "3", "9", "8", "2", NULL};
    int rc = torchref_run(&d, TEST_LAYERS_TORCH_PY, args);
    if (rc == 0) {
        torchref_compare(&d, "pool y vs torch", "y.f32", y, ny);
        torchref_compare(&d, "pool dx vs torch", "dx.f32", dx, nx);
    }
    torchref_dir_free(&d);
    free(x);
    free(dy);
    free(y);
    free(dx);
    free(arg);
    if (rc == 77)
        skip();
}

static void test_layers_linear_torch(void **state)
{
    (void)state;
    struct torchref_dir d;
    struct rng r;
    rng_seed(&r, 23);
    size_t n = 6;
    int in = 50, out = 7;
    size_t nx = n * (size_t)in, nw = (size_t)(in * out), ny = n * (size_t)out;
    float *x = torchref_rand(&r, nx, 1.0f), *w = torchref_rand(&r, nw, 0.3f);
    float *b = torchref_rand(&r, (size_t)out, 0.3f), *dy = torchref_rand(&r, ny, 1.0f);
    float *y = torchref_zeros(ny), *dx = torchref_zeros(nx), *dw = torchref_zeros(nw),
          *db = torchref_zeros((size_t)out);
    linear_forward(x, n, in, out, w, b, y);
    linear_backward_params(x, n, in, out, dy, dw, db);
    linear_backward_input(n, in, out, w, dy, dx);
    torchref_dir_new(&d);
    torchref_write(&d, "x.f32", x, nx * sizeof(float));
    torchref_write(&d, "w.f32", w, nw * sizeof(float));
    torchref_write(&d, "b.f32", b, (size_t)out * sizeof(float));
    torchref_write(&d, "dy.f32", dy, ny * sizeof(float));
    const char *args[] = {"linear", "6", "50", "7", NULL};
    int rc = torchref_run(&d, TEST_LAYERS_TORCH_PY, args);
    if (rc == 0) {
        torchref_compare(&d, "linear y vs torch", "y.f32", y, ny);
        torchref_compare(&d, "linear dx vs torch", "dx.f32", dx, nx);
        torchref_compare(&d, "linear dw vs torch", "dw.f32", dw, nw);
        torchref_compare(&d, "linear db vs torch", "db.f32", db, (size_t)out);
    }
    torchref_dir_free(&d);
    float *bufs[] = {x, w, b, dy, y, dx, dw, db};
    for (size_t i = 0; i < sizeof(bufs) / sizeof(bufs[0]); i++)
        free(bufs[i]);
    if (rc == 77)
        skip();
}

static void test_layers_relu_torch(void **state)
{
    (void)state;
    struct torchref_dir d;
    struct rng r;
    rng_seed(&r, 24);
    size_t n = 40;
    float *x = torchref_rand(&r, n, 1.0f), *dy = torchref_rand(&r, n, 1.0f);
    float *y = torchref_zeros(n), *dx = torchref_zeros(n);
    memcpy(y, x, n * sizeof(float));
    relu_forward(y, n);
    memcpy(dx, dy, n * sizeof(float));
    relu_backward(y, dx, n);
    torchref_dir_new(&d);
    torchref_write(&d, "x.f32", x, n * sizeof(float));
    torchref_write(&d, "dy.f32", dy, n * sizeof(float));
    const char *args[] = {"relu", "40", NULL};
    int rc = torchref_run(&d, TEST_LAYERS_TORCH_PY, args);
    if (rc == 0) {
        torchref_compare(&d, "relu y vs torch", "y.f32", y, n);
        torchref_compare(&d, "relu dx vs torch", "dx.f32", dx, n);
    }
    torchref_dir_free(&d);
    free(x);
    free(dy);
    free(y);
    free(dx);
    if (rc == 77)
        skip();
}

static void test_layers_xent_torch(void **state)
{
    (void)state;
    struct torchref_dir d;
    struct rng r;
    rng_seed(&r, 25);
    size_t n = 8;
    int classes = 10;
    size_t nz = n * (size_t)classes;
    uint8_t labels[8] = {3, 0, 9, 9, 1, 5, 7, 2};
    float *z = torchref_rand(&r, nz, 3.0f), *p = torchref_zeros(nz), *dz = torchref_zeros(nz);
    memcpy(p, z, nz * sizeof(float));
    double loss = softmax_xent_forward(p, labels, n, classes);
    softmax_xent_backward(p, labels, n, classes, dz);
    torchref_dir_new(&d);
    torchref_write(&d, "z.f32", z, nz * sizeof(float));
    torchref_write(&d, "labels.u8", labels, sizeof(labels));
    const char *args[] = {"xent", "8", "10", NULL};
    int rc = torchref_run(&d, TEST_LAYERS_TORCH_PY, args);
    if (rc == 0) {
        double want = 0.0;
        torchref_read(&d, "loss.f64", &want, sizeof(want));
        if (fabs(loss - want) > TORCHREF_RTOL * fabs(want))
            fail_msg("xent loss %.9g, torch %.9g", loss, want);
        torchref_compare(&d, "xent dz vs torch", "dz.f32", dz, nz);
    }
    torchref_dir_free(&d);
    free(z);
    free(p);
    free(dz);
    if (rc == 77)
        skip();
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_layers_conv_shape),
        cmocka_unit_test(test_layers_conv_finite_diff),
        cmocka_unit_test(test_layers_pool_finite_diff),
        cmocka_unit_test(test_layers_linear_relu_finite_diff),
        cmocka_unit_test(test_layers_xent_finite_diff),
        cmocka_unit_test(test_layers_conv_torch),
        cmocka_unit_test(test_layers_pool_torch),
        cmocka_unit_test(test_layers_linear_torch),
        cmocka_unit_test(test_layers_relu_torch),
        cmocka_unit_test(test_layers_xent_torch),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
