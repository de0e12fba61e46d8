/*
 * optim.c - the SGD update, tensor by tensor: parameters and momentum are in definition
 * order, gradients wherever the reducer put them (model_grad gives each tensor's view).
 */
#include "trainer/optim.h"

#include <stdlib.h>

#include "common/xalloc.h"

void optim_init(struct optim *o, const struct model *m, float lr, float momentum,
                float weight_decay)
{
    o->lr = lr;
    o->momentum = momentum;
    o->weight_decay = weight_decay;
    o->n = model_param_count(m);
    o->buf = xcalloc(o->n, sizeof(float));
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
    float lr = o->lr, mu = o->momentum, wd = o->weight_decay;
    for (int t = 0; t < model_tensor_count(m); t++) {
        size_t off = model_tensor_offset(m, t);
        size_t cnt = model_tensor_size(m, t);
        float *p = params + off;
        float *b = o->buf + off;
        const float *g = model_grad(m, t);
        for (size_t i = 0; i < cnt; i++) {
            float d = g[i] * grad_scale + wd * p[i];
            b[i] = mu * b[i] + d;
            p[i] -= lr * b[i];
        }
    }
}
