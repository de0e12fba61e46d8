/*
 * model_gpu.c - the MLP's forward and backward on the GPU (see model_gpu.h), written step
 * for step like trainer/model.c so the two agree to float rounding.
 *
 * Memory (device): params (one block), own_grads (unless views are bound), x (max_batch x
 * widths[0]), y (max_batch labels), actbuf[1..nlayers] (max_batch x widths[l]; the last one
 * holds the logits and then the probabilities), scratch[2] (max_batch x max width) for
 * dZ / dA.
 *
 * Each model holds a share of the kernels' state (mlp_kernels.h: the cuBLAS handle and the
 * loss scratch) from gpu_model_new() to gpu_model_free(), so the last model freed frees it,
 * before the caller's gpu_shutdown().
 */
#include "trainer/gpu/model_gpu.h"

#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "ddp/gpu.h"
#include "trainer/gpu/mlp_kernels.h"

struct gpu_model {
    int nlayers;
    int widths[MODEL_MAX_LAYERS + 1];
    size_t max_batch;
    size_t nparams;
    size_t off[2 * MODEL_MAX_LAYERS];
    size_t size[2 * MODEL_MAX_LAYERS];
    float *params;
    float *own_grads;
    float *grad[2 * MODEL_MAX_LAYERS];
    float *x;
    uint8_t *y;
    float *actbuf[MODEL_MAX_LAYERS + 1];
    float *scratch[2];
    size_t n;
    int kernels_held; /* a share of mlp_kernels_acquire(), given back by gpu_model_free() */
};

int gpu_model_new(const int *widths, int nwidths, size_t max_batch, const float *params,
                  struct gpu_model **out, struct ddp_err *err)
{
    if (nwidths < 2 || nwidths > MODEL_MAX_LAYERS + 1)
        return err_set(err, DDP_EINVAL, "model: %d widths (want 2..%d)", nwidths,
                       MODEL_MAX_LAYERS + 1);
    struct gpu_model *m = xcalloc(1, sizeof(*m));
    int ret = 0;
    size_t maxw = 0;
    m->nlayers = nwidths - 1;
    m->max_batch = max_batch;
    for (int i = 0; i < nwidths; i++) {
        m->widths[i] = widths[i];
        maxw = (size_t)widths[i] > maxw ? (size_t)widths[i] : maxw;
    }
    size_t total = model_layout(m->widths, m->nlayers, m->off, m->size);
    m->nparams = total;
    if ((ret = mlp_kernels_acquire(err)) < 0)
        goto fail;
    m->kernels_held = 1;
    if ((ret = gpu_alloc((void **)&m->params, total * sizeof(float), err)) < 0 ||
        (ret = gpu_alloc((void **)&m->own_grads, total * sizeof(float), err)) < 0 ||
        (ret = gpu_alloc((void **)&m->x, max_batch * (size_t)widths[0] * sizeof(float), err)) < 0 ||
        (ret = gpu_alloc((void **)&m->y, max_batch, err)) < 0 ||
        (ret = gpu_alloc((void **)&m->scratch[0], max_batch * maxw * sizeof(float), err)) < 0 ||
        (ret = gpu_alloc((void **)&m->scratch[1], max_batch * maxw * sizeof(float), err)) < 0)
        goto fail;
    for (int l = 1; l <= m->nlayers; l++)
        if ((ret = gpu_alloc((void **)&m->actbuf[l], max_batch * (size_t)widths[l] * sizeof(float),
                             err)) < 0)
            goto fail;
    for (int t = 0; t < 2 * m->nlayers; t++)
        m->grad[t] = m->own_grads + m->off[t];
    if ((ret = gpu_to_device(m->params, params, total * sizeof(float), err)) < 0)
        goto fail;
    *out = m;
    return 0;
fail:
    gpu_model_free(m);
    return ret;
}

void gpu_model_free(struct gpu_model *m)
{
    if (!m)
        return;
    gpu_free(m->params);
    gpu_free(m->own_grads);
    gpu_free(m->x);
    gpu_free(m->y);
    gpu_free(m->scratch[0]);
    gpu_free(m->scratch[1]);
    for (int l = 1; l <= m->nlayers; l++)
        gpu_free(m->actbuf[l]);
    if (m->kernels_held)
        mlp_kernels_release();
    free(m);
}

size_t gpu_model_param_count(const struct gpu_model *m)
{
    return m->nparams;
}
int gpu_model_tensor_count(const struct gpu_model *m)
{
    return 2 * m->nlayers;
}
size_t gpu_model_tensor_size(const struct gpu_model *m, int t)
{
    return m->size[t];
}
size_t gpu_model_tensor_offset(const struct gpu_model *m, int t)
{
    return m->off[t];
}
float *gpu_model_params(struct gpu_model *m)
{
    return m->params;
}
float *gpu_model_grad(struct gpu_model *m, int t)
{
    return m->grad[t];
}

void gpu_model_bind_grads(struct gpu_model *m, float *const *grads)
{
    for (int t = 0; t < 2 * m->nlayers; t++)
        m->grad[t] = grads[t];
}

/* Runs the layers over the n rows already in m->x; the last layer's logits end in
 * actbuf[nlayers]. */
static int forward_all(struct gpu_model *m, size_t n, struct ddp_err *err)
{
    const float *in = m->x;
    for (int l = 0; l < m->nlayers; l++) {
        int ret = gpu_linear_forward(in, m->params + m->off[2 * l], m->params + m->off[2 * l + 1],
                                     m->actbuf[l + 1], (int)n, m->widths[l], m->widths[l + 1],
                                     l < m->nlayers - 1, err);
        if (ret < 0)
            return ret;
        in = m->actbuf[l + 1];
    }
    return 0;
}

static int load_batch(struct gpu_model *m, const float *x, const uint8_t *y, size_t n,
                      struct ddp_err *err)
{
    int classes = m->widths[m->nlayers];
    if (n == 0 || n > m->max_batch)
        return err_set(err, DDP_EINVAL, "model: batch of %zu samples (max %zu)", n, m->max_batch);
    for (size_t i = 0; i < n; i++)
        if (y[i] >= classes)
            return err_set(err, DDP_EINVAL, "model: label %d is not below %d outputs", y[i],
                           classes);
    int ret = gpu_to_device(m->x, x, n * (size_t)m->widths[0] * sizeof(float), err);
    if (ret == 0)
        ret = gpu_to_device(m->y, y, n, err);
    return ret;
}

int gpu_model_forward(struct gpu_model *m, const float *x, const uint8_t *y, size_t n,
                      double *loss_sum, struct ddp_err *err)
{
    int ret = load_batch(m, x, y, n, err);
    if (ret == 0)
        ret = forward_all(m, n, err);
    if (ret == 0) {
        float *logits = m->actbuf[m->nlayers];
        /* Probabilities overwrite the logits; dZ of the last layer goes to scratch[0]. */
        ret = gpu_softmax_xent(logits, m->y, logits, m->scratch[0], (int)n, m->widths[m->nlayers],
                               loss_sum, err);
    }
    m->n = ret == 0 ? n : 0;
    return ret;
}

int gpu_model_backward(struct gpu_model *m, const struct model_hooks *hooks, struct ddp_err *err)
{
    if (m->n == 0)
        return err_set(err, DDP_EINVAL, "model: backward without a forward");
    int n = (int)m->n;
    float *dz = m->scratch[0], *da = m->scratch[1];
    for (int l = m->nlayers - 1; l >= 0; l--) {
        int in = m->widths[l], outw = m->widths[l + 1];
        const float *act = l == 0 ? m->x : m->actbuf[l];
        if (hooks && hooks->layer_begin)
            hooks->layer_begin(hooks->ctx, l);
        int ret = gpu_linear_backward_params(dz, act, m->grad[2 * l], m->grad[2 * l + 1], n, in,
                                             outw, err);
        if (ret < 0)
            return ret;
        if (hooks && hooks->layer_end && (ret = hooks->layer_end(hooks->ctx, l, err)) != 0)
            return ret;
        if (l > 0) {
            ret =
                gpu_linear_backward_input(dz, m->params + m->off[2 * l], act, da, n, in, outw, err);
            if (ret < 0)
                return ret;
            float *tmp = dz;
            dz = da;
            da = tmp;
        }
    }
    return 0;
}

int gpu_model_count_correct(struct gpu_model *m, const float *x, const uint8_t *y, size_t n,
                            size_t *correct, struct ddp_err *err)
{
    size_t total = 0;
    size_t dim = (size_t)m->widths[0];
    for (size_t start = 0; start < n; start += m->max_batch) {
        size_t k = n - start < m->max_batch ? n - start : m->max_batch;
        size_t hits = 0;
        int ret = load_batch(m, x + start * dim, y + start, k, err);
        if (ret == 0)
            ret = forward_all(m, k, err);
        if (ret == 0)
            ret = gpu_count_correct(m->actbuf[m->nlayers], m->y, (int)k, m->widths[m->nlayers],
                                    &hits, err);
        if (ret < 0)
            return ret;
        total += hits;
    }
    m->n = 0;
    *correct = total;
    return 0;
}

int gpu_model_sgd(struct gpu_model *m, float *mom, float lr, float mu, float wd,
                  struct ddp_err *err)
{
    for (int t = 0; t < 2 * m->nlayers; t++) {
        int ret = gpu_sgd(m->params + m->off[t], m->grad[t], mom + m->off[t], m->size[t], lr, mu,
                          wd, err);
        if (ret < 0)
            return ret;
    }
    return 0;
}
