/*
 * assign.h - one assignment of the agent protocol (docs/api.md, "Nodes"): what ddpd wants a
 * node to run for one (job, generation). Parsed from a heartbeat answer; the agent keeps the
 * whole desired set as an array of these and replaces it on every applied answer.
 */
#ifndef DDP_AGENT_ASSIGN_H
#define DDP_AGENT_ASSIGN_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct assign {
    char *job_id;
    int64_t generation;
    char *run_id;
    char **argv; /* NULL-terminated, argc entries */
    size_t argc;
    char **env_keys; /* the job's env, nenv pairs in the answer's order */
    char **env_vals;
    size_t nenv;
    char *workdir;        /* "" = the job's own folder, <work dir>/jobs/<job> */
    char *checkpoint_dir; /* "" = <work-dir>/jobs/<job>/ckpt */
    int grace_period_s;   /* -1 when the answer gave none */
    int group_rank;
    int group_world_size;
    int nproc_per_node;
    int world_size;
    char *master_addr;
    int master_port;
    int restart_count;
    int max_restarts;
    char *job_token;
    char *owner;       /* the job's owner, a ddp user name; "" when ddpd did not say (older ddpd) */
    int preempt_signo; /* the job's preemption notice signal (SIGUSR1 when not said) */
    int preempt_grace_s; /* from the notice to the stop (30 when not said) */
    int gpus_per_proc;   /* GPUs each worker gets here, 0..64; -1 when ddpd did not say (an
                          * older ddpd): then 1 on a node with GPUs */
};

/*
 * Parses one assignment object. Unknown fields are ignored (newer ddpd); missing required
 * fields, wrong types and out-of-range values fail with DDP_EINVAL and a message naming the
 * field. On success *out holds copies (release with assign_release()); on failure *out is
 * left zeroed.
 */
int assign_parse(const json_t *obj, struct assign *out, struct ddp_err *err);

/* Frees what assign_parse() stored; accepts a zeroed or NULL struct. */
void assign_release(struct assign *a);

/* Global rank of local_rank in this assignment (group_rank * nproc_per_node + local_rank). */
int assign_rank(const struct assign *a, int local_rank);

#endif
