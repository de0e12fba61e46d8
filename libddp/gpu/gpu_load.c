/*
 * gpu_load.c - loads libddp's GPU part (libddpgpu.so: libddp/gpu/gpu_runtime.cu and
 * libddp/comm/comm_nccl.c, linked against cudart and NCCL) on first use, and forwards gpu.h
 * and the NCCL comm backend to it. gpu_library_open() loads any other GPU library by the same
 * rules; the trainer loads its model's (libddptrainergpu.so) with it, from its own loader.
 *
 * Why: the CUDA libraries are large (cuBLASLt alone is ~150 MiB resident once mapped and
 * relocated, and costs tens of milliseconds at every process start). Linking them into
 * ddp-worker made every CPU rank pay for them. Loaded with dlopen, only a process that looks
 * for a GPU (--backend auto or nccl on a build with CUDA) maps them, and a CPU machine
 * without the libraries still runs ddp-worker.
 *
 * Why two libraries and two loaders rather than one: libddp never includes or builds a
 * trainer file, so its loader knows only its own functions, and a training program's kernels
 * are the program's, in a library the program builds and loads itself. Both are dlopen'd, so
 * "CPU ranks never map the CUDA libraries" holds for both.
 *
 * Where the NVIDIA driver's device files are missing there is no GPU to look for and nothing is
 * loaded. A library is looked for beside the program (<dir of /proc/self/exe>/../lib/), then by
 * name through the usual search path. It is built with -Bsymbolic, so its own calls stay
 * inside it, and takes err_set, log_msg, rdzv_*, gpu_* and the like from the program, which is
 * linked with its symbols exported (ENABLE_EXPORTS). When libddpgpu.so cannot be loaded,
 * gpu_count() reports 0 GPUs and says why; every other forwarder is only reached after
 * gpu_count() > 0 or gpu_init() succeeded, and aborts if that invariant is broken.
 */
#ifdef DDP_HAVE_CUDA

#include <dlfcn.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "libddp/comm/comm_internal.h"
#include "ddp/gpu.h"

#define GPU_LIB_NAME "libddpgpu.so"

static pthread_once_t gpu_load_once = PTHREAD_ONCE_INIT;
static void *gpu_lib;
static char gpu_load_why[512];

/* The library's functions, by name. */
static struct {
    int (*count)(const char **);
    int (*init)(int, struct ddp_err *);
    void (*shutdown)(void);
    int (*device)(void);
    void *(*stream)(void);
    int (*alloc)(void **, size_t, struct ddp_err *);
    void (*free_)(void *);
    int (*to_device)(void *, const void *, size_t, struct ddp_err *);
    int (*to_host)(void *, const void *, size_t, struct ddp_err *);
    int (*sync)(struct ddp_err *);
    int (*is_device_ptr)(const void *);
    int (*scale)(float *, size_t, float, struct ddp_err *);
    const struct comm_ops *nccl_ops;
} gpu_fn;

/* dlopen's message for the last failure, kept (dlerror() forgets it at the next call). It
 * names the file that failed: ours, or the CUDA/NCCL library the loader could not find. */
static void gpu_keep_dlerror(const char *name, char *buf, size_t size)
{
    const char *e = dlerror();
    snprintf(buf, size, "cannot load %s: %s", name, e ? e : "dlopen failed");
}

/* Tries <dir of the program>/../lib/<name>. Returns NULL, with *tried set when the file
 * exists but does not load (a missing libcudart/libcublas/libnccl, say), and tried_why
 * holding dlopen's reason. */
static void *gpu_open_beside_program(const char *name, int *tried, char *tried_why, size_t why_size)
{
    char exe[PATH_MAX], path[PATH_MAX + 32];
    *tried = 0;
    ssize_t n = readlink("/proc/self/exe", exe, sizeof(exe) - 1);
    if (n <= 0)
        return NULL;
    exe[n] = '\0';
    char *slash = strrchr(exe, '/');
    if (!slash)
        return NULL;
    *slash = '\0';
    if ((size_t)snprintf(path, sizeof(path), "%s/../lib/%s", exe, name) >= sizeof(path))
        return NULL;
    if (access(path, R_OK) != 0)
        return NULL;
    void *h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        *tried = 1;
        gpu_keep_dlerror(name, tried_why, why_size);
    }
    return h;
}

void *gpu_library_open(const char *name, char *why, size_t why_size)
{
    /* No NVIDIA driver device: no GPU to find, and no reason to map the CUDA libraries. */
    if (access("/dev/nvidiactl", F_OK) != 0 && access("/dev/nvidia0", F_OK) != 0) {
        snprintf(why, why_size, "no NVIDIA GPU device (/dev/nvidiactl, /dev/nvidia0)");
        return NULL;
    }
    char beside_why[512] = "";
    int tried = 0;
    void *h = gpu_open_beside_program(name, &tried, beside_why, sizeof(beside_why));
    if (!h)
        h = dlopen(name, RTLD_NOW | RTLD_LOCAL);
    if (!h) {
        /* The copy beside the program is the one meant: when it exists, its reason (which
         * names the CUDA library the loader could not find) is the one to report. */
        if (tried)
            snprintf(why, why_size, "%s", beside_why);
        else
            gpu_keep_dlerror(name, why, why_size);
    }
    return h;
}

int gpu_library_bind(void *h, const char *lib, const struct gpu_sym *syms, size_t n, char *why,
                     size_t why_size)
{
    for (size_t i = 0; i < n; i++) {
        *syms[i].slot = dlsym(h, syms[i].name);
        if (!*syms[i].slot) {
            snprintf(why, why_size, "%s lacks %s (a %s from another build?)", lib, syms[i].name,
                     lib);
            return -1;
        }
    }
    return 0;
}

static void gpu_load(void)
{
    void *h = gpu_library_open(GPU_LIB_NAME, gpu_load_why, sizeof(gpu_load_why));
    if (!h)
        return;
    const struct gpu_sym syms[] = {
        {"gpu_count", (void **)&gpu_fn.count},
        {"gpu_init", (void **)&gpu_fn.init},
        {"gpu_shutdown", (void **)&gpu_fn.shutdown},
        {"gpu_device", (void **)&gpu_fn.device},
        {"gpu_stream", (void **)&gpu_fn.stream},
        {"gpu_alloc", (void **)&gpu_fn.alloc},
        {"gpu_free", (void **)&gpu_fn.free_},
        {"gpu_to_device", (void **)&gpu_fn.to_device},
        {"gpu_to_host", (void **)&gpu_fn.to_host},
        {"gpu_sync", (void **)&gpu_fn.sync},
        {"gpu_is_device_ptr", (void **)&gpu_fn.is_device_ptr},
        {"gpu_scale", (void **)&gpu_fn.scale},
        {"comm_nccl_ops", (void **)&gpu_fn.nccl_ops},
    };
    if (gpu_library_bind(h, GPU_LIB_NAME, syms, sizeof(syms) / sizeof(syms[0]), gpu_load_why,
                         sizeof(gpu_load_why)) != 0) {
        memset(&gpu_fn, 0, sizeof(gpu_fn));
        dlclose(h);
        return;
    }
    gpu_lib = h;
}

static int gpu_loaded(void)
{
    pthread_once(&gpu_load_once, gpu_load);
    return gpu_lib != NULL;
}

/* For the forwarders that callers reach only once a GPU was found. */
static void gpu_need(const char *what)
{
    if (!gpu_loaded()) {
        fprintf(stderr, "BUG: %s called without the GPU library (%s)\n", what, gpu_load_why);
        abort();
    }
}

int gpu_count(const char **why)
{
    if (!gpu_loaded()) {
        if (why)
            *why = gpu_load_why;
        return 0;
    }
    return gpu_fn.count(why);
}

int gpu_init(int device, struct ddp_err *err)
{
    if (!gpu_loaded())
        return err_set(err, DDP_EINVAL, "no GPU: %s", gpu_load_why);
    return gpu_fn.init(device, err);
}

void gpu_shutdown(void)
{
    if (gpu_loaded())
        gpu_fn.shutdown();
}

int gpu_device(void)
{
    return gpu_loaded() ? gpu_fn.device() : -1;
}

void *gpu_stream(void)
{
    gpu_need("gpu_stream");
    return gpu_fn.stream();
}

int gpu_alloc(void **p, size_t bytes, struct ddp_err *err)
{
    gpu_need("gpu_alloc");
    return gpu_fn.alloc(p, bytes, err);
}

void gpu_free(void *p)
{
    if (p && gpu_loaded())
        gpu_fn.free_(p);
}

int gpu_to_device(void *dst, const void *src, size_t bytes, struct ddp_err *err)
{
    gpu_need("gpu_to_device");
    return gpu_fn.to_device(dst, src, bytes, err);
}

int gpu_to_host(void *dst, const void *src, size_t bytes, struct ddp_err *err)
{
    gpu_need("gpu_to_host");
    return gpu_fn.to_host(dst, src, bytes, err);
}

int gpu_sync(struct ddp_err *err)
{
    gpu_need("gpu_sync");
    return gpu_fn.sync(err);
}

int gpu_is_device_ptr(const void *p)
{
    return gpu_loaded() ? gpu_fn.is_device_ptr(p) : 0;
}

int gpu_scale(float *x, size_t n, float s, struct ddp_err *err)
{
    gpu_need("gpu_scale");
    return gpu_fn.scale(x, n, s, err);
}

const struct comm_ops *comm_nccl_ops_get(const char **why)
{
    if (!gpu_loaded()) {
        if (why)
            *why = gpu_load_why;
        return NULL;
    }
    return gpu_fn.nccl_ops;
}

int comm_nccl_available(void)
{
    return gpu_count(NULL) > 0;
}

#else
/* Built without CUDA: nothing to load. ISO C wants a translation unit to declare something. */
typedef int gpu_load_unused;
#endif
