/*
 * model_cnn.h - a convolutional network for 1 x 28 x 28 images (Fashion-MNIST) built from
 * trainer/conv.h, pool.h and dense.h, with a softmax cross-entropy loss.
 *
 * The spec "cnn:c32k5-p2-c64k5-p2-f1024-f10" lists the layers in order, '-' between them:
 *   cNkK  Conv2d to N channels, kernel K, stride 1, padding K/2, then ReLU
 *   pM    MaxPool2d with kernel and stride M
 *   fN    Linear to N features (the input flattened as torch.flatten does), then ReLU,
 *         except the last layer, which must be an f: its N is the number of classes.
 *   dP    Dropout with probability P (0 < P <= 0.95, e.g. d0.5; trainer/dropout.h), in
 *         training forwards only (cnn_set_dropout_keys); site: the layer's index.
 * Convolutions and pools come before the first f. The layers that hold parameters (c and f)
 * are numbered 0, 1, ... in order; parameter layer l has tensors 2l (its weight, in torch's
 * layout) and 2l+1 (its bias), all in one allocation in that order (the checkpoint's
 * arrays), initialized like torch (uniform in +-1/sqrt(fan_in)). Gradients are views the
 * caller binds (the reducer's bucket memory) or, unbound, one allocation the model owns.
 *
 * The backward writes each gradient and calls hooks->layer_end(l) as soon as parameter
 * layer l's two tensors are final, last layer first, before it goes on.
 *
 * Each convolution runs im2col + OpenBLAS (trainer/conv.h) or oneDNN (trainer/conv_dnnl.h),
 * as cnn_new's impl gives it (conv_impl_for: CONV_AUTO is oneDNN where it is built).
 */
#ifndef DDP_TRAINER_MODEL_CNN_H
#define DDP_TRAINER_MODEL_CNN_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "trainer/conv_dnnl.h"
#include "trainer/model.h"

#define CNN_MAX_LAYERS   32
#define CNN_MAX_SPEC     256
#define CNN_MAX_CHANNELS 4096
#define CNN_MAX_FEATURES (1 << 20)
#define CNN_IN_C         1
#define CNN_IN_H         28
#define CNN_IN_W         28

enum cnn_kind { CNN_CONV, CNN_POOL, CNN_FC, CNN_DROP };

struct cnn_layer_spec {
    enum cnn_kind kind;
    int n;   /* channels (c), window (p) or features (f) */
    int k;   /* kernel (c only) */
    float p; /* dropout's probability (d only) */
};

/* A parsed, shape-checked spec. */
struct cnn_spec {
    char text[CNN_MAX_SPEC + 1]; /* as given */
    int nlayers;
    struct cnn_layer_spec layer[CNN_MAX_LAYERS];
    int nparam_layers; /* c and f layers */
    uint64_t nparams;
    int classes; /* the last f's N */
};

struct cnn;

/*
 * Parses spec for a 1 x 28 x 28 input and checks its shapes (every layer leaves at least a
 * 1 x 1 image) and its size (model_check_size's bound, against memory bytes). DDP_EINVAL
 * with a message naming --model and what is wrong. *out is written only on success.
 */
int cnn_parse_spec(const char *spec, uint64_t memory, struct cnn_spec *out, struct ddp_err *err);

/* Creates the CNN of s for batches of up to max_batch samples (1..65536), its convolutions
 * on impl, its parameters from seed. DDP_EINVAL naming --conv for CONV_ONEDNN in a build
 * without oneDNN. Caller frees with cnn_free(). */
int cnn_new(const struct cnn_spec *s, size_t max_batch, enum conv_impl impl, uint64_t seed,
            struct cnn **out, struct ddp_err *err);
void cnn_free(struct cnn *m);

const struct cnn_spec *cnn_spec_of(const struct cnn *m); /* borrowed */
size_t cnn_max_batch(const struct cnn *m);
size_t cnn_param_count(const struct cnn *m);
int cnn_tensor_count(const struct cnn *m); /* 2 * nparam_layers */
size_t cnn_tensor_size(const struct cnn *m, int t);
size_t cnn_tensor_offset(const struct cnn *m, int t);
/* What layer i's convolution runs on (CONV_IM2COL or CONV_ONEDNN; layer i is a c). */
enum conv_impl cnn_conv_impl(const struct cnn *m, int i);
/* Floats per sample of layer i's output (0 <= i < the spec's nlayers). */
size_t cnn_layer_out_count(const struct cnn *m, int i);
float *cnn_params(struct cnn *m);
float *cnn_grad(struct cnn *m, int t);
/* As model_bind_grads: grads[t] borrowed, for every t < cnn_tensor_count(m). */
void cnn_bind_grads(struct cnn *m, float *const *grads);

/* As model_set_forward_hooks (trainer/model.h): fwd->layer_begin(pl) before parameter layer
 * pl's forward. */
void cnn_set_forward_hooks(struct cnn *m, const struct model_hooks *fwd);

/* As model_forward: x is n x 784 floats (borrowed until the backward), y the labels. */
int cnn_forward(struct cnn *m, const float *x, const uint8_t *y, size_t n, double *loss_sum,
                struct ddp_err *err);
int cnn_backward(struct cnn *m, const struct model_hooks *hooks, struct ddp_err *err);
/* Makes the next cnn_forward a training forward whose d layers drop, sample s with keys[s]
 * (copied; n <= max_batch), and its backward drop the same; without it (cnn_count_correct,
 * an evaluation) nothing drops. */
void cnn_set_dropout_keys(struct cnn *m, const uint64_t *keys, size_t n);
/* *correct: how many of the n samples of x the model classifies as y. Errors as
 * cnn_forward's. */
int cnn_count_correct(struct cnn *m, const float *x, const uint8_t *y, size_t n, size_t *correct,
                      struct ddp_err *err);

#endif
