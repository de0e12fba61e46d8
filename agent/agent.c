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

static void agent_cond_wait_ms(struct agent *a, int64_t ms)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec += ms / 1000;
    ts.tv_nsec += (ms % 1000) * 1000000;
    if (ts.tv_nsec >= 1000000000) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000;
    }
    pthread_cond_timedwait(&a->cond, &a->mu, &ts);
}

static struct worker *agent_worker_by_id(struct agent *a, uint64_t id)
{
    for (size_t i = 0; i < a->nworkers; i++)
        if (a->workers[i]->id == id)
            return a->workers[i];
    return NULL;
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

/* ---- heartbeat ------------------------------------------------------------------------ */

struct agent_ack {
    uint64_t worker_id;
    uint64_t log_upto;    /* 0 = none */
    uint64_t metric_upto; /* 0 = none */
};

/* Builds a beat body from the state. Holds a->mu. acks gets one entry per worker that
 * had lines in the body. */

/* 1 when pid is stopped by a signal (SIGSTOP, a debugger): state T or t in /proc/PID/stat.
 * ddpd's hang watchdog then names this rank as the one that hung. */
static int pid_is_stopped(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The state follows the command name, which is in parentheses and may hold spaces. */
    const char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'T' || rp[2] == 't');
}

static json_t *agent_beat_body(struct agent *a, int wait_ms, struct agent_ack **acks,
                               size_t *nacks)
{
    json_t *body = json_object();
    json_t *workers = json_array(), *logs = json_array(), *metrics = json_array(),
           *progress = json_array();
    size_t line_budget = AGENT_BEAT_LINES_MAX, metric_budget = AGENT_BEAT_METRICS_MAX;
    size_t byte_budget = AGENT_BEAT_BYTES_MAX;
    int64_t now_wall = time_wall_ms();
    *acks = xcalloc(a->nworkers + 1, sizeof(**acks));
    *nacks = 0;

    json_object_set_new(body, "incarnation", json_string(a->incarnation));
    json_object_set_new(body, "version", json_integer(a->version));
    json_object_set_new(body, "wait_ms", json_integer(wait_ms));
    for (size_t i = 0; i < a->nworkers; i++) {
        struct worker *w = a->workers[i];
        struct agent_ack *ack = &(*acks)[*nacks];
        if (!w->forgotten) {
            json_t *o = json_object();
            json_object_set_new(o, "job_id", json_string(w->job_id));
            json_object_set_new(o, "generation", json_integer(w->generation));
            json_object_set_new(o, "rank", json_integer(w->rank));
            json_object_set_new(o, "local_rank", json_integer(w->local_rank));
            json_object_set_new(o, "pid", json_integer(w->proc.pid));
            json_object_set_new(o, "state", json_string(w->proc.exited ? "exited" : "running"));
            if (w->proc.exited) {
                json_object_set_new(o, "exit_code", json_integer(w->proc.exit_code));
                json_object_set_new(o, "signal", json_integer(w->proc.sig));
            }
            json_array_append_new(workers, o);
            if (!w->proc.exited) {
                int64_t last = w->started_wall_ms;
                struct stat st;
                if (stat(w->hb_file, &st) == 0) {
                    int64_t m = (int64_t)st.st_mtim.tv_sec * 1000 + st.st_mtim.tv_nsec / 1000000;
                    if (m > last)
                        last = m;
                }
                if (w->last_metric_wall_ms > last)
                    last = w->last_metric_wall_ms;
                json_t *p = json_object();
                json_object_set_new(p, "job_id", json_string(w->job_id));
                json_object_set_new(p, "generation", json_integer(w->generation));
                json_object_set_new(p, "rank", json_integer(w->rank));
                json_object_set_new(p, "age_ms", json_integer(now_wall > last ? now_wall - last
                                                                                : 0));
                if (pid_is_stopped(w->proc.pid))
                    json_object_set_new(p, "stopped", json_true());
                json_array_append_new(progress, p);
            }
        }
        uint64_t first = 0;
        json_t *lines = logship_queue_take(&w->logs, line_budget, &byte_budget, &first);
        if (lines) {
            size_t k = json_array_size(lines);
            line_budget -= k;
            ack->log_upto = first + k - 1;
            json_t *o = json_object();
            json_object_set_new(o, "job_id", json_string(w->job_id));
            json_object_set_new(o, "generation", json_integer(w->generation));
            json_object_set_new(o, "rank", json_integer(w->rank));
            json_object_set_new(o, "seq", json_integer((json_int_t)first));
            json_object_set_new(o, "lines", lines);
            json_array_append_new(logs, o);
        }
        for (size_t k = 0; k < w->metrics.count && metric_budget > 0; k++) {
            size_t sz = strlen(logship_queue_at(&w->metrics, k)) + 64;
            if (sz > byte_budget)
                break;
            byte_budget -= sz;
            json_t *m = json_loads(logship_queue_at(&w->metrics, k), 0, NULL);
            if (!m)
                m = json_object();
            json_t *o = json_object();
            json_object_set_new(o, "job_id", json_string(w->job_id));
            json_object_set_new(o, "generation", json_integer(w->generation));
            json_object_set_new(o, "seq", json_integer((json_int_t)(w->metrics.first_seq + k)));
            json_object_set_new(o, "metric", m);
            json_array_append_new(metrics, o);
            ack->metric_upto = w->metrics.first_seq + k;
            metric_budget--;
        }
        if (ack->log_upto || ack->metric_upto) {
            ack->worker_id = w->id;
            (*nacks)++;
        }
    }
    json_object_set_new(body, "workers", workers);
    json_object_set_new(body, "logs", logs);
    json_object_set_new(body, "metrics", metrics);
    json_object_set_new(body, "progress", progress);
    return body;
}

/* Applies a 200 answer's desired set when it is not older than the applied one. Holds
 * a->mu. */
static int agent_apply_answer(struct agent *a, const json_t *ans)
{
    struct ddp_err err;
    err_clear(&err);
    int64_t version = 0;
    json_t *arr = NULL;
    if (!json_is_object(ans) || jsonx_get_int(ans, "version", 1, 0, INT64_MAX, &version,
                                              &err) < 0 ||
        jsonx_get_array(ans, "assignments", 1, &arr, &err) < 0) {
        log_warn("ignoring a heartbeat answer: %s", err.msg[0] ? err.msg : "not an object");
        return 0;
    }
    if (version < a->version) {
        log_debug("ignoring an older desired set version=%" PRId64 " applied=%" PRId64,
                  version, a->version);
        return 0;
    }
    int changed = version != a->version || !a->applied;
    if (version != a->version || a->ndesired != json_array_size(arr)) {
        size_t n = json_array_size(arr), k = 0;
        struct assign *d = xcalloc(n + 1, sizeof(*d));
        for (size_t i = 0; i < n; i++) {
            if (assign_parse(json_array_get(arr, i), &d[k], &err) < 0)
                log_error("ignoring an assignment of version %" PRId64 ": %s", version,
                          err.msg);
            else
                k++;
        }
        for (size_t i = 0; i < a->ndesired; i++)
            assign_release(&a->desired[i]);
        free(a->desired);
        a->desired = d;
        a->ndesired = k;
        if (version != a->version)
            log_debug("desired set version=%" PRId64 " assignments=%zu", version, k);
        a->version = version;
    }
    a->applied = 1;
    agent_reconcile(a);
    return changed;
}

enum beat_result { BEAT_OK, BEAT_UNREACHABLE, BEAT_REREGISTER, BEAT_REFUSED };

/*
 * One heartbeat on h. wait_allowed: may ask for a long poll when ddpd has seen every
 * change. Returns what happened; on BEAT_UNREACHABLE and BEAT_REFUSED err says why. On
 * BEAT_OK, *quick (may be NULL) is 1 when the next beat should go at once: this one reported
 * worker starts or exits, its answer brought a new desired set, or lines are backed up.
 */
static enum beat_result agent_beat(struct agent *a, struct httpc *h, int wait_allowed,
                                   int *quick, struct ddp_err *err)
{
    struct agent_ack *acks = NULL;
    size_t nacks = 0;
    long status = 0;
    json_t *ans = NULL;
    enum beat_result res = BEAT_OK;

    pthread_mutex_lock(&a->mu);
    uint64_t snap = a->changes;
    int wait_ms = wait_allowed && a->applied && snap == a->changes_sent &&
                          !a->shutting_down && !agent_backlog(a)
                      ? a->interval_ms
                      : 0;
    json_t *body = agent_beat_body(a, wait_ms, &acks, &nacks);
    if (wait_ms > 0)
        a->polling = 1;
    pthread_mutex_unlock(&a->mu);

    int rc = httpc_request(h, "POST", a->beat_path, body, wait_ms + 10000L, &status, &ans, NULL,
                           err);
    pthread_mutex_lock(&a->mu);
    if (wait_ms > 0)
        a->polling = 0;
    if (rc < 0) {
        res = BEAT_UNREACHABLE;
    } else if (status == 200) {
        for (size_t i = 0; i < nacks; i++) {
            struct worker *w = agent_worker_by_id(a, acks[i].worker_id);
            if (!w)
                continue;
            if (acks[i].log_upto)
                logship_queue_ack(&w->logs, acks[i].log_upto);
            if (acks[i].metric_upto)
                logship_queue_ack(&w->metrics, acks[i].metric_upto);
        }
        int reported = snap > a->changes_sent;
        if (reported)
            a->changes_sent = snap;
        int changed = agent_apply_answer(a, ans);
        if (quick)
            *quick = reported || changed || agent_backlog(a);
    } else if (status == 404 || status == 409) {
        res = BEAT_REREGISTER;
        err_set(err, status == 404 ? DDP_ENOTFOUND : DDP_EABORTED, "ddpd answered %ld", status);
    } else {
        json_t *e = json_object_get(ans, "error");
        const char *msg = json_string_value(json_object_get(e, "message"));
        err_set(err, DDP_EINTERNAL, "heartbeat refused with HTTP %ld: %s", status,
                msg ? msg : "no message");
        res = BEAT_REFUSED;
        /* ddpd refuses the body itself: re-sending the same lines would block the worker
         * state forever, so after a second refusal in a row they are given up. */
        if ((status == 400 || status == 413) && ++a->refused_bodies >= 2) {
            size_t dropped = 0;
            for (size_t i = 0; i < a->nworkers; i++) {
                struct worker *w = a->workers[i];
                dropped += w->logs.count + w->metrics.count;
                logship_queue_ack(&w->logs, w->logs.next_seq);
                logship_queue_ack(&w->metrics, w->metrics.next_seq);
            }
            log_error("dropping %zu queued log and metrics lines that ddpd refuses", dropped);
            a->refused_bodies = 0;
        }
    }
    if (res != BEAT_REFUSED)
        a->refused_bodies = 0;
    pthread_cond_broadcast(&a->cond);
    pthread_mutex_unlock(&a->mu);
    json_decref(ans);
    json_decref(body);
    free(acks);
    return res;
}

static enum beat_result agent_register(struct agent *a, struct httpc *h, struct ddp_err *err)
{
    const struct agent_config *cfg = a->cfg;
    json_t *body = json_object();
    json_object_set_new(body, "name", json_string(cfg->name));
    json_object_set_new(body, "address", json_string(cfg->address));
    json_object_set_new(body, "slots", json_integer(cfg->slots));
    json_object_set_new(body, "port_range", json_string(cfg->port_range));
    json_object_set_new(body, "incarnation", json_string(a->incarnation));
    json_t *ans = NULL;
    enum beat_result res = BEAT_OK;
    int rc = httpc_call(h, "POST", "/v1/nodes:register", body, 10000, &ans, err);
    if (rc == DDP_EUNAVAIL || rc == DDP_ETIMEOUT) {
        res = BEAT_UNREACHABLE;
    } else if (rc < 0) {
        res = BEAT_REFUSED;
    } else {
        int64_t interval = 1000;
        if (jsonx_get_int(ans, "heartbeat_interval_ms", 0, 100, 60000, &interval, NULL) < 0)
            interval = 1000;
        pthread_mutex_lock(&a->mu);
        a->registered = 1;
        a->version = 0;
        a->applied = 0;
        a->interval_ms = (int)interval;
        pthread_mutex_unlock(&a->mu);
        log_info("registered with ddpd server=%s name=%s address=%s slots=%d incarnation=%s",
                 cfg->server, cfg->name, cfg->address, cfg->slots, a->incarnation);
    }
    json_decref(ans);
    json_decref(body);
    return res;
}

/* The report thread: beats at once for a start or exit while the heartbeat thread is in a
 * long poll (which ddpd may hold for up to wait_ms). */
void *agent_report_main(void *arg)
{
    struct agent *a = arg;
    struct httpc *h = httpc_new(a->cfg->server, a->cfg->token);
    pthread_mutex_lock(&a->mu);
    for (;;) {
        while (!a->done && !(a->polling && a->changes > a->changes_sent &&
                             a->changes > a->changes_urgent))
            pthread_cond_wait(&a->cond, &a->mu);
        if (a->done)
            break;
        a->changes_urgent = a->changes;
        pthread_mutex_unlock(&a->mu);
        struct ddp_err err;
        err_clear(&err);
        enum beat_result r = agent_beat(a, h, 0, NULL, &err);
        if (r != BEAT_OK)
            log_debug("report beat failed: %s", err.msg);
        pthread_mutex_lock(&a->mu);
        if (r != BEAT_UNREACHABLE) {
            a->last_answer_ms = time_mono_ms();
            a->orphaned = 0;
        }
    }
    pthread_mutex_unlock(&a->mu);
    httpc_free(h);
    return NULL;
}

/* Sleeps up to ms, waking early when done or (if on_change) at an unreported change. */
static void agent_pause(struct agent *a, int64_t ms, int on_change)
{
    int64_t until = time_mono_ms() + ms;
    pthread_mutex_lock(&a->mu);
    for (;;) {
        int64_t left = until - time_mono_ms();
        if (left <= 0 || a->done ||
            (on_change && (a->changes > a->changes_sent || agent_backlog(a))))
            break;
        agent_cond_wait_ms(a, left);
    }
    pthread_mutex_unlock(&a->mu);
}

void agent_heartbeat_loop(struct agent *a)
{
    struct httpc *h = httpc_new(a->cfg->server, a->cfg->token);
    int64_t backoff = 100, outage_since = 0, refused_logged = 0;
    for (;;) {
        pthread_mutex_lock(&a->mu);
        int done = a->done, registered = a->registered;
        pthread_mutex_unlock(&a->mu);
        if (done)
            break;
        struct ddp_err err;
        err_clear(&err);
        int64_t t0 = time_mono_ms();
        int quick = 0;
        enum beat_result r = registered ? agent_beat(a, h, 1, &quick, &err)
                                        : agent_register(a, h, &err);
        if (r != BEAT_UNREACHABLE) {
            pthread_mutex_lock(&a->mu);
            a->last_answer_ms = time_mono_ms();
            a->orphaned = 0;
            pthread_mutex_unlock(&a->mu);
        }
        if (r == BEAT_UNREACHABLE || r == BEAT_REFUSED) {
            if (r == BEAT_UNREACHABLE && !outage_since) {
                pthread_mutex_lock(&a->mu);
                size_t running = agent_running_count(a);
                pthread_mutex_unlock(&a->mu);
                log_warn("%s; keeping %zu workers running, retrying", err.msg, running);
                outage_since = t0;
            } else if (r == BEAT_REFUSED && !refused_logged) {
                log_error("ddpd refused the agent: %s; retrying", err.msg);
                refused_logged = 1;
            }
            agent_pause(a, backoff, 0);
            backoff = backoff * 2 > AGENT_BACKOFF_MAX_MS ? AGENT_BACKOFF_MAX_MS : backoff * 2;
            continue;
        }
        if (outage_since) {
            log_info("ddpd reachable again after %.1fs", (time_mono_ms() - outage_since) / 1e3);
            outage_since = 0;
        }
        refused_logged = 0;
        backoff = 100;
        if (r == BEAT_REREGISTER) {
            if (err.code == DDP_EABORTED)
                log_warn("ddpd has another incarnation of node %s registered (another agent "
                         "with this --name?): registering again", a->cfg->name);
            else
                log_warn("ddpd does not know node %s: registering again", a->cfg->name);
            pthread_mutex_lock(&a->mu);
            a->registered = 0;
            a->version = 0;
            a->applied = 0;
            pthread_mutex_unlock(&a->mu);
            continue;
        }
        if (!registered || quick)
            continue; /* right after registering, reporting or a new desired set: a long
                       * poll follows at once */
        /* A long poll that came back without news: ddpd held it for the interval (beat
         * again now) or does not hold (wait out the rest of the interval). */
        pthread_mutex_lock(&a->mu);
        int64_t interval = a->interval_ms;
        pthread_mutex_unlock(&a->mu);
        agent_pause(a, t0 + interval - time_mono_ms(), 1);
    }
    /* Report the final exits (best effort: ddpd may be gone). */
    pthread_mutex_lock(&a->mu);
    int registered = a->registered;
    pthread_mutex_unlock(&a->mu);
    if (registered) {
        struct ddp_err err;
        err_clear(&err);
        if (agent_beat(a, h, 0, NULL, &err) != BEAT_OK)
            log_debug("final beat failed: %s", err.msg);
    }
    httpc_free(h);
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
