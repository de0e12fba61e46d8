/*
 * optim.h - SGD with momentum and weight decay, torch.optim.SGD's update (dampening 0, not
 * Nesterov):
 *   d   = grad + weight_decay * p
 *   buf = momentum * buf + d        (buf starts at 0, so the first step has buf = d)
 *   p  -= lr * buf
 * The momentum buffers are one allocation laid out like the model's parameters (definition
 * order), so a checkpoint stores them as one array.
 */
#ifndef DDP_TRAINER_OPTIM_H
#define DDP_TRAINER_OPTIM_H

#include <stddef.h>

#include "trainer/model.h"

struct optim {
    float lr;
    float momentum;
    float weight_decay;
    size_t n;   /* = model_param_count */
    float *buf; /* n momentum values, owned */
};

/* Sets up o for m's parameters with zero momentum buffers. Release with optim_release(). */
void optim_init(struct optim *o, const struct model *m, float lr, float momentum,
                float weight_decay);
void optim_release(struct optim *o);

/* One update of every parameter of m from its gradient times grad_scale (1 when the
 * gradients are already averaged; 1/W when the reducer left the sums: the scaling then costs
 * no pass of its own). */
void optim_step(struct optim *o, struct model *m, float grad_scale);

/* The same update for any model: ntensors tensors, tensor t of size[t] floats at off[t] in
 * params (and in o->buf), its gradient grads[t] (borrowed for the call). optim_step is this
 * over the MLP's tensors. */
void optim_step_tensors(struct optim *o, float *params, int ntensors, const size_t *off,
                        const size_t *size, float *const *grads, float grad_scale);

/* The update of cnt parameters p with momentum b and gradient g times grad_scale: the
 * arithmetic of every step above, for a range of them (a shard: trainer/zero.h). */
void optim_step_range(const struct optim *o, float *p, float *b, const float *g, size_t cnt,
                      float grad_scale);

/* As optim_init, for n parameters of any model. */
void optim_init_n(struct optim *o, size_t n, float lr, float momentum, float weight_decay);

#endif
