/*
 * rng.h - the worker's deterministic random numbers: xoshiro256** seeded through splitmix64.
 * The same seed gives the same stream on every machine (no libc rand), so parameter init,
 * synthetic data and the sampler's shuffle are reproducible and their state can be saved in
 * a checkpoint (four 64-bit words).
 */
#ifndef DDP_RNG_H
#define DDP_RNG_H

#include <stdint.h>

struct rng {
    uint64_t s[4];
};

/* Seeds r from seed (any value, 0 included). */
void rng_seed(struct rng *r, uint64_t seed);
/* The next 64 random bits. */
uint64_t rng_next(struct rng *r);
/* Uniform in [0, n) without modulo bias; n > 0. */
uint64_t rng_below(struct rng *r, uint64_t n);
/* Uniform float in [0, 1) with 24 random bits. */
float rng_uniform(struct rng *r);
/* Standard normal (Box-Muller). */
float rng_normal(struct rng *r);

#endif
