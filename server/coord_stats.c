/*
 * coord_stats.c - the coordinator's live jobs and nodes copied out for /metrics.
 *
 * Invariant: only live jobs (PENDING, RUNNING, RESTARTING, CANCELLING) are copied, so the
 * series per job are bounded by the live jobs and a finished job's series disappear with
 * the next scrape. The copy is made under c->mu and rendered without it (server/metrics.c),
 * so a scrape holds the mutex for one pass over c->live and c->nodes only.
 */
#include "server/coord_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>

#include "common/xalloc.h"

static int coord_stat_live(enum job_state s)
{
    return s == JOB_PENDING || s == JOB_RUNNING || s == JOB_RESTARTING || s == JOB_CANCELLING;
}

/* *out = metrics[key] when it is a number. 1 when it is. */
static int coord_stat_num(const json_t *metrics, const char *key, double *out)
{
    const json_t *v = metrics ? json_object_get(metrics, key) : NULL;
    if (!v || !json_is_number(v))
        return 0;
    *out = json_number_value(v);
    return 1;
}

void coord_stats(struct coord *c, int64_t now, struct coord_job_stat **jobs, size_t *njobs,
                 struct coord_node_stat **nodes, size_t *nnodes)
{
    pthread_mutex_lock(&c->mu);
    struct coord_job_stat *js = c->nlive ? xcalloc(c->nlive, sizeof(*js)) : NULL;
    size_t nj = 0;
    for (size_t i = 0; i < c->nlive; i++) {
        const struct job *j = c->live[i];
        if (!coord_stat_live(j->st.state))
            continue;
        struct coord_job_stat *s = &js[nj++];
        s->id = j->id;
        snprintf(s->owner, sizeof(s->owner), "%s", j->owner);
        s->state = j->st.state;
        s->generation = j->st.generation;
        s->restarts = j->st.restarts;
        s->world_size = j->st.world_size;
        s->has_loss = coord_stat_num(j->last_metrics, "loss", &s->loss);
        s->has_samples_per_s = coord_stat_num(j->last_metrics, "samples_per_s", &s->samples_per_s);
        s->has_epoch = coord_stat_num(j->last_metrics, "epoch", &s->epoch);
    }
    /* slots used per node in one pass over the live jobs (coord_slots_used()'s rule), not
     * one pass per node: a scrape holds the mutex for O(jobs + nodes) */
    int *used = c->nnodes ? xcalloc(c->nnodes, sizeof(*used)) : NULL;
    for (size_t i = 0; i < c->nlive; i++) {
        const struct job *j = c->live[i];
        for (int k = 0; k < j->st.npl; k++)
            if (coord_entry_holds(j, &j->st.pl[k]))
                used[j->st.pl[k].node] += j->spec.nproc;
    }
    struct coord_node_stat *ns = c->nnodes ? xcalloc(c->nnodes, sizeof(*ns)) : NULL;
    size_t nn = 0;
    for (size_t i = 0; i < c->nnodes; i++) {
        const struct node *n = c->nodes[i];
        if (n->removed)
            continue;
        struct coord_node_stat *s = &ns[nn++];
        snprintf(s->name, sizeof(s->name), "%s", n->name);
        s->up = nodestate_is_up(n->state);
        s->slots = n->slots;
        s->used = used[i];
        s->beat_age_s = now > n->last_seen ? (double)(now - n->last_seen) / 1000.0 : 0.0;
    }
    pthread_mutex_unlock(&c->mu);
    free(used);
    *jobs = js;
    *njobs = nj;
    *nodes = ns;
    *nnodes = nn;
}

int64_t coord_db_bytes(struct coord *c)
{
    struct stat st;
    if (c->db_path == NULL || stat(c->db_path, &st) != 0)
        return -1;
    int64_t total = (int64_t)st.st_size;
    char wal[4096];
    int n = snprintf(wal, sizeof(wal), "%s-wal", c->db_path);
    if (n > 0 && (size_t)n < sizeof(wal) && stat(wal, &st) == 0)
        total += (int64_t)st.st_size;
    return total;
}
