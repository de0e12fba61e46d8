/*
 * gpu_runtime.cu - the CUDA runtime half of libddp behind gpu.h: device choice, the one
 * compute stream, device memory, copies, and gpu_scale (the reducer's averaging). Built into
 * libddpgpu.so with the NCCL backend; a training program's own kernels (ddp-worker's MLP)
 * live in the program's own GPU library and queue their work on gpu_stream().
 *
 * Invariants:
 *  1. gpu_dev >= 0 exactly when gpu_init() succeeded and gpu_shutdown() has not run since;
 *     then gpu_compute_stream is a live non-blocking stream on that device.
 *  2. Everything here that queues work queues it on gpu_compute_stream (before gpu_init that
 *     is 0, the legacy stream), so work is ordered the way it was queued.
 *  3. No cuBLAS here: the runtime needs none, and a process that maps libddpgpu.so does not
 *     map cuBLAS for it (whoever multiplies matrices owns its handle).
 */
#include <cuda_runtime.h>
#include <stdio.h>

extern "C" {
#include "common/err.h"
}
#include "ddp/cuda_check.h"
#include "ddp/gpu.h"

static cudaStream_t gpu_compute_stream;
static int gpu_dev = -1;

extern "C" int gpu_count(const char **why)
{
    /* The reason outlives the call (callers print it later); one process counts GPUs from
     * one thread at a time (ddp.c's pick_device, the tests' main). */
    static char why_buf[192];
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess) {
        snprintf(why_buf, sizeof(why_buf), "%s (CUDA runtime %d: %s: %s)",
                 e == cudaErrorNoDevice             ? "no CUDA device visible"
                 : e == cudaErrorInsufficientDriver ? "NVIDIA driver missing or older than "
                                                      "the CUDA runtime"
                                                    : "CUDA unavailable",
                 CUDART_VERSION, cudaGetErrorName(e), cudaGetErrorString(e));
        if (why)
            *why = why_buf;
        (void)cudaGetLastError();
        return 0;
    }
    if (n == 0 && why)
        *why = "no CUDA device visible";
    return n;
}

extern "C" int gpu_init(int device, struct ddp_err *err)
{
    if (gpu_dev >= 0) {
        if (device == gpu_dev)
            return 0;
        return err_set(err, DDP_EINTERNAL, "gpu_init: GPU %d is already in use, not GPU %d",
                       gpu_dev, device);
    }
    const char *why = NULL;
    int n = gpu_count(&why);
    if (n == 0)
        return err_set(err, DDP_EINVAL, "no GPU: %s", why ? why : "none found");
    if (device < 0 || device >= n)
        return err_set(err, DDP_EINVAL,
                       "GPU %d does not exist: %d visible (LOCAL_RANK picks the GPU; run at most "
                       "%d processes per node)",
                       device, n, n);
    /* First CUDA call that touches a device in this process: everything after it (the
     * stream, a cuBLAS handle made later, NCCL's communicator) belongs to this device. */
    CUDA_TRY(cudaSetDevice(device));
    cudaError_t e = cudaStreamCreateWithFlags(&gpu_compute_stream, cudaStreamNonBlocking);
    if (e != cudaSuccess) {
        gpu_compute_stream = NULL;
        return err_set(err, DDP_EINTERNAL, "%s:%d: cuda error %s: %s (GPU %d)", __FILE__, __LINE__,
                       cudaGetErrorName(e), cudaGetErrorString(e), device);
    }
    gpu_dev = device;
    return 0;
}

extern "C" void gpu_shutdown(void)
{
    if (gpu_compute_stream)
        cudaStreamDestroy(gpu_compute_stream);
    gpu_compute_stream = NULL;
    gpu_dev = -1;
}

extern "C" int gpu_device(void)
{
    return gpu_dev;
}

extern "C" void *gpu_stream(void)
{
    return (void *)gpu_compute_stream;
}

extern "C" int gpu_alloc(void **p, size_t bytes, struct ddp_err *err)
{
    void *q = NULL;
    size_t sz = bytes ? bytes : 1;
    CUDA_TRY(cudaMalloc(&q, sz));
    /* Zeroed on the compute stream and waited for: a plain cudaMemset runs on the legacy
     * default stream, which the compute stream (cudaStreamNonBlocking) is not ordered after,
     * so a copy or kernel queued next on the compute stream could run before the zeroing.
     * Before gpu_init the stream is 0 (the legacy stream) and this still holds. */
    cudaError_t e = cudaMemsetAsync(q, 0, sz, gpu_compute_stream);
    if (e == cudaSuccess)
        e = cudaStreamSynchronize(gpu_compute_stream);
    if (e != cudaSuccess) {
        cudaFree(q);
        CUDA_TRY(e);
    }
    *p = q;
    return 0;
}

extern "C" void gpu_free(void *p)
{
    if (p)
        cudaFree(p);
}

extern "C" int gpu_to_device(void *dst, const void *src, size_t bytes, struct ddp_err *err)
{
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyHostToDevice, gpu_compute_stream));
    CUDA_TRY(cudaStreamSynchronize(gpu_compute_stream));
    return 0;
}

extern "C" int gpu_to_host(void *dst, const void *src, size_t bytes, struct ddp_err *err)
{
    CUDA_TRY(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDeviceToHost, gpu_compute_stream));
    CUDA_TRY(cudaStreamSynchronize(gpu_compute_stream));
    return 0;
}

extern "C" int gpu_sync(struct ddp_err *err)
{
    CUDA_TRY(cudaStreamSynchronize(gpu_compute_stream));
    return 0;
}

extern "C" int gpu_is_device_ptr(const void *p)
{
    cudaPointerAttributes a;
    if (cudaPointerGetAttributes(&a, p) != cudaSuccess) {
        (void)cudaGetLastError();
        return 0;
    }
    return a.type == cudaMemoryTypeDevice || a.type == cudaMemoryTypeManaged;
}

/* ---- the reducer's averaging ------------------------------------------------------------ */

/* Grid-stride, so any n is covered whatever cuda_blocks() caps the grid at. */
__global__ void k_scale(float *x, size_t n, float s)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x)
        x[i] *= s;
}

extern "C" int gpu_scale(float *x, size_t n, float s, struct ddp_err *err)
{
    k_scale<<<cuda_blocks(n, 256), 256, 0, gpu_compute_stream>>>(x, n, s);
    LAUNCH_TRY();
    return 0;
}
