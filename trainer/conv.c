/*
 * conv.c - Conv2d as im2col + one sgemm a sample.
 *
 * For a sample, col [cin*k*k x oh*ow] holds in row (ci, ki, kj) and column (oi, oj) the input
 * x[ci][oi*stride - pad + ki][oj*stride - pad + kj] (0 outside the image), so that
 *   y = W col + b                 W seen as [cout x cin*k*k]
 *   dW = sum over samples dy col^T
 *   dcol = W^T dy, and dx is dcol scattered back (col2im, summing the overlaps).
 * Invariant: the functions read and write only the memory the caller passes.
 */
#include "trainer/conv.h"

#include <cblas.h>
#include <string.h>

int conv2d_init(struct conv2d *c, int cin, int h, int w, int cout, int k, int stride, int pad,
                struct ddp_err *err)
{
    if (cin <= 0 || h <= 0 || w <= 0 || cout <= 0 || k <= 0)
        return err_set(err, DDP_EINVAL,
                       "conv2d: sizes must be positive (cin %d, %dx%d, cout %d, "
                       "kernel %d)",
                       cin, h, w, cout, k);
    if (stride < 1 || pad < 0)
        return err_set(err, DDP_EINVAL, "conv2d: stride %d, padding %d", stride, pad);
    if (k > h + 2 * pad || k > w + 2 * pad)
        return err_set(err, DDP_EINVAL,
                       "conv2d: kernel %d larger than the %dx%d input padded by %d", k, h, w, pad);
    c->cin = cin;
    c->h = h;
    c->w = w;
    c->cout = cout;
    c->k = k;
    c->stride = stride;
    c->pad = pad;
    c->oh = (h + 2 * pad - k) / stride + 1;
    c->ow = (w + 2 * pad - k) / stride + 1;
    return 0;
}

size_t conv2d_weight_count(const struct conv2d *c)
{
    return (size_t)c->cout * (size_t)c->cin * (size_t)c->k * (size_t)c->k;
}

size_t conv2d_in_count(const struct conv2d *c)
{
    return (size_t)c->cin * (size_t)c->h * (size_t)c->w;
}

size_t conv2d_out_count(const struct conv2d *c)
{
    return (size_t)c->cout * (size_t)c->oh * (size_t)c->ow;
}

size_t conv2d_col_count(const struct conv2d *c)
{
    return (size_t)c->cin * (size_t)c->k * (size_t)c->k * (size_t)c->oh * (size_t)c->ow;
}

/* One sample's x [cin x h x w] into col. */
static void im2col(const struct conv2d *c, const float *x, float *col)
{
    size_t cols = (size_t)c->oh * (size_t)c->ow;
    for (int ci = 0; ci < c->cin; ci++)
        for (int ki = 0; ki < c->k; ki++)
            for (int kj = 0; kj < c->k; kj++) {
                float *row = col + ((size_t)(ci * c->k + ki) * (size_t)c->k + (size_t)kj) * cols;
                const float *plane = x + (size_t)ci * (size_t)c->h * (size_t)c->w;
                for (int oi = 0; oi < c->oh; oi++) {
                    int ii = oi * c->stride - c->pad + ki;
                    float *out = row + (size_t)oi * (size_t)c->ow;
                    if (ii < 0 || ii >= c->h) {
                        memset(out, 0, (size_t)c->ow * sizeof(float));
                        continue;
                    }
                    const float *in = plane + (size_t)ii * (size_t)c->w;
                    if (c->stride == 1) {
                        /* columns lo..hi-1 read in[oj - pad + kj]: one copy, zeros around */
                        int lo = c->pad - kj > 0 ? c->pad - kj : 0;
                        int hi = c->w + c->pad - kj < c->ow ? c->w + c->pad - kj : c->ow;
                        if (lo > c->ow) /* padding wider than the output: all zeros */
                            lo = c->ow;
                        if (hi < lo)
                            hi = lo;
                        memset(out, 0, (size_t)lo * sizeof(float));
                        memcpy(out + lo, in + lo - c->pad + kj, (size_t)(hi - lo) * sizeof(float));
                        memset(out + hi, 0, (size_t)(c->ow - hi) * sizeof(float));
                        continue;
                    }
                    for (int oj = 0; oj < c->ow; oj++) {
                        int jj = oj * c->stride - c->pad + kj;
                        out[oj] = jj >= 0 && jj < c->w ? in[jj] : 0.0f;
                    }
                }
            }
}

/* col scattered back into one sample's dx, which it overwrites. */
static void col2im(const struct conv2d *c, const float *col, float *dx)
{
    size_t cols = (size_t)c->oh * (size_t)c->ow;
    memset(dx, 0, conv2d_in_count(c) * sizeof(float));
    for (int ci = 0; ci < c->cin; ci++)
        for (int ki = 0; ki < c->k; ki++)
            for (int kj = 0; kj < c->k; kj++) {
                const float *row =
                    col + ((size_t)(ci * c->k + ki) * (size_t)c->k + (size_t)kj) * cols;
                float *plane = dx + (size_t)ci * (size_t)c->h * (size_t)c->w;
                for (int oi = 0; oi < c->oh; oi++) {
                    int ii = oi * c->stride - c->pad + ki;
                    if (ii < 0 || ii >= c->h)
                        continue;
                    const float *in = row + (size_t)oi * (size_t)c->ow;
                    float *out = plane + (size_t)ii * (size_t)c->w;
                    if (c->stride == 1) {
                        /* the columns lo..hi-1 that land inside the row, in im2col's order */
                        int lo = c->pad - kj > 0 ? c->pad - kj : 0;
                        int hi = c->w + c->pad - kj < c->ow ? c->w + c->pad - kj : c->ow;
                        float *o = out - c->pad + kj;
                        for (int oj = lo; oj < hi; oj++)
                            o[oj] += in[oj];
                        continue;
                    }
                    for (int oj = 0; oj < c->ow; oj++) {
                        int jj = oj * c->stride - c->pad + kj;
                        if (jj >= 0 && jj < c->w)
                            out[jj] += in[oj];
                    }
                }
            }
}

void conv2d_forward(const struct conv2d *c, const float *x, size_t n, const float *W,
                    const float *b, float *y, float *col)
{
    int cols = c->oh * c->ow, kk = c->cin * c->k * c->k;
    size_t in = conv2d_in_count(c), out = conv2d_out_count(c);
    for (size_t s = 0; s < n; s++) {
        float *ys = y + s * out;
        for (int co = 0; co < c->cout; co++)
            for (int j = 0; j < cols; j++)
                ys[(size_t)co * (size_t)cols + (size_t)j] = b[co];
        im2col(c, x + s * in, col);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, c->cout, cols, kk, 1.0f, W, kk, col,
                    cols, 1.0f, ys, cols);
    }
}

void conv2d_backward_params(const struct conv2d *c, const float *x, size_t n, const float *dy,
                            float *dW, float *db, float *col)
{
    int cols = c->oh * c->ow, kk = c->cin * c->k * c->k;
    size_t in = conv2d_in_count(c), out = conv2d_out_count(c);
    memset(db, 0, (size_t)c->cout * sizeof(float));
    for (size_t s = 0; s < n; s++) {
        const float *dys = dy + s * out;
        for (int co = 0; co < c->cout; co++) {
            const float *row = dys + (size_t)co * (size_t)cols;
            float sum = 0.0f;
            for (int j = 0; j < cols; j++)
                sum += row[j];
            db[co] += sum;
        }
        im2col(c, x + s * in, col);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, c->cout, kk, cols, 1.0f, dys, cols,
                    col, cols, s == 0 ? 0.0f : 1.0f, dW, kk);
    }
}

void conv2d_backward_input(const struct conv2d *c, size_t n, const float *W, const float *dy,
                           float *dx, float *col)
{
    int cols = c->oh * c->ow, kk = c->cin * c->k * c->k;
    size_t in = conv2d_in_count(c), out = conv2d_out_count(c);
    for (size_t s = 0; s < n; s++) {
        /* dcol = W^T dy in the scratch, then scattered back. */
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, kk, cols, c->cout, 1.0f, W, kk,
                    dy + s * out, cols, 0.0f, col, cols);
        col2im(c, col, dx + s * in);
    }
}
