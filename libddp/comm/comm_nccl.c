/*
 * comm_nccl.c - the NCCL backend of comm.h: collectives on GPU memory over NCCL.
 *
 * Reduce-scatter and all-gather (ncclReduceScatter, ncclAllGather) follow the all-reduce in
 * every respect below: ordering, host staging, faults.
 *
 * Ordering: every all-reduce runs on this backend's own comm stream. At issue time an event
 * is recorded on the compute stream (gpu_stream()) and the comm stream waits on it, so the
 * all-reduce reads the gradients only after the kernels that wrote them, while the compute
 * stream goes on with the rest of the backward (the overlap). comm_wait() makes the compute
 * stream wait on the all-reduce's done event, so the optimizer step runs after it.
 *
 * Host buffers (the loss sums, the checkpoint epoch, the checkpoint itself) are staged
 * through a pinned host buffer and a device buffer, so callers can hand this backend host
 * memory as they would the CPU one. A collective on host memory completes before the call
 * returns (comm_wait() then has nothing left to wait for): the copies are stream-ordered from
 * pinned memory, so no CUDA call blocks the host on the all-reduce; only the timed poll below
 * waits for it. (A cudaMemcpyAsync into pageable host memory would wait for the stream with
 * no bound, and a peer that died would hang it.)
 *
 * Faults: the communicator is created non-blocking (ncclConfig_t.blocking = 0), so every
 * NCCL call may return ncclInProgress; each is followed by polling ncclCommGetAsyncError
 * until it is no longer in progress. Every wait polls the done event and
 * ncclCommGetAsyncError under the comm's timeout; an NCCL error or the timeout aborts the
 * communicator (ncclCommAbort) and turns this and every later call into DDP_EPEER /
 * DDP_ETIMEOUT, which the worker reports with the "peer lost" exit code (6), so the job
 * re-forms instead of hanging. comm_free() finalizes the communicator under the same bound
 * (ncclCommDestroy alone may block) and aborts it if that does not finish.
 *
 * Threads: every call comes from the training thread, which selected the GPU (gpu_init:
 * cudaSetDevice before any other CUDA call); init selects it again for NCCL's sake.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "libddp/comm/comm_internal.h"
#include "ddp/gpu.h"

struct nccl_state {
    ncclComm_t comm;
    cudaStream_t stream;
    void *dstage; /* device staging for host buffers */
    void *hstage; /* pinned host staging, as large as dstage */
    size_t stage_bytes;
    int failed; /* a DDP_E* code once the comm broke, else 0 */
    char why[320];
};

struct comm_work {
    cudaEvent_t done; /* NULL: the collective finished before the issuing call returned */
};

int comm_nccl_available(void)
{
    return gpu_count(NULL) > 0;
}

static struct nccl_state *st_of(struct comm *c)
{
    return c->impl;
}

/* Marks the comm broken (first reason wins), aborts the communicator, and returns the
 * error. Every later call returns the same error. */
static int nccl_fail(struct comm *c, int code, struct ddp_err *err, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
static int nccl_fail(struct comm *c, int code, struct ddp_err *err, const char *fmt, ...)
{
    struct nccl_state *s = st_of(c);
    if (!s->failed) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(s->why, sizeof(s->why), fmt, ap);
        va_end(ap);
        s->failed = code;
        if (s->comm)
            ncclCommAbort(s->comm);
        s->comm = NULL;
    }
    return err_set(err, s->failed, "%s", s->why);
}

static int cuda_fail(struct comm *c, cudaError_t e, const char *what, struct ddp_err *err)
{
    return nccl_fail(c, DDP_EINTERNAL, err, "nccl: %s: CUDA error %s: %s", what,
                     cudaGetErrorName(e), cudaGetErrorString(e));
}

#define CUDA_CHECK(call, what)                  \
    do {                                        \
        cudaError_t e_ = (call);                \
        if (e_ != cudaSuccess)                  \
            return cuda_fail(c, e_, what, err); \
    } while (0)

/* NCCL's own text for its last error (it often names the peer or the failing call), or "".
 * comm may be NULL. */
static const char *nccl_detail(ncclComm_t comm)
{
    const char *d = ncclGetLastError(comm);
    return d ? d : "";
}

/* Waits while the non-blocking communicator reports ncclInProgress (init, or a call being
 * enqueued), bounded by deadline. */
static int nccl_settle(struct comm *c, const char *what, int64_t deadline, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    for (;;) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(s->comm, &async);
        if (r != ncclSuccess)
            return nccl_fail(c, DDP_EPEER, err, "peer lost: %s: ncclCommGetAsyncError: %s %s", what,
                             ncclGetErrorString(r), nccl_detail(s->comm));
        if (async == ncclSuccess)
            return 0;
        if (async != ncclInProgress)
            return nccl_fail(c, DDP_EPEER, err, "peer lost: %s: NCCL error: %s %s", what,
                             ncclGetErrorString(async), nccl_detail(s->comm));
        if (time_mono_ms() > deadline)
            return nccl_fail(c, DDP_ETIMEOUT, err,
                             "peer lost: %s: NCCL did not finish within the collective timeout",
                             what);
        usleep(100);
    }
}

/* The result of an NCCL call on a non-blocking communicator. */
static int nccl_check(struct comm *c, ncclResult_t r, const char *what, int64_t deadline,
                      struct ddp_err *err)
{
    if (r == ncclSuccess || r == ncclInProgress)
        return nccl_settle(c, what, deadline, err);
    return nccl_fail(c, DDP_EPEER, err, "peer lost: %s: %s %s", what, ncclGetErrorString(r),
                     nccl_detail(st_of(c)->comm));
}

/* Polls ev (recorded on the comm stream after a collective) and the communicator's async
 * error until ev completes, an error shows, or deadline passes. */
static int nccl_poll(struct comm *c, cudaEvent_t ev, const char *what, int64_t deadline,
                     struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    for (int spins = 0;; spins++) {
        if (s->failed)
            return err_set(err, s->failed, "%s", s->why);
        cudaError_t e = cudaEventQuery(ev);
        if (e == cudaSuccess)
            return 0;
        if (e != cudaErrorNotReady)
            return cuda_fail(c, e, what, err);
        ncclResult_t async = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(s->comm, &async);
        if (r != ncclSuccess)
            return nccl_fail(c, DDP_EPEER, err, "peer lost: %s: ncclCommGetAsyncError: %s %s", what,
                             ncclGetErrorString(r), nccl_detail(s->comm));
        if (async != ncclSuccess && async != ncclInProgress)
            return nccl_fail(c, DDP_EPEER, err, "peer lost: %s: NCCL error: %s %s", what,
                             ncclGetErrorString(async), nccl_detail(s->comm));
        if (time_mono_ms() > deadline)
            return nccl_fail(c, DDP_ETIMEOUT, err,
                             "peer lost: %s did not finish within the collective timeout", what);
        if (spins > 1000)
            usleep(50);
    }
}

/* Refuses two ranks on one GPU of one host before NCCL does so less clearly. */
static int nccl_check_devices(struct comm *c, struct rdzv *r, uint64_t id, int64_t deadline,
                              struct ddp_err *err)
{
    char mine[256], host[128], bus[64], key[96];
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "unknown");
    host[sizeof(host) - 1] = '\0';
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), gpu_device()) != cudaSuccess) {
        (void)cudaGetLastError();
        snprintf(bus, sizeof(bus), "device %d", gpu_device());
    }
    int n = snprintf(mine, sizeof(mine), "%s/%s", host, bus);
    if (n < 0 || (size_t)n >= sizeof(mine))
        n = (int)strlen(mine);
    snprintf(key, sizeof(key), "c%llu/nccl/dev/%d", (unsigned long long)id, c->rank);
    int ret = rdzv_set(r, key, mine, (size_t)n, err);
    for (int peer = 0; ret == 0 && peer < c->world_size; peer++) {
        if (peer == c->rank)
            continue;
        void *v = NULL;
        size_t len = 0;
        snprintf(key, sizeof(key), "c%llu/nccl/dev/%d", (unsigned long long)id, peer);
        int64_t left = deadline - time_mono_ms();
        ret = rdzv_get(r, key, left > 0 ? left : 0, &v, &len, err);
        if (ret == 0 && len == (size_t)n && memcmp(v, mine, len) == 0)
            ret = err_set(err, DDP_EINVAL,
                          "NCCL refuses two ranks on one GPU: ranks %d and %d both use GPU %s "
                          "on %s (run at most one process per GPU: --nproc-per-node <= GPUs)",
                          peer < c->rank ? peer : c->rank, peer < c->rank ? c->rank : peer, bus,
                          host);
        free(v);
    }
    return ret;
}

static int nccl_init(struct comm *c, struct rdzv *r, struct ddp_err *err)
{
    struct nccl_state *s = xcalloc(1, sizeof(*s));
    c->impl = s;
    int64_t deadline = time_mono_ms() + c->opts.timeout_ms;
    int ret;
    if (gpu_device() < 0 && (ret = gpu_init(c->opts.device, err)) < 0)
        return ret;
    /* NCCL binds the communicator to the calling thread's current device. */
    CUDA_CHECK(cudaSetDevice(gpu_device()), "cudaSetDevice");
    CUDA_CHECK(cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking),
               "cudaStreamCreateWithFlags");
    ncclUniqueId uid;
    memset(&uid, 0, sizeof(uid));
    uint64_t id = r ? rdzv_next_id(r) : 0;
    if (c->world_size > 1) {
        if ((ret = nccl_check_devices(c, r, id, deadline, err)) < 0)
            return ret;
        char key[64];
        snprintf(key, sizeof(key), "c%llu/nccl/uid", (unsigned long long)id);
        if (c->rank == 0) {
            ncclResult_t nr = ncclGetUniqueId(&uid);
            if (nr != ncclSuccess)
                return err_set(err, DDP_EINTERNAL, "ncclGetUniqueId: %s %s", ncclGetErrorString(nr),
                               nccl_detail(NULL));
            if ((ret = rdzv_set(r, key, &uid, sizeof(uid), err)) < 0)
                return ret;
        } else {
            void *v = NULL;
            size_t len = 0;
            int64_t left = deadline - time_mono_ms();
            if ((ret = rdzv_get(r, key, left > 0 ? left : 0, &v, &len, err)) < 0)
                return ret;
            if (len != sizeof(uid)) {
                free(v);
                return err_set(err, DDP_EINTERNAL, "NCCL unique id of %zu bytes (want %zu)", len,
                               sizeof(uid));
            }
            memcpy(&uid, v, sizeof(uid));
            free(v);
        }
    } else {
        ncclResult_t nr = ncclGetUniqueId(&uid);
        if (nr != ncclSuccess)
            return err_set(err, DDP_EINTERNAL, "ncclGetUniqueId: %s", ncclGetErrorString(nr));
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t nr = ncclCommInitRankConfig(&s->comm, c->world_size, uid, c->rank, &cfg);
    if (nr != ncclSuccess && nr != ncclInProgress) {
        /* Abort whatever handle NCCL may have returned (nccl_fail does). */
        return nccl_fail(c, nr == ncclInvalidUsage ? DDP_EINVAL : DDP_EPEER, err,
                         "ncclCommInitRankConfig (rank %d of %d, GPU %d): %s %s", c->rank,
                         c->world_size, gpu_device(), ncclGetErrorString(nr), nccl_detail(s->comm));
    }
    if (!s->comm)
        return nccl_fail(c, DDP_EINTERNAL, err, "ncclCommInitRankConfig returned no communicator");
    if ((ret = nccl_settle(c, "ncclCommInitRankConfig", deadline, err)) < 0)
        return ret;
    int version = 0;
    (void)ncclGetVersion(&version);
    log_info("nccl communicator ready rank=%d world=%d device=%d nccl=%d", c->rank, c->world_size,
             gpu_device(), version);
    return 0;
}

/* Grows the host and device staging buffers to at least bytes. */
static int stage_reserve(struct comm *c, size_t bytes, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    if (bytes <= s->stage_bytes)
        return 0;
    /* Earlier host collectives finished before their calls returned: nothing in flight
     * uses the old buffers. */
    if (s->dstage)
        cudaFree(s->dstage);
    if (s->hstage)
        cudaFreeHost(s->hstage);
    s->dstage = s->hstage = NULL;
    s->stage_bytes = 0;
    CUDA_CHECK(cudaMalloc(&s->dstage, bytes), "cudaMalloc (staging)");
    CUDA_CHECK(cudaMallocHost(&s->hstage, bytes), "cudaMallocHost (staging)");
    s->stage_bytes = bytes;
    return 0;
}

enum host_op { HOST_ALLREDUCE, HOST_BROADCAST };

/* A collective on host memory, finished before it returns: host -> pinned -> device, the
 * collective, device -> pinned on the comm stream; then the timed poll, then pinned -> host. */
static int host_collective(struct comm *c, enum host_op op, void *buf, size_t count,
                           ncclDataType_t type, size_t esize, int root, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    int64_t deadline = time_mono_ms() + c->opts.timeout_ms;
    size_t bytes = count * esize;
    const char *what = op == HOST_ALLREDUCE ? "all-reduce" : "broadcast";
    int ret;
    if (count == 0)
        return 0;
    if ((ret = stage_reserve(c, bytes, err)) < 0)
        return ret;
    memcpy(s->hstage, buf, bytes);
    CUDA_CHECK(cudaMemcpyAsync(s->dstage, s->hstage, bytes, cudaMemcpyHostToDevice, s->stream),
               "cudaMemcpyAsync (stage in)");
    ncclResult_t nr =
        op == HOST_ALLREDUCE
            ? ncclAllReduce(s->dstage, s->dstage, count, type, ncclSum, s->comm, s->stream)
            : ncclBroadcast(s->dstage, s->dstage, count, type, root, s->comm, s->stream);
    if ((ret = nccl_check(c, nr, what, deadline, err)) < 0)
        return ret;
    CUDA_CHECK(cudaMemcpyAsync(s->hstage, s->dstage, bytes, cudaMemcpyDeviceToHost, s->stream),
               "cudaMemcpyAsync (stage out)");
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    cudaError_t e = cudaEventRecord(done, s->stream);
    ret = e == cudaSuccess ? nccl_poll(c, done, what, deadline, err)
                           : cuda_fail(c, e, "cudaEventRecord", err);
    cudaEventDestroy(done);
    if (ret == 0)
        memcpy(buf, s->hstage, bytes);
    return ret;
}

/*
 * A reduce-scatter (reduce = 1) or all-gather on host memory, finished before it returns, like
 * host_collective: the full buffer of count * W elements is staged, the collective runs in
 * its in-place form on the device staging buffer (NCCL's in place: the shard at rank *
 * count), then the result goes back. NCCL runs the collective; this only moves bytes.
 */
static int host_sharded(struct comm *c, int reduce, const void *in, void *out, size_t count,
                        ncclDataType_t type, size_t esize, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    int64_t deadline = time_mono_ms() + c->opts.timeout_ms;
    size_t sb = count * esize, full = sb * (size_t)c->world_size;
    size_t own = (size_t)c->rank * sb;
    const char *what = reduce ? "reduce-scatter" : "all-gather";
    int ret;
    if (count == 0)
        return 0;
    if ((ret = stage_reserve(c, full, err)) < 0)
        return ret;
    char *h = s->hstage, *d = s->dstage;
    /* In: the whole buffer (reduce-scatter) or the own shard at its place (all-gather). */
    size_t in_off = reduce ? 0 : own, in_bytes = reduce ? full : sb;
    memcpy(h + in_off, in, in_bytes);
    CUDA_CHECK(cudaMemcpyAsync(d + in_off, h + in_off, in_bytes, cudaMemcpyHostToDevice, s->stream),
               "cudaMemcpyAsync (stage in)");
    ncclResult_t nr = reduce
                          ? ncclReduceScatter(d, d + own, count, type, ncclSum, s->comm, s->stream)
                          : ncclAllGather(d + own, d, count, type, s->comm, s->stream);
    if ((ret = nccl_check(c, nr, what, deadline, err)) < 0)
        return ret;
    size_t out_off = reduce ? own : 0, out_bytes = reduce ? sb : full;
    CUDA_CHECK(
        cudaMemcpyAsync(h + out_off, d + out_off, out_bytes, cudaMemcpyDeviceToHost, s->stream),
        "cudaMemcpyAsync (stage out)");
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    cudaError_t e = cudaEventRecord(done, s->stream);
    ret = e == cudaSuccess ? nccl_poll(c, done, what, deadline, err)
                           : cuda_fail(c, e, "cudaEventRecord", err);
    cudaEventDestroy(done);
    if (ret == 0)
        memcpy(out, h + out_off, out_bytes);
    return ret;
}

/* Orders the comm stream after the work queued so far on the compute stream. */
static int after_compute(struct comm *c, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    cudaEvent_t ready;
    CUDA_CHECK(cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), "cudaEventCreate");
    cudaError_t e = cudaEventRecord(ready, (cudaStream_t)gpu_stream());
    if (e == cudaSuccess)
        e = cudaStreamWaitEvent(s->stream, ready, 0);
    /* Legal while pending: the wait above has already captured the event. */
    cudaEventDestroy(ready);
    if (e != cudaSuccess)
        return cuda_fail(c, e, "ordering the comm stream after the compute stream", err);
    return 0;
}

/* Records the done event of a device collective just queued on the comm stream. */
static int record_done(struct comm *c, struct comm_work **out, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    cudaEvent_t done;
    CUDA_CHECK(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), "cudaEventCreate");
    cudaError_t e = cudaEventRecord(done, s->stream);
    if (e != cudaSuccess) {
        cudaEventDestroy(done);
        return cuda_fail(c, e, "cudaEventRecord", err);
    }
    struct comm_work *w = xcalloc(1, sizeof(*w));
    w->done = done;
    *out = w;
    return 0;
}

static int nccl_allreduce_async(struct comm *c, void *buf, size_t count, enum comm_dtype dt,
                                struct comm_work **out, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    if (s->failed)
        return err_set(err, s->failed, "%s", s->why);
    size_t esize = dt == COMM_F64 ? sizeof(double) : sizeof(float);
    ncclDataType_t type = dt == COMM_F64 ? ncclFloat64 : ncclFloat32;
    int ret;
    if (count > 0 && !gpu_is_device_ptr(buf)) {
        if ((ret = host_collective(c, HOST_ALLREDUCE, buf, count, type, esize, 0, err)) < 0)
            return ret;
        *out = xcalloc(1, sizeof(**out)); /* done: nothing to wait for */
        return 0;
    }
    int64_t deadline = time_mono_ms() + c->opts.timeout_ms;
    /* The gradients are written by kernels queued on the compute stream. */
    if ((ret = after_compute(c, err)) < 0)
        return ret;
    if (count > 0 &&
        (ret = nccl_check(c, ncclAllReduce(buf, buf, count, type, ncclSum, s->comm, s->stream),
                          "all-reduce", deadline, err)) < 0)
        return ret;
    return record_done(c, out, err);
}

/* Reduce-scatter (reduce = 1) or all-gather, async like the all-reduce: device buffers on the
 * comm stream after the compute stream's work, host buffers staged and finished at once. */
static int nccl_sharded_async(struct comm *c, int reduce, const void *in, void *out, size_t count,
                              enum comm_dtype dt, struct comm_work **out_work, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    if (s->failed)
        return err_set(err, s->failed, "%s", s->why);
    size_t esize = dt == COMM_F64 ? sizeof(double) : sizeof(float);
    ncclDataType_t type = dt == COMM_F64 ? ncclFloat64 : ncclFloat32;
    int ret;
    if (count > 0 && (!gpu_is_device_ptr(in) || !gpu_is_device_ptr(out))) {
        if (gpu_is_device_ptr(in) || gpu_is_device_ptr(out))
            return err_set(err, DDP_EINVAL,
                           "nccl: %s of one host and one device buffer: give both on one side",
                           reduce ? "reduce-scatter" : "all-gather");
        if ((ret = host_sharded(c, reduce, in, out, count, type, esize, err)) < 0)
            return ret;
        *out_work = xcalloc(1, sizeof(**out_work)); /* done: nothing to wait for */
        return 0;
    }
    int64_t deadline = time_mono_ms() + c->opts.timeout_ms;
    if ((ret = after_compute(c, err)) < 0)
        return ret;
    if (count > 0) {
        ncclResult_t nr = reduce
                              ? ncclReduceScatter(in, out, count, type, ncclSum, s->comm, s->stream)
                              : ncclAllGather(in, out, count, type, s->comm, s->stream);
        if ((ret = nccl_check(c, nr, reduce ? "reduce-scatter" : "all-gather", deadline, err)) < 0)
            return ret;
    }
    return record_done(c, out_work, err);
}

static int nccl_reduce_scatter_async(struct comm *c, const void *in, void *out, size_t count,
                                     enum comm_dtype dt, struct comm_work **out_work,
                                     struct ddp_err *err)
{
    return nccl_sharded_async(c, 1, in, out, count, dt, out_work, err);
}

static int nccl_allgather_async(struct comm *c, const void *in, void *out, size_t count,
                                enum comm_dtype dt, struct comm_work **out_work,
                                struct ddp_err *err)
{
    return nccl_sharded_async(c, 0, in, out, count, dt, out_work, err);
}

static int nccl_wait(struct comm *c, struct comm_work *w, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    int ret = 0;
    if (w->done) {
        int64_t deadline = time_mono_ms() + c->opts.timeout_ms;
        ret = nccl_poll(c, w->done, "collective", deadline, err);
        /* The optimizer (compute stream) runs after the all-reduce. The host saw it finish
         * already; this keeps the order explicit for the stream. */
        if (ret == 0) {
            cudaError_t e = cudaStreamWaitEvent((cudaStream_t)gpu_stream(), w->done, 0);
            if (e != cudaSuccess)
                ret = cuda_fail(c, e, "cudaStreamWaitEvent", err);
        }
        cudaEventDestroy(w->done);
    } else if (s->failed) {
        ret = err_set(err, s->failed, "%s", s->why);
    }
    free(w);
    return ret;
}

static int nccl_broadcast(struct comm *c, void *buf, size_t bytes, int root, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    if (s->failed)
        return err_set(err, s->failed, "%s", s->why);
    if (bytes == 0)
        return 0;
    if (!gpu_is_device_ptr(buf))
        return host_collective(c, HOST_BROADCAST, buf, bytes, ncclChar, 1, root, err);
    int64_t deadline = time_mono_ms() + c->opts.timeout_ms;
    int ret;
    if ((ret = after_compute(c, err)) < 0)
        return ret;
    if ((ret = nccl_check(c, ncclBroadcast(buf, buf, bytes, ncclChar, root, s->comm, s->stream),
                          "broadcast", deadline, err)) < 0)
        return ret;
    struct comm_work *w = NULL;
    if ((ret = record_done(c, &w, err)) < 0)
        return ret;
    return nccl_wait(c, w, err);
}

static int nccl_barrier(struct comm *c, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    if (s->failed)
        return err_set(err, s->failed, "%s", s->why);
    float one = 1.0f;
    return host_collective(c, HOST_ALLREDUCE, &one, 1, ncclFloat32, sizeof(float), 0, err);
}

static void nccl_destroy(struct comm *c)
{
    struct nccl_state *s = st_of(c);
    if (!s)
        return;
    if (s->comm) {
        /* ncclCommDestroy on a communicator that was not finalized finalizes it first and
         * blocks, unbounded, on work that may never end. Finalize (non-blocking here) under
         * the timeout, then free; abort when it does not settle. */
        int ok = 0;
        if (!s->failed) {
            int64_t deadline = time_mono_ms() + c->opts.timeout_ms;
            ncclResult_t r = ncclCommFinalize(s->comm);
            ok = r == ncclSuccess || r == ncclInProgress;
            while (ok) {
                ncclResult_t async = ncclSuccess;
                if (ncclCommGetAsyncError(s->comm, &async) != ncclSuccess ||
                    (async != ncclSuccess && async != ncclInProgress))
                    ok = 0;
                else if (async == ncclSuccess)
                    break;
                else if (time_mono_ms() > deadline)
                    ok = 0;
                else
                    usleep(100);
            }
            if (!ok)
                log_warn("nccl: the communicator did not finalize within the timeout: "
                         "aborting it");
        }
        if (ok)
            (void)ncclCommDestroy(s->comm); /* finalized: frees local resources only */
        else
            ncclCommAbort(s->comm);
        s->comm = NULL;
    }
    if (s->stream)
        cudaStreamDestroy(s->stream);
    if (s->dstage)
        cudaFree(s->dstage);
    if (s->hstage)
        cudaFreeHost(s->hstage);
    free(s);
    c->impl = NULL;
}

const struct comm_ops comm_nccl_ops = {
    .name = "nccl",
    .init = nccl_init,
    .allreduce_async = nccl_allreduce_async,
    .wait = nccl_wait,
    .broadcast = nccl_broadcast,
    .barrier = nccl_barrier,
    .destroy = nccl_destroy,
    .reduce_scatter_async = nccl_reduce_scatter_async,
    .allgather_async = nccl_allgather_async,
};
