/*
 * worker.c - a worker's lifecycle on this node: created for a local rank of an assignment,
 * started (its pipes, rank log, GPU, environment, its job's cgroup, then spawn), stopped
 * with its grace (SIGTERM now, SIGKILL when the grace ends, which the I/O thread drives),
 * forgotten once ddpd saw its exit; the end of a job's cgroup once none of its workers runs
 * here; and the reconciliation of the desired set against the workers that decides which of
 * these happen.
 *
 * Threads: any. The beat threads reconcile when they apply an answer; the I/O thread stops
 * workers on SIGTERM/SIGINT and on the orphan timeout, and queues lines through the emit
 * callbacks.
 *
 * Locking: every function here runs with a->mu held and never blocks on the network; a
 * worker's fds are handed to the I/O thread when its start succeeds (agent_internal.h).
 *
 * Invariants:
 *   1. A worker that could not start is reported as exited with code 127, with a log line
 *      saying why; it holds no fd and no GPU.
 *   2. Each worker's SIGKILL deadline counts from its own SIGTERM (the clock is read at each
 *      stop), so a worker stopped after another still gets its whole grace.
 *   3. An exit ddpd has not seen yet keeps its worker running in the reconciler's eyes, so
 *      that the next beat reports it before anything replaces it.
 *   4. A job generation's cgroup is killed and removed when its last worker on this node was
 *      reaped (or failed to start): whatever the workers left behind, detached or not, dies
 *      with them, after their own SIGTERM, grace and SIGKILL.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "agent/agent_internal.h"
#include "agent/recon.h"
#include "common/fsutil.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

extern char **environ;

/* The stop grace of an assignment: its own, else the agent's --grace. */
static int agent_grace(const struct agent *a, const struct assign *as)
{
    return as && as->grace_period_s >= 0 ? as->grace_period_s : a->cfg->grace_s;
}

/* A new worker for local rank lr of as, in a->workers, not started yet. Holds a->mu. */
static struct worker *agent_worker_new(struct agent *a, const struct assign *as, int lr)
{
    struct worker *w = xcalloc(1, sizeof(*w));
    w->id = ++a->next_worker_id;
    w->job_id = xstrdup(as->job_id);
    w->generation = as->generation;
    w->local_rank = lr;
    w->rank = assign_rank(as, lr);
    w->grace_s = agent_grace(a, as);
    w->gpu = -1;
    w->out_fd = w->met_fd = w->log_fd = -1;
    w->started_wall_ms = time_wall_ms();
    w->prefix = xasprintf("[rank %d] ", w->rank);
    /* Pieces of a long line leave room for the prefix: ddpd keeps LOGSHIP_LINE_MAX bytes. */
    logship_split_init(&w->out_split, logship_piece_max(w->prefix));
    logship_split_init(&w->met_split, LOGSHIP_LINE_MAX);
    logship_queue_init(&w->logs, AGENT_LOG_QUEUE_MAX);
    logship_queue_init(&w->metrics, AGENT_METRIC_QUEUE_MAX);
    XGROW(a->workers, a->nworkers + 1, a->capworkers, 16);
    a->workers[a->nworkers++] = w;
    return w;
}

void agent_worker_free(struct worker *w)
{
    if (!w)
        return;
    free(w->job_id);
    free(w->hb_file);
    free(w->prefix);
    logship_queue_release(&w->logs);
    logship_queue_release(&w->metrics);
    free(w);
}

/* Queues one output line of w (raw bytes) for ddpd. Caller holds a->mu. */
void agent_emit_log(void *ctx, const char *line, size_t len)
{
    struct worker *w = ctx;
    logship_queue_push(&w->logs, logship_clean(w->prefix, line, len));
    if (w->logs.dropped == 1)
        log_warn("log queue full, dropping oldest lines job=%s rank=%d", w->job_id, w->rank);
}

/* Queues one metrics line of w when it is rank 0's and a JSON object. Caller holds a->mu. */
void agent_emit_metric(void *ctx, const char *line, size_t len)
{
    struct worker *w = ctx;
    w->last_metric_wall_ms = time_wall_ms();
    if (w->rank != 0)
        return;
    json_error_t jerr;
    json_t *v = json_loadb(line, len, 0, &jerr);
    if (!json_is_object(v)) {
        log_debug("metrics line is not a JSON object job=%s: %s", w->job_id, jerr.text);
        json_decref(v);
        return;
    }
    logship_queue_push(&w->metrics, jsonx_dumps(v));
    json_decref(v);
}

/* The worker could not be started: it is reported as exited 127 with a line saying why. */
static void agent_worker_failed(struct agent *a, struct worker *w, const char *why)
{
    log_error("cannot start worker job=%s generation=%" PRId64 " rank=%d: %s", w->job_id,
              w->generation, w->rank, why);
    char *line = xasprintf("ddp-agent: cannot start worker: %s", why);
    agent_emit_log(w, line, strlen(line));
    free(line);
    w->proc.exited = 1;
    w->proc.exit_code = 127;
    w->proc.sig = 0;
    agent_note_change(a);
    w->exit_change = a->changes;
}

/* A free GPU for local_rank, or one shared by local rank when all are taken; -1 without
 * GPUs. Holds a->mu. */
static int agent_pick_gpu(struct agent *a, int local_rank)
{
    int n = a->cfg->gpus;
    if (n <= 0)
        return -1;
    for (int i = 0; i < n; i++) {
        if (!a->gpu_used[i]) {
            a->gpu_used[i]++;
            return i;
        }
    }
    int g = local_rank % n; /* oversubscribed: share by local rank */
    a->gpu_used[g]++;
    return g;
}

/* A close-on-exec pipe whose read end does not block. 0, or an error in err. */
static int agent_open_pipe(int fds[2], struct ddp_err *err)
{
    if (pipe2(fds, O_CLOEXEC) != 0)
        return err_set(err, DDP_EINTERNAL, "pipe: %s", strerror(errno));
    if (fcntl(fds[0], F_SETFL, O_NONBLOCK) != 0) {
        close(fds[0]);
        close(fds[1]);
        return err_set(err, DDP_EINTERNAL, "fcntl: %s", strerror(errno));
    }
    return 0;
}

/* Starts local rank lr of as. Caller holds a->mu. */
static void agent_start_worker(struct agent *a, const struct assign *as, int lr)
{
    const struct agent_config *cfg = a->cfg;
    struct worker *w = agent_worker_new(a, as, lr);
    struct ddp_err err;
    err_clear(&err);
    char *gen_dir = xasprintf("%s/jobs/%s/gen-%" PRId64, cfg->work_dir, as->job_id, as->generation);
    char *log_path = xasprintf("%s/rank-%d.log", gen_dir, w->rank);
    char *ckpt = as->checkpoint_dir && *as->checkpoint_dir
                     ? xstrdup(as->checkpoint_dir)
                     : xasprintf("%s/jobs/%s/ckpt", cfg->work_dir, as->job_id);
    const char *cwd = as->workdir && *as->workdir ? as->workdir : cfg->work_dir;
    char **env = NULL;
    char *path = NULL, *cg_path = NULL;
    int out[2] = {-1, -1}, met[2] = {-1, -1}, cg_fd = -1;

    w->hb_file = xasprintf("%s/rank-%d.heartbeat", gen_dir, w->rank);
    if (fs_mkdir_p(gen_dir, 0755, &err) < 0) {
        agent_worker_failed(a, w, err.msg);
        goto out;
    }
    if (fs_mkdir_p(ckpt, 0755, &err) < 0)
        log_warn("cannot create checkpoint dir %s: %s", ckpt, err.msg); /* the worker says */
    w->log_fd = open(log_path, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (w->log_fd < 0) {
        err_set(&err, DDP_EIO, "cannot open %s: %s", log_path, strerror(errno));
        agent_worker_failed(a, w, err.msg);
        goto out;
    }
    if (agent_open_pipe(out, &err) < 0 || agent_open_pipe(met, &err) < 0) {
        agent_worker_failed(a, w, err.msg);
        goto out;
    }
    w->gpu = agent_pick_gpu(a, lr);
    struct spawn_env_args ea = {.a = as,
                                .local_rank = lr,
                                .gpu = w->gpu,
                                .checkpoint_dir = ckpt,
                                .heartbeat_file = w->hb_file};
    env = spawn_env_build(environ, &ea);
    path = spawn_resolve(as->argv[0], env);
    if (cgroup_job_open(a->cg, as->job_id, as->generation, &cg_fd, &cg_path, &err) < 0) {
        /* The worker runs as without cgroups: what it detaches may outlive it. */
        log_warn("worker job=%s generation=%" PRId64 " rank=%d runs outside a cgroup: %s",
                 w->job_id, w->generation, w->rank, err.msg);
        err_clear(&err);
    }
    struct spawn_req req = {.argv = as->argv,
                            .envp = env,
                            .path = path,
                            .cwd = cwd,
                            .out_fd = out[1],
                            .metrics_fd = met[1],
                            .cgroup_path = cg_path,
                            .cgroup_fd = cg_fd};
    pid_t pid;
    if (spawn_start(&req, &pid, &err) < 0) {
        agent_worker_failed(a, w, err.msg);
        goto out;
    }
    spawn_proc_init(&w->proc, pid);
    w->out_fd = out[0];
    w->met_fd = met[0];
    out[0] = met[0] = -1;
    agent_note_change(a);
    log_info("started worker job=%s generation=%" PRId64 " rank=%d local_rank=%d pid=%d", w->job_id,
             w->generation, w->rank, lr, (int)pid);
    agent_wake_io(a);
out:
    if (cg_fd >= 0)
        close(cg_fd);
    if (w->proc.exited) {
        if (w->log_fd >= 0)
            close(w->log_fd);
        w->log_fd = -1;
        if (w->gpu >= 0)
            a->gpu_used[w->gpu]--;
        w->gpu = -1;
        if (cg_path) /* no other rank of the job may run here: then the cgroup goes */
            agent_cgroup_done(a, w->job_id, w->generation);
    }
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (met[i] >= 0)
            close(met[i]);
    }
    spawn_env_free(env);
    free(path);
    free(cg_path);
    free(ckpt);
    free(log_path);
    free(gen_dir);
}

void agent_cgroup_done(struct agent *a, const char *job_id, int64_t generation)
{
    if (cgroup_kind_of(a->cg) == CGROUP_NONE)
        return;
    for (size_t i = 0; i < a->nworkers; i++) {
        const struct worker *o = a->workers[i];
        if (!o->proc.exited && o->generation == generation && strcmp(o->job_id, job_id) == 0)
            return; /* another rank of it still runs here */
    }
    struct ddp_err err;
    err_clear(&err);
    size_t found = 0;
    int64_t t0 = time_mono_ms();
    if (cgroup_job_kill(a->cg, job_id, generation, &found, &err) < 0)
        log_warn("cannot empty the cgroup of job=%s generation=%" PRId64
                 " (the next sweep tries again): %s",
                 job_id, generation, err.msg);
    else if (found > 0)
        log_info("killed %zu processes left in the cgroup of job=%s generation=%" PRId64
                 " in %" PRId64 " ms",
                 found, job_id, generation, time_mono_ms() - t0);
}

/* Reconciles the desired set against the workers and applies the actions. Holds a->mu. */
void agent_reconcile(struct agent *a)
{
    struct recon_want *want = xcalloc(a->ndesired + 1, sizeof(*want));
    size_t nw = a->nworkers;
    struct recon_have *have = xcalloc(nw + 1, sizeof(*have));
    struct worker **hw = xcalloc(nw + 1, sizeof(*hw));
    size_t nh = 0;
    for (size_t i = 0; i < a->ndesired; i++) {
        want[i].job_id = a->desired[i].job_id;
        want[i].generation = a->desired[i].generation;
        want[i].nproc = a->desired[i].nproc_per_node;
    }
    for (size_t i = 0; i < nw; i++) {
        struct worker *w = a->workers[i];
        if (w->forgotten)
            continue;
        /* An exit ddpd has not seen yet keeps its worker: the next beat must report it. */
        have[nh].job_id = w->job_id;
        have[nh].generation = w->generation;
        have[nh].local_rank = w->local_rank;
        have[nh].running = !w->proc.exited || w->exit_change > a->changes_sent;
        have[nh].stopping = w->proc.exited || w->proc.stopping;
        hw[nh++] = w;
    }
    struct recon_plan plan = {0};
    recon_compute(want, a->ndesired, have, nh, !a->shutting_down, &plan);
    int64_t now = time_mono_ms();
    for (size_t i = 0; i < plan.n; i++) {
        const struct recon_action *act = &plan.actions[i];
        struct worker *w = act->op == RECON_START ? NULL : hw[act->index];
        switch (act->op) {
        case RECON_START:
            agent_start_worker(a, &a->desired[act->index], act->local_rank);
            break;
        case RECON_STOP:
            log_info("stopping worker job=%s generation=%" PRId64 " rank=%d pid=%d grace=%ds",
                     w->job_id, w->generation, w->rank, (int)w->proc.pid, w->grace_s);
            spawn_proc_stop(&w->proc, time_mono_ms(), w->grace_s);
            agent_wake_io(a);
            break;
        case RECON_FORGET:
            w->forgotten = 1;
            w->forgotten_ms = now;
            agent_wake_io(a);
            break;
        }
    }
    recon_plan_release(&plan);
    free(hw);
    free(have);
    free(want);
}

/* SIGTERM/SIGINT: the first stops every worker gracefully, the second kills them. */
void agent_on_stop_signal(struct agent *a, int signo)
{
    if (!a->shutting_down) {
        log_info("got %s: stopping %zu workers, then exiting", strsignal(signo),
                 agent_running_count(a));
        a->shutting_down = 1;
        for (size_t i = 0; i < a->nworkers; i++)
            spawn_proc_stop(&a->workers[i]->proc, time_mono_ms(), a->workers[i]->grace_s);
    } else {
        log_warn("got %s again: killing every worker now", strsignal(signo));
        for (size_t i = 0; i < a->nworkers; i++)
            spawn_proc_kill(&a->workers[i]->proc);
    }
    pthread_cond_broadcast(&a->cond);
}

/*
 * A node cut off from ddpd cannot know whether its jobs still want its workers: ddpd has
 * likely declared it LOST and re-formed the jobs elsewhere, so two copies of a rank would
 * train (and write the same checkpoints). After cfg->orphan_timeout_s without any answer the
 * agent stops its running workers (with their grace). It keeps the desired set, so they are
 * not started again; their exits are reported when ddpd answers again, and ddpd, if it still
 * wanted them, restarts the job from its checkpoint. Holds a->mu.
 */
void agent_check_orphaned(struct agent *a, int64_t now)
{
    int64_t limit = (int64_t)a->cfg->orphan_timeout_s * 1000;
    if (limit <= 0 || a->orphaned || a->shutting_down || now - a->last_answer_ms < limit)
        return;
    size_t running = agent_running_count(a);
    a->orphaned = 1;
    if (running == 0)
        return;
    log_warn("no answer from ddpd for %d s: stopping %zu workers whose job cannot be confirmed",
             a->cfg->orphan_timeout_s, running);
    for (size_t i = 0; i < a->nworkers; i++) {
        struct worker *w = a->workers[i];
        if (!w->proc.exited && !w->proc.stopping)
            spawn_proc_stop(&w->proc, time_mono_ms(), w->grace_s);
    }
}
