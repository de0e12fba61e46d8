/*
 * gelu.c - the tanh-approximate GELU and its derivative, element-wise. tanh(u) is computed as
 * 1 - 2 / (exp(2u) + 1): glibc's tanhf (through expm1f) took 42% of a GPT step, and the
 * absolute error stays at float rounding (the relative error near u = 0 does not matter:
 * GELU adds 1 to it). exp is vexpf (trainer/vexp.h), inline, so both loops vectorize;
 * its clamp at 88 gives 1 - 1.2e-38 = 1, at -87 gives -1.
 */
#include "trainer/gelu.h"

#include "trainer/simd.h"
#include "trainer/vexp.h"

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

static inline float fast_tanh(float u)
{
    return 1.0f - 2.0f / (vexpf(2.0f * u) + 1.0f);
}

DDP_SIMD_CLONES void gelu_forward(const float *x, float *y, size_t cnt)
{
    for (size_t i = 0; i < cnt; i++) {
        float v = x[i];
        float u = GELU_K * (v + GELU_C * v * v * v);
        y[i] = 0.5f * v * (1.0f + fast_tanh(u));
    }
}

DDP_SIMD_CLONES void gelu_backward(const float *x, const float *dy, float *dx, size_t cnt)
{
    for (size_t i = 0; i < cnt; i++) {
        float v = x[i];
        float u = GELU_K * (v + GELU_C * v * v * v);
        float t = fast_tanh(u);
        float du = GELU_K * (1.0f + 3.0f * GELU_C * v * v);
        float g = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
        dx[i] = dy[i] * g;
    }
}
