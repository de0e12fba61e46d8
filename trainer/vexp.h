/*
 * vexp.h - exp(x) in float without a call, so that a loop over it vectorizes (libm's expf is
 * a call per element: with it, the GELU's two loops took 22% of a GPT step on one core).
 *
 * Cody-Waite reduction x = n ln2 + r, |r| <= ln2 / 2, n rounded to nearest by adding and
 * subtracting 1.5 * 2^23; exp(r) by its Taylor series to r^7 (truncation error below
 * 1e-8 relative, under half an ulp); 2^n built in the exponent bits. Within 1.5 ulp of exp
 * in double (1.21 measured; tests/unit/test_vexp.c checks it over the whole range).
 * x is clamped to [-87, 88]: below, the result is 2^-126 scale (about 1.6e-38) instead of
 * a denormal or 0; above, about 1.65e38 instead of inf. A NaN stays NaN.
 */
#ifndef DDP_TRAINER_VEXP_H
#define DDP_TRAINER_VEXP_H

#include <stdint.h>
#include <string.h>

static inline float vexpf(float x)
{
    x = x < -87.0f ? -87.0f : x;
    x = x > 88.0f ? 88.0f : x;
    const float shift = 12582912.0f; /* 1.5 * 2^23: t's last bits hold round(x log2 e) */
    float t = x * 1.44269504088896341f + shift;
    float n = t - shift;
    /* ln 2 in two parts: n * hi is exact for |n| < 2^9 */
    float r = x - n * 0.693145751953125f;
    r = r - n * 1.42860682030941723e-6f;
    float p = 1.0f / 5040.0f;
    p = p * r + 1.0f / 720.0f;
    p = p * r + 1.0f / 120.0f;
    p = p * r + 1.0f / 24.0f;
    p = p * r + 1.0f / 6.0f;
    p = p * r + 0.5f;
    p = p * r + 1.0f;
    p = p * r + 1.0f;
    uint32_t tb;
    memcpy(&tb, &t, sizeof tb);
    /* tb - bits(shift) is n (two's complement); n + 127 in [1, 254] is a normal exponent */
    uint32_t eb = (tb - 0x4b400000u + 127u) << 23;
    float s;
    memcpy(&s, &eb, sizeof s);
    return p * s;
}

#endif
