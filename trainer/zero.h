/*
 * zero.h - ZeRO stage 1 (`ddp-worker --sharding optimizer`, DeepSpeed's stage 1, what
 * PyTorch's ZeroRedundancyOptimizer does): each rank keeps and updates only its shard of the
 * optimizer state, for any model instance (trainer/model_ops.h) on the CPU.
 *
 * The unit is the whole gradient block of the reducer (libddp/include/ddp/reducer.h: every
 * tensor's gradient, in bucket order), split over the W ranks as libddp/include/ddp/shard.h
 * says: rank r owns elements [r*count, r*count + valid) of it. A step:
 *   1. the block (local gradients, not reduced: the reducer runs without a comm, its block
 *      padded) is reduce-scattered in place: this rank gets the sums of its shard;
 *   2. with clipping, the squares of the shards are all-reduced: every rank has the global
 *      norm, as with --sharding none;
 *   3. the optimizer (SGD or AdamW: the same arithmetic as the unsharded step, trainer/optim.h,
 *      adamw.h) updates the parameters of the shard, its state kept for the shard only;
 *   4. the updated parameters of each shard are all-gathered, in place in the block (the
 *      gradients are spent), and copied back into every tensor: every rank ends with all the
 *      parameters.
 * So a step is the unsharded step's arithmetic element by element; only the sums' order is
 * the reduce-scatter's, not the all-reduce's. Checkpoints stay the unsharded format:
 * zero_gather_state() rebuilds the full state for the writer, zero_load_state() takes a
 * rank's shard from a full one, at any world size.
 *
 * Memory: the state is count * arrays floats per rank instead of n * arrays, and nothing
 * else of the model's size is added. Ownership: z borrows the comm, the parameters (params, n floats in
 * definition order) and the gradient block; all must outlive it.
 */
#ifndef DDP_TRAINER_ZERO_H
#define DDP_TRAINER_ZERO_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/comm.h"
#include "ddp/reducer.h"
#include "trainer/model_ops.h"

struct zero;

/*
 * The ZeRO-1 optimizer for the instance mi's tensors (their gradients: red's views, which
 * mi's backward writes; red built without a comm) over comm's world ranks; cfg the optimizer
 * (cfg->clip_norm > 0: global-norm clipping); red's block must be padded to a multiple of
 * world floats (reducer_opts.pad_to); step the optimizer steps already taken (a
 * resumed checkpoint's). Caller frees with zero_free().
 */
int zero_new(struct comm *comm, int world, int rank, struct model_inst *mi, struct reducer *red,
             const struct optim_cfg *cfg, uint64_t step, struct zero **out, struct ddp_err *err);
void zero_free(struct zero *z);

/* The state arrays (1: SGD's momentum; 2: AdamW's m and v). */
int zero_state_arrays(const struct zero *z);
/* Elements of this rank's shard (count) and of the whole (n). */
size_t zero_shard_count(const struct zero *z);

/* Takes this rank's shard of full (arrays x n floats, the checkpoint's layout). */
void zero_load_state(struct zero *z, const float *full);
/* Collective: every rank's shards into full (arrays x n floats) on every rank. */
int zero_gather_state(struct zero *z, float *full, struct ddp_err *err);

/* Collective: one step at learning rate lr of the gradients times grad_scale (1/W: the
 * block holds this rank's own gradients, the reduce-scatter sums them). */
int zero_step(struct zero *z, float lr, float grad_scale, struct ddp_err *err);

#endif
