/*
 * conv.h - a 2-d convolution layer (torch.nn.Conv2d with groups 1, dilation 1), forward and
 * backward, over im2col and OpenBLAS's cblas_sgemm.
 *
 * Tensors are float32, row-major, NCHW: the input x [n x cin x h x w], the output
 * y [n x cout x oh x ow] with oh = (h + 2 pad - k) / stride + 1 (ow likewise), the weight
 * W [cout x cin x k x k] (torch's layout) and the bias b [cout]. The layer holds only its
 * shape: parameters, gradients, activations and scratch are the caller's memory (views into
 * the model's one parameter block and the reducer's bucket memory), borrowed for the call.
 */
#ifndef DDP_TRAINER_CONV_H
#define DDP_TRAINER_CONV_H

#include <stddef.h>

#include "common/err.h"

struct conv2d {
    int cin, h, w;   /* input */
    int cout, k;     /* output channels, square kernel */
    int stride, pad; /* the same along both axes; zero padding */
    int oh, ow;      /* output */
};

/* Sets c up; DDP_EINVAL (err says which value) for a size <= 0, stride < 1, pad < 0 or a
 * kernel larger than the padded input. */
int conv2d_init(struct conv2d *c, int cin, int h, int w, int cout, int k, int stride, int pad,
                struct ddp_err *err);

size_t conv2d_weight_count(const struct conv2d *c); /* cout * cin * k * k */
size_t conv2d_in_count(const struct conv2d *c);     /* cin * h * w, one sample */
size_t conv2d_out_count(const struct conv2d *c);    /* cout * oh * ow, one sample */
/* Floats of the scratch (col) the forward and the backward need: cin * k * k * oh * ow. */
size_t conv2d_col_count(const struct conv2d *c);

/* y = conv(x, W) + b for n samples; col is conv2d_col_count() floats of scratch. */
void conv2d_forward(const struct conv2d *c, const float *x, size_t n, const float *W,
                    const float *b, float *y, float *col);

/*
 * The backward for dy (n >= 1 samples, as y), in two halves so that a model can hand the
 * parameters' gradients to the reducer before it computes the input's:
 * conv2d_backward_params writes (does not accumulate) dW and db from the forward's input
 * x; conv2d_backward_input writes dx [as x] from W. col is scratch as for the forward.
 */
void conv2d_backward_params(const struct conv2d *c, const float *x, size_t n, const float *dy,
                            float *dW, float *db, float *col);
void conv2d_backward_input(const struct conv2d *c, size_t n, const float *W, const float *dy,
                           float *dx, float *col);

#endif
