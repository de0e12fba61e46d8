/*
 * gelu.h - GELU with the tanh approximation, torch.nn.GELU(approximate="tanh") as GPT-2
 * uses it: y = x/2 (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), over cnt floats. Memory is the
 * caller's, borrowed for the call.
 */
#ifndef DDP_TRAINER_GELU_H
#define DDP_TRAINER_GELU_H

#include <stddef.h>

void gelu_forward(const float *x, float *y, size_t cnt);
/* dx = dy * gelu'(x), written (dx may be dy). */
void gelu_backward(const float *x, const float *dy, float *dx, size_t cnt);

#endif
