/*
 * cgroup.c - a cgroup per job generation: detection of the hierarchy, the agent's parent,
 * placing workers, and killing what a job leaves (see cgroup.h for the hierarchies).
 *
 * Invariants:
 *   1. Every loop is bounded in rounds and in time (CGROUP_DRAIN_MS for one job cgroup),
 *      and every folder listing in entries (CGROUP_SWEEP_MAX) and depth (CGROUP_NEST_MAX).
 *   2. Nothing is killed in a cgroup that holds the agent itself.
 *   3. A job cgroup is removed only once it is empty; one that cannot be emptied in time is
 *      left for the next sweep (at the agent's end, or the next agent's start), and named in
 *      the error.
 */
#include "agent/cgroup.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/statfs.h>
#include <unistd.h>
#include <linux/magic.h>

#include "common/buf.h"
#include "common/fsutil.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

#define CGROUP_FREEZE_WAIT_MS 500 /* FREEZING -> FROZEN, at most */
#define CGROUP_ROUND_PIDS     4096

struct cgroup {
    enum cgroup_kind kind;
    char *parent;
    int has_kill; /* v2: cgroup.kill exists */
};

const char *cgroup_kind_name(enum cgroup_kind k)
{
    switch (k) {
    case CGROUP_V2:
        return "v2";
    case CGROUP_FREEZER:
        return "freezer";
    case CGROUP_PIDS:
        return "pids";
    case CGROUP_AUTO:
        return "auto";
    case CGROUP_NONE:
        break;
    }
    return "none";
}

int cgroup_kind_parse(const char *s, enum cgroup_kind *out, struct ddp_err *err)
{
    static const struct {
        const char *name;
        enum cgroup_kind kind;
    } names[] = {{"auto", CGROUP_AUTO}, {"v2", CGROUP_V2},    {"freezer", CGROUP_FREEZER},
                 {"pids", CGROUP_PIDS}, {"off", CGROUP_NONE}, {"none", CGROUP_NONE}};
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        if (strcmp(s, names[i].name) == 0) {
            *out = names[i].kind;
            return 0;
        }
    }
    return err_set(err, DDP_EINVAL, "--cgroup: '%s' is not one of auto, v2, freezer, pids, off", s);
}

/* ---- pure parsers --------------------------------------------------------------------- */

/* 1 when the comma-separated list [s, s + n) holds word. */
static int cgroup_list_has(const char *s, size_t n, const char *word)
{
    size_t wl = strlen(word);
    const char *end = s + n;
    while (s < end) {
        const char *comma = memchr(s, ',', (size_t)(end - s));
        size_t len = comma ? (size_t)(comma - s) : (size_t)(end - s);
        if (len == wl && memcmp(s, word, wl) == 0)
            return 1;
        s += len + 1;
    }
    return 0;
}

int cgroup_parse_self(const char *text, enum cgroup_kind kind, char **path)
{
    const char *want = kind == CGROUP_FREEZER ? "freezer" : kind == CGROUP_PIDS ? "pids" : NULL;
    if (kind != CGROUP_V2 && !want)
        return DDP_ENOTFOUND;
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        /* "ID:CONTROLLERS:PATH" */
        const char *c1 = memchr(line, ':', len);
        const char *c2 = c1 ? memchr(c1 + 1, ':', len - (size_t)(c1 + 1 - line)) : NULL;
        if (c2) {
            size_t clen = (size_t)(c2 - c1 - 1);
            int hit = kind == CGROUP_V2 ? (c1 - line == 1 && line[0] == '0' && clen == 0)
                                        : cgroup_list_has(c1 + 1, clen, want);
            size_t plen = len - (size_t)(c2 + 1 - line);
            if (hit && plen > 0 && c2[1] == '/') {
                *path = xstrndup(c2 + 1, plen);
                return 0;
            }
        }
        line = nl ? nl + 1 : NULL;
    }
    return DDP_ENOTFOUND;
}

size_t cgroup_parse_pids(const char *text, pid_t *pids, size_t max, int *more)
{
    size_t n = 0;
    if (more)
        *more = 0;
    for (const char *line = text; line && *line;) {
        const char *nl = strchr(line, '\n');
        size_t len = nl ? (size_t)(nl - line) : strlen(line);
        long long v = 0;
        size_t i = 0;
        while (i < len && line[i] >= '0' && line[i] <= '9' && v <= 1000000000LL)
            v = v * 10 + (line[i++] - '0');
        if (i > 0 && i == len && v > 0 && v <= 0x7fffffffLL) {
            if (n == max) {
                if (more)
                    *more = 1;
                break;
            }
            pids[n++] = (pid_t)v;
        }
        line = nl ? nl + 1 : NULL;
    }
    return n;
}

char *cgroup_parent_name(const char *name, const char *work_dir)
{
    uint32_t h = 2166136261u;
    for (const unsigned char *p = (const unsigned char *)work_dir; *p; p++)
        h = (h ^ *p) * 16777619u;
    return xasprintf("ddp-agent-%s-%08x", name, (unsigned)h);
}

char *cgroup_job_name(const char *job_id, int64_t generation)
{
    char *name = xasprintf("job-%s-g%lld", job_id, (long long)generation);
    for (char *p = name + 4; *p; p++) {
        int ok = (*p >= 'a' && *p <= 'z') || (*p >= 'A' && *p <= 'Z') || (*p >= '0' && *p <= '9') ||
                 *p == '.' || *p == '_' || *p == '-';
        if (!ok)
            *p = '_';
    }
    return name;
}

/* ---- small file helpers --------------------------------------------------------------- */

/* Writes text to path (a cgroup control file). 0, or DDP_EIO naming path. */
static int cgroup_write(const char *path, const char *text, struct ddp_err *err)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return err_set(err, DDP_EIO, "open %s: %s", path, strerror(errno));
    size_t len = strlen(text);
    ssize_t r;
    do
        r = write(fd, text, len);
    while (r < 0 && errno == EINTR);
    int e = errno;
    close(fd);
    if (r != (ssize_t)len)
        return err_set(err, DDP_EIO, "write '%s' to %s: %s", text, path,
                       r < 0 ? strerror(e) : "short write");
    return 0;
}

static int cgroup_file_exists(const char *dir, const char *file)
{
    char *p = xasprintf("%s/%s", dir, file);
    int ok = access(p, F_OK) == 0;
    free(p);
    return ok;
}

/* The pids in dir/cgroup.procs (at most CGROUP_ROUND_PIDS). 0 and *n, or an error naming
 * the file; a cgroup that is gone reads as empty. */
static int cgroup_read_pids(const char *dir, pid_t *pids, size_t *n, struct ddp_err *err)
{
    char *path = xasprintf("%s/cgroup.procs", dir);
    char *text = NULL;
    int rc = fs_read_all(path, CGROUP_PIDS_READ_MAX, &text, NULL, err);
    if (rc == DDP_ENOTFOUND) {
        *n = 0;
        rc = 0;
    } else if (rc == 0) {
        *n = cgroup_parse_pids(text, pids, CGROUP_ROUND_PIDS, NULL);
    }
    free(text);
    free(path);
    return rc;
}

/* ---- opening: detection and the parent ------------------------------------------------ */

/* 1 when mnt is the root of a mounted hierarchy of kind. */
static int cgroup_is_mount(const char *mnt, enum cgroup_kind kind)
{
    struct statfs sf;
    if (statfs(mnt, &sf) != 0)
        return 0;
    if (kind == CGROUP_V2)
        return sf.f_type == CGROUP2_SUPER_MAGIC && cgroup_file_exists(mnt, "cgroup.controllers");
    return sf.f_type == CGROUP_SUPER_MAGIC;
}

/* Creates dir (kept when it exists) and checks that it is a cgroup of kind whose
 * cgroup.procs the agent may write. 0, or an error naming dir. */
static int cgroup_make_parent(const char *dir, enum cgroup_kind kind, struct ddp_err *err)
{
    if (mkdir(dir, 0755) != 0 && errno != EEXIST)
        return err_set(err, DDP_EPERM, "mkdir %s: %s", dir, strerror(errno));
    const char *marker = kind == CGROUP_FREEZER ? "freezer.state"
                         : kind == CGROUP_PIDS  ? "pids.max"
                                                : "cgroup.procs";
    if (!cgroup_file_exists(dir, marker)) {
        int rc = err_set(err, DDP_EPRECOND, "%s has no %s (not a %s cgroup)", dir, marker,
                         cgroup_kind_name(kind));
        if (rmdir(dir) != 0 && errno != ENOENT)
            rc = err_set(err, DDP_EPRECOND, "%s has no %s (not a %s cgroup), rmdir: %s", dir,
                         marker, cgroup_kind_name(kind), strerror(errno));
        return rc;
    }
    char *procs = xasprintf("%s/cgroup.procs", dir);
    int rc = 0;
    if (access(procs, W_OK) != 0)
        rc = err_set(err, DDP_EPERM, "%s: %s", procs, strerror(errno));
    free(procs);
    return rc;
}

/* Tries the parent under mnt's root, then under the agent's own cgroup in that hierarchy.
 * 0 and *parent (caller frees), or why not appended to why. */
static int cgroup_try_mount(const char *mnt, enum cgroup_kind kind, const char *pname,
                            char **parent, struct buf *why)
{
    if (!cgroup_is_mount(mnt, kind)) {
        buf_printf(why, "%s%s: no %s hierarchy mounted", why->len ? "; " : "", mnt,
                   cgroup_kind_name(kind));
        return -1;
    }
    struct ddp_err e;
    err_clear(&e);
    char *dir = xasprintf("%s/%s", mnt, pname);
    if (cgroup_make_parent(dir, kind, &e) == 0) {
        *parent = dir;
        return 0;
    }
    buf_printf(why, "%s%s", why->len ? "; " : "", e.msg);
    free(dir);
    char *text = NULL, *self = NULL;
    int rc = -1;
    if (fs_read_all("/proc/self/cgroup", 1 << 16, &text, NULL, &e) != 0 ||
        cgroup_parse_self(text, kind, &self) != 0 || strcmp(self, "/") == 0)
        goto out;
    dir = xasprintf("%s%s/%s", mnt, self, pname);
    err_clear(&e);
    if (cgroup_make_parent(dir, kind, &e) == 0) {
        *parent = dir;
        rc = 0;
        goto out;
    }
    buf_printf(why, "; %s", e.msg);
    free(dir);
out:
    free(text);
    free(self);
    return rc;
}

struct cgroup *cgroup_open(enum cgroup_kind want, const char *name, const char *work_dir,
                           struct ddp_err *err)
{
    static const struct {
        const char *mnt;
        enum cgroup_kind kind;
    } places[] = {{"/sys/fs/cgroup", CGROUP_V2},
                  {"/sys/fs/cgroup/unified", CGROUP_V2},
                  {"/sys/fs/cgroup/freezer", CGROUP_FREEZER},
                  {"/sys/fs/cgroup/pids", CGROUP_PIDS}};
    struct cgroup *cg = xcalloc(1, sizeof(*cg));
    char *pname = cgroup_parent_name(name, work_dir);
    struct buf why;
    buf_init_max(&why, DDP_ERR_MSG_MAX);
    if (want == CGROUP_NONE) {
        err_set(err, DDP_EPRECOND, "turned off (--cgroup off)");
        goto out;
    }
    for (size_t i = 0; i < sizeof(places) / sizeof(places[0]); i++) {
        if (want != CGROUP_AUTO && places[i].kind != want)
            continue;
        if (cgroup_try_mount(places[i].mnt, places[i].kind, pname, &cg->parent, &why) == 0) {
            cg->kind = places[i].kind;
            cg->has_kill = cg->kind == CGROUP_V2 && cgroup_file_exists(cg->parent, "cgroup.kill");
            goto out;
        }
    }
    err_set(err, DDP_EPRECOND, "%s", why.len ? why.data : "no cgroup hierarchy found");
out:
    buf_release(&why);
    free(pname);
    return cg;
}

void cgroup_close(struct cgroup *cg)
{
    if (!cg)
        return;
    if (cg->parent)
        rmdir(cg->parent); /* best effort: a job cgroup left in it waits for the next sweep */
    free(cg->parent);
    free(cg);
}

enum cgroup_kind cgroup_kind_of(const struct cgroup *cg)
{
    return cg ? cg->kind : CGROUP_NONE;
}

const char *cgroup_parent(const struct cgroup *cg)
{
    return cg ? cg->parent : NULL;
}

/* ---- placing -------------------------------------------------------------------------- */

int cgroup_job_open(const struct cgroup *cg, const char *job_id, int64_t generation, int *procs_fd,
                    char **path, struct ddp_err *err)
{
    if (!cg || cg->kind == CGROUP_NONE) {
        *procs_fd = -1;
        *path = NULL;
        return 0;
    }
    char *name = cgroup_job_name(job_id, generation);
    char *dir = xasprintf("%s/%s", cg->parent, name);
    char *procs = xasprintf("%s/cgroup.procs", dir);
    int rc = 0;
    free(name);
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) {
        rc = err_set(err, DDP_EIO, "mkdir %s: %s", dir, strerror(errno));
        goto out;
    }
    int fd = open(procs, O_WRONLY | O_CLOEXEC);
    if (fd < 0) {
        rc = err_set(err, DDP_EIO, "open %s: %s", procs, strerror(errno));
        goto out;
    }
    *procs_fd = fd;
    *path = dir;
    dir = NULL;
out:
    free(procs);
    free(dir);
    return rc;
}

/* ---- killing -------------------------------------------------------------------------- */

/* Freezes (frozen 1) or thaws (0) a v1 freezer cgroup; freezing waits, bounded, until the
 * state reads FROZEN. 0, or an error naming the file. */
static int cgroup_freeze(const char *dir, int frozen, int64_t deadline, struct ddp_err *err)
{
    char *state = xasprintf("%s/freezer.state", dir);
    int rc = cgroup_write(state, frozen ? "FROZEN" : "THAWED", err);
    if (rc < 0 || !frozen)
        goto out;
    int64_t until = time_deadline_min(deadline, time_deadline_ms(CGROUP_FREEZE_WAIT_MS));
    for (int round = 0; round < 1000; round++) {
        char *text = NULL;
        rc = fs_read_all(state, 64, &text, NULL, err);
        int done = rc == 0 && strncmp(text, "FROZEN", 6) == 0;
        free(text);
        if (rc < 0 || done)
            goto out;
        if (time_left_ms(until) == 0)
            break;
        time_sleep_ms(2);
    }
    rc = err_set(err, DDP_ETIMEOUT, "%s: not FROZEN after %d ms", state, CGROUP_FREEZE_WAIT_MS);
out:
    free(state);
    return rc;
}

/* One round of killing every process in dir. 0, or an error naming the file. */
static int cgroup_kill_round(const struct cgroup *cg, const char *dir, int64_t deadline,
                             struct ddp_err *err)
{
    int rc = 0;
    if (cg->kind == CGROUP_V2 && cg->has_kill) {
        char *kill_file = xasprintf("%s/cgroup.kill", dir);
        rc = cgroup_write(kill_file, "1", err);
        free(kill_file);
        return rc;
    }
    int frozen = 0;
    if (cg->kind == CGROUP_FREEZER) {
        /* A frozen cgroup cannot fork: the list read now is the whole of it. A process that
         * did not freeze in time is still killed, and the next round looks again. */
        struct ddp_err fe;
        err_clear(&fe);
        if (cgroup_freeze(dir, 1, deadline, &fe) < 0 && fe.code != DDP_ETIMEOUT) {
            *err = fe;
            return fe.code;
        }
        frozen = 1; /* FROZEN was written: thaw below either way */
    }
    pid_t *pids = xcalloc(CGROUP_ROUND_PIDS, sizeof(*pids));
    size_t n = 0;
    rc = cgroup_read_pids(dir, pids, &n, err);
    pid_t self = getpid();
    for (size_t i = 0; rc == 0 && i < n; i++)
        if (pids[i] != self && kill(pids[i], SIGKILL) != 0 && errno != ESRCH)
            rc = err_set(err, DDP_EPERM, "%s: kill %d: %s", dir, (int)pids[i], strerror(errno));
    free(pids);
    if (frozen) {
        struct ddp_err te;
        err_clear(&te);
        if (cgroup_freeze(dir, 0, deadline, &te) < 0 && rc == 0) {
            *err = te;
            rc = te.code;
        }
    }
    return rc;
}

/* 1 when pid is among the n pids. */
static int cgroup_pids_hold(const pid_t *pids, size_t n, pid_t pid)
{
    for (size_t i = 0; i < n; i++)
        if (pids[i] == pid)
            return 1;
    return 0;
}

static int cgroup_drain(const struct cgroup *cg, const char *dir, int depth, int64_t deadline,
                        size_t *found, struct ddp_err *err);

/* Drains the cgroups inside dir (those a job made in its own, or the job cgroups in the
 * parent), all by deadline, or (deadline 0) each within CGROUP_DRAIN_MS of its own. 0, or the
 * first error. */
static int cgroup_drain_children(const struct cgroup *cg, const char *dir, int depth,
                                 int64_t deadline, size_t *found, size_t *removed,
                                 struct ddp_err *err)
{
    DIR *d = opendir(dir);
    if (!d) {
        if (errno == ENOENT)
            return 0;
        return err_set(err, DDP_EIO, "opendir %s: %s", dir, strerror(errno));
    }
    int rc = 0;
    for (int i = 0; i < CGROUP_SWEEP_MAX; i++) {
        errno = 0;
        struct dirent *de = readdir(d);
        if (!de)
            break;
        if (de->d_type != DT_DIR || strcmp(de->d_name, ".") == 0 || strcmp(de->d_name, "..") == 0)
            continue;
        char *sub = xasprintf("%s/%s", dir, de->d_name);
        size_t f = 0;
        struct ddp_err e;
        err_clear(&e);
        int64_t until = deadline ? deadline : time_deadline_ms(CGROUP_DRAIN_MS);
        int r = cgroup_drain(cg, sub, depth + 1, until, &f, &e);
        *found += f;
        if (r == 0 && removed)
            (*removed)++;
        if (r < 0 && rc == 0) {
            *err = e;
            rc = r;
        }
        free(sub);
    }
    closedir(d);
    return rc;
}

/* Kills everything in dir and below, then removes dir; bounded by deadline. */
static int cgroup_drain(const struct cgroup *cg, const char *dir, int depth, int64_t deadline,
                        size_t *found, struct ddp_err *err)
{
    if (depth > CGROUP_NEST_MAX)
        return err_set(err, DDP_ETOOBIG, "%s: cgroups nested deeper than %d", dir, CGROUP_NEST_MAX);
    size_t below = 0;
    int rc = cgroup_drain_children(cg, dir, depth, deadline, &below, NULL, err);
    pid_t *pids = xcalloc(CGROUP_ROUND_PIDS, sizeof(*pids));
    size_t most = 0;
    if (rc < 0)
        goto out;
    for (int round = 0; round < 400; round++) {
        size_t n = 0;
        rc = cgroup_read_pids(dir, pids, &n, err);
        if (rc < 0)
            goto out;
        if (n > most)
            most = n;
        if (n == 0) {
            if (rmdir(dir) == 0 || errno == ENOENT)
                goto out;
            if (errno != EBUSY) {
                rc = err_set(err, DDP_EIO, "rmdir %s: %s", dir, strerror(errno));
                goto out;
            }
        } else if (cgroup_pids_hold(pids, n, getpid())) {
            rc = err_set(err, DDP_EPERM, "%s holds the agent itself: nothing killed", dir);
            goto out;
        } else if ((rc = cgroup_kill_round(cg, dir, deadline, err)) < 0) {
            goto out;
        }
        if (time_left_ms(deadline) == 0)
            break;
        time_sleep_ms(round < 10 ? 1 : 10);
    }
    rc = err_set(err, DDP_ETIMEOUT, "%s: %zu processes still in it after %d ms", dir, most,
                 CGROUP_DRAIN_MS);
out:
    *found = most + below;
    free(pids);
    return rc;
}

int cgroup_job_kill(const struct cgroup *cg, const char *job_id, int64_t generation, size_t *found,
                    struct ddp_err *err)
{
    size_t f = 0;
    if (!cg || cg->kind == CGROUP_NONE) {
        if (found)
            *found = 0;
        return 0;
    }
    char *name = cgroup_job_name(job_id, generation);
    char *dir = xasprintf("%s/%s", cg->parent, name);
    int rc = cgroup_drain(cg, dir, 0, time_deadline_ms(CGROUP_DRAIN_MS), &f, err);
    if (found)
        *found = f;
    free(name);
    free(dir);
    return rc;
}

int cgroup_sweep(const struct cgroup *cg, size_t *removed, size_t *found, struct ddp_err *err)
{
    size_t r = 0, f = 0;
    int rc = 0;
    if (cg && cg->kind != CGROUP_NONE)
        rc = cgroup_drain_children(cg, cg->parent, 0, 0, &f, &r, err);
    if (removed)
        *removed = r;
    if (found)
        *found = f;
    return rc;
}
