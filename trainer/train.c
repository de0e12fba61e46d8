/*
 * train.c - the training loop of ddp-worker.
 *
 * Order of a run (every rank):
 *   1. load the data (exit 3 on bad data), build the model from the seed (identical on
 *      every rank), check its widths against the data (exit 2 naming --model);
 *   2. open the process group (env -> store -> comm; exit 4/5);
 *   3. resume (ddp_resume, libddp/include/ddp/resume.h): each rank finds the newest valid
 *      checkpoint in its own folder, the ranks all-reduce a vector holding each rank's
 *      epoch, the lowest rank holding the newest epoch broadcasts its file, everyone loads
 *      it (and a LOCAL_RANK 0 that lacked it keeps a replica); then rank 0's parameters are
 *      broadcast;
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

#define TRAIN_EVAL_BATCH 1000
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

struct run {
    const struct train_opts *o;
    struct ddp_group *g;
    struct model *m;       /* the model as built, until mi takes it over */
    struct model_inst *mi; /* the model trained: on the CPU, or on the group's GPU */
    struct reducer *red;
    struct trace *trace;
    struct rng rng;
    char ckpt_dir[1024];
    uint32_t start_epoch;
    uint64_t step;
};

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

/* The exit code for a failed step: CUDA errors are device errors on a GPU run. */
static int run_exit_code(const struct run *r, int rc)
{
    if (r->g && r->g->gpu && rc == DDP_EINTERNAL)
        return DDP_EXIT_DEVICE;
    return ddp_exit_code_for(rc);
}

/* Step 3 of the file comment (the protocol is ddp_resume's): loads the agreed checkpoint
 * into the host parameters and momentum. Returns an error code; err says why. */
static int resume(struct run *r, struct ddp_err *err)
{
    struct ddp_resume res;
    int rc = ddp_resume(r->g, r->ckpt_dir, r->o->widths, r->o->nwidths, &res, err);
    if (rc)
        return rc;
    if (res.epoch > 0) {
        ckpt_copy_arrays(&res.view, r->mi->ops->params(r->mi), r->mi->ops->momentum(r->mi));
        r->start_epoch = res.view.meta.epoch;
        r->step = res.view.meta.step;
        r->rng = res.view.meta.rng;
    }
    ddp_resume_release(&res);
    return 0;
}

static int save_checkpoint(struct run *r, uint32_t epoch, struct ddp_err *err)
{
    struct ckpt_meta meta;
    memset(&meta, 0, sizeof(meta));
    meta.epoch = epoch;
    meta.step = r->step;
    meta.seed = r->o->seed;
    meta.rng = r->rng;
    meta.world_size = (uint32_t)r->g->world_size;
    meta.nlayers = r->o->nwidths - 1;
    for (int i = 0; i < r->o->nwidths; i++)
        meta.widths[i] = (uint32_t)r->o->widths[i];
    meta.nparams = r->mi->ops->param_count(r->mi);
    uint8_t *buf = NULL;
    size_t len = 0;
    int rc = r->mi->ops->sync_to_host(r->mi, err);
    if (rc)
        return rc;
    rc = ckpt_encode(&meta, r->mi->ops->params(r->mi), r->mi->ops->momentum(r->mi), &buf, &len,
                     err);
    if (rc == 0)
        rc = ckpt_save(r->ckpt_dir, epoch, buf, len, err);
    free(buf);
    return rc;
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

int train_run(const struct train_opts *o)
{
    struct ddp_err err;
    err_clear(&err);
    int code = DDP_EXIT_OK, rc;
    struct dataset train, test;
    memset(&train, 0, sizeof(train));
    memset(&test, 0, sizeof(test));
    struct run r;
    memset(&r, 0, sizeof(r));
    r.o = o;
    struct sampler smp;
    memset(&smp, 0, sizeof(smp));
    float *xb = NULL;
    uint8_t *yb = NULL;
    float **views = NULL;
    int sampler_ok = 0;

    set_blas_threads();
    rc = data_load(o->data, o->seed, &train, &test, &err);
    if (rc) {
        code = rc == DDP_EINVAL && strncmp(err.msg, "--data", 6) == 0 ? DDP_EXIT_USAGE
                                                                      : DDP_EXIT_DATA;
        goto fail;
    }
    if ((size_t)o->widths[0] != train.dim) {
        rc = err_set(&err, DDP_EINVAL,
                     "--model %s: input width %d does not match the data's %zu features",
                     o->model_spec, o->widths[0], train.dim);
        code = DDP_EXIT_USAGE;
        goto fail;
    }
    if (o->widths[o->nwidths - 1] != train.classes) {
        rc = err_set(&err, DDP_EINVAL,
                     "--model %s: output width %d does not match the data's %d classes",
                     o->model_spec, o->widths[o->nwidths - 1], train.classes);
        code = DDP_EXIT_USAGE;
        goto fail;
    }
    size_t max_batch = o->batch_size > TRAIN_EVAL_BATCH ? o->batch_size : TRAIN_EVAL_BATCH;
    rc = model_new(o->widths, o->nwidths, max_batch, o->seed, &r.m, &err);
    if (rc) {
        code = DDP_EXIT_USAGE;
        goto fail;
    }
    rng_seed(&r.rng, o->seed ^ 0x7a11ULL);

    rc = ddp_group_open(o->backend, (int64_t)(o->timeout_s * 1000.0), &r.g, &code, &err);
    if (rc)
        goto fail;
    struct ddp_group *g = r.g;
    r.mi = pick_model_inst(g, r.m, o);
    r.m = NULL;
    struct model_inst *mi = r.mi;
    if (o->checkpoint_dir)
        snprintf(r.ckpt_dir, sizeof(r.ckpt_dir), "%s", o->checkpoint_dir);
    else
        snprintf(r.ckpt_dir, sizeof(r.ckpt_dir), "%s", g->env.checkpoint_dir);

    if (o->trace_path)
        r.trace = trace_new(TRAIN_TRACE_EVENTS);
    int nt = mi->ops->tensor_count(mi);
    size_t *counts = xmalloc((size_t)nt * sizeof(size_t));
    for (int t = 0; t < nt; t++)
        counts[t] = mi->ops->tensor_size(mi, t);
    struct reducer_opts ro = {
        .cap_bytes = (size_t)(o->bucket_cap_mb * 1048576.0),
        .first_cap_bytes = REDUCER_FIRST_BUCKET_BYTES,
        .overlap = o->overlap,
        .device = g->gpu,
        .defer_average = 1, /* the optimizer scales the sums (run_optim_step) */
    };
    if (ro.cap_bytes == 0)
        ro.cap_bytes = 1;
    if (ro.first_cap_bytes > ro.cap_bytes)
        ro.first_cap_bytes = ro.cap_bytes;
    rc = reducer_new(g->comm, g->world_size, counts, nt, &ro, r.trace, &r.red, &err);
    free(counts);
    if (rc) {
        code = DDP_EXIT_FAILURE;
        goto fail;
    }
    views = xmalloc((size_t)nt * sizeof(float *));
    for (int t = 0; t < nt; t++)
        views[t] = reducer_grad(r.red, t);
    mi->ops->bind_grads(mi, views);
    double lr = o->lr * (o->lr_scale_linear ? (double)g->world_size : 1.0);
    log_info("job rank=%d world_size=%d model=%s data=%s batch=%zu lr=%g buckets=%d overlap=%d",
             g->rank, g->world_size, o->model_spec, o->data, o->batch_size, lr,
             reducer_bucket_count(r.red), o->overlap);

    rc = resume(&r, &err);
    if (rc) {
        code = rc == DDP_EPEER || rc == DDP_ETIMEOUT ? DDP_EXIT_PEER_LOST : DDP_EXIT_CHECKPOINT;
        goto fail;
    }
    /* Rank 0's parameters (and momentum: equal anyway after a resume) everywhere. */
    rc = ddp_broadcast(g, mi->ops->params(mi), mi->ops->param_count(mi) * sizeof(float), 0,
                       &err);
    if (rc) {
        code = ddp_exit_code_for(rc);
        goto fail;
    }
    /* The state is final: on a GPU the device copy is made from it. */
    rc = mi->ops->sync_to_device(mi, &err);
    if (rc) {
        code = DDP_EXIT_DEVICE;
        goto fail;
    }
    rc = sampler_init(&smp, train.n, g->rank, g->world_size, o->seed, 1, &err);
    if (rc) {
        code = DDP_EXIT_DATA;
        goto fail;
    }
    sampler_ok = 1;
    xb = xmalloc(o->batch_size * train.dim * sizeof(float));
    yb = xmalloc(o->batch_size);
    struct hook_ctx hc = {.mi = mi, .red = r.red, .trace = r.trace};
    struct model_hooks hooks = {.ctx = &hc, .layer_begin = hook_begin, .layer_end = hook_end};
    size_t tlo = test.n * (size_t)g->rank / (size_t)g->world_size;
    size_t thi = test.n * ((size_t)g->rank + 1) / (size_t)g->world_size;
    int stop = 0;

    for (uint32_t epoch = r.start_epoch; epoch < (uint32_t)o->epochs && !stop; epoch++) {
        sampler_set_epoch(&smp, epoch);
        float epoch_lr = (float)train_lr_at(lr, o->lr_cosine, epoch, (uint32_t)o->epochs);
        int64_t t0 = time_mono_ns();
        double loss_sum = 0.0, seen = 0.0;
        for (size_t start = 0; start < smp.num_samples; start += o->batch_size) {
            size_t n = smp.num_samples - start < o->batch_size ? smp.num_samples - start
                                                               : o->batch_size;
            for (size_t i = 0; i < n; i++) {
                size_t idx = smp.indices[start + i];
                memcpy(xb + i * train.dim, train.x + idx * train.dim,
                       train.dim * sizeof(float));
                yb[i] = train.y[idx];
            }
            trace_set_step(r.trace, r.step);
            double ls = 0.0;
            rc = mi->ops->forward(mi, xb, yb, n, &ls, &err);
            if (rc == 0)
                rc = mi->ops->backward(mi, &hooks, &err);
            if (rc == 0)
                rc = reducer_finish(r.red, &err);
            if (rc == 0)
                rc = mi->ops->step(mi, epoch_lr, reducer_grad_scale(r.red), &err);
            if (rc) {
                code = run_exit_code(&r, rc);
                goto fail;
            }
            trace_event(r.trace, TRACE_STEP_END, 0);
            loss_sum += ls;
            seen += (double)n;
            r.step++;
            if (g->env.heartbeat_file[0])
                touch_file(g->env.heartbeat_file);
            if (o->max_steps > 0 && r.step >= (uint64_t)o->max_steps) {
                stop = 1;
                break;
            }
        }
        if (stop)
            break;
        double train_s = (double)(time_mono_ns() - t0) / 1e9;
        size_t correct = 0;
        rc = mi->ops->count_correct(mi, test.x + tlo * test.dim, test.y + tlo, thi - tlo,
                                    &correct, &err);
        if (rc) {
            code = run_exit_code(&r, rc);
            goto fail;
        }
        double sums[4] = {loss_sum, seen, (double)correct, train_s};
        rc = ddp_allreduce_f64(g, sums, 4, &err);
        if (rc) {
            code = ddp_exit_code_for(rc);
            goto fail;
        }
        double loss = sums[0] / sums[1];
        double acc = sums[2] / (double)test.n;
        double secs = sums[3] / (double)g->world_size; /* mean over ranks */
        double sps = secs > 0 ? sums[1] / secs : 0.0;
        if (g->rank == 0) {
            char th[48];
            train_format_thousands(sps, th, sizeof(th));
            printf("epoch %u/%d | loss %.4f | test acc %.4f | %s samples/s\n", epoch + 1,
                   o->epochs, loss, acc, th);
            fflush(stdout);
            if (g->env.metrics_fd >= 0) {
                char line[512];
                snprintf(line, sizeof(line),
                         "{\"epoch\": %u, \"epochs\": %d, \"loss\": %.4f, \"test_acc\": %.4f, "
                         "\"samples_per_s\": %.1f, \"world_size\": %d, \"generation\": %d, "
                         "\"time_s\": %.3f}\n",
                         epoch + 1, o->epochs, loss, acc, sps, g->world_size,
                         g->env.generation, secs);
                write_metrics(g->env.metrics_fd, line);
            }
        }
        if (r.ckpt_dir[0] && g->env.local_rank == 0) {
            rc = save_checkpoint(&r, epoch + 1, &err);
            if (rc) {
                code = DDP_EXIT_CHECKPOINT;
                goto fail;
            }
        }
        if (o->kill_after_epoch > 0 && epoch + 1 == (uint32_t)o->kill_after_epoch) {
            log_warn("--kill-after-epoch %d: killing this rank", o->kill_after_epoch);
            raise(SIGKILL);
        }
    }
    if (o->dump_params) {
        rc = mi->ops->sync_to_host(mi, &err);
        if (rc) {
            code = DDP_EXIT_DEVICE;
            goto fail;
        }
        rc = fs_write_atomic(o->dump_params, mi->ops->params(mi),
                             mi->ops->param_count(mi) * sizeof(float), 0644, &err);
        if (rc) {
            code = DDP_EXIT_FAILURE;
            goto fail;
        }
    }
    if (r.trace) {
        rc = trace_write(r.trace, o->trace_path, &err);
        if (rc) {
            code = DDP_EXIT_FAILURE;
            goto fail;
        }
    }
    goto out;
fail:
    log_error("%s (exit %d)", err.msg, code);
    if (code == DDP_EXIT_PEER_LOST) {
        /* The group is broken: closing it would wait on the lost peer (rank 0's store waits,
         * bounded by the timeout, for every rank to leave), delaying the exit the agent needs
         * to start the next generation. Nothing is left to save: leave now. */
        fflush(stdout);
        _exit(code);
    }
out:
    free(xb);
    free(yb);
    if (sampler_ok)
        sampler_release(&smp);
    /* After a comm error the reducer's in-flight work is abandoned with the comm. */
    reducer_free(r.red);
    free(views);
    trace_free(r.trace);
    void (*close_device)(void) = r.mi ? r.mi->ops->close_device : NULL;
    if (r.mi)
        r.mi->ops->free(r.mi);
    ddp_group_close(r.g);
    if (close_device)
        close_device();
    model_free(r.m);
    data_release(&train);
    data_release(&test);
    return code;
}
