/*
 * recon.c - desired assignments vs. workers -> actions (see recon.h for the rules).
 *
 * Invariants: the function reads only its arguments; every have[] entry gets at most one
 * action; a START is never produced for a (job, generation, local rank) that has a worker,
 * running or exited, so an exited worker is never re-spawned.
 * Cost: O(nwant * nhave * nproc) in the worst case; a node runs a few dozen workers.
 */
#include "agent/recon.h"

#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

static void recon_push(struct recon_plan *p, enum recon_op op, size_t index, int local_rank)
{
    XGROW(p->actions, p->n + 1, p->cap, 16);
    p->actions[p->n].op = op;
    p->actions[p->n].index = index;
    p->actions[p->n].local_rank = local_rank;
    p->n++;
}

/* Index of the first want with this (job, generation), or nwant. */
static size_t recon_find_want(const struct recon_want *want, size_t nwant, const char *job_id,
                              int64_t generation)
{
    for (size_t i = 0; i < nwant; i++)
        if (want[i].generation == generation && strcmp(want[i].job_id, job_id) == 0)
            return i;
    return nwant;
}

static int recon_is_desired(const struct recon_want *want, size_t nwant, const struct recon_have *h)
{
    size_t i = recon_find_want(want, nwant, h->job_id, h->generation);
    return i < nwant && h->local_rank >= 0 && h->local_rank < want[i].nproc;
}

void recon_compute(const struct recon_want *want, size_t nwant, const struct recon_have *have,
                   size_t nhave, int allow_start, struct recon_plan *plan)
{
    for (size_t h = 0; h < nhave; h++) {
        if (recon_is_desired(want, nwant, &have[h]))
            continue;
        if (!have[h].running)
            recon_push(plan, RECON_FORGET, h, have[h].local_rank);
        else if (!have[h].stopping)
            recon_push(plan, RECON_STOP, h, have[h].local_rank);
    }
    if (!allow_start)
        return;
    for (size_t w = 0; w < nwant; w++) {
        if (recon_find_want(want, nwant, want[w].job_id, want[w].generation) != w)
            continue; /* a duplicate: the first one counts */
        int older_runs = 0;
        for (size_t h = 0; h < nhave && !older_runs; h++)
            older_runs = have[h].running && have[h].generation != want[w].generation &&
                         strcmp(have[h].job_id, want[w].job_id) == 0;
        if (older_runs)
            continue;
        for (int lr = 0; lr < want[w].nproc; lr++) {
            int found = 0;
            for (size_t h = 0; h < nhave && !found; h++)
                found = have[h].local_rank == lr && have[h].generation == want[w].generation &&
                        strcmp(have[h].job_id, want[w].job_id) == 0;
            if (!found)
                recon_push(plan, RECON_START, w, lr);
        }
    }
}

void recon_plan_release(struct recon_plan *plan)
{
    if (!plan)
        return;
    free(plan->actions);
    memset(plan, 0, sizeof(*plan));
}
