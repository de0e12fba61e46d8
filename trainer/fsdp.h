/*
 * fsdp.h - sharded data parallel by units (`ddp-worker --sharding grad|full`): ZeRO stage 2
 * (FSDP's SHARD_GRAD_OP) and ZeRO stage 3 (FSDP's FULL_SHARD) on the CPU, for any model
 * instance with hook layers (trainer/model_ops.h: the MLP, the CNN, the GPT).
 *
 * Units. A unit is one hook layer of the model (an MLP layer, a CNN parameter layer, a GPT
 * block; the GPT's embeddings and its final LayerNorm are units of their own), as FSDP wraps
 * one transformer block per unit; with opts.min_unit, consecutive hook layers join one unit
 * until it holds that many parameters (the last unit may hold fewer), as FSDP's size-based
 * auto-wrap. The forward enters a unit at its first layer, the backward at its last, and
 * its gradients are final when its first layer's backward ends. A unit's parameters are consecutive in the instance's
 * definition order, n_u floats, split over the W ranks as ddp/shard.h says: rank r owns
 * count_u = ceil(n_u / W) of them from r * count_u (the last shards padded).
 *
 * Memory, per rank (release = madvise(MADV_DONTNEED): the pages go back to the kernel, and
 * read as zeros until written again):
 *   - gradients: one block with a page-aligned region per unit (count_u * W floats), which
 *     the instance's backward writes (bind_grads). As a unit's backward ends its region is
 *     reduce-scattered on the comm thread into this rank's gradient shard (count_u floats)
 *     while the backward goes on, and released when the scatter is done: at most
 *     max_scatters + 1 units of full gradients exist at once (those scattering and the one
 *     being written), plus unit 0 (see below).
 *   - optimizer state: count_u floats per array per unit (SGD's momentum; AdamW's m and v).
 *   - parameters: with `grad` every rank keeps all of them; the step updates the rank's
 *     shards in place and all-gathers every unit. With `full` the rank keeps only its shards
 *     (the fp32 master copy the optimizer updates) and the instance's parameter memory is
 *     released at rest: a unit is all-gathered into it just before its forward (the forward
 *     hook), released when the next unit's forward begins, gathered again before its
 *     backward, and released when the next unit's backward begins (the MLP's backward still
 *     reads a layer's weights after its gradients are final). With prefetch the next unit's
 *     gather is issued before the current one computes (FSDP's forward prefetch and
 *     BACKWARD_PRE): at most two units are whole at once, besides unit 0.
 *   - unit 0 (the first: a GPT's embeddings, which its tied head reads again at the end of
 *     the forward and first thing in the backward) stays whole from its forward until its
 *     backward ends, as FSDP keeps its root unit; its gradients likewise. With
 *     opts.min_unit, unit 0 is the first group of layers: it may span several, all of them
 *     whole until the backward ends (a smaller first group, or none, keeps that bound low).
 * So `full` holds 4 (P + P + K P) / W bytes of state plus the units in flight (unit 0 and
 * two others: larger with larger units), against 4 (P + P + K P) for `none`. Where W does
 * not divide a unit's length, its gathers land in one of two scratch slots (then copied
 * into place), each as large as the largest such unit padded: `grad` and `full` hold
 * 2 x 4 x that many bytes more (none at all where W divides every unit).
 *
 * Hybrid. With opts.cross, comm holds the ranks of one node only: the units are sharded,
 * gathered and reduce-scattered among them, as FULL_SHARD within a node; before the step each
 * rank all-reduces its summed gradient shards with the ranks holding the same shard on the
 * other nodes (one all-reduce of S floats), so every node takes the same step on its copy.
 * The expensive gathers and scatters stay on the node.
 *
 * Arithmetic: the optimizer runs the unsharded step's element-wise code on each shard
 * (optim_step_range, adamw_update), with clipping's global norm all-reduced from the
 * shards, so a step is `none`'s but for the order of the gradient sums (the reduce-scatter's).
 *
 * The classifiers' test accuracy, --generate and --dump-params read the whole parameters:
 * between fsdp_materialize() and fsdp_release() every unit is whole (and the hooks do
 * nothing), the way FSDP's summon_full_params works. The GPT's validation gathers unit by
 * unit, as a training forward does. Checkpoints gather nothing: each rank writes its shards
 * (trainer/sharded.h, ddp/resume_shard.h), which reshard onto any world size.
 *
 * Collectives are issued from the training thread in the same order on every rank (the
 * units' order is the model's), on the comm of the run; errors are the comm's (DDP_EPEER,
 * DDP_ETIMEOUT) and stick: every later call returns the first one.
 *
 * Ownership: f borrows the comm and the instance, which must outlive it; it binds the
 * instance's gradients to its block and installs its forward hooks (both undone by nothing:
 * free the instance after f, or not use it without f).
 */
#ifndef DDP_TRAINER_FSDP_H
#define DDP_TRAINER_FSDP_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/comm.h"
#include "ddp/trace.h"
#include "trainer/model_ops.h"

enum fsdp_strategy {
    FSDP_GRAD = 0, /* ZeRO-2: gradients and optimizer state sharded */
    FSDP_FULL = 1, /* ZeRO-3: parameters too */
};

struct fsdp_opts {
    enum fsdp_strategy strategy;
    int prefetch;       /* full: 1 issues the next unit's all-gather before the current computes */
    int max_scatters;   /* reduce-scatters in flight before the oldest is waited for; 0: each is
                       * waited for at once (no overlap) */
    size_t min_unit;    /* consecutive hook layers join one unit until it holds at least this
                       * many parameters (FSDP's size-based auto-wrap); 0: a unit per layer */
    struct comm *cross; /* hybrid (FSDP's HYBRID_SHARD): comm is the node's ranks and cross
                         * the ranks of this local rank on every node (borrowed): the summed
                         * gradient shards are all-reduced across the nodes before the step.
                         * NULL otherwise */
};

struct fsdp;

/*
 * The sharded run of instance mi over comm's world ranks (world > 1), with optimizer cfg
 * (cfg->clip_norm > 0: global-norm clipping) and step the optimizer steps already taken (a
 * resumed checkpoint's). mi's parameters and optimizer state must be the run's (after the
 * resume and rank 0's broadcast): f takes this rank's shards of them; the caller then frees
 * the instance's state (release_state). With `full`, mi's parameter memory is released
 * until a unit is gathered. DDP_EINVAL naming --sharding where the instance cannot be
 * sharded (no hook layers in definition order, no forward hooks for `full`). trace may be
 * NULL. Caller frees with fsdp_free().
 */
int fsdp_new(struct comm *comm, int world, int rank, struct model_inst *mi,
             const struct optim_cfg *cfg, const struct fsdp_opts *o, uint64_t step,
             struct trace *trace, struct fsdp **out, struct ddp_err *err);
void fsdp_free(struct fsdp *f);

int fsdp_units(const struct fsdp *f);
/* Floats this rank keeps of each kind of state: its shards together (sum of count_u). */
size_t fsdp_shard_floats(const struct fsdp *f);
int fsdp_state_arrays(const struct fsdp *f);

/* The hooks the instance's backward is run with (gathers and scatters, trace events).
 * Borrowed from f. */
const struct model_hooks *fsdp_backward_hooks(struct fsdp *f);

/* After the forward of a training step: its gather errors, if any. */
int fsdp_end_forward(struct fsdp *f, struct ddp_err *err);
/* After the backward: every reduce-scatter waited for, the gradient block released (and
 * with `full` every unit's parameters). */
int fsdp_end_backward(struct fsdp *f, struct ddp_err *err);
/* Collective: the optimizer step at learning rate lr of the summed gradients times
 * grad_scale (1/W), on this rank's shards; with `grad` then every unit all-gathered. */
int fsdp_step(struct fsdp *f, float lr, float grad_scale, struct ddp_err *err);

/* Collective: every unit whole in the instance's parameters (a no-op with `grad`) until
 * fsdp_release(); the hooks do nothing meanwhile. */
int fsdp_materialize(struct fsdp *f, struct ddp_err *err);
void fsdp_release(struct fsdp *f);

/* Sharded checkpoints (ddp/ckpt_shard.h) in fsdp's shard layout (unit after unit,
 * sh.count floats each: fsdp_shard_floats in all): unit i's length; this rank's parameter
 * shards into out (padding zeroed); its optimizer state shards (arrays x that length,
 * borrowed). */
uint64_t fsdp_unit_len(const struct fsdp *f, int i);
void fsdp_copy_param_shards(const struct fsdp *f, float *out);
const float *fsdp_state_shards(const struct fsdp *f);
/* Collective with `grad`: this rank's shards of a resumed checkpoint (the layout above)
 * become its parameters and optimizer state, step the steps taken; with `grad` every unit is
 * then all-gathered so that all ranks hold the whole parameters again. */
int fsdp_load_shards(struct fsdp *f, const float *params, const float *state, uint64_t step,
                     struct ddp_err *err);

/* Takes this rank's shard of full (arrays x param_count floats, the checkpoint's layout). */
void fsdp_load_state(struct fsdp *f, const float *full);

#endif
