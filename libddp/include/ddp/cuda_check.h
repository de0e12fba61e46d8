/*
 * cuda_check.h - the checks every CUDA source of ddp uses (libddp's runtime, a training
 * program's kernels): for .cu files only, after <cuda_runtime.h> and "common/err.h".
 *
 * CUDA_TRY(call) returns err_set(err, DDP_EINTERNAL, "file:line: cuda error <name>: <text>")
 * from the enclosing function (which must have a struct ddp_err *err in scope) when call
 * fails; the worker turns DDP_EINTERNAL from the device into DDP_EXIT_DEVICE. LAUNCH_TRY()
 * checks the last kernel launch. cuda_blocks(n, threads) is the grid size of a grid-stride
 * loop over n elements: at least 1, at most 65535 * 16 blocks.
 */
#ifndef DDP_CUDA_CHECK_H
#define DDP_CUDA_CHECK_H

#include <stddef.h>

#define CUDA_TRY(call)                                                                         \
    do {                                                                                       \
        cudaError_t e_ = (call);                                                               \
        if (e_ != cudaSuccess)                                                                 \
            return err_set(err, DDP_EINTERNAL, "%s:%d: cuda error %s: %s", __FILE__, __LINE__, \
                           cudaGetErrorName(e_), cudaGetErrorString(e_));                      \
    } while (0)

#define LAUNCH_TRY() CUDA_TRY(cudaGetLastError())

static inline unsigned cuda_blocks(size_t n, unsigned threads)
{
    size_t b = (n + threads - 1) / threads;
    return (unsigned)(b > 65535u * 16u ? 65535u * 16u : (b ? b : 1));
}

#endif
