/*
 * reducer.h - DDP's gradient reducer: gradient buckets, all-reduced while the backward runs.
 *
 * The parameter tensors (given by element count, in order of definition) are assigned to
 * buckets in REVERSE order of definition - the order the backward produces their gradients.
 * Bucket 0 closes once it holds at least first_cap_bytes, every later bucket at cap_bytes
 * (torch's bucket_cap_mb and its 1 MiB first bucket); a tensor is never split.
 * All gradients are one allocation (comm_alloc_buffer: shared with the same-host ranks where
 * the comm can, so buckets are all-reduced where they lie), laid out in bucket order, so a
 * bucket is one contiguous
 * range and each tensor's gradient is a view into it (reducer_grad): the backward writes the
 * gradient where it is reduced, no copy.
 *
 * A step: the backward calls reducer_mark_ready(t) for each tensor as its layer finishes.
 * With overlap on, a bucket whose tensors are all ready starts its all-reduce at once
 * (comm_allreduce_async), buckets always in bucket order (bucket k+1 waits for k to start).
 * With overlap off, nothing starts before reducer_finish. reducer_finish starts what is left,
 * waits for every bucket and divides the sums by the world size, so each gradient is the
 * average over the ranks; then the next step may begin.
 *
 * Without a comm (world size 1) the reducer still buckets, views and traces, and finish
 * only divides by 1.
 */
#ifndef DDP_REDUCER_H
#define DDP_REDUCER_H

#include <stddef.h>

#include "common/err.h"
#include "ddp/comm.h"
#include "ddp/trace.h"

#define REDUCER_FIRST_BUCKET_BYTES ((size_t)1 << 20)
#define REDUCER_MAX_TENSORS        4096

struct reducer;

struct reducer_opts {
    size_t first_cap_bytes; /* bucket 0's cap; REDUCER_FIRST_BUCKET_BYTES in ddp-worker */
    size_t cap_bytes;       /* every other bucket's cap (--bucket-cap-mb) */
    int overlap;            /* 1: all-reduce during the backward; 0: after it */
    int device;             /* 1: the gradient block is GPU memory (nccl backend; builds
                               with CUDA only), averaged by a kernel on the compute stream */
    int defer_average;      /* host gradients: 1 = reducer_finish leaves the sums and the
                               caller multiplies by reducer_grad_scale() where it reads them
                               (ddp-worker's optimizer), which saves a pass over the block */
    size_t pad_to;          /* > 1: the block is allocated rounded up to a multiple of this
                               many floats, the tail zero (a sharded optimizer's padding:
                               ddp/shard.h); reducer_grad_block still counts the gradients */
};

/*
 * Creates a reducer for ntensors tensors of counts[t] floats. comm (borrowed, may be NULL
 * when world_size is 1) and trace (borrowed, may be NULL) must outlive the reducer.
 * Caller frees with reducer_free().
 */
int reducer_new(struct comm *comm, int world_size, const size_t *counts, int ntensors,
                const struct reducer_opts *opts, struct trace *trace, struct reducer **out,
                struct ddp_err *err);
/* Waits for (and ignores the result of) any all-reduce still in flight, then frees.
 * Accepts NULL. */
void reducer_free(struct reducer *r);

/* Tensor t's gradient: a view of counts[t] floats inside its bucket. */
float *reducer_grad(struct reducer *r, int t);
/* The whole gradient block (every bucket, in bucket order) and its length in floats. */
float *reducer_grad_block(struct reducer *r, size_t *count);

/* What the gradients must be multiplied by to be the average: 1/world size with
 * opts.defer_average on host gradients, else 1 (reducer_finish averaged them). */
float reducer_grad_scale(const struct reducer *r);

int reducer_bucket_count(const struct reducer *r);
/* Bucket b's range in the gradient block (floats) and its tensors: first_tensor is the
 * highest tensor index in it, last_tensor the lowest. */
void reducer_bucket_info(const struct reducer *r, int b, size_t *offset, size_t *count,
                         int *first_tensor, int *last_tensor);
/* The bucket tensor t is in. */
int reducer_tensor_bucket(const struct reducer *r, int t);
/* Buckets whose all-reduce has been started in the current step. */
int reducer_buckets_issued(const struct reducer *r);

/* Tensor t's gradient is final for this step. Marking one twice in a step is DDP_EINTERNAL.
 * May start all-reduces (errors from the comm are returned). */
int reducer_mark_ready(struct reducer *r, int t, struct ddp_err *err);

/* Ends the step: starts the remaining buckets, waits for all, averages (unless
 * defer_average: see reducer_grad_scale). With overlap on,
 * a tensor never marked ready is DDP_EINTERNAL (naming it). Comm errors (DDP_EPEER,
 * DDP_ETIMEOUT) are returned; the reducer is then only good for reducer_free. */
int reducer_finish(struct reducer *r, struct ddp_err *err);

#endif
