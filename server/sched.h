/*
 * sched.h - gang placement of one job on ready nodes: a pure function, no state, no clock.
 *
 * The caller (coord_sched.c) lists the candidate nodes (READY, with their free slots and the
 * master ports of other live jobs there) and runs jobs through sched_place() in FIFO order,
 * subtracting each placement's slots before the next job.
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
};

struct sched_job {
    int nmin, nmax; /* nodes */
    int nproc;      /* slots needed on each node */
};

/* A placement: idx[0..n) are indexes into the caller's node array, in group-rank order
 * (idx[0] is group rank 0, which serves MASTER_PORT). */
struct sched_placement {
    size_t n;
    size_t *idx; /* caller's buffer of at least min(nmax, nnodes) entries */
    int master_port;
};

/* Places job on up to nmax of the nodes that have nproc free slots, taken in name order.
 * Returns 0 with *out filled (out->idx must point at the caller's buffer), or DDP_EUNAVAIL
 * when fewer than nmin nodes fit or group rank 0 has no free port (then *out is unchanged
 * except its buffer). */
int sched_place(const struct sched_job *job, const struct sched_node *nodes, size_t nnodes,
                struct sched_placement *out);

/* The lowest port of node's range that is neither used nor avoided, or 0 if none. */
int sched_pick_port(const struct sched_node *node);

#endif
