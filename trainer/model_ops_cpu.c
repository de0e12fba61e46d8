/*
 * model_ops_cpu.c - the MLP on the CPU as a model instance (trainer/model_ops.h): the
 * compute is trainer/model.c's, the step trainer/optim.c's.
 *
 * Invariants: the host state is the trained state (params() is model_params(m), momentum()
 * the optimizer's buffer), so both syncs are no-ops; opt.lr is the lr of the last step.
 */
#include "trainer/model_ops.h"

#include <stdlib.h>

#include "common/xalloc.h"
#include "trainer/optim.h"

struct cpu_inst {
    struct model_inst base; /* first: a struct model_inst * is a struct cpu_inst * */
    struct model *m;        /* owned */
    struct optim opt;
};

static struct cpu_inst *cpu_of(struct model_inst *mi)
{
    return (struct cpu_inst *)mi;
}

static const struct cpu_inst *cpu_of_const(const struct model_inst *mi)
{
    return (const struct cpu_inst *)mi;
}

static size_t cpu_param_count(const struct model_inst *mi)
{
    return model_param_count(cpu_of_const(mi)->m);
}

static int cpu_tensor_count(const struct model_inst *mi)
{
    return model_tensor_count(cpu_of_const(mi)->m);
}

static size_t cpu_tensor_size(const struct model_inst *mi, int t)
{
    return model_tensor_size(cpu_of_const(mi)->m, t);
}

/* Layer l's tensors are W_l (2l) and b_l (2l+1). */
static void cpu_layer_tensors(const struct model_inst *mi, int layer, int *first, int *count)
{
    (void)mi;
    *first = 2 * layer;
    *count = 2;
}

static float *cpu_params(struct model_inst *mi)
{
    return model_params(cpu_of(mi)->m);
}

static float *cpu_momentum(struct model_inst *mi)
{
    return cpu_of(mi)->opt.buf;
}

static void cpu_release_state(struct model_inst *mi)
{
    optim_release(&cpu_of(mi)->opt);
}

static void cpu_set_forward_hooks(struct model_inst *mi, const struct model_hooks *fwd)
{
    model_set_forward_hooks(cpu_of(mi)->m, fwd);
}

static void cpu_bind_grads(struct model_inst *mi, float *const *grads)
{
    model_bind_grads(cpu_of(mi)->m, grads);
}

static int cpu_sync(struct model_inst *mi, struct ddp_err *err)
{
    (void)mi;
    (void)err;
    return 0;
}

static int cpu_forward(struct model_inst *mi, const float *x, const uint8_t *y, size_t n,
                       double *loss_sum, struct ddp_err *err)
{
    return model_forward(cpu_of(mi)->m, x, y, n, loss_sum, err);
}

static int cpu_backward(struct model_inst *mi, const struct model_hooks *hooks, struct ddp_err *err)
{
    return model_backward(cpu_of(mi)->m, hooks, err);
}

static int cpu_count_correct(struct model_inst *mi, const float *x, const uint8_t *y, size_t n,
                             size_t *correct, struct ddp_err *err)
{
    (void)err;
    *correct = model_count_correct(cpu_of(mi)->m, x, y, n);
    return 0;
}

static int cpu_step(struct model_inst *mi, float lr, float grad_scale, struct ddp_err *err)
{
    (void)err;
    struct cpu_inst *c = cpu_of(mi);
    c->opt.lr = lr;
    optim_step(&c->opt, c->m, grad_scale);
    return 0;
}

static void cpu_free(struct model_inst *mi)
{
    if (!mi)
        return;
    struct cpu_inst *c = cpu_of(mi);
    optim_release(&c->opt);
    model_free(c->m);
    free(c);
}

static const struct model_ops cpu_ops = {
    .name = "cpu",
    .param_count = cpu_param_count,
    .tensor_count = cpu_tensor_count,
    .tensor_size = cpu_tensor_size,
    .layer_tensors = cpu_layer_tensors,
    .params = cpu_params,
    .momentum = cpu_momentum,
    .release_state = cpu_release_state,
    .bind_grads = cpu_bind_grads,
    .set_forward_hooks = cpu_set_forward_hooks,
    .sync_to_device = cpu_sync,
    .sync_to_host = cpu_sync,
    .forward = cpu_forward,
    .backward = cpu_backward,
    .count_correct = cpu_count_correct,
    .step = cpu_step,
    .free = cpu_free,
    .close_device = NULL,
};

struct model_inst *model_inst_cpu_new(struct model *m, float momentum, float weight_decay)
{
    struct cpu_inst *c = xcalloc(1, sizeof(*c));
    c->base.ops = &cpu_ops;
    c->m = m;
    optim_init(&c->opt, m, 0.0f, momentum, weight_decay);
    return &c->base;
}
