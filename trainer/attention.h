/*
 * attention.h - causal multi-head self-attention, as GPT-2's (and torch's
 * F.scaled_dot_product_attention(q, k, v, is_causal=True) over heads), without the input and
 * output projections (those are Linear layers, trainer/dense.h).
 *
 * Shapes, row-major: qkv [b x t x 3c], q, k and v side by side in each row as torch's
 * qkv.split(c, dim=2) takes them; head h of q is columns h*hs .. h*hs+hs-1 of q (hs = c /
 * heads). y [b x t x c], the heads side by side. The forward keeps the attention
 * probabilities att [b x heads x t x t] (zero above the diagonal) for the backward. Scores
 * are scaled by 1/sqrt(hs). All memory is the caller's, borrowed for the call.
 *
 * Each head's products are cblas_sgemm calls on strided views of qkv; the softmax and its
 * backward are plain loops.
 */
#ifndef DDP_TRAINER_ATTENTION_H
#define DDP_TRAINER_ATTENTION_H

#include <stddef.h>

#include "trainer/dropout.h"

/*
 * drop (NULL for none): dropout of the probabilities before they weigh v, as GPT-2's
 * attn_dropout (y = dropout(P) v); att keeps P itself, and sample s's mask covers its
 * [heads x t x t] probabilities in that order (trainer/dropout.h). scratch: t * t floats,
 * used only with a drop.
 */
void attention_forward(const float *qkv, size_t b, int t, int c, int heads, float *y, float *att,
                       const struct dropout_site *drop, float *scratch);

/* dqkv [b x t x 3c] written from dy [b x t x c], with the forward's drop; scratch: 2 * t * t
 * floats. */
void attention_backward(const float *qkv, const float *att, const float *dy, size_t b, int t, int c,
                        int heads, const struct dropout_site *drop, float *dqkv, float *scratch);

#endif
