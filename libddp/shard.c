/*
 * shard.c - the shard arithmetic of shard.h: ceil(n / world) elements per rank, the buffer
 * padded to a multiple of world.
 */
#include "ddp/shard.h"

#include <stdint.h>

int shard_of(size_t n, int world, int rank, struct shard *out, struct ddp_err *err)
{
    if (world < 1)
        return err_set(err, DDP_EINVAL, "shard: world size %d is not positive", world);
    if (rank < 0 || rank >= world)
        return err_set(err, DDP_EINVAL, "shard: rank %d is out of range [0, %d)", rank, world);
    size_t w = (size_t)world;
    size_t count = n / w + (n % w != 0);
    if (count > SIZE_MAX / w)
        return err_set(err, DDP_EINVAL, "shard: %zu elements padded over %d ranks overflow", n,
                       world);
    struct shard s;
    s.count = count;
    s.padded = count * w;
    s.offset = (size_t)rank * count;
    s.valid = s.offset >= n ? 0 : (n - s.offset < count ? n - s.offset : count);
    *out = s;
    return 0;
}
