/*
 * vecadd.c - element-wise sums. The fixed-size inner loops let gcc -O2 (whose cost model
 * does not vectorize a loop of unknown length) turn each block into SIMD adds.
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
