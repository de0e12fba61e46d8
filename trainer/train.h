/*
 * train.h - ddp-worker's training loop: data, model (MLP or CNN), reducer, SGD, sampler, checkpoints,
 * per-epoch metrics. main.c parses the flags into struct train_opts; train_run does the rest
 * and returns the process exit code (common/exitcodes.h).
 */
#ifndef DDP_TRAINER_TRAIN_H
#define DDP_TRAINER_TRAIN_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "trainer/model.h"
#include "trainer/model_cnn.h"
#include "trainer/model_gpt.h"

/* The flags train_opts_check_given() refuses where the run would ignore them, at most. */
#define TRAIN_GIVEN_MAX 12

struct train_opts {
    int widths[MODEL_MAX_LAYERS + 1];
    int nwidths;
    int is_cnn; /* 1: --model cnn:..., the model is cnn, not widths */
    struct cnn_spec cnn;
    int is_gpt; /* 1: --model gpt:..., the model is gpt */
    struct gpt_spec gpt;
    const char *model_spec; /* for messages and the checkpoints of a CNN or GPT */
    const char *data;       /* --data; NULL: the model's default (fashion-mnist, fortunes) */
    int epochs;
    size_t batch_size;   /* per rank */
    double lr;           /* before scaling */
    int lr_scale_linear; /* 1: lr * world_size */
    int lr_schedule;     /* TRAIN_LR_*; -1: the model's default */
    long warmup_steps;   /* TRAIN_LR_WARMUP_COSINE: linear warmup over this many steps */
    int adamw;           /* --optimizer adamw (else sgd) */
    double momentum;
    double weight_decay;      /* SGD: L2 added to the gradient; AdamW: decoupled decay */
    double beta1, beta2, eps; /* AdamW */
    double clip_grad_norm;    /* > 0: global-norm clipping after the all-reduce */
    long eval_every;          /* a language model: also report every N steps (0: epochs only) */
    long generate;            /* a language model: rank 0 samples this many bytes at the end */
    double dropout;           /* --dropout: p of every dropout site of a gpt (0: none) */
    enum conv_impl conv;      /* --conv: a cnn's convolutions (trainer/conv_dnnl.h) */
    int conv_given;           /* --conv was on the command line */
    const char *given[TRAIN_GIVEN_MAX]; /* the flags train_opts_check_given() checks that
                                         * were given, each once */
    int ngiven;
    int no_shuffle;         /* --shuffle off: every epoch in the data's order */
    int sharding;           /* TRAIN_SHARD_*: --sharding */
    size_t min_unit_params; /* --min-unit-params: grad|full group hook layers into units of
                               * at least this many parameters (0: a unit per layer) */
    uint64_t seed;
    double bucket_cap_mb;
    const char *backend;        /* auto | cpu | nccl */
    const char *checkpoint_dir; /* NULL: DDP_CHECKPOINT_DIR, "" there: none */
    double timeout_s;
    int overlap;             /* 0 with --no-overlap */
    const char *trace_path;  /* --trace, or NULL */
    const char *dump_params; /* --dump-params, or NULL */
    long max_steps;          /* --max-steps, 0 = no limit */
    int kill_after_epoch;    /* --kill-after-epoch (fault injection for tests): after this
                               epoch's checkpoint, SIGKILL this process; 0 = never */
    long notice_at_step;     /* --notice-at-step (tests): rank 0 raises its own preemption
                               notice signal after this step; 0 = never */
};

/* Learning-rate schedules (--lr-schedule). */
enum {
    TRAIN_LR_CONSTANT = 0,
    TRAIN_LR_COSINE = 1, /* cosine over the epochs, set per epoch (the MLP's, CNN's default) */
    TRAIN_LR_WARMUP_COSINE = 2, /* linear warmup, then cosine over the run's steps, set per step
                                   (the GPT's default) */
};

/* --sharding (trainer/zero.h for optimizer, trainer/fsdp.h for grad and full). */
enum {
    TRAIN_SHARD_NONE = 0,
    TRAIN_SHARD_OPTIMIZER = 1,
    TRAIN_SHARD_GRAD = 2,
    TRAIN_SHARD_FULL = 3,
    TRAIN_SHARD_HYBRID = 4 /* full within a node, replicated across nodes */
};

/* Fills o with ddp-worker's defaults (the main job). */
/* Refuses (DDP_EINVAL naming it) a given flag the model or optimizer chosen would ignore:
 * --clip-grad-norm, --eval-every and --generate other than on a gpt, --betas and --eps
 * without AdamW, --momentum with it, --warmup-steps without the warmup-cosine schedule. A
 * flag that changes nothing is a user's mistake, said before the run rather than found
 * after it. */
int train_opts_check_given(const struct train_opts *o, struct ddp_err *err);
void train_opts_default(struct train_opts *o);

/* Runs the job; returns the exit code. Failures are logged once, here. When a peer is lost
 * (exit 6) the process leaves at once with _exit(6) instead of returning: closing the broken
 * group could wait another timeout for the lost peer. */
int train_run(const struct train_opts *o);

/* The learning rate of epoch (0-based) of epochs: base, or with cosine base * (1 +
 * cos(pi * epoch / epochs)) / 2. */
double train_lr_at(double base, int cosine, uint32_t epoch, uint32_t epochs);

/* The learning rate of step (0-based) of total steps: base * (step + 1) / warmup during the
 * warmup, then base * (1 + cos(pi * (step - warmup) / (total - warmup))) / 2. */
double train_lr_at_step(double base, uint64_t step, uint64_t warmup, uint64_t total);

/* Formats v rounded to an integer with thousands separators ("14,250") into buf. */
void train_format_thousands(double v, char *buf, size_t size);

#endif
