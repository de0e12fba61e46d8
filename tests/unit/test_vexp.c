/*
 * test_vexp.c - vexpf (trainer/vexp.h), the call-free exp of the vectorized layers, against
 * exp in double: its error in units in the last place over the whole unclamped range
 * [-87, 88] (a dense sweep and the neighbours of every multiple of ln2 / 2, where the
 * reduction changes), its clamps, NaN; that a vectorized loop (a DDP_SIMD_CLONES function,
 * at -O3 as the trainer) gives exactly what one call at a time gives; and that the loop built
 * for AVX-512, for AVX2 and for the baseline gives the same bits in each (those the CPU
 * has; the others are skipped, saying so), as ranks on CPUs of different generations need.
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

#include "trainer/simd.h"
#include "trainer/vexp.h"

/* |got - want| in units of the last place of float at want (want a normal float). */
static double ulps(float got, double want)
{
    int e;
    (void)frexp(want, &e);
    double ulp = ldexp(1.0, e - 24);
    return fabs((double)got - want) / ulp;
}

static void test_vexp_error_over_range(void **state)
{
    (void)state;
    double worst = 0.0;
    float at = 0.0f;
    const int n = 1 << 22;
    for (int i = 0; i <= n; i++) {
        float x = -87.0f + 175.0f * (float)i / (float)n;
        double u = ulps(vexpf(x), exp((double)x));
        if (u > worst) {
            worst = u;
            at = x;
        }
    }
    /* around the reduction's edges: multiples of ln2 / 2, where n changes */
    for (int k = -250; k <= 252; k++) {
        float c = (float)(k * 0.5 * M_LN2);
        float x = c;
        for (int j = 0; j < 64; j++) {
            double u = ulps(vexpf(x), exp((double)x));
            if (u > worst) {
                worst = u;
                at = x;
            }
            x = nextafterf(x, 100.0f);
        }
        x = c;
        for (int j = 0; j < 64; j++) {
            x = nextafterf(x, -100.0f);
            if (x < -87.0f)
                break;
            double u = ulps(vexpf(x), exp((double)x));
            if (u > worst) {
                worst = u;
                at = x;
            }
        }
    }
    printf("vexpf: max error %.3f ulp at x = %.9g\n", worst, (double)at);
    assert_true(worst <= 1.5); /* 1.21 measured */
    /* exact where exp is exact */
    assert_true(vexpf(0.0f) == 1.0f);
    assert_true(vexpf(-0.0f) == 1.0f);
}

static void test_vexp_clamps_and_nan(void **state)
{
    (void)state;
    float lo = vexpf(-87.0f), hi = vexpf(88.0f);
    assert_true(lo > 0.0f && lo < 1e-37f && isnormal(lo));
    assert_true(isfinite(hi) && hi > 1e38f);
    assert_true(vexpf(-1000.0f) == lo);
    assert_true(vexpf(-INFINITY) == lo);
    assert_true(vexpf(1000.0f) == hi);
    assert_true(vexpf(INFINITY) == hi);
    assert_true(isnan(vexpf(NAN)));
}

/* What the layers do: a loop over vexpf in a cloned function, vectorized at -O3. */
DDP_SIMD_CLONES static void exp_all(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = vexpf(x[i]);
}

static void test_vexp_loop_equals_scalar(void **state)
{
    (void)state;
    enum { N = 4099 };
    float *x = malloc(N * sizeof *x), *y = malloc(N * sizeof *y);
    assert_non_null(x);
    assert_non_null(y);
    uint32_t s = 12345u;
    for (size_t i = 0; i < N; i++) {
        s = s * 1664525u + 1013904223u;
        x[i] = -100.0f + 200.0f * (float)(s >> 8) / 16777216.0f;
    }
    x[7] = NAN;
    exp_all(x, y, N);
    for (size_t i = 0; i < N; i++) {
        volatile float xi = x[i];
        float want = vexpf(xi);
        if (isnan(want))
            assert_true(isnan(y[i]));
        else
            assert_memory_equal(&y[i], &want, sizeof want);
    }
    free(x);
    free(y);
}

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
__attribute__((target("avx512f"))) static void exp_avx512(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = vexpf(x[i]);
}

__attribute__((target("avx2"))) static void exp_avx2(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = vexpf(x[i]);
}

__attribute__((target("arch=x86-64"))) static void exp_base(const float *x, float *y, size_t n)
{
    for (size_t i = 0; i < n; i++)
        y[i] = vexpf(x[i]);
}

static void test_vexp_same_bits_on_every_isa(void **state)
{
    (void)state;
    enum { N = 1 << 20 };
    float *x = malloc(N * sizeof *x), *base = malloc(N * sizeof *base), *y = malloc(N * sizeof *y);
    assert_non_null(x);
    assert_non_null(base);
    assert_non_null(y);
    for (size_t i = 0; i < N; i++)
        x[i] = -90.0f + 180.0f * (float)i / (float)N;
    exp_base(x, base, N);
    __builtin_cpu_init();
    const struct {
        const char *name;
        int has;
        void (*fn)(const float *, float *, size_t);
    } wide[] = {{"AVX2", __builtin_cpu_supports("avx2"), exp_avx2},
                {"AVX-512", __builtin_cpu_supports("avx512f"), exp_avx512}};
    int runs = 0;
    for (size_t k = 0; k < sizeof wide / sizeof wide[0]; k++) {
        if (!wide[k].has) {
            printf("skip: this CPU has no %s: its loop is not compared\n", wide[k].name);
            continue;
        }
        wide[k].fn(x, y, N);
        assert_memory_equal(y, base, N * sizeof *y);
        runs++;
    }
    printf("vexpf: %d of 2 wider builds compared with the baseline's, bit for bit\n", runs);
    free(x);
    free(base);
    free(y);
}
#endif

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_vexp_error_over_range),
        cmocka_unit_test(test_vexp_clamps_and_nan),
        cmocka_unit_test(test_vexp_loop_equals_scalar),
#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__)
        cmocka_unit_test(test_vexp_same_bits_on_every_isa),
#endif
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
