/*
 * spawn.c - the worker environment, fork/exec into an own process group, and the stop and
 * reap sequence.
 *
 * Invariants:
 *   - between fork and execve the child only calls async-signal-safe functions; every
 *     string it may write was formatted by the parent before fork, and the account it runs
 *     as was resolved by the parent (NSS is not async-signal-safe);
 *   - a worker given an account takes it (groups, gid, uid) before it creates a folder,
 *     enters its working dir or runs anything, so none of these happen as root; should it
 *     fail, the worker exits 127 without running anything;
 *   - a worker joins its cgroup (write(2) of "0" to cgroup.procs) before it can start any
 *     process, so nothing it starts is outside the cgroup;
 *   - a worker's process group is signalled only while its leader is unreaped (alive or a
 *     zombie), so the group id cannot have been reused by another process;
 *   - spawn_proc_reap() kills what is left of the group before it reaps the leader, so no
 *     grandchild of a worker outlives it.
 */
#include "agent/spawn.h"

#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include "common/signame.h"
#include "common/xalloc.h"

/* ---- environment ---------------------------------------------------------------------- */

struct spawn_envb {
    char **v;
    size_t n;
    size_t cap;
};

static int spawn_key_is(const char *kv, const char *key, size_t klen)
{
    return strncmp(kv, key, klen) == 0 && kv[klen] == '=';
}

static void spawn_envb_put(struct spawn_envb *b, char *kv)
{
    size_t klen = strcspn(kv, "=");
    for (size_t i = 0; i < b->n; i++) {
        if (spawn_key_is(b->v[i], kv, klen)) {
            free(b->v[i]);
            b->v[i] = kv;
            return;
        }
    }
    XGROW(b->v, b->n + 2, b->cap, 64); /* the entry and the NULL after it */
    b->v[b->n++] = kv;
    b->v[b->n] = NULL;
}

static void spawn_envb_set(struct spawn_envb *b, const char *key, const char *val)
{
    spawn_envb_put(b, xasprintf("%s=%s", key, val));
}

static void spawn_envb_setl(struct spawn_envb *b, const char *key, long long val)
{
    spawn_envb_put(b, xasprintf("%s=%lld", key, val));
}

char **spawn_env_build(char *const *base, const struct spawn_env_args *args)
{
    const struct assign *a = args->a;
    struct spawn_envb b = {0};
    int job_sets_omp = 0;

    /* What a worker must never inherit from the agent: credentials of the control plane and
     * where they are kept (a job's own env may still set such a name for itself). */
    static const char *const secret[] = {"DDP_AGENT_TOKEN", "DDP_TOKEN", "DDP_HOME"};
    for (size_t i = 0; base && base[i]; i++) {
        int skip = !strchr(base[i], '=');
        for (size_t s = 0; !skip && s < sizeof(secret) / sizeof(secret[0]); s++)
            skip = spawn_key_is(base[i], secret[s], strlen(secret[s]));
        if (skip)
            continue;
        spawn_envb_put(&b, xstrdup(base[i]));
    }
    if (args->user) {
        spawn_envb_set(&b, "HOME", args->home ? args->home : "/");
        spawn_envb_set(&b, "USER", args->user);
        spawn_envb_set(&b, "LOGNAME", args->user);
    }
    for (size_t i = 0; i < a->nenv; i++) {
        spawn_envb_set(&b, a->env_keys[i], a->env_vals[i]);
        if (strcmp(a->env_keys[i], "OMP_NUM_THREADS") == 0)
            job_sets_omp = 1;
    }
    int rank = assign_rank(a, args->local_rank);
    spawn_envb_set(&b, "MASTER_ADDR", a->master_addr);
    spawn_envb_setl(&b, "MASTER_PORT", a->master_port);
    spawn_envb_setl(&b, "RANK", rank);
    spawn_envb_setl(&b, "WORLD_SIZE", a->world_size);
    spawn_envb_setl(&b, "LOCAL_RANK", args->local_rank);
    spawn_envb_setl(&b, "LOCAL_WORLD_SIZE", a->nproc_per_node);
    spawn_envb_setl(&b, "GROUP_RANK", a->group_rank);
    spawn_envb_setl(&b, "GROUP_WORLD_SIZE", a->group_world_size);
    spawn_envb_setl(&b, "ROLE_RANK", rank);
    spawn_envb_setl(&b, "ROLE_WORLD_SIZE", a->world_size);
    spawn_envb_set(&b, "ROLE_NAME", "default");
    spawn_envb_setl(&b, "TORCHELASTIC_RESTART_COUNT", a->restart_count);
    spawn_envb_setl(&b, "TORCHELASTIC_MAX_RESTARTS", a->max_restarts);
    spawn_envb_set(&b, "TORCHELASTIC_RUN_ID", a->run_id ? a->run_id : a->job_id);
    if (args->error_file)
        spawn_envb_set(&b, "TORCHELASTIC_ERROR_FILE", args->error_file);
    if (!job_sets_omp)
        spawn_envb_set(&b, "OMP_NUM_THREADS", "1");
    if (args->gpu)
        spawn_envb_set(&b, "CUDA_VISIBLE_DEVICES", args->gpu);
    spawn_envb_set(&b, "DDP_JOB_ID", a->job_id);
    spawn_envb_setl(&b, "DDP_GENERATION", (long long)a->generation);
    spawn_envb_set(&b, "DDP_JOB_TOKEN", a->job_token ? a->job_token : "");
    spawn_envb_set(&b, "DDP_CHECKPOINT_DIR", args->checkpoint_dir);
    spawn_envb_setl(&b, "DDP_METRICS_FD", SPAWN_METRICS_FD);
    spawn_envb_setl(&b, "DDP_CONTROL_FD", SPAWN_CONTROL_FD);
    spawn_envb_set(&b, "DDP_PREEMPT_SIGNAL",
                   signame_str(a->preempt_signo) ? signame_str(a->preempt_signo) : SIGNAME_DEFAULT);
    spawn_envb_set(&b, "DDP_HEARTBEAT_FILE", args->heartbeat_file);
    return b.v;
}

void spawn_env_free(char **env)
{
    for (size_t i = 0; env && env[i]; i++)
        free(env[i]);
    free(env);
}

const char *spawn_env_get(char *const *env, const char *key)
{
    size_t klen = strlen(key);
    for (size_t i = 0; env && env[i]; i++)
        if (spawn_key_is(env[i], key, klen))
            return env[i] + klen + 1;
    return NULL;
}

char *spawn_resolve(const char *file, char *const *env)
{
    if (!file || !*file)
        return NULL;
    if (strchr(file, '/'))
        return xstrdup(file);
    const char *path = spawn_env_get(env, "PATH");
    if (!path)
        path = getenv("PATH");
    if (!path)
        path = "/usr/local/bin:/usr/bin:/bin";
    const char *p = path;
    for (;;) {
        size_t len = strcspn(p, ":");
        char *cand = len ? xasprintf("%.*s/%s", (int)len, p, file) : xasprintf("./%s", file);
        struct stat st;
        if (stat(cand, &st) == 0 && S_ISREG(st.st_mode) && access(cand, X_OK) == 0)
            return cand;
        free(cand);
        if (p[len] == '\0')
            return NULL;
        p += len + 1;
    }
}

/* ---- fork and exec -------------------------------------------------------------------- */

/* A fixed text for errno (strerror is not async-signal-safe); dflt for the others. */
static const char *spawn_errno_text(int e, const char *dflt)
{
    switch (e) {
    case ENOENT:
        return "no such file or directory";
    case EACCES:
        return "permission denied";
    case ENOEXEC:
        return "not an executable format";
    case ENOTDIR:
        return "a path component is not a directory";
    case ELOOP:
        return "too many symbolic links";
    case E2BIG:
        return "argument list too long";
    case ENOMEM:
        return "out of memory";
    case ETXTBSY:
        return "text file busy";
    case EISDIR:
        return "is a directory";
    case ENAMETOOLONG:
        return "name too long";
    case EBUSY:
        return "device or resource busy";
    case EAGAIN:
        return "resource temporarily unavailable";
    case EINVAL:
        return "invalid argument";
    case EPERM:
        return "operation not permitted";
    case ENODEV:
        return "no such device";
    default:
        return dflt;
    }
}

static void spawn_child_say(int fd, const char *a, const char *b)
{
    ssize_t r = write(fd, a, strlen(a));
    r = write(fd, b, strlen(b));
    r = write(fd, "\n", 1);
    (void)r;
}

/* mkdir -p of path (a writable copy: '/' are cut and put back in place), the last folder
 * mode 0700, those above it 0755. 0, or -1 with errno. Async-signal-safe. */
static int spawn_child_mkdir_p(char *path)
{
    for (char *p = path + 1; *p; p++) {
        if (*p != '/')
            continue;
        *p = '\0';
        int r = mkdir(path, 0755);
        *p = '/';
        if (r != 0 && errno != EEXIST)
            return -1;
    }
    if (mkdir(path, 0700) != 0 && errno != EEXIST)
        return -1;
    struct stat st;
    if (stat(path, &st) != 0)
        return -1;
    if (!S_ISDIR(st.st_mode)) {
        errno = ENOTDIR;
        return -1;
    }
    return 0;
}

/* The messages a child may write, formatted before the fork. */
struct spawn_msgs {
    const char *run;   /* "ddp-agent: cannot run 'X': " */
    const char *cwd;   /* ... cannot enter working dir ... */
    const char *cg;    /* cannot join cgroup ..., or NULL */
    const char *cred;  /* ... cannot become ACCOUNT ..., or NULL */
    const char *mkdir; /* cannot create checkpoint dir ..., or NULL */
    char *mkdir_buf;   /* a writable copy of req->mkdir_path, or NULL */
    int fd_limit;      /* where close_range's fallback stops: RLIMIT_NOFILE, read before fork */
};

/* The child, after fork. Never returns. */
static void spawn_child(const struct spawn_req *req, pid_t parent, int devnull,
                        const struct spawn_msgs *msg)
{
    setpgid(0, 0);
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(127); /* the agent is already gone */
    int cg_errno = 0;
    if (req->cgroup_path && write(req->cgroup_fd, "0", 1) != 1)
        cg_errno = errno ? errno : EIO;
    struct sigaction dfl;
    memset(&dfl, 0, sizeof(dfl));
    dfl.sa_handler = SIG_DFL;
    for (int s = 1; s < NSIG; s++)
        if (s != SIGKILL && s != SIGSTOP)
            sigaction(s, &dfl, NULL);
    sigset_t none;
    sigemptyset(&none);
    sigprocmask(SIG_SETMASK, &none, NULL);

    int out = fcntl(req->out_fd, F_DUPFD, 10);
    int met = req->metrics_fd >= 0 ? fcntl(req->metrics_fd, F_DUPFD, 10) : -1;
    int ctl =
        req->metrics_fd >= 0 && req->control_fd > 0 ? fcntl(req->control_fd, F_DUPFD, 10) : -1;
    int dn = fcntl(devnull, F_DUPFD, 10);
    if (out < 0 || dn < 0 || (req->metrics_fd >= 0 && met < 0) ||
        (req->metrics_fd >= 0 && req->control_fd > 0 && ctl < 0))
        _exit(127);
    if (dup2(dn, 0) < 0 || dup2(out, 1) < 0 || dup2(out, 2) < 0 ||
        (met >= 0 && dup2(met, SPAWN_METRICS_FD) < 0) ||
        (ctl >= 0 && dup2(ctl, SPAWN_CONTROL_FD) < 0))
        _exit(127);
    if (cg_errno)
        spawn_child_say(2, msg->cg, spawn_errno_text(cg_errno, "write failed"));
    int first_closed = ctl >= 0   ? SPAWN_CONTROL_FD + 1
                       : met >= 0 ? SPAWN_METRICS_FD + 1
                                  : SPAWN_METRICS_FD;
    if (close_range((unsigned)first_closed, ~0U, 0) != 0) /* before Linux 5.9 */
        for (int fd = first_closed; fd < msg->fd_limit; fd++)
            close(fd);
    if (req->cred) {
        /* Groups first, uid last: once the uid is not 0 the others cannot be changed. */
        const struct spawn_cred *c = req->cred;
        if (setgroups(c->ngroups, c->groups) != 0 || setgid(c->gid) != 0 || setuid(c->uid) != 0) {
            spawn_child_say(2, msg->cred, spawn_errno_text(errno, "failed"));
            _exit(127);
        }
        /* A change of credentials cleared PDEATHSIG: set it again, and check again that
         * the agent has not gone meanwhile. */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(127);
    }
    if (msg->mkdir_buf && spawn_child_mkdir_p(msg->mkdir_buf) != 0)
        spawn_child_say(2, msg->mkdir, spawn_errno_text(errno, "mkdir failed"));
    if (req->cwd && *req->cwd && chdir(req->cwd) != 0) {
        spawn_child_say(2, msg->cwd, spawn_errno_text(errno, "exec failed"));
        _exit(127);
    }
    if (!req->path) {
        spawn_child_say(2, msg->run, "command not found");
        _exit(127);
    }
    execve(req->path, req->argv, req->envp);
    spawn_child_say(2, msg->run, spawn_errno_text(errno, "exec failed"));
    _exit(127);
}

int spawn_start(const struct spawn_req *req, pid_t *pid, struct ddp_err *err)
{
    int rc = 0;
    const struct spawn_cred *c = req->cred;
    /* " as ACCOUNT (uid N)" in the messages of a worker that runs as an account */
    char *as = c ? xasprintf(" as %s (uid %ld)", c->name, (long)c->uid) : xstrdup("");
    char *run_msg = xasprintf("ddp-agent: cannot run '%s': ", req->argv[0]);
    char *cwd_msg =
        xasprintf("ddp-agent: cannot run '%s': cannot enter working dir '%s'%s: ", req->argv[0],
                  req->cwd ? req->cwd : "", as);
    char *cg_msg = req->cgroup_path
                       ? xasprintf("ddp-agent: cannot join cgroup '%s' (processes this worker "
                                   "detaches may outlive its job): ",
                                   req->cgroup_path)
                       : NULL;
    char *cred_msg = c ? xasprintf("ddp-agent: cannot run '%s': cannot become %s (uid %ld, gid "
                                   "%ld): ",
                                   req->argv[0], c->name, (long)c->uid, (long)c->gid)
                       : NULL;
    char *mkdir_msg =
        req->mkdir_path
            ? xasprintf("ddp-agent: cannot create checkpoint dir '%s'%s: ", req->mkdir_path, as)
            : NULL;
    struct spawn_msgs msg = {
        .run = run_msg,
        .cwd = cwd_msg,
        .cg = cg_msg,
        .cred = cred_msg,
        .mkdir = mkdir_msg,
        .mkdir_buf = req->mkdir_path && *req->mkdir_path == '/' ? xstrdup(req->mkdir_path) : NULL,
        .fd_limit = 4096};
    struct rlimit nofile;
    if (getrlimit(RLIMIT_NOFILE, &nofile) == 0 && nofile.rlim_cur != RLIM_INFINITY &&
        nofile.rlim_cur > 4096)
        msg.fd_limit = nofile.rlim_cur > INT_MAX ? INT_MAX : (int)nofile.rlim_cur;
    int devnull = open("/dev/null", O_RDONLY | O_CLOEXEC);
    if (devnull < 0) {
        rc = err_set(err, DDP_EINTERNAL, "cannot open /dev/null: %s", strerror(errno));
        goto out;
    }
    pid_t parent = getpid();
    pid_t child = fork();
    if (child < 0) {
        rc = err_set(err, DDP_EINTERNAL, "fork failed: %s", strerror(errno));
        goto out;
    }
    if (child == 0)
        spawn_child(req, parent, devnull, &msg);
    /* Both sides set the group so that it exists before either goes on; after the
     * child's exec this may fail with EACCES, which is fine. */
    setpgid(child, child);
    *pid = child;
out:
    if (devnull >= 0)
        close(devnull);
    free(as);
    free(run_msg);
    free(cwd_msg);
    free(cg_msg);
    free(cred_msg);
    free(mkdir_msg);
    free(msg.mkdir_buf);
    return rc;
}

/* ---- stop and reap -------------------------------------------------------------------- */

void spawn_proc_init(struct spawn_proc *p, pid_t pid)
{
    memset(p, 0, sizeof(*p));
    p->pid = pid;
}

void spawn_proc_stop(struct spawn_proc *p, int64_t now_ms, int grace_s)
{
    if (p->exited || p->stopping)
        return;
    p->stopping = 1;
    p->kill_at_ms = now_ms + (int64_t)grace_s * 1000;
    kill(-p->pid, SIGTERM);
    kill(-p->pid, SIGCONT); /* a stopped group (a suspend) must see the SIGTERM */
}

void spawn_proc_notice(struct spawn_proc *p, int64_t now_ms, int signo, int notice_s, int grace_s)
{
    if (p->exited || p->stopping || p->noticed)
        return;
    p->noticed = 1;
    p->term_at_ms = now_ms + (int64_t)notice_s * 1000;
    p->term_grace_s = grace_s;
    kill(-p->pid, signo);
    kill(-p->pid, SIGCONT); /* a stopped group (a suspend) must see the notice */
}

int64_t spawn_proc_tick(struct spawn_proc *p, int64_t now_ms)
{
    if (!p->exited && p->noticed && !p->stopping) {
        if (now_ms < p->term_at_ms)
            return p->term_at_ms - now_ms;
        spawn_proc_stop(p, now_ms, p->term_grace_s);
    }
    if (p->exited || !p->stopping)
        return -1;
    if (p->killed)
        return 0;
    if (now_ms >= p->kill_at_ms) {
        spawn_proc_kill(p);
        return 0;
    }
    return p->kill_at_ms - now_ms;
}

void spawn_proc_kill(struct spawn_proc *p)
{
    if (p->exited)
        return;
    p->killed = 1;
    kill(-p->pid, SIGKILL);
}

void spawn_decode_status(int status, int *exit_code, int *sig)
{
    if (WIFEXITED(status)) {
        *exit_code = WEXITSTATUS(status);
        *sig = 0;
    } else if (WIFSIGNALED(status)) {
        *sig = WTERMSIG(status);
        *exit_code = 128 + *sig;
    } else {
        *exit_code = -1;
        *sig = 0;
    }
}

int spawn_proc_reap(struct spawn_proc *p)
{
    if (p->exited)
        return 1;
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    if (waitid(P_PID, (id_t)p->pid, &si, WEXITED | WNOHANG | WNOWAIT) != 0) {
        if (errno != ECHILD)
            return 0;
        /* Not our child any more (reaped elsewhere): nothing to report but the loss. */
        p->exited = 1;
        p->exit_code = -1;
        p->sig = 0;
        return 1;
    }
    if (si.si_pid == 0)
        return 0;
    /* The leader is a zombie now: its group id is still reserved, kill the rest. */
    kill(-p->pid, SIGKILL);
    int status = 0;
    pid_t r;
    do
        r = waitpid(p->pid, &status, 0);
    while (r < 0 && errno == EINTR);
    if (r == p->pid)
        spawn_decode_status(status, &p->exit_code, &p->sig);
    else {
        p->exit_code = -1;
        p->sig = 0;
    }
    p->exited = 1;
    return 1;
}
