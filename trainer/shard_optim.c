/*
 * shard_optim.c - the optimizer step on a shard (trainer/shard_optim.h).
 */
#include "trainer/shard_optim.h"

#include <math.h>

#include "trainer/gradclip.h"

void shard_optim_init(struct shard_optim *o, const struct optim_cfg *cfg, uint64_t step)
{
    o->cfg = *cfg;
    o->sgd =
        (struct optim){.lr = 0.0f, .momentum = cfg->momentum, .weight_decay = cfg->weight_decay};
    o->adamw = (struct adamw){.beta1 = cfg->beta1,
                              .beta2 = cfg->beta2,
                              .eps = cfg->eps,
                              .weight_decay = cfg->weight_decay,
                              .t = step};
}

int shard_optim_arrays(const struct shard_optim *o)
{
    return o->cfg.adamw ? 2 : 1;
}

int shard_optim_clip(const struct shard_optim *o, struct comm *c, double sq, float *grad_scale,
                     struct ddp_err *err)
{
    if (o->cfg.clip_norm <= 0.0f)
        return 0;
    int rc = comm_allreduce(c, &sq, 1, COMM_F64, err);
    if (rc)
        return rc;
    *grad_scale *= grad_clip_factor(sqrt(sq) * fabs((double)*grad_scale), o->cfg.clip_norm);
    return 0;
}

void shard_optim_begin(struct shard_optim *o, float lr)
{
    if (o->cfg.adamw) {
        o->adamw.lr = lr;
        adamw_begin(&o->adamw, &o->coef);
    } else {
        o->sgd.lr = lr;
    }
}

void shard_optim_update(const struct shard_optim *o, float *p, float *s0, float *s1, const float *g,
                        size_t n, float grad_scale)
{
    if (o->cfg.adamw)
        adamw_update(&o->adamw, &o->coef, p, s0, s1, g, n, grad_scale);
    else
        optim_step_range(&o->sgd, p, s0, g, n, grad_scale);
}
