/*
 * sampler.h - torch.utils.data.DistributedSampler's semantics: each epoch the n indices are
 * shuffled with a generator seeded by seed + epoch (identically on every rank), padded to a
 * multiple of the world size by repeating indices from the start, and rank r takes the
 * positions r, r + W, r + 2W, ... of that list. Every rank gets num_samples = ceil(n / W)
 * indices, so every rank runs the same number of steps.
 */
#ifndef DDP_SAMPLER_H
#define DDP_SAMPLER_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct sampler {
    size_t n; /* data set size */
    int rank;
    int world_size;
    uint64_t seed;
    int shuffle;        /* 0: identity order (still padded and strided) */
    size_t num_samples; /* per rank */
    size_t *indices;    /* this rank's num_samples indices for the current epoch, owned */
    size_t *perm;       /* scratch: n entries */
};

/* Fails with DDP_EINVAL when n == 0 or rank is outside [0, world_size). Starts at epoch 0.
 * Release with sampler_release(). */
int sampler_init(struct sampler *s, size_t n, int rank, int world_size, uint64_t seed, int shuffle,
                 struct ddp_err *err);
/* Recomputes this rank's indices for epoch. */
void sampler_set_epoch(struct sampler *s, uint64_t epoch);
void sampler_release(struct sampler *s);

#endif
