/*
 * gelu.c - the tanh-approximate GELU and its derivative, element-wise.
 */
#include "trainer/gelu.h"

#include <math.h>

#define GELU_K 0.7978845608028654f /* sqrt(2 / pi) */
#define GELU_C 0.044715f

void gelu_forward(const float *x, float *y, size_t cnt)
{
    for (size_t i = 0; i < cnt; i++) {
        float v = x[i];
        float u = GELU_K * (v + GELU_C * v * v * v);
        y[i] = 0.5f * v * (1.0f + tanhf(u));
    }
}

void gelu_backward(const float *x, const float *dy, float *dx, size_t cnt)
{
    for (size_t i = 0; i < cnt; i++) {
        float v = x[i];
        float u = GELU_K * (v + GELU_C * v * v * v);
        float t = tanhf(u);
        float du = GELU_K * (1.0f + 3.0f * GELU_C * v * v);
        float g = 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * du;
        dx[i] = dy[i] * g;
    }
}
