/*
 * adamw.h - AdamW, torch.optim.AdamW's update (decoupled weight decay, bias correction,
 * amsgrad off), tensor by tensor, with step count t starting at 1:
 *   p  *= 1 - lr * weight_decay
 *   m   = beta1 * m + (1 - beta1) * g
 *   v   = beta2 * v + (1 - beta2) * g^2
 *   p  -= lr / (1 - beta1^t) * m / (sqrt(v) / sqrt(1 - beta2^t) + eps)
 * The state is one allocation of 2n floats, m then v, each laid out like the parameters
 * (definition order), so a checkpoint stores it as two arrays. Weight decay applies to every
 * tensor, as torch's AdamW with one parameter group.
 */
#ifndef DDP_TRAINER_ADAMW_H
#define DDP_TRAINER_ADAMW_H

#include <stddef.h>
#include <stdint.h>

struct adamw {
    float lr, beta1, beta2, eps, weight_decay;
    uint64_t t; /* steps taken; the checkpoint's step restores it */
    size_t n;
    float *state; /* 2n: m, then v; owned */
};

/* Zero state for n parameters. Release with adamw_release(). */
void adamw_init(struct adamw *a, size_t n, float beta1, float beta2, float eps, float weight_decay);
void adamw_release(struct adamw *a);

/* One update (t += 1 first) of ntensors tensors, tensor k of size[k] floats at off[k] in
 * params (and in m and v), from its gradient grads[k] times grad_scale (borrowed). */
void adamw_step_tensors(struct adamw *a, float *params, int ntensors, const size_t *off,
                        const size_t *size, float *const *grads, float grad_scale);

/* One step in parts, for a range of the parameters (a shard: trainer/zero.h):
 * adamw_begin counts the step (t += 1) and computes its coefficients, adamw_update applies
 * them to n parameters p with moments m, v and gradient g times grad_scale. adamw_step_tensors
 * is these two. */
struct adamw_coef {
    float step_size, bc2_sqrt, decay;
};
void adamw_begin(struct adamw *a, struct adamw_coef *c);
void adamw_update(const struct adamw *a, const struct adamw_coef *c, float *p, float *m, float *v,
                  const float *g, size_t n, float grad_scale);

#endif
