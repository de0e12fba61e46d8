/*
 * comm.c - backend selection and the thin public wrappers of comm.h.
 *
 * comm_new() picks the ops table ("cpu", "nccl", "auto"), copies the options (the comm owns
 * its copy of local_addr; DDP_COMM_TRANSPORT=tcp forces the TCP ring), and runs the backend's
 * init; everything else forwards to the ops.
 * World size 1 is handled by each backend (a no-op that still honours the work/wait
 * contract), and needs no rendezvous store: r may be NULL then.
 */
#include "ddp/comm.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "libddp/comm/comm_internal.h"

void comm_opts_default(struct comm_opts *opts)
{
    memset(opts, 0, sizeof(*opts));
    opts->timeout_ms = COMM_DEFAULT_TIMEOUT_MS;
    opts->chunk_bytes = 0;
    opts->local_addr = "";
    opts->force_tcp = 0;
    opts->device = 0;
}

static int pick_backend(const char *backend, const struct comm_ops **ops, struct ddp_err *err)
{
    if (!backend || strcmp(backend, "cpu") == 0) {
        *ops = &comm_cpu_ops;
        return 0;
    }
    if (strcmp(backend, "auto") == 0) {
#ifdef DDP_HAVE_CUDA
        const struct comm_ops *nccl = comm_nccl_available() ? comm_nccl_ops_get(NULL) : NULL;
        if (nccl) {
            *ops = nccl;
            return 0;
        }
#endif
        *ops = &comm_cpu_ops;
        return 0;
    }
    if (strcmp(backend, "nccl") == 0) {
#ifdef DDP_HAVE_CUDA
        const char *why = NULL;
        *ops = comm_nccl_ops_get(&why);
        if (*ops)
            return 0;
        return err_set(err, DDP_EINVAL, "--backend nccl: %s", why ? why : "no NCCL backend");
#else
        return err_set(err, DDP_EINVAL, "--backend nccl: ddp was built without NCCL");
#endif
    }
    return err_set(err, DDP_EINVAL, "--backend: '%s' is not one of auto, cpu, nccl", backend);
}

int comm_new(const char *backend, struct rdzv *r, int rank, int world_size,
             const struct comm_opts *opts, struct comm **out, struct ddp_err *err)
{
    int ret = 0;
    struct comm *c = NULL;
    const struct comm_ops *ops = NULL;
    if ((ret = pick_backend(backend, &ops, err)) < 0)
        goto out;
    if (world_size < 1 || world_size > 65536 || rank < 0 || rank >= world_size) {
        ret =
            err_set(err, DDP_EINVAL, "rank %d of world size %d is out of range", rank, world_size);
        goto out;
    }
    if (world_size > 1 && !r) {
        ret = err_set(err, DDP_EINVAL, "world size %d needs a rendezvous store", world_size);
        goto out;
    }
    c = xcalloc(1, sizeof(*c));
    c->ops = ops;
    c->rank = rank;
    c->world_size = world_size;
    comm_opts_default(&c->opts);
    if (opts)
        c->opts = *opts;
    if (c->opts.timeout_ms <= 0)
        c->opts.timeout_ms = COMM_DEFAULT_TIMEOUT_MS;
    const char *tr = getenv("DDP_COMM_TRANSPORT");
    if (tr && *tr && strcmp(tr, "auto") != 0) {
        if (strcmp(tr, "tcp") != 0) {
            ret =
                err_set(err, DDP_EINVAL, "DDP_COMM_TRANSPORT: '%.32s' is not one of auto, tcp", tr);
            goto out;
        }
        c->opts.force_tcp = 1;
    }
    const char *la = opts && opts->local_addr ? opts->local_addr : "";
    if (strlen(la) >= sizeof(c->local_addr)) {
        ret = err_set(err, DDP_EINVAL, "local address '%.64s...' is too long", la);
        goto out;
    }
    memcpy(c->local_addr, la, strlen(la) + 1);
    c->opts.local_addr = c->local_addr;
    if ((ret = ops->init(c, r, err)) < 0)
        goto out;
    *out = c;
    c = NULL;
out:
    comm_free(c);
    return ret;
}

int comm_alloc_buffer(struct comm *c, size_t bytes, void **out, struct ddp_err *err)
{
    *out = NULL;
    /* no size arithmetic below (rounding, a region's stride and mapping) may wrap */
    if (bytes > SIZE_MAX / 4)
        return err_set(err, DDP_ETOOBIG, "cannot allocate %zu bytes", bytes);
    if (c && c->ops->alloc_buffer) {
        int ret = c->ops->alloc_buffer(c, bytes, out, err);
        if (ret < 0)
            return ret;
        if (ret > 0)
            return 0;
    }
    size_t n = (bytes + 63) & ~(size_t)63;
    void *p = aligned_alloc(64, n ? n : 64);
    if (!p)
        return err_set(err, DDP_ETOOBIG, "cannot allocate %zu bytes", bytes);
    memset(p, 0, n ? n : 64);
    *out = p;
    return 0;
}

void comm_free_buffer(struct comm *c, void *p)
{
    if (!p)
        return;
    if (c && c->ops->free_buffer && c->ops->free_buffer(c, p) == 1)
        return;
    free(p);
}

void comm_free(struct comm *c)
{
    if (!c)
        return;
    c->ops->destroy(c);
    free(c);
}

const char *comm_backend_name(const struct comm *c)
{
    return c->ops->name;
}

int comm_rank(const struct comm *c)
{
    return c->rank;
}

int comm_world_size(const struct comm *c)
{
    return c->world_size;
}

static int check_allreduce(const void *buf, size_t count, enum comm_dtype dt, struct ddp_err *err)
{
    if (dt != COMM_F32 && dt != COMM_F64)
        return err_set(err, DDP_EINVAL, "all-reduce: unknown data type %d", (int)dt);
    if (count > 0 && !buf)
        return err_set(err, DDP_EINVAL, "all-reduce: NULL buffer");
    if (count > SIZE_MAX / sizeof(double))
        return err_set(err, DDP_EINVAL, "all-reduce: count %zu is too large", count);
    return 0;
}

int comm_allreduce_async(struct comm *c, void *buf, size_t count, enum comm_dtype dt,
                         struct comm_work **out, struct ddp_err *err)
{
    int ret = check_allreduce(buf, count, dt, err);
    if (ret < 0)
        return ret;
    return c->ops->allreduce_async(c, buf, count, dt, out, err);
}

int comm_wait(struct comm *c, struct comm_work *w, struct ddp_err *err)
{
    return c->ops->wait(c, w, err);
}

int comm_allreduce(struct comm *c, void *buf, size_t count, enum comm_dtype dt, struct ddp_err *err)
{
    if (c->ops->allreduce) {
        int ret = check_allreduce(buf, count, dt, err);
        if (ret < 0)
            return ret;
        return c->ops->allreduce(c, buf, count, dt, err);
    }
    struct comm_work *w = NULL;
    int ret = comm_allreduce_async(c, buf, count, dt, &w, err);
    if (ret < 0)
        return ret;
    return comm_wait(c, w, err);
}

/* The checks of comm_reduce_scatter and comm_allgather: `full` is the count * W side
 * (in for the reduce-scatter, out for the all-gather), `part` the one shard. */
static int check_sharded(const struct comm *c, const char *what, const void *full, const void *part,
                         size_t count, enum comm_dtype dt, struct ddp_err *err)
{
    if (dt != COMM_F32 && dt != COMM_F64)
        return err_set(err, DDP_EINVAL, "%s: unknown data type %d", what, (int)dt);
    size_t es = dt == COMM_F64 ? sizeof(double) : sizeof(float);
    size_t w = (size_t)c->world_size;
    if (count > SIZE_MAX / sizeof(double) / w) /* the all-reduce's bound, over the full buffer */
        return err_set(err, DDP_EINVAL, "%s: count %zu over %d ranks is too large", what, count,
                       c->world_size);
    if (count == 0)
        return 0;
    if (!full || !part)
        return err_set(err, DDP_EINVAL, "%s: NULL buffer", what);
    uintptr_t f = (uintptr_t)full, p = (uintptr_t)part, sb = count * es;
    if (p == f + (uintptr_t)c->rank * sb)
        return 0; /* in place */
    if (p < f + sb * w && f < p + sb)
        return err_set(err, DDP_EINVAL,
                       "%s: the buffers overlap but the shard is not at rank %d's place", what,
                       c->rank);
    return 0;
}

int comm_reduce_scatter_async(struct comm *c, const void *in, void *out, size_t count,
                              enum comm_dtype dt, struct comm_work **out_work, struct ddp_err *err)
{
    int ret = check_sharded(c, "reduce-scatter", in, out, count, dt, err);
    if (ret < 0)
        return ret;
    return c->ops->reduce_scatter_async(c, in, out, count, dt, out_work, err);
}

int comm_reduce_scatter(struct comm *c, const void *in, void *out, size_t count, enum comm_dtype dt,
                        struct ddp_err *err)
{
    if (c->ops->reduce_scatter) {
        int ret = check_sharded(c, "reduce-scatter", in, out, count, dt, err);
        if (ret < 0)
            return ret;
        return c->ops->reduce_scatter(c, in, out, count, dt, err);
    }
    struct comm_work *w = NULL;
    int ret = comm_reduce_scatter_async(c, in, out, count, dt, &w, err);
    if (ret < 0)
        return ret;
    return comm_wait(c, w, err);
}

int comm_allgather_async(struct comm *c, const void *in, void *out, size_t count,
                         enum comm_dtype dt, struct comm_work **out_work, struct ddp_err *err)
{
    int ret = check_sharded(c, "all-gather", out, in, count, dt, err);
    if (ret < 0)
        return ret;
    return c->ops->allgather_async(c, in, out, count, dt, out_work, err);
}

int comm_allgather(struct comm *c, const void *in, void *out, size_t count, enum comm_dtype dt,
                   struct ddp_err *err)
{
    if (c->ops->allgather) {
        int ret = check_sharded(c, "all-gather", out, in, count, dt, err);
        if (ret < 0)
            return ret;
        return c->ops->allgather(c, in, out, count, dt, err);
    }
    struct comm_work *w = NULL;
    int ret = comm_allgather_async(c, in, out, count, dt, &w, err);
    if (ret < 0)
        return ret;
    return comm_wait(c, w, err);
}

int comm_broadcast(struct comm *c, void *buf, size_t bytes, int root, struct ddp_err *err)
{
    if (root < 0 || root >= c->world_size)
        return err_set(err, DDP_EINVAL, "broadcast: root %d is out of range [0, %d)", root,
                       c->world_size);
    if (bytes > 0 && !buf)
        return err_set(err, DDP_EINVAL, "broadcast: NULL buffer");
    return c->ops->broadcast(c, buf, bytes, root, err);
}

int comm_barrier(struct comm *c, struct ddp_err *err)
{
    return c->ops->barrier(c, err);
}
