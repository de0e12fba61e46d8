/*
 * layernorm.c - LayerNorm's forward and backward in plain loops (one pass for the statistics,
 * one for the output; the backward's two row sums first, then the gradient), in float with
 * the row statistics accumulated in double.
 */
#include "trainer/layernorm.h"

#include <math.h>
#include <string.h>

#include "trainer/simd.h"
DDP_SIMD_CLONES void layernorm_forward(const float *x, size_t n, int c, const float *w,
                                       const float *b, float *y, float *mean, float *rstd)
{
    for (size_t i = 0; i < n; i++) {
        const float *xr = x + i * (size_t)c;
        float *yr = y + i * (size_t)c;
        double s = 0.0;
        for (int j = 0; j < c; j++)
            s += xr[j];
        double m = s / c;
        double v = 0.0;
        for (int j = 0; j < c; j++) {
            double d = xr[j] - m;
            v += d * d;
        }
        v /= c; /* biased variance, as torch */
        float rs = (float)(1.0 / sqrt(v + (double)LAYERNORM_EPS));
        float mf = (float)m;
        for (int j = 0; j < c; j++)
            yr[j] = (xr[j] - mf) * rs * w[j] + b[j];
        mean[i] = mf;
        rstd[i] = rs;
    }
}

DDP_SIMD_CLONES void layernorm_backward(const float *x, size_t n, int c, const float *w,
                                        const float *mean, const float *rstd, const float *dy,
                                        float *dx, float *dw, float *db)
{
    memset(dw, 0, (size_t)c * sizeof(float));
    memset(db, 0, (size_t)c * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        const float *xr = x + i * (size_t)c;
        const float *dyr = dy + i * (size_t)c;
        float *dxr = dx + i * (size_t)c;
        float m = mean[i], rs = rstd[i];
        /* dxhat = dy * w; dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) */
        double s1 = 0.0, s2 = 0.0;
        for (int j = 0; j < c; j++) {
            float xh = (xr[j] - m) * rs;
            float dxh = dyr[j] * w[j];
            s1 += dxh;
            s2 += (double)dxh * xh;
            dw[j] += dyr[j] * xh;
            db[j] += dyr[j];
        }
        float m1 = (float)(s1 / c), m2 = (float)(s2 / c);
        for (int j = 0; j < c; j++) {
            float xh = (xr[j] - m) * rs;
            float dxh = dyr[j] * w[j];
            dxr[j] += rs * (dxh - m1 - xh * m2);
        }
    }
}
