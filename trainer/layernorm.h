/*
 * layernorm.h - torch.nn.LayerNorm over the last dimension (eps 1e-5, with weight and bias),
 * forward and backward over n rows of c features, row-major [n x c].
 *
 * The forward keeps each row's mean and 1/std (mean[n], rstd[n]: the caller's memory) for the
 * backward. The backward ADDS the input's gradient into dx (the residual stream the GPT
 * accumulates into) and WRITES dw and db (summed over the rows). All memory is the caller's,
 * borrowed for the call.
 */
#ifndef DDP_TRAINER_LAYERNORM_H
#define DDP_TRAINER_LAYERNORM_H

#include <stddef.h>

#define LAYERNORM_EPS 1e-5f

/* y = (x - mean) * rstd * w + b per row. */
void layernorm_forward(const float *x, size_t n, int c, const float *w, const float *b, float *y,
                       float *mean, float *rstd);

/* dx += dL/dx; dw = sum over rows of dy * xhat; db = sum over rows of dy. */
void layernorm_backward(const float *x, size_t n, int c, const float *w, const float *mean,
                        const float *rstd, const float *dy, float *dx, float *dw, float *db);

#endif
