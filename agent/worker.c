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
 *   5. Per-user: a worker runs as its job owner's local account or not at all (no account:
 *      it fails before any folder is made); the job's folders under the work dir belong to
 *      that account (mode 0700), and the agent opens nothing in them through a symbolic
 *      link, so a job cannot make the agent write elsewhere as root.
 */
#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "agent/agent_internal.h"
#include "agent/errfile.h"
#include "agent/gpus.h"
#include "agent/recon.h"
#include "common/fsutil.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/signame.h"
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
    w->notice_signo = as->preempt_signo;
    w->notice_s = as->preempt_grace_s;
    w->ctl_fd = -1;
    w->gpus = 0;
    w->out_fd = w->met_fd = w->log_fd = w->gen_fd = -1;
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
    if (w->gen_fd >= 0)
        close(w->gen_fd);
    free(w->hb_file);
    free(w->hb_name);
    free(w->err_file);
    free(w->err_name);
    errfile_free(w->err);
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

/* The GPUs of a worker of as: gpus_per_proc of the free ones (1 when ddpd did not say),
 * never one that another worker holds. Returns 0 with *visible its CUDA_VISIBLE_DEVICES (NULL
 * on a node without GPUs: the worker inherits the agent's) and the GPUs marked held in *mask,
 * or -1 with err set. Holds a->mu. */
static int agent_pick_gpus(struct agent *a, const struct assign *as, uint64_t *mask, char **visible,
                           struct ddp_err *err)
{
    int n = a->cfg->gpus;
    int want = as->gpus_per_proc >= 0 ? as->gpus_per_proc : (n > 0 ? 1 : 0);
    uint64_t got = 0;
    if (n <= 0) {
        if (want > 0)
            return err_set(err, DDP_EUNAVAIL, "needs %d GPUs (gpus_per_proc); this agent has none",
                           want);
        *mask = 0;
        *visible = NULL;
        return 0;
    }
    if (gpus_pick(a->gpu_busy, n, want, &got) < 0) {
        int freed = 0;
        for (int i = 0; i < n && i < GPUS_MAX; i++)
            freed += !(a->gpu_busy & ((uint64_t)1 << i));
        return err_set(err, DDP_EUNAVAIL,
                       "needs %d GPUs (gpus_per_proc); %d of the agent's %d free", want, freed, n);
    }
    a->gpu_busy |= got;
    *mask = got;
    *visible = gpus_visible(a->cfg->gpu_ids, n, got);
    return 0;
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

/*
 * Opens folder `name` of parent_fd (path: the whole path, for messages), creating it. For a
 * worker that runs as acct it is owned by acct, mode 0700: a folder of root's (made before
 * the agent ran per-user) is taken over, one of another account refused (job ids start again
 * when ddpd starts on a new database); else it is made 0755. A symbolic link is refused:
 * the folders an account owns are in its hands, and the agent (root) writes rank logs in
 * them. Returns the folder's fd, or a negative code with err.
 */
static int agent_job_dir_open(int parent_fd, const char *path, const char *name,
                              const struct usermap_account *acct, struct ddp_err *err)
{
    if (mkdirat(parent_fd, name, acct ? 0700 : 0755) != 0 && errno != EEXIST)
        return err_set(err, DDP_EIO, "mkdir %s: %s", path, strerror(errno));
    int fd = openat(parent_fd, name, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, DDP_EIO, "open %s: %s", path,
                       errno == ELOOP ? "a symbolic link" : strerror(errno));
    if (!acct)
        return fd;
    struct stat st;
    int rc = 0;
    if (fstat(fd, &st) != 0)
        rc = err_set(err, DDP_EIO, "stat %s: %s", path, strerror(errno));
    else if (st.st_uid != 0 && st.st_uid != acct->uid)
        rc = err_set(err, DDP_EPERM,
                     "%s belongs to uid %ld, not to %s (uid %ld): a folder of another account's "
                     "job (job ids start again when ddpd starts on a new database); remove it",
                     path, (long)st.st_uid, acct->name, (long)acct->uid);
    else if ((st.st_uid != acct->uid || st.st_gid != acct->gid) &&
             fchown(fd, acct->uid, acct->gid) != 0)
        rc = err_set(err, DDP_EIO, "chown %s to %s: %s", path, acct->name, strerror(errno));
    else if ((st.st_mode & 07777) != 0700 && fchmod(fd, 0700) != 0)
        rc = err_set(err, DDP_EIO, "chmod 0700 %s: %s", path, strerror(errno));
    if (rc < 0) {
        close(fd);
        return rc;
    }
    return fd;
}

/*
 * The folders of a worker: <work-dir>/jobs (the agent's), then the job's and the
 * generation's, and the job's default checkpoint dir when the job gives none (a failure of
 * that one is only logged: the worker says so when it writes a checkpoint). Their fds
 * (caller closes), or a negative code with err.
 */
static int agent_job_dirs(const struct agent_config *cfg, const struct assign *as,
                          const struct usermap_account *acct, int *gen_fd, struct ddp_err *err)
{
    char *jobs = xasprintf("%s/jobs", cfg->work_dir);
    char *job = xasprintf("%s/%s", jobs, as->job_id);
    char *gen_name = xasprintf("gen-%" PRId64, as->generation);
    char *gen = xasprintf("%s/%s", job, gen_name);
    char *ckpt = xasprintf("%s/ckpt", job);
    int jobs_fd = -1, job_fd = -1, rc = fs_mkdir_p(jobs, 0755, err);
    if (rc < 0)
        goto out;
    jobs_fd = open(jobs, O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    if (jobs_fd < 0) {
        rc = err_set(err, DDP_EIO, "open %s: %s", jobs, strerror(errno));
        goto out;
    }
    job_fd = rc = agent_job_dir_open(jobs_fd, job, as->job_id, acct, err);
    if (rc < 0)
        goto out;
    rc = agent_job_dir_open(job_fd, gen, gen_name, acct, err);
    if (rc < 0)
        goto out;
    *gen_fd = rc;
    rc = 0;
    if (!as->checkpoint_dir || !*as->checkpoint_dir) {
        struct ddp_err e;
        err_clear(&e);
        int fd = agent_job_dir_open(job_fd, ckpt, "ckpt", acct, &e);
        if (fd < 0)
            log_warn("cannot create checkpoint dir %s: %s", ckpt, e.msg);
        else
            close(fd);
    }
out:
    if (job_fd >= 0)
        close(job_fd);
    if (jobs_fd >= 0)
        close(jobs_fd);
    free(ckpt);
    free(gen);
    free(gen_name);
    free(job);
    free(jobs);
    return rc;
}

/* Opens (creates) a rank log in gen_fd for appending: a regular file of one link, never a
 * symbolic link (the folder may be an account's). The fd, or a negative code with err. */
static int agent_open_log(int gen_fd, const char *path, const char *name, struct ddp_err *err)
{
    int fd = openat(gen_fd, name,
                    O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC | O_NOFOLLOW | O_NONBLOCK, 0644);
    if (fd < 0)
        return err_set(err, DDP_EIO, "cannot open %s: %s", path,
                       errno == ELOOP ? "a symbolic link" : strerror(errno));
    struct stat st;
    if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode) || st.st_nlink != 1) {
        close(fd);
        return err_set(err, DDP_EIO, "cannot open %s: not a regular file of one link", path);
    }
    if (fcntl(fd, F_SETFL, O_APPEND) != 0) { /* O_NONBLOCK was for a FIFO planted there */
        close(fd);
        return err_set(err, DDP_EIO, "cannot open %s: %s", path, strerror(errno));
    }
    return fd;
}

/* Starts local rank lr of as. Caller holds a->mu. */
static void agent_start_worker(struct agent *a, const struct assign *as, int lr)
{
    const struct agent_config *cfg = a->cfg;
    struct worker *w = agent_worker_new(a, as, lr);
    struct ddp_err err;
    err_clear(&err);
    char *gen_dir = xasprintf("%s/jobs/%s/gen-%" PRId64, cfg->work_dir, as->job_id, as->generation);
    char *log_name = xasprintf("rank-%d.log", w->rank);
    char *log_path = xasprintf("%s/%s", gen_dir, log_name);
    int own_ckpt = as->checkpoint_dir && *as->checkpoint_dir;
    char *ckpt = own_ckpt ? xstrdup(as->checkpoint_dir)
                          : xasprintf("%s/jobs/%s/ckpt", cfg->work_dir, as->job_id);
    /* No workdir in the spec: the job's own folder, made (for its account) before the
     * spawn by agent_job_dirs(), so that any owner's account can enter it. */
    char *cwd = as->workdir && *as->workdir ? xstrdup(as->workdir)
                                            : xasprintf("%s/jobs/%s", cfg->work_dir, as->job_id);
    char **env = NULL;
    char *path = NULL, *cg_path = NULL, *visible = NULL;
    int out[2] = {-1, -1}, met[2] = {-1, -1}, ctl[2] = {-1, -1}, cg_fd = -1, gen_fd = -1;
    struct usermap_account acct;
    memset(&acct, 0, sizeof(acct));
    int per_user = cfg->isolation == USERMAP_PER_USER;

    w->hb_name = xasprintf("rank-%d.heartbeat", w->rank);
    w->err_name = xasprintf("rank-%d.error.json", w->rank);
    w->hb_file = xasprintf("%s/%s", gen_dir, w->hb_name);
    w->err_file = xasprintf("%s/%s", gen_dir, w->err_name);
    /* The account before anything is made for it: a user without one runs nothing here.
     * From the cache the beat filled outside the lock (NSS may wait on a directory server). */
    if (per_user &&
        usermap_cache_resolve(&a->accounts, cfg->user_map, as->owner, cfg->name, &acct, &err) < 0) {
        agent_worker_failed(a, w, err.msg);
        goto out;
    }
    if (agent_job_dirs(cfg, as, per_user ? &acct : NULL, &gen_fd, &err) < 0) {
        agent_worker_failed(a, w, err.msg);
        goto out;
    }
    w->log_fd = agent_open_log(gen_fd, log_path, log_name, &err);
    if (w->log_fd < 0) {
        w->log_fd = -1;
        agent_worker_failed(a, w, err.msg);
        goto out;
    }
    if (agent_open_pipe(out, &err) < 0 || agent_open_pipe(met, &err) < 0) {
        agent_worker_failed(a, w, err.msg);
        goto out;
    }
    /* the control pipe: the worker reads, the agent writes without blocking */
    if (pipe2(ctl, O_CLOEXEC) != 0 || fcntl(ctl[1], F_SETFL, O_NONBLOCK) != 0) {
        err_set(&err, DDP_EINTERNAL, "control pipe: %s", strerror(errno));
        agent_worker_failed(a, w, err.msg);
        goto out;
    }
    if (agent_pick_gpus(a, as, &w->gpus, &visible, &err) < 0) {
        agent_worker_failed(a, w, err.msg);
        goto out;
    }
    struct spawn_env_args ea = {.a = as,
                                .local_rank = lr,
                                .gpu = visible,
                                .checkpoint_dir = ckpt,
                                .heartbeat_file = w->hb_file,
                                .error_file = w->err_file,
                                .user = per_user ? acct.name : NULL,
                                .home = per_user ? acct.home : NULL};
    env = spawn_env_build(environ, &ea);
    path = spawn_resolve(as->argv[0], env);
    if (cgroup_job_open(a->cg, as->job_id, as->generation, &cg_fd, &cg_path, &err) < 0) {
        /* The worker runs as without cgroups: what it detaches may outlive it. */
        log_warn("worker job=%s generation=%" PRId64 " rank=%d runs outside a cgroup: %s",
                 w->job_id, w->generation, w->rank, err.msg);
        err_clear(&err);
    }
    struct spawn_cred cred = {.name = acct.name,
                              .uid = acct.uid,
                              .gid = acct.gid,
                              .groups = acct.groups,
                              .ngroups = acct.ngroups};
    struct spawn_req req = {.argv = as->argv,
                            .envp = env,
                            .path = path,
                            .cwd = cwd,
                            .out_fd = out[1],
                            .metrics_fd = met[1],
                            .control_fd = ctl[0],
                            .cgroup_path = cg_path,
                            .cgroup_fd = cg_fd,
                            .cred = per_user ? &cred : NULL,
                            .mkdir_path = own_ckpt ? ckpt : NULL};
    pid_t pid;
    if (spawn_start(&req, &pid, &err) < 0) {
        agent_worker_failed(a, w, err.msg);
        goto out;
    }
    spawn_proc_init(&w->proc, pid);
    w->out_fd = out[0];
    w->met_fd = met[0];
    w->ctl_fd = ctl[1];
    w->gen_fd = gen_fd;
    out[0] = met[0] = ctl[1] = gen_fd = -1;
    agent_note_change(a);
    if (per_user)
        log_info("started worker job=%s generation=%" PRId64
                 " rank=%d local_rank=%d pid=%d owner=%s account=%s uid=%ld",
                 w->job_id, w->generation, w->rank, lr, (int)pid, as->owner, acct.name,
                 (long)acct.uid);
    else
        log_info("started worker job=%s generation=%" PRId64 " rank=%d local_rank=%d pid=%d",
                 w->job_id, w->generation, w->rank, lr, (int)pid);
    agent_wake_io(a);
out:
    if (cg_fd >= 0)
        close(cg_fd);
    if (gen_fd >= 0)
        close(gen_fd);
    usermap_account_release(&acct);
    if (w->proc.exited) {
        if (w->log_fd >= 0)
            close(w->log_fd);
        w->log_fd = -1;
        a->gpu_busy &= ~w->gpus;
        w->gpus = 0;
        if (cg_path) /* no other rank of the job may run here: then the cgroup goes */
            agent_cgroup_done(a, w->job_id, w->generation);
    }
    for (int i = 0; i < 2; i++) {
        if (out[i] >= 0)
            close(out[i]);
        if (met[i] >= 0)
            close(met[i]);
        if (ctl[i] >= 0)
            close(ctl[i]);
    }
    spawn_env_free(env);
    free(path);
    free(cg_path);
    free(visible);
    free(ckpt);
    free(cwd);
    free(log_path);
    free(log_name);
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
    for (size_t i = 0; i < a->ndrains; i++)
        if (a->drains[i].generation == generation && !a->drains[i].busy &&
            strcmp(a->drains[i].job_id, job_id) == 0)
            return; /* queued already */
    XGROW(a->drains, a->ndrains + 1, a->capdrains, 4);
    a->drains[a->ndrains++] =
        (struct agent_drain){.job_id = xstrdup(job_id), .generation = generation, .busy = 0};
    agent_wake_io(a);
}

int agent_cgroup_draining(const struct agent *a)
{
    return a->ndrains > 0;
}

void agent_cgroup_drain(struct agent *a)
{
    pthread_mutex_lock(&a->mu);
    size_t n = a->ndrains;
    struct agent_drain *mine = n ? xcalloc(n, sizeof(*mine)) : NULL;
    size_t k = 0;
    for (size_t i = 0; i < n; i++) {
        if (a->drains[i].busy)
            continue;
        a->drains[i].busy = 1;
        mine[k].job_id = xstrdup(a->drains[i].job_id);
        mine[k++].generation = a->drains[i].generation;
    }
    pthread_mutex_unlock(&a->mu);
    for (size_t i = 0; i < k; i++) {
        struct ddp_err err;
        err_clear(&err);
        size_t found = 0;
        int64_t t0 = time_mono_ms();
        if (cgroup_job_kill(a->cg, mine[i].job_id, mine[i].generation, &found, &err) < 0)
            log_warn("cannot empty the cgroup of job=%s generation=%" PRId64
                     " (the next sweep tries again): %s",
                     mine[i].job_id, mine[i].generation, err.msg);
        else if (found > 0)
            log_info("killed %zu processes left in the cgroup of job=%s generation=%" PRId64
                     " in %" PRId64 " ms",
                     found, mine[i].job_id, mine[i].generation, time_mono_ms() - t0);
    }
    if (k == 0) {
        free(mine);
        return;
    }
    pthread_mutex_lock(&a->mu);
    size_t j = 0;
    for (size_t i = 0; i < a->ndrains; i++) {
        if (a->drains[i].busy) {
            free(a->drains[i].job_id);
            continue;
        }
        a->drains[j++] = a->drains[i];
    }
    a->ndrains = j;
    /* starts deferred meanwhile (agent_reconcile) come with the answer to the beat this
     * asks for */
    agent_note_change(a);
    pthread_mutex_unlock(&a->mu);
    for (size_t i = 0; i < k; i++)
        free(mine[i].job_id);
    free(mine);
}

void agent_cgroup_drains_free(struct agent *a)
{
    for (size_t i = 0; i < a->ndrains; i++)
        free(a->drains[i].job_id);
    free(a->drains);
    a->drains = NULL;
    a->ndrains = a->capdrains = 0;
}

/* The notice of the last answer for w's (job, generation), or NULL. Holds a->mu. */
static const struct agent_notice *agent_notice_of(const struct agent *a, const struct worker *w)
{
    for (size_t i = 0; i < a->nnotices; i++)
        if (a->notices[i].generation == w->generation &&
            strcmp(a->notices[i].job_id, w->job_id) == 0)
            return &a->notices[i];
    return NULL;
}

/* "preempt <grace_s>\n" on w's control pipe; a full pipe or a worker that closed it is no
 * error (the signal gives notice too). Holds a->mu. */
static void agent_notice_write(struct worker *w, int grace_s)
{
    if (w->ctl_fd < 0)
        return;
    char line[32];
    int n = snprintf(line, sizeof(line), "preempt %d\n", grace_s);
    ssize_t k = write(w->ctl_fd, line, (size_t)n);
    if (k != n)
        log_debug("cannot write the notice to the control pipe of job=%s rank=%d: %s", w->job_id,
                  w->rank, k < 0 ? strerror(errno) : "short write");
}

/* 1 when w's (job, generation) is in the desired set. Holds a->mu. */
static int agent_desired(const struct agent *a, const struct worker *w)
{
    for (size_t i = 0; i < a->ndesired; i++)
        if (a->desired[i].generation == w->generation &&
            strcmp(a->desired[i].job_id, w->job_id) == 0)
            return 1;
    return 0;
}

void agent_notices_clear(struct agent *a)
{
    for (size_t i = 0; i < a->nnotices; i++)
        free(a->notices[i].job_id);
    free(a->notices);
    a->notices = NULL;
    a->nnotices = 0;
}

void agent_on_notice_signal(struct agent *a)
{
    size_t n = 0;
    for (size_t i = 0; i < a->nworkers; i++) {
        struct worker *w = a->workers[i];
        if (w->proc.exited || w->proc.stopping)
            continue;
        agent_notice_write(w, w->notice_s);
        kill(-w->proc.pid, w->notice_signo);
        n++;
    }
    log_info("got SIGUSR1: relayed a preemption notice to %zu workers", n);
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
        have[nh].stopping = w->proc.exited || w->proc.stopping || w->proc.noticed;
        hw[nh++] = w;
    }
    /* A worker in its notice whose notice ddpd no longer sends (the job was cancelled
     * meanwhile, or ddpd restarted and forgot it) and that is not desired either: its stop
     * comes now instead of at the notice's end. */
    for (size_t i = 0; i < nh; i++) {
        struct worker *w = hw[i];
        if (w->proc.noticed && !w->proc.stopping && !w->proc.exited && !agent_notice_of(a, w) &&
            !agent_desired(a, w)) {
            log_info("stopping worker job=%s generation=%" PRId64
                     " rank=%d pid=%d grace=%ds: its notice was withdrawn",
                     w->job_id, w->generation, w->rank, (int)w->proc.pid, w->grace_s);
            spawn_proc_stop(&w->proc, time_mono_ms(), w->grace_s);
            agent_wake_io(a);
        }
    }
    struct recon_plan plan = {0};
    recon_compute(want, a->ndesired, have, nh, !a->shutting_down, &plan);
    int64_t now = time_mono_ms();
    for (size_t i = 0; i < plan.n; i++) {
        const struct recon_action *act = &plan.actions[i];
        struct worker *w = act->op == RECON_START ? NULL : hw[act->index];
        switch (act->op) {
        case RECON_START:
            /* While a cgroup is being emptied, what is left in it may still hold a GPU, a
             * port or a file: no worker starts until it is empty (the next answer). */
            if (!agent_cgroup_draining(a))
                agent_start_worker(a, &a->desired[act->index], act->local_rank);
            break;
        case RECON_STOP: {
            const struct agent_notice *nt = agent_notice_of(a, w);
            if (nt) {
                log_info("preemption notice to worker job=%s generation=%" PRId64
                         " rank=%d pid=%d signal=%s stop_in=%ds grace=%ds",
                         w->job_id, w->generation, w->rank, (int)w->proc.pid,
                         signame_str(nt->signo), nt->grace_s, w->grace_s);
                agent_notice_write(w, nt->grace_s);
                spawn_proc_notice(&w->proc, time_mono_ms(), nt->signo, nt->grace_s, w->grace_s);
            } else {
                log_info("stopping worker job=%s generation=%" PRId64 " rank=%d pid=%d grace=%ds",
                         w->job_id, w->generation, w->rank, (int)w->proc.pid, w->grace_s);
                spawn_proc_stop(&w->proc, time_mono_ms(), w->grace_s);
            }
            agent_wake_io(a);
            break;
        }
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
 * train (and write the same checkpoints). After cfg->orphan_timeout_s without a beat answered
 * 200 (at least three heartbeat intervals: ddpd holds a quiet beat up to one, so answers of a
 * healthy link come an interval apart) the agent stops its running workers (with their grace). It keeps the desired set, so they are
 * not started again; their exits are reported when ddpd answers again, and ddpd, if it still
 * wanted them, restarts the job from its checkpoint. Holds a->mu.
 */
void agent_check_orphaned(struct agent *a, int64_t now)
{
    int64_t limit = (int64_t)a->cfg->orphan_timeout_s * 1000;
    if (limit > 0 && limit < 3 * (int64_t)a->interval_ms)
        limit = 3 * (int64_t)a->interval_ms;
    if (limit <= 0 || a->orphaned || a->shutting_down || now - a->last_answer_ms < limit)
        return;
    size_t running = agent_running_count(a);
    a->orphaned = 1;
    if (running == 0)
        return;
    log_warn("no heartbeat taken by ddpd for %lld s: stopping %zu workers whose job cannot be "
             "confirmed",
             (long long)((limit + 999) / 1000), running);
    for (size_t i = 0; i < a->nworkers; i++) {
        struct worker *w = a->workers[i];
        if (!w->proc.exited && !w->proc.stopping)
            spawn_proc_stop(&w->proc, time_mono_ms(), w->grace_s);
    }
}
