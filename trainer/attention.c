/*
 * attention.c - causal self-attention per (sequence, head): S = q k^T / sqrt(hs), masked
 * row softmax P, y = P v; backward dP = dy v^T, dv = P^T dy, dS = P (dP - rowsum(P dP)) (zero
 * above the diagonal), dq = dS k / sqrt(hs), dk = dS^T q / sqrt(hs). With a dropout site,
 * P' = dropout(P) weighs v instead (the mask recomputed in the backward, never stored).
 */
#include "trainer/attention.h"

#include <cblas.h>
#include <math.h>
#include <string.h>

#include "trainer/simd.h"
#include "trainer/vexp.h"
static int drops(const struct dropout_site *drop)
{
    return drop && drop->p > 0.0f;
}

/* The dropped probabilities of sample s, head h into out (t * t floats), as the forward
 * weighed v with them. */
static void drop_head(const struct dropout_site *drop, size_t s, int h, int t, const float *p,
                      float *out)
{
    size_t tt = (size_t)t * (size_t)t;
    dropout_apply(out, p, 1, tt, drop->keys + s, drop->site, (uint64_t)h * tt, drop->p);
}

DDP_SIMD_CLONES void attention_forward(const float *qkv, size_t b, int t, int c, int heads,
                                       float *y, float *att, const struct dropout_site *drop,
                                       float *scratch)
{
    int hs = c / heads;
    int ld = 3 * c;
    float scale = 1.0f / sqrtf((float)hs);
    for (size_t s = 0; s < b; s++) {
        const float *base = qkv + s * (size_t)t * (size_t)ld;
        for (int h = 0; h < heads; h++) {
            const float *q = base + h * hs;
            const float *k = base + c + h * hs;
            const float *v = base + 2 * c + h * hs;
            float *p = att + (s * (size_t)heads + (size_t)h) * (size_t)t * (size_t)t;
            float *o = y + s * (size_t)t * (size_t)c + (size_t)(h * hs);
            /* S [t x t] = q [t x hs] k^T, only the lower triangle is used */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, hs, scale, q, ld, k, ld,
                        0.0f, p, t);
            for (int i = 0; i < t; i++) {
                float *row = p + (size_t)i * (size_t)t;
                float mx = row[0];
                for (int j = 1; j <= i; j++)
                    mx = row[j] > mx ? row[j] : mx;
                /* the exponentials first, a loop that vectorizes; their sum, in order */
                for (int j = 0; j <= i; j++)
                    row[j] = vexpf(row[j] - mx);
                double sum = 0.0;
                for (int j = 0; j <= i; j++)
                    sum += row[j];
                float inv = (float)(1.0 / sum);
                for (int j = 0; j <= i; j++)
                    row[j] *= inv;
                for (int j = i + 1; j < t; j++)
                    row[j] = 0.0f;
            }
            /* y_h [t x hs] = dropout(P) [t x t] v [t x hs] */
            const float *pw = p;
            if (drops(drop)) {
                drop_head(drop, s, h, t, p, scratch);
                pw = scratch;
            }
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, hs, t, 1.0f, pw, t, v, ld,
                        0.0f, o, c);
        }
    }
}

void attention_backward(const float *qkv, const float *att, const float *dy, size_t b, int t, int c,
                        int heads, const struct dropout_site *drop, float *dqkv, float *scratch)
{
    int hs = c / heads;
    int ld = 3 * c;
    float scale = 1.0f / sqrtf((float)hs);
    for (size_t s = 0; s < b; s++) {
        const float *base = qkv + s * (size_t)t * (size_t)ld;
        float *dbase = dqkv + s * (size_t)t * (size_t)ld;
        for (int h = 0; h < heads; h++) {
            const float *q = base + h * hs;
            const float *k = base + c + h * hs;
            const float *v = base + 2 * c + h * hs;
            float *dq = dbase + h * hs;
            float *dk = dbase + c + h * hs;
            float *dv = dbase + 2 * c + h * hs;
            const float *p = att + (s * (size_t)heads + (size_t)h) * (size_t)t * (size_t)t;
            const float *go = dy + s * (size_t)t * (size_t)c + (size_t)(h * hs);
            float *dp = scratch;
            /* dP' [t x t] = dy_h [t x hs] v^T; dv [t x hs] = P'^T dy_h, P' = dropout(P); then
             * dP = dropout(dP') with the same mask */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, t, t, hs, 1.0f, go, c, v, ld, 0.0f,
                        dp, t);
            const float *pw = p;
            if (drops(drop)) {
                float *pd = scratch + (size_t)t * (size_t)t;
                drop_head(drop, s, h, t, p, pd);
                drop_head(drop, s, h, t, dp, dp);
                pw = pd;
            }
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, hs, t, 1.0f, pw, t, go, c, 0.0f,
                        dv, ld);
            /* dS = P * (dP - rowsum(P * dP)), zero above the diagonal */
            for (int i = 0; i < t; i++) {
                const float *pr = p + (size_t)i * (size_t)t;
                float *dr = dp + (size_t)i * (size_t)t;
                double dot = 0.0;
                for (int j = 0; j <= i; j++)
                    dot += (double)pr[j] * dr[j];
                float d = (float)dot;
                for (int j = 0; j <= i; j++)
                    dr[j] = pr[j] * (dr[j] - d);
                for (int j = i + 1; j < t; j++)
                    dr[j] = 0.0f;
            }
            /* dq = dS k * scale; dk = dS^T q * scale */
            cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, t, hs, t, scale, dp, t, k, ld,
                        0.0f, dq, ld);
            cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, t, hs, t, scale, dp, t, q, ld,
                        0.0f, dk, ld);
        }
    }
}
