/*
 * shard.h - how a flat buffer of n elements is split over the ranks of a sharding group for
 * the sharded paths (FSDP / ZeRO): the arithmetic of comm_reduce_scatter() and
 * comm_allgather() (comm.h), which move one equal shard per rank.
 *
 * Every rank holds one contiguous shard of count = ceil(n / world) elements; rank r's shard
 * starts at element r * count. The buffer the collectives see is padded to
 * padded = count * world elements: the elements from n on are padding (zero them before a
 * reduce-scatter; ignore them after an all-gather), so the last rank's shard is short of
 * real data, and with n < world some last shards hold none at all.
 *
 *   n = 10, world = 4:  count 3, padded 12: [0 1 2][3 4 5][6 7 8][9 p p]
 *   n = 5,  world = 4:  count 2, padded 8:  [0 1][2 3][4 p][p p]
 */
#ifndef DDP_SHARD_H
#define DDP_SHARD_H

#include <stddef.h>

#include "common/err.h"

/* One rank's view of a buffer of n elements split over world ranks. */
struct shard {
    size_t count;  /* elements in every rank's shard: ceil(n / world); 0 when n is 0 */
    size_t padded; /* count * world: the length of the padded buffer */
    size_t offset; /* rank * count: the first element of this rank's shard */
    size_t valid;  /* elements of this rank's shard below n (the rest is padding) */
};

/*
 * Fills *out for `rank` of `world`. DDP_EINVAL when world < 1, rank is outside [0, world),
 * or the padded length would not fit in size_t; *out is written only on success.
 */
int shard_of(size_t n, int world, int rank, struct shard *out, struct ddp_err *err);

#endif
