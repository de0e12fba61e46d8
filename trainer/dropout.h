/*
 * dropout.h - inverted dropout, torch.nn.Dropout(p) in training: each element is kept with
 * probability 1 - p and multiplied by 1 / (1 - p), or set to 0.
 *
 * The mask is a pure function of three numbers, not a stream: the key of the sample the
 * element belongs to, the site (which dropout in the model), and the element's index within
 * the sample's part of the tensor. A sample's key is dropout_sample_key(seed, step, index
 * in the data set), so:
 *   - the backward recomputes the mask instead of storing it (no memory per element);
 *   - W ranks with batches of B drop exactly what one process with batches of W*B drops
 *     (a sample's mask does not depend on the rank or the batch it lands in);
 *   - the "RNG state" is the seed and the step, which every checkpoint already holds, so a
 *     resumed run drops what an uninterrupted one would.
 * Memory is the caller's, borrowed for the call.
 */
#ifndef DDP_TRAINER_DROPOUT_H
#define DDP_TRAINER_DROPOUT_H

#include <stddef.h>
#include <stdint.h>

/* One dropout of a model in one pass: the batch's sample keys (borrowed), its site number
 * and p. A layer given NULL, or p 0, drops nothing. */
struct dropout_site {
    const uint64_t *keys;
    uint32_t site;
    float p;
};

/* The largest p accepted (--dropout): 1 would drop everything and scale by infinity. */
#define DROPOUT_MAX_P 0.95

/* The key of the sample at index sample of the data set in optimizer step step. */
uint64_t dropout_sample_key(uint64_t seed, uint64_t step, uint64_t sample);

/*
 * y = dropout(x) for nsamples samples of per_sample floats each, sample s's mask from
 * keys[s] and site, element i of a sample numbered offset + i (so a caller that walks a
 * sample in pieces, as attention does per head, gets the mask of the whole). y may be x.
 * The backward is the same call on the gradient (dx = dy * the same mask and scale).
 * p == 0 copies (or leaves y as it is when y == x).
 */
void dropout_apply(float *y, const float *x, size_t nsamples, size_t per_sample,
                   const uint64_t *keys, uint32_t site, uint64_t offset, float p);

#endif
