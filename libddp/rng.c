/*
 * rng.c - xoshiro256** (Blackman and Vigna) with splitmix64 seeding. Invariant: the state is
 * never all zero (splitmix64 of any seed gives a non-zero word with overwhelming
 * probability, and rng_seed forces one bit if it did not).
 */
#include "ddp/rng.h"

#include <math.h>

static uint64_t splitmix64(uint64_t *x)
{
    uint64_t z = (*x += 0x9e3779b97f4a7c15ULL);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ULL;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebULL;
    return z ^ (z >> 31);
}

void rng_seed(struct rng *r, uint64_t seed)
{
    uint64_t x = seed;
    for (int i = 0; i < 4; i++)
        r->s[i] = splitmix64(&x);
    if ((r->s[0] | r->s[1] | r->s[2] | r->s[3]) == 0)
        r->s[0] = 1;
}

static uint64_t rotl(uint64_t x, int k)
{
    return (x << k) | (x >> (64 - k));
}

uint64_t rng_next(struct rng *r)
{
    uint64_t *s = r->s;
    uint64_t result = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return result;
}

uint64_t rng_below(struct rng *r, uint64_t n)
{
    /* Rejection sampling: draw until the value falls below the largest multiple of n. */
    uint64_t limit = UINT64_MAX - (UINT64_MAX % n);
    uint64_t v = rng_next(r);
    while (v >= limit)
        v = rng_next(r);
    return v % n;
}

float rng_uniform(struct rng *r)
{
    return (float)(rng_next(r) >> 40) * (1.0f / 16777216.0f);
}

float rng_normal(struct rng *r)
{
    /* Box-Muller on (0, 1] x [0, 1). */
    double u1 = ((double)(rng_next(r) >> 11) + 1.0) * (1.0 / 9007199254740992.0);
    double u2 = (double)(rng_next(r) >> 11) * (1.0 / 9007199254740992.0);
    return (float)(sqrt(-2.0 * log(u1)) * cos(6.283185307179586 * u2));
}
