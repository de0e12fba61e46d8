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

struct train_opts {
    int widths[MODEL_MAX_LAYERS + 1];
    int nwidths;
    int is_cnn; /* 1: --model cnn:..., the model is cnn, not widths */
    struct cnn_spec cnn;
    const char *model_spec; /* for messages and a CNN's checkpoints */
    const char *data;       /* --data */
    int epochs;
    size_t batch_size;   /* per rank */
    double lr;           /* before scaling */
    int lr_scale_linear; /* 1: lr * world_size */
    int lr_cosine;       /* 1: cosine decay over the epochs (per epoch), 0: constant */
    double momentum;
    double weight_decay;
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
};

/* Fills o with ddp-worker's defaults (the main job). */
void train_opts_default(struct train_opts *o);

/* Runs the job; returns the exit code. Failures are logged once, here. When a peer is lost
 * (exit 6) the process leaves at once with _exit(6) instead of returning: closing the broken
 * group could wait another timeout for the lost peer. */
int train_run(const struct train_opts *o);

/* The learning rate of epoch (0-based) of epochs: base, or with cosine base * (1 +
 * cos(pi * epoch / epochs)) / 2. */
double train_lr_at(double base, int cosine, uint32_t epoch, uint32_t epochs);

/* Formats v rounded to an integer with thousands separators ("14,250") into buf. */
void train_format_thousands(double v, char *buf, size_t size);

#endif
