/*
 * model_cnn.c - the CNN's spec, memory and passes, layer by layer over trainer/conv.c,
 * pool.c and dense.c.
 *
 * Memory: params (one block, definition order), own_grads (one block, used while no views
 * are bound), out[i] the output of layer i for max_batch samples (after its ReLU where it
 * has one), arg[i] a pool's argmax indices, one im2col buffer (the largest conv's), and two
 * gradient buffers of max_batch x the largest layer output.
 * Invariants:
 *   1. out[i] = layer_i(in(i)) where in(0) is the caller's x and in(i) = out[i-1];
 *   2. after cnn_forward, out[last] holds the softmax probabilities and n > 0;
 *   3. parameter layer l's tensors are 2l and 2l+1 at off[], size[] in params.
 */
#include "trainer/model_cnn.h"

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "ddp/ckpt.h"
#include "ddp/rng.h"
#include "trainer/conv.h"
#include "trainer/dense.h"
#include "trainer/dropout.h"
#include "trainer/pool.h"

struct cnn_layer {
    enum cnn_kind kind;
    struct conv2d conv;
    struct conv2d_dnnl *dnnl; /* CNN_CONV on oneDNN, or NULL: im2col */
    struct pool2d pool;
    int fin, fout;    /* CNN_FC */
    int relu;         /* 1: a ReLU follows */
    int pl;           /* parameter layer, -1 for a pool */
    size_t out_count; /* floats per sample */
};

struct cnn {
    struct cnn_spec spec;
    size_t max_batch;
    int nl;
    struct cnn_layer layer[CNN_MAX_LAYERS];
    size_t nparams;
    float *params, *own_grads;
    size_t off[2 * CNN_MAX_LAYERS], size[2 * CNN_MAX_LAYERS];
    float *grad[2 * CNN_MAX_LAYERS];
    float *out[CNN_MAX_LAYERS];
    int32_t *arg[CNN_MAX_LAYERS];
    float *col;
    float *dbuf[2];
    const float *x;
    const uint8_t *labels;
    size_t n;
    const struct model_hooks *fwd; /* cnn_set_forward_hooks (borrowed), or NULL */
    uint64_t *keys;                /* max_batch sample keys (cnn_set_dropout_keys) */
    int keys_set;                  /* keys are for the next forward */
    int dropped;                   /* the last forward dropped (its backward must too) */
};

/* Parses one "cNkK", "pM", "fN" or "dP" of len bytes at p. */
static int parse_layer(const char *spec, const char *p, size_t len, struct cnn_layer_spec *ls,
                       struct ddp_err *err)
{
    char part[32];
    if (len == 0 || len >= sizeof(part))
        return err_set(err, DDP_EINVAL, "--model: empty or overlong layer in '%s'", spec);
    memcpy(part, p, len);
    part[len] = '\0';
    char *end = NULL;
    long n = 0, k = 0;
    if (part[0] != 'c' && part[0] != 'p' && part[0] != 'f' && part[0] != 'd')
        return err_set(err, DDP_EINVAL,
                       "--model: layer '%s' of '%s' is not cNkK (conv), pM (max pool), fN "
                       "(linear) or dP (dropout)",
                       part, spec);
    if (part[0] == 'd') {
        double prob = part[1] >= '0' && part[1] <= '9' ? strtod(part + 1, &end) : -1.0;
        if (prob < 0.0 || *end != '\0' || !(prob > 0.0 && prob <= DROPOUT_MAX_P))
            return err_set(err, DDP_EINVAL,
                           "--model: dropout layer '%s' of '%s': want dP with 0 < P <= %.2f "
                           "(e.g. d0.5)",
                           part, spec, DROPOUT_MAX_P);
        ls->kind = CNN_DROP;
        ls->p = (float)prob;
        return 0;
    }
    if (part[1] < '0' || part[1] > '9')
        return err_set(err, DDP_EINVAL, "--model: layer '%s' of '%s' has no number", part, spec);
    n = strtol(part + 1, &end, 10);
    if (part[0] == 'c') {
        if (*end != 'k' || end[1] < '0' || end[1] > '9')
            return err_set(err, DDP_EINVAL, "--model: conv layer '%s' of '%s': want cNkK", part,
                           spec);
        k = strtol(end + 1, &end, 10);
    }
    if (*end != '\0')
        return err_set(err, DDP_EINVAL, "--model: trailing '%s' in layer '%s' of '%s'", end, part,
                       spec);
    long max = part[0] == 'c' ? CNN_MAX_CHANNELS : part[0] == 'p' ? CNN_IN_H : CNN_MAX_FEATURES;
    if (n < 1 || n > max)
        return err_set(err, DDP_EINVAL, "--model: layer '%s' of '%s': %ld is not in 1..%ld", part,
                       spec, n, max);
    if (part[0] == 'c' && (k < 1 || k > CNN_IN_H))
        return err_set(err, DDP_EINVAL, "--model: layer '%s' of '%s': kernel %ld is not in 1..%d",
                       part, spec, k, CNN_IN_H);
    ls->kind = part[0] == 'c' ? CNN_CONV : part[0] == 'p' ? CNN_POOL : CNN_FC;
    ls->n = (int)n;
    ls->k = (int)k;
    return 0;
}

/* The runtime layers of s (shapes checked), and the parameter count; 0 or DDP_EINVAL. */
static int build_layers(const struct cnn_spec *s, struct cnn_layer *L, uint64_t *nparams,
                        struct ddp_err *err)
{
    int c = CNN_IN_C, h = CNN_IN_H, w = CNN_IN_W, flat = 0, pl = 0;
    uint64_t np = 0;
    for (int i = 0; i < s->nlayers; i++) {
        const struct cnn_layer_spec *ls = &s->layer[i];
        struct cnn_layer *l = &L[i];
        memset(l, 0, sizeof(*l));
        l->kind = ls->kind;
        l->pl = -1;
        struct ddp_err e;
        if (ls->kind == CNN_DROP) { /* the shape it is given, unchanged */
            l->out_count = flat ? (size_t)flat : (size_t)c * (size_t)h * (size_t)w;
            continue;
        }
        if (ls->kind != CNN_FC && flat)
            return err_set(err, DDP_EINVAL,
                           "--model: layer %d of '%s' is a conv or pool after a linear layer",
                           i + 1, s->text);
        if (ls->kind == CNN_CONV) {
            if (conv2d_init(&l->conv, c, h, w, ls->n, ls->k, 1, ls->k / 2, &e) != 0)
                return err_set(err, DDP_EINVAL, "--model: layer %d of '%s': %s", i + 1, s->text,
                               e.msg);
            c = ls->n;
            h = l->conv.oh;
            w = l->conv.ow;
            l->relu = 1;
            l->pl = pl++;
            np += conv2d_weight_count(&l->conv) + (uint64_t)ls->n;
            l->out_count = conv2d_out_count(&l->conv);
        } else if (ls->kind == CNN_POOL) {
            if (pool2d_init(&l->pool, c, h, w, ls->n, &e) != 0)
                return err_set(err, DDP_EINVAL, "--model: layer %d of '%s': %s", i + 1, s->text,
                               e.msg);
            h = l->pool.oh;
            w = l->pool.ow;
            l->out_count = pool2d_out_count(&l->pool);
        } else {
            uint64_t fin = flat ? (uint64_t)flat : (uint64_t)c * (uint64_t)h * (uint64_t)w;
            if (fin > CNN_MAX_FEATURES)
                return err_set(err, DDP_EINVAL,
                               "--model: layer %d of '%s' has %" PRIu64 " inputs (max %d)", i + 1,
                               s->text, fin, CNN_MAX_FEATURES);
            l->fin = (int)fin;
            l->fout = ls->n;
            flat = ls->n;
            l->relu = i + 1 < s->nlayers;
            l->pl = pl++;
            np += (uint64_t)l->fin * (uint64_t)l->fout + (uint64_t)l->fout;
            l->out_count = (size_t)ls->n;
        }
        if (np > CKPT_MAX_BYTES / 8)
            return err_set(err, DDP_EINVAL,
                           "--model: '%s' has more parameters than a "
                           "checkpoint holds",
                           s->text);
    }
    *nparams = np;
    return 0;
}

int cnn_parse_spec(const char *spec, uint64_t memory, struct cnn_spec *out, struct ddp_err *err)
{
    struct cnn_spec s;
    memset(&s, 0, sizeof(s));
    if (strncmp(spec, "cnn:", 4) != 0)
        return err_set(err, DDP_EINVAL, "--model: want cnn:LAYER-LAYER-..., got '%s'", spec);
    size_t len = strlen(spec);
    if (len > CNN_MAX_SPEC)
        return err_set(err, DDP_EINVAL, "--model: spec longer than %d characters", CNN_MAX_SPEC);
    memcpy(s.text, spec, len + 1);
    const char *p = spec + 4;
    for (;;) {
        const char *dash = strchr(p, '-');
        size_t l = dash ? (size_t)(dash - p) : strlen(p);
        if (s.nlayers == CNN_MAX_LAYERS)
            return err_set(err, DDP_EINVAL, "--model: more than %d layers in '%s'", CNN_MAX_LAYERS,
                           spec);
        int rc = parse_layer(spec, p, l, &s.layer[s.nlayers], err);
        if (rc)
            return rc;
        s.nlayers++;
        if (!dash)
            break;
        p = dash + 1;
    }
    if (s.layer[s.nlayers - 1].kind != CNN_FC)
        return err_set(err, DDP_EINVAL, "--model: '%s' must end with a linear layer fN (N classes)",
                       spec);
    struct cnn_layer L[CNN_MAX_LAYERS];
    int rc = build_layers(&s, L, &s.nparams, err);
    if (rc)
        return rc;
    for (int i = 0; i < s.nlayers; i++)
        if (s.layer[i].kind == CNN_CONV || s.layer[i].kind == CNN_FC)
            s.nparam_layers++;
    s.classes = s.layer[s.nlayers - 1].n;
    /* Parameters, gradients, momentum and a checkpoint: as model_check_size. */
    if (s.nparams * 20 > memory)
        return err_set(err, DDP_EINVAL,
                       "--model: '%s' has %" PRIu64 " parameters and needs at least %" PRIu64
                       " bytes for parameters, gradients, momentum and a checkpoint; this machine "
                       "has %" PRIu64,
                       spec, s.nparams, s.nparams * 20, memory);
    *out = s;
    return 0;
}

int cnn_new(const struct cnn_spec *s, size_t max_batch, enum conv_impl impl, uint64_t seed,
            struct cnn **out, struct ddp_err *err)
{
    if (max_batch == 0 || max_batch > 65536)
        return err_set(err, DDP_EINVAL, "cnn: batch of %zu samples", max_batch);
    struct cnn *m = xcalloc(1, sizeof(*m));
    m->spec = *s;
    m->max_batch = max_batch;
    m->nl = s->nlayers;
    uint64_t np = 0;
    int rc = build_layers(s, m->layer, &np, err);
    if (rc) {
        free(m);
        return rc;
    }
    /* What a batch's activations take (each layer's output, a pool's argmax, two gradient
     * buffers of the largest, one im2col) beside the parameters' state: refused here when it
     * does not fit the machine, not an abort in a malloc. */
    uint64_t need = 5 * np, big = CNN_IN_C * CNN_IN_H * CNN_IN_W;
    for (int i = 0; i < m->nl; i++) {
        const struct cnn_layer *l = &m->layer[i];
        need += (uint64_t)max_batch * l->out_count * (l->kind == CNN_POOL ? 2 : 1);
        big = l->out_count > big ? l->out_count : big;
        if (l->kind == CNN_CONV)
            need += conv2d_col_count(&l->conv);
    }
    need = (need + 2 * (uint64_t)max_batch * big) * sizeof(float);
    if (need > model_memory_bytes()) {
        free(m);
        return err_set(err, DDP_EINVAL,
                       "--model: with batches of %zu samples (--batch-size) it needs %.1f GiB, "
                       "more than this machine's %.1f GiB",
                       max_batch, (double)need / 1073741824.0,
                       (double)model_memory_bytes() / 1073741824.0);
    }
    size_t total = 0, maxout = CNN_IN_C * CNN_IN_H * CNN_IN_W, maxcol = 1;
    for (int i = 0; i < m->nl; i++) {
        struct cnn_layer *l = &m->layer[i];
        if (l->out_count > maxout)
            maxout = l->out_count;
        m->out[i] = xmalloc(max_batch * l->out_count * sizeof(float));
        if (l->kind == CNN_POOL)
            m->arg[i] = xmalloc(max_batch * l->out_count * sizeof(int32_t));
        if (l->kind == CNN_CONV && conv2d_col_count(&l->conv) > maxcol)
            maxcol = conv2d_col_count(&l->conv);
        if (l->pl < 0)
            continue;
        size_t wsz =
            l->kind == CNN_CONV ? conv2d_weight_count(&l->conv) : (size_t)l->fin * (size_t)l->fout;
        size_t bsz = l->kind == CNN_CONV ? (size_t)l->conv.cout : (size_t)l->fout;
        m->off[2 * l->pl] = total;
        m->size[2 * l->pl] = wsz;
        total += wsz;
        m->off[2 * l->pl + 1] = total;
        m->size[2 * l->pl + 1] = bsz;
        total += bsz;
    }
    m->nparams = total;
    m->params = xmalloc(total * sizeof(float));
    m->own_grads = xcalloc(total, sizeof(float));
    for (int t = 0; t < 2 * s->nparam_layers; t++)
        m->grad[t] = m->own_grads + m->off[t];
    m->col = xmalloc(maxcol * sizeof(float));
    m->dbuf[0] = xmalloc(max_batch * maxout * sizeof(float));
    m->dbuf[1] = xmalloc(max_batch * maxout * sizeof(float));
    m->keys = xcalloc(max_batch, sizeof(uint64_t));
    for (int i = 0; i < m->nl; i++) {
        struct cnn_layer *l = &m->layer[i];
        if (l->kind != CNN_CONV || conv_impl_for(impl) != CONV_ONEDNN)
            continue;
        rc = conv2d_dnnl_new(&l->conv, &l->dnnl, err);
        if (rc) {
            cnn_free(m);
            return rc;
        }
    }

    struct rng r;
    rng_seed(&r, seed);
    for (int i = 0; i < m->nl; i++) {
        const struct cnn_layer *l = &m->layer[i];
        if (l->pl < 0)
            continue;
        size_t fan_in = l->kind == CNN_CONV ? conv2d_weight_count(&l->conv) / (size_t)l->conv.cout
                                            : (size_t)l->fin;
        float bound = 1.0f / sqrtf((float)fan_in);
        for (int k = 0; k < 2; k++) {
            float *p = m->params + m->off[2 * l->pl + k];
            for (size_t j = 0; j < m->size[2 * l->pl + k]; j++)
                p[j] = (2.0f * rng_uniform(&r) - 1.0f) * bound;
        }
    }
    *out = m;
    return 0;
}

void cnn_free(struct cnn *m)
{
    if (!m)
        return;
    for (int i = 0; i < m->nl; i++) {
        free(m->out[i]);
        free(m->arg[i]);
        conv2d_dnnl_free(m->layer[i].dnnl);
    }
    free(m->params);
    free(m->own_grads);
    free(m->col);
    free(m->dbuf[0]);
    free(m->dbuf[1]);
    free(m->keys);
    free(m);
}

const struct cnn_spec *cnn_spec_of(const struct cnn *m)
{
    return &m->spec;
}
size_t cnn_max_batch(const struct cnn *m)
{
    return m->max_batch;
}
size_t cnn_param_count(const struct cnn *m)
{
    return m->nparams;
}
int cnn_tensor_count(const struct cnn *m)
{
    return 2 * m->spec.nparam_layers;
}
size_t cnn_tensor_size(const struct cnn *m, int t)
{
    return m->size[t];
}
size_t cnn_tensor_offset(const struct cnn *m, int t)
{
    return m->off[t];
}
enum conv_impl cnn_conv_impl(const struct cnn *m, int i)
{
    return m->layer[i].dnnl ? CONV_ONEDNN : CONV_IM2COL;
}
size_t cnn_layer_out_count(const struct cnn *m, int i)
{
    return m->layer[i].out_count;
}
float *cnn_params(struct cnn *m)
{
    return m->params;
}
float *cnn_grad(struct cnn *m, int t)
{
    return m->grad[t];
}

void cnn_bind_grads(struct cnn *m, float *const *grads)
{
    for (int t = 0; t < 2 * m->spec.nparam_layers; t++)
        m->grad[t] = grads[t];
}

/* Invariant 1 for n samples of x; out[last] holds the logits. */
static int forward_all(struct cnn *m, const float *x, size_t n, struct ddp_err *err)
{
    const float *in = x;
    for (int i = 0; i < m->nl; i++) {
        struct cnn_layer *l = &m->layer[i];
        float *o = m->out[i];
        if (l->pl >= 0 && m->fwd && m->fwd->layer_begin)
            m->fwd->layer_begin(m->fwd->ctx, l->pl);
        const float *W = l->pl >= 0 ? m->params + m->off[2 * l->pl] : NULL;
        const float *b = l->pl >= 0 ? m->params + m->off[2 * l->pl + 1] : NULL;
        if (l->kind == CNN_CONV && l->dnnl) {
            int rc = conv2d_dnnl_forward(l->dnnl, in, n, W, b, o, err);
            if (rc)
                return rc;
        } else if (l->kind == CNN_CONV) {
            conv2d_forward(&l->conv, in, n, W, b, o, m->col);
        } else if (l->kind == CNN_POOL) {
            pool2d_forward(&l->pool, in, n, o, m->arg[i]);
        } else if (l->kind == CNN_DROP) {
            float p = m->dropped ? m->spec.layer[i].p : 0.0f;
            dropout_apply(o, in, n, l->out_count, m->keys, (uint32_t)i, 0, p);
        } else {
            linear_forward(in, n, l->fin, l->fout, W, b, o);
        }
        if (l->relu)
            relu_forward(o, n * l->out_count);
        in = o;
    }
    return 0;
}

void cnn_set_forward_hooks(struct cnn *m, const struct model_hooks *fwd)
{
    m->fwd = fwd;
}

void cnn_set_dropout_keys(struct cnn *m, const uint64_t *keys, size_t n)
{
    memcpy(m->keys, keys, (n < m->max_batch ? n : m->max_batch) * sizeof(uint64_t));
    m->keys_set = 1;
}

int cnn_forward(struct cnn *m, const float *x, const uint8_t *y, size_t n, double *loss_sum,
                struct ddp_err *err)
{
    if (n == 0 || n > m->max_batch)
        return err_set(err, DDP_EINVAL, "cnn: batch of %zu samples (max %zu)", n, m->max_batch);
    for (size_t i = 0; i < n; i++)
        if (y[i] >= m->spec.classes)
            return err_set(err, DDP_EINVAL, "cnn: label %d is not below %d outputs", y[i],
                           m->spec.classes);
    m->dropped = m->keys_set;
    m->keys_set = 0;
    int rc = forward_all(m, x, n, err);
    if (rc) {
        m->n = 0;
        return rc;
    }
    *loss_sum = softmax_xent_forward(m->out[m->nl - 1], y, n, m->spec.classes);
    m->x = x;
    m->labels = y;
    m->n = n;
    return 0;
}

int cnn_backward(struct cnn *m, const struct model_hooks *hooks, struct ddp_err *err)
{
    if (m->n == 0)
        return err_set(err, DDP_EINVAL, "cnn: backward without a forward");
    size_t n = m->n;
    float *d = m->dbuf[0], *dx = m->dbuf[1];
    softmax_xent_backward(m->out[m->nl - 1], m->labels, n, m->spec.classes, d);
    for (int i = m->nl - 1; i >= 0; i--) {
        struct cnn_layer *l = &m->layer[i];
        const float *in = i > 0 ? m->out[i - 1] : m->x;
        float *dxi = i > 0 ? dx : NULL; /* the input's gradient is needed only inside */
        if (l->pl >= 0 && hooks && hooks->layer_begin)
            hooks->layer_begin(hooks->ctx, l->pl);
        const float *W = l->pl >= 0 ? m->params + m->off[2 * l->pl] : NULL;
        if (l->kind == CNN_CONV && l->dnnl) {
            int rc = conv2d_dnnl_backward_params(l->dnnl, in, n, d, m->grad[2 * l->pl],
                                                 m->grad[2 * l->pl + 1], err);
            if (rc)
                return rc;
        } else if (l->kind == CNN_CONV)
            conv2d_backward_params(&l->conv, in, n, d, m->grad[2 * l->pl], m->grad[2 * l->pl + 1],
                                   m->col);
        else if (l->kind == CNN_FC)
            linear_backward_params(in, n, l->fin, l->fout, d, m->grad[2 * l->pl],
                                   m->grad[2 * l->pl + 1]);
        /* The layer's gradients are final: the reducer may send them while dx is computed. */
        if (l->pl >= 0 && hooks && hooks->layer_end) {
            int rc = hooks->layer_end(hooks->ctx, l->pl, err);
            if (rc)
                return rc;
        }
        if (dxi && l->kind == CNN_CONV && l->dnnl) {
            int rc = conv2d_dnnl_backward_input(l->dnnl, n, W, d, dxi, err);
            if (rc)
                return rc;
        } else if (dxi && l->kind == CNN_CONV)
            conv2d_backward_input(&l->conv, n, W, d, dxi, m->col);
        else if (dxi && l->kind == CNN_FC)
            linear_backward_input(n, l->fin, l->fout, W, d, dxi);
        else if (dxi && l->kind == CNN_DROP)
            dropout_apply(dxi, d, n, l->out_count, m->keys, (uint32_t)i, 0,
                          m->dropped ? m->spec.layer[i].p : 0.0f);
        else if (dxi)
            pool2d_backward(&l->pool, d, n, m->arg[i], dxi);
        if (i == 0)
            break;
        /* Through the previous layer's ReLU: its output is in. */
        if (m->layer[i - 1].relu)
            relu_backward(in, dx, n * m->layer[i - 1].out_count);
        float *tmp = d;
        d = dx;
        dx = tmp;
    }
    return 0;
}

int cnn_count_correct(struct cnn *m, const float *x, const uint8_t *y, size_t n, size_t *correct,
                      struct ddp_err *err)
{
    size_t hits = 0, dim = CNN_IN_C * CNN_IN_H * CNN_IN_W;
    int classes = m->spec.classes;
    m->dropped = 0; /* an evaluation: nothing drops */
    m->keys_set = 0;
    for (size_t start = 0; start < n; start += m->max_batch) {
        size_t k = n - start < m->max_batch ? n - start : m->max_batch;
        int rc = forward_all(m, x + start * dim, k, err);
        if (rc) {
            m->n = 0;
            return rc;
        }
        hits += dense_count_hits(m->out[m->nl - 1], k, classes, y + start);
    }
    m->n = 0; /* the activations no longer belong to a training forward */
    *correct = hits;
    return 0;
}
