/*
 * model_gpu.h - the MLP of trainer/model.h on the GPU: the same layout (tensor 2l is W_l
 * [widths[l+1] x widths[l]] row-major, 2l+1 is b_l; all parameters in one device block, in
 * definition order), the same math (mlp_kernels.h: kernels and cuBLAS), and the same hooks,
 * so the reducer and the train loop drive it as they drive the CPU model.
 *
 * The code is in libddptrainergpu.so (model_gpu.c, mlp_kernels.cu); the program calls these
 * names in model_gpu_load.c, which loads that library at the first gpu_model_new() and
 * forwards to it. When it cannot be loaded, gpu_model_new() fails saying why.
 *
 * Parameters, gradients and activations live in device memory. Inputs come from the host
 * (one batch copied per forward). Gradients are views the caller binds (the reducer's
 * device bucket memory) or a block the model owns.
 */
#ifndef DDP_TRAINER_GPU_MODEL_GPU_H
#define DDP_TRAINER_GPU_MODEL_GPU_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "trainer/model.h"

struct gpu_model;

/* Creates the model on the current GPU (gpu_init first) with the nparams host parameters
 * params (copied; laid out as model_params() of a CPU model of the same widths). Caller
 * frees with gpu_model_free(). */
int gpu_model_new(const int *widths, int nwidths, size_t max_batch, const float *params,
                  struct gpu_model **out, struct ddp_err *err);
void gpu_model_free(struct gpu_model *m);

size_t gpu_model_param_count(const struct gpu_model *m);
int gpu_model_tensor_count(const struct gpu_model *m);
size_t gpu_model_tensor_size(const struct gpu_model *m, int t);
size_t gpu_model_tensor_offset(const struct gpu_model *m, int t);
/* Device pointers. */
float *gpu_model_params(struct gpu_model *m);
float *gpu_model_grad(struct gpu_model *m, int t);
/* Binds device gradient views grads[t] (borrowed). */
void gpu_model_bind_grads(struct gpu_model *m, float *const *grads);

/* As model_forward: x (n x widths[0]) and y are host memory; *loss_sum is the host sum. */
int gpu_model_forward(struct gpu_model *m, const float *x, const uint8_t *y, size_t n,
                      double *loss_sum, struct ddp_err *err);
/* As model_backward (kernels queued on the compute stream; hooks called in layer order as
 * each layer's gradient kernels are queued). */
int gpu_model_backward(struct gpu_model *m, const struct model_hooks *hooks, struct ddp_err *err);
/* As model_count_correct. */
int gpu_model_count_correct(struct gpu_model *m, const float *x, const uint8_t *y, size_t n,
                            size_t *correct, struct ddp_err *err);
/* The SGD step of trainer/optim.c on the device: mom is a device block of param_count floats. */
int gpu_model_sgd(struct gpu_model *m, float *mom, float lr, float mu, float wd,
                  struct ddp_err *err);

#endif
