/*
 * model_ops_gpu.c - the MLP on the GPU as a model instance (trainer/model_ops.h): the
 * compute is trainer/gpu/model_gpu.h's (forwarded by libddp/gpu/gpu_load.c to
 * libddpgpu.so), the step its gpu_model_sgd. Compiled only where CUDA was found.
 *
 * Invariants:
 *   1. Before the first sync_to_device there is no device state (gm and mom are NULL): the
 *      host mirror (a CPU model of the same widths, its gradients never bound, and a host
 *      momentum block) is all there is, and the resume writes into it.
 *   2. From then on the device holds the trained state; the mirror is stale until
 *      sync_to_host copies parameters and momentum back.
 *   3. The gradient views are the reducer's device memory; the device reducer averages
 *      them over the ranks itself, so a step's grad_scale is 1.
 */
#include "trainer/model_ops.h"

#include <stdlib.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "ddp/gpu.h"
#include "trainer/gpu/model_gpu.h"

struct gpu_inst {
    struct model_inst base; /* first: a struct model_inst * is a struct gpu_inst * */
    struct model *host;     /* owned: the mirror's parameters (and the widths) */
    float *host_mom;        /* owned: the mirror's momentum */
    float momentum, weight_decay;
    float *const *grads;  /* borrowed views for the device model, or NULL */
    struct gpu_model *gm; /* owned, NULL before the first sync_to_device */
    float *mom;           /* owned device momentum, NULL before it */
};

static struct gpu_inst *inst_of(struct model_inst *mi)
{
    return (struct gpu_inst *)mi;
}

static const struct gpu_inst *inst_of_const(const struct model_inst *mi)
{
    return (const struct gpu_inst *)mi;
}

static size_t inst_bytes(const struct gpu_inst *g)
{
    return model_param_count(g->host) * sizeof(float);
}

static size_t inst_param_count(const struct model_inst *mi)
{
    return model_param_count(inst_of_const(mi)->host);
}

static int inst_tensor_count(const struct model_inst *mi)
{
    return model_tensor_count(inst_of_const(mi)->host);
}

static size_t inst_tensor_size(const struct model_inst *mi, int t)
{
    return model_tensor_size(inst_of_const(mi)->host, t);
}

/* The same layout as the CPU model (model_layout): layer l's tensors are 2l and 2l+1. */
static void inst_layer_tensors(const struct model_inst *mi, int layer, int *first, int *count)
{
    (void)mi;
    *first = 2 * layer;
    *count = 2;
}

static float *inst_params(struct model_inst *mi)
{
    return model_params(inst_of(mi)->host);
}

static float *inst_momentum(struct model_inst *mi)
{
    return inst_of(mi)->host_mom;
}

static void inst_bind_grads(struct model_inst *mi, float *const *grads)
{
    struct gpu_inst *g = inst_of(mi);
    g->grads = grads;
    if (g->gm)
        gpu_model_bind_grads(g->gm, grads);
}

/* Invariant 1 -> 2: the device model from the mirror, or the mirror onto it. */
static int inst_sync_to_device(struct model_inst *mi, struct ddp_err *err)
{
    struct gpu_inst *g = inst_of(mi);
    size_t bytes = inst_bytes(g);
    int rc;
    if (g->gm) {
        rc = gpu_to_device(gpu_model_params(g->gm), model_params(g->host), bytes, err);
        if (rc == 0)
            rc = gpu_to_device(g->mom, g->host_mom, bytes, err);
        return rc;
    }
    rc = gpu_model_new(model_widths(g->host), model_nlayers(g->host) + 1, model_max_batch(g->host),
                       model_params(g->host), &g->gm, err);
    if (rc == 0)
        rc = gpu_alloc((void **)&g->mom, bytes, err);
    if (rc == 0)
        rc = gpu_to_device(g->mom, g->host_mom, bytes, err);
    if (rc)
        return rc;
    if (g->grads)
        gpu_model_bind_grads(g->gm, g->grads);
    log_info("training on GPU %d", gpu_device());
    return 0;
}

static int inst_sync_to_host(struct model_inst *mi, struct ddp_err *err)
{
    struct gpu_inst *g = inst_of(mi);
    if (!g->gm)
        return 0; /* invariant 1: the mirror is the state */
    size_t bytes = inst_bytes(g);
    int rc = gpu_to_host(model_params(g->host), gpu_model_params(g->gm), bytes, err);
    if (rc == 0)
        rc = gpu_to_host(g->host_mom, g->mom, bytes, err);
    return rc;
}

static int inst_forward(struct model_inst *mi, const float *x, const uint8_t *y, size_t n,
                        double *loss_sum, struct ddp_err *err)
{
    return gpu_model_forward(inst_of(mi)->gm, x, y, n, loss_sum, err);
}

static int inst_backward(struct model_inst *mi, const struct model_hooks *hooks,
                         struct ddp_err *err)
{
    return gpu_model_backward(inst_of(mi)->gm, hooks, err);
}

static int inst_count_correct(struct model_inst *mi, const float *x, const uint8_t *y, size_t n,
                              size_t *correct, struct ddp_err *err)
{
    return gpu_model_count_correct(inst_of(mi)->gm, x, y, n, correct, err);
}

static int inst_step(struct model_inst *mi, float lr, float grad_scale, struct ddp_err *err)
{
    struct gpu_inst *g = inst_of(mi);
    if (grad_scale != 1.0f)
        return err_set(err, DDP_EINTERNAL, "gpu step: gradients scaled by %g, not averaged",
                       (double)grad_scale);
    return gpu_model_sgd(g->gm, g->mom, lr, g->momentum, g->weight_decay, err);
}

static void inst_free(struct model_inst *mi)
{
    if (!mi)
        return;
    struct gpu_inst *g = inst_of(mi);
    gpu_model_free(g->gm);
    gpu_free(g->mom);
    free(g->host_mom);
    model_free(g->host);
    free(g);
}

static const struct model_ops gpu_inst_ops = {
    .name = "gpu",
    .param_count = inst_param_count,
    .tensor_count = inst_tensor_count,
    .tensor_size = inst_tensor_size,
    .layer_tensors = inst_layer_tensors,
    .params = inst_params,
    .momentum = inst_momentum,
    .bind_grads = inst_bind_grads,
    .sync_to_device = inst_sync_to_device,
    .sync_to_host = inst_sync_to_host,
    .forward = inst_forward,
    .backward = inst_backward,
    .count_correct = inst_count_correct,
    .step = inst_step,
    .free = inst_free,
    .close_device = gpu_shutdown,
};

struct model_inst *model_inst_gpu_new(struct model *m, float momentum, float weight_decay)
{
    struct gpu_inst *g = xcalloc(1, sizeof(*g));
    g->base.ops = &gpu_inst_ops;
    g->host = m;
    g->host_mom = xcalloc(model_param_count(m), sizeof(float));
    g->momentum = momentum;
    g->weight_decay = weight_decay;
    return &g->base;
}
