/*
 * gradclip.h - global-norm gradient clipping, torch.nn.utils.clip_grad_norm_'s rule: with
 * the L2 norm of all gradients together, every gradient is multiplied by
 * min(1, max_norm / (norm + 1e-6)). In ddp-worker it runs on the all-reduced gradients, so
 * every rank computes the same norm and clips the same way.
 */
#ifndef DDP_TRAINER_GRADCLIP_H
#define DDP_TRAINER_GRADCLIP_H

#include <stddef.h>

/* The L2 norm (in double) of ntensors gradients, tensor k of size[k] floats at grads[k],
 * each times grad_scale. */
double grad_global_norm(float *const *grads, const size_t *size, int ntensors, float grad_scale);

/* The factor torch's rule multiplies the gradients by for this norm (1 when max_norm <= 0:
 * no clipping). */
float grad_clip_factor(double norm, double max_norm);

#endif
