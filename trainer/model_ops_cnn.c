/*
 * model_ops_cnn.c - the CNN (trainer/model_cnn.h) on the CPU as a model instance
 * (trainer/model_ops.h), with trainer/optim.c's SGD.
 *
 * Invariants: as model_ops_cpu.c's: the host state is the trained state (params() is
 * cnn_params, momentum() the optimizer's buffer), so both syncs are no-ops; parameter layer
 * l's tensors are 2l and 2l+1.
 */
#include "trainer/model_ops.h"

#include <stdlib.h>

#include "common/xalloc.h"
#include "trainer/model_cnn.h"
#include "trainer/optim.h"

struct cnn_inst {
    struct model_inst base; /* first: a struct model_inst * is a struct cnn_inst * */
    struct cnn *m;          /* owned */
    struct optim opt;
    size_t off[2 * CNN_MAX_LAYERS], size[2 * CNN_MAX_LAYERS];
};

static struct cnn_inst *cnn_of(struct model_inst *mi)
{
    return (struct cnn_inst *)mi;
}

static const struct cnn_inst *cnn_of_const(const struct model_inst *mi)
{
    return (const struct cnn_inst *)mi;
}

static size_t ci_param_count(const struct model_inst *mi)
{
    return cnn_param_count(cnn_of_const(mi)->m);
}

static int ci_tensor_count(const struct model_inst *mi)
{
    return cnn_tensor_count(cnn_of_const(mi)->m);
}

static size_t ci_tensor_size(const struct model_inst *mi, int t)
{
    return cnn_tensor_size(cnn_of_const(mi)->m, t);
}

static void ci_layer_tensors(const struct model_inst *mi, int layer, int *first, int *count)
{
    (void)mi;
    *first = 2 * layer;
    *count = 2;
}

static float *ci_params(struct model_inst *mi)
{
    return cnn_params(cnn_of(mi)->m);
}

static float *ci_momentum(struct model_inst *mi)
{
    return cnn_of(mi)->opt.buf;
}

static void ci_release_state(struct model_inst *mi)
{
    optim_release(&cnn_of(mi)->opt);
}

static void ci_set_forward_hooks(struct model_inst *mi, const struct model_hooks *fwd)
{
    cnn_set_forward_hooks(cnn_of(mi)->m, fwd);
}

static void ci_bind_grads(struct model_inst *mi, float *const *grads)
{
    cnn_bind_grads(cnn_of(mi)->m, grads);
}

static int ci_sync(struct model_inst *mi, struct ddp_err *err)
{
    (void)mi;
    (void)err;
    return 0;
}

static void ci_set_sample_keys(struct model_inst *mi, const uint64_t *keys, size_t n)
{
    cnn_set_dropout_keys(cnn_of(mi)->m, keys, n);
}

static int ci_forward(struct model_inst *mi, const float *x, const uint8_t *y, size_t n,
                      double *loss_sum, struct ddp_err *err)
{
    return cnn_forward(cnn_of(mi)->m, x, y, n, loss_sum, err);
}

static int ci_backward(struct model_inst *mi, const struct model_hooks *hooks, struct ddp_err *err)
{
    return cnn_backward(cnn_of(mi)->m, hooks, err);
}

static int ci_count_correct(struct model_inst *mi, const float *x, const uint8_t *y, size_t n,
                            size_t *correct, struct ddp_err *err)
{
    return cnn_count_correct(cnn_of(mi)->m, x, y, n, correct, err);
}

static int ci_step(struct model_inst *mi, float lr, float grad_scale, struct ddp_err *err)
{
    (void)err;
    struct cnn_inst *c = cnn_of(mi);
    float *grads[2 * CNN_MAX_LAYERS];
    int nt = cnn_tensor_count(c->m);
    for (int t = 0; t < nt; t++)
        grads[t] = cnn_grad(c->m, t);
    c->opt.lr = lr;
    optim_step_tensors(&c->opt, cnn_params(c->m), nt, c->off, c->size, grads, grad_scale);
    return 0;
}

static void ci_free(struct model_inst *mi)
{
    if (!mi)
        return;
    struct cnn_inst *c = cnn_of(mi);
    optim_release(&c->opt);
    cnn_free(c->m);
    free(c);
}

static const struct model_ops cnn_ops = {
    .name = "cnn-cpu",
    .param_count = ci_param_count,
    .tensor_count = ci_tensor_count,
    .tensor_size = ci_tensor_size,
    .layer_tensors = ci_layer_tensors,
    .params = ci_params,
    .momentum = ci_momentum,
    .release_state = ci_release_state,
    .bind_grads = ci_bind_grads,
    .set_forward_hooks = ci_set_forward_hooks,
    .sync_to_device = ci_sync,
    .sync_to_host = ci_sync,
    .forward = ci_forward,
    .set_sample_keys = ci_set_sample_keys,
    .backward = ci_backward,
    .count_correct = ci_count_correct,
    .step = ci_step,
    .free = ci_free,
    .close_device = NULL,
};

struct model_inst *model_inst_cnn_new(struct cnn *m, float momentum, float weight_decay)
{
    struct cnn_inst *c = xcalloc(1, sizeof(*c));
    c->base.ops = &cnn_ops;
    c->m = m;
    for (int t = 0; t < cnn_tensor_count(m); t++) {
        c->off[t] = cnn_tensor_offset(m, t);
        c->size[t] = cnn_tensor_size(m, t);
    }
    optim_init_n(&c->opt, cnn_param_count(m), 0.0f, momentum, weight_decay);
    return &c->base;
}
