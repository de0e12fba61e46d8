/*
 * io.c - the agent's I/O thread: reads the workers' output and metrics pipes into their
 * splitters (and the local rank log), reaps children through the signalfd (workers and, as
 * subreaper, adopted orphans), drives each stopping worker's SIGTERM -> SIGKILL deadline,
 * kills a job's cgroup once its last worker here was reaped (without a->mu: a drain may
 * wait for what dies slowly), handles SIGTERM/SIGINT, and frees forgotten workers.
 *
 * Thread: only the I/O thread (agent_io_main) runs this file, apart from agent_close_fds(),
 * which agent_run() also calls after joining it.
 *
 * Locking: the I/O thread takes a->mu for each round of bookkeeping (reap, ticks, collect,
 * building the poll set) and for queueing lines, and drops it around poll() and read(). The
 * fds and splitters of a worker are its alone (agent_internal.h), so it reads them unlocked.
 *
 * Invariants:
 *   1. A worker is freed only here, and only once it is forgotten, reaped, its fds closed and
 *      its queued lines shipped (or kept past AGENT_FORGOTTEN_KEEP_MS), so the beat threads can
 *      name workers by id across an unlocked HTTP call.
 *   2. A worker's exit is recorded only after its pipes were drained, so its last lines are
 *      queued before the exit is reported.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "agent/agent_internal.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

/* Reads what fd has now (non-blocking) into w's splitter; returns 0 at EOF or error, 1 if
 * more may come. With a->mu held only for the queueing. */
static int agent_read_fd(struct agent *a, struct worker *w, int is_metrics, int locked)
{
    char buf[AGENT_READ_CHUNK];
    int fd = is_metrics ? w->met_fd : w->out_fd;
    for (int round = 0; round < 16; round++) {
        ssize_t n = read(fd, buf, sizeof(buf));
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 1;
        if (n <= 0)
            return 0;
        if (!is_metrics && w->log_fd >= 0) {
            const char *p = buf;
            size_t left = (size_t)n;
            while (left > 0) {
                ssize_t k = write(w->log_fd, p, left);
                if (k < 0 && errno == EINTR)
                    continue;
                if (k <= 0) {
                    log_warn("cannot write worker log job=%s rank=%d: %s", w->job_id, w->rank,
                             strerror(errno));
                    close(w->log_fd);
                    w->log_fd = -1;
                    break;
                }
                p += k;
                left -= (size_t)k;
            }
        }
        if (!locked)
            pthread_mutex_lock(&a->mu);
        if (is_metrics)
            logship_split(&w->met_split, buf, (size_t)n, agent_emit_metric, w);
        else
            logship_split(&w->out_split, buf, (size_t)n, agent_emit_log, w);
        if (agent_backlog(a))
            pthread_cond_broadcast(&a->cond); /* the heartbeat thread ships at once */
        if (!locked)
            pthread_mutex_unlock(&a->mu);
    }
    return 1;
}

/* Closes w's pipes and log file after flushing unfinished lines. Holds a->mu. */
void agent_close_fds(struct worker *w)
{
    if (w->out_fd >= 0) {
        logship_split_flush(&w->out_split, agent_emit_log, w);
        close(w->out_fd);
        w->out_fd = -1;
    }
    if (w->met_fd >= 0) {
        logship_split_flush(&w->met_split, agent_emit_metric, w);
        close(w->met_fd);
        w->met_fd = -1;
    }
    if (w->ctl_fd >= 0) {
        close(w->ctl_fd);
        w->ctl_fd = -1;
    }
    if (w->log_fd >= 0) {
        close(w->log_fd);
        w->log_fd = -1;
    }
}

/* Reaps every exited child: workers get their exit recorded (after their pipes are
 * drained, so their last lines come before their exit); other children (orphans adopted
 * as subreaper) are just reaped. Holds a->mu. */
static void agent_reap(struct agent *a)
{
    for (int guard = 0; guard < 4096; guard++) {
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) != 0 || si.si_pid == 0)
            return;
        struct worker *w = NULL;
        for (size_t i = 0; i < a->nworkers && !w; i++)
            if (!a->workers[i]->proc.exited && a->workers[i]->proc.pid == si.si_pid)
                w = a->workers[i];
        if (!w) {
            int st;
            waitpid(si.si_pid, &st, WNOHANG);
            continue;
        }
        if (w->out_fd >= 0)
            agent_read_fd(a, w, 0, 1);
        if (w->met_fd >= 0)
            agent_read_fd(a, w, 1, 1);
        spawn_proc_reap(&w->proc);
        if (w->out_fd >= 0)
            agent_read_fd(a, w, 0, 1);
        if (w->met_fd >= 0)
            agent_read_fd(a, w, 1, 1);
        agent_close_fds(w);
        a->gpu_busy &= ~w->gpus;
        w->gpus = 0;
        agent_note_change(a);
        w->exit_change = a->changes;
        log_info("worker exited job=%s generation=%" PRId64 " rank=%d pid=%d code=%d signal=%d",
                 w->job_id, w->generation, w->rank, (int)w->proc.pid, w->proc.exit_code,
                 w->proc.sig);
        agent_cgroup_done(a, w->job_id, w->generation);
    }
}

/* Frees forgotten workers that have nothing left to ship. Holds a->mu. */
static void agent_collect(struct agent *a, int64_t now)
{
    size_t j = 0;
    for (size_t i = 0; i < a->nworkers; i++) {
        struct worker *w = a->workers[i];
        int shipped = w->logs.count == 0 && w->metrics.count == 0;
        if (w->forgotten && w->proc.exited && w->out_fd < 0 && w->met_fd < 0 &&
            (shipped || now - w->forgotten_ms > AGENT_FORGOTTEN_KEEP_MS)) {
            agent_worker_free(w);
            continue;
        }
        a->workers[j++] = w;
    }
    a->nworkers = j;
}

void *agent_io_main(void *arg)
{
    struct agent *a = arg;
    size_t cap_pfd = 0, cap_pw = 0, cap_pmet = 0;
    struct pollfd *pfd = NULL;
    struct worker **pw = NULL;
    int *pmet = NULL;

    for (;;) {
        pthread_mutex_lock(&a->mu);
        int64_t now = time_mono_ms();
        agent_reap(a);
        int64_t timeout = 250;
        for (size_t i = 0; i < a->nworkers; i++) {
            int64_t left = spawn_proc_tick(&a->workers[i]->proc, now);
            if (left > 0 && left < timeout)
                timeout = left;
        }
        agent_collect(a, now);
        agent_check_orphaned(a, now);
        if (a->shutting_down && agent_running_count(a) == 0) {
            a->done = 1;
            pthread_cond_broadcast(&a->cond);
            pthread_mutex_unlock(&a->mu);
            agent_cgroup_drain(a);
            break;
        }
        size_t need = 2 + 2 * a->nworkers; /* wake pipe, signalfd, two pipes a worker */
        XGROW(pfd, need, cap_pfd, 16);
        XGROW(pw, need, cap_pw, 16);
        XGROW(pmet, need, cap_pmet, 16);
        size_t n = 0;
        pfd[n++] = (struct pollfd){.fd = a->wake[0], .events = POLLIN};
        pfd[n++] = (struct pollfd){.fd = a->sfd, .events = POLLIN};
        for (size_t i = 0; i < a->nworkers; i++) {
            struct worker *w = a->workers[i];
            if (w->out_fd >= 0) {
                pw[n] = w;
                pmet[n] = 0;
                pfd[n++] = (struct pollfd){.fd = w->out_fd, .events = POLLIN};
            }
            if (w->met_fd >= 0) {
                pw[n] = w;
                pmet[n] = 1;
                pfd[n++] = (struct pollfd){.fd = w->met_fd, .events = POLLIN};
            }
        }
        int drain = a->ndrains > 0;
        pthread_mutex_unlock(&a->mu);
        if (drain) {
            agent_cgroup_drain(a); /* unlocked: it may wait for what dies slowly */
            continue;
        }

        int r = poll(pfd, n, (int)timeout);
        if (r < 0 && errno != EINTR) {
            log_error("poll: %s", strerror(errno));
            time_sleep_ms(100);
            continue;
        }
        if (r <= 0)
            continue;
        if (pfd[0].revents) {
            char buf[256];
            while (read(a->wake[0], buf, sizeof(buf)) > 0) {
            }
        }
        if (pfd[1].revents) {
            struct signalfd_siginfo si;
            while (read(a->sfd, &si, sizeof(si)) == (ssize_t)sizeof(si)) {
                if (si.ssi_signo == SIGTERM || si.ssi_signo == SIGINT) {
                    pthread_mutex_lock(&a->mu);
                    agent_on_stop_signal(a, (int)si.ssi_signo);
                    pthread_mutex_unlock(&a->mu);
                } else if (si.ssi_signo == SIGUSR1) {
                    pthread_mutex_lock(&a->mu);
                    agent_on_notice_signal(a);
                    pthread_mutex_unlock(&a->mu);
                }
                /* SIGCHLD: agent_reap() runs at the top of every round. */
            }
        }
        for (size_t i = 2; i < n; i++) {
            if (!pfd[i].revents)
                continue;
            struct worker *w = pw[i];
            if (agent_read_fd(a, w, pmet[i], 0) == 0) {
                /* EOF before the exit: the worker closed its output; keep waiting for the
                 * exit without this fd. */
                pthread_mutex_lock(&a->mu);
                if (pmet[i]) {
                    logship_split_flush(&w->met_split, agent_emit_metric, w);
                    close(w->met_fd);
                    w->met_fd = -1;
                } else {
                    logship_split_flush(&w->out_split, agent_emit_log, w);
                    close(w->out_fd);
                    w->out_fd = -1;
                }
                pthread_mutex_unlock(&a->mu);
            }
        }
    }
    free(pfd);
    free(pw);
    free(pmet);
    return NULL;
}
