/*
 * resume.c - the resume protocol of ddp/resume.h: agree on the newest checkpoint any rank
 * holds, broadcast it from its lowest holder, keep replicas where a node lacked it.
 *
 * Invariants:
 *   1. Every rank runs the same collectives in the same order (one all-reduce, then, when
 *      some rank has a checkpoint, two broadcasts), whatever its folder holds, so a rank
 *      with nothing to offer never leaves the others waiting.
 *   2. The choice is a function of the all-reduced vector alone, so every rank makes the
 *      same one without a further message: the newest (epoch, epoch_pos) - a checkpoint
 *      written mid-epoch on a preemption notice is newer than its epoch's start - the
 *      lowest rank holding it.
 *   3. A rank's own file is trusted only after ckpt_find_newest validated it, and the
 *      broadcast bytes again after ckpt_decode on every rank: a length past CKPT_MAX_BYTES
 *      is refused before anything is allocated for it.
 */
#include "ddp/resume.h"

#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "ddp/ddp.h"

/* Step 1: this rank's newest valid checkpoint and its position in the next epoch, or *buf
 * NULL. */
static void find_local(const char *dir, const struct ckpt_id *id, uint8_t **buf, size_t *len,
                       uint32_t *epoch, uint32_t *pos)
{
    *buf = NULL;
    *len = 0;
    *epoch = 0;
    *pos = 0;
    if (!dir || !dir[0])
        return;
    struct ddp_err e;
    int rc = ckpt_find_newest_id(dir, id, buf, len, epoch, &e);
    if (rc != 0 && rc != DDP_ENOTFOUND)
        log_warn("cannot scan checkpoint dir: %s", e.msg);
    struct ckpt_view v;
    if (rc == 0 && ckpt_decode(*buf, *len, dir, &v, &e) == 0)
        *pos = v.meta.epoch_pos;
}

/* Step 2 (invariant 2): the newest (epoch, position) in v (1 + epoch in v[0..n), 0 where a
 * rank has none: a checkpoint written mid-way through the first epoch is epoch 0; positions
 * in v[n..2n)) newer than (after_epoch, after_pos) ((0, 0): any), and its lowest rank; -1
 * when there is none. */
static int choose_owner(const double *v, int n, uint32_t after_epoch, uint32_t after_pos,
                        uint32_t *best)
{
    int owner = -1, any = after_epoch == 0 && after_pos == 0;
    double best_ep = -1.0, best_pos = -1.0;
    *best = 0;
    for (int i = 0; i < n; i++) {
        double ep = v[i] - 1.0, pos = v[n + i];
        if (v[i] <= 0.0 || (!any && (ep < (double)after_epoch ||
                                     (ep == (double)after_epoch && pos <= (double)after_pos))))
            continue;
        if (ep > best_ep || (ep == best_ep && pos > best_pos)) {
            best_ep = ep;
            best_pos = pos;
            owner = i;
        }
    }
    if (owner >= 0)
        *best = (uint32_t)best_ep;
    return owner;
}

int ddp_resume(struct ddp_group *g, const char *dir, const int *widths, int nwidths,
               struct ddp_resume *out, struct ddp_err *err)
{
    struct ckpt_id id = {.widths = widths, .nwidths = nwidths, .spec = NULL, .nparams = 0};
    return ddp_resume_id(g, dir, &id, out, err);
}

int ddp_resume_id(struct ddp_group *g, const char *dir, const struct ckpt_id *id,
                  struct ddp_resume *out, struct ddp_err *err)
{
    return ddp_resume_id_newer(g, dir, id, 0, 0, out, err);
}

int ddp_resume_id_newer(struct ddp_group *g, const char *dir, const struct ckpt_id *id,
                        uint32_t after_epoch, uint32_t after_pos, struct ddp_resume *out,
                        struct ddp_err *err)
{
    uint8_t *buf = NULL;
    size_t len = 0;
    uint32_t local_epoch = 0, local_pos = 0;
    double *epochs = xcalloc(2 * (size_t)g->world_size, sizeof(double));
    if (dir && dir[0] && g->env.local_rank == 0)
        (void)ckpt_remove_temps(dir); /* no rank saves before this resume ends */
    find_local(dir, id, &buf, &len, &local_epoch, &local_pos);
    epochs[g->rank] = buf ? 1.0 + (double)local_epoch : 0.0;
    epochs[g->world_size + g->rank] = (double)local_pos;
    int rc = ddp_allreduce_f64(g, epochs, 2 * (size_t)g->world_size, err);
    if (rc)
        goto out;
    uint32_t best = 0;
    int owner = choose_owner(epochs, g->world_size, after_epoch, after_pos, &best);
    if (owner < 0) {
        if (after_epoch == 0)
            log_info("no checkpoint found: starting at epoch 1");
        memset(out, 0, sizeof(*out));
        out->owner = -1;
        goto out;
    }
    rc = ddp_broadcast_bytes(g, owner, CKPT_MAX_BYTES, &buf, &len, err); /* step 3 */
    if (rc)
        goto out;
    struct ckpt_view v;
    rc = ckpt_decode(buf, len, "from the newest rank", &v, err);
    if (rc)
        goto out;
    if (!ckpt_matches_id(&v.meta, id)) {
        char mine[CKPT_MAX_MODEL + 64], theirs[CKPT_MAX_MODEL + 64];
        ckpt_describe(&v.meta, theirs, sizeof(theirs));
        ckpt_id_describe(id, mine, sizeof(mine));
        rc = err_set(err, DDP_EINVAL, "checkpoint of rank %d is of model %s, not %s", owner, theirs,
                     mine);
        goto out;
    }
    log_info("resuming after epoch %u from rank %d's checkpoint step=%llu epoch_pos=%u",
             v.meta.epoch, owner, (unsigned long long)v.meta.step, v.meta.epoch_pos);
    /* Step 4. */
    if (dir && dir[0] && g->env.local_rank == 0 &&
        (epochs[g->rank] == 0.0 || local_epoch != best || local_pos != v.meta.epoch_pos)) {
        struct ddp_err e;
        if (ckpt_save(dir, best, buf, len, &e) != 0)
            log_warn("cannot keep a replica of checkpoint %u: %s", best, e.msg);
    }
    out->epoch = best;
    out->owner = owner;
    out->buf = buf;
    out->len = len;
    out->view = v;
    buf = NULL;
out:
    free(epochs);
    free(buf);
    return rc;
}

void ddp_resume_release(struct ddp_resume *r)
{
    if (!r)
        return;
    free(r->buf);
    memset(r, 0, sizeof(*r));
    r->owner = -1;
}
