/*
 * adamw.c - the AdamW update in the order of torch's single-tensor implementation, so that
 * float rounding follows it closely.
 */
#include "trainer/adamw.h"

#include <math.h>
#include <stdlib.h>

#include "common/xalloc.h"
#include "trainer/simd.h"

void adamw_init(struct adamw *a, size_t n, float beta1, float beta2, float eps, float weight_decay)
{
    a->lr = 0.0f;
    a->beta1 = beta1;
    a->beta2 = beta2;
    a->eps = eps;
    a->weight_decay = weight_decay;
    a->t = 0;
    a->n = n;
    a->state = xcalloc(2 * (n ? n : 1), sizeof(float));
}

void adamw_release(struct adamw *a)
{
    if (!a)
        return;
    free(a->state);
    a->state = NULL;
    a->n = 0;
}

void adamw_begin(struct adamw *a, struct adamw_coef *c)
{
    a->t++;
    double bc1 = 1.0 - pow((double)a->beta1, (double)a->t);
    double bc2 = 1.0 - pow((double)a->beta2, (double)a->t);
    c->step_size = (float)((double)a->lr / bc1);
    c->bc2_sqrt = (float)sqrt(bc2);
    c->decay = 1.0f - a->lr * a->weight_decay;
}

DDP_SIMD_CLONES void adamw_update(const struct adamw *a, const struct adamw_coef *c, float *p,
                                  float *m, float *v, const float *g, size_t n, float grad_scale)
{
    float b1 = a->beta1, b2 = a->beta2, eps = a->eps;
    float decay = c->decay, step_size = c->step_size, bc2_sqrt = c->bc2_sqrt;
    for (size_t i = 0; i < n; i++) {
        float gi = g[i] * grad_scale;
        p[i] *= decay;
        m[i] = b1 * m[i] + (1.0f - b1) * gi;
        v[i] = b2 * v[i] + (1.0f - b2) * gi * gi;
        float denom = sqrtf(v[i]) / bc2_sqrt + eps;
        p[i] -= step_size * (m[i] / denom);
    }
}

void adamw_step_tensors(struct adamw *a, float *params, int ntensors, const size_t *off,
                        const size_t *size, float *const *grads, float grad_scale)
{
    struct adamw_coef c;
    adamw_begin(a, &c);
    for (int k = 0; k < ntensors; k++)
        adamw_update(a, &c, params + off[k], a->state + off[k], a->state + a->n + off[k], grads[k],
                     size[k], grad_scale);
}
