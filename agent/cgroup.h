/*
 * cgroup.h - the container of a job's processes on this node: one cgroup per (job,
 * generation) under a parent cgroup of the agent, so that what a job starts, even a process
 * it detached from its process group with setsid(), is killed with the job.
 *
 * The hierarchies, in the order auto-detection tries them:
 *   - cgroup v2 (/sys/fs/cgroup, or the unified hierarchy of a hybrid node at
 *     /sys/fs/cgroup/unified): killed with cgroup.kill where the kernel has it (5.14), else
 *     like pids below;
 *   - the v1 freezer hierarchy (/sys/fs/cgroup/freezer): frozen, every process SIGKILLed,
 *     thawed, until empty;
 *   - the v1 pids hierarchy (/sys/fs/cgroup/pids): every process SIGKILLed until empty
 *     (a process forking as fast as it is killed is caught by the next rounds, within the
 *     bound);
 *   - none (not root, read-only, nothing mounted): the agent runs as without cgroups, and a
 *     process a job detaches from its process group may outlive the job.
 * The agent's parent is "ddp-agent-<node name>-<hash of the work dir>" under the
 * hierarchy's root, or under the agent's own cgroup where the root is not writable (a
 * delegated systemd unit); a job's cgroup is "job-<job id>-g<generation>" in it. The hash
 * tells apart agents of one name on one machine that belong to different clusters (test
 * clusters, a local cluster beside a real one), so that one agent's start never sweeps
 * another's jobs; an agent restarted with the same name and work dir finds its
 * predecessor's parent.
 *
 * Threads: a struct cgroup does not change after cgroup_open(); every other function only
 * reads it and works on the file system, so any thread may call them. Two threads must not
 * create and kill the same job's cgroup at once (the agent creates under a->mu, and starts
 * no worker while its I/O thread empties a cgroup: worker.c).
 */
#ifndef DDP_AGENT_CGROUP_H
#define DDP_AGENT_CGROUP_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#include "common/err.h"

enum cgroup_kind { CGROUP_NONE, CGROUP_V2, CGROUP_FREEZER, CGROUP_PIDS, CGROUP_AUTO };

#define CGROUP_DRAIN_MS      2000         /* a job cgroup is emptied within this, or an error */
#define CGROUP_PIDS_READ_MAX (256u << 10) /* bytes of one cgroup.procs read */
#define CGROUP_SWEEP_MAX     1024         /* job cgroups (and nested ones) looked at per folder */
#define CGROUP_NEST_MAX      8            /* depth of cgroups a job made inside its own */

/* "v2", "freezer", "pids", "none" or "auto" (a static string). */
const char *cgroup_kind_name(enum cgroup_kind k);
/* Parses --cgroup: auto, v2, freezer, pids, or off/none. 0, or DDP_EINVAL naming s. */
int cgroup_kind_parse(const char *s, enum cgroup_kind *out, struct ddp_err *err);

struct cgroup; /* opaque: the agent's parent cgroup, or none */

/*
 * Finds a hierarchy (want CGROUP_AUTO: the first usable in the order above; else only want;
 * CGROUP_NONE: none) and creates the parent cgroup_parent_name(name, work_dir) there (an
 * existing one is kept: cgroup_sweep() empties it). Never NULL: when no hierarchy is usable
 * the handle's kind is CGROUP_NONE and err says why (each place tried, with its error).
 * Caller frees with cgroup_close().
 */
struct cgroup *cgroup_open(enum cgroup_kind want, const char *name, const char *work_dir,
                           struct ddp_err *err);
/* Removes the parent when it is empty (best effort; a job cgroup left in it stays for the
 * next agent's sweep) and frees cg. Accepts NULL. */
void cgroup_close(struct cgroup *cg);
enum cgroup_kind cgroup_kind_of(const struct cgroup *cg);
/* The parent's absolute path (borrowed from cg), or NULL with CGROUP_NONE. */
const char *cgroup_parent(const struct cgroup *cg);

/* The parent's name: "ddp-agent-<name>-<8 hex digits of FNV-1a of work_dir>". Caller
 * frees. */
char *cgroup_parent_name(const char *name, const char *work_dir);
/* The cgroup name of a job generation, "job-<id>-g<gen>", with every byte of id outside
 * [A-Za-z0-9._-] as '_'. Caller frees. */
char *cgroup_job_name(const char *job_id, int64_t generation);

/*
 * Creates the job's cgroup (an existing one is used) and opens its cgroup.procs for writing
 * (O_CLOEXEC): a process that writes "0" to that fd moves itself in (spawn.c's child does so
 * before exec). Returns 0, *procs_fd (caller closes) and *path (caller frees); or an error
 * naming the path, with nothing to close or free. With CGROUP_NONE: 0, *procs_fd = -1 and
 * *path = NULL.
 */
int cgroup_job_open(const struct cgroup *cg, const char *job_id, int64_t generation, int *procs_fd,
                    char **path, struct ddp_err *err);

/*
 * Kills every process in the job's cgroup (and in cgroups the job made inside it) and removes
 * it, within CGROUP_DRAIN_MS; every loop is bounded in rounds and time. A missing cgroup is
 * no error. *found (may be NULL) gets the most processes seen in it at once (0: it was
 * empty). Returns 0, or an error naming the path: DDP_ETIMEOUT when processes are left at
 * the deadline, DDP_EPERM when the agent itself is in it (nothing is killed then), DDP_EIO
 * when a cgroup file cannot be read or written. With CGROUP_NONE: 0.
 */
int cgroup_job_kill(const struct cgroup *cg, const char *job_id, int64_t generation, size_t *found,
                    struct ddp_err *err);

/*
 * Kills and removes every cgroup in the parent: at start those a previous agent of this name
 * left (it was killed with SIGKILL: the grandchildren of its workers live on under init),
 * at the end what is left. *removed and *found (may be NULL) count the cgroups removed and
 * the processes seen in them. Returns 0, or the first error (the others are still tried).
 */
int cgroup_sweep(const struct cgroup *cg, size_t *removed, size_t *found, struct ddp_err *err);

/* ---- pure parsers (unit-tested) -------------------------------------------------------- */

/*
 * The cgroup path (e.g. "/user.slice/x") of this process in one hierarchy, from the text of
 * /proc/self/cgroup: the "0::" line for CGROUP_V2, else the v1 line whose controller list
 * holds "freezer" or "pids". Returns 0 and *path (caller frees), or DDP_ENOTFOUND.
 */
int cgroup_parse_self(const char *text, enum cgroup_kind kind, char **path);
/*
 * The pids of a cgroup.procs text (one decimal pid a line; other lines are skipped), at most
 * max of them into pids. Returns how many were stored; *more (may be NULL) is 1 when the text
 * held more than max.
 */
size_t cgroup_parse_pids(const char *text, pid_t *pids, size_t max, int *more);

#endif
