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

int sched_place(const struct sched_job *job, const struct sched_node *nodes, size_t nnodes,
                struct sched_placement *out)
{
    int rc = DDP_EUNAVAIL;
    size_t *order = NULL;
    size_t n = 0;
    if (job->nmin < 1 || job->nmax < job->nmin || job->nproc < 1 ||
        job->gpus_per_proc < SCHED_GPUS_AUTO)
        return DDP_EINVAL;
    order = xcalloc(nnodes + 1, sizeof(*order));
    /* insertion sort of the usable nodes by name: node counts are small */
    for (size_t i = 0; i < nnodes; i++) {
        if (!sched_node_fits(job, &nodes[i]))
            continue;
        size_t k = n;
        while (k > 0 && strcmp(nodes[order[k - 1]].name, nodes[i].name) > 0) {
            order[k] = order[k - 1];
            k--;
        }
        order[k] = i;
        n++;
    }
    if (n < (size_t)job->nmin)
        goto out;
    if (n > (size_t)job->nmax)
        n = (size_t)job->nmax;
    int port = sched_pick_port(&nodes[order[0]]);
    if (port == 0)
        goto out;
    memcpy(out->idx, order, n * sizeof(*order));
    out->n = n;
    out->master_port = port;
    rc = 0;
out:
    free(order);
    return rc;
}
