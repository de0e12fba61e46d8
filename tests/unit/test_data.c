/*
 * test_data.c - IDX parsing and its error messages, gzip and plain files through zlib,
 * synthetic data, and the Fashion-MNIST files where the package is installed.
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
#include <unistd.h>
#include <zlib.h>

#include "common/fsutil.h"
#include "trainer/data.h"

static size_t make_idx(uint8_t *buf, int ndims, const uint32_t *dims, uint8_t fill)
{
    buf[0] = 0;
    buf[1] = 0;
    buf[2] = 8;
    buf[3] = (uint8_t)ndims;
    size_t count = 1, o = 4;
    for (int i = 0; i < ndims; i++) {
        buf[o++] = (uint8_t)(dims[i] >> 24);
        buf[o++] = (uint8_t)(dims[i] >> 16);
        buf[o++] = (uint8_t)(dims[i] >> 8);
        buf[o++] = (uint8_t)dims[i];
        count *= dims[i];
    }
    for (size_t i = 0; i < count; i++)
        buf[o + i] = (uint8_t)(fill + i);
    return o + count;
}

static void expect_fail(const uint8_t *buf, size_t len, int nd, const char *needle)
{
    struct idx_array a;
    struct ddp_err err;
    err_clear(&err);
    assert_int_equal(data_idx_parse(buf, len, nd, "f.idx", &a, &err), DDP_EINVAL);
    if (!strstr(err.msg, "f.idx") || !strstr(err.msg, needle))
        fail_msg("message '%s' lacks the file name or '%s'", err.msg, needle);
}

static void test_data_idx_parse(void **state)
{
    (void)state;
    uint8_t buf[256];
    uint32_t dims[3] = {2, 3, 4};
    size_t len = make_idx(buf, 3, dims, 0);
    struct idx_array a;
    struct ddp_err err;
    assert_int_equal(data_idx_parse(buf, len, 3, "f.idx", &a, &err), 0);
    assert_int_equal(a.count, 24);
    assert_int_equal(a.dims[2], 4);
    assert_int_equal(a.data[5], 5);
    expect_fail(buf, len, 1, "dimensions");
    expect_fail(buf, 3, 3, "not an IDX");
    expect_fail(buf, 10, 3, "truncated");
    expect_fail(buf, len - 1, 3, "header says");
    buf[2] = 0x0d; /* floats */
    expect_fail(buf, len, 3, "magic");
    buf[2] = 8;
    /* Dimensions whose product overflows. */
    uint32_t huge[3] = {0xffffffffu, 0xffffffffu, 0xffffffffu};
    make_idx(buf, 0, huge, 0);
    buf[3] = 3;
    memset(buf + 4, 0xff, 12);
    expect_fail(buf, 16, 3, "too large");
    uint32_t zero[1] = {0};
    len = make_idx(buf, 1, zero, 0);
    expect_fail(buf, len, 1, "is 0");
}

static void test_data_from_idx(void **state)
{
    (void)state;
    uint8_t ib[64], lb[16];
    uint32_t idims[3] = {3, 2, 2}, ldims[1] = {3};
    size_t il = make_idx(ib, 3, idims, 250);
    size_t ll = make_idx(lb, 1, ldims, 0); /* labels 0, 1, 2 */
    struct idx_array ia, la;
    struct ddp_err err;
    assert_int_equal(data_idx_parse(ib, il, 3, "i", &ia, &err), 0);
    assert_int_equal(data_idx_parse(lb, ll, 1, "l", &la, &err), 0);
    struct dataset d;
    assert_int_equal(data_from_idx(&ia, &la, 0, "l", &d, &err), 0);
    assert_int_equal(d.n, 3);
    assert_int_equal(d.dim, 4);
    assert_int_equal(d.classes, 3);
    assert_float_equal(d.x[0], 250.0f / 255.0f, 1e-6);
    data_release(&d);
    assert_int_equal(data_from_idx(&ia, &la, 2, "labels.idx", &d, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "labels.idx"));
    ldims[0] = 2;
    ll = make_idx(lb, 1, ldims, 0);
    assert_int_equal(data_idx_parse(lb, ll, 1, "l", &la, &err), 0);
    assert_int_equal(data_from_idx(&ia, &la, 0, "labels.idx", &d, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "3 images but 2 labels"));
}

static void write_gz(const char *path, const uint8_t *buf, size_t len)
{
    gzFile g = gzopen(path, "wb");
    assert_non_null(g);
    assert_int_equal(gzwrite(g, buf, (unsigned)len), (int)len);
    assert_int_equal(gzclose(g), Z_OK);
}

static void test_data_gzip_and_plain_files(void **state)
{
    (void)state;
    char dir[] = "/tmp/test_data.XXXXXX";
    assert_non_null(mkdtemp(dir));
    char ip[128], lp[128], tp[128], bad[128];
    snprintf(ip, sizeof(ip), "%s/img.gz", dir);
    snprintf(lp, sizeof(lp), "%s/lab", dir);
    snprintf(tp, sizeof(tp), "%s/trunc.gz", dir);
    snprintf(bad, sizeof(bad), "%s/missing.gz", dir);
    uint8_t ib[512], lb[64];
    uint32_t idims[3] = {20, 4, 5}, ldims[1] = {20};
    size_t il = make_idx(ib, 3, idims, 0);
    size_t ll = make_idx(lb, 1, ldims, 0);
    for (int i = 0; i < 20; i++)
        lb[8 + i] = (uint8_t)(i % 4);
    write_gz(ip, ib, il);
    struct ddp_err err;
    assert_int_equal(fs_write_atomic(lp, lb, ll, 0644, &err), 0);
    struct dataset d;
    assert_int_equal(data_load_idx_pair(ip, lp, 0, &d, &err), 0);
    assert_int_equal(d.n, 20);
    assert_int_equal(d.dim, 20);
    assert_int_equal(d.classes, 4);
    assert_int_equal(d.rows, 4);
    assert_int_equal(d.cols, 5);
    data_release(&d);
    /* idx: spec, standardized: mean about 0. */
    char spec[600];
    struct dataset tr, te;
    snprintf(spec, sizeof(spec), "idx:%s,%s", ip, lp);
    assert_int_equal(data_load(spec, 1, &tr, &te, &err), 0);
    double s = 0;
    for (size_t i = 0; i < tr.n * tr.dim; i++)
        s += tr.x[i];
    assert_true(fabs(s / (double)(tr.n * tr.dim)) < 1e-4);
    assert_int_equal(te.n, 20);
    data_release(&tr);
    data_release(&te);
    /* A test set of as many pixels in another shape (5x4, not 4x5): refused, naming it. */
    char tip[128];
    snprintf(tip, sizeof(tip), "%s/test-img", dir);
    uint32_t tdims[3] = {20, 5, 4};
    il = make_idx(ib, 3, tdims, 0);
    assert_int_equal(fs_write_atomic(tip, ib, il, 0644, &err), 0);
    snprintf(spec, sizeof(spec), "idx:%s,%s,%s,%s", ip, lp, tip, lp);
    assert_int_equal(data_load(spec, 1, &tr, &te, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "test-img"));
    assert_non_null(strstr(err.msg, "5x4"));
    /* Missing file: DDP_ENOTFOUND naming it. */
    assert_int_equal(data_load_idx_pair(bad, lp, 0, &d, &err), DDP_ENOTFOUND);
    assert_non_null(strstr(err.msg, "missing.gz"));
    /* A gzip stream cut short is an error, not a short data set. */
    uint8_t big[4096];
    uint32_t bdims[3] = {10, 20, 20};
    size_t bl = make_idx(big, 3, bdims, 7);
    write_gz(tp, big, bl);
    FILE *f = fopen(tp, "rb");
    assert_non_null(f);
    uint8_t gzbuf[8192];
    size_t gl = fread(gzbuf, 1, sizeof(gzbuf), f);
    fclose(f);
    assert_int_equal(fs_write_atomic(tp, gzbuf, gl / 2, 0644, &err), 0);
    uint8_t *out = NULL;
    size_t olen = 0;
    assert_int_not_equal(data_read_file(tp, &out, &olen, &err), 0);
    assert_non_null(strstr(err.msg, "trunc.gz"));
    /* Bad specs name --data. */
    const char *specs[] = {"mnist",
                           "idx:",
                           "idx:a",
                           "idx:a,b,c",
                           "synthetic:1:2",
                           "synthetic:0:2:2",
                           "synthetic:10:2:1",
                           "synthetic:10:2:2:3"};
    for (size_t i = 0; i < sizeof(specs) / sizeof(specs[0]); i++) {
        err_clear(&err);
        assert_int_not_equal(data_load(specs[i], 1, &tr, &te, &err), 0);
        if (!strstr(err.msg, "--data"))
            fail_msg("message '%s' for '%s' does not name --data", err.msg, specs[i]);
    }
    fs_remove_tree(dir, &err);
}

static void test_data_synthetic_deterministic(void **state)
{
    (void)state;
    struct dataset a, b, c, d, e, f;
    struct ddp_err err;
    assert_int_equal(data_load("synthetic:100:7:3", 5, &a, &b, &err), 0);
    assert_int_equal(data_load("synthetic:100:7:3", 5, &c, &d, &err), 0);
    assert_int_equal(data_load("synthetic:100:7:3", 6, &e, &f, &err), 0);
    assert_int_equal(a.n, 100);
    assert_int_equal(b.n, 20);
    assert_int_equal(a.dim, 7);
    assert_int_equal(a.classes, 3);
    assert_memory_equal(a.x, c.x, 700 * sizeof(float));
    assert_memory_equal(b.y, d.y, 20);
    assert_memory_not_equal(a.x, e.x, 700 * sizeof(float));
    for (size_t i = 0; i < a.n; i++)
        assert_true(a.y[i] < 3);
    data_release(&a);
    data_release(&b);
    data_release(&c);
    data_release(&d);
    data_release(&e);
    data_release(&f);
}

static void test_data_fashion_mnist(void **state)
{
    (void)state;
    if (access(DATA_FASHION_MNIST_DIR "/train-images-idx3-ubyte.gz", R_OK) != 0) {
        skip();
    }
    struct dataset tr, te;
    struct ddp_err err;
    assert_int_equal(data_load("fashion-mnist", 1, &tr, &te, &err), 0);
    assert_int_equal(tr.n, 60000);
    assert_int_equal(te.n, 10000);
    assert_int_equal(tr.dim, 784);
    assert_int_equal(tr.classes, 10);
    int hist[10] = {0};
    for (size_t i = 0; i < te.n; i++)
        hist[te.y[i]]++;
    for (int c = 0; c < 10; c++)
        assert_int_equal(hist[c], 1000);
    data_release(&tr);
    data_release(&te);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_data_idx_parse),
        cmocka_unit_test(test_data_from_idx),
        cmocka_unit_test(test_data_gzip_and_plain_files),
        cmocka_unit_test(test_data_synthetic_deterministic),
        cmocka_unit_test(test_data_fashion_mnist),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
