/*
 * conv_dnnl.c - Conv2d as oneDNN's forward, backward-data and backward-weights primitives.
 *
 * A plan holds, for one batch size, the three primitives (each in the layouts oneDNN chose
 * for it, the backward ones hinted by the forward) and, per argument, the caller's memory
 * (its handle set per call) and, where oneDNN wants another layout, a memory of its own with
 * the reorder between the two. The backward-weights primitive shares the forward's
 * reordered input when both want the same layout, and backward-data the backward-weights'
 * reordered dy: a step then reorders x and dy once each.
 * Invariant: the functions read and write only the caller's memory and the layer's own.
 */
#include "trainer/conv_dnnl.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

enum conv_impl conv_impl_for(enum conv_impl impl)
{
    if (impl != CONV_AUTO)
        return impl;
    return conv2d_dnnl_available() ? CONV_ONEDNN : CONV_IM2COL;
}

const char *conv_impl_name(enum conv_impl impl)
{
    switch (impl) {
    case CONV_IM2COL:
        return "im2col";
    case CONV_ONEDNN:
        return "onednn";
    default:
        return "auto";
    }
}

#ifdef DDP_HAVE_DNNL

#include <oneapi/dnnl/dnnl.h>
#include <oneapi/dnnl/dnnl_debug.h>
#include <omp.h>

/* One argument of a primitive. */
struct arg {
    dnnl_memory_t user;       /* the caller's layout; its handle is set per call */
    dnnl_memory_t inner;      /* the primitive's layout, or NULL where it is the caller's */
    int shared;               /* inner is another argument's (not freed here) */
    dnnl_primitive_t reorder; /* user -> inner (an input), inner -> user (an output) */
};

struct plan {
    size_t n;           /* samples; 0: unused */
    unsigned long used; /* the layer's clock at its last use */
    dnnl_primitive_t fwd, bwd_w, bwd_d;
    struct arg f_src, f_w, f_b, f_dst;    /* forward */
    struct arg w_src, w_ddst, w_dw, w_db; /* backward weights */
    struct arg d_ddst, d_w, d_dsrc;       /* backward data */
    const float *src_of;  /* the x f_src.inner (and a shared w_src) holds, or NULL */
    const float *ddst_of; /* the dy w_ddst.inner (and a shared d_ddst) holds, or NULL */
};

struct conv2d_dnnl {
    struct conv2d c;
    dnnl_engine_t eng;
    dnnl_stream_t st;
    unsigned long clock;
    struct plan plan[CONV_DNNL_PLANS];
};

int conv2d_dnnl_available(void)
{
    return 1;
}

void conv2d_dnnl_set_threads(int n)
{
    omp_set_num_threads(n);
}

static int ck(dnnl_status_t s, const char *what, struct ddp_err *err)
{
    if (s == dnnl_success)
        return 0;
    return err_set(err, DDP_EINTERNAL, "oneDNN %s: %s", what, dnnl_status2str(s));
}

/* rc, with err's message led by the layer and the batch it was for (a CNN has several). */
static int named(const struct conv2d_dnnl *d, size_t n, int rc, struct ddp_err *err)
{
    if (rc == 0 || !err)
        return rc;
    char m[DDP_ERR_MSG_MAX];
    snprintf(m, sizeof m, "%s", err->msg);
    const struct conv2d *c = &d->c;
    return err_set(err, rc,
                   "conv2d %d -> %d channels on %dx%d, kernel %d, stride %d, batch %zu: %s", c->cin,
                   c->cout, c->h, c->w, c->k, c->stride, n, m);
}

static void arg_free(struct arg *a)
{
    if (a->reorder)
        dnnl_primitive_destroy(a->reorder);
    if (a->inner && !a->shared)
        dnnl_memory_destroy(a->inner);
    if (a->user)
        dnnl_memory_destroy(a->user);
    memset(a, 0, sizeof(*a));
}

static void plan_free(struct plan *p)
{
    if (p->fwd)
        dnnl_primitive_destroy(p->fwd);
    if (p->bwd_w)
        dnnl_primitive_destroy(p->bwd_w);
    if (p->bwd_d)
        dnnl_primitive_destroy(p->bwd_d);
    struct arg *args[] = {&p->f_src, &p->f_w,  &p->f_b,    &p->f_dst, &p->w_src, &p->w_ddst,
                          &p->w_dw,  &p->w_db, &p->d_ddst, &p->d_w,   &p->d_dsrc};
    for (size_t i = 0; i < sizeof(args) / sizeof(args[0]); i++)
        arg_free(args[i]);
    memset(p, 0, sizeof(*p));
}

/*
 * a for the primitive's layout want of a caller's tensor of layout user. share: an argument
 * whose own memory a may use (the same tensor, already reordered), or NULL.
 */
static int arg_make(struct conv2d_dnnl *d, struct arg *a, const dnnl_memory_desc_t *user,
                    const dnnl_memory_desc_t *want, int output, const struct arg *share,
                    struct ddp_err *err)
{
    int rc = ck(dnnl_memory_create(&a->user, user, d->eng, DNNL_MEMORY_NONE), "memory", err);
    if (rc || dnnl_memory_desc_equal(user, want))
        return rc;
    const dnnl_memory_desc_t *have = NULL;
    if (share && share->inner && dnnl_memory_get_memory_desc(share->inner, &have) == dnnl_success &&
        dnnl_memory_desc_equal(have, want)) {
        a->inner = share->inner;
        a->shared = 1;
    } else {
        rc = ck(dnnl_memory_create(&a->inner, want, d->eng, DNNL_MEMORY_ALLOCATE), "memory", err);
        if (rc)
            return rc;
    }
    dnnl_primitive_desc_t pd;
    rc = ck(output ? dnnl_reorder_primitive_desc_create(&pd, want, d->eng, user, d->eng, NULL)
                   : dnnl_reorder_primitive_desc_create(&pd, user, d->eng, want, d->eng, NULL),
            "reorder", err);
    if (rc)
        return rc;
    rc = ck(dnnl_primitive_create(&a->reorder, pd), "reorder", err);
    dnnl_primitive_desc_destroy(pd);
    return rc;
}

static dnnl_memory_t arg_mem(const struct arg *a)
{
    return a->inner ? a->inner : a->user;
}

static int reorder(struct conv2d_dnnl *d, const struct arg *a, int output, struct ddp_err *err)
{
    dnnl_exec_arg_t args[2] = {{DNNL_ARG_FROM, output ? a->inner : a->user},
                               {DNNL_ARG_TO, output ? a->user : a->inner}};
    return ck(dnnl_primitive_execute(a->reorder, d->st, 2, args), "reorder", err);
}

/* a's caller memory at p, reordered into the primitive's unless skip or not needed. */
static int arg_in(struct conv2d_dnnl *d, const struct arg *a, const float *p, int skip,
                  struct ddp_err *err)
{
    int rc = ck(dnnl_memory_set_data_handle(a->user, (void *)p), "memory", err);
    if (rc || !a->inner || skip)
        return rc;
    return reorder(d, a, 0, err);
}

static int arg_out(const struct arg *a, float *p, struct ddp_err *err)
{
    return ck(dnnl_memory_set_data_handle(a->user, p), "memory", err);
}

static int arg_out_done(struct conv2d_dnnl *d, const struct arg *a, struct ddp_err *err)
{
    return a->inner ? reorder(d, a, 1, err) : 0;
}

static const dnnl_memory_desc_t *md(const_dnnl_primitive_desc_t pd, dnnl_query_t what, int i)
{
    return dnnl_primitive_desc_query_md(pd, what, i);
}

static int plan_make(struct conv2d_dnnl *d, struct plan *p, size_t n, struct ddp_err *err)
{
    const struct conv2d *c = &d->c;
    dnnl_dims_t src = {(dnnl_dim_t)n, c->cin, c->h, c->w}, wei = {c->cout, c->cin, c->k, c->k};
    dnnl_dims_t bias = {c->cout}, dst = {(dnnl_dim_t)n, c->cout, c->oh, c->ow};
    dnnl_dims_t strides = {c->stride, c->stride}, pad_l = {c->pad, c->pad};
    /* torch drops what a stride leaves over at the bottom and right: oneDNN's right padding
     * is what the last output reaches, which may be less than pad */
    dnnl_dims_t pad_r = {(dnnl_dim_t)(c->oh - 1) * c->stride + c->k - c->h - c->pad,
                         (dnnl_dim_t)(c->ow - 1) * c->stride + c->k - c->w - c->pad};
    dnnl_memory_desc_t u_src, u_wei, u_bias, u_dst, a_src, a_wei, a_dst;
    dnnl_format_tag_t any = dnnl_format_tag_any;
    int rc = ck(dnnl_memory_desc_init_by_tag(&u_src, 4, src, dnnl_f32, dnnl_nchw), "desc", err);
    rc = rc ? rc
            : ck(dnnl_memory_desc_init_by_tag(&u_wei, 4, wei, dnnl_f32, dnnl_oihw), "desc", err);
    rc =
        rc ? rc : ck(dnnl_memory_desc_init_by_tag(&u_bias, 1, bias, dnnl_f32, dnnl_x), "desc", err);
    rc = rc ? rc
            : ck(dnnl_memory_desc_init_by_tag(&u_dst, 4, dst, dnnl_f32, dnnl_nchw), "desc", err);
    rc = rc ? rc : ck(dnnl_memory_desc_init_by_tag(&a_src, 4, src, dnnl_f32, any), "desc", err);
    rc = rc ? rc : ck(dnnl_memory_desc_init_by_tag(&a_wei, 4, wei, dnnl_f32, any), "desc", err);
    rc = rc ? rc : ck(dnnl_memory_desc_init_by_tag(&a_dst, 4, dst, dnnl_f32, any), "desc", err);
    if (rc)
        return rc;

    dnnl_convolution_desc_t fd, wd, dd;
    dnnl_primitive_desc_t fpd = NULL, wpd = NULL, dpd = NULL;
    rc = ck(dnnl_convolution_forward_desc_init(&fd, dnnl_forward_training, dnnl_convolution_direct,
                                               &a_src, &a_wei, &u_bias, &a_dst, strides, pad_l,
                                               pad_r),
            "forward", err);
    rc = rc ? rc : ck(dnnl_primitive_desc_create(&fpd, &fd, NULL, d->eng, NULL), "forward", err);
    rc = rc ? rc
            : ck(dnnl_convolution_backward_weights_desc_init(&wd, dnnl_convolution_direct, &a_src,
                                                             &a_wei, &u_bias, &a_dst, strides,
                                                             pad_l, pad_r),
                 "backward weights", err);
    rc = rc ? rc
            : ck(dnnl_primitive_desc_create(&wpd, &wd, NULL, d->eng, fpd), "backward weights", err);
    rc = rc ? rc
            : ck(dnnl_convolution_backward_data_desc_init(&dd, dnnl_convolution_direct, &a_src,
                                                          &a_wei, &a_dst, strides, pad_l, pad_r),
                 "backward data", err);
    rc = rc ? rc
            : ck(dnnl_primitive_desc_create(&dpd, &dd, NULL, d->eng, fpd), "backward data", err);
    rc = rc ? rc : ck(dnnl_primitive_create(&p->fwd, fpd), "forward", err);
    rc = rc ? rc : ck(dnnl_primitive_create(&p->bwd_w, wpd), "backward weights", err);
    rc = rc ? rc : ck(dnnl_primitive_create(&p->bwd_d, dpd), "backward data", err);

    rc = rc ? rc : arg_make(d, &p->f_src, &u_src, md(fpd, dnnl_query_src_md, 0), 0, NULL, err);
    rc = rc ? rc : arg_make(d, &p->f_w, &u_wei, md(fpd, dnnl_query_weights_md, 0), 0, NULL, err);
    rc = rc ? rc : arg_make(d, &p->f_b, &u_bias, md(fpd, dnnl_query_weights_md, 1), 0, NULL, err);
    rc = rc ? rc : arg_make(d, &p->f_dst, &u_dst, md(fpd, dnnl_query_dst_md, 0), 1, NULL, err);
    rc = rc ? rc : arg_make(d, &p->w_src, &u_src, md(wpd, dnnl_query_src_md, 0), 0, &p->f_src, err);
    rc =
        rc ? rc : arg_make(d, &p->w_ddst, &u_dst, md(wpd, dnnl_query_diff_dst_md, 0), 0, NULL, err);
    rc = rc ? rc
            : arg_make(d, &p->w_dw, &u_wei, md(wpd, dnnl_query_diff_weights_md, 0), 1, NULL, err);
    rc = rc ? rc
            : arg_make(d, &p->w_db, &u_bias, md(wpd, dnnl_query_diff_weights_md, 1), 1, NULL, err);
    rc = rc ? rc
            : arg_make(d, &p->d_ddst, &u_dst, md(dpd, dnnl_query_diff_dst_md, 0), 0, &p->w_ddst,
                       err);
    rc = rc ? rc : arg_make(d, &p->d_w, &u_wei, md(dpd, dnnl_query_weights_md, 0), 0, NULL, err);
    rc =
        rc ? rc : arg_make(d, &p->d_dsrc, &u_src, md(dpd, dnnl_query_diff_src_md, 0), 1, NULL, err);
    if (fpd)
        dnnl_primitive_desc_destroy(fpd);
    if (wpd)
        dnnl_primitive_desc_destroy(wpd);
    if (dpd)
        dnnl_primitive_desc_destroy(dpd);
    if (rc) {
        plan_free(p);
        return rc;
    }
    p->n = n;
    return 0;
}

/* The plan for n samples, made (in place of the one used longest ago) if there is none. */
static int plan_for(struct conv2d_dnnl *d, size_t n, struct plan **out, struct ddp_err *err)
{
    if (n == 0)
        return err_set(err, DDP_EINVAL, "conv2d (oneDNN): a batch of 0 samples");
    struct plan *oldest = &d->plan[0];
    for (int i = 0; i < CONV_DNNL_PLANS; i++) {
        struct plan *p = &d->plan[i];
        if (p->n == n) {
            p->used = ++d->clock;
            *out = p;
            return 0;
        }
        if (p->n == 0 || (oldest->n != 0 && p->used < oldest->used))
            oldest = p;
    }
    plan_free(oldest);
    int rc = plan_make(d, oldest, n, err);
    if (rc)
        return rc;
    oldest->used = ++d->clock;
    *out = oldest;
    return 0;
}

int conv2d_dnnl_new(const struct conv2d *c, struct conv2d_dnnl **out, struct ddp_err *err)
{
    struct conv2d_dnnl *d = xcalloc(1, sizeof(*d));
    d->c = *c;
    int rc = ck(dnnl_engine_create(&d->eng, dnnl_cpu, 0), "engine", err);
    rc = rc ? rc : ck(dnnl_stream_create(&d->st, d->eng, dnnl_stream_default_flags), "stream", err);
    if (rc) {
        conv2d_dnnl_free(d);
        return rc;
    }
    *out = d;
    return 0;
}

void conv2d_dnnl_free(struct conv2d_dnnl *d)
{
    if (!d)
        return;
    for (int i = 0; i < CONV_DNNL_PLANS; i++)
        plan_free(&d->plan[i]);
    if (d->st)
        dnnl_stream_destroy(d->st);
    if (d->eng)
        dnnl_engine_destroy(d->eng);
    free(d);
}

static int run(struct conv2d_dnnl *d, dnnl_primitive_t prim, const char *what, int nargs,
               const dnnl_exec_arg_t *args, struct ddp_err *err)
{
    return ck(dnnl_primitive_execute(prim, d->st, nargs, args), what, err);
}

static int do_forward(struct conv2d_dnnl *d, const float *x, size_t n, const float *W,
                      const float *b, float *y, struct ddp_err *err)
{
    struct plan *p = NULL;
    int rc = plan_for(d, n, &p, err);
    if (rc)
        return rc;
    p->src_of = NULL;
    p->ddst_of = NULL;
    rc = arg_in(d, &p->f_src, x, 0, err);
    rc = rc ? rc : arg_in(d, &p->f_w, W, 0, err);
    rc = rc ? rc : arg_in(d, &p->f_b, b, 0, err);
    rc = rc ? rc : arg_out(&p->f_dst, y, err);
    if (rc)
        return rc;
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, arg_mem(&p->f_src)},
                              {DNNL_ARG_WEIGHTS, arg_mem(&p->f_w)},
                              {DNNL_ARG_BIAS, arg_mem(&p->f_b)},
                              {DNNL_ARG_DST, arg_mem(&p->f_dst)}};
    rc = run(d, p->fwd, "forward", 4, args, err);
    rc = rc ? rc : arg_out_done(d, &p->f_dst, err);
    rc = rc ? rc : ck(dnnl_stream_wait(d->st), "forward", err);
    if (rc == 0)
        p->src_of = x;
    return rc;
}

int conv2d_dnnl_forward(struct conv2d_dnnl *d, const float *x, size_t n, const float *W,
                        const float *b, float *y, struct ddp_err *err)
{
    return named(d, n, do_forward(d, x, n, W, b, y, err), err);
}

static int do_backward_params(struct conv2d_dnnl *d, const float *x, size_t n, const float *dy,
                              float *dW, float *db, struct ddp_err *err)
{
    struct plan *p = NULL;
    int rc = plan_for(d, n, &p, err);
    if (rc)
        return rc;
    /* a shared w_src already holds the forward's reordered x */
    int have_src = p->w_src.shared && p->src_of == x;
    if (!have_src && p->w_src.shared)
        p->src_of = NULL; /* about to be overwritten with this x */
    p->ddst_of = NULL;
    rc = arg_in(d, &p->w_src, x, have_src, err);
    rc = rc ? rc : arg_in(d, &p->w_ddst, dy, 0, err);
    rc = rc ? rc : arg_out(&p->w_dw, dW, err);
    rc = rc ? rc : arg_out(&p->w_db, db, err);
    if (rc)
        return rc;
    dnnl_exec_arg_t args[] = {{DNNL_ARG_SRC, arg_mem(&p->w_src)},
                              {DNNL_ARG_DIFF_DST, arg_mem(&p->w_ddst)},
                              {DNNL_ARG_DIFF_WEIGHTS, arg_mem(&p->w_dw)},
                              {DNNL_ARG_DIFF_BIAS, arg_mem(&p->w_db)}};
    rc = run(d, p->bwd_w, "backward weights", 4, args, err);
    rc = rc ? rc : arg_out_done(d, &p->w_dw, err);
    rc = rc ? rc : arg_out_done(d, &p->w_db, err);
    rc = rc ? rc : ck(dnnl_stream_wait(d->st), "backward weights", err);
    if (rc == 0) {
        if (p->w_src.shared)
            p->src_of = x;
        p->ddst_of = dy;
    }
    return rc;
}

int conv2d_dnnl_backward_params(struct conv2d_dnnl *d, const float *x, size_t n, const float *dy,
                                float *dW, float *db, struct ddp_err *err)
{
    return named(d, n, do_backward_params(d, x, n, dy, dW, db, err), err);
}

static int do_backward_input(struct conv2d_dnnl *d, size_t n, const float *W, const float *dy,
                             float *dx, struct ddp_err *err)
{
    struct plan *p = NULL;
    int rc = plan_for(d, n, &p, err);
    if (rc)
        return rc;
    int have_ddst = p->d_ddst.shared && p->ddst_of == dy;
    rc = arg_in(d, &p->d_ddst, dy, have_ddst, err);
    if (!have_ddst && p->d_ddst.shared)
        p->ddst_of = NULL;
    rc = rc ? rc : arg_in(d, &p->d_w, W, 0, err);
    rc = rc ? rc : arg_out(&p->d_dsrc, dx, err);
    if (rc)
        return rc;
    dnnl_exec_arg_t args[] = {{DNNL_ARG_DIFF_DST, arg_mem(&p->d_ddst)},
                              {DNNL_ARG_WEIGHTS, arg_mem(&p->d_w)},
                              {DNNL_ARG_DIFF_SRC, arg_mem(&p->d_dsrc)}};
    rc = run(d, p->bwd_d, "backward data", 3, args, err);
    rc = rc ? rc : arg_out_done(d, &p->d_dsrc, err);
    return rc ? rc : ck(dnnl_stream_wait(d->st), "backward data", err);
}

int conv2d_dnnl_backward_input(struct conv2d_dnnl *d, size_t n, const float *W, const float *dy,
                               float *dx, struct ddp_err *err)
{
    return named(d, n, do_backward_input(d, n, W, dy, dx, err), err);
}

#else /* no oneDNN in this build */

struct conv2d_dnnl {
    int unused;
};

int conv2d_dnnl_available(void)
{
    return 0;
}

void conv2d_dnnl_set_threads(int n)
{
    (void)n;
}

static int not_built(struct ddp_err *err)
{
    return err_set(err, DDP_EINVAL,
                   "--conv onednn: this ddp-worker was built without oneDNN (libdnnl-dev)");
}

int conv2d_dnnl_new(const struct conv2d *c, struct conv2d_dnnl **out, struct ddp_err *err)
{
    (void)c;
    (void)out;
    return not_built(err);
}

void conv2d_dnnl_free(struct conv2d_dnnl *d)
{
    free(d);
}

int conv2d_dnnl_forward(struct conv2d_dnnl *d, const float *x, size_t n, const float *W,
                        const float *b, float *y, struct ddp_err *err)
{
    (void)d, (void)x, (void)n, (void)W, (void)b, (void)y;
    return not_built(err);
}

int conv2d_dnnl_backward_params(struct conv2d_dnnl *d, const float *x, size_t n, const float *dy,
                                float *dW, float *db, struct ddp_err *err)
{
    (void)d, (void)x, (void)n, (void)dy, (void)dW, (void)db;
    return not_built(err);
}

int conv2d_dnnl_backward_input(struct conv2d_dnnl *d, size_t n, const float *W, const float *dy,
                               float *dx, struct ddp_err *err)
{
    (void)d, (void)n, (void)W, (void)dy, (void)dx;
    return not_built(err);
}

#endif
