/*
 * comm_nccl.c - the NCCL backend of comm.h: collectives on GPU memory over NCCL.
 *
 * Ordering: every all-reduce runs on this backend's own comm stream. At issue time an event
 * is recorded on the compute stream (gpu_stream()) and the comm stream waits on it, so the
 * all-reduce reads the gradients only after the kernels that wrote them, while the compute
 * stream goes on with the rest of the backward (the overlap). comm_wait() makes the compute
 * stream wait on the all-reduce's done event, so the optimizer step runs after it.
 *
 * Host buffers (the loss sums, the checkpoint epoch, ...) are staged through a device
 * scratch buffer, so callers can hand this backend host memory as they would the CPU one.
 *
 * Faults: the communicator is created non-blocking. Every wait polls the done event and
 * ncclCommGetAsyncError under the comm's timeout; an NCCL error or the timeout aborts the
 * communicator (ncclCommAbort) and turns this and every later call into DDP_EPEER /
 * DDP_ETIMEOUT, which the worker reports with the "peer lost" exit code, so the job
 * re-forms instead of hanging.
 */
#include <cuda_runtime_api.h>
#include <nccl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "worker/comm_internal.h"
#include "worker/gpu/gpu.h"

struct nccl_state {
    ncclComm_t comm;
    cudaStream_t stream;
    void *scratch; /* device staging for host buffers */
    size_t scratch_bytes;
    int failed;    /* a DDP_E* code once the comm broke, else 0 */
    char why[256];
};

struct comm_work {
    cudaEvent_t done;
    void *host;    /* staged host buffer to copy back into, or NULL */
    void *dev;
    size_t bytes;
};

int comm_nccl_available(void)
{
    return gpu_count(NULL) > 0;
}

static struct nccl_state *st_of(struct comm *c)
{
    return c->impl;
}

static int nccl_fail(struct comm *c, int code, struct ddp_err *err, const char *fmt,
                     const char *detail)
{
    struct nccl_state *s = st_of(c);
    if (!s->failed) {
        s->failed = code;
        snprintf(s->why, sizeof(s->why), fmt, detail);
        if (s->comm)
            ncclCommAbort(s->comm);
        s->comm = NULL;
    }
    return err_set(err, s->failed, "%s", s->why);
}

/* Waits while the non-blocking communicator reports ncclInProgress. */
static int nccl_settle(struct comm *c, int64_t deadline, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    for (;;) {
        ncclResult_t async = ncclSuccess;
        ncclResult_t r = ncclCommGetAsyncError(s->comm, &async);
        if (r != ncclSuccess)
            return nccl_fail(c, DDP_EPEER, err, "NCCL error: %s", ncclGetErrorString(r));
        if (async == ncclSuccess)
            return 0;
        if (async != ncclInProgress)
            return nccl_fail(c, DDP_EPEER, err, "peer lost: NCCL error %s",
                             ncclGetErrorString(async));
        if (time_mono_ms() > deadline)
            return nccl_fail(c, DDP_ETIMEOUT, err, "%s",
                             "peer lost: NCCL did not finish within the collective timeout");
        usleep(100);
    }
}

static int nccl_check(struct comm *c, ncclResult_t r, int64_t deadline, struct ddp_err *err)
{
    if (r == ncclSuccess || r == ncclInProgress)
        return nccl_settle(c, deadline, err);
    return nccl_fail(c, DDP_EPEER, err, "NCCL error: %s", ncclGetErrorString(r));
}

static int cuda_check(struct comm *c, cudaError_t e, struct ddp_err *err)
{
    if (e == cudaSuccess)
        return 0;
    return nccl_fail(c, DDP_EINTERNAL, err, "CUDA error: %s", cudaGetErrorString(e));
}

/* Refuses two ranks on one GPU of one host before NCCL does so less clearly. */
static int nccl_check_devices(struct comm *c, struct rdzv *r, uint64_t id, int64_t deadline,
                              struct ddp_err *err)
{
    char mine[256], host[128], bus[64], key[96];
    if (gethostname(host, sizeof(host)) != 0)
        snprintf(host, sizeof(host), "unknown");
    host[sizeof(host) - 1] = '\0';
    if (cudaDeviceGetPCIBusId(bus, sizeof(bus), gpu_device()) != cudaSuccess)
        snprintf(bus, sizeof(bus), "device %d", gpu_device());
    int n = snprintf(mine, sizeof(mine), "%s/%s", host, bus);
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
                          peer < c->rank ? peer : c->rank, peer < c->rank ? c->rank : peer,
                          bus, host);
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
    if ((ret = cuda_check(c, cudaStreamCreateWithFlags(&s->stream, cudaStreamNonBlocking),
                          err)) < 0)
        return ret;
    ncclUniqueId uid;
    uint64_t id = r ? rdzv_next_id(r) : 0;
    if (c->world_size > 1) {
        if ((ret = nccl_check_devices(c, r, id, deadline, err)) < 0)
            return ret;
        char key[64];
        snprintf(key, sizeof(key), "c%llu/nccl/uid", (unsigned long long)id);
        if (c->rank == 0) {
            ncclResult_t nr = ncclGetUniqueId(&uid);
            if (nr != ncclSuccess)
                return err_set(err, DDP_EINTERNAL, "ncclGetUniqueId: %s",
                               ncclGetErrorString(nr));
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
                return err_set(err, DDP_EINTERNAL, "NCCL unique id of %zu bytes", len);
            }
            memcpy(&uid, v, sizeof(uid));
            free(v);
        }
    } else if (ncclGetUniqueId(&uid) != ncclSuccess) {
        return err_set(err, DDP_EINTERNAL, "ncclGetUniqueId failed");
    }
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    cfg.blocking = 0;
    ncclResult_t nr = ncclCommInitRankConfig(&s->comm, c->world_size, uid, c->rank, &cfg);
    if (nr != ncclSuccess && nr != ncclInProgress) {
        if (nr == ncclInvalidUsage)
            return err_set(err, DDP_EINVAL, "ncclCommInitRank: %s (two ranks on one GPU?)",
                           ncclGetErrorString(nr));
        return err_set(err, DDP_EPEER, "ncclCommInitRank: %s", ncclGetErrorString(nr));
    }
    if ((ret = nccl_settle(c, deadline, err)) < 0)
        return ret;
    log_info("nccl communicator ready rank=%d world=%d device=%d", c->rank, c->world_size,
             gpu_device());
    return 0;
}

static int stage_in(struct comm *c, void *buf, size_t bytes, void **dev, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    if (gpu_is_device_ptr(buf)) {
        *dev = buf;
        return 0;
    }
    if (bytes > s->scratch_bytes) {
        gpu_free(s->scratch);
        s->scratch = NULL;
        s->scratch_bytes = 0;
        int ret = gpu_alloc(&s->scratch, bytes, err);
        if (ret < 0)
            return ret;
        s->scratch_bytes = bytes;
    }
    *dev = s->scratch;
    return cuda_check(c, cudaMemcpyAsync(s->scratch, buf, bytes, cudaMemcpyHostToDevice,
                                         s->stream), err);
}

static int nccl_allreduce_async(struct comm *c, void *buf, size_t count, enum comm_dtype dt,
                                struct comm_work **out, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    if (s->failed)
        return err_set(err, s->failed, "%s", s->why);
    int64_t deadline = time_mono_ms() + c->opts.timeout_ms;
    size_t esize = dt == COMM_F64 ? sizeof(double) : sizeof(float);
    struct comm_work *w = xcalloc(1, sizeof(*w));
    int ret;
    cudaEvent_t ready;
    if ((ret = cuda_check(c, cudaEventCreateWithFlags(&ready, cudaEventDisableTiming), err)) < 0)
        goto fail;
    /* The gradients are written by kernels queued on the compute stream. */
    ret = cuda_check(c, cudaEventRecord(ready, (cudaStream_t)gpu_stream()), err);
    if (ret == 0)
        ret = cuda_check(c, cudaStreamWaitEvent(s->stream, ready, 0), err);
    cudaEventDestroy(ready);
    if (ret < 0)
        goto fail;
    if ((ret = stage_in(c, buf, count * esize, &w->dev, err)) < 0)
        goto fail;
    if (w->dev != buf) {
        w->host = buf;
        w->bytes = count * esize;
    }
    if (count > 0 && (ret = nccl_check(c, ncclAllReduce(w->dev, w->dev, count,
                                                        dt == COMM_F64 ? ncclFloat64
                                                                       : ncclFloat32,
                                                        ncclSum, s->comm, s->stream),
                                       deadline, err)) < 0)
        goto fail;
    if (w->host && (ret = cuda_check(c, cudaMemcpyAsync(w->host, w->dev, w->bytes,
                                                         cudaMemcpyDeviceToHost, s->stream),
                                     err)) < 0)
        goto fail;
    if ((ret = cuda_check(c, cudaEventCreateWithFlags(&w->done, cudaEventDisableTiming), err)) <
        0)
        goto fail;
    if ((ret = cuda_check(c, cudaEventRecord(w->done, s->stream), err)) < 0) {
        cudaEventDestroy(w->done);
        goto fail;
    }
    *out = w;
    return 0;
fail:
    free(w);
    return ret;
}

static int nccl_wait(struct comm *c, struct comm_work *w, struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    int ret = 0;
    int64_t deadline = time_mono_ms() + c->opts.timeout_ms;
    for (int spins = 0; !s->failed; spins++) {
        cudaError_t e = cudaEventQuery(w->done);
        if (e == cudaSuccess)
            break;
        if (e != cudaErrorNotReady) {
            ret = cuda_check(c, e, err);
            break;
        }
        ncclResult_t async = ncclSuccess;
        if (ncclCommGetAsyncError(s->comm, &async) != ncclSuccess ||
            (async != ncclSuccess && async != ncclInProgress)) {
            ret = nccl_fail(c, DDP_EPEER, err, "peer lost: NCCL error %s",
                            ncclGetErrorString(async));
            break;
        }
        if (time_mono_ms() > deadline) {
            ret = nccl_fail(c, DDP_ETIMEOUT, err, "%s",
                            "peer lost: all-reduce did not finish within the collective timeout");
            break;
        }
        if (spins > 1000)
            usleep(50);
    }
    if (s->failed && ret == 0)
        ret = err_set(err, s->failed, "%s", s->why);
    if (ret == 0)
        ret = cuda_check(c, cudaStreamWaitEvent((cudaStream_t)gpu_stream(), w->done, 0), err);
    cudaEventDestroy(w->done);
    free(w);
    return ret;
}

static int nccl_broadcast(struct comm *c, void *buf, size_t bytes, int root,
                          struct ddp_err *err)
{
    struct nccl_state *s = st_of(c);
    if (s->failed)
        return err_set(err, s->failed, "%s", s->why);
    int64_t deadline = time_mono_ms() + c->opts.timeout_ms;
    int ret;
    void *dev = NULL;
    if ((ret = cuda_check(c, cudaStreamSynchronize((cudaStream_t)gpu_stream()), err)) < 0)
        return ret;
    if ((ret = stage_in(c, buf, bytes, &dev, err)) < 0)
        return ret;
    if (bytes > 0 && (ret = nccl_check(c, ncclBroadcast(dev, dev, bytes, ncclChar, root,
                                                       s->comm, s->stream),
                                       deadline, err)) < 0)
        return ret;
    if (dev != buf && (ret = cuda_check(c, cudaMemcpyAsync(buf, dev, bytes,
                                                           cudaMemcpyDeviceToHost, s->stream),
                                        err)) < 0)
        return ret;
    cudaEvent_t done;
    if ((ret = cuda_check(c, cudaEventCreateWithFlags(&done, cudaEventDisableTiming), err)) < 0)
        return ret;
    if ((ret = cuda_check(c, cudaEventRecord(done, s->stream), err)) < 0) {
        cudaEventDestroy(done);
        return ret;
    }
    struct comm_work *pw = xcalloc(1, sizeof(*pw));
    pw->done = done;
    return nccl_wait(c, pw, err);
}

static int nccl_barrier(struct comm *c, struct ddp_err *err)
{
    float one = 1.0f;
    struct comm_work *w = NULL;
    int ret = nccl_allreduce_async(c, &one, 1, COMM_F32, &w, err);
    if (ret < 0)
        return ret;
    return nccl_wait(c, w, err);
}

static void nccl_destroy(struct comm *c)
{
    struct nccl_state *s = st_of(c);
    if (!s)
        return;
    if (s->comm) {
        if (s->failed)
            ncclCommAbort(s->comm);
        else if (ncclCommDestroy(s->comm) != ncclSuccess)
            ncclCommAbort(s->comm);
    }
    if (s->stream)
        cudaStreamDestroy(s->stream);
    gpu_free(s->scratch);
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
};
