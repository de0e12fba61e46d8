/*
 * model_ops_gpt.c - the GPT (trainer/model_gpt.h) on the CPU as a model instance
 * (trainer/model_ops.h), stepping with SGD (trainer/optim.c) or AdamW (trainer/adamw.c),
 * after global-norm clipping (trainer/gradclip.c) when asked.
 *
 * Invariants: the host state is the trained state (both syncs are no-ops); momentum() is
 * SGD's buffer (1 array) or AdamW's m and v (2 arrays); hook layer k's tensors are
 * gpt_layer_tensors(k).
 */
#include "trainer/model_ops.h"

#include <stdlib.h>

#include "common/xalloc.h"
#include "ddp/rng.h"
#include "trainer/adamw.h"
#include "trainer/dense.h"
#include "trainer/gradclip.h"
#include "trainer/model_gpt.h"
#include "trainer/optim.h"

#define GPT_INST_MAX_TENSORS (4 + GPT_TENSORS_PER_BLOCK * GPT_MAX_LAYERS)

struct gpt_inst {
    struct model_inst base; /* first: a struct model_inst * is a struct gpt_inst * */
    struct gpt *m;          /* owned */
    struct optim_cfg cfg;
    struct optim sgd;   /* when !cfg.adamw */
    struct adamw adamw; /* when cfg.adamw */
    int nt;
    size_t off[GPT_INST_MAX_TENSORS], size[GPT_INST_MAX_TENSORS];
};

static struct gpt_inst *gi_of(struct model_inst *mi)
{
    return (struct gpt_inst *)mi;
}

static const struct gpt_inst *gi_of_const(const struct model_inst *mi)
{
    return (const struct gpt_inst *)mi;
}

static size_t gi_param_count(const struct model_inst *mi)
{
    return gpt_param_count(gi_of_const(mi)->m);
}

static int gi_tensor_count(const struct model_inst *mi)
{
    return gi_of_const(mi)->nt;
}

static size_t gi_tensor_size(const struct model_inst *mi, int t)
{
    return gi_of_const(mi)->size[t];
}

static void gi_layer_tensors(const struct model_inst *mi, int layer, int *first, int *count)
{
    gpt_layer_tensors(gi_of_const(mi)->m, layer, first, count);
}

static float *gi_params(struct model_inst *mi)
{
    return gpt_params(gi_of(mi)->m);
}

static float *gi_state(struct model_inst *mi)
{
    struct gpt_inst *g = gi_of(mi);
    return g->cfg.adamw ? g->adamw.state : g->sgd.buf;
}

static int gi_state_arrays(const struct model_inst *mi)
{
    return gi_of_const(mi)->cfg.adamw ? 2 : 1;
}

static void gi_set_step(struct model_inst *mi, uint64_t step)
{
    gi_of(mi)->adamw.t = step;
}

static void gi_release_state(struct model_inst *mi)
{
    struct gpt_inst *g = gi_of(mi);
    optim_release(&g->sgd);
    adamw_release(&g->adamw);
}

static void gi_set_forward_hooks(struct model_inst *mi, const struct model_hooks *fwd)
{
    gpt_set_forward_hooks(gi_of(mi)->m, fwd);
}

static void gi_bind_grads(struct model_inst *mi, float *const *grads)
{
    gpt_bind_grads(gi_of(mi)->m, grads);
}

static int gi_sync(struct model_inst *mi, struct ddp_err *err)
{
    (void)mi;
    (void)err;
    return 0;
}

static void gi_set_sample_keys(struct model_inst *mi, const uint64_t *keys, size_t n)
{
    gpt_set_dropout_keys(gi_of(mi)->m, keys, n);
}

static int gi_forward(struct model_inst *mi, const float *x, const uint8_t *y, size_t n,
                      double *loss_sum, struct ddp_err *err)
{
    (void)x;
    return gpt_forward(gi_of(mi)->m, y, n, loss_sum, err);
}

static int gi_backward(struct model_inst *mi, const struct model_hooks *hooks, struct ddp_err *err)
{
    return gpt_backward(gi_of(mi)->m, hooks, err);
}

static int gi_evaluate(struct model_inst *mi, const float *x, const uint8_t *y, size_t n,
                       double *loss_sum, size_t *correct, struct ddp_err *err)
{
    (void)x;
    struct gpt *m = gi_of(mi)->m;
    int rc = gpt_forward(m, y, n, loss_sum, err);
    if (rc == 0)
        *correct = gpt_count_hits(m);
    return rc;
}

/* count_correct for a language model: the positions whose most likely next byte was right
 * (evaluate's second answer; the train loop calls evaluate). */
static int gi_count_correct(struct model_inst *mi, const float *x, const uint8_t *y, size_t n,
                            size_t *correct, struct ddp_err *err)
{
    double loss = 0.0;
    return gi_evaluate(mi, x, y, n, &loss, correct, err);
}

static int gi_step(struct model_inst *mi, float lr, float grad_scale, struct ddp_err *err)
{
    (void)err;
    struct gpt_inst *g = gi_of(mi);
    float *grads[GPT_INST_MAX_TENSORS];
    for (int t = 0; t < g->nt; t++)
        grads[t] = gpt_grad(g->m, t);
    if (g->cfg.clip_norm > 0.0f) {
        double norm = grad_global_norm(grads, g->size, g->nt, grad_scale);
        grad_scale *= grad_clip_factor(norm, (double)g->cfg.clip_norm);
    }
    if (g->cfg.adamw) {
        g->adamw.lr = lr;
        adamw_step_tensors(&g->adamw, gpt_params(g->m), g->nt, g->off, g->size, grads, grad_scale);
    } else {
        g->sgd.lr = lr;
        optim_step_tensors(&g->sgd, gpt_params(g->m), g->nt, g->off, g->size, grads, grad_scale);
    }
    return 0;
}

static void gi_generate(struct model_inst *mi, const uint8_t *prompt, size_t nprompt, size_t nnew,
                        uint64_t seed, uint8_t *out)
{
    struct rng r;
    rng_seed(&r, seed);
    gpt_generate(gi_of(mi)->m, prompt, nprompt, nnew, 1.0f, &r, out);
}

static void gi_free(struct model_inst *mi)
{
    if (!mi)
        return;
    struct gpt_inst *g = gi_of(mi);
    optim_release(&g->sgd);
    adamw_release(&g->adamw);
    gpt_free(g->m);
    free(g);
}

static const struct model_ops gpt_ops = {
    .name = "gpt-cpu",
    .param_count = gi_param_count,
    .tensor_count = gi_tensor_count,
    .tensor_size = gi_tensor_size,
    .layer_tensors = gi_layer_tensors,
    .params = gi_params,
    .momentum = gi_state,
    .release_state = gi_release_state,
    .state_arrays = gi_state_arrays,
    .set_step = gi_set_step,
    .bind_grads = gi_bind_grads,
    .set_forward_hooks = gi_set_forward_hooks,
    .sync_to_device = gi_sync,
    .sync_to_host = gi_sync,
    .forward = gi_forward,
    .backward = gi_backward,
    .count_correct = gi_count_correct,
    .step = gi_step,
    .evaluate = gi_evaluate,
    .set_sample_keys = gi_set_sample_keys,
    .generate = gi_generate,
    .free = gi_free,
    .close_device = NULL,
};

struct model_inst *model_inst_gpt_new(struct gpt *m, const struct optim_cfg *c)
{
    struct gpt_inst *g = xcalloc(1, sizeof(*g));
    g->base.ops = &gpt_ops;
    g->m = m;
    g->cfg = *c;
    g->nt = gpt_tensor_count(m);
    for (int t = 0; t < g->nt; t++) {
        g->off[t] = gpt_tensor_offset(m, t);
        g->size[t] = gpt_tensor_size(m, t);
    }
    size_t n = gpt_param_count(m);
    if (c->adamw)
        adamw_init(&g->adamw, n, c->beta1, c->beta2, c->eps, c->weight_decay);
    else
        optim_init_n(&g->sgd, n, 0.0f, c->momentum, c->weight_decay);
    return &g->base;
}
