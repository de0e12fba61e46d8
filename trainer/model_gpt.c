/*
 * model_gpt.c - the GPT's spec, memory and passes, block by block over trainer/embedding.c,
 * layernorm.c, attention.c, gelu.c and dense.c (Linear, softmax cross-entropy).
 *
 * Memory (N = max_batch * T rows): params and own_grads (one block each, definition order);
 * per block the activations its backward needs (struct gpt_acts); the embedding's output,
 * the final LayerNorm's and the logits; scratch for the backward (the residual stream's
 * gradient and three row buffers). Invariants:
 *   1. after gpt_forward, acts of every block hold that forward's values for n windows, and
 *      logits the softmax probabilities of the n * T positions;
 *   2. tensor t lives at off[t], size[t] in params; its gradient at grad[t].
 */
#include "trainer/model_gpt.h"

#include <cblas.h>
#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"
#include "ddp/ckpt.h"
#include "trainer/attention.h"
#include "trainer/dense.h"
#include "trainer/dropout.h"
#include "trainer/embedding.h"
#include "trainer/gelu.h"
#include "trainer/layernorm.h"

#define GPT_MAX_TENSORS (4 + GPT_TENSORS_PER_BLOCK * GPT_MAX_LAYERS)

/* Offsets of a block's tensors from its first. */
enum { B_LN1W, B_LN1B, B_QKVW, B_QKVB, B_APW, B_APB, B_LN2W, B_LN2B, B_FCW, B_FCB, B_FPW, B_FPB };

struct gpt_acts {
    float *ln1, *ln1_mean, *ln1_rstd; /* [N x D], [N], [N] */
    float *qkv;                       /* [N x 3D] */
    float *att;                       /* [B x H x T x T] */
    float *atty;                      /* [N x D] */
    float *res2;                      /* x + attention, [N x D] */
    float *ln2, *ln2_mean, *ln2_rstd;
    float *fch, *fchg; /* [N x 4D] before and after the GELU */
    float *res3;       /* the block's output, [N x D] */
};

struct gpt {
    struct gpt_spec spec;
    size_t max_batch;
    int nt;
    size_t nparams;
    float *params, *own_grads;
    size_t off[GPT_MAX_TENSORS], size[GPT_MAX_TENSORS];
    float *grad[GPT_MAX_TENSORS];
    float *arena; /* every activation and scratch buffer below, one allocation */
    float *x0;    /* embedding output [N x D] */
    struct gpt_acts *acts;
    float *lnf, *lnf_mean, *lnf_rstd;
    float *logits; /* [N x 256], the probabilities after the forward */
    uint8_t *targets;
    float *dres, *dln, *d4, *d3, *dscratch;
    const uint8_t *tokens; /* the forward's windows */
    size_t n;              /* and their number */
    int t;                 /* positions used by the last pass (T, or fewer when generating) */
    const struct model_hooks *fwd; /* gpt_set_forward_hooks (borrowed), or NULL */
    float drop_p;                  /* gpt_set_dropout */
    uint64_t *keys;                /* max_batch sample keys (gpt_set_dropout_keys) */
    int keys_set;                  /* keys are for the next forward */
    int dropped;                   /* the last forward dropped (its backward must too) */
};

static uint64_t params_for(int L, int D, int T)
{
    uint64_t d = (uint64_t)D;
    uint64_t block =
        2 * d + 3 * d * d + 3 * d + d * d + d + 2 * d + 4 * d * d + 4 * d + 4 * d * d + d;
    return (uint64_t)GPT_VOCAB * d + (uint64_t)T * d + (uint64_t)L * block + 2 * d;
}

/* Floats of activations and scratch for batches of b windows. */
static uint64_t acts_for(const struct gpt_spec *s, uint64_t b)
{
    uint64_t n = b * (uint64_t)s->ctx, d = (uint64_t)s->width;
    uint64_t tt = b * (uint64_t)s->heads * (uint64_t)s->ctx * (uint64_t)s->ctx;
    uint64_t block = n * (d + 2 + 3 * d + d + d + d + 2 + 4 * d + 4 * d + d) + tt;
    return n * d + (uint64_t)s->layers * block + n * (d + 2) + n * GPT_VOCAB +
           n * (d + d + 4 * d + 3 * d) + 2 * (uint64_t)s->ctx * (uint64_t)s->ctx;
}

static int parse_int(const char *spec, const char **p, char stop, const char *what, long lo,
                     long hi, int *out, struct ddp_err *err)
{
    char *end = NULL;
    if (**p < '0' || **p > '9')
        return err_set(err, DDP_EINVAL, "--model: '%s': %s is not a number (want gpt:L-H-D-T)",
                       spec, what);
    long v = strtol(*p, &end, 10);
    if (*end != stop)
        return err_set(err, DDP_EINVAL, "--model: '%s': bad %s (want gpt:L-H-D-T)", spec, what);
    if (v < lo || v > hi)
        return err_set(err, DDP_EINVAL, "--model: '%s': %s %ld is not in %ld..%ld", spec, what, v,
                       lo, hi);
    *out = (int)v;
    *p = stop ? end + 1 : end;
    return 0;
}

int gpt_parse_spec(const char *spec, uint64_t memory, struct gpt_spec *out, struct ddp_err *err)
{
    struct gpt_spec s;
    memset(&s, 0, sizeof(s));
    if (strncmp(spec, "gpt:", 4) != 0)
        return err_set(err, DDP_EINVAL, "--model: '%s' is not gpt:L-H-D-T", spec);
    if (strlen(spec) > GPT_MAX_SPEC)
        return err_set(err, DDP_EINVAL, "--model: '%s' is longer than %d bytes", spec,
                       GPT_MAX_SPEC);
    const char *p = spec + 4;
    int rc = parse_int(spec, &p, '-', "layers", 1, GPT_MAX_LAYERS, &s.layers, err);
    if (rc == 0)
        rc = parse_int(spec, &p, '-', "heads", 1, GPT_MAX_HEADS, &s.heads, err);
    if (rc == 0)
        rc = parse_int(spec, &p, '-', "width", 1, GPT_MAX_WIDTH, &s.width, err);
    if (rc == 0)
        rc = parse_int(spec, &p, '\0', "context", 1, GPT_MAX_CTX, &s.ctx, err);
    if (rc)
        return rc;
    if (s.width % s.heads != 0)
        return err_set(err, DDP_EINVAL, "--model: '%s': width %d is not a multiple of %d heads",
                       spec, s.width, s.heads);
    s.nparams = params_for(s.layers, s.width, s.ctx);
    if (s.nparams * 20 > memory || s.nparams * 12 + 4096 > CKPT_MAX_BYTES)
        return err_set(err, DDP_EINVAL,
                       "--model: '%s' has %" PRIu64 " parameters: more than this machine's "
                       "%" PRIu64 " bytes of memory hold with their gradients, optimizer state "
                       "and checkpoint",
                       spec, s.nparams, memory);
    snprintf(s.text, sizeof(s.text), "%s", spec);
    *out = s;
    return 0;
}

/* The tensor layout of the header's comment. */
static void layout(struct gpt *m)
{
    const struct gpt_spec *s = &m->spec;
    size_t D = (size_t)s->width;
    size_t sizes[GPT_TENSORS_PER_BLOCK] = {D, D, 3 * D * D, 3 * D, D * D,     D,
                                           D, D, 4 * D * D, 4 * D, 4 * D * D, D};
    int t = 0;
    m->size[t++] = GPT_VOCAB * D;
    m->size[t++] = (size_t)s->ctx * D;
    for (int b = 0; b < s->layers; b++)
        for (int k = 0; k < GPT_TENSORS_PER_BLOCK; k++)
            m->size[t++] = sizes[k];
    m->size[t++] = D;
    m->size[t++] = D;
    m->nt = t;
    size_t off = 0;
    for (int i = 0; i < t; i++) {
        m->off[i] = off;
        off += m->size[i];
    }
    m->nparams = off;
}

static void init_params(struct gpt *m, uint64_t seed)
{
    struct rng r;
    rng_seed(&r, seed);
    const struct gpt_spec *s = &m->spec;
    float proj_std = 0.02f / sqrtf(2.0f * (float)s->layers);
    for (int t = 0; t < m->nt; t++) {
        float *p = m->params + m->off[t];
        size_t n = m->size[t];
        int k = t >= 2 && t < 2 + GPT_TENSORS_PER_BLOCK * s->layers
                    ? (t - 2) % GPT_TENSORS_PER_BLOCK
                    : -1;
        int is_ln_w = k == B_LN1W || k == B_LN2W || t == m->nt - 2;
        int is_bias = k == B_LN1B || k == B_QKVB || k == B_APB || k == B_LN2B || k == B_FCB ||
                      k == B_FPB || t == m->nt - 1;
        float std = (k == B_APW || k == B_FPW) ? proj_std : 0.02f;
        for (size_t i = 0; i < n; i++)
            p[i] = is_ln_w ? 1.0f : is_bias ? 0.0f : std * rng_normal(&r);
    }
}

/* Carves the arena into the buffers of the file comment. */
static void carve(struct gpt *m)
{
    const struct gpt_spec *s = &m->spec;
    size_t N = m->max_batch * (size_t)s->ctx, D = (size_t)s->width;
    size_t tt = m->max_batch * (size_t)s->heads * (size_t)s->ctx * (size_t)s->ctx;
    float *p = m->arena;
#define TAKE(ptr, count) \
    do {                 \
        (ptr) = p;       \
        p += (count);    \
    } while (0)
    TAKE(m->x0, N * D);
    for (int b = 0; b < s->layers; b++) {
        struct gpt_acts *a = &m->acts[b];
        TAKE(a->ln1, N * D);
        TAKE(a->ln1_mean, N);
        TAKE(a->ln1_rstd, N);
        TAKE(a->qkv, 3 * N * D);
        TAKE(a->att, tt);
        TAKE(a->atty, N * D);
        TAKE(a->res2, N * D);
        TAKE(a->ln2, N * D);
        TAKE(a->ln2_mean, N);
        TAKE(a->ln2_rstd, N);
        TAKE(a->fch, 4 * N * D);
        TAKE(a->fchg, 4 * N * D);
        TAKE(a->res3, N * D);
    }
    TAKE(m->lnf, N * D);
    TAKE(m->lnf_mean, N);
    TAKE(m->lnf_rstd, N);
    TAKE(m->logits, N * GPT_VOCAB);
    TAKE(m->dres, N * D);
    TAKE(m->dln, N * D);
    TAKE(m->d4, 4 * N * D);
    TAKE(m->d3, 3 * N * D);
    TAKE(m->dscratch, 2 * (size_t)s->ctx * (size_t)s->ctx);
#undef TAKE
}

int gpt_new(const struct gpt_spec *s, size_t max_batch, uint64_t seed, uint64_t memory,
            struct gpt **out, struct ddp_err *err)
{
    if (max_batch < 1 || max_batch > 65536)
        return err_set(err, DDP_EINVAL, "gpt: batch of %zu windows", max_batch);
    uint64_t nacts = acts_for(s, max_batch);
    if (nacts * 4 + s->nparams * 20 > memory)
        return err_set(err, DDP_EINVAL,
                       "--model %s: batches of %zu windows need %" PRIu64 " MiB of activations, "
                       "more than this machine's memory: use a smaller --batch-size",
                       s->text, max_batch, nacts * 4 >> 20);
    struct gpt *m = xcalloc(1, sizeof(*m));
    m->spec = *s;
    m->max_batch = max_batch;
    layout(m);
    m->params = xmalloc(m->nparams * sizeof(float));
    m->own_grads = xcalloc(m->nparams, sizeof(float));
    for (int t = 0; t < m->nt; t++)
        m->grad[t] = m->own_grads + m->off[t];
    m->acts = xcalloc((size_t)s->layers, sizeof(*m->acts));
    m->arena = xmalloc((size_t)nacts * sizeof(float));
    m->targets = xmalloc(max_batch * (size_t)s->ctx);
    m->keys = xcalloc(max_batch, sizeof(uint64_t));
    carve(m);
    init_params(m, seed);
    *out = m;
    return 0;
}

void gpt_free(struct gpt *m)
{
    if (!m)
        return;
    free(m->params);
    free(m->own_grads);
    free(m->acts);
    free(m->arena);
    free(m->targets);
    free(m->keys);
    free(m);
}

const struct gpt_spec *gpt_spec_of(const struct gpt *m)
{
    return &m->spec;
}

size_t gpt_param_count(const struct gpt *m)
{
    return m->nparams;
}

int gpt_tensor_count(const struct gpt *m)
{
    return m->nt;
}

size_t gpt_tensor_size(const struct gpt *m, int t)
{
    return m->size[t];
}

size_t gpt_tensor_offset(const struct gpt *m, int t)
{
    return m->off[t];
}

int gpt_hook_layers(const struct gpt *m)
{
    return m->spec.layers + 2;
}

void gpt_layer_tensors(const struct gpt *m, int layer, int *first, int *count)
{
    if (layer == 0) {
        *first = 0;
        *count = 2;
    } else if (layer <= m->spec.layers) {
        *first = 2 + GPT_TENSORS_PER_BLOCK * (layer - 1);
        *count = GPT_TENSORS_PER_BLOCK;
    } else {
        *first = 2 + GPT_TENSORS_PER_BLOCK * m->spec.layers;
        *count = 2;
    }
}

float *gpt_params(struct gpt *m)
{
    return m->params;
}

float *gpt_grad(struct gpt *m, int t)
{
    return m->grad[t];
}

void gpt_bind_grads(struct gpt *m, float *const *grads)
{
    for (int t = 0; t < m->nt; t++)
        m->grad[t] = grads[t];
}

static const float *tensor(const struct gpt *m, int t)
{
    return m->params + m->off[t];
}

static int block_tensor(const struct gpt *m, int b, int k)
{
    return 2 + GPT_TENSORS_PER_BLOCK * b + k;
}

static void add_into(float *y, const float *x, size_t cnt)
{
    for (size_t i = 0; i < cnt; i++)
        y[i] += x[i];
}

/* The forward through the final LayerNorm and the logits for b sequences of t <= T tokens
 * (stride bytes apart). */
/* Before hook layer k's forward reads its parameters (the tied head reads layer 0's again at
 * the end: a sharded path keeps that layer whole until its backward ends). */
static void fwd_begin(struct gpt *m, int k)
{
    if (m->fwd && m->fwd->layer_begin)
        m->fwd->layer_begin(m->fwd->ctx, k);
}

void gpt_set_forward_hooks(struct gpt *m, const struct model_hooks *fwd)
{
    m->fwd = fwd;
}

void gpt_set_dropout(struct gpt *m, float p)
{
    m->drop_p = p;
}

void gpt_set_dropout_keys(struct gpt *m, const uint64_t *keys, size_t n)
{
    memcpy(m->keys, keys, (n < m->max_batch ? n : m->max_batch) * sizeof(uint64_t));
    m->keys_set = 1;
}

/* Site of this forward or backward: p 0 (drops nothing) unless the forward dropped. */
static struct dropout_site site_of(const struct gpt *m, uint32_t site)
{
    struct dropout_site d = {m->keys, site, m->dropped ? m->drop_p : 0.0f};
    return d;
}

/* With m->dropped, the forward drops at every site (a training forward, t == T). */
static void forward_logits(struct gpt *m, const uint8_t *tokens, size_t b, int t, size_t stride)
{
    const struct gpt_spec *s = &m->spec;
    int D = s->width;
    size_t N = b * (size_t)t, per = (size_t)t * (size_t)D;
    float p = m->dropped ? m->drop_p : 0.0f;
    m->t = t;
    fwd_begin(m, 0);
    embedding_forward(tokens, b, t, stride, D, tensor(m, 0), tensor(m, 1), m->x0);
    dropout_apply(m->x0, m->x0, b, per, m->keys, GPT_DROP_EMB, 0, p);
    const float *x = m->x0;
    for (int l = 0; l < s->layers; l++) {
        struct gpt_acts *a = &m->acts[l];
        fwd_begin(m, l + 1);
#define W(k) tensor(m, block_tensor(m, l, (k)))
        layernorm_forward(x, N, D, W(B_LN1W), W(B_LN1B), a->ln1, a->ln1_mean, a->ln1_rstd);
        linear_forward(a->ln1, N, D, 3 * D, W(B_QKVW), W(B_QKVB), a->qkv);
        struct dropout_site att = site_of(m, GPT_DROP_SITE(l, GPT_DROP_ATT));
        attention_forward(a->qkv, b, t, D, s->heads, a->atty, a->att, &att, m->dscratch);
        linear_forward(a->atty, N, D, D, W(B_APW), W(B_APB), a->res2);
        dropout_apply(a->res2, a->res2, b, per, m->keys, GPT_DROP_SITE(l, GPT_DROP_ATT_OUT), 0, p);
        add_into(a->res2, x, N * (size_t)D);
        layernorm_forward(a->res2, N, D, W(B_LN2W), W(B_LN2B), a->ln2, a->ln2_mean, a->ln2_rstd);
        linear_forward(a->ln2, N, D, 4 * D, W(B_FCW), W(B_FCB), a->fch);
        gelu_forward(a->fch, a->fchg, N * 4 * (size_t)D);
        linear_forward(a->fchg, N, 4 * D, D, W(B_FPW), W(B_FPB), a->res3);
        dropout_apply(a->res3, a->res3, b, per, m->keys, GPT_DROP_SITE(l, GPT_DROP_MLP_OUT), 0, p);
        add_into(a->res3, a->res2, N * (size_t)D);
#undef W
        x = a->res3;
    }
    fwd_begin(m, s->layers + 1);
    layernorm_forward(x, N, D, tensor(m, m->nt - 2), tensor(m, m->nt - 1), m->lnf, m->lnf_mean,
                      m->lnf_rstd);
    /* logits [N x V] = lnf [N x D] wte^T (the tied head) */
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)N, GPT_VOCAB, D, 1.0f, m->lnf, D,
                tensor(m, 0), D, 0.0f, m->logits, GPT_VOCAB);
}

int gpt_forward(struct gpt *m, const uint8_t *tokens, size_t n, double *loss_sum,
                struct ddp_err *err)
{
    if (n == 0 || n > m->max_batch)
        return err_set(err, DDP_EINVAL, "gpt: batch of %zu windows (max %zu)", n, m->max_batch);
    int T = m->spec.ctx;
    size_t stride = (size_t)T + 1;
    m->dropped = m->keys_set && m->drop_p > 0.0f;
    m->keys_set = 0;
    forward_logits(m, tokens, n, T, stride);
    for (size_t s = 0; s < n; s++)
        memcpy(m->targets + s * (size_t)T, tokens + s * stride + 1, (size_t)T);
    double sum = softmax_xent_forward(m->logits, m->targets, n * (size_t)T, GPT_VOCAB);
    *loss_sum = sum / (double)T;
    m->tokens = tokens;
    m->n = n;
    return 0;
}

size_t gpt_count_hits(const struct gpt *m)
{
    return dense_count_hits(m->logits, m->n * (size_t)m->spec.ctx, GPT_VOCAB, m->targets);
}

static int hook_end(const struct model_hooks *h, int layer, struct ddp_err *err)
{
    return h && h->layer_end ? h->layer_end(h->ctx, layer, err) : 0;
}

static void hook_begin(const struct model_hooks *h, int layer)
{
    if (h && h->layer_begin)
        h->layer_begin(h->ctx, layer);
}

/* The gradient of a dropped output: dres dropped at site into out, or dres itself when
 * the forward did not drop. */
static const float *drop_grad(const struct gpt *m, uint32_t site, float *out)
{
    if (!m->dropped)
        return m->dres;
    size_t per = (size_t)m->spec.ctx * (size_t)m->spec.width;
    dropout_apply(out, m->dres, m->n, per, m->keys, site, 0, m->drop_p);
    return out;
}

int gpt_backward(struct gpt *m, const struct model_hooks *hooks, struct ddp_err *err)
{
    if (m->n == 0 || m->t != m->spec.ctx)
        return err_set(err, DDP_EINTERNAL, "gpt: backward without a training forward");
    const struct gpt_spec *s = &m->spec;
    int D = s->width, T = s->ctx, L = s->layers;
    size_t N = m->n * (size_t)T, ND = N * (size_t)D;
    int rc;
    /* Head and loss: dlogits = (p - onehot) / N in place; dwte = dlogits^T lnf (written);
     * dlnf = dlogits wte. */
    hook_begin(hooks, L + 1);
    softmax_xent_backward(m->logits, m->targets, N, GPT_VOCAB, m->logits);
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, GPT_VOCAB, D, (int)N, 1.0f, m->logits,
                GPT_VOCAB, m->lnf, D, 0.0f, m->grad[0], D);
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)N, D, GPT_VOCAB, 1.0f, m->logits,
                GPT_VOCAB, tensor(m, 0), D, 0.0f, m->dln, D);
    memset(m->dres, 0, ND * sizeof(float));
    const float *xlast = L > 0 ? m->acts[L - 1].res3 : m->x0;
    layernorm_backward(xlast, N, D, tensor(m, m->nt - 2), m->lnf_mean, m->lnf_rstd, m->dln, m->dres,
                       m->grad[m->nt - 2], m->grad[m->nt - 1]);
    if ((rc = hook_end(hooks, L + 1, err)) != 0)
        return rc;
    for (int l = L - 1; l >= 0; l--) {
        hook_begin(hooks, l + 1);
        struct gpt_acts *a = &m->acts[l];
        const float *x = l > 0 ? m->acts[l - 1].res3 : m->x0;
#define W(k) tensor(m, block_tensor(m, l, (k)))
#define G(k) m->grad[block_tensor(m, l, (k))]
        /* MLP: res3 = res2 + dropout(c_proj(gelu(c_fc(ln_2(res2))))); the dropped gradient
         * in d3, free until the attention's backward writes it */
        const float *dmlp = drop_grad(m, GPT_DROP_SITE(l, GPT_DROP_MLP_OUT), m->d3);
        linear_backward_params(a->fchg, N, 4 * D, D, dmlp, G(B_FPW), G(B_FPB));
        linear_backward_input(N, 4 * D, D, W(B_FPW), dmlp, m->d4);
        gelu_backward(a->fch, m->d4, m->d4, N * 4 * (size_t)D);
        linear_backward_params(a->ln2, N, D, 4 * D, m->d4, G(B_FCW), G(B_FCB));
        linear_backward_input(N, D, 4 * D, W(B_FCW), m->d4, m->dln);
        layernorm_backward(a->res2, N, D, W(B_LN2W), a->ln2_mean, a->ln2_rstd, m->dln, m->dres,
                           G(B_LN2W), G(B_LN2B));
        /* attention: res2 = x + dropout(c_proj(attn(c_attn(ln_1(x))))) */
        const float *datt = drop_grad(m, GPT_DROP_SITE(l, GPT_DROP_ATT_OUT), m->d3);
        linear_backward_params(a->atty, N, D, D, datt, G(B_APW), G(B_APB));
        linear_backward_input(N, D, D, W(B_APW), datt, m->dln);
        struct dropout_site att = site_of(m, GPT_DROP_SITE(l, GPT_DROP_ATT));
        attention_backward(a->qkv, a->att, m->dln, m->n, T, D, s->heads, &att, m->d3, m->dscratch);
        linear_backward_params(a->ln1, N, D, 3 * D, m->d3, G(B_QKVW), G(B_QKVB));
        linear_backward_input(N, D, 3 * D, W(B_QKVW), m->d3, m->dln);
        layernorm_backward(x, N, D, W(B_LN1W), a->ln1_mean, a->ln1_rstd, m->dln, m->dres, G(B_LN1W),
                           G(B_LN1B));
#undef W
#undef G
        if ((rc = hook_end(hooks, l + 1, err)) != 0)
            return rc;
    }
    hook_begin(hooks, 0);
    if (m->dropped)
        dropout_apply(m->dres, m->dres, m->n, (size_t)T * (size_t)D, m->keys, GPT_DROP_EMB, 0,
                      m->drop_p);
    memset(m->grad[1], 0, m->size[1] * sizeof(float));
    embedding_backward(m->tokens, m->n, T, (size_t)T + 1, D, m->dres, m->grad[0], m->grad[1]);
    return hook_end(hooks, 0, err);
}

void gpt_generate(struct gpt *m, const uint8_t *prompt, size_t nprompt, size_t nnew,
                  float temperature, struct rng *rng, uint8_t *out)
{
    int T = m->spec.ctx;
    uint8_t *ctx = xmalloc((size_t)T);
    m->dropped = 0; /* sampling is evaluation: nothing dropped */
    m->keys_set = 0;
    size_t have = nprompt < (size_t)T ? nprompt : (size_t)T;
    memcpy(ctx, prompt + nprompt - have, have);
    for (size_t i = 0; i < nnew; i++) {
        forward_logits(m, ctx, 1, (int)have, (size_t)T);
        const float *z = m->logits + (have - 1) * GPT_VOCAB;
        float mx = z[0];
        for (int v = 1; v < GPT_VOCAB; v++)
            mx = z[v] > mx ? z[v] : mx;
        double p[GPT_VOCAB], sum = 0.0;
        for (int v = 0; v < GPT_VOCAB; v++) {
            p[v] = exp((double)(z[v] - mx) / (double)temperature);
            sum += p[v];
        }
        double u = (double)rng_uniform(rng) * sum, acc = 0.0;
        int pick = GPT_VOCAB - 1;
        for (int v = 0; v < GPT_VOCAB; v++) {
            acc += p[v];
            if (u < acc) {
                pick = v;
                break;
            }
        }
        out[i] = (uint8_t)pick;
        if (have < (size_t)T) {
            ctx[have++] = (uint8_t)pick;
        } else {
            memmove(ctx, ctx + 1, (size_t)T - 1);
            ctx[T - 1] = (uint8_t)pick;
        }
    }
    m->n = 0; /* the activations are the generator's now: no backward */
    free(ctx);
}
