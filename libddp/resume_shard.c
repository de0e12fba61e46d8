/*
 * resume_shard.c - sharded checkpoints across the group (ddp/resume_shard.h).
 *
 * Invariants:
 *   1. Every collective's count and root is a function of all-reduced values only, so all
 *      ranks issue the same sequence whatever their folders hold.
 *   2. A broadcast length is checked against the model's largest shard before anything is
 *      allocated for it, and the bytes are decoded (crc, model, layout) on every rank before
 *      any is copied: all ranks see the same bytes, so they fail together.
 */
#include "ddp/resume_shard.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/fsutil.h"
#include "common/log.h"
#include "common/xalloc.h"
#include "ddp/comm.h"
#include "ddp/ddp.h"

/* A folder keeps CKPT_KEEP keys at or before its newest save, and newer stale ones (a save
 * cut short before a resume from an older key) until the run passes them; at several world
 * sizes a key appears once each. Room for that, so a complete checkpoint is not crowded out. */
#define CAND_PER_RANK (4 * CKPT_KEEP)

/* The largest file a shard of model id can be. */
static size_t max_file(const struct ckpt_id *id)
{
    int k = id->state_arrays > 1 ? id->state_arrays : 1;
    return 104 + CKPT_MAX_MODEL + 4 + 8 * (size_t)CKPT_SHARD_MAX_UNITS +
           (size_t)(1 + k) * 4 * (size_t)id->nparams + 4;
}

int ddp_shard_keeper(const double *node, int W, int k)
{
    int place = 0, next = -1;
    for (int r = 0; r < k; r++)
        place += node[r] == node[k];
    /* the smallest node above k's, else the smallest of all (if it is not k's) */
    double lo = node[k], above = -1.0, least = node[k];
    for (int r = 0; r < W; r++) {
        if (node[r] > lo && (above < 0.0 || node[r] < above))
            above = node[r];
        if (node[r] < least)
            least = node[r];
    }
    double want = above >= 0.0 ? above : least;
    if (want == node[k])
        return -1;
    int size = 0;
    for (int r = 0; r < W; r++)
        size += node[r] == want;
    for (int r = 0, i = 0; r < W && next < 0; r++)
        if (node[r] == want && i++ == place % size)
            next = r;
    return next;
}

/* The keepers and this rank's pair comms (the group's, made once: ddp/ddp.h). One
 * sub-group creation per k in order on every rank (invariant 1): ranks k and keeper[k] make
 * a comm of two, every other rank one of its own, dropped at once. They are the group's
 * only when all of it was made: a failure leaves g->keeper and g->pairs NULL (and frees what
 * was made), so that no later save takes a half set for a whole one and skips copies. */
static int pairs_setup(struct ddp_group *g, struct ddp_err *err)
{
    if (g->pairs)
        return 0;
    int W = g->world_size;
    double *node = xcalloc((size_t)W, sizeof(double));
    node[g->rank] = (double)g->env.group_rank;
    int rc = ddp_allreduce_f64(g, node, (size_t)W, err);
    int *keeper = xcalloc((size_t)W, sizeof(int));
    struct comm **pairs = xcalloc((size_t)W, sizeof(struct comm *));
    for (int k = 0; k < W; k++)
        keeper[k] = rc == 0 ? ddp_shard_keeper(node, W, k) : -1;
    free(node);
    for (int k = 0; rc == 0 && k < W; k++) {
        if (keeper[k] < 0)
            continue;
        int in = g->rank == k ? 0 : g->rank == keeper[k] ? 1 : -1;
        struct comm *c = NULL;
        rc = ddp_sub_comm(g, 1, in < 0 ? 0 : in, in < 0 ? 1 : 2, &c, err);
        if (rc == 0 && in < 0)
            comm_free(c);
        else if (rc == 0)
            pairs[k] = c;
    }
    if (rc) {
        for (int k = 0; k < W; k++)
            if (pairs[k])
                comm_free(pairs[k]);
        free(pairs);
        free(keeper);
        return rc;
    }
    g->keeper = keeper;
    g->pairs = pairs;
    return 0;
}

int ddp_shard_copy_keeper(const struct ddp_group *g)
{
    return g->keeper ? g->keeper[g->rank] : -1;
}

/* The longest file a shard of the checkpoint whose shard `buf` is can be: shard 0's, which
 * holds the most valid floats (the last shards are short by up to W - 1 floats a unit, the
 * header is the same for all). len + that difference; a buf that does not decode (it was
 * encoded here) bounds nothing more. */
static size_t copy_bound(const uint8_t *buf, size_t len, int W)
{
    struct ckpt_shard_view v;
    struct ddp_err e;
    if (ckpt_shard_decode(buf, len, "this rank's shard", &v, &e) != 0)
        return len;
    uint64_t *lens = xcalloc(v.nunits, sizeof(*lens));
    for (uint32_t i = 0; i < v.nunits; i++)
        lens[i] = ckpt_shard_unit_len(&v, i);
    size_t most = ckpt_shard_valid_floats(lens, v.nunits, W, 0);
    size_t mine = ckpt_shard_valid_floats(lens, v.nunits, W, (int)v.shard);
    free(lens);
    if (most == SIZE_MAX || mine == SIZE_MAX || most < mine)
        return len;
    int k = v.meta.state_arrays > 1 ? v.meta.state_arrays : 1;
    return len + (size_t)(1 + k) * 4 * (most - mine);
}

int ddp_shard_checkpoint_save(struct ddp_group *g, const char *dir, uint32_t epoch, uint32_t pos,
                              const uint8_t *buf, size_t len, struct ddp_err *err)
{
    int W = g->world_size, has_dir = dir && dir[0];
    int first =
        has_dir ? ckpt_shard_save(dir, epoch, pos, (uint32_t)g->rank, (uint32_t)W, buf, len, err)
                : 0;
    struct ddp_err ce;
    int rc = W > 1 ? pairs_setup(g, &ce) : 0;
    size_t bound = W > 1 ? copy_bound(buf, len, W) : len;
    /* In k order (a pair's two ranks meet in it: the smallest k not done has both there).
     * A copy refused by its keeper (not the comm failing) is this rank's failure; the
     * loop and the all-reduce below still run, so every rank issues the same collectives. */
    for (int k = 0; rc == 0 && W > 1 && k < W; k++) {
        if (!g->pairs[k])
            continue;
        int mine = g->rank == k;
        uint8_t *b = mine ? (uint8_t *)buf : NULL;
        size_t l = mine ? len : 0;
        /* Invariant 2: the shards of one checkpoint split the same units evenly, so no file
         * is longer than shard 0's; anything longer is refused before it is allocated. */
        rc = ddp_comm_broadcast_bytes(g->pairs[k], 0, bound, &b, &l, &ce);
        if (rc != 0 && rc != DDP_EPEER && rc != DDP_ETIMEOUT) {
            if (!first) {
                first = rc;
                *err = ce;
            }
            rc = 0;
            if (!mine)
                free(b);
            continue;
        }
        if (rc == 0 && !mine && has_dir) {
            struct ddp_err se;
            if (ckpt_shard_save(dir, epoch, pos, (uint32_t)k, (uint32_t)W, b, l, &se) != 0 &&
                !first) {
                first = se.code;
                *err = se;
            }
        }
        if (!mine)
            free(b);
    }
    if (rc) {
        *err = ce;
        return rc;
    }
    rc = ddp_shard_checkpoint_done(g, dir, epoch, pos, first != 0, &ce);
    if (rc) {
        *err = ce;
        return rc;
    }
    return first;
}

int ddp_shard_checkpoint_done(struct ddp_group *g, const char *dir, uint32_t epoch, uint32_t pos,
                              int failed, struct ddp_err *err)
{
    /* Complete only when every rank wrote its file and every copy landed: then, and only
     * then, each folder drops all but it and the one complete before it. */
    double f = failed ? 1.0 : 0.0;
    int rc = g->world_size > 1 ? ddp_allreduce_f64(g, &f, 1, err) : 0;
    if (rc)
        return rc;
    if (f != 0.0)
        return 0;
    uint32_t prev[2] = {g->shard_done_epoch, g->shard_done_pos};
    struct ddp_err pe;
    if (dir && dir[0] && ckpt_shard_prune(dir, epoch, pos, g->shard_done ? prev : NULL, &pe) != 0)
        log_warn("cannot prune old sharded checkpoints: %s", pe.msg);
    g->shard_done = 1;
    g->shard_done_epoch = epoch;
    g->shard_done_pos = pos;
    return 0;
}

/* This rank's newest distinct (epoch, pos, world) keys, at most CAND_PER_RANK, into c. */
static int local_candidates(const struct ckpt_shard_file *f, size_t n, double *c)
{
    int nc = 0;
    for (size_t i = 0; i < n && nc < CAND_PER_RANK; i++) {
        int seen = 0;
        for (int j = 0; j < nc && !seen; j++)
            seen = c[3 * j] == f[i].epoch && c[3 * j + 1] == f[i].epoch_pos &&
                   c[3 * j + 2] == f[i].world;
        if (!seen) {
            c[3 * nc] = f[i].epoch;
            c[3 * nc + 1] = f[i].epoch_pos;
            c[3 * nc + 2] = f[i].world;
            nc++;
        }
    }
    return nc;
}

static int cmp_cand(const void *a, const void *b)
{
    const double *x = a, *y = b;
    for (int i = 0; i < 2; i++)
        if (x[i] != y[i])
            return x[i] < y[i] ? 1 : -1;
    return x[2] < y[2] ? -1 : (x[2] > y[2] ? 1 : 0);
}

int ddp_resume_shard_agree(struct ddp_group *g, const char *dir, const struct ckpt_id *id,
                           struct ddp_shard_resume *out, struct ddp_err *err)
{
    memset(out, 0, sizeof(*out));
    int W = g->world_size;
    if (dir && dir[0]) {
        struct ddp_err e;
        if (ckpt_shard_list(dir, id, &out->files, &out->nfiles, &e) != 0)
            log_warn("cannot scan checkpoint dir for shards: %s", e.msg);
    }
    size_t nv = (size_t)W * CAND_PER_RANK * 3;
    double *cand = xcalloc(nv, sizeof(double));
    local_candidates(out->files, out->nfiles, cand + (size_t)g->rank * CAND_PER_RANK * 3);
    int rc = ddp_allreduce_f64(g, cand, nv, err);
    if (rc)
        goto fail;
    /* Distinct candidates of all ranks, newest first (slots of world 0 are empty). */
    size_t nc = 0;
    for (size_t i = 0; i < (size_t)W * CAND_PER_RANK; i++) {
        double *c = cand + 3 * i;
        if (c[2] < 1.0 || c[2] > CKPT_SHARD_MAX_WORLD) /* empty (a mid-epoch 0 is a key) */
            continue;
        int seen = 0;
        for (size_t j = 0; j < nc && !seen; j++)
            seen = memcmp(cand + 3 * j, c, 3 * sizeof(double)) == 0;
        if (!seen) {
            memmove(cand + 3 * nc, c, 3 * sizeof(double));
            nc++;
        }
    }
    if (nc > 1)
        qsort(cand, nc, 3 * sizeof(double), cmp_cand);
    for (size_t ci = 0; ci < nc && !out->found; ci++) {
        uint32_t ep = (uint32_t)cand[3 * ci], pos = (uint32_t)cand[3 * ci + 1];
        int W0 = (int)cand[3 * ci + 2];
        double *held = xcalloc((size_t)W * (size_t)W0, sizeof(double));
        for (size_t i = 0; i < out->nfiles; i++) {
            const struct ckpt_shard_file *f = &out->files[i];
            if (f->epoch == ep && f->epoch_pos == pos && (int)f->world == W0)
                held[(size_t)g->rank * (size_t)W0 + f->shard] = 1.0;
        }
        rc = ddp_allreduce_f64(g, held, (size_t)W * (size_t)W0, err);
        if (rc) {
            free(held);
            goto fail;
        }
        int *holder = xmalloc((size_t)W0 * sizeof(int));
        int complete = 1;
        for (int k = 0; k < W0; k++) {
            holder[k] = -1;
            for (int r = 0; r < W && holder[k] < 0; r++)
                if (held[(size_t)r * (size_t)W0 + (size_t)k] > 0.0)
                    holder[k] = r;
            complete = complete && holder[k] >= 0;
        }
        free(held);
        if (!complete) {
            log_warn("sharded checkpoint of epoch %u (position %u, %d shards) is incomplete: "
                     "some shard survives on no rank",
                     ep, pos, W0);
            free(holder);
            continue;
        }
        out->found = 1;
        out->epoch = ep;
        out->epoch_pos = pos;
        g->shard_done = 1; /* known complete: the next save's prune keeps it */
        g->shard_done_epoch = ep;
        g->shard_done_pos = pos;
        out->world = (uint32_t)W0;
        out->holder = holder;
    }
    free(cand);
    return 0;
fail:
    free(cand);
    ddp_resume_shard_release(out);
    return rc;
}

/* The path of shard k of r in this rank's list, or NULL. */
static const char *own_path(const struct ddp_shard_resume *r, int k)
{
    for (size_t i = 0; i < r->nfiles; i++) {
        const struct ckpt_shard_file *f = &r->files[i];
        if (f->epoch == r->epoch && f->epoch_pos == r->epoch_pos && f->world == r->world &&
            (int)f->shard == k)
            return f->path;
    }
    return NULL;
}

/* Checks a decoded shard k against the agreement and the layout. */
static int check_file(const struct ddp_shard_resume *r, const struct ckpt_shard_view *v, int k,
                      const struct ckpt_id *id, const uint64_t *lens, uint32_t nunits,
                      struct ddp_err *err)
{
    if (!ckpt_shard_matches_id(v, id))
        return err_set(err, DDP_EINVAL, "shard %d of the checkpoint is of model '%s', not '%s'", k,
                       v->meta.model, id->spec);
    if (v->meta.epoch != r->epoch || v->meta.epoch_pos != r->epoch_pos ||
        v->meta.world_size != r->world || (int)v->shard != k)
        return err_set(err, DDP_EINVAL,
                       "shard %d of the checkpoint holds epoch %u, position %u, "
                       "shard %u of %u",
                       k, v->meta.epoch, v->meta.epoch_pos, v->shard, v->meta.world_size);
    uint64_t total = 0;
    for (uint32_t i = 0; lens && i < nunits; i++)
        total += lens[i];
    if (lens && total != v->meta.nparams)
        return err_set(err, DDP_EINVAL,
                       "shard %d of the checkpoint holds %llu parameters, the run's units %llu", k,
                       (unsigned long long)v->meta.nparams, (unsigned long long)total);
    return 0;
}

/* Shard k is of the checkpoint shard 0 is of: the same step, seed, RNG and units (files
 * of two runs that differ only in their units could meet under one name). */
static int same_checkpoint(const struct ckpt_meta *m0, const uint64_t *layout, uint32_t nlayout,
                           const struct ckpt_shard_view *v, int k, struct ddp_err *err)
{
    int same = v->meta.step == m0->step && v->meta.seed == m0->seed &&
               memcmp(&v->meta.rng, &m0->rng, sizeof(m0->rng)) == 0 && v->nunits == nlayout;
    for (uint32_t i = 0; same && i < nlayout; i++)
        same = ckpt_shard_unit_len(v, i) == layout[i];
    if (!same)
        return err_set(err, DDP_EINVAL,
                       "shard %d of the checkpoint of epoch %u is not of shard 0's run (step %llu "
                       "against %llu, %u units against %u)",
                       k, v->meta.epoch, (unsigned long long)v->meta.step,
                       (unsigned long long)m0->step, v->nunits, nlayout);
    return 0;
}

int ddp_resume_shard_load(struct ddp_group *g, const struct ddp_shard_resume *r,
                          const struct ckpt_id *id, const uint64_t *lens, uint32_t nunits,
                          int world, int rank, float *params, float *state, size_t S,
                          struct ckpt_meta *meta, struct ddp_err *err)
{
    if (!r->found)
        return err_set(err, DDP_EINVAL, "no sharded checkpoint was agreed on");
    if (world < 1 || rank < 0 || rank >= world || (!lens && world != 1))
        return err_set(err, DDP_EINVAL, "resharding onto rank %d of %d needs the unit layout", rank,
                       world);
    if (lens && ckpt_shard_floats(lens, nunits, world) != S)
        return err_set(err, DDP_EINVAL, "a shard of %u units at %d ranks is not %zu floats", nunits,
                       world, S);
    size_t max = max_file(id), copied = 0;
    uint64_t *layout = NULL; /* shard 0's units: every other shard must have them */
    uint32_t nlayout = 0;
    int rc = 0;
    for (int k = 0; k < (int)r->world && rc == 0; k++) {
        int root = r->holder[k];
        uint8_t *buf = NULL;
        size_t len = 0;
        if (g->rank == root) {
            const char *p = own_path(r, k);
            struct ddp_err e;
            char *data = NULL;
            if (!p || fs_read_regular(p, max, &data, &len, &e) != 0) {
                log_warn("cannot read shard %d again: %s", k, p ? e.msg : "not listed");
                len = 0;
            }
            buf = (uint8_t *)data;
        }
        rc = ddp_broadcast_bytes(g, root, max, &buf, &len, err);
        if (rc == 0 && len == 0)
            rc = err_set(err, DDP_EIO,
                         "shard %d of the checkpoint of epoch %u could not be read again by "
                         "rank %d",
                         k, r->epoch, root);
        struct ckpt_shard_view v;
        char what[64];
        snprintf(what, sizeof(what), "shard %d from rank %d", k, root);
        if (rc == 0)
            rc = ckpt_shard_decode(buf, len, what, &v, err);
        if (rc == 0)
            rc = check_file(r, &v, k, id, lens, nunits, err);
        if (rc == 0 && !lens && v.meta.nparams != S)
            rc = err_set(err, DDP_EINVAL, "the checkpoint holds %llu parameters, not %zu",
                         (unsigned long long)v.meta.nparams, S);
        if (rc == 0 && k == 0) {
            *meta = v.meta;
            layout = xmalloc((size_t)v.nunits * sizeof(uint64_t));
            nlayout = v.nunits;
            for (uint32_t i = 0; i < v.nunits; i++)
                layout[i] = ckpt_shard_unit_len(&v, i);
        } else if (rc == 0) {
            rc = same_checkpoint(meta, layout, nlayout, &v, k, err);
        }
        if (rc == 0)
            copied += ckpt_shard_copy_overlap(&v, lens, nunits, world, rank, params, state, S);
        free(buf);
    }
    free(layout);
    if (rc)
        return rc;
    /* Every parameter of this rank's new shard came from some file. */
    size_t want = lens ? ckpt_shard_valid_floats(lens, nunits, world, rank) : (size_t)meta->nparams;
    if (copied != want)
        return err_set(err, DDP_EINVAL,
                       "the sharded checkpoint of epoch %u gives this rank %zu of its %zu "
                       "parameters",
                       r->epoch, copied, want);
    log_info("resuming after epoch %u from a sharded checkpoint of %u ranks (step %llu, "
             "epoch_pos %u)%s",
             meta->epoch, r->world, (unsigned long long)meta->step, meta->epoch_pos,
             (int)r->world != world ? ", resharded" : "");
    return 0;
}

void ddp_resume_shard_release(struct ddp_shard_resume *r)
{
    if (!r)
        return;
    free(r->holder);
    ckpt_shard_files_free(r->files, r->nfiles);
    memset(r, 0, sizeof(*r));
}
