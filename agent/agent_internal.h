/*
 * agent_internal.h - the state that the agent's threads share, private to agent/ (agent.h is
 * the public face: struct agent_config and agent_run()).
 *
 * Files, by thread (each opens with its own locking rule):
 *   agent.c   agent_run(): creates and joins the threads, owns struct agent; small helpers
 *             every thread uses;
 *   worker.c  worker lifecycle: start (spawn, into the job's cgroup), reconcile, stop with
 *             grace, orphan stop, the job cgroup's end; called
 *             by whichever thread holds a->mu (beat threads apply answers, the I/O thread
 *             handles signals and the orphan timeout);
 *   io.c      the I/O thread: worker pipes, reaping, the SIGTERM -> SIGKILL deadlines, signals;
 *   beat.c    the heartbeat thread (register, long-poll beats, backoff) and the report thread.
 *
 * Locking: a->mu guards everything in struct agent and struct worker, except the fields
 * marked "I/O thread" below, which only the I/O thread touches once the worker was created.
 * Functions that say "holds a->mu" must be called with it held; none of them blocks on the
 * network. Ownership: struct agent lives on agent_run()'s stack; a->workers owns the workers,
 * and only the I/O thread frees one (agent_collect), so a worker found by id under the lock
 * stays valid until the lock is dropped.
 */
#ifndef DDP_AGENT_AGENT_INTERNAL_H
#define DDP_AGENT_AGENT_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "agent/agent.h"
#include "agent/assign.h"
#include "agent/logship.h"
#include "agent/spawn.h"
#include "agent/usermap.h"

#define AGENT_LOG_QUEUE_MAX    10000        /* lines kept per worker while ddpd does not answer */
#define AGENT_METRIC_QUEUE_MAX 1000         /* metrics lines kept per worker */
#define AGENT_BEAT_LINES_MAX   1000         /* log lines per beat (docs/api.md) */
#define AGENT_BEAT_METRICS_MAX 200          /* metrics lines per beat */
#define AGENT_BEAT_BYTES_MAX   (640u << 10) /* lines and metrics per beat: ddpd takes 1 MiB */
#define AGENT_BACKOFF_MIN_MS   100
#define AGENT_BACKOFF_MAX_MS   2000
/* Another agent holds this node's name (beat.c: 409/401 on a beat, 409 on a register): the
 * wait before the next try doubles from the first to the most, and starts at the first again
 * after AGENT_CONFLICT_CALM_MS without a conflict. */
#define AGENT_CONFLICT_MIN_MS   500
#define AGENT_CONFLICT_MAX_MS   10000
#define AGENT_CONFLICT_CALM_MS  120000
#define AGENT_FORGOTTEN_KEEP_MS 30000 /* unshipped lines of a forgotten worker, at most */
#define AGENT_READ_CHUNK        65536

struct worker {
    uint64_t id;
    char *job_id;
    int64_t generation;
    int rank;
    int local_rank;
    int grace_s;
    int notice_signo; /* the job's preemption notice: its signal, */
    int notice_s;     /* and the time from it to the stop */
    int ctl_fd;       /* write end of the worker's DDP_CONTROL_FD pipe (non-blocking), or -1 */
    uint64_t gpus;    /* the GPUs it holds: bit i = cfg->gpu_ids[i], set in a->gpu_busy */
    struct spawn_proc proc; /* proc.exited = reaped (or never started) */
    uint64_t exit_change;   /* a->changes value at the exit */
    int forgotten;
    int64_t forgotten_ms;
    int64_t started_wall_ms;
    int64_t last_metric_wall_ms;
    /* The generation's folder, opened (O_NOFOLLOW) when the worker started, or -1: the
     * heartbeat and error files are reached by name in it, never by their full path, which
     * goes through folders the job's account owns and could replace by a link. */
    int gen_fd;
    char *hb_file;  /* DDP_HEARTBEAT_FILE of the worker (full path, for it and messages) */
    char *hb_name;  /* its name in gen_fd */
    char *err_file; /* TORCHELASTIC_ERROR_FILE of the worker */
    char *err_name; /* its name in gen_fd */
    /* What err_file said once the worker failed (read once, errfile.h): owned, or NULL. */
    struct errfile *err;
    int err_read;
    char *prefix; /* "[rank R] " */
    struct logship_queue logs;
    struct logship_queue metrics; /* JSON texts; only rank 0's are queued */
    /* I/O thread: */
    int out_fd;
    int met_fd;
    int log_fd;
    struct logship_splitter out_split;
    struct logship_splitter met_split;
};

#define AGENT_CRED_MAX 257

struct agent_notice {
    char *job_id;
    int64_t generation;
    int signo;
    int grace_s;
};

/* A (job, generation) whose cgroup waits to be emptied (agent_cgroup_done). */
struct agent_drain {
    char *job_id; /* owned */
    int64_t generation;
    int busy; /* the I/O thread empties it now */
};

struct agent {
    const struct agent_config *cfg;
    char incarnation[33];
    pthread_mutex_t mu;
    pthread_cond_t cond; /* changes, polling, done, shutting_down */
    struct worker **workers;
    size_t nworkers;
    size_t capworkers;
    uint64_t next_worker_id;
    struct assign *desired;
    size_t ndesired;
    /* Per-user: the accounts of the desired set's owners, resolved by the beat thread
     * before it took mu (usermap.h); agent_start_worker() reads them under mu. */
    struct usermap_cache accounts;
    /* The notices of the last applied answer: workers of these (job, generation) that are
     * no longer desired get the notice before their stop (docs/api.md, "notices"). */
    struct agent_notice *notices;
    size_t nnotices;
    int64_t version; /* of the applied desired set; 0 = none */
    int applied;     /* a desired set was applied since registering */
    int registered;
    int interval_ms;
    uint64_t changes;
    uint64_t changes_sent;
    uint64_t changes_urgent; /* the report thread beat for changes up to this */
    int polling;             /* the heartbeat thread waits in a long poll */
    int refused_bodies;      /* beats refused with 400/413 in a row */
    int shutting_down;
    int done;
    int64_t last_answer_ms; /* monotonic time of ddpd's last beat answered 200 (agent_beat) */
    int orphaned;           /* the orphan timeout fired; cleared by the next answer */
    uint64_t gpu_busy;      /* bit i: GPU i (cfg->gpu_ids[i]) is held by a worker (gpus.h) */
    int wake[2];            /* wakes the I/O thread */
    int sfd;                /* signalfd: SIGCHLD, SIGTERM, SIGINT */
    char *beat_path;
    /* The node credential ddpd gave at the last registration ("" none yet): beats carry
     * it, a registration shows it to take the node's name over while the node is up. Kept
     * in cred_path (mode 0600) so that a restarted agent takes over at once. Under mu. */
    char credential[AGENT_CRED_MAX];
    char *cred_path;
    struct cgroup *cg; /* job cgroups; set before the threads start and never changed */
    /* (job, generation)s whose last worker here exited: their cgroups are emptied by the I/O
     * thread outside mu (agent_cgroup_drain), since that may wait up to CGROUP_DRAIN_MS for
     * what dies slowly, and no beat may wait for it. Under mu. */
    struct agent_drain *drains;
    size_t ndrains, capdrains;
};

/* ---- agent.c: helpers of every thread ----------------------------------------------- */

/* Wakes the I/O thread out of its poll (a new worker, a stop). Any thread, lock or not. */
void agent_wake_io(struct agent *a);
/* Workers not yet reaped. Holds a->mu. */
size_t agent_running_count(const struct agent *a);
/* 1 when more lines are queued than one beat carries (the next beat goes at once). Holds
 * a->mu. */
int agent_backlog(const struct agent *a);
/* Counts a worker start or exit and wakes the waiters. Holds a->mu. */
void agent_note_change(struct agent *a);

/* ---- beat.c: the credential ------------------------------------------------------------ */

/* Reads a->cred_path into a->credential when it holds one (a missing file is no error; any
 * other problem is said and the agent registers as new). Before the threads start. */
void agent_credential_load(struct agent *a);

/* ---- worker.c: worker lifecycle ------------------------------------------------------- */

/* Frees w and what it owns (its fds must be closed). Accepts NULL. */
void agent_worker_free(struct worker *w);
/* logship_emit_fn callbacks (ctx is the worker): queue one output line, prefixed, or one
 * rank-0 metrics line. Hold a->mu. */
void agent_emit_log(void *ctx, const char *line, size_t len);
void agent_emit_metric(void *ctx, const char *line, size_t len);
/* Reconciles the desired set against the workers: starts, stops and forgets. Holds a->mu. */
void agent_reconcile(struct agent *a);
/* SIGUSR1 to the agent (Slurm's --signal=B:USR1@T, relayed): every running worker gets its
 * job's notice signal and a "preempt" line on its control pipe; nothing is stopped (the
 * workers checkpoint and exit by themselves, or the allocation's end stops them). Holds
 * a->mu. */
void agent_on_notice_signal(struct agent *a);
/* Frees the notices of the last answer. Holds a->mu. */
void agent_notices_clear(struct agent *a);
/* SIGTERM/SIGINT: the first stops every worker with its grace, the second kills them. Holds
 * a->mu. */
void agent_on_stop_signal(struct agent *a, int signo);
/* Stops the running workers once ddpd has not answered for cfg->orphan_timeout_s. Holds
 * a->mu. */
void agent_check_orphaned(struct agent *a, int64_t now);
/* Once no worker of (job_id, generation) runs any more: queues its cgroup for
 * agent_cgroup_drain() and wakes the I/O thread. job_id is borrowed. Holds a->mu. */
void agent_cgroup_done(struct agent *a, const char *job_id, int64_t generation);
/* 1 while a cgroup is queued or being emptied: no worker starts meanwhile, as none did
 * while the drain held the lock (what is left may hold a GPU, a port, a file; cgroup.h:
 * never create and kill one job's cgroup at once); the drain's end asks for a beat, whose
 * answer starts them. Holds a->mu. */
int agent_cgroup_draining(const struct agent *a);
/* The I/O thread, without a->mu: kills what is left in each queued cgroup and removes it
 * (bounded by CGROUP_DRAIN_MS each), logging what it killed or why it could not. */
void agent_cgroup_drain(struct agent *a);
/* Frees the queue (after the threads are joined). */
void agent_cgroup_drains_free(struct agent *a);

/* ---- io.c: the I/O thread ------------------------------------------------------------- */

/* The I/O thread's body (arg is the struct agent); returns once shutting down and no worker
 * runs, after setting a->done. */
void *agent_io_main(void *arg);
/* Closes w's pipes and log file after flushing unfinished lines. Holds a->mu (or runs after
 * the I/O thread was joined). */
void agent_close_fds(struct worker *w);

/* ---- beat.c: the heartbeat and report threads ----------------------------------------- */

/* The report thread's body (arg is the struct agent); returns once a->done. */
void *agent_report_main(void *arg);
/* Registers and beats until a->done, then sends a final beat (best effort). The calling
 * thread of agent_run(). */
void agent_heartbeat_loop(struct agent *a);

#endif
