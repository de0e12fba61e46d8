/*
 * spawn.h - worker processes: the torchrun environment, fork + exec into a process group of
 * their own that dies with the agent, and the stop sequence (SIGTERM to the group, SIGKILL
 * after the grace period) with reaping.
 *
 * Threads: spawn_start() may be called from any thread of a multi-threaded agent; between
 * fork and exec the child calls only async-signal-safe functions (everything it needs is
 * prepared by the parent).
 */
#ifndef DDP_AGENT_SPAWN_H
#define DDP_AGENT_SPAWN_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "agent/assign.h"
#include "common/err.h"

/* The fd number a worker's metrics pipe has in the worker (DDP_METRICS_FD). */
#define SPAWN_METRICS_FD 3
/* The fd number of a worker's control pipe (DDP_CONTROL_FD, read end): the agent writes
 * "preempt <grace_s>\n" there with a preemption notice. */
#define SPAWN_CONTROL_FD 4

/* What the environment of one worker needs beyond its assignment. */
struct spawn_env_args {
    const struct assign *a; /* borrowed */
    int local_rank;
    const char *gpu; /* CUDA_VISIBLE_DEVICES: ids of gpus.h, comma separated ("": none), or NULL:
                      * the inherited value stays (a node without GPUs) */
    const char *checkpoint_dir; /* DDP_CHECKPOINT_DIR */
    const char *heartbeat_file; /* DDP_HEARTBEAT_FILE */
    const char *error_file;     /* TORCHELASTIC_ERROR_FILE (torch's @record writes it), or NULL */
    /* The account the worker runs as, or NULL (the agent's own): HOME, USER and LOGNAME
     * are set to its home and name (the job's env may still set them). Borrowed. */
    const char *user;
    const char *home;
};

/*
 * A new NULL-terminated "K=V" array: base (the agent's environment, may be NULL), then the
 * account's HOME, USER and LOGNAME (when args->user is set), then the job's env, then the
 * torchrun and DDP_* variables of docs/api.md overriding all of them.
 * OMP_NUM_THREADS is 1 unless the job's env sets it. DDP_AGENT_TOKEN of base is left out
 * (workers never see the agent's secret). Caller frees with spawn_env_free().
 */
char **spawn_env_build(char *const *base, const struct spawn_env_args *args);
void spawn_env_free(char **env);
/* The value of key in env (borrowed), or NULL. */
const char *spawn_env_get(char *const *env, const char *key);

/*
 * The program execve() should run for file: file itself when it contains a '/', else the
 * first executable regular file named file in the PATH of env (or of the agent when env has
 * none). NULL when none is found. Caller frees.
 */
char *spawn_resolve(const char *file, char *const *env);

/* The credentials a worker takes before it runs anything (a per-user agent running as root:
 * the job owner's local account, usermap.h). Borrowed. */
struct spawn_cred {
    const char *name; /* for messages */
    uid_t uid;
    gid_t gid;
    const gid_t *groups; /* supplementary groups, ngroups of them */
    size_t ngroups;
};

struct spawn_req {
    char *const *argv; /* borrowed; argv[0] is what the worker sees */
    char *const *envp; /* borrowed */
    const char *path;  /* from spawn_resolve(), or NULL: the child reports "not found" */
    const char *cwd;   /* borrowed, or NULL */
    int out_fd;        /* becomes the child's stdout and stderr */
    int metrics_fd;    /* becomes the child's fd SPAWN_METRICS_FD, or -1 */
    /* > 0: becomes the child's fd SPAWN_CONTROL_FD (with a metrics_fd only); else none */
    int control_fd;
    /* The worker's cgroup (cgroup.h), or NULL for none: the child writes "0" to cgroup_fd
     * (its cgroup.procs, borrowed) before anything else, so that it is in the cgroup before
     * it can start a process. cgroup_fd is read only when cgroup_path is set. */
    const char *cgroup_path; /* borrowed, for the message when the write fails */
    int cgroup_fd;
    /* The account to run as, or NULL: the agent's own. */
    const struct spawn_cred *cred;
    /* A folder the worker creates (mkdir -p; the last one mode 0700) once it runs as cred,
     * so never as root: the job's own checkpoint_dir. NULL for none. Borrowed. */
    const char *mkdir_path;
};

/*
 * Forks a worker: own process group (pgid = pid), PR_SET_PDEATHSIG(SIGKILL) checked
 * against getppid(), its cgroup joined (when req has one; should that fail, the worker
 * writes "ddp-agent: cannot join cgroup ..." to out_fd and runs outside it), default signal
 * dispositions and an empty signal mask, stdin from /dev/null, no other inherited fds; then
 * the account of req->cred (setgroups, setgid, setuid, and PDEATHSIG set again, since a
 * change of credentials clears it), mkdir_path created (a failure is said on out_fd, the
 * worker runs all the same), cwd, then execve. When the program cannot run (the account
 * cannot be taken, not found, cwd missing or not enterable by the account, exec refused),
 * the child writes "ddp-agent: cannot run ..." to out_fd and exits 127. Returns 0 and
 * *pid, or DDP_EINTERNAL (fork or /dev/null failed) with err.
 */
int spawn_start(const struct spawn_req *req, pid_t *pid, struct ddp_err *err);

/*
 * A worker being run. The stop sequence is driven by the caller's clock: spawn_proc_stop()
 * sends SIGTERM to the group and arms the SIGKILL deadline; spawn_proc_tick() sends SIGKILL
 * once it is due. spawn_proc_reap() is the only place that waits for the worker.
 */
struct spawn_proc {
    pid_t pid;          /* also the process group id */
    int64_t kill_at_ms; /* SIGKILL deadline; 0 = not stopping */
    int noticed;        /* a preemption notice was sent (spawn_proc_notice) */
    int64_t term_at_ms; /* noticed: when the stop (SIGTERM) is due */
    int term_grace_s;   /* noticed: the grace of that stop */
    int stopping;
    int killed;    /* SIGKILL was sent */
    int exited;    /* reaped */
    int exit_code; /* exit status, or 128+N when killed by signal N */
    int sig;       /* the signal that killed it, 0 if none */
};

void spawn_proc_init(struct spawn_proc *p, pid_t pid);
/* SIGTERM to the group (once); SIGKILL due at now_ms + grace_s, so now_ms must be read at
 * this call (the grace counts from this worker's SIGTERM). No-op when exited. */
void spawn_proc_stop(struct spawn_proc *p, int64_t now_ms, int grace_s);
/* A preemption notice: signo to the group (once), then spawn_proc_stop(grace_s) due at
 * now_ms + notice_s unless the worker exits first (spawn_proc_tick() sends it). No-op when
 * exited, stopping or noticed already. */
void spawn_proc_notice(struct spawn_proc *p, int64_t now_ms, int signo, int notice_s, int grace_s);
/* The stop of a notice when due, SIGKILL when due. Returns ms until the next deadline (0
 * once SIGKILL was sent), or -1 when no deadline is pending. */
int64_t spawn_proc_tick(struct spawn_proc *p, int64_t now_ms);
/* SIGKILL to the whole group at once (agent shutting down hard). */
void spawn_proc_kill(struct spawn_proc *p);
/*
 * If the worker has exited: kills what is left of its process group (SIGKILL), reaps it,
 * fills exit_code / sig and returns 1. Returns 0 while it runs. Never blocks.
 */
int spawn_proc_reap(struct spawn_proc *p);

/* Decodes a wait status into (exit_code, sig) as above. */
void spawn_decode_status(int status, int *exit_code, int *sig);

#endif
