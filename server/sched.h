/*
 * sched.h - gang placement of one job on ready nodes: a pure function, no state, no clock.
 *
 * The caller (coord_sched.c) lists the candidate nodes (READY, with their free slots and GPUs
 * and the master ports of other live jobs there) and runs jobs through sched_place() in queue
 * order, subtracting each placement's slots and GPUs before the next job.
 *
 * GPUs: a node with gpus > 0 gives each worker of a job sched_gpus_per_proc() of them, so
 * it holds a job's nproc workers when it has nproc free slots and nproc times that many free
 * GPUs; a node without GPUs takes only jobs that ask for none (gpus_per_proc 0 or auto).
 */
#ifndef DDP_SERVER_SCHED_H
#define DDP_SERVER_SCHED_H

#include <stddef.h>

struct sched_node {
    const char *name; /* borrowed; placement order is by name (strcmp) */
    int free_slots;
    int port_lo, port_hi;  /* the node's worker port range */
    const int *used_ports; /* borrowed: MASTER_PORTs of other live jobs on this node */
    size_t nused;
    int avoid_port; /* the port this job's previous generation used here, or 0 */
    int gpus;       /* GPUs the node's agent hands out; 0 = a node without GPUs */
    int free_gpus;  /* of those, not held by live jobs */
};

/* gpus_per_proc of a job spec that did not say: 1 on a node with GPUs, 0 on one without. */
#define SCHED_GPUS_AUTO (-1)

struct sched_job {
    int nmin, nmax;    /* nodes */
    int nproc;         /* slots needed on each node */
    int gpus_per_proc; /* GPUs per worker, 0..64, or SCHED_GPUS_AUTO */
};

/* The GPUs one worker of a job asking gpus_per_proc (0..64 or SCHED_GPUS_AUTO) gets on a node
 * with node_gpus GPUs: auto is 1 there, and nothing on a node without GPUs. */
int sched_gpus_per_proc(int gpus_per_proc, int node_gpus);

/* 1 when node can hold job's nproc workers now (free slots, and free GPUs on a GPU node;
 * never a node without GPUs for gpus_per_proc > 0), else 0. */
int sched_node_fits(const struct sched_job *job, const struct sched_node *node);

/* A placement: idx[0..n) are indexes into the caller's node array, in group-rank order
 * (idx[0] is group rank 0, which serves MASTER_PORT). */
struct sched_placement {
    size_t n;
    size_t *idx; /* caller's buffer of at least min(nmax, nnodes) entries */
    int master_port;
};

/* The indexes of nodes[0..nnodes) in name order (a NULL name as ""), for sched_place():
 * sorted once per pass, not once per job. The caller frees it. */
size_t *sched_by_name(const struct sched_node *nodes, size_t nnodes);

/* Places job on up to nmax of the nodes that fit it (sched_node_fits), taken in name order
 * (by_name from sched_by_name(), or NULL: sorted here), except that group rank 0 is the
 * first fitting node by name with a free master port (sched_pick_port(); its avoid_port only
 * when no fitting node has another), the others following in name order.
 * Returns 0 with *out filled (out->idx must point at the caller's buffer), or DDP_EUNAVAIL
 * when fewer than nmin nodes fit or none of them has a free port (then *out is unchanged
 * except its buffer). O(nnodes) with by_name. */
int sched_place(const struct sched_job *job, const struct sched_node *nodes, size_t nnodes,
                const size_t *by_name, struct sched_placement *out);

/* Quotas of a job's owner: its own and its group's (max 0 = no limit), and the slots their
 * live jobs hold now (held ones of this job not included). */
struct sched_quota {
    long long user_max, user_held;
    long long group_max, group_held;
};

enum { SCHED_QUOTA_NONE = 0, SCHED_QUOTA_USER = 1, SCHED_QUOTA_GROUP = 2 };

/* The most nodes (nproc slots each, nproc >= 1) a job may take, at most nmax, so that neither
 * its owner's slots nor its group's pass their quota: min(nmax, (max - held) / nproc of each
 * quota set), never below 0. *bound (may be NULL) says which quota gave the result when it is
 * below nmax: SCHED_QUOTA_USER, SCHED_QUOTA_GROUP (the group's when both give the same), or
 * SCHED_QUOTA_NONE. A pure function. */
int sched_quota_nodes(const struct sched_quota *q, int nproc, int nmax, int *bound);

/* The lowest port of node's range that is neither used nor avoided, or 0 if none. */
int sched_pick_port(const struct sched_node *node);

#endif
