/*
 * run.h - the state of one ddp-worker run (train_run, trainer/train.c), shared by the files
 * that carry out its phases: train.c (set-up, the epochs, the end) and run_ckpt.c (the
 * checkpoints: the resume and each save). Private to trainer/.
 */
#ifndef DDP_TRAINER_RUN_H
#define DDP_TRAINER_RUN_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/ckpt.h"
#include "ddp/ddp.h"
#include "ddp/reducer.h"
#include "ddp/rng.h"
#include "ddp/sampler.h"
#include "ddp/trace.h"
#include "trainer/data.h"
#include "trainer/dropout.h"
#include "trainer/model.h"
#include "trainer/model_cnn.h"
#include "trainer/model_gpt.h"
#include "trainer/model_ops.h"
#include "trainer/sharded.h"
#include "trainer/text.h"
#include "trainer/train.h"

/* The backward's hooks of an unsharded run: trace events, and the reducer's ready marks. */
struct hook_ctx {
    struct model_inst *mi;
    struct reducer *red;
    struct trace *trace;
};

/*
 * The run's state, phase by phase (train_run):
 *   set-up   load_data, build_model, open_group, setup_reducer
 *   resume   run_resume (trainer/run_ckpt.c; then rank 0's parameters everywhere, and the
 *            device copy)
 *   batches  setup_batches (sampler, batch buffers, hooks, test slice)
 *   epochs   train_epochs: per epoch train_epoch (train_step per batch), evaluate_and_report,
 *            run_save_checkpoint (trainer/run_ckpt.c)
 *   end      write_outputs (--dump-params, --trace), teardown
 * Each phase returns the process exit code (DDP_EXIT_OK to go on) with err saying why.
 */
struct run {
    const struct train_opts *o;
    struct dataset train, test;
    struct ddp_group *g;
    struct model *m;                    /* the MLP as built, until mi takes it over */
    struct cnn *cnn;                    /* or the CNN as built, until mi takes it over */
    struct gpt *gpt;                    /* or the GPT as built, until mi takes it over */
    struct text_info text;              /* a GPT's corpus */
    char ckpt_spec[CKPT_MAX_MODEL + 1]; /* the model (and optimizer) its checkpoints name */
    uint64_t total_steps;               /* of the whole run: the per-step schedule's length */
    struct model_inst *mi;              /* the model trained: on the CPU, or on the group's GPU */
    struct reducer *red;
    struct sharded sh; /* --sharding other than none at W > 1 */
    float **views;     /* the reducer's gradient view of each tensor */
    struct trace *trace;
    char *trace_out, *dump_out; /* what this rank writes (trainer/outpath.h), NULL none */
    struct rng rng;
    char ckpt_dir[1024];
    double lr;      /* the base lr, scaled by the world size under --lr-scale linear */
    double lr_last; /* the lr of the last step taken (reports carry it) */
    struct sampler smp;
    int sampler_ok;
    float *xb; /* one batch, gathered from the sampler's indices */
    uint8_t *yb;
    uint64_t *drop_keys; /* --dropout: the batch's sample keys (trainer/dropout.h) */
    struct hook_ctx hc;
    struct model_hooks hooks;
    size_t test_lo, test_hi; /* this rank's slice of the test set */
    uint32_t start_epoch;
    uint32_t start_pos; /* samples of start_epoch trained before the resume (global) */
    uint64_t step;
};

/* The resume (the file comment of train.c, step 3): the ranks agree on the newest checkpoint,
 * sharded or whole, load it, broadcast rank 0's parameters and set the strategy up.
 * Collective. Returns the exit code. */
int run_resume(struct run *r, struct ddp_err *err);

/* Collective: the checkpoint of epoch (epochs completed) and pos (samples of the next one
 * trained). By units every rank writes its shards, with a copy on another node; otherwise the
 * state is made whole and every LOCAL_RANK 0 writes it. Returns the exit code. */
int run_save_checkpoint(struct run *r, uint32_t epoch, uint32_t pos, struct ddp_err *err);

#endif
