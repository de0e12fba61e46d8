/*
 * train_opts.c - the run's option defaults (the main job's) and the pure arithmetic
 * trainer/train.h declares beside them: the learning-rate schedules and the thousands
 * format of the reports. Nothing here touches a run.
 */
#include <math.h>
#include <stdio.h>
#include <string.h>

#include "trainer/train.h"

void train_opts_default(struct train_opts *o)
{
    memset(o, 0, sizeof(*o));
    static const int w[4] = {784, 256, 128, 10};
    memcpy(o->widths, w, sizeof(w));
    o->nwidths = 4;
    o->model_spec = "mlp:784-256-128-10";
    o->data = NULL;
    o->epochs = 10;
    o->batch_size = 32;
    o->lr = 0.01;
    o->lr_scale_linear = 1;
    o->lr_schedule = -1;
    o->momentum = 0.9;
    o->weight_decay = 0.0;
    o->beta1 = 0.9;
    o->beta2 = 0.999;
    o->eps = 1e-8;
    o->seed = 1;
    o->bucket_cap_mb = 25.0;
    o->backend = "auto";
    o->checkpoint_dir = NULL;
    o->timeout_s = 60.0;
    o->overlap = 1;
}

void train_format_thousands(double v, char *buf, size_t size)
{
    char digits[32];
    unsigned long long n = v > 0 ? (unsigned long long)llround(v) : 0;
    int len = snprintf(digits, sizeof(digits), "%llu", n);
    size_t o = 0;
    for (int i = 0; i < len && o + 2 < size; i++) {
        if (i > 0 && (len - i) % 3 == 0)
            buf[o++] = ',';
        buf[o++] = digits[i];
    }
    buf[o < size ? o : size - 1] = '\0';
}

double train_lr_at(double base, int cosine, uint32_t epoch, uint32_t epochs)
{
    if (!cosine || epochs == 0)
        return base;
    return base * 0.5 * (1.0 + cos(3.14159265358979323846 * (double)epoch / (double)epochs));
}

double train_lr_at_step(double base, uint64_t step, uint64_t warmup, uint64_t total)
{
    if (step < warmup)
        return base * (double)(step + 1) / (double)warmup;
    if (total <= warmup)
        return base;
    double f = (double)(step - warmup) / (double)(total - warmup);
    if (f > 1.0)
        f = 1.0;
    return base * 0.5 * (1.0 + cos(3.14159265358979323846 * f));
}

int train_opts_check_given(const struct train_opts *o, struct ddp_err *err)
{
    int warmup_cosine = o->lr_schedule >= 0 ? o->lr_schedule == TRAIN_LR_WARMUP_COSINE : o->is_gpt;
    int by_units = o->sharding == TRAIN_SHARD_GRAD || o->sharding == TRAIN_SHARD_FULL ||
                   o->sharding == TRAIN_SHARD_HYBRID;
    for (int i = 0; i < o->ngiven; i++) {
        const char *f = o->given[i];
        const char *why = NULL;
        if (!o->is_gpt && (strcmp(f, "--clip-grad-norm") == 0 || strcmp(f, "--eval-every") == 0 ||
                           strcmp(f, "--generate") == 0))
            why = "only a gpt model uses it";
        else if (!o->adamw && (strcmp(f, "--betas") == 0 || strcmp(f, "--eps") == 0))
            why = "only --optimizer adamw uses it";
        else if (o->adamw && strcmp(f, "--momentum") == 0)
            why = "AdamW has no momentum flag (its betas: --betas)";
        else if (!warmup_cosine && strcmp(f, "--warmup-steps") == 0)
            why = "only --lr-schedule warmup-cosine (a gpt's default) uses it";
        else if (!by_units && strcmp(f, "--min-unit-params") == 0)
            why = "only --sharding grad, full or hybrid (units) uses it";
        else if (by_units && strcmp(f, "--bucket-cap-mb") == 0)
            why = "--sharding grad, full and hybrid reduce-scatter each unit, in no buckets";
        if (why)
            return err_set(err, DDP_EINVAL, "%s: %s, and this run (--model %s, %s) would ignore it",
                           f, why, o->model_spec, o->adamw ? "adamw" : "sgd");
    }
    return 0;
}
