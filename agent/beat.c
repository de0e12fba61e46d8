/*
 * beat.c - the agent's side of the heartbeat protocol: register, build a beat from the
 * worker state (workers, progress, queued lines and metrics), send it, acknowledge what an
 * answer 200 took, and apply the desired set it carries (which reconciles the workers).
 *
 * Threads: the heartbeat thread (agent_heartbeat_loop, the calling thread of agent_run) with
 * its own httpc, and the report thread (agent_report_main), which beats at once for a worker
 * start or exit while the heartbeat thread sits in a long poll.
 *
 * Locking: a beat takes a->mu to build its body and again to apply the answer; it never holds
 * it across the HTTP call. Workers are named by id across that call and looked up again
 * (agent_internal.h: only the I/O thread frees them).
 *
 * Invariants:
 *   1. a->changes counts worker starts and exits; a beat answered 200 that was built when the
 *      counter was c proves ddpd saw every change <= c (a->changes_sent). A worker's exit is
 *      forgotten only after it was so reported; while changes are unreported, beats carry
 *      wait_ms 0 (ddpd must not hold them).
 *   2. Desired sets are applied in version order: an answer older than the applied one (two
 *      beats in flight) is ignored; a new registration resets the version.
 *
 * Heartbeat states:
 *
 *   UNREGISTERED --register 200--> BEATING --404--> UNREGISTERED
 *        ^  |                        |  ^ |
 *        |  +--unreachable: backoff  |  | +--409/401: conflict backoff--> UNREGISTERED
 *        |                           |  +-- 200: apply, reconcile, next beat
 *        +---------------------------+-- unreachable: backoff (workers keep running)
 *
 * A 409 or 401 on a beat means another process registered this node's name since (it showed
 * the credential: a second agent with the same --name and work dir), and a 409 on a register
 * that the name is up and held by another agent. Registering again at once would take the
 * node back and the other agent would do the same, thousands of times a second; so a
 * conflict waits, 0.5 s doubling to 10 s, from the first wait again after 2 min without one.
 */
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>

#include "agent/agent_internal.h"
#include "agent/errfile.h"
#include "common/backoff.h"
#include "common/fsutil.h"
#include "common/httpc.h"
#include "common/srvlist.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/signame.h"
#include "common/procstat.h"
#include "common/timeutil.h"
#include "common/tokenfile.h"
#include "common/xalloc.h"

/* The worker with this id, or NULL once it was freed. Holds a->mu. */
static struct worker *agent_worker_by_id(struct agent *a, uint64_t id)
{
    for (size_t i = 0; i < a->nworkers; i++)
        if (a->workers[i]->id == id)
            return a->workers[i];
    return NULL;
}

/* Waits on a->cond for at most ms (the condition clock is monotonic). Holds a->mu. */
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

struct agent_ack {
    uint64_t worker_id;
    uint64_t log_upto;    /* 0 = none */
    uint64_t metric_upto; /* 0 = none */
};

/* Reads a failed worker's error file once (errfile.h). Holds a->mu. */
static void agent_worker_error(struct worker *w)
{
    if (w->err_read || w->gen_fd < 0 || (w->proc.exit_code == 0 && w->proc.sig == 0))
        return;
    w->err_read = 1;
    struct ddp_err e;
    int rc = errfile_read(w->gen_fd, w->err_name, w->err_file, &w->err, &e);
    if (rc && rc != DDP_ENOTFOUND)
        log_warn("worker job=%s rank=%d: its error file is not taken: %s", w->job_id, w->rank,
                 e.msg);
}

/* 1 when pid is stopped by a signal (SIGSTOP, a debugger): state T or t in /proc/PID/stat.
 * ddpd's hang watchdog then names this rank as the one that hung. */
static int pid_is_stopped(pid_t pid)
{
    char st = proc_state(pid);
    return st == 'T' || st == 't';
}

/* Builds a beat body from the state. Holds a->mu. acks gets one entry per worker that
 * had lines in the body. */
static json_t *agent_beat_body(struct agent *a, int wait_ms, struct agent_ack **acks, size_t *nacks)
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
                agent_worker_error(w);
                if (w->err) {
                    json_t *e = json_pack("{s:s}", "message", w->err->message);
                    if (w->err->frame)
                        json_object_set_new(e, "frame", json_string(w->err->frame));
                    if (w->err->timestamp > 0)
                        json_object_set_new(e, "timestamp", json_integer(w->err->timestamp));
                    json_object_set_new(o, "error", e);
                }
            }
            json_array_append_new(workers, o);
            if (!w->proc.exited) {
                int64_t last = w->started_wall_ms;
                struct stat st;
                /* the heartbeat by name in the folder the agent opened, never through a
                 * link (the folder is the job's) */
                if (w->gen_fd >= 0 &&
                    fstatat(w->gen_fd, w->hb_name, &st, AT_SYMLINK_NOFOLLOW) == 0 &&
                    S_ISREG(st.st_mode)) {
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
                json_object_set_new(p, "age_ms",
                                    json_integer(now_wall > last ? now_wall - last : 0));
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

/* The answer's notices (optional: an older ddpd sends none) replace the last ones; an entry
 * that does not parse is logged and left out. Holds a->mu. */
static void agent_apply_notices(struct agent *a, const json_t *ans)
{
    agent_notices_clear(a);
    const json_t *arr = json_object_get(ans, "notices");
    size_t n = json_array_size(arr);
    if (n == 0)
        return;
    a->notices = xcalloc(n, sizeof(*a->notices));
    for (size_t i = 0; i < n; i++) {
        const json_t *o = json_array_get(arr, i);
        struct ddp_err err;
        err_clear(&err);
        const char *job = NULL, *sig = NULL;
        int64_t gen = 0, grace = 0;
        if (jsonx_get_string(o, "job_id", 1, &job, &err) < 0 ||
            jsonx_get_int(o, "generation", 1, 0, INT64_MAX, &gen, &err) < 0 ||
            jsonx_get_string(o, "signal", 1, &sig, &err) < 0 ||
            jsonx_get_int(o, "grace_s", 1, 0, 3600, &grace, &err) < 0 || signame_parse(sig) < 0) {
            if (err.msg[0])
                log_warn("ignoring a notice of a heartbeat answer: %s", err.msg);
            else
                log_warn("ignoring a notice of a heartbeat answer: signal '%.32s' is not one a "
                         "notice may send",
                         sig);
            continue;
        }
        struct agent_notice *nt = &a->notices[a->nnotices++];
        nt->job_id = xstrdup(job);
        nt->generation = gen;
        nt->signo = signame_parse(sig);
        nt->grace_s = (int)grace;
    }
}

/* Per-user: when answer ans brings a desired set other than the one applied (version
 * had_version; -1: none), the accounts of its owners resolved into *fresh, with no lock
 * held (NSS may wait on a directory server). Otherwise *fresh stays empty. */
static void agent_resolve_owners(const struct agent_config *cfg, const json_t *ans,
                                 int64_t had_version, struct usermap_cache *fresh)
{
    json_t *arr = json_object_get(ans, "assignments");
    json_t *ver = json_object_get(ans, "version");
    if (cfg->isolation != USERMAP_PER_USER || !json_is_array(arr) || !json_is_integer(ver) ||
        json_integer_value(ver) == had_version)
        return;
    size_t n = json_array_size(arr);
    const char **owners = xcalloc(n + 1, sizeof(*owners));
    for (size_t i = 0; i < n; i++)
        owners[i] = json_string_value(json_object_get(json_array_get(arr, i), "owner"));
    usermap_cache_fill(fresh, cfg->user_map, cfg->name, owners, n);
    free(owners);
}

/* Applies a 200 answer's desired set when it is not older than the applied one; when it
 * replaces the desired set and *fresh was filled for it, the accounts are swapped in (*fresh
 * then holds the old ones, for the caller to release outside the lock). Holds a->mu. */
static int agent_apply_answer(struct agent *a, const json_t *ans, struct usermap_cache *fresh)
{
    struct ddp_err err;
    err_clear(&err);
    int64_t version = 0;
    json_t *arr = NULL;
    if (!json_is_object(ans) ||
        jsonx_get_int(ans, "version", 1, 0, INT64_MAX, &version, &err) < 0 ||
        jsonx_get_array(ans, "assignments", 1, &arr, &err) < 0) {
        log_warn("ignoring a heartbeat answer: %s", err.msg[0] ? err.msg : "not an object");
        return 0;
    }
    if (version < a->version) {
        log_debug("ignoring an older desired set version=%" PRId64 " applied=%" PRId64, version,
                  a->version);
        return 0;
    }
    int changed = version != a->version || !a->applied;
    if (version != a->version || a->ndesired != json_array_size(arr)) {
        size_t n = json_array_size(arr), k = 0;
        struct assign *d = xcalloc(n + 1, sizeof(*d));
        for (size_t i = 0; i < n; i++) {
            if (assign_parse(json_array_get(arr, i), &d[k], &err) < 0)
                log_error("ignoring an assignment of version %" PRId64 ": %s", version, err.msg);
            else
                k++;
        }
        for (size_t i = 0; i < a->ndesired; i++)
            assign_release(&a->desired[i]);
        free(a->desired);
        a->desired = d;
        a->ndesired = k;
        if (fresh->filled) {
            struct usermap_cache old = a->accounts;
            a->accounts = *fresh;
            *fresh = old;
        }
        if (version != a->version)
            log_debug("desired set version=%" PRId64 " assignments=%zu", version, k);
        a->version = version;
    }
    agent_apply_notices(a, ans);
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
static enum beat_result agent_beat(struct agent *a, struct httpc *h, int wait_allowed, int *quick,
                                   struct ddp_err *err)
{
    struct agent_ack *acks = NULL;
    size_t nacks = 0;
    long status = 0;
    json_t *ans = NULL;
    enum beat_result res = BEAT_OK;
    struct usermap_cache fresh = {0};

    pthread_mutex_lock(&a->mu);
    uint64_t snap = a->changes;
    int64_t had_version = a->applied ? a->version : -1;
    int wait_ms = wait_allowed && a->applied && snap == a->changes_sent && !a->shutting_down &&
                          !agent_backlog(a)
                      ? a->interval_ms
                      : 0;
    json_t *body = agent_beat_body(a, wait_ms, &acks, &nacks);
    if (wait_ms > 0)
        a->polling = 1;
    httpc_set_token(h, a->credential); /* a beat speaks with the node's own credential */
    pthread_mutex_unlock(&a->mu);

    int rc =
        httpc_request(h, "POST", a->beat_path, body, wait_ms + 10000L, &status, &ans, NULL, err);
    if (rc >= 0 && status == 200)
        agent_resolve_owners(a->cfg, ans, had_version, &fresh);
    pthread_mutex_lock(&a->mu);
    if (wait_ms > 0)
        a->polling = 0;
    if (rc < 0) {
        res = BEAT_UNREACHABLE;
    } else if (status == 200) {
        /* The orphan clock: only a beat answered 200 confirms the running workers; an error
         * answer (a removed node's 401, a replica answering 500, a duplicate's 409) does not,
         * or such a node would keep its workers while ddpd re-formed the job. Set here, under
         * the lock the answer is taken in, so no orphan check sees it stale in between. */
        a->last_answer_ms = time_mono_ms();
        a->orphaned = 0;
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
        int changed = agent_apply_answer(a, ans, &fresh);
        if (quick)
            *quick = reported || changed || agent_backlog(a);
    } else if (status == 404 || status == 409 || status == 401) {
        /* 401: ddpd knows the credential no more (the node was removed, or ddpd's state
         * is new) */
        res = BEAT_REREGISTER;
        err_set(err,
                status == 404   ? DDP_ENOTFOUND
                : status == 401 ? DDP_EUNAUTH
                                : DDP_EABORTED,
                "ddpd answered %ld", status);
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
    usermap_cache_release(&fresh);
    json_decref(ans);
    json_decref(body);
    free(acks);
    return res;
}

void agent_credential_load(struct agent *a)
{
    char *text = NULL;
    struct ddp_err e;
    int rc = token_file_read(a->cred_path, "node credential", &text, &e);
    if (rc == 0 && strlen(text) < sizeof(a->credential)) {
        snprintf(a->credential, sizeof(a->credential), "%s", text);
        log_info("node credential file=%s (registering takes the node's name over)", a->cred_path);
    } else if (rc != DDP_ENOTFOUND) {
        log_warn("ignoring the node credential: %s", rc ? e.msg : "too long");
    }
    if (text)
        explicit_bzero(text, strlen(text));
    free(text);
}

/* Keeps the new credential (a->credential) in a->cred_path, mode 0600. A failure only costs
 * a restarted agent its quick take-over (it then waits until ddpd finds the node LOST). */
static void agent_credential_save(struct agent *a, const char *cred)
{
    char line[AGENT_CRED_MAX + 2];
    int n = snprintf(line, sizeof(line), "%s\n", cred);
    struct ddp_err e;
    if (fs_write_atomic(a->cred_path, line, (size_t)n, 0600, &e) != 0)
        log_warn("cannot keep the node credential: %s", e.msg);
    explicit_bzero(line, sizeof(line));
}

static enum beat_result agent_register(struct agent *a, struct httpc *h, struct ddp_err *err)
{
    const struct agent_config *cfg = a->cfg;
    json_t *body = json_object();
    pthread_mutex_lock(&a->mu);
    if (a->credential[0])
        json_object_set_new(body, "credential", json_string(a->credential));
    pthread_mutex_unlock(&a->mu);
    httpc_set_token(h, cfg->token); /* registration takes the bootstrap token */
    json_object_set_new(body, "name", json_string(cfg->name));
    json_object_set_new(body, "address", json_string(cfg->address));
    json_object_set_new(body, "slots", json_integer(cfg->slots));
    json_object_set_new(body, "port_range", json_string(cfg->port_range));
    json_object_set_new(body, "incarnation", json_string(a->incarnation));
    json_object_set_new(body, "isolation", json_string(usermap_isolation_name(cfg->isolation)));
    if (cfg->labels)
        json_object_set(body, "labels", (json_t *)cfg->labels);
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
        const char *cred = json_string_value(json_object_get(ans, "credential"));
        if (!cred || strlen(cred) < 16 || strlen(cred) >= AGENT_CRED_MAX) {
            err_set(err, DDP_EINTERNAL, "ddpd's registration answer has no node credential");
            json_decref(ans);
            json_decref(body);
            return BEAT_REFUSED;
        }
        agent_credential_save(a, cred);
        pthread_mutex_lock(&a->mu);
        snprintf(a->credential, sizeof(a->credential), "%s", cred);
        a->registered = 1;
        a->version = 0;
        a->applied = 0;
        a->interval_ms = (int)interval;
        pthread_mutex_unlock(&a->mu);
        log_info("registered with ddpd server=%s name=%s address=%s slots=%d incarnation=%s",
                 httpc_base_url(h), cfg->name, cfg->address, cfg->slots, a->incarnation);
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
        while (!a->done &&
               !(a->polling && a->changes > a->changes_sent && a->changes > a->changes_urgent))
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
    }
    pthread_mutex_unlock(&a->mu);
    httpc_free(h);
    return NULL;
}

/* Sleeps up to ms, waking early when done or (if on_change) at an unreported change. */
static void agent_pause(struct agent *a, int64_t ms, int on_change)
{
    int64_t until = time_deadline_ms(ms > 0 ? ms : 0); /* ms <= 0: no wait at all */
    pthread_mutex_lock(&a->mu);
    for (;;) {
        int64_t left = time_left_ms(until);
        if (left <= 0 || a->done ||
            (on_change && (a->changes > a->changes_sent || agent_backlog(a))))
            break;
        agent_cond_wait_ms(a, left);
    }
    pthread_mutex_unlock(&a->mu);
}

/* Name conflicts (another agent holds this node's name): the wait before the next try,
 * from its own backoff, which starts again at its first wait after a calm period. */
struct conflict_backoff {
    struct backoff bo;
    int64_t last_ms, count;
};

static int64_t conflict_next(struct conflict_backoff *c)
{
    int64_t now = time_mono_ms();
    if (c->last_ms && now - c->last_ms > AGENT_CONFLICT_CALM_MS)
        backoff_reset(&c->bo);
    c->last_ms = now;
    c->count++;
    return backoff_next(&c->bo);
}

void agent_heartbeat_loop(struct agent *a)
{
    struct httpc *h = httpc_new(a->cfg->server, a->cfg->token);
    struct backoff bo;
    struct conflict_backoff conflict = {.last_ms = 0, .count = 0};
    int64_t outage_since = 0, refused_logged = 0;
    char answered[SRVLIST_URL_MAX + 1] = ""; /* the address that answered last */
    backoff_init(&bo, AGENT_BACKOFF_MIN_MS, AGENT_BACKOFF_MAX_MS);
    backoff_init(&conflict.bo, AGENT_CONFLICT_MIN_MS, AGENT_CONFLICT_MAX_MS);
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
        enum beat_result r =
            registered ? agent_beat(a, h, 1, &quick, &err) : agent_register(a, h, &err);
        if (r != BEAT_UNREACHABLE) {
            /* (a beat answered 200 has set the orphan clock: agent_beat) Which of ddpd's addresses answers (httpc.h: the sticky one) */
            if (strcmp(answered, httpc_base_url(h)) != 0) {
                if (answered[0])
                    log_info("ddpd answers at server=%s now (was %s)", httpc_base_url(h), answered);
                snprintf(answered, sizeof(answered), "%s", httpc_base_url(h));
            }
        }
        if (r == BEAT_UNREACHABLE || r == BEAT_REFUSED) {
            if (r == BEAT_UNREACHABLE && !outage_since) {
                pthread_mutex_lock(&a->mu);
                size_t running = agent_running_count(a);
                pthread_mutex_unlock(&a->mu);
                log_warn("%s; keeping %zu workers running, retrying", err.msg, running);
                outage_since = t0;
            } else if (r == BEAT_REFUSED && err.code == DDP_EEXIST) {
                /* 409 ALREADY_EXISTS: the name is registered and up, held by another agent */
                int64_t pause = conflict_next(&conflict);
                if (!refused_logged || conflict.count % 10 == 0)
                    log_error("ddpd refused the agent: %s; trying again in %.1fs (refusal "
                              "%" PRId64 ")",
                              err.msg, pause / 1e3, conflict.count);
                refused_logged = 1;
                agent_pause(a, pause, 0);
                continue;
            } else if (r == BEAT_REFUSED && !refused_logged) {
                log_error("ddpd refused the agent: %s; retrying", err.msg);
                refused_logged = 1;
            }
            agent_pause(a, backoff_next(&bo), 0);
            continue;
        }
        if (outage_since) {
            log_info("ddpd reachable again after %.1fs", (time_mono_ms() - outage_since) / 1e3);
            outage_since = 0;
        }
        refused_logged = 0;
        backoff_reset(&bo);
        if (r == BEAT_REREGISTER) {
            /* 409 ABORTED (another incarnation registered) and 401 (the credential was taken
             * over) are name conflicts: the take-back waits. 404 is not. */
            int64_t pause = 0;
            if (err.code == DDP_EABORTED || err.code == DDP_EUNAUTH)
                pause = conflict_next(&conflict);
            if (err.code == DDP_EABORTED)
                log_warn("ddpd has another incarnation of node %s registered (another agent "
                         "with this --name?): registering again in %.1fs (conflict %" PRId64 ")",
                         a->cfg->name, pause / 1e3, conflict.count);
            else if (err.code == DDP_EUNAUTH)
                log_warn("ddpd does not take node %s's credential (removed, or another agent "
                         "with this --name took it over?): registering again in %.1fs "
                         "(conflict %" PRId64 ")",
                         a->cfg->name, pause / 1e3, conflict.count);
            else
                log_warn("ddpd does not know node %s: registering again", a->cfg->name);
            pthread_mutex_lock(&a->mu);
            a->registered = 0;
            a->version = 0;
            a->applied = 0;
            pthread_mutex_unlock(&a->mu);
            if (pause > 0)
                agent_pause(a, pause, 0);
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
