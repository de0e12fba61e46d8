/*
 * mlp_kernels.h - the MLP's pieces on the GPU (mlp_kernels.cu), with a C interface, for
 * model_gpu.c only. All row-major like the CPU model (trainer/model.c), all on libddp's
 * compute stream (gpu_stream() of ddp/gpu.h), asynchronous unless said otherwise. n rows,
 * `in` inputs, `out` outputs. Built only where CUDA was found (DDP_HAVE_CUDA).
 *
 * Errors: CUDA and cuBLAS failures are DDP_EINTERNAL with "file:line: cuda error <name>"
 * (or "cublas error"); the worker turns them into DDP_EXIT_DEVICE.
 */
#ifndef DDP_TRAINER_GPU_MLP_KERNELS_H
#define DDP_TRAINER_GPU_MLP_KERNELS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Takes a share of the kernels' state: the first share creates the cuBLAS handle (on the
 * compute stream, pedantic FP32: no TF32), so gpu_init() must have succeeded. Every function
 * below needs a share held. On failure nothing is held. */
int mlp_kernels_acquire(struct ddp_err *err);
/* Gives one share back; the last frees the handle and the scratch (before gpu_shutdown()). */
void mlp_kernels_release(void);

/* z[n x out] = x[n x in] W[out x in]^T + b[out]; then ReLU in place when relu != 0. */
int gpu_linear_forward(const float *x, const float *w, const float *b, float *z, int n, int in,
                       int out, int relu, struct ddp_err *err);
/* dW[out x in] = dz^T x; db[out] = column sums of dz. */
int gpu_linear_backward_params(const float *dz, const float *x, float *dw, float *db, int n, int in,
                               int out, struct ddp_err *err);
/* dx[n x in] = dz W, then zero where act (the layer's input, post-ReLU) <= 0. */
int gpu_linear_backward_input(const float *dz, const float *w, const float *act, float *dx, int n,
                              int in, int out, struct ddp_err *err);
/* Softmax cross-entropy over logits [n x classes] with labels y (device): writes the
 * probabilities to prob, dz = (prob - onehot) / n, and the loss sum into *loss_sum (waits). */
int gpu_softmax_xent(const float *logits, const uint8_t *y, float *prob, float *dz, int n,
                     int classes, double *loss_sum, struct ddp_err *err);
/* Counts rows whose arg-max equals the label (waits). */
int gpu_count_correct(const float *logits, const uint8_t *y, int n, int classes, size_t *correct,
                      struct ddp_err *err);
/* SGD with momentum and weight decay, torch's order: d = g + wd p; buf = mu buf + d;
 * p -= lr buf. */
int gpu_sgd(float *p, const float *g, float *buf, size_t n, float lr, float mu, float wd,
            struct ddp_err *err);

#ifdef __cplusplus
}
#endif

#endif
