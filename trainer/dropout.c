/*
 * dropout.c - the counter-based mask of dropout.h: splitmix64's finalizer (a bijection of
 * 64-bit words with full avalanche) of the sample's site key plus the element's index times
 * the golden-ratio increment, i.e. element i gets the i-th output of a splitmix64 stream
 * seeded by (sample key, site). Its top 32 bits against p * 2^32 decide.
 */
#include "trainer/dropout.h"

#include <string.h>

#define GOLDEN 0x9E3779B97F4A7C15ULL

static uint64_t mix(uint64_t z)
{
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
    return z ^ (z >> 31);
}

uint64_t dropout_sample_key(uint64_t seed, uint64_t step, uint64_t sample)
{
    uint64_t k = mix(seed ^ 0x64726f706f7574ULL); /* "dropout" */
    k = mix(k + GOLDEN * (step + 1));
    return mix(k ^ (sample * GOLDEN + 0x5bd1e995ULL));
}

void dropout_apply(float *y, const float *x, size_t nsamples, size_t per_sample,
                   const uint64_t *keys, uint32_t site, uint64_t offset, float p)
{
    if (p <= 0.0f) {
        if (y != x)
            memmove(y, x, nsamples * per_sample * sizeof(float));
        return;
    }
    /* keep when the top 32 bits are >= p * 2^32 (probability 1 - p within 2^-32) */
    uint64_t cut = (uint64_t)((double)p * 4294967296.0);
    float scale = 1.0f / (1.0f - p);
    for (size_t s = 0; s < nsamples; s++) {
        uint64_t base = mix(keys[s] + GOLDEN * ((uint64_t)site + 1));
        const float *xs = x + s * per_sample;
        float *ys = y + s * per_sample;
        for (size_t i = 0; i < per_sample; i++) {
            uint64_t u = mix(base + GOLDEN * (offset + (uint64_t)i + 1)) >> 32;
            ys[i] = u >= cut ? xs[i] * scale : 0.0f;
        }
    }
}
