/*
 * conv_dnnl.h - trainer/conv.h's Conv2d through oneDNN (libdnnl, the library PyTorch's CPU
 * convolutions run on): the same shapes, tensors and results as conv.h, to fp32 rounding.
 *
 * oneDNN picks its own blocked layouts for the convolution (format "any"); the layer
 * reorders the caller's NCHW input and OIHW weight into them and its results back, so the
 * caller's memory is as conv.h has it (views into the model's parameter block and the
 * reducer's bucket memory). The primitives are made for a batch size on its first use and
 * kept: CONV_DNNL_PLANS sizes at once, the one used longest ago made again when a new size
 * comes (a training run sees two or three: its batch, the last partial one, evaluation's).
 *
 * Threads: oneDNN's OpenMP pool, omp_set_num_threads() (the worker sets it as OpenBLAS's).
 * Built only where CMake found oneDNN (DDP_HAVE_DNNL); elsewhere conv2d_dnnl_available() is
 * 0 and conv2d_dnnl_new refuses, saying so.
 */
#ifndef DDP_TRAINER_CONV_DNNL_H
#define DDP_TRAINER_CONV_DNNL_H

#include <stddef.h>

#include "common/err.h"
#include "trainer/conv.h"

#define CONV_DNNL_PLANS 4

/* Which implementation a convolution layer runs. CONV_AUTO: oneDNN where it is built (the
 * faster here, every layer of the default CNN: docs/worker.md has the figures), im2col
 * otherwise. */
enum conv_impl { CONV_AUTO, CONV_IM2COL, CONV_ONEDNN };

/* 1 if this build has oneDNN. */
int conv2d_dnnl_available(void);

/* The threads of oneDNN's OpenMP pool (the worker's OMP_NUM_THREADS); nothing without it. */
void conv2d_dnnl_set_threads(int n);

/* The implementation impl gives a layer (never CONV_AUTO). */
enum conv_impl conv_impl_for(enum conv_impl impl);

/* "auto", "im2col" or "onednn" (the --conv values). */
const char *conv_impl_name(enum conv_impl impl);

struct conv2d_dnnl;

/* A oneDNN layer of c's shape (copied). DDP_EINVAL naming --conv where the build has no
 * oneDNN, DDP_EINTERNAL with oneDNN's status where it refuses. Caller frees. */
int conv2d_dnnl_new(const struct conv2d *c, struct conv2d_dnnl **out, struct ddp_err *err);
void conv2d_dnnl_free(struct conv2d_dnnl *d);

/*
 * As conv2d_forward, conv2d_backward_params and conv2d_backward_input (trainer/conv.h), for
 * 1 <= n samples. The backward halves reuse what the forward and backward_params reordered
 * when they are called for the same pointers and n, so x must not change between the
 * forward and the backward, nor dy between the two halves (a model's backward keeps both).
 * DDP_EINTERNAL with oneDNN's status if making or running a primitive fails.
 */
int conv2d_dnnl_forward(struct conv2d_dnnl *d, const float *x, size_t n, const float *W,
                        const float *b, float *y, struct ddp_err *err);
int conv2d_dnnl_backward_params(struct conv2d_dnnl *d, const float *x, size_t n, const float *dy,
                                float *dW, float *db, struct ddp_err *err);
int conv2d_dnnl_backward_input(struct conv2d_dnnl *d, size_t n, const float *W, const float *dy,
                               float *dx, struct ddp_err *err);

#endif
