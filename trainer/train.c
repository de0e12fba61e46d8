/*
 * train.c - the training loop of ddp-worker.
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
 *      reports, every LOCAL_RANK 0 saves a checkpoint.
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
#include "trainer/data.h"
#include "ddp/ddp.h"
#include "trainer/model_ops.h"
#include "ddp/reducer.h"
#include "ddp/resume.h"
#include "ddp/rng.h"
#include "ddp/sampler.h"
#include "ddp/trace.h"

#define TRAIN_EVAL_BATCH   1000
#define TRAIN_TRACE_EVENTS 200000

void train_opts_default(struct train_opts *o)
{
    memset(o, 0, sizeof(*o));
    static const int w[4] = {784, 256, 128, 10};
    memcpy(o->widths, w, sizeof(w));
    o->nwidths = 4;
    o->model_spec = "mlp:784-256-128-10";
    o->data = "fashion-mnist";
    o->epochs = 10;
    o->batch_size = 32;
    o->lr = 0.01;
    o->lr_scale_linear = 1;
    o->lr_cosine = 1;
    o->momentum = 0.9;
    o->weight_decay = 0.0;
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

struct hook_ctx {
    struct model_inst *mi;
    struct reducer *red;
    struct trace *trace;
};

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

static void write_metrics(int fd, const char *line)
{
    size_t len = strlen(line), off = 0;
    while (off < len) {
        ssize_t k = write(fd, line + off, len - off);
        if (k <= 0) {
            log_warn("cannot write metrics to DDP_METRICS_FD %d", fd);
            return;
        }
        off += (size_t)k;
    }
}

/*
 * The run's state, phase by phase (train_run):
 *   set-up   load_data, build_model, open_group, setup_reducer
 *   resume   resume_from_checkpoint (then rank 0's parameters everywhere, and the device copy)
 *   batches  setup_batches (sampler, batch buffers, hooks, test slice)
 *   epochs   train_epochs: per epoch train_epoch (train_step per batch), evaluate_and_report,
 *            save_checkpoint
 *   end      write_outputs (--dump-params, --trace), teardown
 * Each phase returns the process exit code (DDP_EXIT_OK to go on) with err saying why.
 */
struct run {
    const struct train_opts *o;
    struct dataset train, test;
    struct ddp_group *g;
    struct model *m;       /* the MLP as built, until mi takes it over */
    struct cnn *cnn;       /* or the CNN as built, until mi takes it over */
    struct model_inst *mi; /* the model trained: on the CPU, or on the group's GPU */
    struct reducer *red;
    float **views; /* the reducer's gradient view of each tensor */
    struct trace *trace;
    struct rng rng;
    char ckpt_dir[1024];
    double lr; /* the base lr, scaled by the world size under --lr-scale linear */
    struct sampler smp;
    int sampler_ok;
    float *xb; /* one batch, gathered from the sampler's indices */
    uint8_t *yb;
    struct hook_ctx hc;
    struct model_hooks hooks;
    size_t test_lo, test_hi; /* this rank's slice of the test set */
    uint32_t start_epoch;
    uint64_t step;
};

/* What one epoch's steps add up to on this rank. */
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
}

/* Step 1: the data (exit 3, or 2 for a bad --data), and the model's widths against it. */
static int load_data(struct run *r, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    int rc = data_load(o->data, o->seed, &r->train, &r->test, err);
    if (rc)
        return rc == DDP_EINVAL && strncmp(err->msg, "--data", 6) == 0 ? DDP_EXIT_USAGE
                                                                       : DDP_EXIT_DATA;
    if (o->is_cnn) {
        if (r->train.dim != CNN_IN_C * CNN_IN_H * CNN_IN_W) {
            err_set(err, DDP_EINVAL, "--model %s: wants %dx%dx%d images, the data has %zu features",
                    o->model_spec, CNN_IN_C, CNN_IN_H, CNN_IN_W, r->train.dim);
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
    if (o->is_cnn) {
        if (cnn_new(&o->cnn, o->batch_size, o->seed, &r->cnn, err) != 0)
            return DDP_EXIT_USAGE;
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
    if (r->cnn) {
        if (r->g->gpu) {
            err_set(err, DDP_EINVAL, "--model %s: the CNN runs on the CPU only: use --backend cpu",
                    o->model_spec);
            return DDP_EXIT_USAGE;
        }
        r->mi = model_inst_cnn_new(r->cnn, (float)o->momentum, (float)o->weight_decay);
        r->cnn = NULL;
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

/* The reducer over the instance's tensors, whose gradients become its bucket views; the
 * optional trace; the lr; and the job's log line. */
static int setup_reducer(struct run *r, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    struct ddp_group *g = r->g;
    struct model_inst *mi = r->mi;
    if (o->trace_path)
        r->trace = trace_new(TRAIN_TRACE_EVENTS);
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
    int rc = reducer_new(g->comm, g->world_size, counts, nt, &ro, r->trace, &r->red, err);
    free(counts);
    if (rc)
        return DDP_EXIT_FAILURE;
    r->views = xmalloc((size_t)nt * sizeof(float *));
    for (int t = 0; t < nt; t++)
        r->views[t] = reducer_grad(r->red, t);
    mi->ops->bind_grads(mi, r->views);
    r->lr = o->lr * (o->lr_scale_linear ? (double)g->world_size : 1.0);
    log_info("job rank=%d world_size=%d model=%s data=%s batch=%zu lr=%g buckets=%d overlap=%d",
             g->rank, g->world_size, o->model_spec, o->data, o->batch_size, r->lr,
             reducer_bucket_count(r->red), o->overlap);
    return DDP_EXIT_OK;
}

/* Step 3 of the file comment (the protocol is ddp_resume's): the agreed checkpoint into the
 * host state; then rank 0's parameters everywhere (and momentum: equal anyway after a
 * resume) and, the state being final, the device copy made from it. */
static int resume_from_checkpoint(struct run *r, struct ddp_err *err)
{
    struct model_inst *mi = r->mi;
    struct ddp_resume res;
    struct ckpt_id id = {.widths = r->o->widths, .nwidths = r->o->nwidths};
    if (r->o->is_cnn) {
        id.spec = r->o->model_spec;
        id.nparams = mi->ops->param_count(mi);
    }
    int rc = ddp_resume_id(r->g, r->ckpt_dir, &id, &res, err);
    if (rc)
        return rc == DDP_EPEER || rc == DDP_ETIMEOUT ? DDP_EXIT_PEER_LOST : DDP_EXIT_CHECKPOINT;
    if (res.epoch > 0) {
        ckpt_copy_arrays(&res.view, mi->ops->params(mi), mi->ops->momentum(mi));
        r->start_epoch = res.view.meta.epoch;
        r->step = res.view.meta.step;
        r->rng = res.view.meta.rng;
    }
    ddp_resume_release(&res);
    rc = ddp_broadcast(r->g, mi->ops->params(mi), mi->ops->param_count(mi) * sizeof(float), 0, err);
    if (rc)
        return ddp_exit_code_for(rc);
    if (mi->ops->sync_to_device(mi, err) != 0)
        return DDP_EXIT_DEVICE;
    return DDP_EXIT_OK;
}

/* This rank's sampler, the batch buffers, the backward's hooks and its test slice. */
static int setup_batches(struct run *r, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    struct ddp_group *g = r->g;
    if (sampler_init(&r->smp, r->train.n, g->rank, g->world_size, o->seed, 1, err) != 0)
        return DDP_EXIT_DATA;
    r->sampler_ok = 1;
    r->xb = xmalloc(o->batch_size * r->train.dim * sizeof(float));
    r->yb = xmalloc(o->batch_size);
    r->hc = (struct hook_ctx){.mi = r->mi, .red = r->red, .trace = r->trace};
    r->hooks =
        (struct model_hooks){.ctx = &r->hc, .layer_begin = hook_begin, .layer_end = hook_end};
    r->test_lo = r->test.n * (size_t)g->rank / (size_t)g->world_size;
    r->test_hi = r->test.n * ((size_t)g->rank + 1) / (size_t)g->world_size;
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
        memcpy(r->xb + i * d->dim, d->x + idx * d->dim, d->dim * sizeof(float));
        r->yb[i] = d->y[idx];
    }
    trace_set_step(r->trace, r->step);
    double ls = 0.0;
    int rc = mi->ops->forward(mi, r->xb, r->yb, n, &ls, err);
    if (rc == 0)
        rc = mi->ops->backward(mi, &r->hooks, err);
    if (rc == 0)
        rc = reducer_finish(r->red, err);
    if (rc == 0)
        rc = mi->ops->step(mi, lr, reducer_grad_scale(r->red), err);
    if (rc)
        return run_exit_code(r, rc);
    trace_event(r->trace, TRACE_STEP_END, 0);
    *loss_sum += ls;
    r->step++;
    if (r->g->env.heartbeat_file[0])
        touch_file(r->g->env.heartbeat_file);
    return DDP_EXIT_OK;
}

/* Step 4: the steps of one epoch. *stop when --max-steps was reached. */
static int train_epoch(struct run *r, uint32_t epoch, struct epoch_sums *sums, int *stop,
                       struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    sampler_set_epoch(&r->smp, epoch);
    float lr = (float)train_lr_at(r->lr, o->lr_cosine, epoch, (uint32_t)o->epochs);
    int64_t t0 = time_mono_ns();
    memset(sums, 0, sizeof(*sums));
    for (size_t start = 0; start < r->smp.num_samples; start += o->batch_size) {
        size_t n =
            r->smp.num_samples - start < o->batch_size ? r->smp.num_samples - start : o->batch_size;
        int code = train_step(r, start, n, lr, &sums->loss_sum, err);
        if (code)
            return code;
        sums->seen += (double)n;
        if (o->max_steps > 0 && r->step >= (uint64_t)o->max_steps) {
            *stop = 1;
            return DDP_EXIT_OK;
        }
    }
    sums->train_s = (double)(time_mono_ns() - t0) / 1e9;
    return DDP_EXIT_OK;
}

/* Step 4, the epoch's end: this rank's test slice scored, the loss sum, sample count,
 * correct predictions and time all-reduced; rank 0 prints the epoch line and reports it on
 * DDP_METRICS_FD. */
static int evaluate_and_report(struct run *r, uint32_t epoch, const struct epoch_sums *es,
                               struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    struct ddp_group *g = r->g;
    const struct dataset *t = &r->test;
    size_t correct = 0;
    int rc = r->mi->ops->count_correct(r->mi, t->x + r->test_lo * t->dim, t->y + r->test_lo,
                                       r->test_hi - r->test_lo, &correct, err);
    if (rc)
        return run_exit_code(r, rc);
    double sums[4] = {es->loss_sum, es->seen, (double)correct, es->train_s};
    rc = ddp_allreduce_f64(g, sums, 4, err);
    if (rc)
        return ddp_exit_code_for(rc);
    double loss = sums[0] / sums[1];
    double acc = sums[2] / (double)t->n;
    double secs = sums[3] / (double)g->world_size; /* mean over ranks */
    double sps = secs > 0 ? sums[1] / secs : 0.0;
    if (g->rank != 0)
        return DDP_EXIT_OK;
    char th[48];
    train_format_thousands(sps, th, sizeof(th));
    printf("epoch %u/%d | loss %.4f | test acc %.4f | %s samples/s\n", epoch + 1, o->epochs, loss,
           acc, th);
    fflush(stdout);
    if (g->env.metrics_fd >= 0) {
        char line[512];
        snprintf(line, sizeof(line),
                 "{\"epoch\": %u, \"epochs\": %d, \"loss\": %.4f, \"test_acc\": %.4f, "
                 "\"samples_per_s\": %.1f, \"world_size\": %d, \"generation\": %d, "
                 "\"time_s\": %.3f}\n",
                 epoch + 1, o->epochs, loss, acc, sps, g->world_size, g->env.generation, secs);
        write_metrics(g->env.metrics_fd, line);
    }
    return DDP_EXIT_OK;
}

/* The checkpoint of epoch (epochs completed) in this node's folder. */
static int save_checkpoint(struct run *r, uint32_t epoch, struct ddp_err *err)
{
    struct model_inst *mi = r->mi;
    struct ckpt_meta meta;
    memset(&meta, 0, sizeof(meta));
    meta.epoch = epoch;
    meta.step = r->step;
    meta.seed = r->o->seed;
    meta.rng = r->rng;
    meta.world_size = (uint32_t)r->g->world_size;
    if (r->o->is_cnn) {
        snprintf(meta.model, sizeof(meta.model), "%s", r->o->model_spec);
    } else {
        meta.nlayers = r->o->nwidths - 1;
        for (int i = 0; i < r->o->nwidths; i++)
            meta.widths[i] = (uint32_t)r->o->widths[i];
    }
    meta.nparams = mi->ops->param_count(mi);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = mi->ops->sync_to_host(mi, err);
    if (rc)
        return rc;
    rc = ckpt_encode(&meta, mi->ops->params(mi), mi->ops->momentum(mi), &buf, &len, err);
    if (rc == 0)
        rc = ckpt_save(r->ckpt_dir, epoch, buf, len, err);
    free(buf);
    return rc;
}

/* Step 4: the epochs from the resumed one on; every LOCAL_RANK 0 saves a checkpoint after
 * each. */
static int train_epochs(struct run *r, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    for (uint32_t epoch = r->start_epoch; epoch < (uint32_t)o->epochs; epoch++) {
        struct epoch_sums es;
        int stop = 0;
        int code = train_epoch(r, epoch, &es, &stop, err);
        if (code || stop)
            return code;
        code = evaluate_and_report(r, epoch, &es, err);
        if (code)
            return code;
        if (r->ckpt_dir[0] && r->g->env.local_rank == 0 && save_checkpoint(r, epoch + 1, err) != 0)
            return DDP_EXIT_CHECKPOINT;
        if (o->kill_after_epoch > 0 && epoch + 1 == (uint32_t)o->kill_after_epoch) {
            log_warn("--kill-after-epoch %d: killing this rank", o->kill_after_epoch);
            raise(SIGKILL);
        }
    }
    return DDP_EXIT_OK;
}

/* --dump-params and --trace. */
static int write_outputs(struct run *r, struct ddp_err *err)
{
    const struct train_opts *o = r->o;
    struct model_inst *mi = r->mi;
    if (o->dump_params) {
        if (mi->ops->sync_to_host(mi, err) != 0)
            return DDP_EXIT_DEVICE;
        if (fs_write_atomic(o->dump_params, mi->ops->params(mi),
                            mi->ops->param_count(mi) * sizeof(float), 0644, err) != 0)
            return DDP_EXIT_FAILURE;
    }
    if (r->trace && trace_write(r->trace, o->trace_path, err) != 0)
        return DDP_EXIT_FAILURE;
    return DDP_EXIT_OK;
}

/* Frees what the phases built, in the order the device needs: the reducer's buckets and
 * the model instance before the group's comm, the device's runtime after it. */
static void teardown(struct run *r)
{
    free(r->xb);
    free(r->yb);
    if (r->sampler_ok)
        sampler_release(&r->smp);
    /* After a comm error the reducer's in-flight work is abandoned with the comm. */
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
    if (code == DDP_EXIT_OK)
        code = resume_from_checkpoint(&r, &err);
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
