/*
 * coord_model.c - lookups and indexes of the coordinator's model: jobs by id (c->jobs[id - 1],
 * NULL for a deleted one, invariant 5 of coord.c), the live list, nodes by name (open addressing in c->nhash), and
 * the small questions asked of a node or a placement.
 *
 * Invariants: c->nhash has a power-of-two size above 2 * nnodes, so a probe always ends at
 * an empty slot; nodes are never removed, so an index into c->nodes stays valid for the life
 * of the coordinator. Everything here runs with c->mu held.
 */
#include "server/coord_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/log.h"
#include "common/xalloc.h"

int64_t coord_wall(struct coord *c, int64_t now)
{
    return now + c->wall_offset;
}

struct job *coord_job(struct coord *c, int64_t id)
{
    if (id < 1 || (uint64_t)id > c->njobs)
        return NULL;
    return c->jobs[id - 1];
}

static size_t coord_name_hash(const char *s)
{
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (; *s; s++) {
        h ^= (unsigned char)*s;
        h *= 1099511628211ULL;
    }
    return (size_t)h;
}

int coord_node_index(struct coord *c, const char *name)
{
    if (!c->nhash_cap)
        return -1;
    size_t mask = c->nhash_cap - 1;
    for (size_t h = coord_name_hash(name) & mask;; h = (h + 1) & mask) {
        int v = c->nhash[h];
        if (v == 0)
            return -1;
        if (strcmp(c->nodes[v - 1]->name, name) == 0)
            return v - 1;
    }
}

static void coord_nhash_put(struct coord *c, int idx)
{
    size_t mask = c->nhash_cap - 1;
    size_t h = coord_name_hash(c->nodes[idx]->name) & mask;
    while (c->nhash[h])
        h = (h + 1) & mask;
    c->nhash[h] = idx + 1;
}

void coord_bump(struct node *n)
{
    n->version++;
    pthread_cond_broadcast(&n->cond);
}

int coord_node_set(struct node *n, enum node_state to)
{
    if (n->state == to)
        return 0;
    if (!nodestate_allowed(n->state, to)) {
        log_error("BUG: refused node transition node=%s from=%s to=%s", n->name,
                  nodestate_name(n->state), nodestate_name(to));
        return -1;
    }
    n->state = to;
    return 0;
}

/* 1 when node n has been silent for the node timeout or was LOST by a confirmed
 * suspicion (it counts as gone for jobs). */
int coord_node_gone(struct coord *c, const struct node *n, int64_t now)
{
    return n->removed || n->state == NODE_LOST_CONFIRMED ||
           (n->state == NODE_LOST && now - n->last_seen >= c->opts.node_timeout_ms);
}

void coord_job_dirty(struct job *j)
{
    free(j->json_cache);
    j->json_cache = NULL;
}

int coord_entry_holds(const struct job *j, const struct job_node *p)
{
    if (jobstate_is_terminal(j->st.state) || j->st.state == JOB_PENDING)
        return 0;
    return j->st.state == JOB_RUNNING || p->draining;
}

int coord_slots_used(struct coord *c, int node)
{
    int used = 0;
    for (size_t i = 0; i < c->nlive; i++) {
        struct job *j = c->live[i];
        for (int k = 0; k < j->st.npl; k++)
            if (j->st.pl[k].node == node && coord_entry_holds(j, &j->st.pl[k]))
                used += j->spec.nproc;
    }
    return used;
}

int coord_draining(const struct job *j)
{
    for (int i = 0; i < j->st.npl; i++)
        if (j->st.pl[i].draining)
            return 1;
    return 0;
}

void coord_jobs_push(struct coord *c, struct job *j)
{
    XGROW(c->jobs, c->njobs + 1, c->capjobs, 64);
    c->jobs[c->njobs++] = j;
    if (jobstate_is_terminal(j->st.state))
        return;
    XGROW(c->live, c->nlive + 1, c->caplive, 64);
    c->live[c->nlive++] = j;
}

/* Drops terminal jobs from c->live, keeping the order. Called where no loop over the list
 * is running. */
void coord_live_compact(struct coord *c)
{
    size_t k = 0;
    for (size_t i = 0; i < c->nlive; i++)
        if (!jobstate_is_terminal(c->live[i]->st.state))
            c->live[k++] = c->live[i];
    c->nlive = k;
}

void coord_job_free(struct job *j)
{
    if (!j)
        return;
    validate_spec_release(&j->spec);
    free(j->spec_text);
    free(j->st.pl);
    free(j->prev_pl);
    free(j->hold);
    free(j->request_id);
    json_decref(j->last_metrics);
    json_decref(j->disk_metrics);
    free(j->marks);
    free(j->rank_exit);
    free(j->prog);
    free(j->json_cache);
    free(j);
}

struct node *coord_node_new(struct coord *c, const char *name)
{
    struct node *n = xcalloc(1, sizeof(*n));
    pthread_condattr_t ca;
    pthread_condattr_init(&ca);
    pthread_condattr_setclock(&ca, CLOCK_MONOTONIC);
    pthread_cond_init(&n->cond, &ca);
    pthread_condattr_destroy(&ca);
    snprintf(n->name, sizeof(n->name), "%s", name);
    n->version = c->version_base;
    n->state = NODE_LOST; /* until it registers or beats */
    n->labels = json_object();
    return n;
}

void coord_node_free(struct node *n)
{
    if (!n)
        return;
    pthread_cond_destroy(&n->cond);
    json_decref(n->labels);
    free(n->address);
    free(n->incarnation);
    free(n);
}

void coord_nodes_push(struct coord *c, struct node *n)
{
    XGROW(c->nodes, c->nnodes + 1, c->capnodes, 64);
    c->nodes[c->nnodes++] = n;
    if (2 * c->nnodes >= c->nhash_cap) {
        free(c->nhash);
        c->nhash_cap = c->nhash_cap ? 2 * c->nhash_cap : 128;
        c->nhash = xcalloc(c->nhash_cap, sizeof(*c->nhash));
        for (size_t i = 0; i < c->nnodes; i++)
            if (!c->nodes[i]->removed)
                coord_nhash_put(c, (int)i);
    } else {
        coord_nhash_put(c, (int)c->nnodes - 1);
    }
}

void coord_node_removed(struct coord *c, int ni, int64_t now)
{
    struct node *n = c->nodes[ni];
    if (n->removed)
        return;
    if (n->state != NODE_LOST_CONFIRMED)
        coord_node_set(n, NODE_LOST);
    n->removed = 1;
    n->last_seen = now;
    n->cred_hash[0] = '\0';
    c->nremoved++;
    coord_bump(n); /* wakes its held beat, which then finds no node */
    memset(c->nhash, 0, c->nhash_cap * sizeof(*c->nhash));
    for (size_t i = 0; i < c->nnodes; i++)
        if (!c->nodes[i]->removed)
            coord_nhash_put(c, (int)i);
}

/* The group rank of node ni in j's placement, or -1. */
int coord_group_rank(const struct job *j, int ni)
{
    for (int p = 0; p < j->st.npl; p++)
        if (j->st.pl[p].node == ni)
            return j->st.pl[p].group_rank;
    return -1;
}

int coord_node_matches(const struct node *n, const json_t *selector)
{
    const char *k;
    json_t *v;
    json_object_foreach((json_t *)selector, k, v)
    {
        const char *have = json_string_value(json_object_get(n->labels, k));
        if (!have || strcmp(have, json_string_value(v)) != 0)
            return 0;
    }
    return 1;
}

int coord_node_held_rank(const struct job *j, int ni, int64_t gen, int rank)
{
    const struct job_node *pl = j->st.pl;
    int npl = j->st.npl;
    if (gen == j->st.generation - 1) {
        pl = j->prev_pl;
        npl = j->prev_npl;
    } else if (gen != j->st.generation) {
        return 0;
    }
    int want = rank < 0 ? 0 : rank / (j->spec.nproc > 0 ? j->spec.nproc : 1);
    for (int p = 0; p < npl; p++)
        if (pl[p].node == ni && pl[p].group_rank == want)
            return 1;
    return 0;
}
