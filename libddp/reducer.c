/*
 * reducer.c - bucket assignment, ready counting and in-order all-reduce issue.
 *
 * Invariants during a step:
 *   - pending[b] is the number of tensors of bucket b not yet marked ready;
 *   - buckets [0, issued) have been started, in order, and work[b] is their handle;
 *   - with overlap, issued only advances over buckets whose pending count is 0, so bucket
 *     order is kept even when a later bucket fills first.
 */
#include "ddp/reducer.h"

#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#ifdef DDP_HAVE_CUDA
#include "ddp/gpu.h"
#endif

struct bucket {
    size_t offset, count;
    int first_tensor, last_tensor; /* first_tensor >= last_tensor */
    int ntensors;
};

struct reducer {
    struct comm *comm;
    int world_size;
    int device; /* grads is GPU memory */
    int overlap;
    int defer_average; /* host grads: finish leaves the sums (reducer_grad_scale) */
    struct trace *trace;
    int ntensors;
    size_t *counts;
    size_t *goff; /* tensor -> offset in grads */
    int *tbucket; /* tensor -> bucket */
    char *ready;  /* tensor -> marked this step */
    float *grads;
    size_t total;
    int nbuckets;
    struct bucket *buckets;
    int *pending;
    struct comm_work **work;
    int issued;
    int broken;
};

int reducer_new(struct comm *comm, int world_size, const size_t *counts, int ntensors,
                const struct reducer_opts *opts, struct trace *trace, struct reducer **out,
                struct ddp_err *err)
{
    if (ntensors < 1 || ntensors > REDUCER_MAX_TENSORS)
        return err_set(err, DDP_EINVAL, "reducer: %d tensors (want 1..%d)", ntensors,
                       REDUCER_MAX_TENSORS);
    if (world_size < 1 || (world_size > 1 && !comm))
        return err_set(err, DDP_EINVAL, "reducer: world size %d without a comm", world_size);
    if (opts->cap_bytes == 0 || opts->first_cap_bytes == 0)
        return err_set(err, DDP_EINVAL, "reducer: bucket cap of 0 bytes");
    struct reducer *r = xcalloc(1, sizeof(*r));
    r->comm = comm;
    r->world_size = world_size;
    r->overlap = opts->overlap;
    r->defer_average = opts->defer_average && !opts->device;
    r->trace = trace;
    r->ntensors = ntensors;
    r->counts = xmalloc((size_t)ntensors * sizeof(size_t));
    r->goff = xmalloc((size_t)ntensors * sizeof(size_t));
    r->tbucket = xmalloc((size_t)ntensors * sizeof(int));
    r->ready = xcalloc((size_t)ntensors, 1);
    r->buckets = xcalloc((size_t)ntensors, sizeof(struct bucket));
    memcpy(r->counts, counts, (size_t)ntensors * sizeof(size_t));

    /* Reverse order of definition; close a bucket once it reaches its cap. */
    size_t off = 0;
    struct bucket *b = NULL;
    for (int t = ntensors - 1; t >= 0; t--) {
        if (!b) {
            b = &r->buckets[r->nbuckets++];
            b->offset = off;
            b->first_tensor = t;
        }
        r->goff[t] = off;
        r->tbucket[t] = r->nbuckets - 1;
        off += counts[t];
        b->count += counts[t];
        b->last_tensor = t;
        b->ntensors++;
        size_t cap = r->nbuckets == 1 ? opts->first_cap_bytes : opts->cap_bytes;
        if (b->count * sizeof(float) >= cap)
            b = NULL;
    }
    r->total = off;
    if (opts->device) {
#ifdef DDP_HAVE_CUDA
        int rc = gpu_alloc((void **)&r->grads, (off ? off : 1) * sizeof(float), err);
        if (rc) {
            r->device = 0;
            reducer_free(r);
            return rc;
        }
        r->device = 1;
#else
        reducer_free(r);
        return err_set(err, DDP_EINVAL, "reducer: GPU gradients on a build without CUDA");
#endif
    } else {
        /* From the comm: where the ranks share memory, the buckets are all-reduced where
         * they lie instead of being copied into the shared slots. */
        size_t alloc = off ? off : 1;
        if (opts->pad_to > 1)
            alloc = (alloc + opts->pad_to - 1) / opts->pad_to * opts->pad_to;
        int rc = comm_alloc_buffer(world_size > 1 ? comm : NULL, alloc * sizeof(float),
                                   (void **)&r->grads, err);
        if (rc) {
            reducer_free(r);
            return rc;
        }
        memset(r->grads + off, 0, (alloc - off) * sizeof(float));
    }
    r->pending = xmalloc((size_t)r->nbuckets * sizeof(int));
    r->work = xcalloc((size_t)r->nbuckets, sizeof(struct comm_work *));
    for (int i = 0; i < r->nbuckets; i++)
        r->pending[i] = r->buckets[i].ntensors;
    *out = r;
    return 0;
}

void reducer_free(struct reducer *r)
{
    if (!r)
        return;
    for (int b = 0; b < r->issued; b++) {
        if (r->work[b]) {
            struct ddp_err e;
            (void)comm_wait(r->comm, r->work[b], &e);
            r->work[b] = NULL;
        }
    }
    free(r->counts);
    free(r->goff);
    free(r->tbucket);
    free(r->ready);
#ifdef DDP_HAVE_CUDA
    if (r->device)
        gpu_free(r->grads);
    else
#endif
        comm_free_buffer(r->world_size > 1 ? r->comm : NULL, r->grads);
    free(r->buckets);
    free(r->pending);
    free(r->work);
    free(r);
}

float reducer_grad_scale(const struct reducer *r)
{
    return r->defer_average ? 1.0f / (float)r->world_size : 1.0f;
}

float *reducer_grad(struct reducer *r, int t)
{
    return r->grads + r->goff[t];
}

float *reducer_grad_block(struct reducer *r, size_t *count)
{
    if (count)
        *count = r->total;
    return r->grads;
}

int reducer_bucket_count(const struct reducer *r)
{
    return r->nbuckets;
}

void reducer_bucket_info(const struct reducer *r, int b, size_t *offset, size_t *count,
                         int *first_tensor, int *last_tensor)
{
    const struct bucket *bk = &r->buckets[b];
    if (offset)
        *offset = bk->offset;
    if (count)
        *count = bk->count;
    if (first_tensor)
        *first_tensor = bk->first_tensor;
    if (last_tensor)
        *last_tensor = bk->last_tensor;
}

int reducer_tensor_bucket(const struct reducer *r, int t)
{
    return r->tbucket[t];
}

int reducer_buckets_issued(const struct reducer *r)
{
    return r->issued;
}

static int issue(struct reducer *r, int b, struct ddp_err *err)
{
    trace_event(r->trace, TRACE_AR_ISSUE, b);
    if (r->comm && r->world_size > 1) {
        const struct bucket *bk = &r->buckets[b];
        int rc = comm_allreduce_async(r->comm, r->grads + bk->offset, bk->count, COMM_F32,
                                      &r->work[b], err);
        if (rc) {
            r->broken = 1;
            return rc;
        }
    }
    r->issued = b + 1;
    return 0;
}

int reducer_mark_ready(struct reducer *r, int t, struct ddp_err *err)
{
    if (r->broken)
        return err_set(err, DDP_EINTERNAL, "reducer: used after a comm error");
    if (t < 0 || t >= r->ntensors)
        return err_set(err, DDP_EINTERNAL, "reducer: tensor %d out of range", t);
    if (r->ready[t])
        return err_set(err, DDP_EINTERNAL, "reducer: tensor %d marked ready twice in a step", t);
    r->ready[t] = 1;
    r->pending[r->tbucket[t]]--;
    if (!r->overlap)
        return 0;
    while (r->issued < r->nbuckets && r->pending[r->issued] == 0) {
        int rc = issue(r, r->issued, err);
        if (rc)
            return rc;
    }
    return 0;
}

int reducer_finish(struct reducer *r, struct ddp_err *err)
{
    int rc = 0;
    if (r->broken)
        return err_set(err, DDP_EINTERNAL, "reducer: used after a comm error");
    if (r->overlap) {
        for (int t = 0; t < r->ntensors; t++)
            if (!r->ready[t])
                return err_set(err, DDP_EINTERNAL,
                               "reducer: tensor %d was not marked ready before the step ended", t);
    }
    while (r->issued < r->nbuckets) {
        rc = issue(r, r->issued, err);
        if (rc)
            return rc;
    }
    float scale = 1.0f / (float)r->world_size;
    for (int b = 0; b < r->nbuckets; b++) {
        if (r->work[b]) {
            struct comm_work *w = r->work[b];
            r->work[b] = NULL;
            rc = comm_wait(r->comm, w, err);
            if (rc) {
                r->broken = 1;
                return rc;
            }
        }
        trace_event(r->trace, TRACE_AR_DONE, b);
#ifdef DDP_HAVE_CUDA
        if (r->device && r->world_size > 1) {
            rc = gpu_scale(r->grads + r->buckets[b].offset, r->buckets[b].count, scale, err);
            if (rc) {
                r->broken = 1;
                return rc;
            }
            continue;
        }
#endif
        if (r->world_size > 1 && !r->defer_average) {
            float *g = r->grads + r->buckets[b].offset;
            for (size_t i = 0; i < r->buckets[b].count; i++)
                g[i] *= scale;
        }
    }
    r->issued = 0;
    memset(r->ready, 0, (size_t)r->ntensors);
    for (int b = 0; b < r->nbuckets; b++)
        r->pending[b] = r->buckets[b].ntensors;
    return 0;
}
