/*
 * model_ops.h - one trained model behind a table of functions, so that the train loop
 * drives every kind of model the same way: the MLP on the CPU (model_ops_cpu.c, over
 * trainer/model.c and trainer/optim.c), the MLP on a GPU (model_ops_gpu.c, over
 * trainer/gpu/model_gpu.h; built only with CUDA), the CNN on the CPU (model_ops_cnn.c, over
 * trainer/model_cnn.c), the GPT on the CPU (model_ops_gpt.c, over trainer/model_gpt.c), and
 * later a sharded model, each an instance with its own table.
 *
 * An instance owns its parameters, its optimizer state and everything its compute needs.
 * Its state as the train loop sees it:
 *   - host state: params(), param_count() floats in the tensors' definition order, and the
 *     optimizer's state(), state_arrays() such arrays (SGD's momentum: 1; AdamW's m and v:
 *     2), the checkpoint's arrays. Initialisation, the resume and rank 0's
 *     broadcast write them; sync_to_device() then makes them the state that is trained.
 *     On an instance that computes elsewhere (a GPU) they are a mirror that sync_to_host()
 *     refreshes for a checkpoint or a dump; on the CPU both syncs do nothing.
 *   - tensors: tensor_count() tensors of tensor_size(t) floats, the units the reducer
 *     buckets. bind_grads() makes tensor t's gradient the caller's grads[t] (borrowed, in
 *     the memory the instance computes in: device memory on a GPU). The backward's
 *     hooks->layer_end(layer) means that layer's tensors, layer_tensors(layer), are final.
 *   - a step is forward (loss summed over the n samples), backward (the mean loss's
 *     gradients into the bound views), then, once the reducer has summed them over the
 *     ranks, step(lr, grad_scale): SGD with the instance's momentum and weight decay on the
 *     gradients times grad_scale.
 * Errors are 0 or a negative DDP_E* code with err saying why; on a GPU instance CUDA
 * failures are DDP_EINTERNAL (the worker's exit code 8).
 */
#ifndef DDP_TRAINER_MODEL_OPS_H
#define DDP_TRAINER_MODEL_OPS_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "trainer/model.h"

struct model_inst;

struct model_ops {
    const char *name; /* "cpu", "gpu" */
    size_t (*param_count)(const struct model_inst *mi);
    int (*tensor_count)(const struct model_inst *mi);
    size_t (*tensor_size)(const struct model_inst *mi, int t);
    /* The tensors of a layer the backward's hooks name: first .. first + count - 1. */
    void (*layer_tensors)(const struct model_inst *mi, int layer, int *first, int *count);
    /* The host state (see above); owned by the instance. */
    float *(*params)(struct model_inst *mi);
    float *(*momentum)(struct model_inst *mi); /* the optimizer's state (see above) */
    /* Arrays of param_count() floats in momentum(); NULL means 1 (SGD's momentum). */
    int (*state_arrays)(const struct model_inst *mi);
    /* The optimizer steps already taken (a resumed checkpoint's step), for an optimizer that
     * counts them (AdamW's bias correction); NULL where none does. */
    void (*set_step)(struct model_inst *mi, uint64_t step);
    void (*bind_grads)(struct model_inst *mi, float *const *grads);
    /* Every later forward calls fwd->layer_begin(layer) just before that hook layer's
     * parameters are read (model_set_forward_hooks); fwd borrowed, NULL for none. NULL where
     * the instance has no such hooks (a GPU instance). */
    void (*set_forward_hooks)(struct model_inst *mi, const struct model_hooks *fwd);
    int (*sync_to_device)(struct model_inst *mi, struct ddp_err *err);
    int (*sync_to_host)(struct model_inst *mi, struct ddp_err *err);
    /* As model_forward / model_backward / model_count_correct (trainer/model.h); x and y
     * are host memory. */
    int (*forward)(struct model_inst *mi, const float *x, const uint8_t *y, size_t n,
                   double *loss_sum, struct ddp_err *err);
    int (*backward)(struct model_inst *mi, const struct model_hooks *hooks, struct ddp_err *err);
    int (*count_correct)(struct model_inst *mi, const float *x, const uint8_t *y, size_t n,
                         size_t *correct, struct ddp_err *err);
    int (*step)(struct model_inst *mi, float lr, float grad_scale, struct ddp_err *err);
    /* Frees the optimizer's state (momentum() is NULL from then on, and step() must not be
     * called): a sharded optimizer (trainer/zero.h) keeps its own shard. NULL where the
     * instance cannot (a GPU instance). */
    void (*release_state)(struct model_inst *mi);
    /* A language model's evaluation of n windows (x unused): the summed loss as forward's
     * and the positions whose most likely next byte was right. NULL for the classifiers,
     * which count_correct scores. */
    int (*evaluate)(struct model_inst *mi, const float *x, const uint8_t *y, size_t n,
                    double *loss_sum, size_t *correct, struct ddp_err *err);
    /* Makes the next forward a training forward that drops out, sample s of its batch with
     * keys[s] (trainer/dropout.h; n keys, copied). NULL where the model has no dropout. */
    void (*set_sample_keys)(struct model_inst *mi, const uint64_t *keys, size_t n);
    /* A language model's sampler: nnew bytes after the prompt into out (see gpt_generate);
     * NULL for the others. */
    void (*generate)(struct model_inst *mi, const uint8_t *prompt, size_t nprompt, size_t nnew,
                     uint64_t seed, uint8_t *out);
    /* Frees the instance (NULL accepted), before the process group is closed. */
    void (*free)(struct model_inst *mi);
    /* Ends the compute device's runtime once the process group (whose comm may use the
     * device) is closed; NULL where there is nothing to end. */
    void (*close_device)(void);
};

/* What every instance starts with; an implementation embeds it first. */
struct model_inst {
    const struct model_ops *ops;
};

/*
 * The MLP m on the CPU with SGD's momentum and weight decay: takes ownership of m (freed
 * with the instance). Its gradients stay m's own block until bind_grads.
 */
struct model_inst *model_inst_cpu_new(struct model *m, float momentum, float weight_decay);

struct cnn; /* trainer/model_cnn.h */

/*
 * The CNN m on the CPU with SGD's momentum and weight decay (trainer/model_ops_cnn.c):
 * takes ownership of m (freed with the instance). Its gradients stay m's own block until
 * bind_grads.
 */
struct model_inst *model_inst_cnn_new(struct cnn *m, float momentum, float weight_decay);

/* The optimizer a model instance steps with. */
struct optim_cfg {
    int adamw; /* 0: SGD (momentum, weight_decay as L2), 1: AdamW */
    float momentum, weight_decay;
    float beta1, beta2, eps; /* AdamW */
    float clip_norm;         /* > 0: global-norm clipping of the averaged gradients */
};

struct gpt; /* trainer/model_gpt.h */

/*
 * The GPT m on the CPU with the optimizer of c (trainer/model_ops_gpt.c): takes ownership of
 * m (freed with the instance). Its gradients stay m's own block until bind_grads. The
 * instance reports, as its tensors, the GPT's, and its layers are the GPT's hook layers.
 */
struct model_inst *model_inst_gpt_new(struct gpt *m, const struct optim_cfg *c);

/*
 * The MLP m on the GPU (gpu_init done: ddp_group_open selected it): takes ownership of m,
 * which becomes the host mirror. The device copy is made by the first sync_to_device (from
 * the host state at that time, with the views of bind_grads). Only in a build with CUDA,
 * the only one where ddp_group_open can put a process on a GPU.
 */
#ifdef DDP_HAVE_CUDA
struct model_inst *model_inst_gpu_new(struct model *m, float momentum, float weight_decay);
#endif

#endif
