/*
 * model.h - a multi-layer perceptron: Linear layers with ReLU between them and a softmax
 * cross-entropy loss, computed with OpenBLAS's cblas_sgemm.
 *
 * Layer l (0-based, nlayers of them) maps widths[l] inputs to widths[l+1] outputs:
 *   W_l  [widths[l+1] x widths[l]]  row-major (like torch.nn.Linear.weight)
 *   b_l  [widths[l+1]]
 * The parameter tensors in order of definition are W_0, b_0, W_1, b_1, ... (tensor index
 * 2l is W_l, 2l+1 is b_l). All parameters live in one allocation (model_params()), in that
 * order. Gradients are views the caller binds (model_bind_grads: the reducer's bucket
 * memory) or, when unbound, one allocation the model owns.
 *
 * The backward pass writes (does not accumulate) each gradient, and calls hooks->layer_end
 * as soon as layer l's W and b gradients are final, before it goes on to layer l-1: that is
 * where the reducer marks them ready and may start a bucket's all-reduce.
 */
#ifndef DDP_TRAINER_MODEL_H
#define DDP_TRAINER_MODEL_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

#define MODEL_MAX_LAYERS 32
#define MODEL_MAX_WIDTH  (1 << 20)

struct model;

/* The parameter layout of an MLP of nlayers layers (widths[0..nlayers]): tensor 2l is W_l
 * (widths[l+1] x widths[l], row-major), 2l+1 is b_l, one after the other. Fills off[] and
 * size[] (2 * nlayers each, floats) and returns the total. Shared by the CPU model and the
 * GPU one (trainer/gpu/model_gpu.c), which must lay out their parameters the same way. */
static inline size_t model_layout(const int *widths, int nlayers, size_t *off, size_t *size)
{
    size_t total = 0;
    for (int l = 0; l < nlayers; l++) {
        off[2 * l] = total;
        size[2 * l] = (size_t)widths[l + 1] * (size_t)widths[l];
        total += size[2 * l];
        off[2 * l + 1] = total;
        size[2 * l + 1] = (size_t)widths[l + 1];
        total += size[2 * l + 1];
    }
    return total;
}

struct model_hooks {
    void *ctx;
    void (*layer_begin)(void *ctx, int layer); /* may be NULL */
    /* Layer's gradients are final. Non-zero stops the backward and is returned by it. */
    int (*layer_end)(void *ctx, int layer, struct ddp_err *err); /* may be NULL */
};

/*
 * Parses "mlp:784-256-128-10" into widths (at least 2, at most MODEL_MAX_LAYERS + 1 of
 * them, each 1..MODEL_MAX_WIDTH). Writes the count to *nwidths. Message names --model.
 */
int model_parse_spec(const char *spec, int *widths, int *nwidths, struct ddp_err *err);
/* Refuses (DDP_EINVAL, naming --model, the parameter count and the memory) a model whose
 * parameters, gradients, momentum and checkpoint (20 bytes a parameter) need more than memory
 * bytes, or
 * whose checkpoint would pass CKPT_MAX_BYTES. model_parse_spec checks with
 * model_memory_bytes(), the machine's physical memory (UINT64_MAX when unknown). */
int model_check_size(const char *spec, const int *widths, int nwidths, uint64_t memory,
                     struct ddp_err *err);
uint64_t model_memory_bytes(void);

/*
 * Creates the MLP with nwidths widths, able to run batches of up to max_batch samples, its
 * parameters initialized like torch.nn.Linear (uniform in +-1/sqrt(fan_in)) from seed.
 * Caller frees with model_free().
 */
int model_new(const int *widths, int nwidths, size_t max_batch, uint64_t seed, struct model **out,
              struct ddp_err *err);
void model_free(struct model *m);

int model_nlayers(const struct model *m);
const int *model_widths(const struct model *m); /* nlayers + 1 entries */
size_t model_max_batch(const struct model *m);
size_t model_param_count(const struct model *m); /* all tensors together */
int model_tensor_count(const struct model *m);   /* 2 * nlayers */
size_t model_tensor_size(const struct model *m, int t);
size_t model_tensor_offset(const struct model *m, int t); /* in model_params() */
/* The layer a tensor belongs to (t / 2). */
int model_tensor_layer(int t);
float *model_params(struct model *m);
float *model_grad(struct model *m, int t);

/* Makes tensor t's gradient the caller's memory grads[t] (borrowed: must outlive m or the
 * next bind), for every t < model_tensor_count(m). */
void model_bind_grads(struct model *m, float *const *grads);

/*
 * Forward pass of n (1..max_batch) samples x (n x widths[0]) with labels y. Returns the sum
 * over the samples of the cross-entropy loss in *loss_sum and keeps what the backward needs;
 * the backward's loss is the mean over the n samples.
 */
int model_forward(struct model *m, const float *x, const uint8_t *y, size_t n, double *loss_sum,
                  struct ddp_err *err);

/* Makes every later forward call fwd->layer_begin(layer) just before layer's parameters are
 * first read (the sharded paths gather them there: trainer/fsdp.h); fwd->layer_end is not
 * called. fwd is borrowed (NULL: none). */
void model_set_forward_hooks(struct model *m, const struct model_hooks *fwd);

/* Backward pass for the last forward; hooks may be NULL. */
int model_backward(struct model *m, const struct model_hooks *hooks, struct ddp_err *err);

/* Counts correct arg-max predictions over n samples (any n: run in max_batch pieces). */
size_t model_count_correct(struct model *m, const float *x, const uint8_t *y, size_t n);

#endif
