/*
 * model_gpt.h - a decoder-only transformer on byte tokens (GPT-2's architecture): token and
 * learned position embeddings, L pre-LayerNorm blocks (LayerNorm, causal multi-head
 * self-attention with a qkv projection and an output projection, residual add, LayerNorm,
 * Linear to 4D, tanh-GELU, Linear back to D, residual add), a final LayerNorm and an output
 * head TIED to the token embedding (logits = h wte^T, as GPT-2), with the softmax
 * cross-entropy of each position's next byte. Dropout (gpt_set_dropout, off by default) where
 * GPT-2 has it: on the embeddings' sum, on each block's attention probabilities, and on the
 * output of each block's attention and MLP before its residual add.
 *
 * The spec "gpt:L-H-D-T": layers, heads, width (a multiple of heads) and context length.
 * The vocabulary is the 256 byte values.
 *
 * Parameters: one allocation, tensors in definition order (the order of torch's
 * named_parameters() for the module tests/unit/model_gpt_torch.py defines):
 *   0 wte [256 x D], 1 wpe [T x D],
 *   per block b (tensor 2 + 12b ...): ln_1.weight [D], ln_1.bias [D], attn.c_attn.weight
 *   [3D x D], attn.c_attn.bias [3D], attn.c_proj.weight [D x D], attn.c_proj.bias [D],
 *   ln_2.weight, ln_2.bias, mlp.c_fc.weight [4D x D], mlp.c_fc.bias [4D], mlp.c_proj.weight
 *   [D x 4D], mlp.c_proj.bias [D],
 *   then ln_f.weight [D], ln_f.bias [D].
 * Initialized as GPT-2: weights normal(0, 0.02), the two residual projections normal(0,
 * 0.02 / sqrt(2L)), biases 0, LayerNorm weights 1.
 *
 * Hook layers (trainer/model.h's hooks), numbered by definition: 0 the embeddings (tensors
 * 0-1), 1..L the blocks (12 tensors each), L+1 the final LayerNorm (2 tensors). The backward
 * runs L+1, L, ..., 1, 0 and calls hooks->layer_end(k) as soon as layer k's tensors are
 * final; wte last of all, its gradient holding the head's part and the embedding's.
 *
 * A sample is a window of T+1 bytes: the first T are the input, the last T the targets. The
 * loss of a sample is the mean over its T positions; forward returns the sum over samples.
 */
#ifndef DDP_TRAINER_MODEL_GPT_H
#define DDP_TRAINER_MODEL_GPT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/rng.h"
#include "trainer/model.h"

#define GPT_VOCAB             256
#define GPT_MAX_LAYERS        64
#define GPT_MAX_WIDTH         8192
#define GPT_MAX_HEADS         256
#define GPT_MAX_CTX           4096
#define GPT_MAX_SPEC          64
#define GPT_TENSORS_PER_BLOCK 12

struct gpt_spec {
    char text[GPT_MAX_SPEC + 1]; /* as given */
    int layers, heads, width, ctx;
    uint64_t nparams;
};

struct gpt;

/* Parses "gpt:L-H-D-T" and checks its size (model_check_size's bound against memory bytes).
 * DDP_EINVAL with a message naming --model and what is wrong; *out written only on success. */
int gpt_parse_spec(const char *spec, uint64_t memory, struct gpt_spec *out, struct ddp_err *err);

/* The GPT of s for batches of up to max_batch windows (1..65536), parameters from seed.
 * DDP_EINVAL naming --model when its activations need more than memory bytes. Caller frees
 * with gpt_free(). */
int gpt_new(const struct gpt_spec *s, size_t max_batch, uint64_t seed, uint64_t memory,
            struct gpt **out, struct ddp_err *err);
void gpt_free(struct gpt *m);

const struct gpt_spec *gpt_spec_of(const struct gpt *m); /* borrowed */
size_t gpt_param_count(const struct gpt *m);
int gpt_tensor_count(const struct gpt *m); /* 2 + 12 L + 2 */
size_t gpt_tensor_size(const struct gpt *m, int t);
size_t gpt_tensor_offset(const struct gpt *m, int t);
int gpt_hook_layers(const struct gpt *m); /* L + 2 */
void gpt_layer_tensors(const struct gpt *m, int layer, int *first, int *count);
float *gpt_params(struct gpt *m);
float *gpt_grad(struct gpt *m, int t);
/* As model_bind_grads: grads[t] borrowed, for every t < gpt_tensor_count(m). */
void gpt_bind_grads(struct gpt *m, float *const *grads);

/* n windows of T+1 bytes each (tokens borrowed until the backward); *loss_sum = the sum over
 * the windows of each one's mean loss (nats per byte). */
int gpt_forward(struct gpt *m, const uint8_t *tokens, size_t n, double *loss_sum,
                struct ddp_err *err);
/* As model_set_forward_hooks: fwd->layer_begin(k) before hook layer k's forward (0, 1..L,
 * L+1; the head then reads layer 0's wte again). */
void gpt_set_forward_hooks(struct gpt *m, const struct model_hooks *fwd);

/* Dropout sites (trainer/dropout.h): 0 the embeddings' sum; block b's attention
 * probabilities GPT_DROP_SITE(b, GPT_DROP_ATT), its attention's output (GPT_DROP_ATT_OUT) and
 * its MLP's output (GPT_DROP_MLP_OUT). */
#define GPT_DROP_EMB           0u
#define GPT_DROP_ATT           0u
#define GPT_DROP_ATT_OUT       1u
#define GPT_DROP_MLP_OUT       2u
#define GPT_DROP_SITE(b, kind) (1u + 3u * (uint32_t)(b) + (kind))

/* p (0 .. DROPOUT_MAX_P) of every site; 0, the default, drops nothing. */
void gpt_set_dropout(struct gpt *m, float p);
/* Makes the next gpt_forward a training forward that drops, sample s of its batch with
 * keys[s] (copied; n <= max_batch), and its backward drop the same. Any forward uses the
 * keys up: an evaluation forward without them drops nothing (torch's eval()). */
void gpt_set_dropout_keys(struct gpt *m, const uint64_t *keys, size_t n);

/* The gradients of the mean over the forward's windows of their losses. */
int gpt_backward(struct gpt *m, const struct model_hooks *hooks, struct ddp_err *err);

/* After a gpt_forward: the positions whose most likely next byte is the target. */
size_t gpt_count_hits(const struct gpt *m);

/* Samples nnew bytes into out after the nprompt bytes of prompt (1..; only the last T are
 * seen), each from the softmax of the logits / temperature, with rng. */
void gpt_generate(struct gpt *m, const uint8_t *prompt, size_t nprompt, size_t nnew,
                  float temperature, struct rng *rng, uint8_t *out);

#endif
