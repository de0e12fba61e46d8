/*
 * pool.c - MaxPool2d with kernel = stride = m.
 *
 * Invariant: arg[o] for output o of channel ci of a sample is an index into that channel's
 * h x w plane of the input, inside o's window; windows do not overlap, so the backward
 * writes each input element at most once.
 */
#include "trainer/pool.h"

#include <math.h>
#include <string.h>

int pool2d_init(struct pool2d *p, int c, int h, int w, int m, struct ddp_err *err)
{
    if (c <= 0 || h <= 0 || w <= 0 || m <= 0)
        return err_set(err, DDP_EINVAL, "maxpool: sizes must be positive (c %d, %dx%d, pool %d)", c,
                       h, w, m);
    if (m > h || m > w)
        return err_set(err, DDP_EINVAL, "maxpool: window %d larger than the %dx%d input", m, h, w);
    p->c = c;
    p->h = h;
    p->w = w;
    p->m = m;
    p->oh = (h - m) / m + 1;
    p->ow = (w - m) / m + 1;
    return 0;
}

size_t pool2d_in_count(const struct pool2d *p)
{
    return (size_t)p->c * (size_t)p->h * (size_t)p->w;
}

size_t pool2d_out_count(const struct pool2d *p)
{
    return (size_t)p->c * (size_t)p->oh * (size_t)p->ow;
}

void pool2d_forward(const struct pool2d *p, const float *x, size_t n, float *y, int32_t *arg)
{
    size_t planes = n * (size_t)p->c;
    size_t in = (size_t)p->h * (size_t)p->w, out = (size_t)p->oh * (size_t)p->ow;
    for (size_t pl = 0; pl < planes; pl++) {
        const float *xp = x + pl * in;
        float *yp = y + pl * out;
        int32_t *ap = arg + pl * out;
        for (int oi = 0; oi < p->oh; oi++)
            for (int oj = 0; oj < p->ow; oj++) {
                int best = oi * p->m * p->w + oj * p->m;
                for (int a = 0; a < p->m; a++)
                    for (int b = 0; b < p->m; b++) {
                        int idx = (oi * p->m + a) * p->w + oj * p->m + b;
                        if (xp[idx] > xp[best] || isnan(xp[idx])) /* NaN wins, as torch's */
                            best = idx;
                    }
                yp[oi * p->ow + oj] = xp[best];
                ap[oi * p->ow + oj] = best;
            }
    }
}

void pool2d_backward(const struct pool2d *p, const float *dy, size_t n, const int32_t *arg,
                     float *dx)
{
    size_t planes = n * (size_t)p->c;
    size_t in = (size_t)p->h * (size_t)p->w, out = (size_t)p->oh * (size_t)p->ow;
    memset(dx, 0, planes * in * sizeof(float));
    for (size_t pl = 0; pl < planes; pl++)
        for (size_t o = 0; o < out; o++)
            dx[pl * in + (size_t)arg[pl * out + o]] += dy[pl * out + o];
}
