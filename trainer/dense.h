/*
 * dense.h - the layers without spatial structure, as the MLP (trainer/model.c) computes
 * them: Linear (torch.nn.Linear), ReLU and the softmax cross-entropy loss, forward and
 * backward over n samples, row-major [n x features].
 *
 * Linear maps in features to out: y = x W^T + b with W [out x in] (torch's layout) and
 * b [out]. All memory is the caller's, borrowed for the call; a gradient is written, never
 * accumulated.
 */
#ifndef DDP_TRAINER_DENSE_H
#define DDP_TRAINER_DENSE_H

#include <stddef.h>
#include <stdint.h>

void linear_forward(const float *x, size_t n, int in, int out, const float *W, const float *b,
                    float *y);
/* The backward for dy [n x out] in two halves (as conv.h's): dW [out x in] and db [out]
 * from the forward's input x; then dx [n x in] from W. */
void linear_backward_params(const float *x, size_t n, int in, int out, const float *dy, float *dW,
                            float *db);
void linear_backward_input(size_t n, int in, int out, const float *W, const float *dy, float *dx);

/* a = max(a, 0), cnt floats in place. */
void relu_forward(float *a, size_t cnt);
/* Zeroes the gradient d where the ReLU's output a is not positive (in place). */
void relu_backward(const float *a, float *d, size_t cnt);

/*
 * Softmax cross-entropy of logits z [n x classes] (overwritten with the probabilities) and
 * labels y (each below classes: the caller checks): returns the sum over the samples of
 * the loss (torch's cross_entropy with reduction "sum").
 */
/* Rows of z (n x classes logits) whose largest entry is at their label y[i]. */
size_t dense_count_hits(const float *z, size_t n, int classes, const uint8_t *y);
double softmax_xent_forward(float *z, const uint8_t *y, size_t n, int classes);
/* dz = (p - onehot(y)) / n: the gradient of the mean loss, from the forward's p. */
void softmax_xent_backward(const float *p, const uint8_t *y, size_t n, int classes, float *dz);

#endif
