/*
 * test_cgroup.c - the job cgroups: the parsers of /proc/self/cgroup and cgroup.procs, the
 * names, and, for each hierarchy this machine lets the test write (root only; skipped
 * otherwise, saying why), a real job cgroup holding a process and a detached grandchild in a
 * cgroup of its own inside, killed and removed by cgroup_job_kill().
 */
#include <errno.h>
#include <fcntl.h>
#include <setjmp.h>
#include <signal.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmocka.h>

#include "agent/cgroup.h"
#include "common/xalloc.h"

static void test_cgroup_parse_self(void **state)
{
    (void)state;
    const char *v1 = "12:pids:/user.slice/a\n"
                     "6:cpu,cpuacct:/x\n"
                     "4:net_cls,freezer:/ft\n"
                     "1:name=systemd:/init.scope\n"
                     "0::/user.slice/u.scope\n";
    char *p = NULL;
    assert_int_equal(cgroup_parse_self(v1, CGROUP_PIDS, &p), 0);
    assert_string_equal(p, "/user.slice/a");
    free(p);
    assert_int_equal(cgroup_parse_self(v1, CGROUP_FREEZER, &p), 0);
    assert_string_equal(p, "/ft");
    free(p);
    assert_int_equal(cgroup_parse_self(v1, CGROUP_V2, &p), 0);
    assert_string_equal(p, "/user.slice/u.scope");
    free(p);
    /* v2 only, no trailing newline; a controller name inside another is no match. */
    assert_int_equal(cgroup_parse_self("0::/", CGROUP_V2, &p), 0);
    assert_string_equal(p, "/");
    free(p);
    p = NULL;
    assert_int_equal(cgroup_parse_self("0::/\n", CGROUP_PIDS, &p), DDP_ENOTFOUND);
    assert_int_equal(cgroup_parse_self("3:pidsx:/a\n5:xfreezer:/b\n", CGROUP_PIDS, &p),
                     DDP_ENOTFOUND);
    assert_int_equal(cgroup_parse_self("3:pidsx:/a\n5:xfreezer:/b\n", CGROUP_FREEZER, &p),
                     DDP_ENOTFOUND);
    assert_int_equal(cgroup_parse_self("garbage\n7:pids\n", CGROUP_PIDS, &p), DDP_ENOTFOUND);
    assert_int_equal(cgroup_parse_self("", CGROUP_V2, &p), DDP_ENOTFOUND);
    assert_int_equal(cgroup_parse_self("0::/a\n", CGROUP_NONE, &p), DDP_ENOTFOUND);
    assert_null(p);
}

static void test_cgroup_parse_pids(void **state)
{
    (void)state;
    pid_t pids[4];
    int more = -1;
    assert_int_equal(cgroup_parse_pids("", pids, 4, &more), 0);
    assert_int_equal(more, 0);
    assert_int_equal(cgroup_parse_pids("12\n345\n", pids, 4, &more), 2);
    assert_int_equal(pids[0], 12);
    assert_int_equal(pids[1], 345);
    /* No newline at the end; bad lines skipped (sign, letters, 0, past a pid's range). */
    assert_int_equal(cgroup_parse_pids("-1\nx\n0\n7a\n99999999999\n\n8", pids, 4, &more), 1);
    assert_int_equal(pids[0], 8);
    assert_int_equal(more, 0);
    assert_int_equal(cgroup_parse_pids("1\n2\n3\n4\n5\n", pids, 4, &more), 4);
    assert_int_equal(pids[3], 4);
    assert_int_equal(more, 1);
    assert_int_equal(cgroup_parse_pids("1\n2\n3\n4\n", pids, 4, NULL), 4);
}

static void test_cgroup_names(void **state)
{
    (void)state;
    char *n = cgroup_job_name("j-12", 3);
    assert_string_equal(n, "job-j-12-g3");
    free(n);
    n = cgroup_job_name("a b/../c\n", 1);
    assert_string_equal(n, "job-a_b_.._c_-g1");
    free(n);
    char *a = cgroup_parent_name("node-a", "/w/one"), *b = cgroup_parent_name("node-a", "/w/two");
    assert_int_equal(strncmp(a, "ddp-agent-node-a-", 17), 0);
    assert_int_equal(strlen(a), 17 + 8);
    assert_string_not_equal(a, b);
    free(b);
    b = cgroup_parent_name("node-a", "/w/one");
    assert_string_equal(a, b);
    free(a);
    free(b);
    enum cgroup_kind k = CGROUP_NONE;
    struct ddp_err err;
    assert_int_equal(cgroup_kind_parse("freezer", &k, &err), 0);
    assert_int_equal(k, CGROUP_FREEZER);
    assert_int_equal(cgroup_kind_parse("off", &k, &err), 0);
    assert_int_equal(k, CGROUP_NONE);
    assert_int_equal(cgroup_kind_parse("v3", &k, &err), DDP_EINVAL);
    assert_non_null(strstr(err.msg, "'v3'"));
}

static int alive(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (!f)
        return 0;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p && p[1] == ' ' && p[2] != 'Z';
}

/* A worker in the job cgroup (by the fd, as spawn.c's child does) that detaches a grandchild
 * into a new session and into a cgroup "inner" it makes inside the job's. Returns the
 * worker's pid and the grandchild's in *gc. */
static pid_t start_worker(int procs_fd, const char *job_path, pid_t *gc)
{
    int pfd[2];
    assert_int_equal(pipe(pfd), 0);
    char *inner = xasprintf("%s/inner", job_path);
    char *inner_procs = xasprintf("%s/inner/cgroup.procs", job_path);
    pid_t w = fork();
    assert_true(w >= 0);
    if (w == 0) {
        if (write(procs_fd, "0", 1) != 1)
            _exit(2);
        pid_t g = fork();
        if (g == 0) {
            setsid();
            if (mkdir(inner, 0755) != 0 && errno != EEXIST)
                _exit(3);
            int fd = open(inner_procs, O_WRONLY);
            if (fd < 0 || write(fd, "0", 1) != 1)
                _exit(4);
            close(fd);
            pid_t me = getpid();
            if (write(pfd[1], &me, sizeof(me)) != sizeof(me))
                _exit(5);
            for (int i = 0; i < 600; i++)
                usleep(100000);
            _exit(0);
        }
        for (int i = 0; i < 600; i++)
            usleep(100000);
        _exit(0);
    }
    close(pfd[1]);
    assert_int_equal(read(pfd[0], gc, sizeof(*gc)), (ssize_t)sizeof(*gc));
    close(pfd[0]);
    free(inner);
    free(inner_procs);
    return w;
}

static void kill_kind(enum cgroup_kind kind)
{
    if (geteuid() != 0) {
        printf("skip %s: not root\n", cgroup_kind_name(kind));
        skip();
    }
    struct ddp_err err;
    char *work = xasprintf("/test-cgroup-%d", (int)getpid());
    struct cgroup *cg = cgroup_open(kind, "unit", work, &err);
    if (cgroup_kind_of(cg) == CGROUP_NONE) {
        printf("skip %s: %s\n", cgroup_kind_name(kind), err.msg);
        cgroup_close(cg);
        free(work);
        skip();
    }
    int fd = -1;
    char *path = NULL;
    assert_int_equal(cgroup_job_open(cg, "j-1", 1, &fd, &path, &err), 0);
    pid_t gc = 0, w = start_worker(fd, path, &gc);
    close(fd);
    assert_true(alive(w) && alive(gc));

    size_t found = 0;
    int rc = cgroup_job_kill(cg, "j-1", 1, &found, &err);
    assert_int_equal(rc, 0);
    assert_int_equal(found, 2);
    int st = 0;
    assert_int_equal(waitpid(w, &st, 0), w);
    assert_true(WIFSIGNALED(st) && WTERMSIG(st) == SIGKILL);
    /* The grandchild came to us (subreaper) and was killed too. */
    for (int i = 0; i < 200 && alive(gc); i++)
        usleep(10000);
    assert_false(alive(gc));
    while (waitpid(-1, &st, WNOHANG) > 0) {
    }
    struct stat sb;
    assert_int_not_equal(stat(path, &sb), 0);
    /* A cgroup that is gone, and one that was empty, are no error. */
    assert_int_equal(cgroup_job_kill(cg, "j-1", 1, &found, &err), 0);
    assert_int_equal(found, 0);
    printf("%s: killed %zu processes in %s\n", cgroup_kind_name(kind), (size_t)2, path);

    /* The agent's own process is never killed: a job cgroup holding it is refused (the
     * test moves itself in, then back to the parent's parent, the hierarchy's root here). */
    free(path);
    assert_int_equal(cgroup_job_open(cg, "self", 1, &fd, &path, &err), 0);
    assert_int_equal(write(fd, "0", 1), 1);
    close(fd);
    assert_int_equal(cgroup_job_kill(cg, "self", 1, &found, &err), DDP_EPERM);
    assert_non_null(strstr(err.msg, path));
    char *back = xasprintf("%s/../cgroup.procs", cgroup_parent(cg));
    fd = open(back, O_WRONLY);
    assert_true(fd >= 0);
    assert_int_equal(write(fd, "0", 1), 1);
    close(fd);
    free(back);
    size_t removed = 0;
    assert_int_equal(cgroup_sweep(cg, &removed, &found, &err), 0);
    assert_int_equal(removed, 1);
    assert_int_equal(found, 0);
    const char *parent = cgroup_parent(cg);
    char *keep = xstrdup(parent);
    cgroup_close(cg);
    assert_int_not_equal(stat(keep, &sb), 0);
    free(keep);
    free(path);
    free(work);
}

static void test_cgroup_kill_v2(void **state)
{
    (void)state;
    kill_kind(CGROUP_V2);
}

static void test_cgroup_kill_freezer(void **state)
{
    (void)state;
    kill_kind(CGROUP_FREEZER);
}

static void test_cgroup_kill_pids(void **state)
{
    (void)state;
    kill_kind(CGROUP_PIDS);
}

int main(void)
{
    prctl(PR_SET_CHILD_SUBREAPER, 1);
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cgroup_parse_self),   cmocka_unit_test(test_cgroup_parse_pids),
        cmocka_unit_test(test_cgroup_names),        cmocka_unit_test(test_cgroup_kill_v2),
        cmocka_unit_test(test_cgroup_kill_freezer), cmocka_unit_test(test_cgroup_kill_pids),
    };
    return cmocka_run_group_tests(tests, NULL, NULL);
}
