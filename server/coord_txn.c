/*
 * coord_txn.c - the coordinator's writes to the store: the jobs and nodes rows, and
 * coord_commit(), the one path by which a job changes state.
 *
 * Invariant (1 of coord.c): a change is committed to the store first and applied to memory
 * only after the commit returned; a failed commit leaves memory as it was. c->mu is held by
 * the caller; c->store_mu is taken by coord_txn_run(), the one place that begins, commits
 * and rolls back a transaction, and so the one place that sees whether the store takes
 * writes (coord_health()).
 */
#include "server/coord_internal.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>

#include "common/jsonx.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/timeutil.h"

static char *coord_pl_text(struct coord *c, const struct job_node *pl, int npl)
{
    json_t *a = json_array();
    for (int i = 0; i < npl; i++)
        json_array_append_new(a, json_pack("{s:s, s:i}", "name", c->nodes[pl[i].node]->name,
                                           "group_rank", pl[i].group_rank));
    char *s = jsonx_dumps(a);
    json_decref(a);
    return s;
}

/* Records the outcome of one write transaction for coord_health(). Called under
 * c->store_mu, so that the outcomes are recorded in the order the writes ran. */
static void coord_health_note(struct coord *c, int rc, const struct ddp_err *e)
{
    pthread_mutex_lock(&c->health_mu);
    if (rc) {
        if (!c->store_failing)
            log_error("storage: a write failed (/readyz answers 503 until one succeeds): %s",
                      e->msg);
        c->store_failures++;
        c->store_failing = 1;
        c->store_failed_wall = time_wall_ms();
        snprintf(c->store_error, sizeof(c->store_error), "%s", e->msg);
    } else {
        c->store_ok_wall = time_wall_ms();
        if (c->store_failing)
            log_info("storage: writes succeed again (%llu failed since ddpd started)",
                     (unsigned long long)c->store_failures);
        c->store_failing = 0;
    }
    pthread_mutex_unlock(&c->health_mu);
}

/* Set by coord_txn_run() in the thread whose transaction was refused before it began: by a
 * retired coordinator, a store that does not lead, or the fence (coord_take_refusal()). */
static _Thread_local int coord_refused;

int coord_take_refusal(void)
{
    int r = coord_refused;
    coord_refused = 0;
    return r;
}

int coord_refusal_seen(void)
{
    return coord_refused;
}

void coord_refusal_mark(void)
{
    coord_refused = 1;
}

int coord_txn_run(struct coord *c, coord_txn_fn fn, void *ctx, struct ddp_err *e)
{
    pthread_mutex_lock(&c->store_mu);
    if (c->retired) {
        coord_refused = 1;
        pthread_mutex_unlock(&c->store_mu);
        return err_set(e, DDP_EUNAVAIL, "this replica lost the leadership: try the leader");
    }
    int rc = store_begin(c->store, e);
    if (!rc && c->opts.fence_epoch) {
        int64_t epoch = 0;
        rc = store_epoch(c->store, &epoch, e);
        if (!rc && epoch != c->opts.fence_epoch)
            rc = err_set(e, DDP_EUNAVAIL,
                         "another replica led since this one won (epoch %lld, now %lld): this "
                         "coordinator writes nothing more",
                         (long long)c->opts.fence_epoch, (long long)epoch);
    }
    /* Refused before anything was done: the store's node does not lead (BEGIN), or another
     * replica led since (the fence); the HTTP layer answers not_leader. */
    if (rc == DDP_EUNAVAIL)
        coord_refused = 1;
    if (!rc)
        rc = fn(c, ctx, e);
    int committing = !rc;
    if (!rc)
        rc = store_commit(c->store, e);
    /* A replica's own disk failing (full, I/O errors) fails every write it leads while
     * another replica's disk could take them: it retires and hands the leadership over
     * (server/main.c). The file's single ddpd has nowhere to hand it: it keeps answering 500. */
    if (rc && rc != DDP_EUNAVAIL && c->opts.fence_epoch && store_storage_failed(c->store)) {
        log_error("storage: this replica's disk failed a write (%s): its coordinator stops and "
                  "the leadership goes to another replica",
                  e->msg);
        c->retired = 1;
        c->storage_failed = 1;
    }
    if (rc)
        store_rollback(c->store);
    /* A replicated store (no file) answering UNAVAILABLE: its node lost the leadership, or
     * the connection to it; nothing more is written through this coordinator, which the
     * replica's next tick replaces (server/main.c). So does a failure whose outcome is not
     * known: a COMMIT that timed out or broke may still be applied by Raft, and memory,
     * rolled back here, would no longer be the store (the next submit would reuse the job
     * id and fail on its events for ever); the new coordinator loads what was committed. */
    int replicated = c->db_path == NULL || c->opts.fence_epoch;
    if (replicated && (rc == DDP_EUNAVAIL || rc == DDP_ETIMEOUT || (rc && committing))) {
        if (rc != DDP_EUNAVAIL)
            log_warn("storage: %s: the outcome is not known; this coordinator stops and the "
                     "next one loads the store",
                     e->msg);
        c->retired = 1;
    }
    coord_health_note(c, rc, e);
    pthread_mutex_unlock(&c->store_mu);
    return rc;
}

void coord_health(struct coord *c, struct coord_health *out)
{
    pthread_mutex_lock(&c->health_mu);
    out->store_ok = !c->store_failing;
    out->store_failures = c->store_failures;
    out->store_failed_at = c->store_failures ? c->store_failed_wall : 0;
    snprintf(out->store_error, sizeof(out->store_error), "%s", c->store_error);
    out->store_ok_at = c->store_ok_wall;
    pthread_mutex_unlock(&c->health_mu);
}

/* Writes the jobs row of j as it would be with status st (in the open transaction). Its
 * log_seq, metric_seq and last_metrics count only for a new row: later the heartbeat data's
 * batches alone write them (store_job_data()), as memory may be ahead of their commit. */
static int coord_put_job(struct coord *c, const struct job *j, const struct job_st *st,
                         struct ddp_err *err)
{
    char *pl = coord_pl_text(c, st->pl, st->npl);
    char *metrics = j->last_metrics ? jsonx_dumps(j->last_metrics) : NULL;
    struct store_job row = {
        .id = j->id,
        .name = j->spec.name,
        .spec = j->spec_text,
        .state = jobstate_name(st->state),
        .generation = st->generation,
        .restarts = st->restarts,
        .world_size = st->world_size,
        .master_addr = st->master_addr,
        .master_port = st->master_port,
        .nodes = pl,
        .last_metrics = metrics,
        .reason = st->reason,
        .created_at = j->created_at,
        .started_at = st->started_at,
        .finished_at = st->finished_at,
        .job_token = j->token,
        .log_seq = j->log_seq,
        .metric_seq = j->metric_seq,
        .event_seq = st->event_seq,
        .end_kind = st->end_kind,
        .end_reason = st->end_reason,
        .owner = j->owner,
        .request_id = j->request_id,
    };
    int rc = store_job_put(c->store, &row, err);
    free(pl);
    free(metrics);
    return rc;
}

int coord_job_write(struct coord *c, void *ctx, struct ddp_err *e)
{
    const struct job_write *w = ctx;
    int rc = coord_put_job(c, w->j, w->st, e);
    if (!rc)
        rc = store_event_add(c->store, w->j->id, w->st->event_seq, w->wall, w->st->generation,
                             jobstate_name(w->st->state), w->st->reason, e);
    if (!rc && w->marks_below > 0)
        rc = store_marks_drop(c->store, w->j->id, w->marks_below, e);
    return rc;
}

/* Moves job j to status *next (a changed copy of j->st; next->pl may be a new array, which
 * this function then owns): checks the state machine, commits the row and the event, and
 * only then applies *next. On failure j is unchanged. A *next in the same state is not a
 * transition but a note (an event completing the reason, see coord_refine()). */
int coord_commit(struct coord *c, struct job *j, struct job_st *next, int64_t now,
                 struct ddp_err *err)
{
    int rc;
    struct ddp_err e;
    int note = next->state == j->st.state; /* an event that is not a transition */
    if (!note && !jobstate_allowed(j->st.state, next->state)) {
        log_error("BUG: refused transition job=j-%lld from=%s to=%s", (long long)j->id,
                  jobstate_name(j->st.state), jobstate_name(next->state));
        rc = err_set(err, DDP_EINTERNAL, "refused transition %s -> %s", jobstate_name(j->st.state),
                     jobstate_name(next->state));
        goto fail;
    }
    /* Reasons quote what ranks printed and cut it to a size, maybe inside a character:
     * stored and served as JSON strings, they must be well-formed (jansson refuses others). */
    utf8_repair(next->reason);
    utf8_repair(next->end_reason);
    next->event_seq = j->st.event_seq + 1;
    /* a new generation: the marks of the one before the previous go (coord_beat.c) */
    int new_gen = next->generation > j->st.generation;
    struct job_write w = {j, next, coord_wall(c, now), new_gen ? next->generation - 1 : 0};
    rc = coord_txn_run(c, coord_job_write, &w, &e);
    if (rc) {
        log_error("cannot record transition job=j-%lld to=%s: %s", (long long)j->id,
                  jobstate_name(next->state), e.msg);
        err_set(err, DDP_EINTERNAL, "cannot record the change: %s", e.msg);
        goto fail;
    }
    if (note)
        log_info("job j-%lld %s generation=%d note=\"%s\"", (long long)j->id,
                 jobstate_name(next->state), next->generation, next->reason);
    else
        log_info("job j-%lld %s -> %s generation=%d reason=\"%s\"", (long long)j->id,
                 jobstate_name(j->st.state), jobstate_name(next->state), next->generation,
                 next->reason);
    if (j->st.pl != next->pl) {
        if (new_gen) { /* kept so that its nodes may still ship its last lines */
            free(j->prev_pl);
            j->prev_pl = j->st.pl;
            j->prev_npl = j->st.npl;
        } else {
            free(j->st.pl);
        }
    }
    j->st = *next;
    if (new_gen)
        coord_marks_drop(j);
    coord_job_dirty(j);
    return 0;
fail:
    if (next->pl != j->st.pl)
        free(next->pl);
    return rc;
}

static int coord_node_write(struct coord *c, void *ctx, struct ddp_err *e)
{
    return store_node_put(c->store, ctx, e);
}

/* The store row of node n with the given state; *labels (caller frees) backs row->labels. */
static void coord_node_row(const struct node *n, int ready, int64_t beat_wall,
                           struct store_node *row, char **labels)
{
    *labels = n->labels ? jsonx_dumps(n->labels) : NULL;
    *row = (struct store_node){
        .name = n->name,
        .address = n->address,
        .slots = n->slots,
        .port_lo = n->port_lo,
        .port_hi = n->port_hi,
        .incarnation = n->incarnation,
        .state = ready ? "READY" : "LOST",
        .registered_at = n->registered_at,
        .last_heartbeat = beat_wall,
        .credential_hash = n->cred_hash,
        .admin_state = n->admin == NODE_DRAINED    ? "drain"
                       : n->admin == NODE_CORDONED ? "cordon"
                                                   : "",
        .admin_reason = n->admin_reason,
        .labels = *labels,
    };
}

static int coord_stale_nodes_write(struct coord *c, void *ctx, struct ddp_err *e)
{
    (void)ctx;
    int rc = 0;
    for (size_t i = 0; !rc && i < c->nnodes; i++) {
        const struct node *n = c->nodes[i];
        if (!n->row_stale || n->removed)
            continue;
        struct store_node row;
        char *labels;
        coord_node_row(n, nodestate_is_up(n->state), n->last_beat_wall, &row, &labels);
        rc = store_node_put(c->store, &row, e);
        free(labels);
    }
    return rc;
}

void coord_flush_nodes(struct coord *c)
{
    if (!c->nodes_stale)
        return;
    struct ddp_err e;
    if (coord_txn_run(c, coord_stale_nodes_write, NULL, &e) != 0) {
        log_warn_limited(5000, "cannot record the nodes that beat again (next tick retries): %s",
                         e.msg);
        return;
    }
    for (size_t i = 0; i < c->nnodes; i++)
        c->nodes[i]->row_stale = 0;
    c->nodes_stale = 0;
}

int coord_put_node(struct coord *c, const struct node *n, int ready, int64_t beat_wall,
                   struct ddp_err *err)
{
    struct store_node row;
    char *labels;
    coord_node_row(n, ready, beat_wall, &row, &labels);
    struct ddp_err e;
    int rc = coord_txn_run(c, coord_node_write, &row, &e);
    free(labels);
    if (rc) {
        log_error("cannot record node %s: %s", n->name, e.msg);
        return err_set(err, DDP_EINTERNAL, "cannot record the node: %s", e.msg);
    }
    return 0;
}
