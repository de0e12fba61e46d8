/*
 * zero.c - ZeRO-1 over the reducer's gradient block (trainer/zero.h).
 *
 * Everything happens in the block itself (allocated padded: reducer_opts.pad_to), so the
 * sharding costs no buffer of the model's size: the reduce-scatter leaves this rank's sums in
 * its own part of the block (in place), the updated parameters are written there and
 * all-gathered in place over the whole block, which the next backward overwrites anyway.
 * The shard is a range of the block, which is in bucket order (reverse of definition);
 * parameters are in definition order. ranges[] maps the shard's elements, tensor piece by
 * tensor piece, to the parameters; tensors[] maps every tensor of the block (for copying the
 * gathered parameters back and for gathering the state).
 */
#include "trainer/zero.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "ddp/shard.h"
#include "trainer/shard_optim.h"

struct zero_piece {
    size_t at;    /* in the block (tensors[]) or in the shard (ranges[]) */
    size_t param; /* in the parameters */
    size_t len;
};

struct zero {
    struct comm *comm;
    int world, rank;
    size_t n;
    struct shard sh;
    float *block;  /* the gradients, sh.padded floats (the tail zero), borrowed */
    float *params; /* borrowed */
    int arrays;
    float *state; /* arrays x sh.count */
    struct shard_optim opt;
    int ntensors;
    struct zero_piece *tensors;
    int nranges;
    struct zero_piece *ranges;
};

int zero_new(struct comm *comm, int world, int rank, struct model_inst *mi, struct reducer *red,
             const struct optim_cfg *cfg, uint64_t step, struct zero **out, struct ddp_err *err)
{
    size_t n = 0;
    float *block = reducer_grad_block(red, &n);
    struct shard sh;
    int rc = shard_of(n, world, rank, &sh, err);
    if (rc)
        return rc;
    struct zero *z = xcalloc(1, sizeof(*z));
    z->comm = comm;
    z->world = world;
    z->rank = rank;
    z->n = n;
    z->sh = sh;
    z->block = block;
    z->params = mi->ops->params(mi);
    shard_optim_init(&z->opt, cfg, step);
    z->arrays = shard_optim_arrays(&z->opt);
    z->state = xcalloc((size_t)z->arrays * (sh.count ? sh.count : 1), sizeof(float));
    z->ntensors = mi->ops->tensor_count(mi);
    z->tensors = xcalloc((size_t)z->ntensors, sizeof(*z->tensors));
    z->ranges = xcalloc((size_t)z->ntensors, sizeof(*z->ranges));
    size_t poff = 0, lo = sh.offset, hi = sh.offset + sh.valid;
    for (int t = 0; t < z->ntensors; t++) {
        size_t len = mi->ops->tensor_size(mi, t);
        size_t at = (size_t)(reducer_grad(red, t) - block);
        z->tensors[t] = (struct zero_piece){.at = at, .param = poff, .len = len};
        size_t a = at > lo ? at : lo, b = at + len < hi ? at + len : hi;
        if (a < b)
            z->ranges[z->nranges++] =
                (struct zero_piece){.at = a - lo, .param = poff + (a - at), .len = b - a};
        poff += len;
    }
    *out = z;
    return 0;
}

void zero_free(struct zero *z)
{
    if (!z)
        return;
    free(z->state);
    free(z->tensors);
    free(z->ranges);
    free(z);
}

int zero_state_arrays(const struct zero *z)
{
    return z->arrays;
}

size_t zero_shard_count(const struct zero *z)
{
    return z->sh.count;
}

void zero_load_state(struct zero *z, const float *full)
{
    for (int j = 0; j < z->arrays; j++)
        for (int k = 0; k < z->nranges; k++) {
            const struct zero_piece *p = &z->ranges[k];
            memcpy(z->state + (size_t)j * z->sh.count + p->at, full + (size_t)j * z->n + p->param,
                   p->len * sizeof(float));
        }
}

/* block[offset..] = this rank's shard of src (count floats), all-gathered in place; then
 * every tensor copied from the block to dst (definition order). The block's padding stays 0:
 * no shard writes there. */
static int gather_into(struct zero *z, const float *shard_src, float *dst, struct ddp_err *err)
{
    float *mine = z->block + z->sh.offset;
    if (shard_src)
        memcpy(mine, shard_src, z->sh.valid * sizeof(float));
    int rc = comm_allgather(z->comm, mine, z->block, z->sh.count, COMM_F32, err);
    if (rc)
        return rc;
    for (int t = 0; t < z->ntensors; t++) {
        const struct zero_piece *p = &z->tensors[t];
        memcpy(dst + p->param, z->block + p->at, p->len * sizeof(float));
    }
    return 0;
}

int zero_gather_state(struct zero *z, float *full, struct ddp_err *err)
{
    for (int j = 0; j < z->arrays; j++) {
        int rc = gather_into(z, z->state + (size_t)j * z->sh.count, full + (size_t)j * z->n, err);
        if (rc)
            return rc;
    }
    return 0;
}

int zero_step(struct zero *z, float lr, float grad_scale, struct ddp_err *err)
{
    float *mine = z->block + z->sh.offset;
    int rc = comm_reduce_scatter(z->comm, z->block, mine, z->sh.count, COMM_F32, err);
    if (rc)
        return rc;
    double sq = 0.0;
    for (size_t i = 0; z->opt.cfg.clip_norm > 0.0f && i < z->sh.valid; i++)
        sq += (double)mine[i] * (double)mine[i];
    if ((rc = shard_optim_clip(&z->opt, z->comm, sq, &grad_scale, err)) != 0)
        return rc;
    shard_optim_begin(&z->opt, lr);
    /* Each piece updated, then written over its gradients, where the gather takes it. */
    for (int k = 0; k < z->nranges; k++) {
        const struct zero_piece *p = &z->ranges[k];
        float *prm = z->params + p->param;
        const float *g = mine + p->at;
        shard_optim_update(&z->opt, prm, z->state + p->at, z->state + z->sh.count + p->at, g,
                           p->len, grad_scale);
        memcpy(mine + p->at, prm, p->len * sizeof(float));
    }
    return gather_into(z, NULL, z->params, err);
}
