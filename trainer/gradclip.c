/*
 * gradclip.c - the global gradient norm and the clipping factor.
 */
#include "trainer/gradclip.h"

#include <math.h>

double grad_global_norm(float *const *grads, const size_t *size, int ntensors, float grad_scale)
{
    double sum = 0.0;
    for (int k = 0; k < ntensors; k++) {
        const float *g = grads[k];
        double s = 0.0;
        for (size_t i = 0; i < size[k]; i++)
            s += (double)g[i] * (double)g[i];
        sum += s;
    }
    return sqrt(sum) * fabs((double)grad_scale);
}

float grad_clip_factor(double norm, double max_norm)
{
    if (max_norm <= 0.0)
        return 1.0f;
    double f = max_norm / (norm + 1e-6);
    return f < 1.0 ? (float)f : 1.0f;
}
