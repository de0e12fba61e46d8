/*
 * sampler.c - DistributedSampler: Fisher-Yates shuffle from rng(seed + epoch), pad by
 * wrapping around the permutation, stride by world size.
 */
#include "ddp/sampler.h"

#include <stdlib.h>

#include "common/xalloc.h"
#include "ddp/rng.h"

int sampler_init(struct sampler *s, size_t n, int rank, int world_size, uint64_t seed, int shuffle,
                 struct ddp_err *err)
{
    if (n == 0)
        return err_set(err, DDP_EINVAL, "sampler: empty data set");
    if (world_size < 1 || rank < 0 || rank >= world_size)
        return err_set(err, DDP_EINVAL, "sampler: rank %d outside world of %d", rank, world_size);
    s->n = n;
    s->rank = rank;
    s->world_size = world_size;
    s->seed = seed;
    s->shuffle = shuffle;
    s->num_samples = (n + (size_t)world_size - 1) / (size_t)world_size;
    s->indices = xmalloc(s->num_samples * sizeof(size_t));
    s->perm = xmalloc(n * sizeof(size_t));
    sampler_set_epoch(s, 0);
    return 0;
}

void sampler_set_epoch(struct sampler *s, uint64_t epoch)
{
    for (size_t i = 0; i < s->n; i++)
        s->perm[i] = i;
    if (s->shuffle) {
        struct rng r;
        rng_seed(&r, s->seed + epoch);
        for (size_t i = s->n - 1; i > 0; i--) {
            size_t j = (size_t)rng_below(&r, (uint64_t)i + 1);
            size_t t = s->perm[i];
            s->perm[i] = s->perm[j];
            s->perm[j] = t;
        }
    }
    /* Position p of the padded list is perm[p mod n]; rank r takes p = r + k W. */
    for (size_t k = 0; k < s->num_samples; k++) {
        size_t p = (size_t)s->rank + k * (size_t)s->world_size;
        s->indices[k] = s->perm[p % s->n];
    }
}

void sampler_release(struct sampler *s)
{
    if (!s)
        return;
    free(s->indices);
    free(s->perm);
    s->indices = NULL;
    s->perm = NULL;
}
