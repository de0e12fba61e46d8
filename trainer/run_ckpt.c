/*
 * run_ckpt.c - a run's checkpoints (trainer/run.h): which one to resume from, sharded
 * (ddp/resume_shard.h) or whole (ddp/resume.h), and each save.
 */
#include "trainer/run.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/exitcodes.h"
#include "common/log.h"
#include "ddp/resume.h"
#include "ddp/resume_shard.h"

/* The model id of this run's whole-state checkpoints (an MLP's by widths). */
static struct ckpt_id whole_id(const struct run *r)
{
    struct model_inst *mi = r->mi;
    struct ckpt_id id = {.widths = r->o->widths, .nwidths = r->o->nwidths};
    if (r->ckpt_spec[0]) {
        id.spec = r->ckpt_spec;
        id.nparams = mi->ops->param_count(mi);
        id.state_arrays = mi->ops->state_arrays ? mi->ops->state_arrays(mi) : 1;
    }
    return id;
}

/* The model id of its sharded checkpoints, which name every model by its spec. */
static struct ckpt_id shard_id(const struct run *r)
{
    struct model_inst *mi = r->mi;
    return (struct ckpt_id){
        .spec = r->ckpt_spec[0] ? r->ckpt_spec : r->o->model_spec,
        .nparams = mi->ops->param_count(mi),
        .state_arrays = mi->ops->state_arrays ? mi->ops->state_arrays(mi) : 1,
    };
}

/* Whether this run reads sharded checkpoints: --sharding grad|full at any world size (a
 * job that shrank to one rank resumes its shards whole). */
static int reads_shards(const struct run *r)
{
    /* not this rank's folder: every rank must run the same collectives */
    return r->o->sharding == TRAIN_SHARD_GRAD || r->o->sharding == TRAIN_SHARD_FULL ||
           r->o->sharding == TRAIN_SHARD_HYBRID;
}

static int resume_exit_code(int rc)
{
    return rc == DDP_EPEER || rc == DDP_ETIMEOUT ? DDP_EXIT_PEER_LOST : DDP_EXIT_CHECKPOINT;
}

/* The position a resumed checkpoint's meta gives the run. */
static void take_position(struct run *r, const struct ckpt_meta *m)
{
    /* The shuffle and dropout draws come from --seed: with another one the run goes on,
     * but not as the one that wrote the checkpoint would have (mid-epoch, the rest of the
     * epoch is another order: some samples twice, some not at all). Said, not refused, as
     * any other changed hyperparameter. */
    if (m->seed != r->o->seed && r->g->rank == 0)
        log_warn("the checkpoint was trained with --seed %llu, this run has --seed %llu: the "
                 "data order%s and the dropout draws from here on differ from that run's",
                 (unsigned long long)m->seed, (unsigned long long)r->o->seed,
                 m->epoch_pos ? " (also of the rest of this epoch)" : "");
    r->start_epoch = m->epoch;
    r->start_pos = m->epoch_pos;
    r->step = m->step;
    r->rng = m->rng;
    if (r->mi->ops->set_step)
        r->mi->ops->set_step(r->mi, r->step);
}

/* Step 3 of the file comment: the ranks agree on the newest checkpoint, sharded
 * (ddp/resume_shard.h, --sharding grad|full) or whole (ddp_resume's protocol, when it is
 * newer); a whole one goes into the host state, then rank 0's parameters go everywhere (and
 * momentum: equal anyway after a resume), the device copy is made, the strategy set up, and a
 * sharded one loaded into it, each rank taking its shard at this world size. */
int run_resume(struct run *r, struct ddp_err *err)
{
    struct model_inst *mi = r->mi;
    struct ckpt_id id = whole_id(r), sid = shard_id(r);
    struct ddp_shard_resume sr;
    memset(&sr, 0, sizeof(sr));
    int rc = reads_shards(r) ? ddp_resume_shard_agree(r->g, r->ckpt_dir, &sid, &sr, err) : 0;
    if (rc)
        return resume_exit_code(rc);
    struct ddp_resume res;
    rc = ddp_resume_id_newer(r->g, r->ckpt_dir, &id, sr.found ? sr.epoch : 0,
                             sr.found ? sr.epoch_pos : 0, &res, err);
    if (rc) {
        ddp_resume_shard_release(&sr);
        return resume_exit_code(rc);
    }
    if (res.owner >= 0) {
        ckpt_copy_arrays(&res.view, mi->ops->params(mi), mi->ops->momentum(mi));
        take_position(r, &res.view.meta);
        sr.found = 0; /* the whole one is newer */
    }
    ddp_resume_release(&res);
    int code = DDP_EXIT_OK;
    rc = ddp_broadcast(r->g, mi->ops->params(mi), mi->ops->param_count(mi) * sizeof(float), 0, err);
    if (rc)
        code = ddp_exit_code_for(rc);
    else if (!sr.found && mi->ops->sync_to_device(mi, err) != 0)
        code = DDP_EXIT_DEVICE;
    if (code == DDP_EXIT_OK)
        code = sharded_setup(&r->sh, r->o, r->g, mi, r->red, r->step, r->trace, err);
    if (code == DDP_EXIT_OK && sr.found) {
        struct ckpt_meta m;
        rc = sharded_resume_shards(&r->sh, r->g, &sr, &sid, mi, &m, err);
        if (rc)
            code = resume_exit_code(rc);
        else
            take_position(r, &m);
        if (code == DDP_EXIT_OK && !r->sh.fsdp && mi->ops->sync_to_device(mi, err) != 0)
            code = DDP_EXIT_DEVICE;
    }
    ddp_resume_shard_release(&sr);
    return code;
}

/* The meta of a checkpoint of epoch (epochs completed) and pos (samples of the next one
 * trained) at this point of the run. */
static void fill_meta(const struct run *r, uint32_t epoch, uint32_t pos, struct ckpt_meta *meta)
{
    struct model_inst *mi = r->mi;
    memset(meta, 0, sizeof(*meta));
    meta->epoch = epoch;
    meta->epoch_pos = pos;
    meta->step = r->step;
    meta->seed = r->o->seed;
    meta->rng = r->rng;
    meta->world_size = (uint32_t)r->g->world_size;
    if (r->ckpt_spec[0]) {
        snprintf(meta->model, sizeof(meta->model), "%s", r->ckpt_spec);
        meta->state_arrays = mi->ops->state_arrays ? mi->ops->state_arrays(mi) : 1;
    } else {
        meta->nlayers = r->o->nwidths - 1;
        for (int i = 0; i < r->o->nwidths; i++)
            meta->widths[i] = (uint32_t)r->o->widths[i];
    }
    meta->nparams = mi->ops->param_count(mi);
}

/* The whole-state checkpoint in this node's folder (LOCAL_RANK 0). */
static int save_whole(struct run *r, uint32_t epoch, uint32_t pos, struct ddp_err *err)
{
    struct model_inst *mi = r->mi;
    struct ckpt_meta meta;
    fill_meta(r, epoch, pos, &meta);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = mi->ops->sync_to_host(mi, err);
    if (rc)
        return rc;
    rc = ckpt_encode(&meta, mi->ops->params(mi),
                     r->sh.ckpt_state ? r->sh.ckpt_state : mi->ops->momentum(mi), &buf, &len, err);
    if (rc == 0)
        rc = ckpt_save(r->ckpt_dir, epoch, buf, len, err);
    free(buf);
    return rc;
}

/* Collective: the checkpoint of (epoch, pos). By units every rank writes its shards, with a
 * copy on another node; otherwise the state is made whole (ZeRO-1's gathered) and every
 * LOCAL_RANK 0 writes it. Returns an exit code. */
int run_save_checkpoint(struct run *r, uint32_t epoch, uint32_t pos, struct ddp_err *err)
{
    /* Sharded, the save is collective whether or not this rank has a folder (the agent
     * gives each node's ranks their node's, so they may differ): the ranks agree first
     * whether any has one; a rank without writes nothing but joins the copies or ZeRO-1's
     * gather. */
    if (r->sh.fsdp || r->sh.zero) {
        double any = r->ckpt_dir[0] ? 1.0 : 0.0;
        int arc = ddp_allreduce_f64(r->g, &any, 1, err);
        if (arc)
            return ddp_exit_code_for(arc);
        if (any == 0.0)
            return DDP_EXIT_OK;
    } else if (!r->ckpt_dir[0]) {
        return DDP_EXIT_OK;
    }
    if (r->sh.fsdp) {
        struct ckpt_meta meta;
        fill_meta(r, epoch, pos, &meta);
        snprintf(meta.model, sizeof(meta.model), "%s", shard_id(r).spec);
        meta.nlayers = 0;
        int rc = sharded_save_shards(&r->sh, r->g, r->ckpt_dir, &meta, err);
        return rc == 0 ? DDP_EXIT_OK
                       : (rc == DDP_EPEER || rc == DDP_ETIMEOUT ? ddp_exit_code_for(rc)
                                                                : DDP_EXIT_CHECKPOINT);
    }
    int rc = sharded_gather_for_checkpoint(&r->sh, r->mi->ops->param_count(r->mi), err);
    if (rc)
        return ddp_exit_code_for(rc);
    int failed = r->g->env.local_rank == 0 && r->ckpt_dir[0] && save_whole(r, epoch, pos, err) != 0;
    sharded_checkpoint_done(&r->sh); /* a sharded state is whole only while it is written */
    return failed ? DDP_EXIT_CHECKPOINT : DDP_EXIT_OK;
}
