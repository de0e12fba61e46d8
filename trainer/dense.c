/*
 * dense.c - Linear, ReLU and softmax cross-entropy over cblas_sgemm and plain loops, the
 * MLP's arithmetic as separate layers, shared by trainer/model.c and trainer/model_cnn.c.
 */
#include "trainer/dense.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

void linear_forward(const float *x, size_t n, int in, int out, const float *W, const float *b,
                    float *y)
{
    for (size_t i = 0; i < n; i++)
        memcpy(y + i * (size_t)out, b, (size_t)out * sizeof(float));
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, (int)n, out, in, 1.0f, x, in, W, in, 1.0f,
                y, out);
}

void linear_backward_params(const float *x, size_t n, int in, int out, const float *dy, float *dW,
                            float *db)
{
    cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, out, in, (int)n, 1.0f, dy, out, x, in,
                0.0f, dW, in);
    memset(db, 0, (size_t)out * sizeof(float));
    for (size_t i = 0; i < n; i++) {
        const float *row = dy + i * (size_t)out;
        for (int j = 0; j < out; j++)
            db[j] += row[j];
    }
}

void linear_backward_input(size_t n, int in, int out, const float *W, const float *dy, float *dx)
{
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, (int)n, in, out, 1.0f, dy, out, W, in,
                0.0f, dx, in);
}

void relu_forward(float *a, size_t cnt)
{
    for (size_t i = 0; i < cnt; i++)
        a[i] = a[i] > 0.0f ? a[i] : 0.0f;
}

void relu_backward(const float *a, float *d, size_t cnt)
{
    /* a select, not a conditional store, so that it vectorizes */
    for (size_t i = 0; i < cnt; i++)
        d[i] = a[i] > 0.0f ? d[i] : 0.0f;
}

double softmax_xent_forward(float *z, const uint8_t *y, size_t n, int classes)
{
    double sum = 0.0;
    for (size_t i = 0; i < n; i++) {
        float *row = z + i * (size_t)classes;
        float mx = row[0];
        for (int c = 1; c < classes; c++)
            mx = row[c] > mx ? row[c] : mx;
        double s = 0.0;
        for (int c = 0; c < classes; c++)
            s += exp((double)(row[c] - mx));
        double lse = (double)mx + log(s);
        sum += lse - (double)row[y[i]];
        for (int c = 0; c < classes; c++)
            row[c] = (float)(exp((double)row[c] - lse));
    }
    return sum;
}

void softmax_xent_backward(const float *p, const uint8_t *y, size_t n, int classes, float *dz)
{
    float inv = 1.0f / (float)n;
    for (size_t i = 0; i < n; i++) {
        for (int c = 0; c < classes; c++)
            dz[i * (size_t)classes + c] = p[i * (size_t)classes + c] * inv;
        dz[i * (size_t)classes + y[i]] -= inv;
    }
}

size_t dense_count_hits(const float *z, size_t n, int classes, const uint8_t *y)
{
    size_t hits = 0;
    for (size_t i = 0; i < n; i++) {
        const float *row = z + i * (size_t)classes;
        int best = 0;
        for (int c = 1; c < classes; c++)
            if (row[c] > row[best])
                best = c;
        hits += best == y[i];
    }
    return hits;
}
