/*
 * mlp_kernels.cu - the MLP's kernels and cuBLAS products behind mlp_kernels.h (linear layers,
 * softmax cross-entropy, arg-max hits, SGD), for trainer/gpu/model_gpu.c. Built into
 * libddptrainergpu.so; the runtime it runs on (device, compute stream, memory, copies) is
 * libddp's (ddp/gpu.h), reached through the program's exported forwarders.
 *
 * Matrices are row-major, as in the CPU model. cuBLAS is column-major, so a row-major
 * [r x c] matrix is used as its column-major transpose [c x r] with leading dimension c,
 * and each product is written for the transposes (the formula is above each call).
 * Reductions that feed the loss or the accuracy are finished on the host in row order, like
 * the CPU model, so both paths add in the same order.
 *
 * Invariants:
 *  1. mlp_users counts the successful mlp_kernels_acquire() calls not yet released; the
 *     cuBLAS handle (mlp_blas) and the scratch below exist only while it is > 0, and the last
 *     release frees them.
 *  2. mlp_blas is bound to gpu_stream() as it was at acquire time, in pedantic FP32 (no TF32,
 *     no BF16x9 emulation), so every product runs on the compute stream in queue order and
 *     agrees with the CPU model to 1e-4; gpu_shutdown() must not run while a user holds it.
 *  3. One compute stream per process, used from one thread: the scratch is not shared.
 */
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <stdio.h>
#include <stdlib.h>

extern "C" {
#include "common/err.h"
#include "common/xalloc.h"
}
#include "ddp/cuda_check.h"
#include "ddp/gpu.h"
#include "trainer/gpu/mlp_kernels.h"

static int mlp_users;
static cublasHandle_t mlp_blas;
/* Device scratch for the per-row losses and the hit count, kept between steps so a step
 * allocates nothing. */
static double *xent_rows;
static size_t xent_cap;
static double *xent_host;
static unsigned long long *hits_dev;

/* The compute stream of libddp's runtime (ddp/gpu.h): every launch here goes on it. */
#define MLP_STREAM ((cudaStream_t)gpu_stream())

#define BLAS_TRY(call)                                                                           \
    do {                                                                                         \
        cublasStatus_t s_ = (call);                                                              \
        if (s_ != CUBLAS_STATUS_SUCCESS)                                                         \
            return err_set(err, DDP_EINTERNAL, "%s:%d: cublas error %s: %s", __FILE__, __LINE__, \
                           cublasGetStatusName(s_), cublasGetStatusString(s_));                  \
    } while (0)

/* ---- the handle and the scratch ----------------------------------------------------------- */

extern "C" int mlp_kernels_acquire(struct ddp_err *err)
{
    if (mlp_users > 0) {
        mlp_users++;
        return 0;
    }
    cublasHandle_t h = NULL;
    cublasStatus_t b = cublasCreate(&h);
    if (b == CUBLAS_STATUS_SUCCESS)
        b = cublasSetStream(h, MLP_STREAM);
    /* Plain FP32 products (no TF32, no BF16x9 emulation), so the GPU path agrees with the
     * CPU path to 1e-4. */
    if (b == CUBLAS_STATUS_SUCCESS)
        b = cublasSetMathMode(h, CUBLAS_PEDANTIC_MATH);
    if (b != CUBLAS_STATUS_SUCCESS) {
        int rc = err_set(err, DDP_EINTERNAL, "%s:%d: cublas error %s: %s (GPU %d)", __FILE__,
                         __LINE__, cublasGetStatusName(b), cublasGetStatusString(b), gpu_device());
        if (h)
            cublasDestroy(h);
        return rc;
    }
    mlp_blas = h;
    mlp_users = 1;
    return 0;
}

extern "C" void mlp_kernels_release(void)
{
    if (mlp_users == 0 || --mlp_users > 0)
        return;
    gpu_free(xent_rows);
    gpu_free(hits_dev);
    free(xent_host);
    xent_rows = NULL;
    hits_dev = NULL;
    xent_host = NULL;
    xent_cap = 0;
    cublasDestroy(mlp_blas);
    mlp_blas = NULL;
}

/* ---- kernels --------------------------------------------------------------------------------- */

/* Every kernel below strides over its range (grid-stride), so any n is covered whatever
 * cuda_blocks() caps the grid at. Where a result must equal the CPU model's bit for bit
 * (softmax gradient, SGD), products and sums are written with __fmul_rn/__fadd_rn: nvcc
 * would otherwise contract a * b + c into one FMA (one rounding instead of two), which the
 * CPU build (ISO C, no -ffp-contract) never does. */

__global__ void k_bias_relu(float *z, const float *b, size_t rows, int cols, int relu)
{
    size_t total = rows * (size_t)cols;
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < total;
         i += (size_t)blockDim.x * gridDim.x) {
        float v = z[i] + b[i % (size_t)cols];
        /* As the CPU model: v > 0 ? v : 0 (so -0.0 and NaN become +0.0 there too). */
        z[i] = !relu || v > 0.0f ? v : 0.0f;
    }
}

/* db[j] = sum over rows of dz[r][j], rows in order (one thread per column). */
__global__ void k_colsum(const float *dz, float *db, int rows, int cols)
{
    for (int j = blockIdx.x * blockDim.x + threadIdx.x; j < cols; j += blockDim.x * gridDim.x) {
        float s = 0.0f;
        for (int r = 0; r < rows; r++)
            s = __fadd_rn(s, dz[(size_t)r * cols + j]);
        db[j] = s;
    }
}

__global__ void k_relu_mask(float *dx, const float *act, size_t n)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x)
        if (act[i] <= 0.0f)
            dx[i] = 0.0f;
}

/* One thread per row: stable softmax, the row's loss, and dz = (prob - onehot) / n, in the
 * CPU model's order: dz = prob * (1/n), then dz[label] -= 1/n. prob may be logits (in
 * place): each element is read before it is written, by the same thread. */
__global__ void k_softmax_xent(const float *logits, const uint8_t *y, float *prob, float *dz,
                               double *row_loss, int n, int classes)
{
    float inv = 1.0f / (float)n;
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < n; r += blockDim.x * gridDim.x) {
        const float *z = logits + (size_t)r * classes;
        int label = y[r];
        float mx = z[0];
        for (int c = 1; c < classes; c++)
            mx = z[c] > mx ? z[c] : mx;
        double s = 0.0;
        for (int c = 0; c < classes; c++)
            s += exp((double)(z[c] - mx));
        double lse = (double)mx + log(s);
        row_loss[r] = lse - (double)z[label];
        for (int c = 0; c < classes; c++) {
            float p = (float)exp((double)z[c] - lse);
            float d = __fmul_rn(p, inv);
            prob[(size_t)r * classes + c] = p;
            dz[(size_t)r * classes + c] = c == label ? __fsub_rn(d, inv) : d;
        }
    }
}

__global__ void k_argmax_hits(const float *z, const uint8_t *y, int n, int classes,
                              unsigned long long *hits)
{
    for (int r = blockIdx.x * blockDim.x + threadIdx.x; r < n; r += blockDim.x * gridDim.x) {
        const float *row = z + (size_t)r * classes;
        int best = 0;
        for (int c = 1; c < classes; c++)
            if (row[c] > row[best])
                best = c;
        if (best == y[r])
            atomicAdd(hits, 1ULL);
    }
}

/* trainer/optim.c's step: d = g + wd p; buf = mu buf + d; p -= lr buf (each product and sum
 * rounded on its own, as there). */
__global__ void k_sgd(float *p, const float *g, float *buf, size_t n, float lr, float mu, float wd)
{
    for (size_t i = blockIdx.x * (size_t)blockDim.x + threadIdx.x; i < n;
         i += (size_t)blockDim.x * gridDim.x) {
        float d = __fadd_rn(g[i], __fmul_rn(wd, p[i]));
        float b = __fadd_rn(__fmul_rn(mu, buf[i]), d);
        buf[i] = b;
        p[i] = __fsub_rn(p[i], __fmul_rn(lr, b));
    }
}

/* ---- the MLP pieces -------------------------------------------------------------------- */

extern "C" int gpu_linear_forward(const float *x, const float *w, const float *b, float *z, int n,
                                  int in, int out, int relu, struct ddp_err *err)
{
    const float one = 1.0f, zero = 0.0f;
    /* z^T [out x n] = W [out x in] x^T [in x n]; W's memory is W^T col-major (ld in). */
    BLAS_TRY(cublasSgemm(mlp_blas, CUBLAS_OP_T, CUBLAS_OP_N, out, n, in, &one, w, in, x, in, &zero,
                         z, out));
    size_t total = (size_t)n * (size_t)out;
    k_bias_relu<<<cuda_blocks(total, 256), 256, 0, MLP_STREAM>>>(z, b, (size_t)n, out, relu);
    LAUNCH_TRY();
    return 0;
}

extern "C" int gpu_linear_backward_params(const float *dz, const float *x, float *dw, float *db,
                                          int n, int in, int out, struct ddp_err *err)
{
    const float one = 1.0f, zero = 0.0f;
    /* dW^T [in x out] = x^T [in x n] dz [n x out]; dz's memory is dz^T col-major (ld out). */
    BLAS_TRY(cublasSgemm(mlp_blas, CUBLAS_OP_N, CUBLAS_OP_T, in, out, n, &one, x, in, dz, out,
                         &zero, dw, in));
    k_colsum<<<cuda_blocks((size_t)out, 128), 128, 0, MLP_STREAM>>>(dz, db, n, out);
    LAUNCH_TRY();
    return 0;
}

extern "C" int gpu_linear_backward_input(const float *dz, const float *w, const float *act,
                                         float *dx, int n, int in, int out, struct ddp_err *err)
{
    const float one = 1.0f, zero = 0.0f;
    /* dx^T [in x n] = W^T [in x out] dz^T [out x n]. */
    BLAS_TRY(cublasSgemm(mlp_blas, CUBLAS_OP_N, CUBLAS_OP_N, in, n, out, &one, w, in, dz, out,
                         &zero, dx, in));
    size_t total = (size_t)n * (size_t)in;
    k_relu_mask<<<cuda_blocks(total, 256), 256, 0, MLP_STREAM>>>(dx, act, total);
    LAUNCH_TRY();
    return 0;
}

static int xent_reserve(int n, struct ddp_err *err)
{
    if ((size_t)n <= xent_cap)
        return 0;
    gpu_free(xent_rows);
    xent_rows = NULL;
    xent_cap = 0;
    int rc = gpu_alloc((void **)&xent_rows, (size_t)n * sizeof(double), err);
    if (rc)
        return rc;
    xent_host = (double *)xrealloc(xent_host, (size_t)n * sizeof(double));
    xent_cap = (size_t)n;
    return 0;
}

extern "C" int gpu_softmax_xent(const float *logits, const uint8_t *y, float *prob, float *dz,
                                int n, int classes, double *loss_sum, struct ddp_err *err)
{
    int rc = xent_reserve(n, err);
    if (rc)
        return rc;
    k_softmax_xent<<<cuda_blocks((size_t)n, 128), 128, 0, MLP_STREAM>>>(logits, y, prob, dz,
                                                                        xent_rows, n, classes);
    LAUNCH_TRY();
    rc = gpu_to_host(xent_host, xent_rows, (size_t)n * sizeof(double), err);
    if (rc)
        return rc;
    double s = 0.0;
    for (int r = 0; r < n; r++)
        s += xent_host[r]; /* in row order, like the CPU model */
    *loss_sum = s;
    return 0;
}

extern "C" int gpu_count_correct(const float *logits, const uint8_t *y, int n, int classes,
                                 size_t *correct, struct ddp_err *err)
{
    unsigned long long host = 0;
    if (!hits_dev) {
        int rc = gpu_alloc((void **)&hits_dev, sizeof(*hits_dev), err);
        if (rc)
            return rc;
    }
    CUDA_TRY(cudaMemsetAsync(hits_dev, 0, sizeof(*hits_dev), MLP_STREAM));
    k_argmax_hits<<<cuda_blocks((size_t)n, 128), 128, 0, MLP_STREAM>>>(logits, y, n, classes,
                                                                       hits_dev);
    LAUNCH_TRY();
    int rc = gpu_to_host(&host, hits_dev, sizeof(host), err);
    if (rc == 0)
        *correct = (size_t)host;
    return rc;
}

extern "C" int gpu_sgd(float *p, const float *g, float *buf, size_t n, float lr, float mu, float wd,
                       struct ddp_err *err)
{
    k_sgd<<<cuda_blocks(n, 256), 256, 0, MLP_STREAM>>>(p, g, buf, n, lr, mu, wd);
    LAUNCH_TRY();
    return 0;
}
