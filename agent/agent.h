/*
 * agent.h - ddp-agent's loop: register with ddpd, heartbeat with the whole worker state,
 * reconcile against the desired assignments of each answer, run the workers.
 *
 * Threads (all created and joined by agent_run()):
 *   - the calling thread: register and the heartbeat loop (long poll), with its own httpc;
 *   - the I/O thread: reads worker pipes (log lines, metrics), reaps children (signalfd for
 *     SIGCHLD), drives the SIGTERM -> SIGKILL deadlines, and handles SIGTERM/SIGINT;
 *   - the report thread: while the heartbeat thread sits in a long poll, a worker start or
 *     exit is reported at once with a beat of its own (wait_ms 0), on its own httpc.
 * One mutex guards the worker list and the desired set; only the I/O thread closes worker
 * fds and frees workers, so a worker pointer taken under the lock stays valid for it.
 */
#ifndef DDP_AGENT_AGENT_H
#define DDP_AGENT_AGENT_H

#include <jansson.h>

#include "agent/cgroup.h"
#include "agent/usermap.h"

struct agent_config {
    const char *server; /* base URL of ddpd */
    const char *token;  /* agent token, or NULL: read token_file (waiting for it) */
    const char *token_file;
    const char *name;
    const char *address;
    int slots;
    int gpus;                /* GPUs the agent hands out (agent/gpus.h), 0 for none */
    char *const *gpu_ids;    /* their CUDA_VISIBLE_DEVICES ids, gpus of them (borrowed) */
    const char *port_range;  /* "A-B" */
    const char *work_dir;    /* absolute, exists */
    int grace_s;             /* stop grace when an assignment gives none */
    int orphan_timeout_s;    /* no answer from ddpd for this long: stop the running workers
                                (their job cannot be confirmed); 0 = never */
    enum cgroup_kind cgroup; /* the hierarchy for job cgroups; CGROUP_AUTO detects one */
    /* Whose account a job runs as (decided by the caller, never USERMAP_AUTO): PER_USER, its
     * owner's local account from user_map (the agent runs as root); SINGLE_USER, the
     * agent's own user. */
    enum usermap_isolation isolation;
    const struct usermap *user_map; /* --user-map, or NULL: the account of the same name */
    /* The node's labels for ddpd (the --label flags over what main.c detects: cpus,
     * memory_gb, gpus): a JSON object of strings, borrowed; NULL sends none. */
    const json_t *labels;
};

/*
 * Runs the agent until SIGTERM or SIGINT (the caller must have blocked SIGCHLD, SIGTERM and
 * SIGINT in every thread before calling). At start it kills and removes the job cgroups a
 * previous agent of this name left. On SIGTERM/SIGINT it stops every worker (SIGTERM, then
 * SIGKILL after the grace period), kills what is left in their cgroups, reports their exits
 * if ddpd answers, and returns 0.
 * Returns 1 when it cannot start (its threads, the signalfd).
 */
int agent_run(const struct agent_config *cfg);

#endif
