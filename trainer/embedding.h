/*
 * embedding.h - the GPT's input: token embedding plus learned position embedding,
 * torch.nn.Embedding(vocab, c)(tokens) + torch.nn.Embedding(t_max, c)(arange(t)), for b
 * sequences of t tokens. y is [b x t x c]; wte [vocab x c]; wpe [t_max x c] (t <= t_max).
 * Memory is the caller's, borrowed for the call.
 */
#ifndef DDP_TRAINER_EMBEDDING_H
#define DDP_TRAINER_EMBEDDING_H

#include <stddef.h>
#include <stdint.h>

/* tokens: b sequences of stride bytes each, of which the first t are used. */
void embedding_forward(const uint8_t *tokens, size_t b, int t, size_t stride, int c,
                       const float *wte, const float *wpe, float *y);

/* ADDS into dwte and dwpe (the caller zeroes them, or has written the tied head's part into
 * dwte) the gradients from dy. */
void embedding_backward(const uint8_t *tokens, size_t b, int t, size_t stride, int c,
                        const float *dy, float *dwte, float *dwpe);

#endif
