/*
 * agent.c - agent_run(): sets up the shared state (struct agent, agent_internal.h), the wake
 * pipe and the signalfd, starts the I/O thread (io.c) and the report thread (beat.c), runs
 * the heartbeat loop (beat.c) on the calling thread, and tears everything down; plus the few
 * helpers every thread uses.
 *
 * Thread: agent_run() on the caller's thread; the helpers on any thread.
 *
 * Locking: the helpers that read or change state run with a->mu held (agent_wake_io needs
 * no lock). agent_run() touches the state unlocked only before the threads start and after
 * they were joined.
 *
 * Invariants:
 *   1. a->mu guards everything in struct agent and struct worker except the fields marked
 *      "I/O thread" (fds, splitters), which only the I/O thread touches after the worker
 *      was created (under a->mu, by whichever thread applied the answer).
 *   2. Shutdown order: the I/O thread sets a->done once shutting down and no worker runs;
 *      the heartbeat loop then sends its final beat and returns; the report thread is told
 *      done and joined, then the I/O thread; only then are workers freed here, and the job
 *      cgroups swept and the agent's parent cgroup removed.
 *   3. a->cg is opened, and the stale job cgroups of a previous agent of this name swept,
 *      before any thread starts or any worker is spawned.
 */
#include "agent/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "agent/agent_internal.h"
#include "common/log.h"
#include "common/randutil.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

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

/* ---- job cgroups --------------------------------------------------------------------- */

/* Finds the node's hierarchy and says which in one line; then kills and removes the job
 * cgroups a previous agent of this name left (killed with SIGKILL, its workers died with it
 * by PDEATHSIG, but what they detached lives on under init). Nothing of a previous agent is
 * adopted, so nothing there is meant to live. Before the threads start. */
static struct cgroup *agent_cgroup_open(const struct agent_config *cfg)
{
    struct ddp_err err;
    err_clear(&err);
    struct cgroup *cg = cgroup_open(cfg->cgroup, cfg->name, cfg->work_dir, &err);
    if (cgroup_kind_of(cg) == CGROUP_NONE) {
        if (cfg->cgroup == CGROUP_NONE)
            log_info("job cgroups: none (--cgroup off): processes a job detaches from its "
                     "process group (setsid) may outlive it");
        else
            log_warn("job cgroups: none (%s): processes a job detaches from its process "
                     "group (setsid) may outlive it",
                     err.msg);
        return cg;
    }
    log_info("job cgroups: %s in %s", cgroup_kind_name(cgroup_kind_of(cg)), cgroup_parent(cg));
    size_t removed = 0, found = 0;
    err_clear(&err);
    if (cgroup_sweep(cg, &removed, &found, &err) < 0)
        log_warn("cannot remove every job cgroup a previous agent left: %s", err.msg);
    if (removed > 0)
        log_info("removed %zu job cgroups a previous agent left, killing %zu processes", removed,
                 found);
    return cg;
}

/* After the threads were joined: every worker was reaped, each job cgroup was killed at its
 * last worker's reap; what could not be emptied then is tried once more. */
static void agent_cgroup_close(struct cgroup *cg)
{
    struct ddp_err err;
    err_clear(&err);
    size_t removed = 0, found = 0;
    if (cgroup_sweep(cg, &removed, &found, &err) < 0)
        log_warn("job cgroups left at exit: %s", err.msg);
    else if (removed > 0)
        log_info("removed %zu job cgroups at exit, killing %zu processes", removed, found);
    cgroup_close(cg);
}

/* ---- per-user isolation ---------------------------------------------------------------- */

/* Jobs that run as their owners' accounts reach their folders (heartbeat files, rank logs,
 * checkpoints) and their default cwd through the work dir: every folder on the way must let
 * others pass (x). Says the first that does not; the agent runs all the same. */
static void agent_check_reachable(const char *work_dir)
{
    char *p = xstrdup(work_dir);
    for (;;) {
        struct stat st;
        if (stat(p, &st) == 0 && !(st.st_mode & S_IXOTH)) {
            log_warn("work dir %s: %s (mode %04o) does not let other users pass, so jobs "
                     "running as their owners' accounts cannot reach their folders or enter "
                     "the work dir: chmod o+x %s",
                     work_dir, p, (unsigned)(st.st_mode & 07777), p);
            break;
        }
        char *slash = strrchr(p, '/');
        if (!slash || slash == p)
            break;
        *slash = '\0';
    }
    free(p);
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
    a.beat_path = xasprintf("/v1/nodes/%s:heartbeat", cfg->name);
    a.cred_path = xasprintf("%s/node.credential", cfg->work_dir);
    agent_credential_load(&a);
    if (rand_hex(a.incarnation, 16) < 0) {
        log_error("cannot draw an incarnation id");
        goto out;
    }
    a.cg = agent_cgroup_open(cfg);
    if (cfg->isolation == USERMAP_PER_USER)
        agent_check_reachable(cfg->work_dir);
    if (pipe2(a.wake, O_CLOEXEC | O_NONBLOCK) != 0) {
        log_error("pipe: %s", strerror(errno));
        goto out;
    }
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGCHLD);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    sigaddset(&set, SIGUSR1);
    a.sfd = signalfd(-1, &set, SFD_CLOEXEC | SFD_NONBLOCK);
    if (a.sfd < 0) {
        log_error("signalfd: %s", strerror(errno));
        goto out;
    }
    int prc = pthread_create(&io_thread, NULL, agent_io_main, &a);
    if (prc != 0) {
        log_error("cannot start the I/O thread: %s", strerror(prc));
        goto out;
    }
    io_started = 1;
    prc = pthread_create(&report_thread, NULL, agent_report_main, &a);
    if (prc != 0) {
        log_error("cannot start the report thread: %s", strerror(prc));
        pthread_mutex_lock(&a.mu);
        agent_on_stop_signal(&a, SIGTERM);
        pthread_mutex_unlock(&a.mu);
        goto out;
    }
    report_started = 1;
    log_info("agent started name=%s work_dir=%s slots=%d gpus=%d isolation=%s", cfg->name,
             cfg->work_dir, cfg->slots, cfg->gpus, usermap_isolation_name(cfg->isolation));
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
    if (a.cg)
        agent_cgroup_close(a.cg);
    for (size_t i = 0; i < a.ndesired; i++)
        assign_release(&a.desired[i]);
    free(a.desired);
    usermap_cache_release(&a.accounts);
    agent_notices_clear(&a);
    agent_cgroup_drains_free(&a);
    free(a.beat_path);
    free(a.cred_path);
    explicit_bzero(a.credential, sizeof(a.credential));
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
