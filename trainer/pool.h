/*
 * pool.h - 2-d max pooling (torch.nn.MaxPool2d(m): kernel m, stride m, no padding, the
 * output floor((h - m) / m) + 1), forward and backward.
 *
 * Tensors are float32 NCHW as in trainer/conv.h: x [n x c x h x w], y [n x c x oh x ow].
 * The forward records in arg, for every output, the index inside its sample's input plane
 * of the maximum it took (the first one on ties, as torch's CPU kernel); the backward routes
 * each output's gradient there. All memory is the caller's, borrowed for the call.
 */
#ifndef DDP_TRAINER_POOL_H
#define DDP_TRAINER_POOL_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct pool2d {
    int c, h, w; /* input */
    int m;       /* kernel and stride */
    int oh, ow;  /* output */
};

/* Sets p up; DDP_EINVAL for a size <= 0 or a window larger than the input. */
int pool2d_init(struct pool2d *p, int c, int h, int w, int m, struct ddp_err *err);

size_t pool2d_in_count(const struct pool2d *p);  /* c * h * w, one sample */
size_t pool2d_out_count(const struct pool2d *p); /* c * oh * ow, one sample (and of arg) */

/* y = maxpool(x) for n samples; arg: n * pool2d_out_count() indices. */
void pool2d_forward(const struct pool2d *p, const float *x, size_t n, float *y, int32_t *arg);

/* dx (overwritten, as x) from dy (as y) and the forward's arg. */
void pool2d_backward(const struct pool2d *p, const float *dy, size_t n, const int32_t *arg,
                     float *dx);

#endif
