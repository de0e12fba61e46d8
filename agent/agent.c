/*
 * agent.c - register, heartbeat, reconcile, and the workers' I/O (see agent.h for threads).
 *
 * Invariants:
 *   1. a->mu guards everything in struct agent and struct worker except the fields marked
 *      "I/O thread" (fds, splitters), which only the I/O thread touches after the worker
 *      was created (under a->mu, by whichever thread applied the answer).
 *   2. A worker is freed only by the I/O thread, and only once it is forgotten, reaped, its
 *      fds closed and its queued lines shipped (or given up on), so the heartbeat threads can
 *      name workers by id across an unlocked HTTP call and find them again (or not).
 *   3. a->changes counts worker starts and exits; a beat answered 200 that was built when
 *      the counter was c proves ddpd saw every change <= c (a->changes_sent). A worker's exit
 *      is forgotten only after it was so reported; while changes are unreported, beats carry
 *      wait_ms 0 (ddpd must not hold them).
 *   4. Desired sets are applied in version order: an answer older than the applied one (two
 *      beats in flight) is ignored; a new registration resets the version.
 *
 * Heartbeat states:
 *
 *   UNREGISTERED --register 200--> BEATING --404/409--> UNREGISTERED
 *        ^  |                        |  ^
 *        |  +--unreachable: backoff  |  +-- 200: apply, reconcile, next beat
 *        +---------------------------+-- unreachable: backoff (workers keep running)
 */
#include "agent/agent.h"
#include "agent/agent_internal.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "agent/assign.h"
#include "agent/logship.h"
#include "agent/recon.h"
#include "agent/spawn.h"
#include "common/fsutil.h"
#include "common/httpc.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/randutil.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

extern char **environ;

/* ---- small helpers -------------------------------------------------------------------- */

void agent_wake_io(struct agent *a)
{
    char c = 1;
    ssize_t r = write(a->wake[1], &c, 1);
    (void)r; /* a full pipe is already a wake-up */
}

size_t agent_running_count(const struct agent *a)
{
    size_t n = 0;
    for (size_t i = 0; i < a->nworkers; i++)
        n += !a->workers[i]->proc.exited;
    return n;
}

static int agent_grace(const struct agent *a, const struct assign *as)
{
    return as && as->grace_period_s >= 0 ? as->grace_period_s : a->cfg->grace_s;
}

/* More lines are queued than one beat carries: the next beat goes at once. Holds a->mu. */
int agent_backlog(const struct agent *a)
{
    size_t lines = 0, metrics = 0;
    for (size_t i = 0; i < a->nworkers; i++) {
        lines += a->workers[i]->logs.count;
        metrics += a->workers[i]->metrics.count;
    }
    return lines > AGENT_BEAT_LINES_MAX || metrics > AGENT_BEAT_METRICS_MAX;
}

void agent_note_change(struct agent *a)
{
    a->changes++;
    pthread_cond_broadcast(&a->cond);
}

/* ---- workers -------------------------------------------------------------------------- */

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
    if (a->nworkers == a->capworkers) {
        a->capworkers = a->capworkers ? 2 * a->capworkers : 16;
        a->workers = xrealloc(a->workers, a->capworkers * sizeof(*a->workers));
    }
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
    char *gen_dir = xasprintf("%s/jobs/%s/gen-%" PRId64, cfg->work_dir, as->job_id,
                              as->generation);
    char *log_path = xasprintf("%s/rank-%d.log", gen_dir, w->rank);
    char *ckpt = as->checkpoint_dir && *as->checkpoint_dir
                     ? xstrdup(as->checkpoint_dir)
                     : xasprintf("%s/jobs/%s/ckpt", cfg->work_dir, as->job_id);
    const char *cwd = as->workdir && *as->workdir ? as->workdir : cfg->work_dir;
    char **env = NULL;
    char *path = NULL;
    int out[2] = {-1, -1}, met[2] = {-1, -1};

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
    struct spawn_env_args ea = {.a = as, .local_rank = lr, .gpu = w->gpu,
                                .checkpoint_dir = ckpt, .heartbeat_file = w->hb_file};
    env = spawn_env_build(environ, &ea);
    path = spawn_resolve(as->argv[0], env);
    struct spawn_req req = {.argv = as->argv, .envp = env, .path = path, .cwd = cwd,
                            .out_fd = out[1], .metrics_fd = met[1]};
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
    log_info("started worker job=%s generation=%" PRId64 " rank=%d local_rank=%d pid=%d",
             w->job_id, w->generation, w->rank, lr, (int)pid);
    agent_wake_io(a);
out:
    if (w->proc.exited) {
        if (w->log_fd >= 0)
            close(w->log_fd);
        w->log_fd = -1;
        if (w->gpu >= 0)
            a->gpu_used[w->gpu]--;
        w->gpu = -1;
    }
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (met[i] >= 0)
            close(met[i]);
    }
    spawn_env_free(env);
    free(path);
    free(ckpt);
    free(log_path);
    free(gen_dir);
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

/* ---- I/O thread ----------------------------------------------------------------------- */

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

/* ---- run ------------------------------------------------------------------------------ */

int agent_run(const struct agent_config *cfg)
{
    struct agent a;
    memset(&a, 0, sizeof(a));
    a.cfg = cfg;
    a.last_answer_ms = time_mono_ms();
    a.wake[0] = a.wake[1] = -1;
    a.sfd = -1;
    a.interval_ms = 1000;
    int rc = 1, io_started = 0, report_started = 0;
    pthread_t io_thread, report_thread;
    pthread_condattr_t ca;

    pthread_mutex_init(&a.mu, NULL);
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&a.cond, &ca);
    pthread_condattr_destroy(&ca);
    a.gpu_used = xcalloc((size_t)cfg->gpus + 1, sizeof(int));
    a.beat_path = xasprintf("/v1/nodes/%s:heartbeat", cfg->name);
    if (rand_hex(a.incarnation, 16) < 0) {
        log_error("cannot draw an incarnation id");
        goto out;
    }
    if (pipe2(a.wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        log_error("pipe: %s", strerror(errno));
        goto out;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    a.sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (a.sfd < 0) {
        log_error("signalfd: %s", strerror(errno));
        goto out;
    }
    if (pthread_create(&io_thread, NULL, agent_io_main, &a) != 0) {
        log_error("cannot start the I/O thread");
        goto out;
    }
    io_started = 1;
    if (pthread_create(&report_thread, NULL, agent_report_main, &a) != 0) {
        log_error("cannot start the report thread");
        pthread_mutex_lock(&a.mu);
        agent_on_stop_signal(&a, SIGTERM);
        pthread_mutex_unlock(&a.mu);
        goto out;
    }
    report_started = 1;
    log_info("agent started name=%s work_dir=%s slots=%d gpus=%d", cfg->name, cfg->work_dir,
             cfg->slots, cfg->gpus);
    agent_heartbeat_loop(&a);
    rc = 0;
out:
    if (report_started) {
        pthread_mutex_lock(&a.mu);
        a.done = 1;
        pthread_cond_broadcast(&a.cond);
        pthread_mutex_unlock(&a.mu);
        pthread_join(report_thread, NULL);
    }
    if (io_started)
        pthread_join(io_thread, NULL);
    for (size_t i = 0; i < a.nworkers; i++) {
        agent_close_fds(a.workers[i]);
        agent_worker_free(a.workers[i]);
    }
    free(a.workers);
    for (size_t i = 0; i < a.ndesired; i++)
        assign_release(&a.desired[i]);
    free(a.desired);
    free(a.gpu_used);
    free(a.beat_path);
    if (a.sfd >= 0)
        close(a.sfd);
    for (int i = 0; i < 2; i++)
        if (a.wake[i] >= 0)
            close(a.wake[i]);
    pthread_cond_destroy(&a.cond);
    pthread_mutex_destroy(&a.mu);
    if (rc == 0)
        log_info("agent stopped");
    return rc;
}
