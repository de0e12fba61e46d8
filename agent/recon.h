/*
 * recon.h - the agent's reconcile step as a pure function: the desired assignments of the
 * last applied heartbeat answer against the workers the agent has, giving the actions that
 * bring the second towards the first. No I/O, no clock: the caller applies the actions.
 *
 * Rules (docs/api.md, "Nodes"):
 *   - a desired (job, generation) whose local rank has no worker gets RECON_START, unless
 *     starts are not allowed (agent shutting down) or a worker of another generation of the
 *     same job still runs here (it holds the job's ports, devices and checkpoint files;
 *     the start comes at a later reconcile, once it is gone);
 *   - a running worker whose (job, generation, local rank) is not desired gets RECON_STOP,
 *     once (a worker already stopping gets nothing);
 *   - an exited worker whose assignment is not desired gets RECON_FORGET;
 *   - an exited worker of a still-desired assignment gets nothing: it is never re-spawned,
 *     and it keeps being reported until its assignment leaves the set.
 * A (job, generation) listed twice in the desired set counts once (the first).
 */
#ifndef DDP_AGENT_RECON_H
#define DDP_AGENT_RECON_H

#include <stddef.h>
#include <stdint.h>

struct recon_want {
    const char *job_id; /* borrowed */
    int64_t generation;
    int nproc; /* local ranks 0..nproc-1 are desired */
};

struct recon_have {
    const char *job_id; /* borrowed */
    int64_t generation;
    int local_rank;
    int running;  /* 1 until the worker has been reaped */
    int stopping; /* 1 once a stop was sent */
};

enum recon_op { RECON_START, RECON_STOP, RECON_FORGET };

struct recon_action {
    enum recon_op op;
    size_t index;   /* into want[] for RECON_START, into have[] otherwise */
    int local_rank; /* for RECON_START */
};

/* A list of actions; the caller owns it (recon_plan_release). */
struct recon_plan {
    struct recon_action *actions;
    size_t n;
    size_t cap;
};

/*
 * Fills plan (which must be zeroed or released before) with the actions, in this order:
 * every STOP and FORGET in have[] order, then every START in want[] order and local rank
 * order. allow_start = 0 suppresses the starts.
 */
void recon_compute(const struct recon_want *want, size_t nwant, const struct recon_have *have,
                   size_t nhave, int allow_start, struct recon_plan *plan);

void recon_plan_release(struct recon_plan *plan);

#endif
