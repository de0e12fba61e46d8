/*
 * fsdp.c - ZeRO-2 and ZeRO-3 by units (trainer/fsdp.h).
 *
 * Every collective is issued async and queued in issue order (the order the comm thread runs
 * them in); waiting for one waits for every earlier one first, and finishing a gather copies
 * it out of its scratch slot (a unit whose length is not a multiple of W is gathered into a
 * padded slot, then copied; one that is lands in place) while finishing a scatter releases
 * the unit's gradient region. The first error sticks in f->rc / f->err: the hooks, which
 * cannot all return one, leave it there, and the next call that can returns it.
 */
#include "trainer/fsdp.h"

#include <errno.h>
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "ddp/shard.h"
#include "trainer/shard_optim.h"

#define FSDP_SLOTS 2

struct unit {
    int first, last;  /* its hook layers: first..last */
    size_t poff, len; /* its parameters: [poff, poff + len) in definition order */
    struct shard sh;  /* of len over the world */
    size_t goff;      /* its gradient region in the block: page-aligned, sh.padded floats */
    size_t soff;      /* its shard in gshard, pshard and each state array */
    int resident;     /* full: its parameters are whole in the instance */
    int gathering;    /* an all-gather of it is queued */
    int slot;         /* the queued gather's scratch slot, or -1 (in place) */
};

enum pend_kind { PEND_GATHER, PEND_SCATTER };

struct pend {
    enum pend_kind kind;
    int unit;
    struct comm_work *w;
};

struct fsdp {
    struct comm *comm;
    int world, rank;
    struct fsdp_opts o;
    struct model_inst *mi;
    float *params;      /* the instance's, borrowed */
    int madvise_warned; /* release_pages fell back to zeroing */
    size_t n;
    int nunits;
    struct unit *u;
    int nlayers;
    int *unit_of;  /* each hook layer's unit */
    float **views; /* each tensor's gradient in the block, bound to the instance */
    float *block;  /* mmap'd */
    size_t block_bytes;
    size_t page_floats;
    size_t S;      /* sum of the units' sh.count */
    float *gshard; /* S: this rank's summed gradients */
    float *pshard; /* full: S, this rank's parameters (the master copy) */
    int arrays;
    float *state; /* arrays x S */
    struct shard_optim opt;
    float *slot[FSDP_SLOTS];
    int slot_busy[FSDP_SLOTS];
    struct pend *q;
    int qcap, qhead, qlen;
    int scatters; /* queued reduce-scatters */
    int materialized;
    int cur; /* full: the unit the current pass began last, -1 */
    int rc;
    struct ddp_err err;
    struct trace *trace;
    struct model_hooks fwd, bwd;
    int hooks_set; /* the instance's forward calls fwd */
};

static void set_error(struct fsdp *f, int rc, const struct ddp_err *e)
{
    if (f->rc == 0) {
        f->rc = rc;
        f->err = *e;
    }
}

static int report(const struct fsdp *f, struct ddp_err *err)
{
    if (f->rc && err)
        *err = f->err;
    return f->rc;
}

/* The whole pages inside [p, p + nfloats) back to the kernel (they read as zeros after).
 * Should the kernel refuse (madvise is advice: EAGAIN under memory pressure), they are
 * zeroed instead: the same contents, only no memory saved; said once. Never an error of
 * this rank alone, which would leave the others waiting in a collective it skips. */
static void release_pages(struct fsdp *f, float *p, size_t nfloats)
{
    size_t page = f->page_floats * sizeof(float);
    uintptr_t a = ((uintptr_t)p + page - 1) / page * page;
    uintptr_t b = (uintptr_t)(p + nfloats) / page * page;
    if (b > a && madvise((void *)a, b - a, MADV_DONTNEED) != 0) {
        if (!f->madvise_warned)
            log_warn("--sharding: madvise refused to release %zu bytes (%s): zeroed instead, "
                     "this rank holds more memory than the formula",
                     (size_t)(b - a), strerror(errno));
        f->madvise_warned = 1;
        memset((void *)a, 0, b - a);
    }
}

static void finish_one(struct fsdp *f)
{
    struct pend p = f->q[f->qhead];
    f->qhead = (f->qhead + 1) % f->qcap;
    f->qlen--;
    struct ddp_err e;
    trace_event(f->trace, TRACE_WAIT, p.unit);
    int rc = comm_wait(f->comm, p.w, &e);
    if (rc)
        set_error(f, rc, &e);
    struct unit *u = &f->u[p.unit];
    if (p.kind == PEND_GATHER) {
        if (u->slot >= 0) {
            if (rc == 0)
                memcpy(f->params + u->poff, f->slot[u->slot], u->len * sizeof(float));
            f->slot_busy[u->slot] = 0;
        }
        u->slot = -1;
        u->gathering = 0;
        u->resident = rc == 0;
        trace_event(f->trace, TRACE_AG_DONE, p.unit);
    } else {
        f->scatters--;
        release_pages(f, f->block + u->goff, u->sh.padded);
        trace_event(f->trace, TRACE_RS_DONE, p.unit);
    }
}

static void drain(struct fsdp *f)
{
    while (f->qlen > 0)
        finish_one(f);
}

static void push(struct fsdp *f, enum pend_kind kind, int unit, struct comm_work *w)
{
    f->q[(f->qhead + f->qlen) % f->qcap] = (struct pend){.kind = kind, .unit = unit, .w = w};
    f->qlen++;
}

/* Room in the queue for one more, and (want_slot) a free scratch slot: its index, else -1. */
static int make_room(struct fsdp *f, int want_slot)
{
    while (f->qlen >= f->qcap)
        finish_one(f);
    if (!want_slot)
        return -1;
    for (;;) {
        for (int s = 0; s < FSDP_SLOTS; s++)
            if (!f->slot_busy[s])
                return s;
        finish_one(f); /* a busy slot belongs to a queued gather */
    }
}

/* Queues the all-gather of unit i from src (this rank's shard: sh.count floats) into the
 * instance's parameters. In place in the parameters when src is already there. */
static void issue_gather_from(struct fsdp *f, int i, const float *src)
{
    struct unit *u = &f->u[i];
    int direct = u->sh.padded == u->len;
    int s = make_room(f, !direct);
    float *out = direct ? f->params + u->poff : f->slot[s];
    if (!direct && src == f->params + u->poff + u->sh.offset) {
        /* grad's step: the shard sits in the parameters; in place in the slot instead */
        memcpy(out + u->sh.offset, src, u->sh.valid * sizeof(float));
        memset(out + u->sh.offset + u->sh.valid, 0, (u->sh.count - u->sh.valid) * sizeof(float));
        src = out + u->sh.offset;
    }
    struct comm_work *w = NULL;
    struct ddp_err e;
    int rc = comm_allgather_async(f->comm, src, out, u->sh.count, COMM_F32, &w, &e);
    if (rc) {
        set_error(f, rc, &e);
        return;
    }
    if (!direct)
        f->slot_busy[s] = 1;
    u->slot = direct ? -1 : s;
    u->gathering = 1;
    push(f, PEND_GATHER, i, w);
    trace_event(f->trace, TRACE_AG_ISSUE, i);
}

/* full: queues unit i's gather from its master shard unless it is whole or on its way. */
static void prefetch(struct fsdp *f, int i)
{
    struct unit *u = &f->u[i];
    if (f->rc || u->resident || u->gathering)
        return;
    issue_gather_from(f, i, f->pshard + u->soff);
}

/* full: unit i whole in the parameters (zeros after an error: f->rc says so). */
static void ensure(struct fsdp *f, int i)
{
    prefetch(f, i);
    while (f->u[i].gathering && f->qlen > 0)
        finish_one(f);
}

static void release_unit(struct fsdp *f, int i)
{
    struct unit *u = &f->u[i];
    if (!u->resident)
        return;
    release_pages(f, f->params + u->poff, u->len);
    u->resident = 0;
}

/* full: a pass (forward or backward) reaches unit i. The unit it left is released, unless it
 * is unit 0, which stays whole until its backward ends. */
static void pass_reaches(struct fsdp *f, int i, int next)
{
    if (f->o.strategy != FSDP_FULL || f->materialized || i < 0 || i >= f->nunits)
        return;
    if (f->cur >= 1 && f->cur != i)
        release_unit(f, f->cur);
    f->cur = i;
    ensure(f, i);
    if (f->o.prefetch && next >= 0 && next < f->nunits)
        prefetch(f, next);
}

/* The unit of hook layer `layer`, or -1. */
static int unit_of(const struct fsdp *f, int layer)
{
    return layer >= 0 && layer < f->nlayers ? f->unit_of[layer] : -1;
}

/* The forward enters a unit at its first layer, the backward at its last. */
static void fwd_begin(void *ctx, int layer)
{
    struct fsdp *f = ctx;
    trace_event(f->trace, TRACE_FWD_BEGIN, layer);
    int i = unit_of(f, layer);
    if (i >= 0 && f->u[i].first == layer)
        pass_reaches(f, i, i + 1);
}

static void bwd_begin(void *ctx, int layer)
{
    struct fsdp *f = ctx;
    trace_event(f->trace, TRACE_BWD_BEGIN, layer);
    int i = unit_of(f, layer);
    if (i >= 0 && f->u[i].last == layer)
        pass_reaches(f, i, i - 1);
}

/* A unit's gradients are final when the backward of its first layer ends: its region
 * reduce-scattered into the shard. */
static int bwd_end(void *ctx, int layer, struct ddp_err *err)
{
    struct fsdp *f = ctx;
    trace_event(f->trace, TRACE_BWD_END, layer);
    int i = unit_of(f, layer);
    if (f->rc || i < 0 || f->u[i].first != layer)
        return report(f, err);
    struct unit *u = &f->u[i];
    make_room(f, 0);
    struct comm_work *w = NULL;
    struct ddp_err e;
    int rc = comm_reduce_scatter_async(f->comm, f->block + u->goff, f->gshard + u->soff,
                                       u->sh.count, COMM_F32, &w, &e);
    if (rc) {
        set_error(f, rc, &e);
        return report(f, err);
    }
    push(f, PEND_SCATTER, i, w);
    f->scatters++;
    trace_event(f->trace, TRACE_RS_ISSUE, i);
    while (f->scatters > f->o.max_scatters && f->qlen > 0)
        finish_one(f);
    return report(f, err);
}

static const char *strategy_name(enum fsdp_strategy s)
{
    return s == FSDP_FULL ? "full" : "grad";
}

/* The units: hook layers 0, 1, ... covering the tensors in definition order. */
static int build_units(struct fsdp *f, struct ddp_err *err)
{
    struct model_inst *mi = f->mi;
    int nt = mi->ops->tensor_count(mi);
    size_t *toff = xmalloc(((size_t)nt + 1) * sizeof(size_t));
    toff[0] = 0;
    for (int t = 0; t < nt; t++)
        toff[t + 1] = toff[t] + mi->ops->tensor_size(mi, t);
    if (toff[nt] != f->n) {
        size_t held = toff[nt];
        free(toff);
        return err_set(err, DDP_EINVAL, "--sharding %s: the tensors hold %zu parameters, not %zu",
                       strategy_name(f->o.strategy), held, f->n);
    }
    f->u = xcalloc((size_t)nt, sizeof(*f->u));
    f->unit_of = xcalloc((size_t)nt, sizeof(int));
    int covered = 0;
    struct unit *open = NULL; /* the unit still below min_unit floats */
    while (covered < nt) {
        int first = -1, count = 0;
        mi->ops->layer_tensors(mi, f->nlayers, &first, &count);
        if (first != covered || count <= 0 || count > nt - covered) {
            free(toff);
            return err_set(err, DDP_EINVAL,
                           "--sharding %s: hook layer %d of the model holds tensors %d..%d, not "
                           "the next ones in definition order (from %d)",
                           strategy_name(f->o.strategy), f->nlayers, first, first + count - 1,
                           covered);
        }
        size_t len = toff[first + count] - toff[first];
        if (!open) {
            open = &f->u[f->nunits++];
            open->first = f->nlayers;
            open->poff = toff[first];
            open->slot = -1;
        }
        open->last = f->nlayers;
        open->len += len;
        f->unit_of[f->nlayers++] = f->nunits - 1;
        if (open->len >= f->o.min_unit)
            open = NULL;
        covered += count;
    }
    f->views = xmalloc((size_t)nt * sizeof(float *));
    size_t goff = 0;
    int i;
    for (i = 0; i < f->nunits; i++) {
        struct unit *u = &f->u[i];
        int rc = shard_of(u->len, f->world, f->rank, &u->sh, err);
        if (rc) {
            free(toff);
            return rc;
        }
        u->goff = goff;
        u->soff = f->S;
        f->S += u->sh.count;
        goff += (u->sh.padded + f->page_floats - 1) / f->page_floats * f->page_floats;
    }
    f->block_bytes = goff * sizeof(float);
    void *b =
        mmap(NULL, f->block_bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (b == MAP_FAILED) {
        free(toff);
        f->block = NULL;
        return err_set(err, DDP_ETOOBIG, "--sharding %s: no memory for %zu bytes of gradients: %s",
                       strategy_name(f->o.strategy), f->block_bytes, strerror(errno));
    }
    f->block = b;
    i = 0;
    for (int t = 0; t < nt; t++) {
        while (toff[t] >= f->u[i].poff + f->u[i].len)
            i++;
        f->views[t] = f->block + f->u[i].goff + (toff[t] - f->u[i].poff);
    }
    free(toff);
    return 0;
}

int fsdp_new(struct comm *comm, int world, int rank, struct model_inst *mi,
             const struct optim_cfg *cfg, const struct fsdp_opts *o, uint64_t step,
             struct trace *trace, struct fsdp **out, struct ddp_err *err)
{
    if (o->strategy == FSDP_FULL && !mi->ops->set_forward_hooks)
        return err_set(err, DDP_EINVAL,
                       "--sharding full: the %s model instance has no forward "
                       "hooks to gather its units by",
                       mi->ops->name);
    if (world < 1 || rank < 0 || rank >= world || o->max_scatters < 0)
        return err_set(err, DDP_EINVAL, "--sharding %s: rank %d of %d, %d scatters in flight",
                       strategy_name(o->strategy), rank, world, o->max_scatters);
    struct fsdp *f = xcalloc(1, sizeof(*f));
    f->comm = comm;
    f->world = world;
    f->rank = rank;
    f->o = *o;
    f->mi = mi;
    f->params = mi->ops->params(mi);
    f->n = mi->ops->param_count(mi);
    f->trace = trace;
    f->cur = -1;
    long page = sysconf(_SC_PAGESIZE);
    f->page_floats = (size_t)(page > 0 ? page : 4096) / sizeof(float);
    int rc = build_units(f, err);
    if (rc) {
        fsdp_free(f);
        return rc;
    }
    shard_optim_init(&f->opt, cfg, step);
    f->arrays = shard_optim_arrays(&f->opt);
    size_t S = f->S ? f->S : 1;
    f->gshard = xcalloc(S, sizeof(float));
    f->state = xcalloc((size_t)f->arrays * S, sizeof(float));
    size_t slot_floats = 0;
    for (int i = 0; i < f->nunits; i++)
        if (f->u[i].sh.padded != f->u[i].len && f->u[i].sh.padded > slot_floats)
            slot_floats = f->u[i].sh.padded;
    for (int s = 0; s < FSDP_SLOTS && slot_floats; s++)
        f->slot[s] = xcalloc(slot_floats, sizeof(float));
    f->qcap = f->nunits + o->max_scatters + 4;
    f->q = xcalloc((size_t)f->qcap, sizeof(*f->q));
    f->fwd = (struct model_hooks){.ctx = f, .layer_begin = fwd_begin};
    f->bwd = (struct model_hooks){.ctx = f, .layer_begin = bwd_begin, .layer_end = bwd_end};
    mi->ops->bind_grads(mi, f->views);
    if (o->strategy == FSDP_FULL) {
        f->pshard = xcalloc(S, sizeof(float));
        for (int i = 0; i < f->nunits; i++) {
            struct unit *u = &f->u[i];
            memcpy(f->pshard + u->soff, f->params + u->poff + u->sh.offset,
                   u->sh.valid * sizeof(float));
            u->resident = 1;
            release_unit(f, i);
        }
    }
    if (mi->ops->set_forward_hooks) { /* grad: only the trace's fwd_begin events */
        mi->ops->set_forward_hooks(mi, &f->fwd);
        f->hooks_set = 1;
    }
    if (f->rc) {
        rc = report(f, err);
        fsdp_free(f);
        return rc;
    }
    *out = f;
    return 0;
}

void fsdp_free(struct fsdp *f)
{
    if (!f)
        return;
    drain(f);
    if (f->hooks_set)
        f->mi->ops->set_forward_hooks(f->mi, NULL);
    if (f->block)
        munmap(f->block, f->block_bytes);
    for (int s = 0; s < FSDP_SLOTS; s++)
        free(f->slot[s]);
    free(f->q);
    free(f->gshard);
    free(f->pshard);
    free(f->state);
    free(f->views);
    free(f->u);
    free(f->unit_of);
    free(f);
}

int fsdp_units(const struct fsdp *f)
{
    return f->nunits;
}

size_t fsdp_shard_floats(const struct fsdp *f)
{
    return f->S;
}

int fsdp_state_arrays(const struct fsdp *f)
{
    return f->arrays;
}

const struct model_hooks *fsdp_backward_hooks(struct fsdp *f)
{
    return &f->bwd;
}

int fsdp_end_forward(struct fsdp *f, struct ddp_err *err)
{
    return report(f, err);
}

int fsdp_end_backward(struct fsdp *f, struct ddp_err *err)
{
    drain(f);
    if (f->o.strategy == FSDP_FULL && !f->materialized) {
        for (int i = 0; i < f->nunits; i++)
            release_unit(f, i);
        f->cur = -1;
    }
    return report(f, err);
}

int fsdp_step(struct fsdp *f, float lr, float grad_scale, struct ddp_err *err)
{
    if (f->rc)
        return report(f, err);
    if (f->o.cross) { /* hybrid: the other nodes' sums of this shard */
        struct ddp_err ce;
        int crc = comm_allreduce(f->o.cross, f->gshard, f->S, COMM_F32, &ce);
        if (crc) {
            set_error(f, crc, &ce);
            return report(f, err);
        }
    }
    double sq = 0.0;
    for (int i = 0; f->opt.cfg.clip_norm > 0.0f && i < f->nunits; i++) {
        const float *g = f->gshard + f->u[i].soff;
        for (size_t k = 0; k < f->u[i].sh.valid; k++)
            sq += (double)g[k] * (double)g[k];
    }
    struct ddp_err e;
    int rc = shard_optim_clip(&f->opt, f->comm, sq, &grad_scale, &e);
    if (rc) {
        set_error(f, rc, &e);
        return report(f, err);
    }
    shard_optim_begin(&f->opt, lr);
    for (int i = 0; i < f->nunits; i++) {
        const struct unit *u = &f->u[i];
        if (u->sh.valid == 0)
            continue;
        float *p =
            f->o.strategy == FSDP_FULL ? f->pshard + u->soff : f->params + u->poff + u->sh.offset;
        const float *g = f->gshard + u->soff;
        float *s0 = f->state + u->soff;
        shard_optim_update(&f->opt, p, s0, s0 + f->S, g, u->sh.valid, grad_scale);
    }
    if (f->o.strategy == FSDP_GRAD) {
        for (int i = 0; i < f->nunits && f->rc == 0; i++)
            issue_gather_from(f, i, f->params + f->u[i].poff + f->u[i].sh.offset);
        drain(f);
    }
    return report(f, err);
}

int fsdp_materialize(struct fsdp *f, struct ddp_err *err)
{
    if (f->o.strategy != FSDP_FULL || f->rc)
        return report(f, err);
    for (int i = 0; i < f->nunits; i++)
        prefetch(f, i);
    drain(f);
    f->materialized = 1;
    return report(f, err);
}

void fsdp_release(struct fsdp *f)
{
    if (f->o.strategy != FSDP_FULL)
        return;
    drain(f);
    for (int i = 0; i < f->nunits; i++)
        release_unit(f, i);
    f->materialized = 0;
    f->cur = -1;
}

uint64_t fsdp_unit_len(const struct fsdp *f, int i)
{
    return f->u[i].len;
}

void fsdp_copy_param_shards(const struct fsdp *f, float *out)
{
    for (int i = 0; i < f->nunits; i++) {
        const struct unit *u = &f->u[i];
        const float *src =
            f->o.strategy == FSDP_FULL ? f->pshard + u->soff : f->params + u->poff + u->sh.offset;
        memcpy(out + u->soff, src, u->sh.valid * sizeof(float));
        memset(out + u->soff + u->sh.valid, 0, (u->sh.count - u->sh.valid) * sizeof(float));
    }
}

const float *fsdp_state_shards(const struct fsdp *f)
{
    return f->state;
}

int fsdp_load_shards(struct fsdp *f, const float *params, const float *state, uint64_t step,
                     struct ddp_err *err)
{
    drain(f);
    if (f->rc)
        return report(f, err);
    for (int i = 0; i < f->nunits; i++) {
        const struct unit *u = &f->u[i];
        float *dst =
            f->o.strategy == FSDP_FULL ? f->pshard + u->soff : f->params + u->poff + u->sh.offset;
        memcpy(dst, params + u->soff, u->sh.valid * sizeof(float));
    }
    memcpy(f->state, state, (size_t)f->arrays * f->S * sizeof(float));
    struct optim_cfg cfg = f->opt.cfg;
    shard_optim_init(&f->opt, &cfg, step);
    if (f->o.strategy == FSDP_GRAD) { /* every rank's parameters whole again */
        for (int i = 0; i < f->nunits && f->rc == 0; i++)
            issue_gather_from(f, i, f->params + f->u[i].poff + f->u[i].sh.offset);
        drain(f);
    }
    return report(f, err);
}

void fsdp_load_state(struct fsdp *f, const float *full)
{
    for (int j = 0; j < f->arrays; j++)
        for (int i = 0; i < f->nunits; i++) {
            const struct unit *u = &f->u[i];
            memcpy(f->state + (size_t)j * f->S + u->soff,
                   full + (size_t)j * f->n + u->poff + u->sh.offset, u->sh.valid * sizeof(float));
        }
}
