/*
 * main.c - ddp-worker: parses the flags (strictly: an unknown flag or a bad value is exit 2
 * with a message naming the flag) and runs the training loop of train.c.
 */
#include <cblas.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/args.h"
#include "common/exitcodes.h"
#include "common/log.h"
#include "trainer/blas_core.h"
#include "trainer/dropout.h"
#include "trainer/train.h"
#include "ddp_version.h"

static const char usage_text[] =
    "usage: ddp-worker [--model mlp:784-256-128-10|cnn:c32k5-p2-c64k5-p2-f1024-f10|gpt:L-H-D-T]\n"
    "                  [--data fashion-mnist|idx:IMAGES,LABELS[,TIMAGES,TLABELS]|synthetic:N:D:C|\n"
    "                          fortunes|text:FILE[,VALID_FILE]]\n"
    "                  [--epochs N] [--batch-size B] [--lr X] [--lr-scale linear|none]\n"
    "                  [--lr-schedule cosine|constant|warmup-cosine] [--warmup-steps N]\n"
    "                  [--optimizer sgd|adamw] [--momentum M] [--weight-decay W]\n"
    "                  [--betas B1,B2] [--eps E] [--clip-grad-norm X]\n"
    "                  [--eval-every N] [--generate N] [--dropout P] [--seed S]\n"
    "                  [--conv auto|im2col|onednn]\n"
    "                  [--shuffle on|off]\n"
    "                  [--bucket-cap-mb MB] [--sharding none|optimizer|grad|full|hybrid]\n"
    "                  [--min-unit-params N]\n"
    "                  [--backend auto|cpu|nccl] [--checkpoint-dir D] [--timeout S]\n"
    "                  [--no-overlap] [--trace FILE] [--dump-params FILE] [--max-steps N]\n"
    "                  [--kill-after-epoch N] [--notice-at-step N]   (fault injection for tests)\n"
    "                  [--version] [--help]\n"
    "       ddp-worker --blas-core   (prints the OpenBLAS kernels it runs: blas_core.h)\n";

static int usage_error(const char *msg)
{
    fprintf(stderr, "ddp-worker: %s\n%s", msg, usage_text);
    return DDP_EXIT_USAGE;
}

/* Flags that take a value. */
static const char *const valued[] = {"--model",
                                     "--data",
                                     "--epochs",
                                     "--batch-size",
                                     "--lr",
                                     "--lr-scale",
                                     "--momentum",
                                     "--weight-decay",
                                     "--seed",
                                     "--bucket-cap-mb",
                                     "--backend",
                                     "--checkpoint-dir",
                                     "--timeout",
                                     "--lr-schedule",
                                     "--trace",
                                     "--dump-params",
                                     "--max-steps",
                                     "--kill-after-epoch",
                                     "--optimizer",
                                     "--betas",
                                     "--eps",
                                     "--clip-grad-norm",
                                     "--warmup-steps",
                                     "--eval-every",
                                     "--generate",
                                     "--shuffle",
                                     "--notice-at-step",
                                     "--sharding",
                                     "--min-unit-params",
                                     "--dropout",
                                     "--conv",
                                     NULL};

static int is_valued(const char *name)
{
    for (int i = 0; valued[i]; i++)
        if (strcmp(valued[i], name) == 0)
            return 1;
    return 0;
}

static int apply(struct train_opts *o, const char *name, const char *val, struct ddp_err *err)
{
    long l;
    double d;
    int rc = 0;
    if (strcmp(name, "--model") == 0) {
        o->is_cnn = strncmp(val, "cnn:", 4) == 0;
        o->is_gpt = strncmp(val, "gpt:", 4) == 0;
        if (o->is_cnn)
            rc = cnn_parse_spec(val, model_memory_bytes(), &o->cnn, err);
        else if (o->is_gpt)
            rc = gpt_parse_spec(val, model_memory_bytes(), &o->gpt, err);
        else
            rc = model_parse_spec(val, o->widths, &o->nwidths, err);
        if (rc == 0)
            o->model_spec = val;
    } else if (strcmp(name, "--data") == 0) {
        if (!val[0])
            return err_set(err, DDP_EINVAL, "--data: empty");
        o->data = val;
    } else if (strcmp(name, "--epochs") == 0) {
        rc = args_parse_long(name, val, 1, 1000000, &l, err);
        if (rc == 0)
            o->epochs = (int)l;
    } else if (strcmp(name, "--batch-size") == 0) {
        rc = args_parse_long(name, val, 1, 65536, &l, err);
        if (rc == 0)
            o->batch_size = (size_t)l;
    } else if (strcmp(name, "--lr") == 0) {
        rc = args_parse_double(name, val, 0.0, 1000.0, &d, err);
        if (rc == 0)
            o->lr = d;
    } else if (strcmp(name, "--lr-scale") == 0) {
        if (strcmp(val, "linear") == 0)
            o->lr_scale_linear = 1;
        else if (strcmp(val, "none") == 0)
            o->lr_scale_linear = 0;
        else
            return err_set(err, DDP_EINVAL, "--lr-scale: want linear or none, got '%s'", val);
    } else if (strcmp(name, "--lr-schedule") == 0) {
        if (strcmp(val, "cosine") == 0)
            o->lr_schedule = TRAIN_LR_COSINE;
        else if (strcmp(val, "constant") == 0)
            o->lr_schedule = TRAIN_LR_CONSTANT;
        else if (strcmp(val, "warmup-cosine") == 0)
            o->lr_schedule = TRAIN_LR_WARMUP_COSINE;
        else
            return err_set(err, DDP_EINVAL,
                           "--lr-schedule: want cosine, constant or warmup-cosine, got '%s'", val);
    } else if (strcmp(name, "--warmup-steps") == 0) {
        rc = args_parse_long(name, val, 0, 1000000000L, &l, err);
        if (rc == 0)
            o->warmup_steps = l;
    } else if (strcmp(name, "--optimizer") == 0) {
        if (strcmp(val, "sgd") == 0)
            o->adamw = 0;
        else if (strcmp(val, "adamw") == 0)
            o->adamw = 1;
        else
            return err_set(err, DDP_EINVAL, "--optimizer: want sgd or adamw, got '%s'", val);
    } else if (strcmp(name, "--betas") == 0) {
        char b1[64];
        const char *comma = strchr(val, ',');
        if (!comma || (size_t)(comma - val) >= sizeof(b1))
            return err_set(err, DDP_EINVAL, "--betas: want B1,B2 (e.g. 0.9,0.999), got '%s'", val);
        memcpy(b1, val, (size_t)(comma - val));
        b1[comma - val] = '\0';
        rc = args_parse_double(name, b1, 0.0, 0.999999, &d, err);
        if (rc == 0) {
            o->beta1 = d;
            rc = args_parse_double(name, comma + 1, 0.0, 0.999999, &d, err);
        }
        if (rc == 0)
            o->beta2 = d;
    } else if (strcmp(name, "--eps") == 0) {
        rc = args_parse_double(name, val, 1e-30, 1.0, &d, err);
        if (rc == 0)
            o->eps = d;
    } else if (strcmp(name, "--clip-grad-norm") == 0) {
        rc = args_parse_double(name, val, 0.0, 1e9, &d, err);
        if (rc == 0)
            o->clip_grad_norm = d;
    } else if (strcmp(name, "--sharding") == 0) {
        if (strcmp(val, "none") == 0)
            o->sharding = TRAIN_SHARD_NONE;
        else if (strcmp(val, "optimizer") == 0)
            o->sharding = TRAIN_SHARD_OPTIMIZER;
        else if (strcmp(val, "grad") == 0)
            o->sharding = TRAIN_SHARD_GRAD;
        else if (strcmp(val, "full") == 0)
            o->sharding = TRAIN_SHARD_FULL;
        else if (strcmp(val, "hybrid") == 0)
            o->sharding = TRAIN_SHARD_HYBRID;
        else
            return err_set(err, DDP_EINVAL,
                           "--sharding: want none, optimizer, grad, full or hybrid, got '%s'", val);
    } else if (strcmp(name, "--min-unit-params") == 0) {
        rc = args_parse_long(name, val, 0, 4000000000L, &l, err);
        if (rc == 0)
            o->min_unit_params = (size_t)l;
    } else if (strcmp(name, "--shuffle") == 0) {
        if (strcmp(val, "on") == 0)
            o->no_shuffle = 0;
        else if (strcmp(val, "off") == 0)
            o->no_shuffle = 1;
        else
            return err_set(err, DDP_EINVAL, "--shuffle: want on or off, got '%s'", val);
    } else if (strcmp(name, "--eval-every") == 0) {
        rc = args_parse_long(name, val, 0, 1000000000L, &l, err);
        if (rc == 0)
            o->eval_every = l;
    } else if (strcmp(name, "--generate") == 0) {
        rc = args_parse_long(name, val, 0, 1000000L, &l, err);
        if (rc == 0)
            o->generate = l;
    } else if (strcmp(name, "--dropout") == 0) {
        rc = args_parse_double(name, val, 0.0, DROPOUT_MAX_P, &d, err);
        if (rc == 0)
            o->dropout = d;
    } else if (strcmp(name, "--conv") == 0) {
        if (strcmp(val, "auto") == 0)
            o->conv = CONV_AUTO;
        else if (strcmp(val, "im2col") == 0)
            o->conv = CONV_IM2COL;
        else if (strcmp(val, "onednn") == 0)
            o->conv = CONV_ONEDNN;
        else
            return err_set(err, DDP_EINVAL, "--conv: want auto, im2col or onednn, got '%s'", val);
        o->conv_given = 1;
    } else if (strcmp(name, "--momentum") == 0) {
        rc = args_parse_double(name, val, 0.0, 1.0, &d, err);
        if (rc == 0)
            o->momentum = d;
    } else if (strcmp(name, "--weight-decay") == 0) {
        rc = args_parse_double(name, val, 0.0, 1.0, &d, err);
        if (rc == 0)
            o->weight_decay = d;
    } else if (strcmp(name, "--seed") == 0) {
        rc = args_parse_long(name, val, 0, 2147483647L, &l, err);
        if (rc == 0)
            o->seed = (uint64_t)l;
    } else if (strcmp(name, "--bucket-cap-mb") == 0) {
        rc = args_parse_double(name, val, 0.000001, 4096.0, &d, err);
        if (rc == 0)
            o->bucket_cap_mb = d;
    } else if (strcmp(name, "--backend") == 0) {
        if (strcmp(val, "auto") != 0 && strcmp(val, "cpu") != 0 && strcmp(val, "nccl") != 0)
            return err_set(err, DDP_EINVAL, "--backend: want auto, cpu or nccl, got '%s'", val);
        o->backend = val;
    } else if (strcmp(name, "--checkpoint-dir") == 0) {
        if (strlen(val) >= 1024) /* struct run's ckpt_dir */
            return err_set(err, DDP_EINVAL, "--checkpoint-dir: %zu bytes, at most 1023",
                           strlen(val));
        o->checkpoint_dir = val; /* "" turns checkpoints off, even with DDP_CHECKPOINT_DIR */
    } else if (strcmp(name, "--timeout") == 0) {
        rc = args_parse_double(name, val, 0.1, 86400.0, &d, err);
        if (rc == 0)
            o->timeout_s = d;
    } else if (strcmp(name, "--trace") == 0 || strcmp(name, "--dump-params") == 0) {
        if (!val[0])
            return err_set(err, DDP_EINVAL, "%s: want a file name, got ''", name);
        *(name[2] == 't' ? &o->trace_path : &o->dump_params) = val;
    } else if (strcmp(name, "--kill-after-epoch") == 0) {
        rc = args_parse_long(name, val, 1, 1000000, &l, err);
        if (rc == 0)
            o->kill_after_epoch = (int)l;
    } else if (strcmp(name, "--notice-at-step") == 0) {
        rc = args_parse_long(name, val, 1, 1000000000L, &l, err);
        if (rc == 0)
            o->notice_at_step = l;
    } else if (strcmp(name, "--max-steps") == 0) {
        rc = args_parse_long(name, val, 1, 1000000000L, &l, err);
        if (rc == 0)
            o->max_steps = l;
    }
    return rc;
}

int main(int argc, char **argv)
{
    struct train_opts o;
    struct ddp_err err;
    char name[64];
    train_opts_default(&o);
    log_init("ddp-worker", LOG_INFO);
    blas_core_fix(argv);
    signal(SIGPIPE, SIG_IGN);
    for (int i = 1; i < argc; i++) {
        const char *a = argv[i];
        const char *val = NULL;
        if (strcmp(a, "--help") == 0 || strcmp(a, "-h") == 0) {
            fputs(usage_text, stdout);
            return DDP_EXIT_OK;
        }
        if (strcmp(a, "--blas-core") == 0) {
            /* the kernels OpenBLAS runs here (after blas_core_fix): benchmarks give their
             * peers the same with OPENBLAS_CORETYPE */
            printf("%s\n", openblas_get_corename());
            return DDP_EXIT_OK;
        }
        if (strcmp(a, "--version") == 0) {
            printf("ddp-worker %s (commit %s)\n", DDP_VERSION, DDP_COMMIT);
            return DDP_EXIT_OK;
        }
        if (strcmp(a, "--no-overlap") == 0) {
            o.overlap = 0;
            continue;
        }
        const char *eq = strchr(a, '=');
        size_t nl = eq ? (size_t)(eq - a) : strlen(a);
        if (nl >= sizeof(name)) {
            fprintf(stderr, "ddp-worker: unknown flag '%s'\n%s", a, usage_text);
            return DDP_EXIT_USAGE;
        }
        memcpy(name, a, nl);
        name[nl] = '\0';
        if (!is_valued(name)) {
            int bare = strcmp(name, "--no-overlap") == 0 || strcmp(name, "--version") == 0 ||
                       strcmp(name, "--help") == 0 || strcmp(name, "--blas-core") == 0;
            fprintf(stderr,
                    bare ? "ddp-worker: %s takes no value\n%s"
                         : "ddp-worker: unknown flag '%s'\n%s",
                    name, usage_text);
            return DDP_EXIT_USAGE;
        }
        if (eq) {
            val = eq + 1;
        } else {
            if (i + 1 >= argc) {
                fprintf(stderr, "ddp-worker: %s needs a value\n%s", name, usage_text);
                return DDP_EXIT_USAGE;
            }
            val = argv[++i];
        }
        if (apply(&o, name, val, &err) != 0)
            return usage_error(err.msg);
        static const char *const checked[TRAIN_GIVEN_MAX] = {
            "--clip-grad-norm", "--eval-every",   "--generate",        "--betas",        "--eps",
            "--momentum",       "--warmup-steps", "--min-unit-params", "--bucket-cap-mb"};
        for (size_t k = 0; k < TRAIN_GIVEN_MAX && checked[k]; k++) {
            if (strcmp(name, checked[k]) != 0)
                continue;
            int seen = 0; /* each flag once, however often given */
            for (int g = 0; g < o.ngiven; g++)
                seen |= o.given[g] == checked[k];
            if (!seen)
                o.given[o.ngiven++] = checked[k];
            break;
        }
    }
    return train_run(&o);
}
