/*
 * gpu.h - the CUDA side of the worker, with a C interface: device choice, memory, the
 * compute stream, and the MLP's kernels (gpu_mlp.cu). Built only where CUDA and NCCL were
 * found (DDP_HAVE_CUDA); callers guard their use with that macro.
 *
 * One compute stream per process (gpu_stream()); every kernel and cuBLAS call of the model
 * runs on it, in order. comm_nccl.c orders its all-reduces after it with events.
 *
 * Errors: CUDA and cuBLAS failures are DDP_EINTERNAL with "file:line: cuda error <name>";
 * the worker turns them into DDP_EXIT_DEVICE.
 */
#ifndef DDP_GPU_H
#define DDP_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible GPUs (after CUDA_VISIBLE_DEVICES); 0 when there is no GPU, no driver, or
 * libddpgpu.so cannot be loaded. When there is none, *why (may be NULL) receives a string that
 * says why (the CUDA error, or the loader's message naming the missing library); it stays
 * valid until the next gpu_count(). */
int gpu_count(const char **why);

/* Selects device (e.g. LOCAL_RANK) for this process (cudaSetDevice, before any other CUDA
 * call that touches a device) and creates the compute stream (non-blocking) and the cuBLAS
 * handle (on that stream, pedantic FP32: no TF32). Fails naming the device when it is out of
 * range. A second call for the same device does nothing; for another device it fails. Every
 * function below must be called from the thread that called this one. */
int gpu_init(int device, struct ddp_err *err);
/* Frees the stream and the cuBLAS handle. */
void gpu_shutdown(void);
int gpu_device(void);
/* The compute stream as a cudaStream_t (void * so C callers need no CUDA header). */
void *gpu_stream(void);

/* Device memory, zeroed on the compute stream before this returns (so work queued next on
 * that stream sees zeros); the caller frees with gpu_free() (which synchronizes the device). */
int gpu_alloc(void **p, size_t bytes, struct ddp_err *err);
void gpu_free(void *p);
/* Copies on the compute stream and waits for it. */
int gpu_to_device(void *dst, const void *src, size_t bytes, struct ddp_err *err);
int gpu_to_host(void *dst, const void *src, size_t bytes, struct ddp_err *err);
/* Waits until the compute stream is idle. */
int gpu_sync(struct ddp_err *err);
/* 1 if p is device memory. */
int gpu_is_device_ptr(const void *p);

/*
 * The MLP pieces, all row-major like the CPU model (trainer/model.c), all on the compute
 * stream, asynchronous unless said otherwise. n rows, `in` inputs, `out` outputs.
 */
/* z[n x out] = x[n x in] W[out x in]^T + b[out]; then ReLU in place when relu != 0. */
int gpu_linear_forward(const float *x, const float *w, const float *b, float *z, int n, int in,
                       int out, int relu, struct ddp_err *err);
/* dW[out x in] = dz^T x; db[out] = column sums of dz. */
int gpu_linear_backward_params(const float *dz, const float *x, float *dw, float *db, int n,
                               int in, int out, struct ddp_err *err);
/* dx[n x in] = dz W, then zero where act (the layer's input, post-ReLU) <= 0. */
int gpu_linear_backward_input(const float *dz, const float *w, const float *act, float *dx,
                              int n, int in, int out, struct ddp_err *err);
/* Softmax cross-entropy over logits [n x classes] with labels y (device): writes the
 * probabilities to prob, dz = (prob - onehot) / n, and the loss sum into *loss_sum (waits). */
int gpu_softmax_xent(const float *logits, const uint8_t *y, float *prob, float *dz, int n,
                     int classes, double *loss_sum, struct ddp_err *err);
/* Counts rows whose arg-max equals the label (waits). */
int gpu_count_correct(const float *logits, const uint8_t *y, int n, int classes,
                      size_t *correct, struct ddp_err *err);
/* SGD with momentum and weight decay, torch's order: d = g + wd p; buf = mu buf + d;
 * p -= lr buf. */
int gpu_sgd(float *p, const float *g, float *buf, size_t n, float lr, float mu, float wd,
            struct ddp_err *err);
/* x *= s for n floats. */
int gpu_scale(float *x, size_t n, float s, struct ddp_err *err);

#ifdef __cplusplus
}
#endif

#endif
