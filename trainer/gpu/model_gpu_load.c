/*
 * model_gpu_load.c - the trainer's half of the GPU loading: loads libddptrainergpu.so (the
 * MLP on the GPU: trainer/gpu/mlp_kernels.cu and model_gpu.c, linked against cudart and
 * cuBLAS) on first use, and forwards model_gpu.h to it. Linked into ddp-worker (libddptrainer).
 *
 * Why a library of its own, apart from libddp's libddpgpu.so: libddp never includes or builds
 * a trainer file, so the model's kernels cannot live in libddp's library or be named by its
 * loader; and why loaded with dlopen rather than linked: so that CPU ranks never map the CUDA
 * libraries (cuBLAS above all), as libddp/gpu/gpu_load.c explains for libddp's half. The
 * library is found by libddp's rules (gpu_library_open(): only where the NVIDIA driver's
 * device files exist, beside the program in ../lib/ first). It is built with -Bsymbolic and
 * takes libddp's runtime (gpu_alloc, gpu_stream, ...: the forwarders into libddpgpu.so),
 * err_set and xalloc from the program, which exports its symbols (ENABLE_EXPORTS).
 *
 * Invariants: the library is looked for once per process, at the first gpu_model_new()
 * (after gpu_init(), so libddpgpu.so is loaded by then), and never closed. gpu_model_new()
 * is the only way in: when the library cannot be loaded it fails with the reason, and every
 * other forwarder (reached only with a model that gpu_model_new() made) aborts if that
 * invariant is broken; gpu_model_free(NULL) does nothing.
 */
#ifdef DDP_HAVE_CUDA

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "ddp/gpu.h"
#include "trainer/gpu/model_gpu.h"

#define MODEL_GPU_LIB_NAME "libddptrainergpu.so"

static pthread_once_t model_gpu_load_once = PTHREAD_ONCE_INIT;
static void *model_gpu_lib;
static char model_gpu_why[512];

/* The library's functions, by name. */
static struct {
    int (*model_new)(const int *, int, size_t, const float *, struct gpu_model **,
                     struct ddp_err *);
    void (*model_free)(struct gpu_model *);
    size_t (*param_count)(const struct gpu_model *);
    int (*tensor_count)(const struct gpu_model *);
    size_t (*tensor_size)(const struct gpu_model *, int);
    size_t (*tensor_offset)(const struct gpu_model *, int);
    float *(*model_params)(struct gpu_model *);
    float *(*model_grad)(struct gpu_model *, int);
    void (*model_bind_grads)(struct gpu_model *, float *const *);
    int (*model_forward)(struct gpu_model *, const float *, const uint8_t *, size_t, double *,
                         struct ddp_err *);
    int (*model_backward)(struct gpu_model *, const struct model_hooks *, struct ddp_err *);
    int (*model_count_correct)(struct gpu_model *, const float *, const uint8_t *, size_t, size_t *,
                               struct ddp_err *);
    int (*model_sgd)(struct gpu_model *, float *, float, float, float, struct ddp_err *);
} model_fn;

static void model_gpu_load(void)
{
    void *h = gpu_library_open(MODEL_GPU_LIB_NAME, model_gpu_why, sizeof(model_gpu_why));
    if (!h)
        return;
    const struct gpu_sym syms[] = {
        {"gpu_model_new", (void **)&model_fn.model_new},
        {"gpu_model_free", (void **)&model_fn.model_free},
        {"gpu_model_param_count", (void **)&model_fn.param_count},
        {"gpu_model_tensor_count", (void **)&model_fn.tensor_count},
        {"gpu_model_tensor_size", (void **)&model_fn.tensor_size},
        {"gpu_model_tensor_offset", (void **)&model_fn.tensor_offset},
        {"gpu_model_params", (void **)&model_fn.model_params},
        {"gpu_model_grad", (void **)&model_fn.model_grad},
        {"gpu_model_bind_grads", (void **)&model_fn.model_bind_grads},
        {"gpu_model_forward", (void **)&model_fn.model_forward},
        {"gpu_model_backward", (void **)&model_fn.model_backward},
        {"gpu_model_count_correct", (void **)&model_fn.model_count_correct},
        {"gpu_model_sgd", (void **)&model_fn.model_sgd},
    };
    if (gpu_library_bind(h, MODEL_GPU_LIB_NAME, syms, sizeof(syms) / sizeof(syms[0]), model_gpu_why,
                         sizeof(model_gpu_why)) != 0) {
        memset(&model_fn, 0, sizeof(model_fn));
        dlclose(h);
        return;
    }
    model_gpu_lib = h;
}

static int model_gpu_loaded(void)
{
    pthread_once(&model_gpu_load_once, model_gpu_load);
    return model_gpu_lib != NULL;
}

/* For the forwarders that callers reach only with a model gpu_model_new() made. */
static void model_gpu_need(const char *what)
{
    if (!model_gpu_loaded()) {
        fprintf(stderr, "BUG: %s called without the GPU model library (%s)\n", what, model_gpu_why);
        abort();
    }
}

int gpu_model_new(const int *widths, int nwidths, size_t max_batch, const float *params,
                  struct gpu_model **out, struct ddp_err *err)
{
    if (!model_gpu_loaded())
        return err_set(err, DDP_EINTERNAL, "no GPU model: %s", model_gpu_why);
    return model_fn.model_new(widths, nwidths, max_batch, params, out, err);
}

void gpu_model_free(struct gpu_model *m)
{
    if (m && model_gpu_loaded())
        model_fn.model_free(m);
}

size_t gpu_model_param_count(const struct gpu_model *m)
{
    model_gpu_need("gpu_model_param_count");
    return model_fn.param_count(m);
}

int gpu_model_tensor_count(const struct gpu_model *m)
{
    model_gpu_need("gpu_model_tensor_count");
    return model_fn.tensor_count(m);
}

size_t gpu_model_tensor_size(const struct gpu_model *m, int t)
{
    model_gpu_need("gpu_model_tensor_size");
    return model_fn.tensor_size(m, t);
}

size_t gpu_model_tensor_offset(const struct gpu_model *m, int t)
{
    model_gpu_need("gpu_model_tensor_offset");
    return model_fn.tensor_offset(m, t);
}

float *gpu_model_params(struct gpu_model *m)
{
    model_gpu_need("gpu_model_params");
    return model_fn.model_params(m);
}

float *gpu_model_grad(struct gpu_model *m, int t)
{
    model_gpu_need("gpu_model_grad");
    return model_fn.model_grad(m, t);
}

void gpu_model_bind_grads(struct gpu_model *m, float *const *grads)
{
    model_gpu_need("gpu_model_bind_grads");
    model_fn.model_bind_grads(m, grads);
}

int gpu_model_forward(struct gpu_model *m, const float *x, const uint8_t *y, size_t n,
                      double *loss_sum, struct ddp_err *err)
{
    model_gpu_need("gpu_model_forward");
    return model_fn.model_forward(m, x, y, n, loss_sum, err);
}

int gpu_model_backward(struct gpu_model *m, const struct model_hooks *hooks, struct ddp_err *err)
{
    model_gpu_need("gpu_model_backward");
    return model_fn.model_backward(m, hooks, err);
}

int gpu_model_count_correct(struct gpu_model *m, const float *x, const uint8_t *y, size_t n,
                            size_t *correct, struct ddp_err *err)
{
    model_gpu_need("gpu_model_count_correct");
    return model_fn.model_count_correct(m, x, y, n, correct, err);
}

int gpu_model_sgd(struct gpu_model *m, float *mom, float lr, float mu, float wd,
                  struct ddp_err *err)
{
    model_gpu_need("gpu_model_sgd");
    return model_fn.model_sgd(m, mom, lr, mu, wd, err);
}

#else
/* Built without CUDA: nothing to load. ISO C wants a translation unit to declare something. */
typedef int model_gpu_load_unused;
#endif
