/*
 * fuzz_ckpt_shard.c - libFuzzer target for the sharded checkpoint loader
 * (libddp/ckpt_shard.c): a crafted file is either rejected or decodes to sizes that fit the
 * buffer exactly; copying its overlap into a rank of any small world then stays inside that
 * rank's shard layout.
 */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "ddp/ckpt_shard.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    struct ddp_err err;
    struct ckpt_shard_view v;
    if (ckpt_shard_decode(data, size, "fuzz", &v, &err) != 0)
        return 0;
    if (v.data + (size_t)(1 + v.meta.state_arrays) * v.array_bytes + 4 != data + size)
        abort();
    if (v.meta.nparams > (1u << 20))
        return 0; /* valid, but too large to lay out here quickly */
    uint64_t *lens = malloc(v.nunits * sizeof(uint64_t));
    for (uint32_t i = 0; i < v.nunits; i++)
        lens[i] = ckpt_shard_unit_len(&v, i);
    for (int world = 1; world <= 3; world++) {
        size_t S = ckpt_shard_floats(lens, v.nunits, world);
        float *p = malloc(S * sizeof(float) + 1);
        float *st = malloc((size_t)v.meta.state_arrays * S * sizeof(float) + 1);
        for (int r = 0; r < world; r++)
            ckpt_shard_copy_overlap(&v, lens, v.nunits, world, r, p, st, S);
        free(p);
        free(st);
    }
    /* the same parameters as one unit, a layout of another grouping */
    uint64_t one = v.meta.nparams;
    for (int world = 1; world <= 2; world++) {
        size_t S = ckpt_shard_floats(&one, 1, world);
        float *p = malloc(S * sizeof(float) + 1);
        float *st = malloc((size_t)v.meta.state_arrays * S * sizeof(float) + 1);
        ckpt_shard_copy_overlap(&v, &one, 1, world, world - 1, p, st, S);
        free(p);
        free(st);
    }
    free(lens);
    return 0;
}
