/*
 * sharded.h - a run's sharded strategy behind one face, for the train loop: --sharding
 * optimizer (ZeRO-1, trainer/zero.h, over the reducer's block) or grad | full (ZeRO-2/3,
 * trainer/fsdp.h, which replaces the reducer), set up from the state a resume loaded; for a
 * checkpoint, ZeRO-1's whole optimizer state gathered, or by units each rank's shards
 * written as a sharded checkpoint (ddp/resume_shard.h), which a resume reshards.
 * With --sharding none, or one rank, every member stays NULL and every call does nothing.
 */
#ifndef DDP_TRAINER_SHARDED_H
#define DDP_TRAINER_SHARDED_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/comm.h"
#include "ddp/ckpt.h"
#include "ddp/ddp.h"
#include "ddp/reducer.h"
#include "ddp/resume_shard.h"
#include "ddp/trace.h"
#include "trainer/fsdp.h"
#include "trainer/model_ops.h"
#include "trainer/train.h"
#include "trainer/zero.h"

struct sharded {
    struct zero *zero;         /* --sharding optimizer at W > 1: the step is zero_step's */
    struct fsdp *fsdp;         /* --sharding grad|full at W > 1: no reducer; the units are fsdp's */
    float *ckpt_state;         /* the whole optimizer state while a checkpoint is written (owned) */
    struct comm *node, *cross; /* hybrid: this node's ranks; this local rank's on every node
                                * (owned); NULL otherwise */
    int unit_world, unit_rank; /* by units: the ranks a unit is sharded over, and this one's */
};

/* 1 when o's strategy at world ranks shards by units (no reducer: fsdp binds the
 * gradients). */
int sharded_by_units(const struct train_opts *o, int world);

/*
 * After the resume and rank 0's broadcast: the strategy of o over g's ranks for instance mi
 * (red: the reducer, which ZeRO-1 shards; NULL by units), this rank's shards taken from the
 * instance's state, whose own optimizer state is then freed. Under hybrid the node's and the
 * cross-node comms are made first (collective; every node must run as many ranks, numbered
 * node by node, else DDP_EXIT_USAGE naming them). step: the steps already taken; trace may
 * be NULL. Returns the exit code (DDP_EXIT_USAGE with a GPU).
 */
int sharded_setup(struct sharded *s, const struct train_opts *o, struct ddp_group *g,
                  struct model_inst *mi, struct reducer *red, uint64_t step, struct trace *trace,
                  struct ddp_err *err);

/* Collective, before an unsharded checkpoint under `optimizer` (ZeRO-1): the whole optimizer
 * state into s->ckpt_state (nparams floats an array). A no-op otherwise: by units
 * (s->fsdp), checkpoints are sharded (sharded_save_shards) and nothing is gathered. */
int sharded_gather_for_checkpoint(struct sharded *s, size_t nparams, struct ddp_err *err);
/* After the checkpoint: the whole state dropped again. */
void sharded_checkpoint_done(struct sharded *s);

/* Collective, by units (s->fsdp set): this rank's shards with meta (its model, positions and
 * seed; the world size, state arrays and shard are set here) as a sharded checkpoint in dir,
 * replicated on another node (ddp/resume_shard.h). */
int sharded_save_shards(struct sharded *s, struct ddp_group *g, const char *dir,
                        struct ckpt_meta *meta, struct ddp_err *err);

/* Collective, after sharded_setup: the agreed sharded checkpoint sr of model id loaded, this
 * rank taking its shard at the group's world size (or, by units at one rank, the whole state
 * into mi); its meta into *meta. */
int sharded_resume_shards(struct sharded *s, struct ddp_group *g, const struct ddp_shard_resume *sr,
                          const struct ckpt_id *id, struct model_inst *mi, struct ckpt_meta *meta,
                          struct ddp_err *err);

void sharded_free(struct sharded *s);

#endif
