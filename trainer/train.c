/*
 * train.c - the training loop of ddp-worker.
 *
 * Every phase below reads and writes the one struct run (the group, the model instance, the
 * reducer, the sampler). The pieces that need no run state live apart: the sharded
 * strategies (trainer/sharded.c over zero.c and fsdp.c), the report lines (report.c), the
 * option defaults and schedules (train_opts.c), text.c, blas_core.c, the models and
 * optimizers.
 *
 * Order of a run (every rank):
 *   1. load the data (exit 3 on bad data), build the model (the MLP or the CNN) from the
 *      seed (identical on every rank), check its shape against the data (exit 2 naming
 *      --model);
 *   2. open the process group (env -> store -> comm; exit 4/5) and pick, once, the model
 *      instance (trainer/model_ops.h) on the device the group chose: the CPU or its GPU;
 *      from there on the model is reached only through the instance's ops;
 *   3. resume (ddp_resume, libddp/include/ddp/resume.h): each rank finds the newest valid
 *      checkpoint in its own folder, the ranks all-reduce a vector holding each rank's
 *      epoch, the lowest rank holding the newest epoch broadcasts its file, everyone loads
 *      it (and a LOCAL_RANK 0 that lacked it keeps a replica); then rank 0's parameters are
 *      broadcast, and a GPU instance makes its device copy;
 *   4. per epoch: set the sampler's epoch; per step: forward on this rank's batch (mean loss
 *      over the local batch), backward marking each layer's gradients ready (the reducer
 *      all-reduces full buckets meanwhile), reducer_finish (sums over ranks; the SGD step
 *      multiplies by 1/W as it reads them), SGD step,
 *      touch the heartbeat file; at the end all-reduce loss sum, sample count and correct
 *      test predictions (each rank scores a slice of the test set), rank 0 prints and
 *      reports, the checkpoint is saved (run_save_checkpoint: every LOCAL_RANK 0 a whole one,
 *      or under grad|full|hybrid every rank its shard).
 *
 * Preemption notice (ddp/notice.h): after each step the ranks all-reduce one flag; when any
 * rank got the notice, all of them stop after that step, save a checkpoint (as at an
 * epoch's end) holding the position within the epoch, and each exits DDP_EXIT_PREEMPTED. A
 * resume continues at the next step of that epoch (at the same world size: bit for bit as
 * if never stopped; at another, at the same sample position rounded down to a multiple of
 * the new world size).
 *
 * Equivalence: the mean over the local batch of B, averaged over W ranks, is the mean over
 * the global batch of W*B, and the sampler's rank r takes positions r, r+W, ... of the
 * shuffled list, so step s of W ranks sees exactly the samples step s of one process with
 * batch W*B sees: same gradients up to float rounding. --lr-scale linear multiplies the lr
 * by W; compare with --lr-scale none (or the 1-process run given lr*W).
 */
#include "trainer/train.h"

#include <cblas.h>
#include <fcntl.h>
#include <math.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/args.h"
#include "common/exitcodes.h"
#include "common/fsutil.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "ddp/ckpt.h"
#include "common/termsafe.h"
#include "trainer/data.h"
#include "ddp/ddp.h"
#include "trainer/model_ops.h"
#include "trainer/outpath.h"
#include "ddp/notice.h"
#include "ddp/reducer.h"
#include "ddp/rng.h"
#include "ddp/sampler.h"
#include "ddp/trace.h"
#include "trainer/text.h"
#include "trainer/report.h"
#include "trainer/run.h"
#include "trainer/sharded.h"
#include "trainer/simd.h"

#define TRAIN_EVAL_BATCH   1000
#define TRAIN_TRACE_EVENTS 200000

/* The data set a model trains on by default. */
static const char *data_of(const struct train_opts *o)
{
    return o->data ? o->data : o->is_gpt ? "fortunes" : "fashion-mnist";
}

/* The schedule in force: the model's default unless --lr-schedule said. */
static int schedule_of(const struct train_opts *o)
{
    if (o->lr_schedule >= 0)
        return o->lr_schedule;
    return o->is_gpt ? TRAIN_LR_WARMUP_COSINE : TRAIN_LR_COSINE;
}

static void hook_begin(void *ctx, int layer)
{
    struct hook_ctx *h = ctx;
    trace_event(h->trace, TRACE_BWD_BEGIN, layer);
}

static int hook_end(void *ctx, int layer, struct ddp_err *err)
{
    struct hook_ctx *h = ctx;
    trace_event(h->trace, TRACE_BWD_END, layer);
    /* The reducer wants the tensors in reverse order of definition. */
    int first = 0, count = 0;
    h->mi->ops->layer_tensors(h->mi, layer, &first, &count);
    int rc = 0;
    for (int t = first + count - 1; t >= first && rc == 0; t--)
        rc = reducer_mark_ready(h->red, t, err);
    return rc;
}

static void touch_file(const char *path)
{
    int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0644);
    if (fd < 0)
        return;
    (void)futimens(fd, NULL);
    close(fd);
}

/* What the steps since the last report add up to on this rank. */
struct epoch_sums {
    double loss_sum;
    double seen;
    double train_s;
};

/* The exit code for a failed step: CUDA errors are device errors on a GPU run. */
static int run_exit_code(const struct run *r, int rc)
{
    if (r->g && r->g->gpu && rc == DDP_EINTERNAL)
        return DDP_EXIT_DEVICE;
    return ddp_exit_code_for(rc);
}

static void set_blas_threads(void)
{
    const char *s = getenv("OMP_NUM_THREADS");
    long n = 1;
    struct ddp_err e;
    if (s && s[0] && args_parse_long("OMP_NUM_THREADS", s, 1, 1024, &n, &e) != 0) {
        log_warn("%s; using 1 thread", e.msg);
        n = 1;
    }
    openblas_set_num_threads((int)n);
    conv2d_dnnl_set_threads((int)n);
}

/* One line naming what each convolution runs on (--conv). */
static void log_cnn_convs(const struct cnn *m, enum conv_impl asked)
{
    char line[512];
    size_t len = 0;
    const struct cnn_spec *s = cnn_spec_of(m);
    for (int i = 0; i < s->nlayers && len < sizeof(line); i++) {
        if (s->layer[i].kind != CNN_CONV)
            continue;
        int k = snprintf(line + len, sizeof(line) - len, "%s c%dk%d %s", len ? "," : "",
                         s->layer[i].n, s->layer[i].k, conv_impl_name(cnn_conv_impl(m, i)));
        if (k < 0)
            break;
        len += (size_t)k;
    }
    log_info("convolutions (--conv %s):%s", conv_impl_name(asked), len ? line : " none");
}

/* Step 1: the data (exit 3, or 2 for a bad --data), and the model's widths against it. */
static int load_data(struct run *r, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    int rc = o->is_gpt ? text_load(data_of(o), o->gpt.ctx, &r->train, &r->test, &r->text, err)
                       : data_load(data_of(o), o->seed, &r->train, &r->test, err);
    if (rc)
        return rc == DDP_EINVAL && strncmp(err->msg, "--data", 6) == 0 ? DDP_EXIT_USAGE
                                                                       : DDP_EXIT_DATA;
    if (o->is_gpt) {
        log_info("corpus %s: %zu training bytes (%zu windows of %d), %zu validation bytes; "
                 "unigram entropy %.4f nats/byte",
                 data_of(o), r->text.train_bytes, r->train.n, o->gpt.ctx, r->text.valid_bytes,
                 r->text.unigram_nats);
        return DDP_EXIT_OK;
    }
    if (o->adamw) {
        err_set(err, DDP_EINVAL, "--optimizer adamw: only a gpt model trains with it here, not %s",
                o->model_spec);
        return DDP_EXIT_USAGE;
    }
    if (o->is_cnn) {
        if (r->train.dim != CNN_IN_C * CNN_IN_H * CNN_IN_W) {
            err_set(err, DDP_EINVAL, "--model %s: wants %dx%dx%d images, the data has %zu features",
                    o->model_spec, CNN_IN_C, CNN_IN_H, CNN_IN_W, r->train.dim);
            return DDP_EXIT_USAGE;
        }
        /* IDX images of the right size but another shape (14x56): not what the model sees */
        if (r->train.rows && (r->train.rows != CNN_IN_H || r->train.cols != CNN_IN_W)) {
            err_set(err, DDP_EINVAL, "--model %s: wants %dx%d images, the data's are %dx%d",
                    o->model_spec, CNN_IN_H, CNN_IN_W, r->train.rows, r->train.cols);
            return DDP_EXIT_USAGE;
        }
        if (o->cnn.classes != r->train.classes) {
            err_set(err, DDP_EINVAL, "--model %s: %d outputs do not match the data's %d classes",
                    o->model_spec, o->cnn.classes, r->train.classes);
            return DDP_EXIT_USAGE;
        }
        return DDP_EXIT_OK;
    }
    if ((size_t)o->widths[0] != r->train.dim) {
        err_set(err, DDP_EINVAL,
                "--model %s: input width %d does not match the data's %zu features", o->model_spec,
                o->widths[0], r->train.dim);
        return DDP_EXIT_USAGE;
    }
    if (o->widths[o->nwidths - 1] != r->train.classes) {
        err_set(err, DDP_EINVAL, "--model %s: output width %d does not match the data's %d classes",
                o->model_spec, o->widths[o->nwidths - 1], r->train.classes);
        return DDP_EXIT_USAGE;
    }
    return DDP_EXIT_OK;
}

/* Step 1: the model from the seed, the same on every rank, and the RNG a checkpoint keeps. */
static int build_model(struct run *r, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    size_t max_batch = o->batch_size > TRAIN_EVAL_BATCH ? o->batch_size : TRAIN_EVAL_BATCH;
    /* The CNN's activations are large (the first conv's 25 KiB a sample): it evaluates in
     * batches of the training batch. */
    if (train_opts_check_given(o, err) != 0)
        return DDP_EXIT_USAGE;
    if (o->conv_given && !o->is_cnn) {
        err_set(err, DDP_EINVAL, "--conv: --model %s has no convolutions (a cnn has)",
                o->model_spec);
        return DDP_EXIT_USAGE;
    }
    if (o->dropout > 0.0 && !o->is_gpt) {
        err_set(err, DDP_EINVAL,
                "--dropout: --model %s has no dropout flag (a gpt has; a cnn places dP layers "
                "in its spec, e.g. cnn:c32k5-p2-f256-d0.5-f10)",
                o->model_spec);
        return DDP_EXIT_USAGE;
    }
    if (o->is_gpt) {
        if (gpt_new(&o->gpt, o->batch_size, o->seed, model_memory_bytes(), &r->gpt, err) != 0)
            return DDP_EXIT_USAGE;
        gpt_set_dropout(r->gpt, (float)o->dropout);
    } else if (o->is_cnn) {
        int rc = cnn_new(&o->cnn, o->batch_size, o->conv, o->seed, &r->cnn, err);
        if (rc)
            return rc == DDP_EINVAL ? DDP_EXIT_USAGE : ddp_exit_code_for(rc);
        log_cnn_convs(r->cnn, o->conv);
    } else if (model_new(o->widths, o->nwidths, max_batch, o->seed, &r->m, err) != 0) {
        return DDP_EXIT_USAGE;
    }
    rng_seed(&r->rng, o->seed ^ 0x7a11ULL);
    return DDP_EXIT_OK;
}

/* The model instance for this process, picked once: on its GPU when ddp_group_open put it
 * on one, else on the CPU. Takes ownership of m. */
static struct model_inst *pick_model_inst(const struct ddp_group *g, struct model *m,
                                          const struct train_opts *o)
{
#ifdef DDP_HAVE_CUDA
    if (g->gpu)
        return model_inst_gpu_new(m, (float)o->momentum, (float)o->weight_decay);
#else
    (void)g;
#endif
    return model_inst_cpu_new(m, (float)o->momentum, (float)o->weight_decay);
}

/* Step 2: the process group (exit 2/4/5/8 as ddp_group_open says), then the model's
 * instance on the device the group chose, and the checkpoint folder. */
static int open_group(struct run *r, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    int code = DDP_EXIT_OK;
    if (ddp_group_open(o->backend, (int64_t)(o->timeout_s * 1000.0), &r->g, &code, err) != 0)
        return code != DDP_EXIT_OK ? code : DDP_EXIT_FAILURE;
    if (r->gpt) {
        if (r->g->gpu) {
            err_set(err, DDP_EINVAL, "--model %s: the GPT runs on the CPU only: use --backend cpu",
                    o->model_spec);
            return DDP_EXIT_USAGE;
        }
        struct optim_cfg c = {.adamw = o->adamw,
                              .momentum = (float)o->momentum,
                              .weight_decay = (float)o->weight_decay,
                              .beta1 = (float)o->beta1,
                              .beta2 = (float)o->beta2,
                              .eps = (float)o->eps,
                              .clip_norm = (float)o->clip_grad_norm};
        r->mi = model_inst_gpt_new(r->gpt, &c);
        r->gpt = NULL;
        snprintf(r->ckpt_spec, sizeof(r->ckpt_spec), "%s %s", o->model_spec,
                 o->adamw ? "adamw" : "sgd");
    } else if (r->cnn) {
        if (r->g->gpu) {
            err_set(err, DDP_EINVAL, "--model %s: the CNN runs on the CPU only: use --backend cpu",
                    o->model_spec);
            return DDP_EXIT_USAGE;
        }
        r->mi = model_inst_cnn_new(r->cnn, (float)o->momentum, (float)o->weight_decay);
        r->cnn = NULL;
        snprintf(r->ckpt_spec, sizeof(r->ckpt_spec), "%s", o->model_spec);
    } else {
        r->mi = pick_model_inst(r->g, r->m, o);
        r->m = NULL;
    }
    if (o->checkpoint_dir)
        snprintf(r->ckpt_dir, sizeof(r->ckpt_dir), "%s", o->checkpoint_dir);
    else
        snprintf(r->ckpt_dir, sizeof(r->ckpt_dir), "%s", r->g->env.checkpoint_dir);
    return DDP_EXIT_OK;
}

/* The reducer over the instance's tensors, whose gradients become its bucket views (unless
 * the run is sharded by units); the optional trace; the lr; and the job's log line. */
static int setup_reducer(struct run *r, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    struct ddp_group *g = r->g;
    struct model_inst *mi = r->mi;
    /* Every rank checks its own path; the ranks agree, so that all exit 2 together (one
     * alone would leave the others to fail "peer lost", which accuses a live node). */
    double bad =
        (o->trace_path && outpath_for("--trace", o->trace_path, g->rank, &r->trace_out, err)) ||
        (o->dump_params &&
         outpath_for("--dump-params", o->dump_params, g->rank, &r->dump_out, err));
    int mine = bad != 0.0;
    struct ddp_err ae;
    if ((o->trace_path || o->dump_params) && g->world_size > 1 &&
        ddp_allreduce_f64(g, &bad, 1, &ae) != 0) {
        *err = ae;
        return ddp_exit_code_for(ae.code);
    }
    if (bad != 0.0) {
        if (!mine)
            err_set(err, DDP_EINVAL,
                    "--trace or --dump-params: another rank cannot write its file (its log "
                    "names it)");
        return DDP_EXIT_USAGE;
    }
    if (r->trace_out)
        r->trace = trace_new(TRAIN_TRACE_EVENTS);
    r->lr = o->lr * (o->lr_scale_linear ? (double)g->world_size : 1.0);
    if (sharded_by_units(o, g->world_size)) {
        /* fsdp_new (after the resume) binds the gradients to its own block */
        log_info("job rank=%d world_size=%d model=%s data=%s batch=%zu lr=%g sharding=%s "
                 "overlap=%d blas=%s simd=%s",
                 g->rank, g->world_size, o->model_spec, data_of(o), o->batch_size, r->lr,
                 o->sharding == TRAIN_SHARD_FULL     ? "full"
                 : o->sharding == TRAIN_SHARD_HYBRID ? "hybrid"
                                                     : "grad",
                 o->overlap, openblas_get_corename(), simd_clone_name());
        return DDP_EXIT_OK;
    }
    int nt = mi->ops->tensor_count(mi);
    size_t *counts = xmalloc((size_t)nt * sizeof(size_t));
    for (int t = 0; t < nt; t++)
        counts[t] = mi->ops->tensor_size(mi, t);
    struct reducer_opts ro = {
        .cap_bytes = (size_t)(o->bucket_cap_mb * 1048576.0),
        .first_cap_bytes = REDUCER_FIRST_BUCKET_BYTES,
        .overlap = o->overlap,
        .device = g->gpu,
        .defer_average = 1, /* the step scales the sums (reducer_grad_scale) */
    };
    if (ro.cap_bytes == 0)
        ro.cap_bytes = 1;
    if (ro.first_cap_bytes > ro.cap_bytes)
        ro.first_cap_bytes = ro.cap_bytes;
    /* Sharded, the reducer only holds the gradients: zero_step reduce-scatters them. */
    int sharded = o->sharding != TRAIN_SHARD_NONE && g->world_size > 1;
    if (sharded)
        ro.pad_to = (size_t)g->world_size;
    int rc = reducer_new(sharded ? NULL : g->comm, sharded ? 1 : g->world_size, counts, nt, &ro,
                         r->trace, &r->red, err);
    free(counts);
    if (rc) /* its buckets' memory is the comm's: a peer lost meanwhile is exit 6 */
        return ddp_exit_code_for(rc);
    r->views = xmalloc((size_t)nt * sizeof(float *));
    for (int t = 0; t < nt; t++)
        r->views[t] = reducer_grad(r->red, t);
    mi->ops->bind_grads(mi, r->views);
    log_info("job rank=%d world_size=%d model=%s data=%s batch=%zu lr=%g buckets=%d overlap=%d "
             "blas=%s simd=%s",
             g->rank, g->world_size, o->model_spec, data_of(o), o->batch_size, r->lr,
             reducer_bucket_count(r->red), o->overlap, openblas_get_corename(), simd_clone_name());
    return DDP_EXIT_OK;
}

/* This rank's sampler, the batch buffers, the backward's hooks and its test slice. */
static int setup_batches(struct run *r, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    struct ddp_group *g = r->g;
    if (sampler_init(&r->smp, r->train.n, g->rank, g->world_size, o->seed, !o->no_shuffle, err) !=
        0)
        return DDP_EXIT_DATA;
    r->sampler_ok = 1;
    /* A text set's samples are windows of dim bytes, all in y. */
    if (r->train.x)
        r->xb = xmalloc(o->batch_size * r->train.dim * sizeof(float));
    r->yb = xmalloc(o->batch_size * (r->train.x ? 1 : r->train.dim));
    r->drop_keys = xcalloc(o->batch_size, sizeof(uint64_t));
    r->hc = (struct hook_ctx){.mi = r->mi, .red = r->red, .trace = r->trace};
    r->hooks =
        (struct model_hooks){.ctx = &r->hc, .layer_begin = hook_begin, .layer_end = hook_end};
    r->test_lo = r->test.n * (size_t)g->rank / (size_t)g->world_size;
    r->test_hi = r->test.n * ((size_t)g->rank + 1) / (size_t)g->world_size;
    uint64_t per_epoch = (r->smp.num_samples + o->batch_size - 1) / o->batch_size;
    r->total_steps = o->max_steps > 0 ? (uint64_t)o->max_steps : per_epoch * (uint64_t)o->epochs;
    return DDP_EXIT_OK;
}

/* A step's end: its loss added to *loss_sum, the count, the heartbeat. */
static int step_done(struct run *r, double ls, double *loss_sum)
{
    trace_event(r->trace, TRACE_STEP_END, 0);
    *loss_sum += ls;
    r->step++;
    if (r->g->env.heartbeat_file[0])
        touch_file(r->g->env.heartbeat_file);
    return DDP_EXIT_OK;
}

/* One step on the n samples at the sampler's positions start..: forward, backward (the
 * reducer all-reducing full buckets meanwhile), reducer_finish, the SGD step; the
 * heartbeat. Adds the loss sum to *loss_sum. */
static int train_step(struct run *r, size_t start, size_t n, float lr, double *loss_sum,
                      struct ddp_err *err)
{
    const struct dataset *d = &r->train;
    struct model_inst *mi = r->mi;
    for (size_t i = 0; i < n; i++) {
        size_t idx = r->smp.indices[start + i];
        if (d->x) {
            memcpy(r->xb + i * d->dim, d->x + idx * d->dim, d->dim * sizeof(float));
            r->yb[i] = d->y[idx];
        } else {
            memcpy(r->yb + i * d->dim, d->y + idx * d->dim, d->dim);
        }
        r->drop_keys[i] = dropout_sample_key(r->o->seed, r->step, idx);
    }
    if (mi->ops->set_sample_keys) /* a model whose dropout is off ignores them */
        mi->ops->set_sample_keys(mi, r->drop_keys, n);
    trace_set_step(r->trace, r->step);
    double ls = 0.0;
    int rc = mi->ops->forward(mi, r->xb, r->yb, n, &ls, err);
    if (r->sh.fsdp) {
        if (rc == 0)
            rc = fsdp_end_forward(r->sh.fsdp, err);
        if (rc == 0)
            rc = mi->ops->backward(mi, fsdp_backward_hooks(r->sh.fsdp), err);
        int rc2 = fsdp_end_backward(r->sh.fsdp, rc ? NULL : err);
        if (rc == 0)
            rc = rc2;
        if (rc == 0)
            rc = fsdp_step(r->sh.fsdp, lr, 1.0f / (float)r->g->world_size, err);
        if (rc)
            return run_exit_code(r, rc);
        return step_done(r, ls, loss_sum);
    }
    if (rc == 0)
        rc = mi->ops->backward(mi, &r->hooks, err);
    if (rc == 0)
        rc = reducer_finish(r->red, err);
    if (rc == 0 && r->sh.zero)
        rc = zero_step(r->sh.zero, lr, 1.0f / (float)r->g->world_size, err);
    else if (rc == 0)
        rc = mi->ops->step(mi, lr, reducer_grad_scale(r->red), err);
    if (rc)
        return run_exit_code(r, rc);
    return step_done(r, ls, loss_sum);
}

static int evaluate_and_report(struct run *r, const struct report_at *at, struct epoch_sums *es,
                               struct ddp_err *err);

/* After a step (epoch: epochs completed, pos: samples of the next one trained, global): the
 * ranks agree whether any got a preemption notice; if so this step's checkpoint is saved and the answer is DDP_EXIT_PREEMPTED (else DDP_EXIT_OK). */
static int notice_check(struct run *r, uint32_t epoch, uint32_t pos, struct ddp_err *err)
{
    int any = 0;
    int rc = ddp_notice_agree(r->g, &any, err);
    if (rc)
        return ddp_exit_code_for(rc);
    if (!any)
        return DDP_EXIT_OK;
    int code = pos > 0 ? run_save_checkpoint(r, epoch, pos, err) : DDP_EXIT_OK;
    if (code == DDP_EXIT_PEER_LOST)
        return code;
    int saved = code == DDP_EXIT_OK;
    /* No rank leaves before every checkpoint is written: an exit ends the generation, and
     * the stop that follows must not find a rank still writing. */
    double done = 0.0;
    if (r->g->world_size > 1 && (rc = ddp_allreduce_f64(r->g, &done, 1, err)) != 0)
        return ddp_exit_code_for(rc);
    if (!saved)
        return DDP_EXIT_CHECKPOINT;
    err_set(err, DDP_EINTERNAL, "preempted%s at step %llu (epoch %u, position %u of the epoch)%s",
            r->ckpt_dir[0] ? ": checkpoint" : "", (unsigned long long)r->step, epoch + 1, pos,
            r->ckpt_dir[0] ? "; resume continues there"
                           : ": no checkpoint folder here (--checkpoint-dir is empty), so a "
                             "restart resumes only from what other nodes saved, or begins anew");
    return DDP_EXIT_PREEMPTED;
}

/* Whether --max-steps is given and the run has taken that many steps. */
static int at_max_steps(const struct run *r)
{
    return r->o->max_steps > 0 && r->step >= (uint64_t)r->o->max_steps;
}

/* Step 4: the steps of one epoch, from the resumed position in the first one. *stop when
 * --max-steps was reached. A language model with --eval-every also reports every that many
 * steps (the sums restart after each report). */
static int train_epoch(struct run *r, uint32_t epoch, struct epoch_sums *sums, int *stop,
                       struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    size_t w = (size_t)r->g->world_size;
    sampler_set_epoch(&r->smp, epoch);
    int sched = schedule_of(o);
    float lr = (float)train_lr_at(r->lr, sched == TRAIN_LR_COSINE, epoch, (uint32_t)o->epochs);
    memset(sums, 0, sizeof(*sums));
    size_t nsteps = (r->smp.num_samples + o->batch_size - 1) / o->batch_size;
    size_t first = epoch == r->start_epoch ? r->start_pos / w : 0;
    /* the steps left from first (a resume at another world size starts between two of this
     * one's steps): the last of them is step nsteps */
    size_t left = first < r->smp.num_samples
                      ? (r->smp.num_samples - first + o->batch_size - 1) / o->batch_size
                      : 0;
    size_t k = nsteps - left;
    for (size_t start = first; start < r->smp.num_samples; start += o->batch_size, k++) {
        if (at_max_steps(r)) {
            *stop = 1; /* resumed at or past --max-steps: no step more */
            return DDP_EXIT_OK;
        }
        size_t n =
            r->smp.num_samples - start < o->batch_size ? r->smp.num_samples - start : o->batch_size;
        /* The schedule's position s: the step of this world's epochs (epoch x steps per epoch
         * + k), not the step counter, which a resume at another world size (or batch size)
         * carries over in steps of the old one; with --max-steps, the steps taken. */
        uint64_t s = o->max_steps > 0 ? r->step : (uint64_t)epoch * nsteps + k;
        if (sched == TRAIN_LR_WARMUP_COSINE)
            lr = (float)train_lr_at_step(r->lr, s, (uint64_t)o->warmup_steps, r->total_steps);
        int64_t t0 = time_mono_ns();
        r->lr_last = lr;
        int code = train_step(r, start, n, lr, &sums->loss_sum, err);
        if (code)
            return code;
        sums->train_s += (double)(time_mono_ns() - t0) / 1e9;
        sums->seen += (double)n;
        if (o->notice_at_step > 0 && r->step == (uint64_t)o->notice_at_step && r->g->rank == 0)
            raise(ddp_notice_signal());
        int at_max = at_max_steps(r);
        int last = k + 1 == nsteps;
        /* --max-steps on the epoch's last step: the epoch's own report and checkpoint follow
         * (train_epochs), as without the flag */
        if (at_max && last)
            break;
        if (r->mi->ops->evaluate &&
            (at_max || (!last && o->eval_every > 0 && r->step % (uint64_t)o->eval_every == 0))) {
            struct report_at at = {.epoch = epoch,
                                   .progress = (double)epoch + (double)(k + 1) / (double)nsteps,
                                   .step = k + 1,
                                   .steps = nsteps};
            code = evaluate_and_report(r, &at, sums, err);
            if (code)
                return code;
        }
        if (at_max) { /* done: a notice at this very step has nothing left to save for */
            *stop = 1;
            return DDP_EXIT_OK;
        }
        if (start + n < r->smp.num_samples &&
            (code = notice_check(r, epoch, (uint32_t)((start + n) * w), err)) != 0)
            return code;
    }
    return DDP_EXIT_OK;
}

/* A language model's validation: this rank's windows of the held-out set in batches of the
 * training batch, their summed loss and next-byte hits. With parameters sharded (full,
 * hybrid), each batch's forward gathers the units as training does, so every rank runs as
 * many batches as the largest slice needs (slices differ by one window at most): a rank past
 * its windows shadows the others' gathers with a forward it discards, as torch's Join does
 * for uneven inputs. */
static int evaluate_text(struct run *r, double *loss_sum, size_t *hits, struct ddp_err *err)
{
    const struct dataset *t = &r->test;
    size_t b = r->o->batch_size;
    size_t w = (size_t)r->g->world_size;
    int gathers = r->sh.fsdp && (r->o->sharding == TRAIN_SHARD_FULL ||
                                 r->o->sharding == TRAIN_SHARD_HYBRID); /* grad: none */
    size_t most = gathers ? (t->n + w - 1) / w : r->test_hi - r->test_lo;
    size_t nb = (most + b - 1) / b;
    *loss_sum = 0.0;
    *hits = 0;
    for (size_t k = 0; k < nb; k++) {
        size_t i = r->test_lo + k * b;
        int shadow = i >= r->test_hi;
        size_t n = shadow ? 1 : r->test_hi - i < b ? r->test_hi - i : b;
        if (shadow)
            i = r->test_lo < r->test_hi ? r->test_lo : 0;
        double ls = 0.0;
        size_t h = 0;
        int rc = r->mi->ops->evaluate(r->mi, NULL, t->y + i * t->dim, n, &ls, &h, err);
        if (r->sh.fsdp) {
            fsdp_release(r->sh.fsdp);
            if (rc == 0)
                rc = fsdp_end_forward(r->sh.fsdp, err);
        }
        if (rc)
            return rc;
        if (!shadow) {
            *loss_sum += ls;
            *hits += h;
        }
    }
    return 0;
}

/* What every report carries about the run. */
static struct report_run report_run_of(const struct run *r)
{
    return (struct report_run){.epochs = r->o->epochs,
                               .world_size = r->g->world_size,
                               .generation = r->g->env.generation,
                               .metrics_fd = r->g->env.metrics_fd,
                               .global_step = r->step,
                               .lr = r->lr_last};
}

/* Step 4, a report (the epoch's end; for a language model also every --eval-every steps):
 * this rank's test slice scored, the loss sum, sample count, correct predictions (or, for a
 * language model, the validation loss) and time all-reduced; rank 0 prints the line and
 * reports it on DDP_METRICS_FD. The sums restart. */
static int evaluate_and_report_whole(struct run *r, const struct report_at *at,
                                     struct epoch_sums *es, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    struct ddp_group *g = r->g;
    const struct dataset *t = &r->test;
    if (r->mi->ops->evaluate) {
        double vsum = 0.0;
        size_t hits = 0;
        int rc = evaluate_text(r, &vsum, &hits, err);
        if (rc)
            return run_exit_code(r, rc);
        double sums[5] = {es->loss_sum, es->seen, vsum, (double)hits, es->train_s};
        rc = ddp_allreduce_f64(g, sums, 5, err);
        if (rc)
            return ddp_exit_code_for(rc);
        if (g->rank == 0) {
            /* sums: training loss, windows, validation loss, hits, seconds */
            size_t T = (size_t)o->gpt.ctx;
            struct report_run run = report_run_of(r);
            double secs = sums[4] / (double)g->world_size;
            report_language(at, &run, sums[1] > 0 ? sums[0] / sums[1] : 0.0, sums[2] / (double)t->n,
                            sums[3] / ((double)t->n * (double)T),
                            secs > 0 ? sums[1] * (double)T / secs : 0.0,
                            secs > 0 ? sums[1] / secs : 0.0, secs);
        }
        memset(es, 0, sizeof(*es));
        return DDP_EXIT_OK;
    }
    size_t correct = 0;
    int rc = r->mi->ops->count_correct(r->mi, t->x + r->test_lo * t->dim, t->y + r->test_lo,
                                       r->test_hi - r->test_lo, &correct, err);
    if (rc)
        return run_exit_code(r, rc);
    double sums[4] = {es->loss_sum, es->seen, (double)correct, es->train_s};
    rc = ddp_allreduce_f64(g, sums, 4, err);
    if (rc)
        return ddp_exit_code_for(rc);
    memset(es, 0, sizeof(*es));
    double loss = sums[0] / sums[1];
    double acc = sums[2] / (double)t->n;
    double secs = sums[3] / (double)g->world_size; /* mean over ranks */
    double sps = secs > 0 ? sums[1] / secs : 0.0;
    if (g->rank == 0) {
        struct report_run run = report_run_of(r);
        report_classifier(at, &run, loss, acc, sps, secs);
    }
    return DDP_EXIT_OK;
}

/* As evaluate_and_report_whole. Sharded by units, a language model's validation gathers
 * unit by unit (evaluate_text); a classifier's count_correct, which batches by itself, runs
 * on the whole parameters, gathered for it. */
static int evaluate_and_report(struct run *r, const struct report_at *at, struct epoch_sums *es,
                               struct ddp_err *err)
{
    int whole = r->sh.fsdp && !r->mi->ops->evaluate;
    if (whole && fsdp_materialize(r->sh.fsdp, err) != 0)
        return ddp_exit_code_for(err->code);
    int code = evaluate_and_report_whole(r, at, es, err);
    if (whole)
        fsdp_release(r->sh.fsdp);
    return code;
}

/* Step 4: the epochs from the resumed one on, with a checkpoint after each. */
static int train_epochs(struct run *r, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    for (uint32_t epoch = r->start_epoch; epoch < (uint32_t)o->epochs; epoch++) {
        struct epoch_sums es;
        int stop = 0;
        int code = train_epoch(r, epoch, &es, &stop, err);
        if (code || stop)
            return code;
        struct report_at at = {.epoch = epoch, .progress = (double)epoch + 1.0, .end_of_epoch = 1};
        code = evaluate_and_report(r, &at, &es, err);
        if (code)
            return code;
        if ((code = run_save_checkpoint(r, epoch + 1, 0, err)) != 0)
            return code;
        if (at_max_steps(r))
            return DDP_EXIT_OK; /* --max-steps reached on the epoch's last step */
        /* a notice during the epoch's last step: that epoch's checkpoint is the one */
        if (epoch + 1 < (uint32_t)o->epochs && (code = notice_check(r, epoch + 1, 0, err)) != 0)
            return code;
        if (o->kill_after_epoch > 0 && epoch + 1 == (uint32_t)o->kill_after_epoch) {
            log_warn("--kill-after-epoch %d: killing this rank", o->kill_after_epoch);
            raise(SIGKILL);
        }
    }
    return DDP_EXIT_OK;
}

/* --generate: rank 0 of a language model samples bytes after a newline and prints them,
 * control characters escaped (common/termsafe.h). */
static void generate_text(struct run *r)
{
    const struct train_opts *o = r->o;
    struct model_inst *mi = r->mi;
    if (o->generate <= 0 || !mi->ops->generate || r->g->rank != 0)
        return;
    size_t n = (size_t)o->generate;
    uint8_t *bytes = xmalloc(n);
    const uint8_t prompt[1] = {'\n'};
    mi->ops->generate(mi, prompt, 1, n, o->seed ^ 0x6e6e7261ULL, bytes);
    size_t cap = 4 * n + 1;
    char *out = xmalloc(cap);
    (void)termsafe_escape((const char *)bytes, n, out, cap);
    printf("--- %zu generated bytes ---\n%s\n--- end ---\n", n, out);
    fflush(stdout);
    free(out);
    free(bytes);
}

/* --generate, --dump-params and --trace. */
static int write_outputs(struct run *r, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    struct model_inst *mi = r->mi;
    /* A sharded run's parameters gathered whole (every rank: a collective), kept so. */
    if (r->sh.fsdp && (o->generate > 0 || o->dump_params) && fsdp_materialize(r->sh.fsdp, err) != 0)
        return ddp_exit_code_for(err->code);
    generate_text(r);
    if (r->dump_out) {
        if (mi->ops->sync_to_host(mi, err) != 0)
            return DDP_EXIT_DEVICE;
        if (fs_write_atomic(r->dump_out, mi->ops->params(mi),
                            mi->ops->param_count(mi) * sizeof(float), 0644, err) != 0)
            return DDP_EXIT_FAILURE;
    }
    if (r->trace && trace_write(r->trace, r->trace_out, err) != 0)
        return DDP_EXIT_FAILURE;
    return DDP_EXIT_OK;
}

/* Frees what the phases built, in the order the device needs: the reducer's buckets and
 * the model instance before the group's comm, the device's runtime after it. */
static void teardown(struct run *r)
{
    free(r->trace_out);
    free(r->dump_out);
    free(r->xb);
    free(r->yb);
    free(r->drop_keys);
    if (r->sampler_ok)
        sampler_release(&r->smp);
    /* After a comm error the reducer's in-flight work is abandoned with the comm. */
    sharded_free(&r->sh);
    reducer_free(r->red);
    free(r->views);
    trace_free(r->trace);
    void (*close_device)(void) = r->mi ? r->mi->ops->close_device : NULL;
    if (r->mi)
        r->mi->ops->free(r->mi);
    ddp_group_close(r->g);
    if (close_device)
        close_device();
    model_free(r->m);
    cnn_free(r->cnn);
    gpt_free(r->gpt);
    data_release(&r->train);
    data_release(&r->test);
}

int train_run(const struct train_opts *o)
{
    struct ddp_err err;
    err_clear(&err);
    struct run r;
    memset(&r, 0, sizeof(r));
    r.o = o;

    set_blas_threads();
    int code = load_data(&r, &err);
    if (code == DDP_EXIT_OK)
        code = build_model(&r, &err);
    if (code == DDP_EXIT_OK)
        code = open_group(&r, &err);
    if (code == DDP_EXIT_OK)
        code = setup_reducer(&r, &err);
    if (code == DDP_EXIT_OK && ddp_notice_install(&err) != 0)
        code = DDP_EXIT_USAGE;
    if (code == DDP_EXIT_OK)
        code = run_resume(&r, &err);
    if (code == DDP_EXIT_OK)
        code = setup_batches(&r, &err);
    if (code == DDP_EXIT_OK)
        code = train_epochs(&r, &err);
    if (code == DDP_EXIT_OK)
        code = write_outputs(&r, &err);
    if (code != DDP_EXIT_OK) {
        log_error("%s (exit %d)", err.msg, code);
        if (code == DDP_EXIT_PEER_LOST) {
            /* The group is broken: closing it would wait on the lost peer (rank 0's store
             * waits, bounded by the timeout, for every rank to leave), delaying the exit the
             * agent needs to start the next generation. Nothing is left to save: leave now. */
            fflush(stdout);
            _exit(code);
        }
    }
    teardown(&r);
    return code;
}
