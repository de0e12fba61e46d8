/*
 * vecadd.h - the element-wise sums every CPU all-reduce path uses (TCP ring, recursive
 * doubling, shared memory): dst[i] += src[i]. dst and src must not overlap.
 */
#ifndef DDP_LIBDDP_VECADD_H
#define DDP_LIBDDP_VECADD_H

#include <stddef.h>

void vecadd_f32(float *restrict dst, const float *restrict src, size_t n);
void vecadd_f64(double *restrict dst, const double *restrict src, size_t n);

#endif
