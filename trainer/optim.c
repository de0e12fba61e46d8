/*
 * optim.c - the SGD update, tensor by tensor: parameters and momentum are in definition
 * order, gradients wherever the reducer put them (model_grad gives each tensor's view).
 */
#include "trainer/optim.h"

#include <stdlib.h>

#include "common/xalloc.h"

void optim_init_n(struct optim *o, size_t n, float lr, float momentum, float weight_decay)
{
    o->lr = lr;
    o->momentum = momentum;
    o->weight_decay = weight_decay;
    o->n = n;
    o->buf = xcalloc(n ? n : 1, sizeof(float));
}

void optim_init(struct optim *o, const struct model *m, float lr, float momentum,
                float weight_decay)
{
    optim_init_n(o, model_param_count(m), lr, momentum, weight_decay);
}

void optim_step_range(const struct optim *o, float *p, float *b, const float *g, size_t cnt,
                      float grad_scale)
{
    float lr = o->lr, mu = o->momentum, wd = o->weight_decay;
    for (size_t i = 0; i < cnt; i++) {
        float d = g[i] * grad_scale + wd * p[i];
        b[i] = mu * b[i] + d;
        p[i] -= lr * b[i];
    }
}

void optim_step_tensors(struct optim *o, float *params, int ntensors, const size_t *off,
                        const size_t *size, float *const *grads, float grad_scale)
{
    for (int t = 0; t < ntensors; t++)
        optim_step_range(o, params + off[t], o->buf + off[t], grads[t], size[t], grad_scale);
}

void optim_release(struct optim *o)
{
    if (!o)
        return;
    free(o->buf);
    o->buf = NULL;
    o->n = 0;
}

void optim_step(struct optim *o, struct model *m, float grad_scale)
{
    float *params = model_params(m);
    for (int t = 0; t < model_tensor_count(m); t++) {
        size_t off = model_tensor_offset(m, t);
        optim_step_range(o, params + off, o->buf + off, model_grad(m, t), model_tensor_size(m, t),
                         grad_scale);
    }
}
