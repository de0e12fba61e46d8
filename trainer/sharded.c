/*
 * sharded.c - a run's sharded strategy (trainer/sharded.h).
 */
#include "trainer/sharded.h"

#include <stdio.h>
#include <stdlib.h>

#include "common/exitcodes.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "ddp/ckpt_shard.h"
#include "ddp/ddp.h"

int sharded_by_units(const struct train_opts *o, int world)
{
    return (o->sharding == TRAIN_SHARD_GRAD || o->sharding == TRAIN_SHARD_FULL ||
            o->sharding == TRAIN_SHARD_HYBRID) &&
           world > 1;
}

static const char *strategy_name(int sharding)
{
    return sharding == TRAIN_SHARD_OPTIMIZER ? "optimizer"
           : sharding == TRAIN_SHARD_GRAD    ? "grad"
           : sharding == TRAIN_SHARD_FULL    ? "full"
                                             : "hybrid";
}

/* hybrid: the comm of this rank's node (its LOCAL_RANK among LOCAL_WORLD_SIZE) and the comm
 * of its local rank across the nodes (its GROUP_RANK among them). Every node must run as
 * many ranks, numbered node by node, as torchrun and the agents number them. */
static int hybrid_comms(struct sharded *s, struct ddp_group *g, struct ddp_err *err)
{
    int W = g->world_size, L = g->env.local_world_size, lr = g->env.local_rank;
    int node = g->env.group_rank;
    int bad = L < 1 || W % L != 0 || lr < 0 || lr >= L || g->rank != node * L + lr;
    double v[3] = {bad, (double)L, (double)L * (double)L};
    int rc = ddp_allreduce_f64(g, v, 3, err);
    if (rc)
        return ddp_exit_code_for(rc);
    /* every rank's L equal exactly when (sum L)^2 = W sum L^2 */
    if (v[0] > 0.0 || v[1] * v[1] != (double)W * v[2]) {
        err_set(err, DDP_EINVAL,
                "--sharding hybrid: needs as many ranks on every node (LOCAL_WORLD_SIZE), "
                "numbered node by node (RANK = GROUP_RANK * LOCAL_WORLD_SIZE + LOCAL_RANK); "
                "this rank is RANK %d, GROUP_RANK %d, LOCAL_RANK %d of %d",
                g->rank, node, lr, L);
        return DDP_EXIT_USAGE;
    }
    if ((rc = ddp_sub_comm(g, (uint32_t)(1 + node), lr, L, &s->node, err)) != 0 ||
        (rc = ddp_sub_comm(g, (uint32_t)(1 + lr), node, W / L, &s->cross, err)) != 0)
        return ddp_exit_code_for(rc);
    s->unit_world = L;
    s->unit_rank = lr;
    return DDP_EXIT_OK;
}

/* The by-units strategies: fsdp's units replace the reducer. */
static int setup_units(struct sharded *s, const struct train_opts *o, struct ddp_group *g,
                       struct model_inst *mi, const struct optim_cfg *c, uint64_t step,
                       struct trace *trace, struct ddp_err *err)
{
    const char *name = strategy_name(o->sharding);
    struct comm *comm = g->comm;
    s->unit_world = g->world_size;
    s->unit_rank = g->rank;
    if (o->sharding == TRAIN_SHARD_HYBRID) {
        int code = hybrid_comms(s, g, err);
        if (code != DDP_EXIT_OK)
            return code;
        comm = s->node;
    }
    struct fsdp_opts fo = {
        .strategy = o->sharding == TRAIN_SHARD_GRAD ? FSDP_GRAD : FSDP_FULL,
        .prefetch = o->overlap,
        .max_scatters = o->overlap ? 2 : 0,
        .min_unit = o->min_unit_params,
        .cross = s->cross,
    };
    if (fsdp_new(comm, s->unit_world, s->unit_rank, mi, c, &fo, step, trace, &s->fsdp, err) != 0)
        return err->code == DDP_EINVAL ? DDP_EXIT_USAGE : ddp_exit_code_for(err->code);
    fsdp_load_state(s->fsdp, mi->ops->momentum(mi));
    if (s->cross)
        log_info("sharding hybrid: %d units over this node's %d ranks, replicated on %d nodes; "
                 "this rank keeps %zu of %zu parameters, their gradients and optimizer state",
                 fsdp_units(s->fsdp), s->unit_world, g->world_size / s->unit_world,
                 fsdp_shard_floats(s->fsdp), mi->ops->param_count(mi));
    else
        log_info("sharding %s: %d units; this rank keeps %zu of %zu parameters' gradients and "
                 "optimizer state%s",
                 name, fsdp_units(s->fsdp), fsdp_shard_floats(s->fsdp), mi->ops->param_count(mi),
                 o->sharding == TRAIN_SHARD_FULL ? ", and parameters" : "");
    return DDP_EXIT_OK;
}

int sharded_setup(struct sharded *s, const struct train_opts *o, struct ddp_group *g,
                  struct model_inst *mi, struct reducer *red, uint64_t step, struct trace *trace,
                  struct ddp_err *err)
{
    int world = g->world_size, rank = g->rank;
    if (o->sharding == TRAIN_SHARD_NONE)
        return DDP_EXIT_OK;
    const char *name = strategy_name(o->sharding);
    /* refused at any world size: a job started on one GPU would fail only when it grows */
    if (g->gpu) {
        err_set(err, DDP_EINVAL, "--sharding %s: runs on the CPU only: use --backend cpu", name);
        return DDP_EXIT_USAGE;
    }
    if (world == 1)
        return DDP_EXIT_OK;
    struct optim_cfg c = {.adamw = o->adamw,
                          .momentum = (float)o->momentum,
                          .weight_decay = (float)o->weight_decay,
                          .beta1 = (float)o->beta1,
                          .beta2 = (float)o->beta2,
                          .eps = (float)o->eps,
                          .clip_norm = o->is_gpt ? (float)o->clip_grad_norm : 0.0f};
    if (sharded_by_units(o, world)) {
        int code = setup_units(s, o, g, mi, &c, step, trace, err);
        if (code != DDP_EXIT_OK)
            return code;
    } else {
        int rc = zero_new(g->comm, world, rank, mi, red, &c, step, &s->zero, err);
        if (rc != 0)
            return ddp_exit_code_for(rc);
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
    if (!s->zero)
        return 0;
    if (!s->ckpt_state)
        s->ckpt_state = xmalloc((size_t)zero_state_arrays(s->zero) * nparams * sizeof(float));
    return zero_gather_state(s->zero, s->ckpt_state, err);
}

void sharded_checkpoint_done(struct sharded *s)
{
    free(s->ckpt_state);
    s->ckpt_state = NULL;
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
    int64_t t0 = time_mono_ns();
    struct fsdp *f = s->fsdp;
    size_t S = fsdp_shard_floats(f);
    uint64_t *lens = unit_lens(f);
    float *p = xmalloc((S ? S : 1) * sizeof(float));
    fsdp_copy_param_shards(f, p);
    meta->world_size = (uint32_t)s->unit_world;
    meta->state_arrays = fsdp_state_arrays(f);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = ckpt_shard_encode(meta, (uint32_t)s->unit_rank, lens, (uint32_t)fsdp_units(f), p,
                               fsdp_state_shards(f), &buf, &len, err);
    free(p);
    free(lens);
    /* hybrid: every node writes every shard of its copy, so no other copy is sent */
    if (rc == 0 && s->cross) {
        int wrc = dir && dir[0]
                      ? ckpt_shard_save(dir, meta->epoch, meta->epoch_pos, (uint32_t)s->unit_rank,
                                        (uint32_t)s->unit_world, buf, len, err)
                      : 0;
        struct ddp_err de;
        rc = ddp_shard_checkpoint_done(g, dir, meta->epoch, meta->epoch_pos, wrc != 0, &de);
        if (rc)
            *err = de;
        else
            rc = wrc;
    } else if (rc == 0 && !s->cross)
        rc = ddp_shard_checkpoint_save(g, dir, meta->epoch, meta->epoch_pos, buf, len, err);
    if (rc == 0 && g->rank == 0) {
        int keeper = s->cross ? -1 : ddp_shard_copy_keeper(g);
        char copy[64];
        if (s->cross)
            snprintf(copy, sizeof copy, "%s", " (every node writes its own copy)");
        else if (keeper >= 0)
            snprintf(copy, sizeof copy, ", its copy on rank %d (another node)", keeper);
        else
            snprintf(copy, sizeof copy, "%s", ", no second copy (one node)");
        log_info("checkpoint epoch %u position %u: shard %d of %d (%zu bytes) written%s in "
                 "%.1f ms",
                 meta->epoch, meta->epoch_pos, s->unit_rank, s->unit_world, len, copy,
                 (double)(time_mono_ns() - t0) / 1e6);
    }
    free(buf);
    return rc;
}

int sharded_resume_shards(struct sharded *s, struct ddp_group *g, const struct ddp_shard_resume *sr,
                          const struct ckpt_id *id, struct model_inst *mi, struct ckpt_meta *meta,
                          struct ddp_err *err)
{
    struct fsdp *f = s->fsdp;
    if (!f) /* one rank: the shard layout of a world of 1 is the instance's own */
        return ddp_resume_shard_load(g, sr, id, NULL, 0, 1, 0, mi->ops->params(mi),
                                     mi->ops->momentum(mi), mi->ops->param_count(mi), meta, err);
    size_t S = fsdp_shard_floats(f);
    int arrays = fsdp_state_arrays(f);
    uint64_t *lens = unit_lens(f);
    float *p = xcalloc(S ? S : 1, sizeof(float));
    float *st = xcalloc((size_t)arrays * (S ? S : 1), sizeof(float));
    int rc = ddp_resume_shard_load(g, sr, id, lens, (uint32_t)fsdp_units(f), s->unit_world,
                                   s->unit_rank, p, st, S, meta, err);
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
    comm_free(s->node);
    comm_free(s->cross);
    s->node = s->cross = NULL;
    free(s->ckpt_state);
    s->zero = NULL;
    s->fsdp = NULL;
    s->ckpt_state = NULL;
}
