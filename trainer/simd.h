/*
 * simd.h - DDP_SIMD_CLONES before an element-wise kernel's definition builds it three times,
 * for AVX-512, AVX2 and the x86-64 baseline (SSE2), and the loader picks the widest the CPU
 * has (GCC's target_clones, an ifunc): the default build stays portable and a loop over
 * 16 floats at once is not left to SSE's 4. The arithmetic is the same in each clone (no
 * -ffast-math, no FMA contraction under -std=c11), so the results are bit for bit equal
 * whichever runs. Empty where GCC's clones are not available (clang, other CPUs).
 */
#ifndef DDP_TRAINER_SIMD_H
#define DDP_TRAINER_SIMD_H

#if defined(__GNUC__) && !defined(__clang__) && defined(__x86_64__) && defined(__linux__)
#define DDP_SIMD_CLONES __attribute__((target_clones("avx512f", "avx2", "default")))
/* The clone the loader picks on this CPU (GCC's resolver: the first of the list the CPU
 * has), for the job's log line. */
static inline const char *simd_clone_name(void)
{
    __builtin_cpu_init();
    return __builtin_cpu_supports("avx512f") ? "avx512f"
           : __builtin_cpu_supports("avx2")  ? "avx2"
                                             : "sse2";
}
#else
#define DDP_SIMD_CLONES
static inline const char *simd_clone_name(void)
{
    return "plain";
}
#endif

#endif
