/*
 * coord_load.c - loading the coordinator from the store at coord_open(): nodes (all LOST
 * until they beat again, their silence counted from now), jobs in id order, and marks.
 *
 * Invariants: ids in the jobs table rise; a gap is a deleted job (coord_retain.c), NULL in
 * c->jobs, and c->jobs reaches the highest id ever given out; a placement names only
 * loaded nodes; an entry of a RESTARTING or CANCELLING job drains again (its workers may
 * still run) with the drain bound counted from now.
 */
#include "server/coord_internal.h"

#include <stdio.h>
#include <string.h>

#include "common/utf8.h"
#include "common/xalloc.h"

struct coord_load {
    struct coord *c;
    int64_t now;
    struct ddp_err *err;
};

static int coord_load_node(void *ctx, const struct store_node *r)
{
    struct coord_load *L = ctx;
    struct coord *c = L->c;
    struct node *n = coord_node_new(c, r->name ? r->name : "");
    n->address = xstrdup(r->address ? r->address : "");
    n->incarnation = xstrdup(r->incarnation ? r->incarnation : "");
    n->slots = (int)r->slots;
    n->port_lo = (int)r->port_lo;
    n->port_hi = (int)r->port_hi;
    n->registered_at = r->registered_at;
    n->last_beat_wall = r->last_heartbeat;
    snprintf(n->cred_hash, sizeof(n->cred_hash), "%s",
             r->credential_hash && strlen(r->credential_hash) == AUTH_HASH_HEX - 1
                 ? r->credential_hash
                 : "");
    n->admin = r->admin_state && strcmp(r->admin_state, "drain") == 0    ? NODE_DRAINED
               : r->admin_state && strcmp(r->admin_state, "cordon") == 0 ? NODE_CORDONED
                                                                         : NODE_SCHEDULABLE;
    snprintf(n->admin_reason, sizeof(n->admin_reason), "%s",
             r->admin_reason ? r->admin_reason : "");
    utf8_repair(n->admin_reason);
    json_t *labels = json_loads(r->labels ? r->labels : "{}", 0, NULL);
    if (json_is_object(labels)) {
        json_decref(n->labels);
        n->labels = labels;
    } else {
        json_decref(labels);
    }
    /* LOST (coord_node_new()): alive again only when it beats again */
    n->last_seen = L->now;
    coord_nodes_push(c, n);
    return 0;
}

static int coord_load_job(void *ctx, const struct store_job *r)
{
    struct coord_load *L = ctx;
    struct coord *c = L->c;
    struct job *j = xcalloc(1, sizeof(*j));
    json_t *spec = NULL, *nodes = NULL;
    int rc;
    if (r->id < 1 || (uint64_t)r->id <= c->njobs) {
        rc =
            err_set(L->err, DDP_EINTERNAL, "jobs table: id %lld out of sequence", (long long)r->id);
        goto out;
    }
    coord_jobs_pad(c, r->id - 1); /* the ids below without a row were deleted */
    j->id = r->id;
    spec = json_loads(r->spec ? r->spec : "", 0, NULL);
    rc = validate_job_spec(spec, &j->spec, L->err);
    if (rc)
        goto out;
    j->spec_text = xstrdup(r->spec);
    enum job_state st;
    if (!r->state || jobstate_parse(r->state, &st) != 0) {
        rc = err_set(L->err, DDP_EINTERNAL, "job j-%lld: bad state", (long long)r->id);
        goto out;
    }
    snprintf(j->token, sizeof(j->token), "%s", r->job_token ? r->job_token : "");
    snprintf(j->owner, sizeof(j->owner), "%s", r->owner ? r->owner : "admin");
    if (r->request_id)
        j->request_id = xstrdup(r->request_id);
    j->created_at = r->created_at;
    j->st.state = st;
    j->st.generation = (int)r->generation;
    j->st.restarts = (int)r->restarts;
    j->st.world_size = (int)r->world_size;
    snprintf(j->st.master_addr, sizeof(j->st.master_addr), "%s",
             r->master_addr ? r->master_addr : "");
    j->st.master_port = (int)r->master_port;
    snprintf(j->st.reason, sizeof(j->st.reason), "%s", r->reason ? r->reason : "");
    snprintf(j->st.end_reason, sizeof(j->st.end_reason), "%s", r->end_reason ? r->end_reason : "");
    /* as coord_commit() makes them: a store written before it did may hold a cut character */
    utf8_repair(j->st.reason);
    utf8_repair(j->st.end_reason);
    j->st.end_kind = (int)r->end_kind;
    j->st.started_at = r->started_at;
    j->st.finished_at = r->finished_at;
    j->st.event_seq = r->event_seq;
    j->log_seq = j->disk_log_seq = r->log_seq;
    j->metric_seq = j->disk_metric_seq = r->metric_seq;
    if (r->last_metrics)
        j->last_metrics = json_loads(r->last_metrics, 0, NULL);
    j->disk_metrics = json_incref(j->last_metrics);
    nodes = json_loads(r->nodes ? r->nodes : "[]", 0, NULL);
    size_t np = json_array_size(nodes);
    j->st.pl = xcalloc(np + 1, sizeof(*j->st.pl));
    for (size_t i = 0; i < np; i++) {
        json_t *e = json_array_get(nodes, i);
        const char *name = json_string_value(json_object_get(e, "name"));
        if (!name || !validate_name(name)) {
            rc = err_set(L->err, DDP_EINTERNAL, "job j-%lld: bad node in placement",
                         (long long)r->id);
            goto out;
        }
        int ni = coord_node_index(c, name);
        if (ni < 0) { /* an admin removed it: a tombstone, gone for the job */
            struct node *t = coord_node_new(c, name);
            t->address = xstrdup("");
            t->incarnation = xstrdup("");
            coord_nodes_push(c, t);
            ni = (int)c->nnodes - 1;
            coord_node_removed(c, ni, L->now);
        }
        struct job_node *p = &j->st.pl[j->st.npl++];
        p->node = ni;
        p->group_rank = (int)json_integer_value(json_object_get(e, "group_rank"));
        p->draining = st == JOB_RESTARTING || st == JOB_CANCELLING;
    }
    j->drain_deadline = L->now + (int64_t)j->spec.grace_period_s * 1000 + c->opts.drain_extra_ms;
    if (st == JOB_RUNNING) {
        j->rank_exit = xcalloc((size_t)j->st.world_size + 1, sizeof(int));
        for (int k = 0; k < j->st.world_size; k++)
            j->rank_exit[k] = RANK_RUNNING;
        j->prog = xcalloc((size_t)j->st.world_size + 1, sizeof(*j->prog));
    }
    j->ended_at = L->now;
    coord_jobs_push(c, j);
    j = NULL;
out:
    json_decref(spec);
    json_decref(nodes);
    coord_job_free(j);
    return rc;
}

static int coord_load_mark(void *ctx, int64_t job, int64_t gen, int64_t rank, int64_t last)
{
    struct coord_load *L = ctx;
    struct job *j = coord_job(L->c, job);
    if (j && gen >= coord_marks_floor(j)) { /* older ones may be left from before a crash */
        struct mark *m = coord_mark(j, gen, (int)rank, 1);
        m->last_seq = m->disk_seq = last;
    }
    return 0;
}

/* Loads nodes, jobs and marks from the open store into the empty coordinator c. */
int coord_load(struct coord *c, int64_t now, struct ddp_err *err)
{
    struct coord_load L = {c, now, err};
    int rc = store_load_nodes(c->store, coord_load_node, &L, err);
    if (!rc)
        rc = store_load_jobs(c->store, coord_load_job, &L, err);
    int64_t last = 0;
    if (!rc)
        rc = store_last_job_id(c->store, &last, err);
    if (!rc)
        coord_jobs_pad(c, last); /* the newest ids may be deleted ones: never given again */
    if (!rc)
        rc = store_load_marks(c->store, coord_load_mark, &L, err);
    return rc;
}
