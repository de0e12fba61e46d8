/*
 * vecadd.c - element-wise sums and the dtype table (see vecadd.h). The fixed-size inner
 * loops let gcc -O2 (whose cost model does not vectorize a loop of unknown length) turn each
 * block into SIMD adds.
 */
#include "libddp/comm/vecadd.h"

void vecadd_f32(float *restrict dst, const float *restrict src, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (size_t k = 0; k < 16; k++)
            dst[i + k] += src[i + k];
    for (; i < n; i++)
        dst[i] += src[i];
}

void vecadd_f64(double *restrict dst, const double *restrict src, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = 0; k < 8; k++)
            dst[i + k] += src[i + k];
    for (; i < n; i++)
        dst[i] += src[i];
}

void vecadd2_f32(float *restrict dst, const float *restrict a, const float *restrict b, size_t n)
{
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        for (size_t k = 0; k < 16; k++)
            dst[i + k] = a[i + k] + b[i + k];
    for (; i < n; i++)
        dst[i] = a[i] + b[i];
}

void vecadd2_f64(double *restrict dst, const double *restrict a, const double *restrict b, size_t n)
{
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (size_t k = 0; k < 8; k++)
            dst[i + k] = a[i + k] + b[i + k];
    for (; i < n; i++)
        dst[i] = a[i] + b[i];
}

static void add_f32(void *restrict dst, const void *restrict src, size_t n)
{
    vecadd_f32(dst, src, n);
}

static void add_f64(void *restrict dst, const void *restrict src, size_t n)
{
    vecadd_f64(dst, src, n);
}

static void add2_f32(void *restrict dst, const void *restrict a, const void *restrict b, size_t n)
{
    vecadd2_f32(dst, a, b, n);
}

static void add2_f64(void *restrict dst, const void *restrict a, const void *restrict b, size_t n)
{
    vecadd2_f64(dst, a, b, n);
}

static const struct vecadd_type types[] = {
    [COMM_F32] = {.size = sizeof(float), .add = add_f32, .add2 = add2_f32},
    [COMM_F64] = {.size = sizeof(double), .add = add_f64, .add2 = add2_f64},
};

const struct vecadd_type *vecadd_type(enum comm_dtype dt)
{
    return dt == COMM_F64 ? &types[COMM_F64] : &types[COMM_F32];
}
