/*
 * blas_core.h - making OpenBLAS use the kernels this CPU has.
 *
 * OpenBLAS picks its kernels from the CPU's model number when it loads. A virtual machine
 * that reports a generic model ("Intel(R) Xeon(R) Processor") gets the oldest x86-64 kernels
 * (Prescott: SSE3) although the CPU has AVX2 or AVX-512: sgemm then runs 2-10x slower. The
 * choice can only be changed before the library loads, by OPENBLAS_CORETYPE in the
 * environment. blas_core_fix is called first thing in main: when OPENBLAS_CORETYPE is unset,
 * OpenBLAS fell back to Prescott and the CPU has better (AVX-512 F/BW/DQ/VL: SkylakeX; AVX2 +
 * FMA: Haswell), it sets OPENBLAS_CORETYPE and executes the program again with the same
 * arguments (same process id: an agent watching it sees nothing). Set OPENBLAS_CORETYPE
 * yourself to choose (any value: never overridden), e.g. to give a peer the same kernels.
 */
#ifndef DDP_TRAINER_BLAS_CORE_H
#define DDP_TRAINER_BLAS_CORE_H

/* The core OPENBLAS_CORETYPE should name on this CPU, or NULL when OpenBLAS's own choice is
 * as good (it did not fall back, or the CPU has nothing better). */
const char *blas_core_better(void);

/* As the file comment says; returns only when nothing is to be done or the exec failed (then
 * with a warning: the run goes on with the slow kernels). */
void blas_core_fix(char **argv);

#endif
