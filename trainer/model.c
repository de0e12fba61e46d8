/*
 * model.c - the MLP's forward and backward passes, over trainer/dense.c's layers.
 *
 * Memory: params (one block, definition order), own_grads (one block, only when no views
 * are bound), act[0..nlayers] activation buffers of max_batch rows (act[0] points at the
 * caller's input during a step), and two scratch buffers for dZ/dA of max_batch x max
 * width. Invariants: act[l+1] = relu(act[l] W_l^T + b_l) for l < nlayers-1; act[nlayers]
 * holds the softmax probabilities after model_forward; grad_w/grad_b point at the current
 * gradient views.
 */
#include "trainer/model.h"

#include <math.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/args.h"
#include "common/xalloc.h"
#include "ddp/ckpt.h"
#include "ddp/rng.h"
#include "trainer/dense.h"

struct model {
    int nlayers;
    int widths[MODEL_MAX_LAYERS + 1];
    size_t max_batch;
    size_t nparams;
    float *params;
    float *own_grads;
    size_t off[2 * MODEL_MAX_LAYERS];
    size_t size[2 * MODEL_MAX_LAYERS];
    float *grad[2 * MODEL_MAX_LAYERS];
    const float *act[MODEL_MAX_LAYERS + 1];
    float *actbuf[MODEL_MAX_LAYERS + 1];
    float *scratch[2];
    const uint8_t *labels;
    size_t n;                      /* samples of the last forward, 0 if none */
    const struct model_hooks *fwd; /* model_set_forward_hooks (borrowed), or NULL */
};

uint64_t model_memory_bytes(void)
{
    long pages = sysconf(_SC_PHYS_PAGES), size = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || size <= 0)
        return UINT64_MAX; /* unknown: only the checkpoint bound applies */
    return (uint64_t)pages * (uint64_t)size;
}

/* Writes bytes as "12.0 GiB" (or MiB, TiB) into buf. */
static void model_fmt_bytes(uint64_t bytes, char *buf, size_t size)
{
    const char *unit[] = {"MiB", "GiB", "TiB", "PiB"};
    double v = (double)bytes / (1024.0 * 1024.0);
    int u = 0;
    while (v >= 1024.0 && u < 3) {
        v /= 1024.0;
        u++;
    }
    snprintf(buf, size, "%.1f %s", v, unit[u]);
}

int model_check_size(const char *spec, const int *widths, int nwidths, uint64_t memory,
                     struct ddp_err *err)
{
    uint64_t params = 0;
    for (int l = 0; l + 1 < nwidths; l++)
        params += (uint64_t)widths[l + 1] * (uint64_t)widths[l] + (uint64_t)widths[l + 1];
    /* Parameters, gradients and momentum, float32 each, and the checkpoint being written
     * (parameters and momentum again): the least a rank holds. */
    uint64_t need = params * 20;
    char needs[32], has[32];
    model_fmt_bytes(need, needs, sizeof(needs));
    if (ckpt_size_for(widths, nwidths) == 0)
        return err_set(err, DDP_EINVAL,
                       "--model: '%s' has %" PRIu64 " parameters (%s to train): more than a "
                       "checkpoint holds (%zu bytes)",
                       spec, params, needs, (size_t)CKPT_MAX_BYTES);
    if (need > memory) {
        model_fmt_bytes(memory, has, sizeof(has));
        return err_set(err, DDP_EINVAL,
                       "--model: '%s' has %" PRIu64 " parameters and needs at least %s for "
                       "parameters, gradients, momentum and a checkpoint; this machine has %s",
                       spec, params, needs, has);
    }
    return 0;
}

int model_parse_spec(const char *spec, int *widths, int *nwidths, struct ddp_err *err)
{
    if (strncmp(spec, "mlp:", 4) != 0)
        return err_set(err, DDP_EINVAL, "--model: want mlp:W0-W1-...-Wn, got '%s'", spec);
    const char *p = spec + 4;
    int n = 0;
    int w[MODEL_MAX_LAYERS + 1];
    for (;;) {
        const char *dash = strchr(p, '-');
        size_t l = dash ? (size_t)(dash - p) : strlen(p);
        char part[16];
        long v;
        if (n == MODEL_MAX_LAYERS + 1)
            return err_set(err, DDP_EINVAL, "--model: more than %d layers in '%s'",
                           MODEL_MAX_LAYERS, spec);
        if (l == 0 || l >= sizeof(part))
            return err_set(err, DDP_EINVAL, "--model: bad width in '%s'", spec);
        memcpy(part, p, l);
        part[l] = '\0';
        int rc = args_parse_long("--model width", part, 1, MODEL_MAX_WIDTH, &v, err);
        if (rc)
            return rc;
        w[n++] = (int)v;
        if (!dash)
            break;
        p = dash + 1;
    }
    if (n < 2)
        return err_set(err, DDP_EINVAL, "--model: want at least two widths in '%s'", spec);
    int rc = model_check_size(spec, w, n, model_memory_bytes(), err);
    if (rc)
        return rc;
    memcpy(widths, w, (size_t)n * sizeof(int));
    *nwidths = n;
    return 0;
}

int model_new(const int *widths, int nwidths, size_t max_batch, uint64_t seed, struct model **out,
              struct ddp_err *err)
{
    if (nwidths < 2 || nwidths > MODEL_MAX_LAYERS + 1)
        return err_set(err, DDP_EINVAL, "model: %d widths (want 2..%d)", nwidths,
                       MODEL_MAX_LAYERS + 1);
    if (max_batch == 0 || max_batch > (1u << 20))
        return err_set(err, DDP_EINVAL, "model: batch of %zu samples", max_batch);
    /* The activations of a batch (one buffer a layer, two scratch of the widest) beside the
     * parameters' state: what does not fit the machine is refused here, not an abort in a
     * malloc (widths are at most 2^24 each, the batch 2^20: no overflow). */
    uint64_t acts = 0, widest = 0, np = 0;
    for (int i = 0; i < nwidths; i++) {
        widest = (uint64_t)widths[i] > widest ? (uint64_t)widths[i] : widest;
        acts += i > 0 ? (uint64_t)widths[i] : 0;
        np += i > 0 ? ((uint64_t)widths[i - 1] + 1) * (uint64_t)widths[i] : 0;
    }
    uint64_t need = ((acts + 2 * widest) * (uint64_t)max_batch + 5 * np) * sizeof(float);
    if (need > model_memory_bytes())
        return err_set(err, DDP_EINVAL,
                       "--model: with batches of %zu samples (--batch-size, or the evaluation's) "
                       "it needs %.1f GiB, more than this machine's %.1f GiB",
                       max_batch, (double)need / 1073741824.0,
                       (double)model_memory_bytes() / 1073741824.0);
    struct model *m = xcalloc(1, sizeof(*m));
    m->nlayers = nwidths - 1;
    m->max_batch = max_batch;
    size_t maxw = 0;
    for (int i = 0; i < nwidths; i++) {
        m->widths[i] = widths[i];
        if ((size_t)widths[i] > maxw)
            maxw = (size_t)widths[i];
    }
    size_t total = model_layout(m->widths, m->nlayers, m->off, m->size);
    m->nparams = total;
    m->params = xmalloc(total * sizeof(float));
    m->own_grads = xcalloc(total, sizeof(float));
    for (int t = 0; t < 2 * m->nlayers; t++)
        m->grad[t] = m->own_grads + m->off[t];
    for (int l = 1; l <= m->nlayers; l++)
        m->actbuf[l] = xmalloc(max_batch * (size_t)widths[l] * sizeof(float));
    m->scratch[0] = xmalloc(max_batch * maxw * sizeof(float));
    m->scratch[1] = xmalloc(max_batch * maxw * sizeof(float));

    struct rng r;
    rng_seed(&r, seed);
    for (int l = 0; l < m->nlayers; l++) {
        float bound = 1.0f / sqrtf((float)widths[l]);
        for (int k = 0; k < 2; k++) {
            float *p = m->params + m->off[2 * l + k];
            for (size_t i = 0; i < m->size[2 * l + k]; i++)
                p[i] = (2.0f * rng_uniform(&r) - 1.0f) * bound;
        }
    }
    *out = m;
    return 0;
}

void model_free(struct model *m)
{
    if (!m)
        return;
    free(m->params);
    free(m->own_grads);
    for (int l = 1; l <= m->nlayers; l++)
        free(m->actbuf[l]);
    free(m->scratch[0]);
    free(m->scratch[1]);
    free(m);
}

int model_nlayers(const struct model *m)
{
    return m->nlayers;
}
const int *model_widths(const struct model *m)
{
    return m->widths;
}
size_t model_max_batch(const struct model *m)
{
    return m->max_batch;
}
size_t model_param_count(const struct model *m)
{
    return m->nparams;
}
int model_tensor_count(const struct model *m)
{
    return 2 * m->nlayers;
}
size_t model_tensor_size(const struct model *m, int t)
{
    return m->size[t];
}
size_t model_tensor_offset(const struct model *m, int t)
{
    return m->off[t];
}
int model_tensor_layer(int t)
{
    return t / 2;
}
float *model_params(struct model *m)
{
    return m->params;
}
float *model_grad(struct model *m, int t)
{
    return m->grad[t];
}

void model_bind_grads(struct model *m, float *const *grads)
{
    for (int t = 0; t < 2 * m->nlayers; t++)
        m->grad[t] = grads[t];
}

static void forward_all(struct model *m, const float *x, size_t n)
{
    m->act[0] = x;
    for (int l = 0; l < m->nlayers; l++) {
        float *z = m->actbuf[l + 1];
        if (m->fwd && m->fwd->layer_begin)
            m->fwd->layer_begin(m->fwd->ctx, l);
        linear_forward(m->act[l], n, m->widths[l], m->widths[l + 1], m->params + m->off[2 * l],
                       m->params + m->off[2 * l + 1], z);
        if (l < m->nlayers - 1)
            relu_forward(z, n * (size_t)m->widths[l + 1]);
        m->act[l + 1] = z;
    }
}

void model_set_forward_hooks(struct model *m, const struct model_hooks *fwd)
{
    m->fwd = fwd;
}

int model_forward(struct model *m, const float *x, const uint8_t *y, size_t n, double *loss_sum,
                  struct ddp_err *err)
{
    if (n == 0 || n > m->max_batch)
        return err_set(err, DDP_EINVAL, "model: batch of %zu samples (max %zu)", n, m->max_batch);
    int classes = m->widths[m->nlayers];
    for (size_t i = 0; i < n; i++)
        if (y[i] >= classes)
            return err_set(err, DDP_EINVAL, "model: label %d is not below %d outputs", y[i],
                           classes);
    forward_all(m, x, n);
    /* Softmax in place (stable), loss = logsumexp - logit[y]. */
    double sum = softmax_xent_forward(m->actbuf[m->nlayers], y, n, classes);
    m->labels = y;
    m->n = n;
    *loss_sum = sum;
    return 0;
}

int model_backward(struct model *m, const struct model_hooks *hooks, struct ddp_err *err)
{
    if (m->n == 0)
        return err_set(err, DDP_EINVAL, "model: backward without a forward");
    size_t n = m->n;
    int L = m->nlayers;
    int classes = m->widths[L];
    /* dZ_{L-1} = (softmax - onehot) / n: the gradient of the mean loss. */
    float *dz = m->scratch[0], *da = m->scratch[1];
    softmax_xent_backward(m->actbuf[L], m->labels, n, classes, dz);
    for (int l = L - 1; l >= 0; l--) {
        int in = m->widths[l], outw = m->widths[l + 1];
        if (hooks && hooks->layer_begin)
            hooks->layer_begin(hooks->ctx, l);
        /* dW_l = dZ^T A_l  [out x in], db_l = column sums of dZ */
        linear_backward_params(m->act[l], n, in, outw, dz, m->grad[2 * l], m->grad[2 * l + 1]);
        if (hooks && hooks->layer_end) {
            int rc = hooks->layer_end(hooks->ctx, l, err);
            if (rc)
                return rc;
        }
        if (l > 0) {
            /* dA_l = dZ W_l  [n x in], then through ReLU: zero where A_l == 0. */
            linear_backward_input(n, in, outw, m->params + m->off[2 * l], dz, da);
            relu_backward(m->act[l], da, n * (size_t)in);
            float *tmp = dz;
            dz = da;
            da = tmp;
        }
    }
    return 0;
}

size_t model_count_correct(struct model *m, const float *x, const uint8_t *y, size_t n)
{
    size_t correct = 0;
    int classes = m->widths[m->nlayers];
    size_t dim = (size_t)m->widths[0];
    for (size_t start = 0; start < n; start += m->max_batch) {
        size_t k = n - start < m->max_batch ? n - start : m->max_batch;
        forward_all(m, x + start * dim, k);
        correct += dense_count_hits(m->actbuf[m->nlayers], k, classes, y + start);
    }
    m->n = 0; /* the activations no longer belong to a training forward */
    return correct;
}
