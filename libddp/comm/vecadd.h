/*
 * vecadd.h - the element-wise sums every CPU all-reduce path uses (TCP ring, recursive
 * doubling, shared memory), and one table that says, per comm_dtype, how big an element is
 * and which sum to call, so that no caller branches on the dtype. dst and the sources must
 * not overlap.
 */
#ifndef DDP_LIBDDP_VECADD_H
#define DDP_LIBDDP_VECADD_H

#include <stddef.h>

#include "ddp/comm.h"

/* dst[i] += src[i]. */
void vecadd_f32(float *restrict dst, const float *restrict src, size_t n);
void vecadd_f64(double *restrict dst, const double *restrict src, size_t n);
/* dst[i] = a[i] + b[i]. */
void vecadd2_f32(float *restrict dst, const float *restrict a, const float *restrict b, size_t n);
void vecadd2_f64(double *restrict dst, const double *restrict a, const double *restrict b,
                 size_t n);

/* One element type: its size in bytes and its sums over n elements. */
struct vecadd_type {
    size_t size;
    void (*add)(void *restrict dst, const void *restrict src, size_t n);
    void (*add2)(void *restrict dst, const void *restrict a, const void *restrict b, size_t n);
};

/* The entry of dt (static storage, never NULL; comm.c has refused any other dtype, and an
 * unknown value gets the f32 entry). */
const struct vecadd_type *vecadd_type(enum comm_dtype dt);

#endif
