/*
 * gpu.h - libddp's CUDA runtime, with a C interface: device choice, the compute stream,
 * memory, copies, and gpu_scale (libddp/gpu/gpu_runtime.cu, in libddpgpu.so with the NCCL
 * backend, loaded on first use by libddp/gpu/gpu_load.c). Built only where CUDA and NCCL
 * were found (DDP_HAVE_CUDA); callers guard their use with that macro. A training program's
 * own kernels (its model) are its own: it builds them into its own library, loads that with
 * gpu_library_open(), queues them on gpu_stream() and owns whatever cuBLAS handle it needs.
 *
 * One compute stream per process (gpu_stream()); every kernel and cuBLAS call of the model
 * must run on it, in order. comm_nccl.c orders its all-reduces after it with events.
 *
 * Errors: CUDA failures are DDP_EINTERNAL with "file:line: cuda error <name>";
 * the worker turns them into DDP_EXIT_DEVICE.
 */
#ifndef DDP_GPU_H
#define DDP_GPU_H

#include <stddef.h>

#include "common/err.h"

#ifdef __cplusplus
extern "C" {
#endif

/* Number of visible GPUs (after CUDA_VISIBLE_DEVICES); 0 when there is no GPU, no driver, or
 * libddpgpu.so cannot be loaded. When there is none, *why (may be NULL) receives a string that
 * says why (the CUDA error, or the loader's message naming the missing library); it stays
 * valid until the next gpu_count(). */
int gpu_count(const char **why);

/* Selects device (e.g. LOCAL_RANK) for this process (cudaSetDevice, before any other CUDA
 * call that touches a device) and creates the compute stream (non-blocking). Fails naming the
 * device when it is out of range. A second call for the same device does nothing; for another
 * device it fails. Every function below must be called from the thread that called this one. */
int gpu_init(int device, struct ddp_err *err);
/* Frees the stream; whatever was bound to it (a cuBLAS handle, a model) must be freed first. */
void gpu_shutdown(void);
int gpu_device(void);
/* The compute stream as a cudaStream_t (void * so C callers need no CUDA header). */
void *gpu_stream(void);

/* Device memory, zeroed on the compute stream before this returns (so work queued next on
 * that stream sees zeros); the caller frees with gpu_free() (which synchronizes the device). */
int gpu_alloc(void **p, size_t bytes, struct ddp_err *err);
void gpu_free(void *p);
/* Copies on the compute stream and waits for it. */
int gpu_to_device(void *dst, const void *src, size_t bytes, struct ddp_err *err);
int gpu_to_host(void *dst, const void *src, size_t bytes, struct ddp_err *err);
/* Waits until the compute stream is idle. */
int gpu_sync(struct ddp_err *err);
/* 1 if p is device memory. */
int gpu_is_device_ptr(const void *p);

/* x *= s for n floats, on the compute stream (the reducer's averaging). */
int gpu_scale(float *x, size_t n, float s, struct ddp_err *err);

/* Loads a training program's own GPU library `name` (its kernels, linked against the shared
 * cudart so that they share gpu_stream() with libddp) the way libddp loads libddpgpu.so:
 * nothing where the NVIDIA driver's device files are missing, else <dir of the program>/../lib/
 * <name>, else <name> through the loader's search path; RTLD_NOW | RTLD_LOCAL. The library
 * takes gpu_* and the rest of libddp from the program, which exports its symbols. Returns the
 * dlopen handle (look functions up with dlsym; it is never closed while they are in use), or
 * NULL with why (why_size bytes, always terminated) saying why: no device, or dlopen's
 * message naming the file that failed. Not in libddpgpu.so: it maps nothing by itself. */
void *gpu_library_open(const char *name, char *why, size_t why_size);

/* One function a loader looks up in a GPU library: its name and where to store it. */
struct gpu_sym {
    const char *name;
    void **slot;
};
/* Looks up every symbol of syms in the dlopen handle h of library `lib`. Returns 0 with every
 * slot set, or -1 with why saying which symbol lib lacks (a library from another build); the
 * slots may then be partly set, and h is left open for the caller to dlclose(). */
int gpu_library_bind(void *h, const char *lib, const struct gpu_sym *syms, size_t n, char *why,
                     size_t why_size);

#ifdef __cplusplus
}
#endif

#endif
