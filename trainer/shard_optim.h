/*
 * shard_optim.h - the optimizer step on one rank's shard of the parameters, shared by the
 * sharded strategies (trainer/zero.c, trainer/fsdp.c): SGD or AdamW with the unsharded
 * step's element-wise arithmetic (optim_step_range, adamw_update), and global-norm clipping
 * whose norm is all-reduced from every rank's shard.
 */
#ifndef DDP_TRAINER_SHARD_OPTIM_H
#define DDP_TRAINER_SHARD_OPTIM_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/comm.h"
#include "trainer/adamw.h"
#include "trainer/model_ops.h"
#include "trainer/optim.h"

struct shard_optim {
    struct optim_cfg cfg;
    struct optim sgd;   /* lr, momentum, weight decay; buf unused */
    struct adamw adamw; /* the same, with t; state unused */
    struct adamw_coef coef;
};

/* cfg's optimizer, step the steps already taken (AdamW's bias correction). */
void shard_optim_init(struct shard_optim *o, const struct optim_cfg *cfg, uint64_t step);
/* The state arrays a parameter needs: 1 (SGD's momentum) or 2 (AdamW's m and v). */
int shard_optim_arrays(const struct shard_optim *o);

/* Collective: with clipping, sq (this rank's sum of squares of its summed gradients) is
 * all-reduced and *grad_scale multiplied by the clip factor of the global norm. */
int shard_optim_clip(const struct shard_optim *o, struct comm *c, double sq, float *grad_scale,
                     struct ddp_err *err);
/* A step at lr begins (AdamW counts it). */
void shard_optim_begin(struct shard_optim *o, float lr);
/* n parameters p with their state (s0: momentum or m; s1: v, unused by SGD) from gradients g
 * times grad_scale. */
void shard_optim_update(const struct shard_optim *o, float *p, float *s0, float *s1, const float *g,
                        size_t n, float grad_scale);

#endif
