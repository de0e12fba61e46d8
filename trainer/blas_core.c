/*
 * blas_core.c - the kernel choice of blas_core.h, from OpenBLAS's own answer
 * (openblas_get_corename) and the CPU's features (__builtin_cpu_supports).
 */
#include "trainer/blas_core.h"

#include <cblas.h>
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "common/log.h"

const char *blas_core_better(void)
{
    const char *name = openblas_get_corename();
    if (!name || strcasecmp(name, "prescott") != 0)
        return NULL;
#if defined(__x86_64__)
    __builtin_cpu_init();
    if (__builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512dq") && __builtin_cpu_supports("avx512vl"))
        return "SkylakeX";
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        return "Haswell";
#endif
    return NULL;
}

void blas_core_fix(char **argv)
{
    if (getenv("OPENBLAS_CORETYPE"))
        return;
    const char *core = blas_core_better();
    if (!core)
        return;
    if (setenv("OPENBLAS_CORETYPE", core, 1) != 0)
        return;
    execv("/proc/self/exe", argv);
    log_warn("cannot run again with OPENBLAS_CORETYPE=%s (%s): OpenBLAS keeps its generic "
             "kernels",
             core, strerror(errno));
}
