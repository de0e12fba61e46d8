/*
 * test_spawn.c - the worker environment (every torchrun and DDP_* variable, override order),
 * PATH resolution, and real processes: exit codes, "command not found" as 127 with a line,
 * stdout/stderr and the metrics fd, SIGTERM then SIGKILL to a process group whose members
 * ignore SIGTERM, and PR_SET_PDEATHSIG; as root, a worker that runs as an account (nobody):
 * its ids, its checkpoint dir made as it, a working dir it cannot enter, a refused change of
 * credentials, PDEATHSIG after it. The clock of the stop sequence is passed in; waits for
 * processes poll with a deadline.
 */
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <pwd.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/gpus.h"
#include "agent/spawn.h"
#include "common/procstat.h"
#include "common/timeutil.h"

#define DEADLINE_MS 20000

static char *argv_job[] = {"train", "--epochs", "3", NULL};
static char *env_keys[] = {"FOO", "RANK", "OMP_NUM_THREADS", NULL};
static char *env_vals[] = {"bar", "99", "4", NULL};

static struct assign make_assign(void)
{
    struct assign a;
    memset(&a, 0, sizeof(a));
    a.job_id = "j-7";
    a.generation = 2;
    a.run_id = "j-7";
    a.argv = argv_job;
    a.argc = 3;
    a.env_keys = env_keys;
    a.env_vals = env_vals;
    a.nenv = 3;
    a.grace_period_s = 30;
    a.group_rank = 1;
    a.group_world_size = 2;
    a.nproc_per_node = 2;
    a.world_size = 4;
    a.master_addr = "10.0.0.5";
    a.master_port = 29512;
    a.restart_count = 1;
    a.max_restarts = 3;
    a.job_token = "9b1f";
    a.preempt_signo = SIGUSR2;
    a.preempt_grace_s = 30;
    return a;
}

static void test_spawn_env_torchrun_variables(void **state)
{
    (void)state;
    struct assign a = make_assign();
    char *base[] = {"PATH=/usr/bin:/bin",     "FOO=base",     "DDP_AGENT_TOKEN=secret",
                    "CUDA_VISIBLE_DEVICES=7", "WORLD_SIZE=1", NULL};
    struct spawn_env_args args = {.a = &a,
                                  .local_rank = 1,
                                  .gpu = NULL,
                                  .checkpoint_dir = "/w/jobs/j-7/ckpt",
                                  .heartbeat_file = "/w/jobs/j-7/gen-2/rank-3.heartbeat"};
    char **env = spawn_env_build(base, &args);
    static const char *const expect[][2] = {
        {"PATH", "/usr/bin:/bin"},
        {"FOO", "bar"},
        {"MASTER_ADDR", "10.0.0.5"},
        {"MASTER_PORT", "29512"},
        {"RANK", "3"},
        {"WORLD_SIZE", "4"},
        {"LOCAL_RANK", "1"},
        {"LOCAL_WORLD_SIZE", "2"},
        {"GROUP_RANK", "1"},
        {"GROUP_WORLD_SIZE", "2"},
        {"ROLE_RANK", "3"},
        {"ROLE_WORLD_SIZE", "4"},
        {"ROLE_NAME", "default"},
        {"TORCHELASTIC_RESTART_COUNT", "1"},
        {"TORCHELASTIC_MAX_RESTARTS", "3"},
        {"TORCHELASTIC_RUN_ID", "j-7"},
        {"OMP_NUM_THREADS", "4"},
        {"CUDA_VISIBLE_DEVICES", "7"},
        {"DDP_JOB_ID", "j-7"},
        {"DDP_GENERATION", "2"},
        {"DDP_JOB_TOKEN", "9b1f"},
        {"DDP_CHECKPOINT_DIR", "/w/jobs/j-7/ckpt"},
        {"DDP_METRICS_FD", "3"},
        {"DDP_CONTROL_FD", "4"},
        {"DDP_PREEMPT_SIGNAL", "SIGUSR2"},
        {"DDP_HEARTBEAT_FILE", "/w/jobs/j-7/gen-2/rank-3.heartbeat"},
    };
    for (size_t i = 0; i < sizeof(expect) / sizeof(expect[0]); i++) {
        const char *v = spawn_env_get(env, expect[i][0]);
        if (!v || strcmp(v, expect[i][1]) != 0)
            print_error("%s=%s, expected %s\n", expect[i][0], v ? v : "(unset)", expect[i][1]);
        assert_non_null(v);
        assert_string_equal(v, expect[i][1]);
    }
    assert_null(spawn_env_get(env, "DDP_AGENT_TOKEN"));
    /* Each variable once. */
    size_t n = 0, ranks = 0;
    for (; env[n]; n++)
        ranks += strncmp(env[n], "RANK=", 5) == 0;
    assert_int_equal(ranks, 1);
    spawn_env_free(env);

    /* Without the job setting OMP_NUM_THREADS it is 1; a GPU overrides the agent's
     * CUDA_VISIBLE_DEVICES; local rank 0 of group 1 is rank 2. */
    a.nenv = 1;
    args.local_rank = 0;
    args.gpu = "1";
    char *base2[] = {"OMP_NUM_THREADS=8", "CUDA_VISIBLE_DEVICES=7", NULL};
    env = spawn_env_build(base2, &args);
    assert_string_equal(spawn_env_get(env, "OMP_NUM_THREADS"), "1");
    assert_string_equal(spawn_env_get(env, "CUDA_VISIBLE_DEVICES"), "1");
    assert_string_equal(spawn_env_get(env, "RANK"), "2");
    assert_string_equal(spawn_env_get(env, "ROLE_RANK"), "2");
    assert_string_equal(spawn_env_get(env, "LOCAL_RANK"), "0");
    spawn_env_free(env);
}

static void test_spawn_resolve_uses_path_of_env(void **state)
{
    (void)state;
    char *env[] = {"PATH=/nonexistent:/bin:/usr/bin", NULL};
    char *p = spawn_resolve("sh", env);
    assert_non_null(p);
    assert_true(strcmp(p, "/bin/sh") == 0 || strcmp(p, "/usr/bin/sh") == 0);
    free(p);
    assert_null(spawn_resolve("ddp-no-such-command-x", env));
    char *env2[] = {"PATH=/nonexistent", NULL};
    assert_null(spawn_resolve("sh", env2));
    p = spawn_resolve("./relative/prog", env2);
    assert_string_equal(p, "./relative/prog");
    free(p);
}

/* Reads fd until EOF or the deadline into buf (NUL-terminated). */
static size_t read_all(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    int64_t end = time_deadline_ms(DEADLINE_MS);
    while (len + 1 < cap && time_left_ms(end) > 0) {
        struct pollfd p = {.fd = fd, .events = POLLIN};
        if (poll(&p, 1, 100) <= 0)
            continue;
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        if (n <= 0)
            break;
        len += (size_t)n;
    }
    buf[len] = '\0';
    return len;
}

/* Reads fd into buf until a newline arrives (or the deadline). */
static void read_line(int fd, char *buf, size_t cap)
{
    size_t len = 0;
    buf[0] = '\0';
    int64_t end = time_deadline_ms(DEADLINE_MS);
    while (!strchr(buf, '\n') && time_left_ms(end) > 0 && len + 1 < cap) {
        struct pollfd pf = {.fd = fd, .events = POLLIN};
        if (poll(&pf, 1, 100) <= 0)
            continue;
        ssize_t n = read(fd, buf + len, cap - 1 - len);
        assert_true(n > 0);
        len += (size_t)n;
        buf[len] = '\0';
    }
}

static void wait_reaped(struct spawn_proc *p)
{
    int64_t end = time_deadline_ms(DEADLINE_MS);
    while (!spawn_proc_reap(p) && time_left_ms(end) > 0)
        time_sleep_ms(10);
    assert_true(p->exited);
}

static int gone(pid_t pid)
{
    waitpid(pid, NULL, WNOHANG); /* reaps it when we adopted it (subreaper) */
    if (kill(pid, 0) != 0)
        return errno == ESRCH;
    char st = proc_state(pid);
    return st == 0 || st == 'Z'; /* no such process, or a zombie not ours to reap */
}

static void wait_gone(pid_t pid)
{
    int64_t end = time_deadline_ms(DEADLINE_MS);
    while (!gone(pid) && time_left_ms(end) > 0)
        time_sleep_ms(10);
    assert_true(gone(pid));
}

/* Starts argv (resolved in PATH) as cred (NULL: ourselves), creating mkdir_path (or NULL),
 * with its output on *out_rd. */
static pid_t start_as(char **argv, const char *cwd, const struct spawn_cred *cred,
                      const char *mkdir_path, int *out_rd)
{
    extern char **environ;
    int out[2];
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    char *path = spawn_resolve(argv[0], environ);
    struct spawn_req req = {.argv = argv,
                            .envp = environ,
                            .path = path,
                            .cwd = cwd,
                            .out_fd = out[1],
                            .metrics_fd = -1,
                            .cred = cred,
                            .mkdir_path = mkdir_path};
    pid_t pid = -1;
    struct ddp_err err;
    assert_int_equal(spawn_start(&req, &pid, &err), 0);
    free(path);
    close(out[1]);
    *out_rd = out[0];
    return pid;
}

/* Starts argv (resolved in PATH) with its output on *out_rd and metrics on *met_rd. */
static pid_t start(char **argv, const char *cwd, int *out_rd, int *met_rd)
{
    extern char **environ;
    int out[2], met[2];
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    assert_int_equal(pipe2(met, O_CLOEXEC), 0);
    char *path = spawn_resolve(argv[0], environ);
    struct spawn_req req = {.argv = argv,
                            .envp = environ,
                            .path = path,
                            .cwd = cwd,
                            .out_fd = out[1],
                            .metrics_fd = met[1]};
    pid_t pid = -1;
    struct ddp_err err;
    assert_int_equal(spawn_start(&req, &pid, &err), 0);
    free(path);
    close(out[1]);
    close(met[1]);
    *out_rd = out[0];
    if (met_rd)
        *met_rd = met[0];
    else
        close(met[0]);
    return pid;
}

static void test_spawn_output_metrics_cwd_and_exit_code(void **state)
{
    (void)state;
    char *argv[] = {"sh", "-c", "echo out; echo err >&2; pwd; echo '{\"loss\": 1}' >&3; exit 3",
                    NULL};
    int out, met;
    pid_t pid = start(argv, "/tmp", &out, &met);
    char buf[4096], mbuf[256];
    read_all(out, buf, sizeof(buf));
    read_all(met, mbuf, sizeof(mbuf));
    assert_non_null(strstr(buf, "out\nerr\n/tmp\n"));
    assert_string_equal(mbuf, "{\"loss\": 1}\n");
    struct spawn_proc p;
    spawn_proc_init(&p, pid);
    wait_reaped(&p);
    assert_int_equal(p.exit_code, 3);
    assert_int_equal(p.sig, 0);
    assert_int_equal(getpgid(pid) < 0, 1); /* reaped: no such process */
    close(out);
    close(met);
}

/* A worker with a control pipe (fd 4) gets the notice: the signal to its group and the line
 * the agent wrote; it answers by exiting 10 before the stop is due, so no SIGTERM comes. */
static void test_spawn_notice_answered(void **state)
{
    (void)state;
    extern char **environ;
    char *argv[] = {"sh", "-c",
                    "trap 'read l <&4; echo \"$l\"; exit 10' USR1; echo ready; "
                    /* the notice goes to the whole group: the sleeps ignore it, else one
                     * may die of it first and the shell say so on the output */
                    "while :; do (trap '' USR1; exec sleep 0.05); done",
                    NULL};
    int out[2], met[2], ctl[2];
    assert_int_equal(pipe2(out, O_CLOEXEC), 0);
    assert_int_equal(pipe2(met, O_CLOEXEC), 0);
    assert_int_equal(pipe2(ctl, O_CLOEXEC), 0);
    char *path = spawn_resolve(argv[0], environ);
    struct spawn_req req = {.argv = argv,
                            .envp = environ,
                            .path = path,
                            .out_fd = out[1],
                            .metrics_fd = met[1],
                            .control_fd = ctl[0]};
    pid_t pid = -1;
    struct ddp_err err;
    assert_int_equal(spawn_start(&req, &pid, &err), 0);
    free(path);
    close(out[1]);
    close(met[1]);
    close(ctl[0]);
    char buf[64];
    read_line(out[0], buf, sizeof(buf));
    assert_string_equal(buf, "ready\n");
    assert_int_equal(write(ctl[1], "preempt 3\n", 10), 10);
    struct spawn_proc p;
    spawn_proc_init(&p, pid);
    spawn_proc_notice(&p, 1000, SIGUSR1, 3, 30);
    assert_true(p.noticed);
    assert_false(p.stopping);
    assert_int_equal(spawn_proc_tick(&p, 1100), 2900); /* the stop is due at 4000 */
    read_line(out[0], buf, sizeof(buf));
    assert_string_equal(buf, "preempt 3\n");
    wait_reaped(&p);
    assert_int_equal(p.exit_code, 10);
    assert_false(p.stopping);
    assert_int_equal(spawn_proc_tick(&p, 99999), -1);
    close(out[0]);
    close(met[0]);
    close(ctl[1]);
}

/* A worker that ignores the notice and SIGTERM: SIGTERM when the notice's time is over, then
 * SIGKILL after the grace, each counted from the step before. */
static void test_spawn_notice_ignored_then_stopped(void **state)
{
    (void)state;
    char *argv[] = {"sh", "-c", "trap '' USR1 TERM; echo ready; while :; do sleep 0.05; done",
                    NULL};
    int out;
    pid_t pid = start(argv, NULL, &out, NULL);
    char buf[64];
    read_line(out, buf, sizeof(buf));
    struct spawn_proc p;
    spawn_proc_init(&p, pid);
    int64_t t0 = 5000;
    spawn_proc_notice(&p, t0, SIGUSR1, 2, 1);
    spawn_proc_notice(&p, t0 + 10, SIGUSR1, 60, 60); /* once only */
    assert_int_equal(spawn_proc_tick(&p, t0 + 500), 1500);
    assert_false(p.stopping);
    time_sleep_ms(100);
    assert_int_equal(spawn_proc_reap(&p), 0);               /* the signal changed nothing */
    assert_int_equal(spawn_proc_tick(&p, t0 + 2000), 1000); /* SIGTERM now, SIGKILL in 1 s */
    assert_true(p.stopping);
    assert_false(p.killed);
    assert_int_equal(spawn_proc_tick(&p, t0 + 3000), 0);
    assert_true(p.killed);
    wait_reaped(&p);
    assert_int_equal(p.sig, SIGKILL);
    close(out);
}

static void test_spawn_own_group_and_only_std_fds(void **state)
{
    (void)state;
    /* fds 0-3 plus the one ls opens to list them: nothing else is inherited, not even fds
     * the agent left without FD_CLOEXEC (20 and 1000 here: spawn closes them itself). */
    char *argv[] = {"sh", "-c", "cut -d' ' -f5 /proc/self/stat; ls /proc/self/fd | wc -l", NULL};
    int dn = open("/dev/null", O_RDONLY); /* no O_CLOEXEC, on purpose */
    assert_true(dn >= 0);
    assert_int_equal(dup2(dn, 20), 20);
    assert_int_equal(dup2(dn, 1000), 1000);
    int out;
    pid_t pid = start(argv, NULL, &out, NULL);
    close(20);
    close(1000);
    close(dn);
    char buf[256];
    read_all(out, buf, sizeof(buf));
    long pgid = strtol(buf, NULL, 10);
    char *nl = strchr(buf, '\n');
    assert_non_null(nl);
    long nfds = strtol(nl + 1, NULL, 10);
    struct spawn_proc p;
    spawn_proc_init(&p, pid);
    wait_reaped(&p);
    /* cut's pgid is the worker's: the shell's own pid, not ours. */
    assert_int_equal(pgid, pid);
    assert_int_equal(nfds, 5);
    assert_int_equal(p.exit_code, 0);
    close(out);
}

static void test_spawn_command_not_found_exits_127_with_a_line(void **state)
{
    (void)state;
    char *argv[] = {"ddp-no-such-command-x", "a", NULL};
    int out;
    pid_t pid = start(argv, NULL, &out, NULL);
    char buf[512];
    read_all(out, buf, sizeof(buf));
    assert_string_equal(buf, "ddp-agent: cannot run 'ddp-no-such-command-x': command not found\n");
    struct spawn_proc p;
    spawn_proc_init(&p, pid);
    wait_reaped(&p);
    assert_int_equal(p.exit_code, 127);
    close(out);

    char noexec[] = "/tmp/ddp-test-spawn-XXXXXX"; /* exists, not executable */
    int fd = mkstemp(noexec);
    assert_true(fd >= 0);
    close(fd);
    char *argv2[] = {noexec, NULL};
    pid = start(argv2, NULL, &out, NULL);
    read_all(out, buf, sizeof(buf));
    unlink(noexec);
    char want[128];
    snprintf(want, sizeof(want), "ddp-agent: cannot run '%s': permission denied\n", noexec);
    assert_string_equal(buf, want);
    spawn_proc_init(&p, pid);
    wait_reaped(&p);
    assert_int_equal(p.exit_code, 127);
    close(out);

    char *argv3[] = {"sh", "-c", "true", NULL};
    pid = start(argv3, "/nonexistent-dir", &out, NULL);
    read_all(out, buf, sizeof(buf));
    assert_non_null(strstr(buf, "cannot enter working dir '/nonexistent-dir'"));
    spawn_proc_init(&p, pid);
    wait_reaped(&p);
    assert_int_equal(p.exit_code, 127);
    close(out);
}

static void test_spawn_sigterm_stops_a_polite_worker(void **state)
{
    (void)state;
    char *argv[] = {"sh", "-c", "echo ready; exec sleep 60", NULL};
    int out;
    pid_t pid = start(argv, NULL, &out, NULL);
    char buf[64];
    ssize_t n = 0;
    struct pollfd pf = {.fd = out, .events = POLLIN};
    assert_int_equal(poll(&pf, 1, DEADLINE_MS), 1);
    n = read(out, buf, sizeof(buf));
    assert_true(n > 0);
    struct spawn_proc p;
    spawn_proc_init(&p, pid);
    spawn_proc_stop(&p, 1000, 30);
    assert_int_equal(spawn_proc_tick(&p, 1000), 30000);
    wait_reaped(&p);
    assert_int_equal(p.sig, SIGTERM);
    assert_int_equal(p.exit_code, 128 + SIGTERM);
    assert_false(p.killed);
    assert_int_equal(spawn_proc_tick(&p, 99999), -1);
    close(out);
}

static void test_spawn_group_ignoring_sigterm_is_killed_after_grace(void **state)
{
    (void)state;
    /* The shell and its child both ignore SIGTERM; the child's pid comes on stdout. */
    char *argv[] = {"sh", "-c", "trap '' TERM; sleep 60 & echo $!; wait; wait", NULL};
    int out;
    pid_t pid = start(argv, NULL, &out, NULL);
    char buf[64];
    read_line(out, buf, sizeof(buf));
    pid_t grandchild = (pid_t)strtol(buf, NULL, 10);
    assert_true(grandchild > 0);

    struct spawn_proc p;
    spawn_proc_init(&p, pid);
    int64_t t0 = 5000;
    spawn_proc_stop(&p, t0, 2);
    /* Before the grace period is over: no SIGKILL, and SIGTERM changed nothing. */
    assert_int_equal(spawn_proc_tick(&p, t0 + 1500), 500);
    assert_false(p.killed);
    time_sleep_ms(200);
    assert_int_equal(spawn_proc_reap(&p), 0);
    assert_false(gone(grandchild));
    /* The grace period is over: SIGKILL to the group. */
    assert_int_equal(spawn_proc_tick(&p, t0 + 2000), 0);
    assert_true(p.killed);
    wait_reaped(&p);
    assert_int_equal(p.sig, SIGKILL);
    assert_int_equal(p.exit_code, 128 + SIGKILL);
    wait_gone(grandchild);
    close(out);
}

static void test_spawn_reap_kills_leftover_group_members(void **state)
{
    (void)state;
    /* The leader exits 0 at once and leaves a child in its group behind. */
    char *argv[] = {"sh", "-c", "sleep 60 & echo $!", NULL};
    int out;
    pid_t pid = start(argv, NULL, &out, NULL);
    char buf[64];
    read_line(out, buf, sizeof(buf));
    close(out);
    pid_t left = (pid_t)strtol(buf, NULL, 10);
    assert_true(left > 0);
    struct spawn_proc p;
    spawn_proc_init(&p, pid);
    wait_reaped(&p);
    assert_int_equal(p.exit_code, 0);
    wait_gone(left);
}

/* A stand-in agent starts a worker (as cred, or NULL) and dies: the worker dies with it. */
static void dies_with_its_agent(const struct spawn_cred *cred)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    pid_t agent = fork();
    assert_true(agent >= 0);
    if (agent == 0) {
        /* A stand-in agent: starts a worker, waits until it runs its program (past every
         * step of the start, the change of credentials included), says its pid, and dies
         * without stopping it. */
        extern char **environ;
        char *argv[] = {"sh", "-c", "echo running; exec sleep 60", NULL};
        int out[2];
        if (pipe2(out, O_CLOEXEC) != 0)
            _exit(1);
        char *path = spawn_resolve("sh", environ);
        struct spawn_req req = {.argv = argv,
                                .envp = environ,
                                .path = path,
                                .out_fd = out[1],
                                .metrics_fd = -1,
                                .cred = cred};
        pid_t w = -1;
        if (spawn_start(&req, &w, NULL) != 0)
            _exit(1);
        close(out[1]);
        char line[64];
        read_line(out[0], line, sizeof(line));
        if (strcmp(line, "running\n") != 0)
            _exit(1);
        ssize_t r = write(pfd[1], &w, sizeof(w));
        _exit(r == sizeof(w) ? 0 : 1);
    }
    close(pfd[1]);
    pid_t worker = -1;
    assert_int_equal(read(pfd[0], &worker, sizeof(worker)), sizeof(worker));
    close(pfd[0]);
    int st;
    assert_int_equal(waitpid(agent, &st, 0), agent);
    assert_true(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    assert_true(worker > 0);
    wait_gone(worker);
}

static void test_spawn_worker_dies_with_its_agent(void **state)
{
    (void)state;
    dies_with_its_agent(NULL);
}

/* The credentials of account `name` (groups: its primary group only), or 0 when the test
 * cannot use it: not root, or no such account. */
static int cred_of(const char *name, struct spawn_cred *c, gid_t *group)
{
    struct passwd *pw = getpwnam(name);
    if (geteuid() != 0 || !pw) {
        print_message("skipped: %s\n", geteuid() != 0 ? "not root" : "no such account");
        return 0;
    }
    *group = pw->pw_gid;
    *c = (struct spawn_cred){
        .name = name, .uid = pw->pw_uid, .gid = pw->pw_gid, .groups = group, .ngroups = 1};
    return 1;
}

static void test_spawn_env_of_an_account(void **state)
{
    (void)state;
    struct assign a = make_assign();
    a.nenv = 0;
    char *base[] = {"HOME=/root", "USER=root", "LOGNAME=root", "PATH=/bin", NULL};
    struct spawn_env_args args = {.a = &a,
                                  .local_rank = 0,
                                  .gpu = NULL,
                                  .checkpoint_dir = "/c",
                                  .heartbeat_file = "/h",
                                  .user = "nobody",
                                  .home = "/nonexistent"};
    char **env = spawn_env_build(base, &args);
    assert_string_equal(spawn_env_get(env, "HOME"), "/nonexistent");
    assert_string_equal(spawn_env_get(env, "USER"), "nobody");
    assert_string_equal(spawn_env_get(env, "LOGNAME"), "nobody");
    assert_string_equal(spawn_env_get(env, "PATH"), "/bin");
    spawn_env_free(env);
    /* The job's own env still wins. */
    static char *keys[] = {"HOME", NULL}, *vals[] = {"/data/home", NULL};
    a.env_keys = keys;
    a.env_vals = vals;
    a.nenv = 1;
    env = spawn_env_build(base, &args);
    assert_string_equal(spawn_env_get(env, "HOME"), "/data/home");
    spawn_env_free(env);
    /* Without an account: the agent's own values. */
    a.nenv = 0;
    args.user = NULL;
    env = spawn_env_build(base, &args);
    assert_string_equal(spawn_env_get(env, "HOME"), "/root");
    assert_string_equal(spawn_env_get(env, "USER"), "root");
    spawn_env_free(env);
}

/* As root: the worker runs as the account (uid, gid, groups), creates its checkpoint dir as
 * it (mode 0700, owned by it; a place it may not write is said, and it runs all the same),
 * and a working dir it cannot enter is a 127 naming the dir and the account. */
static void test_spawn_runs_as_the_account(void **state)
{
    (void)state;
    struct spawn_cred c;
    gid_t group;
    if (!cred_of("nobody", &c, &group))
        return;
    char top[] = "/tmp/ddp-test-spawn-as-XXXXXX";
    assert_non_null(mkdtemp(top));
    assert_int_equal(chmod(top, 0777), 0);
    char ckpt[128], closed[128], closed_ckpt[160], want[512], buf[1024];
    snprintf(ckpt, sizeof(ckpt), "%s/a/ckpt", top);
    snprintf(closed, sizeof(closed), "%s/closed", top);
    snprintf(closed_ckpt, sizeof(closed_ckpt), "%s/ckpt", closed);
    assert_int_equal(mkdir(closed, 0700), 0); /* root's, closed to others */

    char *argv[] = {"sh", "-c", "id -u; id -g; id -G; cat /proc/self/environ >/dev/null", NULL};
    int out;
    pid_t pid = start_as(argv, top, &c, ckpt, &out);
    read_all(out, buf, sizeof(buf));
    snprintf(want, sizeof(want), "%ld\n%ld\n%ld\n", (long)c.uid, (long)c.gid, (long)c.gid);
    assert_string_equal(buf, want);
    struct spawn_proc p;
    spawn_proc_init(&p, pid);
    wait_reaped(&p);
    assert_int_equal(p.exit_code, 0);
    close(out);
    struct stat st;
    assert_int_equal(stat(ckpt, &st), 0);
    assert_int_equal(st.st_uid, c.uid);
    assert_int_equal(st.st_mode & 07777, 0700);

    /* A checkpoint dir the account may not create: said, and the worker runs. */
    char *argv2[] = {"sh", "-c", "echo ran", NULL};
    pid = start_as(argv2, top, &c, closed_ckpt, &out);
    read_all(out, buf, sizeof(buf));
    snprintf(want, sizeof(want),
             "ddp-agent: cannot create checkpoint dir '%s' as nobody (uid %ld): permission "
             "denied\nran\n",
             closed_ckpt, (long)c.uid);
    assert_string_equal(buf, want);
    spawn_proc_init(&p, pid);
    wait_reaped(&p);
    assert_int_equal(p.exit_code, 0);
    close(out);
    assert_int_equal(stat(closed_ckpt, &st), -1);

    /* A working dir the account cannot enter: 127, naming the dir and the account. */
    pid = start_as(argv2, closed, &c, NULL, &out);
    read_all(out, buf, sizeof(buf));
    snprintf(want, sizeof(want),
             "ddp-agent: cannot run 'sh': cannot enter working dir '%s' as nobody (uid %ld): "
             "permission denied\n",
             closed, (long)c.uid);
    assert_string_equal(buf, want);
    spawn_proc_init(&p, pid);
    wait_reaped(&p);
    assert_int_equal(p.exit_code, 127);
    close(out);

    /* PDEATHSIG holds although the change of credentials cleared the first one. */
    dies_with_its_agent(&c);

    assert_int_equal(rmdir(closed), 0);
    assert_int_equal(rmdir(ckpt), 0);
    snprintf(buf, sizeof(buf), "%s/a", top);
    assert_int_equal(rmdir(buf), 0);
    assert_int_equal(rmdir(top), 0);
}

/* An account the child cannot become (here: a uid setuid refuses as non-root would be
 * needed; as root a bad group list does it): 127 with the line, nothing run. */
static void test_spawn_account_refused_exits_127(void **state)
{
    (void)state;
    struct spawn_cred c;
    gid_t group;
    if (!cred_of("nobody", &c, &group))
        return;
    c.ngroups = (size_t)sysconf(_SC_NGROUPS_MAX) + 1; /* EINVAL from setgroups */
    gid_t *many = calloc(c.ngroups, sizeof(gid_t));
    assert_non_null(many);
    c.groups = many;
    char *argv[] = {"sh", "-c", "echo ran", NULL};
    int out;
    char buf[512], want[256];
    pid_t pid = start_as(argv, NULL, &c, NULL, &out);
    read_all(out, buf, sizeof(buf));
    snprintf(want, sizeof(want),
             "ddp-agent: cannot run 'sh': cannot become nobody (uid %ld, gid %ld): invalid "
             "argument\n",
             (long)c.uid, (long)c.gid);
    assert_string_equal(buf, want);
    struct spawn_proc p;
    spawn_proc_init(&p, pid);
    wait_reaped(&p);
    assert_int_equal(p.exit_code, 127);
    close(out);
    free(many);
}

/* The GPUs an agent hands out: the CUDA_VISIBLE_DEVICES it inherited (a Slurm step's), not
 * every device of the node; none for "" / -1 / NoDevFiles; every found one without it. */
static void test_spawn_gpus_inherited_visible_devices(void **state)
{
    (void)state;
    char **ids = NULL;
    int n = 0;
    gpus_list(NULL, 3, &ids, &n);
    assert_int_equal(n, 3);
    assert_string_equal(ids[2], "2");
    gpus_free(ids, n);
    gpus_list("5, 7,GPU-1a2b ,,", 8, &ids, &n);
    assert_int_equal(n, 3);
    assert_string_equal(ids[0], "5");
    assert_string_equal(ids[1], "7");
    assert_string_equal(ids[2], "GPU-1a2b");
    gpus_free(ids, n);
    const char *none[] = {"", "-1", "NoDevFiles"};
    for (int i = 0; i < 3; i++) {
        gpus_list(none[i], 8, &ids, &n);
        assert_int_equal(n, 0);
        gpus_free(ids, n);
    }
}

/* Each worker gets gpus_per_proc GPUs of the agent's own list (an inherited
 * CUDA_VISIBLE_DEVICES is that list), lowest free first, and never one another worker holds. */
static void test_spawn_gpus_disjoint_per_worker(void **state)
{
    (void)state;
    char **ids = NULL;
    int n = 0;
    gpus_list("4,5,6,7", 8, &ids, &n);
    assert_int_equal(n, 4);
    uint64_t busy = 0, w0 = 0, w1 = 0, w2 = 99;
    assert_int_equal(gpus_pick(busy, n, 2, &w0), 0);
    busy |= w0;
    assert_int_equal(gpus_pick(busy, n, 2, &w1), 0);
    busy |= w1;
    assert_int_equal(w0 & w1, 0);
    char *v0 = gpus_visible(ids, n, w0), *v1 = gpus_visible(ids, n, w1);
    assert_string_equal(v0, "4,5");
    assert_string_equal(v1, "6,7");
    free(v0);
    free(v1);
    /* all 4 held: a third worker asking one gets none, and *out stays */
    assert_int_equal(gpus_pick(busy, n, 1, &w2), -1);
    assert_int_equal(w2, 99);
    /* 0 GPUs: an empty set, CUDA_VISIBLE_DEVICES="" (no GPU seen) */
    assert_int_equal(gpus_pick(busy, n, 0, &w2), 0);
    assert_int_equal(w2, 0);
    char *v2 = gpus_visible(ids, n, w2);
    assert_string_equal(v2, "");
    free(v2);
    /* worker 0 exits: its GPUs are free again, and reused lowest first */
    busy &= ~w0;
    assert_int_equal(gpus_pick(busy, n, 1, &w2), 0);
    char *v3 = gpus_visible(ids, n, w2);
    assert_string_equal(v3, "4");
    free(v3);
    /* 3 GPUs asked with 2 free: refused */
    assert_int_equal(gpus_pick(busy, n, 3, &w2), -1);
    gpus_free(ids, n);
}

int main(void)
{
    /* Orphans come to us, so that the tests can reap them and see them gone. */
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_spawn_env_torchrun_variables),
        cmocka_unit_test(test_spawn_gpus_inherited_visible_devices),
        cmocka_unit_test(test_spawn_gpus_disjoint_per_worker),
        cmocka_unit_test(test_spawn_resolve_uses_path_of_env),
        cmocka_unit_test(test_spawn_output_metrics_cwd_and_exit_code),
        cmocka_unit_test(test_spawn_own_group_and_only_std_fds),
        cmocka_unit_test(test_spawn_command_not_found_exits_127_with_a_line),
        cmocka_unit_test(test_spawn_sigterm_stops_a_polite_worker),
        cmocka_unit_test(test_spawn_notice_answered),
        cmocka_unit_test(test_spawn_notice_ignored_then_stopped),
        cmocka_unit_test(test_spawn_group_ignoring_sigterm_is_killed_after_grace),
        cmocka_unit_test(test_spawn_reap_kills_leftover_group_members),
        cmocka_unit_test(test_spawn_worker_dies_with_its_agent),
        cmocka_unit_test(test_spawn_env_of_an_account),
        cmocka_unit_test(test_spawn_runs_as_the_account),
        cmocka_unit_test(test_spawn_account_refused_exits_127),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
