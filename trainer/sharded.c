/*
 * sharded.c - a run's sharded strategy (trainer/sharded.h).
 */
#include "trainer/sharded.h"

#include <stdlib.h>

#include "common/exitcodes.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "ddp/ckpt_shard.h"
#include "ddp/ddp.h"

int sharded_by_units(const struct train_opts *o, int world)
{
    return (o->sharding == TRAIN_SHARD_GRAD || o->sharding == TRAIN_SHARD_FULL) && world > 1;
}

/* The by-units strategies: fsdp's units replace the reducer. */
static int setup_units(struct sharded *s, const struct train_opts *o, struct comm *comm, int world,
                       int rank, struct model_inst *mi, const struct optim_cfg *c, uint64_t step,
                       struct trace *trace, const char *name, struct ddp_err *err)
{
    struct fsdp_opts fo = {
        .strategy = o->sharding == TRAIN_SHARD_FULL ? FSDP_FULL : FSDP_GRAD,
        .prefetch = o->overlap,
        .max_scatters = o->overlap ? 2 : 0,
        .min_unit = o->min_unit_params,
    };
    if (fsdp_new(comm, world, rank, mi, c, &fo, step, trace, &s->fsdp, err) != 0)
        return err->code == DDP_EINVAL ? DDP_EXIT_USAGE : ddp_exit_code_for(err->code);
    fsdp_load_state(s->fsdp, mi->ops->momentum(mi));
    log_info("sharding %s: %d units; this rank keeps %zu of %zu parameters' gradients and "
             "optimizer state%s",
             name, fsdp_units(s->fsdp), fsdp_shard_floats(s->fsdp), mi->ops->param_count(mi),
             o->sharding == TRAIN_SHARD_FULL ? ", and parameters" : "");
    return DDP_EXIT_OK;
}

int sharded_setup(struct sharded *s, const struct train_opts *o, struct comm *comm, int world,
                  int rank, int gpu, struct model_inst *mi, struct reducer *red, uint64_t step,
                  struct trace *trace, struct ddp_err *err)
{
    if (o->sharding == TRAIN_SHARD_NONE || world == 1)
        return DDP_EXIT_OK;
    const char *name = o->sharding == TRAIN_SHARD_OPTIMIZER ? "optimizer"
                       : o->sharding == TRAIN_SHARD_GRAD    ? "grad"
                                                            : "full";
    if (gpu) {
        err_set(err, DDP_EINVAL, "--sharding %s: runs on the CPU only: use --backend cpu", name);
        return DDP_EXIT_USAGE;
    }
    struct optim_cfg c = {.adamw = o->adamw,
                          .momentum = (float)o->momentum,
                          .weight_decay = (float)o->weight_decay,
                          .beta1 = (float)o->beta1,
                          .beta2 = (float)o->beta2,
                          .eps = (float)o->eps,
                          .clip_norm = o->is_gpt ? (float)o->clip_grad_norm : 0.0f};
    if (sharded_by_units(o, world)) {
        int code = setup_units(s, o, comm, world, rank, mi, &c, step, trace, name, err);
        if (code != DDP_EXIT_OK)
            return code;
    } else {
        if (zero_new(comm, world, rank, mi, red, &c, step, &s->zero, err) != 0)
            return DDP_EXIT_FAILURE;
        zero_load_state(s->zero, mi->ops->momentum(mi));
        log_info("sharding optimizer: this rank updates %zu of %zu parameters and keeps their "
                 "optimizer state",
                 zero_shard_count(s->zero), mi->ops->param_count(mi));
    }
    /* The whole state is the shards' now: freed, it is rebuilt only for a checkpoint. */
    if (mi->ops->release_state)
        mi->ops->release_state(mi);
    return DDP_EXIT_OK;
}

int sharded_gather_for_checkpoint(struct sharded *s, size_t nparams, struct ddp_err *err)
{
    if (!s->zero && !s->fsdp)
        return 0;
    int arrays = s->zero ? zero_state_arrays(s->zero) : fsdp_state_arrays(s->fsdp);
    if (!s->ckpt_state)
        s->ckpt_state = xmalloc((size_t)arrays * nparams * sizeof(float));
    if (s->zero)
        return zero_gather_state(s->zero, s->ckpt_state, err);
    int rc = fsdp_gather_state(s->fsdp, s->ckpt_state, err);
    return rc ? rc : fsdp_materialize(s->fsdp, err);
}

void sharded_checkpoint_done(struct sharded *s)
{
    free(s->ckpt_state);
    s->ckpt_state = NULL;
    if (s->fsdp)
        fsdp_release(s->fsdp);
}

/* fsdp's unit layout (caller frees). */
static uint64_t *unit_lens(const struct fsdp *f)
{
    int n = fsdp_units(f);
    uint64_t *lens = xmalloc((size_t)n * sizeof(uint64_t));
    for (int i = 0; i < n; i++)
        lens[i] = fsdp_unit_len(f, i);
    return lens;
}

int sharded_save_shards(struct sharded *s, struct ddp_group *g, const char *dir,
                        struct ckpt_meta *meta, struct ddp_err *err)
{
    struct fsdp *f = s->fsdp;
    size_t S = fsdp_shard_floats(f);
    uint64_t *lens = unit_lens(f);
    float *p = xmalloc((S ? S : 1) * sizeof(float));
    fsdp_copy_param_shards(f, p);
    meta->world_size = (uint32_t)g->world_size;
    meta->state_arrays = fsdp_state_arrays(f);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = ckpt_shard_encode(meta, (uint32_t)g->rank, lens, (uint32_t)fsdp_units(f), p,
                               fsdp_state_shards(f), &buf, &len, err);
    free(p);
    free(lens);
    if (rc == 0)
        rc = ddp_shard_checkpoint_save(g, dir, meta->epoch, buf, len, err);
    free(buf);
    return rc;
}

int sharded_resume_shards(struct sharded *s, struct ddp_group *g, const struct ddp_shard_resume *sr,
                          const struct ckpt_id *id, struct model_inst *mi, struct ckpt_meta *meta,
                          struct ddp_err *err)
{
    struct fsdp *f = s->fsdp;
    if (!f) /* one rank: the shard layout of a world of 1 is the instance's own */
        return ddp_resume_shard_load(g, sr, id, NULL, 0, mi->ops->params(mi), mi->ops->momentum(mi),
                                     mi->ops->param_count(mi), meta, err);
    size_t S = fsdp_shard_floats(f);
    int arrays = fsdp_state_arrays(f);
    uint64_t *lens = unit_lens(f);
    float *p = xcalloc(S ? S : 1, sizeof(float));
    float *st = xcalloc((size_t)arrays * (S ? S : 1), sizeof(float));
    int rc = ddp_resume_shard_load(g, sr, id, lens, (uint32_t)fsdp_units(f), p, st, S, meta, err);
    if (rc == 0)
        rc = fsdp_load_shards(f, p, st, meta->step, err);
    free(st);
    free(p);
    free(lens);
    return rc;
}

void sharded_free(struct sharded *s)
{
    zero_free(s->zero);
    fsdp_free(s->fsdp);
    free(s->ckpt_state);
    s->zero = NULL;
    s->fsdp = NULL;
    s->ckpt_state = NULL;
}
