/*
 * sched.c - gang scheduling of one job as a pure function over (job, candidate nodes).
 *
 * Rules (docs/ddpd.md):
 *   1. A node is usable when it has at least nproc_per_node free slots and, when it has GPUs,
 *      nproc_per_node x gpus_per_proc free GPUs (auto: 1 per worker there). A node without
 *      GPUs is never usable for a job with gpus_per_proc > 0.
 *   2. Usable nodes are taken in name order, at most MAX of them; fewer than MIN means no
 *      placement at all (gang: all or nothing).
 *   3. Node ranks follow that order; group rank 0 serves MASTER_PORT, the lowest port of its
 *      range that no other live job uses on it and that is not the port this job's
 *      previous generation used there.
 *   4. Quotas (sched_quota_nodes): a job takes at most the nodes that keep its owner's slots
 *      and its owner's group's slots within their max_slots; below MIN it waits.
 * Invariant: the result depends only on the inputs (no clock, no randomness).
 */
#include "server/sched.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/xalloc.h"

int sched_pick_port(const struct sched_node *node)
{
    for (int p = node->port_lo; p > 0 && p <= node->port_hi; p++) {
        if (p == node->avoid_port)
            continue;
        int used = 0;
        for (size_t i = 0; i < node->nused; i++)
            if (node->used_ports[i] == p) {
                used = 1;
                break;
            }
        if (!used)
            return p;
    }
    return 0;
}

int sched_quota_nodes(const struct sched_quota *q, int nproc, int nmax, int *bound)
{
    long long n = nmax;
    int by = SCHED_QUOTA_NONE;
    if (nproc < 1)
        nproc = 1;
    if (q->user_max > 0) {
        long long left = q->user_max - q->user_held;
        long long fit = left > 0 ? left / nproc : 0;
        if (fit < n) {
            n = fit;
            by = SCHED_QUOTA_USER;
        }
    }
    if (q->group_max > 0) {
        long long left = q->group_max - q->group_held;
        long long fit = left > 0 ? left / nproc : 0;
        if (fit <= n && fit < nmax) {
            n = fit;
            by = SCHED_QUOTA_GROUP;
        }
    }
    if (bound)
        *bound = by;
    return (int)n;
}

int sched_gpus_per_proc(int gpus_per_proc, int node_gpus)
{
    if (node_gpus <= 0)
        return 0;
    return gpus_per_proc == SCHED_GPUS_AUTO ? 1 : gpus_per_proc;
}

int sched_node_fits(const struct sched_job *job, const struct sched_node *node)
{
    if (node->free_slots < job->nproc)
        return 0;
    if (node->gpus <= 0)
        return job->gpus_per_proc <= 0;
    int64_t need = (int64_t)job->nproc * sched_gpus_per_proc(job->gpus_per_proc, node->gpus);
    return node->free_gpus >= need;
}

struct sched_named {
    const char *name;
    size_t idx;
};

static int sched_named_cmp(const void *pa, const void *pb)
{
    const struct sched_named *a = pa, *b = pb;
    int c = strcmp(a->name, b->name);
    return c ? c : (a->idx > b->idx) - (a->idx < b->idx);
}

size_t *sched_by_name(const struct sched_node *nodes, size_t nnodes)
{
    struct sched_named *v = xcalloc(nnodes + 1, sizeof(*v));
    for (size_t i = 0; i < nnodes; i++) {
        v[i].name = nodes[i].name ? nodes[i].name : "";
        v[i].idx = i;
    }
    qsort(v, nnodes, sizeof(*v), sched_named_cmp);
    size_t *order = xcalloc(nnodes + 1, sizeof(*order));
    for (size_t i = 0; i < nnodes; i++)
        order[i] = v[i].idx;
    free(v);
    return order;
}

/* The port group rank 0 serves on node: sched_pick_port(), or with ignore_avoid its
 * avoid_port too (the previous generation's port when it is the only one left: better than
 * no start at all). */
static int sched_port_on(const struct sched_node *node, int ignore_avoid)
{
    if (!ignore_avoid)
        return sched_pick_port(node);
    struct sched_node n = *node;
    n.avoid_port = 0;
    return sched_pick_port(&n);
}

int sched_place(const struct sched_job *job, const struct sched_node *nodes, size_t nnodes,
                const size_t *by_name, struct sched_placement *out)
{
    if (job->nmin < 1 || job->nmax < job->nmin || job->nproc < 1 ||
        job->gpus_per_proc < SCHED_GPUS_AUTO)
        return DDP_EINVAL;
    /* count first: a job that does not fit costs one pass over the nodes, no sort */
    size_t fit = 0;
    for (size_t i = 0; i < nnodes && fit < (size_t)job->nmin; i++)
        fit += (size_t)sched_node_fits(job, &nodes[i]);
    if (fit < (size_t)job->nmin)
        return DDP_EUNAVAIL;
    size_t *sorted = by_name ? NULL : sched_by_name(nodes, nnodes);
    const size_t *order = by_name ? by_name : sorted;
    /* group rank 0 (MASTER_PORT): the first fitting node by name with a free port (any of
     * them, not only of the first MAX); then the others in name order */
    int port = 0;
    size_t r0 = nnodes;
    for (int ignore_avoid = 0; ignore_avoid < 2 && !port; ignore_avoid++)
        for (size_t i = 0; i < nnodes && !port; i++)
            if (sched_node_fits(job, &nodes[order[i]]) &&
                (port = sched_port_on(&nodes[order[i]], ignore_avoid)) != 0)
                r0 = order[i];
    if (port) { /* placed: straight into the caller's buffer (>= min(nmax, nnodes)) */
        size_t n = 0;
        out->idx[n++] = r0;
        for (size_t i = 0; i < nnodes && n < (size_t)job->nmax; i++)
            if (order[i] != r0 && sched_node_fits(job, &nodes[order[i]]))
                out->idx[n++] = order[i];
        out->n = n;
        out->master_port = port;
    }
    free(sorted);
    return port ? 0 : DDP_EUNAVAIL;
}
