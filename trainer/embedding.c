/*
 * embedding.c - token + position embedding: rows gathered forward, scattered (added) back.
 */
#include "trainer/embedding.h"

void embedding_forward(const uint8_t *tokens, size_t b, int t, size_t stride, int c,
                       const float *wte, const float *wpe, float *y)
{
    for (size_t s = 0; s < b; s++)
        for (int p = 0; p < t; p++) {
            const float *e = wte + (size_t)tokens[s * stride + (size_t)p] * (size_t)c;
            const float *q = wpe + (size_t)p * (size_t)c;
            float *o = y + (s * (size_t)t + (size_t)p) * (size_t)c;
            for (int j = 0; j < c; j++)
                o[j] = e[j] + q[j];
        }
}

void embedding_backward(const uint8_t *tokens, size_t b, int t, size_t stride, int c,
                        const float *dy, float *dwte, float *dwpe)
{
    for (size_t s = 0; s < b; s++)
        for (int p = 0; p < t; p++) {
            const float *g = dy + (s * (size_t)t + (size_t)p) * (size_t)c;
            float *e = dwte + (size_t)tokens[s * stride + (size_t)p] * (size_t)c;
            float *q = dwpe + (size_t)p * (size_t)c;
            for (int j = 0; j < c; j++) {
                e[j] += g[j];
                q[j] += g[j];
            }
        }
}
