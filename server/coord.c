/*
 * coord.c - the coordinator's lifecycle, its locking and the entry points of coord.h (see
 * coord.h for the contract, docs/ddpd.md for the rules in prose, jobstate.c for the state
 * machine).
 *
 * Invariants:
 *   1. One mutex (c->mu) guards the model. Every change of a job or node is committed to
 *      SQLite while it is held and applied to memory only after the commit returned; a
 *      failed commit leaves memory as it was. The SQLite connection has its own mutex
 *      (c->store_mu, taken after c->mu or alone). The one exception to "commit under c->mu"
 *      is a heartbeat's logs and metrics (coord_beat_data): they are group-committed without
 *      c->mu, and the beat is answered only after its batch committed. The one exception to
 *      "commit first" is a node that beats again (LOST to READY): memory first, its row
 *      at the next tick with all others back since (coord_flush_nodes); nothing reads that
 *      row's state back (every node loads LOST), so no restart can see the order.
 *   2. A node's desired set is computed, never stored: every RUNNING job whose current
 *      placement holds the node. Any change of it bumps node->version and wakes the node's
 *      held heartbeat.
 *   3. A job in RESTARTING or CANCELLING keeps its last placement; entries whose workers may
 *      still run are `draining` and still hold their slots. The job moves on when no entry
 *      drains or when drain_deadline (grace_period_s + 10 s) has passed.
 *   4. Worker reports for a generation that is not the job's current one are ignored.
 *   5. Jobs live in c->jobs[id - 1]; ids count up from 1 and are never reused; the slot of a
 *      deleted job is NULL (coord_retain.c), so loops over c->jobs skip NULL. c->live holds
 *      every job that is not terminal (and, until the next compaction, some that just became
 *      terminal), in id order: loops that run on every beat and tick walk only that list.
 *   6. A node is gone for its jobs (coord_node_gone) when it is LOST and silent for
 *      node_timeout_ms, or LOST_CONFIRMED (a confirmed suspicion; see nodestate.c). Only a
 *      READY node is ever suspected, and only a beat that arrived after the suspicion
 *      clears it.
 *
 * The model and its rules are split by concept, all private to the coordinator
 * (coord_internal.h): coord_model.c (lookups and indexes), coord_views.c (JSON views),
 * coord_txn.c (transactions and job transitions), coord_sched.c (generations and
 * scheduling), coord_beat.c (heartbeat data and group commit), coord_fault.c (suspicion,
 * exits, hangs), coord_load.c (loading from the store). Every function there expects c->mu
 * held unless its comment says otherwise.
 */
#include "server/coord.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "common/jsonx.h"
#include "common/log.h"
#include "common/utf8.h"
#include "common/randutil.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "server/coord_internal.h"

static void coord_tick_locked(struct coord *c, int64_t now);

/* 1 when job j's spec is the spec a repeated submit sent (spec), but for its priority: an
 * admin may change that after the submit (coord_update_job), and a client that sends its
 * submit again after a lost answer must still get its job, not a 409. */
static int coord_same_submit(const struct job *j, const json_t *spec)
{
    json_t *a = json_deep_copy(j->spec.json), *b = json_deep_copy(spec);
    json_object_del(a, "priority");
    json_object_del(b, "priority");
    int same = json_equal(a, b);
    json_decref(a);
    json_decref(b);
    return same;
}

/* The job of owner submitted with request_id, or NULL. */
static struct job *coord_job_by_request(struct coord *c, const char *owner, const char *request_id)
{
    for (size_t i = c->njobs; i-- > 0;) {
        struct job *j = c->jobs[i];
        if (j && j->request_id && strcmp(j->request_id, request_id) == 0 &&
            strcmp(j->owner, owner) == 0)
            return j;
    }
    return NULL;
}

int coord_submit(struct coord *c, const json_t *body, const struct principal *who,
                 const char *request_id, int64_t now, char **out, int *created, struct ddp_err *err)
{
    struct job *j = xcalloc(1, sizeof(*j));
    struct ddp_err e;
    const char *owner = who->name;
    *created = 0;
    int rc = validate_job_spec(body, &j->spec, err);
    if (rc)
        goto out;
    if (who->role != ROLE_ADMIN && j->spec.priority > c->opts.max_user_priority) {
        rc = err_set(err, DDP_EPERM,
                     "field 'priority': %d is above %d, the most role %s may ask "
                     "(--max-user-priority); an admin may raise it with ddpctl update",
                     j->spec.priority, c->opts.max_user_priority, auth_role_name(who->role));
        goto out;
    }
    j->spec_text = jsonx_dumps(j->spec.json);
    snprintf(j->owner, sizeof(j->owner), "%s", owner);
    if (request_id)
        j->request_id = xstrdup(request_id);
    if (rand_hex(j->token, JOB_TOKEN_BYTES) != 0) {
        rc = err_set(err, DDP_EINTERNAL, "no randomness for the job token");
        goto out;
    }
    pthread_mutex_lock(&c->mu);
    if (request_id) {
        struct job *was = coord_job_by_request(c, owner, request_id);
        if (was && !coord_same_submit(was, j->spec.json)) {
            rc = err_set(err, DDP_EEXIST,
                         "Idempotency-Key '%.128s' was used for job j-%lld with another spec; "
                         "use a new key for a new job",
                         request_id, (long long)was->id);
            pthread_mutex_unlock(&c->mu);
            goto out;
        }
        if (was) {
            *out = coord_job_text(c, was);
            pthread_mutex_unlock(&c->mu);
            log_info("job submit repeated id=j-%lld (same Idempotency-Key)", (long long)was->id);
            goto out;
        }
    }
    size_t active = coord_jobs_active_of(c, owner);
    if ((int64_t)active >= c->opts.max_jobs_per_user) {
        rc = err_set(err, DDP_ELIMIT,
                     "user %s has %zu jobs that have not ended, the limit (--max-jobs-per-user); "
                     "wait for some to end or cancel some",
                     owner, active);
        pthread_mutex_unlock(&c->mu);
        goto out;
    }
    j->id = (int64_t)c->njobs + 1;
    j->created_at = coord_wall(c, now);
    j->st.state = JOB_PENDING;
    j->st.event_seq = 1;
    snprintf(j->st.reason, sizeof(j->st.reason), "submitted");
    struct job_write w = {j, &j->st, j->created_at, 0};
    rc = coord_txn_run(c, coord_job_write, &w, &e);
    if (rc) {
        pthread_mutex_unlock(&c->mu);
        log_error("cannot store job: %s", e.msg);
        rc = err_set(err, DDP_EINTERNAL, "cannot store the job: %s", e.msg);
        goto out;
    }
    coord_jobs_push(c, j);
    *out = coord_job_text(c, j);
    *created = 1;
    log_info("job submitted id=j-%lld name=%s owner=%s nnodes=%d:%d nproc_per_node=%d",
             (long long)j->id, j->spec.name, j->owner, j->spec.nmin, j->spec.nmax, j->spec.nproc);
    j = NULL;
    coord_schedule(c, now);
    pthread_mutex_unlock(&c->mu);
out:
    coord_job_free(j);
    return rc;
}

static int coord_not_found(int64_t id, struct ddp_err *err)
{
    return err_set(err, DDP_ENOTFOUND, "job j-%lld not found", (long long)id);
}

int coord_get_job(struct coord *c, int64_t id, char **out, struct ddp_err *err)
{
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    struct job *j = coord_job(c, id);
    if (j)
        *out = coord_job_text(c, j);
    else
        rc = coord_not_found(id, err);
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int coord_list_jobs(struct coord *c, int state, const char *owner, int page_size,
                    int64_t page_token, char **out, struct ddp_err *err)
{
    json_t *arr = json_array();
    int64_t next = 0;
    pthread_mutex_lock(&c->mu);
    int64_t start =
        page_token > 0 && (uint64_t)page_token <= c->njobs ? page_token : (int64_t)c->njobs;
    if (page_token > 0 && (uint64_t)page_token > c->njobs)
        start = (int64_t)c->njobs;
    for (int64_t id = start; id >= 1; id--) {
        struct job *j = c->jobs[id - 1];
        if (!j)
            continue; /* deleted */
        if (state >= 0 && (int)j->st.state != state)
            continue;
        if (owner && strcmp(j->owner, owner) != 0)
            continue;
        if ((int)json_array_size(arr) == page_size) {
            next = id;
            break;
        }
        json_array_append_new(arr, coord_job_json(c, j));
    }
    pthread_mutex_unlock(&c->mu);
    char tok[32] = "";
    if (next)
        snprintf(tok, sizeof(tok), "%lld", (long long)next);
    json_t *o = json_pack("{s:o, s:s}", "jobs", arr, "next_page_token", tok);
    *out = jsonx_dumps(o);
    json_decref(o);
    (void)err;
    return 0;
}

int coord_cancel(struct coord *c, int64_t id, const char *by, int64_t now, char **out,
                 struct ddp_err *err)
{
    int rc = 0;
    char why[96];
    snprintf(why, sizeof(why), "cancelled by %s", by);
    pthread_mutex_lock(&c->mu);
    struct job *j = coord_job(c, id);
    if (!j) {
        rc = coord_not_found(id, err);
        goto out;
    }
    if (jobstate_is_live(j->st.state)) {
        if (j->st.state == JOB_PENDING) {
            struct job_st next = j->st;
            next.state = JOB_CANCELLING;
            snprintf(next.reason, sizeof(next.reason), "%s", why);
            rc = coord_commit(c, j, &next, now, err);
        } else {
            rc = coord_end_generation(c, j, END_CANCEL, why, now, err);
        }
        if (rc)
            goto out;
        coord_progress(c, j, now);
        coord_schedule(c, now);
    }
    *out = coord_job_text(c, j);
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int coord_update_job(struct coord *c, int64_t id, const json_t *body, const char *by, int64_t now,
                     char **out, struct ddp_err *err)
{
    static const char *const keys[] = {"priority", NULL};
    int64_t prio = 0;
    int rc = json_is_object(body) ? 0 : err_set(err, DDP_EINVAL, "body must be a JSON object");
    if (!rc)
        rc = jsonx_check_keys(body, keys, NULL, err);
    if (!rc)
        rc = jsonx_get_int(body, "priority", 1, SPEC_PRIORITY_MIN, SPEC_PRIORITY_MAX, &prio, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&c->mu);
    struct job *j = coord_job(c, id);
    if (!j) {
        rc = coord_not_found(id, err);
        goto out;
    }
    if (!jobstate_is_live(j->st.state)) {
        rc = err_set(err, DDP_EPRECOND, "job j-%lld is %s: only a live job's priority changes",
                     (long long)id, jobstate_name(j->st.state));
        goto out;
    }
    int was = j->spec.priority;
    if (was != (int)prio) {
        char *old_text = j->spec_text;
        json_object_set_new(j->spec.json, "priority", json_integer(prio));
        j->spec.priority = (int)prio;
        j->spec_text = jsonx_dumps(j->spec.json);
        struct job_st next = j->st;
        snprintf(next.reason, sizeof(next.reason), "priority %d -> %lld by %s", was,
                 (long long)prio, by);
        rc = coord_commit(c, j, &next, now, err);
        if (rc) { /* memory back as it was: the store holds nothing of it */
            free(j->spec_text);
            j->spec_text = old_text;
            j->spec.priority = was;
            json_object_set_new(j->spec.json, "priority", json_integer(was));
            goto out;
        }
        free(old_text);
        coord_job_dirty(j);
        coord_schedule(c, now);
    }
    *out = coord_job_text(c, j);
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int coord_query(struct coord *c, int64_t id, const char *key,
                       int (*fn)(struct store *, int64_t, int64_t, int, json_t **,
                                 struct ddp_err *),
                       int64_t after, char **out, struct ddp_err *err)
{
    json_t *arr = NULL;
    struct ddp_err e;
    int rc;
    pthread_mutex_lock(&c->mu);
    if (!coord_job(c, id)) {
        rc = coord_not_found(id, err);
    } else {
        pthread_mutex_lock(&c->store_mu);
        rc = fn(c->store, id, after, 10000, &arr, &e);
        pthread_mutex_unlock(&c->store_mu);
        if (rc)
            err_set(err, DDP_EINTERNAL, "%s", e.msg);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc)
        return rc;
    json_t *o = json_pack("{s:o}", key, arr);
    *out = jsonx_dumps(o);
    json_decref(o);
    return 0;
}

int coord_events(struct coord *c, int64_t id, int64_t after, char **out, struct ddp_err *err)
{
    return coord_query(c, id, "events", store_events_json, after, out, err);
}

int coord_metrics(struct coord *c, int64_t id, int64_t after, char **out, struct ddp_err *err)
{
    return coord_query(c, id, "metrics", store_metrics_json, after, out, err);
}

int coord_logs(struct coord *c, int64_t id, int rank, int64_t after, int limit, char **out,
               struct ddp_err *err)
{
    json_t *arr = NULL;
    struct ddp_err e;
    int rc;
    int64_t dropped = 0;
    pthread_mutex_lock(&c->mu);
    struct job *j = coord_job(c, id);
    if (!j) {
        rc = coord_not_found(id, err);
    } else {
        dropped = j->log_seq > c->opts.log_cap ? j->log_seq - c->opts.log_cap : 0;
        pthread_mutex_lock(&c->store_mu);
        rc = store_logs_json(c->store, id, rank, after, limit, &arr, &e);
        pthread_mutex_unlock(&c->store_mu);
        if (rc)
            err_set(err, DDP_EINTERNAL, "%s", e.msg);
    }
    pthread_mutex_unlock(&c->mu);
    if (rc)
        return rc;
    int64_t next = after;
    size_t n = json_array_size(arr);
    if (n)
        next = json_integer_value(json_object_get(json_array_get(arr, n - 1), "seq"));
    json_t *o = json_pack("{s:o, s:I, s:I}", "lines", arr, "next", (json_int_t)next, "dropped",
                          (json_int_t)dropped);
    *out = jsonx_dumps(o);
    json_decref(o);
    return 0;
}

int coord_register(struct coord *c, const json_t *body, int64_t now, char **out,
                   struct ddp_err *err)
{
    struct node_reg r;
    int rc = validate_register(body, &r, err);
    if (rc)
        return rc;
    char cred[AUTH_TOKEN_HEX], cred_hash[AUTH_HASH_HEX];
    if (auth_new_token(cred) != 0)
        return err_set(err, DDP_EINTERNAL, "no randomness for the node credential");
    auth_hash(cred, cred_hash);
    pthread_mutex_lock(&c->mu);
    int64_t wall = coord_wall(c, now);
    int ni = coord_node_index(c, r.name);
    if (ni < 0) {
        size_t known = c->nnodes - c->nremoved;
        if ((int64_t)known >= c->opts.max_nodes) {
            rc = err_set(err, DDP_ELIMIT,
                         "%zu nodes are registered, the limit (--max-nodes); an admin removes "
                         "nodes that are gone with 'ddpctl nodes remove NAME'",
                         known);
            goto out;
        }
        struct node *n = coord_node_new(c, r.name);
        n->address = xstrdup(r.address);
        n->incarnation = xstrdup(r.incarnation);
        n->slots = r.slots;
        n->port_lo = r.port_lo;
        n->port_hi = r.port_hi;
        n->registered_at = wall;
        snprintf(n->cred_hash, sizeof(n->cred_hash), "%s", cred_hash);
        if (r.labels) {
            json_decref(n->labels);
            n->labels = json_deep_copy(r.labels);
        }
        snprintf(n->isolation, sizeof(n->isolation), "%s", r.isolation ? r.isolation : "");
        rc = coord_put_node(c, n, 1, wall, err);
        if (rc) {
            coord_node_free(n);
            goto out;
        }
        coord_node_set(n, NODE_READY);
        n->last_seen = now;
        n->last_beat_wall = wall;
        coord_nodes_push(c, n);
        ni = (int)c->nnodes - 1;
        log_info("node registered name=%s address=%s slots=%d isolation=%s", r.name, r.address,
                 r.slots, r.isolation ? r.isolation : "unsaid");
    } else {
        struct node *n = c->nodes[ni];
        char old_hash[AUTH_HASH_HEX] = "";
        if (r.credential)
            auth_hash(r.credential, old_hash);
        int holder = n->cred_hash[0] && r.credential && secret_equal(old_hash, n->cred_hash);
        if (nodestate_is_up(n->state) && n->cred_hash[0] && !holder) {
            /* Somebody with the bootstrap token only: it may not take a live node's name
             * (and with it, its jobs' secrets and a restart of each of them). */
            rc = err_set(err, DDP_EEXIST,
                         "node %s is registered and up; its agent registers again with its "
                         "credential, another one waits until the node is LOST (%lld s without "
                         "a beat) or an admin removes it",
                         r.name, (long long)(c->opts.node_timeout_ms / 1000));
            log_warn_limited(1000,
                             "refused a registration of node %s: it is up and the caller does "
                             "not hold its credential",
                             r.name);
            goto out;
        }
        int same = strcmp(n->incarnation, r.incarnation) == 0;
        struct node tmp = *n;
        tmp.address = (char *)r.address;
        tmp.incarnation = (char *)r.incarnation;
        tmp.slots = r.slots;
        tmp.port_lo = r.port_lo;
        tmp.port_hi = r.port_hi;
        snprintf(tmp.cred_hash, sizeof(tmp.cred_hash), "%s", cred_hash);
        if (r.labels)
            tmp.labels = r.labels; /* borrowed for the write */
        rc = coord_put_node(c, &tmp, 1, wall, err);
        if (rc)
            goto out;
        if (r.labels && !json_equal(n->labels, r.labels)) {
            json_decref(n->labels);
            n->labels = json_deep_copy(r.labels);
            coord_bump(n);
        }
        free(n->address);
        n->address = xstrdup(r.address);
        free(n->incarnation);
        n->incarnation = xstrdup(r.incarnation);
        n->slots = r.slots;
        n->port_lo = r.port_lo;
        n->port_hi = r.port_hi;
        snprintf(n->cred_hash, sizeof(n->cred_hash), "%s", cred_hash);
        snprintf(n->isolation, sizeof(n->isolation), "%s", r.isolation ? r.isolation : "");
        coord_node_set(n, NODE_READY);
        n->last_seen = now;
        n->last_beat_wall = wall;
        if (!same) {
            log_info("node re-registered with a new incarnation name=%s", r.name);
            coord_node_restarted(c, ni, now);
            coord_bump(n);
        }
    }
    coord_tick_locked(c, now);
    json_t *o = json_pack("{s:o, s:i, s:s}", "node", coord_node_json(c, ni, now),
                          "heartbeat_interval_ms", 1000, "credential", cred);
    *out = jsonx_dumps(o);
    json_decref(o);
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static const char *const node_admin_names[] = {"", "cordon", "drain"};

int coord_node_admin(struct coord *c, const char *name, const char *action, const char *reason,
                     int64_t now, char **out, struct ddp_err *err)
{
    int to = strcmp(action, "drain") == 0    ? NODE_DRAINED
             : strcmp(action, "cordon") == 0 ? NODE_CORDONED
                                             : NODE_SCHEDULABLE;
    int rc = 0;
    pthread_mutex_lock(&c->mu);
    int ni = coord_node_index(c, name);
    if (ni < 0) {
        rc = err_set(err, DDP_ENOTFOUND, "node %.64s not registered", name);
        goto out;
    }
    struct node *n = c->nodes[ni];
    struct node tmp = *n;
    tmp.admin = to;
    snprintf(tmp.admin_reason, sizeof(tmp.admin_reason), "%s", to ? (reason ? reason : "") : "");
    utf8_repair(tmp.admin_reason); /* cut to its size, maybe inside a character */
    rc = coord_put_node(c, &tmp, nodestate_is_up(n->state), n->last_beat_wall, err);
    if (rc)
        goto out;
    n->admin = to;
    snprintf(n->admin_reason, sizeof(n->admin_reason), "%s", tmp.admin_reason);
    log_info("node %s %s%s%s", name, to ? node_admin_names[to] : "uncordon",
             tmp.admin_reason[0] ? ": " : "", tmp.admin_reason);
    if (to == NODE_DRAINED) {
        /* elastic jobs that can re-form without the node move off it now, at no restart's
         * cost (END_SCALE); the others finish where they are */
        for (size_t i = 0; i < c->nlive; i++) {
            struct job *j = c->live[i];
            if (j->st.state != JOB_RUNNING || coord_group_rank(j, ni) < 0 ||
                j->st.npl - 1 < j->spec.nmin)
                continue;
            char why[REASON_MAX];
            snprintf(why, sizeof(why), "node %s drained by an admin%s%.300s: moving off it", name,
                     tmp.admin_reason[0] ? ": " : "", tmp.admin_reason);
            coord_end_noticed(c, j, why, now);
        }
    }
    coord_bump(n);
    coord_tick_locked(c, now);
    json_t *o = json_pack("{s:o}", "node", coord_node_json(c, ni, now));
    *out = jsonx_dumps(o);
    json_decref(o);
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

static int coord_node_delete(struct coord *c, void *ctx, struct ddp_err *e)
{
    return store_node_delete(c->store, ctx, e);
}

int coord_remove_node(struct coord *c, const char *name, int64_t now, char **out,
                      struct ddp_err *err)
{
    int rc = 0;
    struct ddp_err e;
    pthread_mutex_lock(&c->mu);
    int ni = coord_node_index(c, name);
    if (ni < 0) {
        rc = err_set(err, DDP_ENOTFOUND, "node %.64s not registered", name);
        goto out;
    }
    struct node *n = c->nodes[ni];
    if (coord_txn_run(c, coord_node_delete, n->name, &e) != 0) {
        log_error("cannot remove node %s: %s", name, e.msg);
        rc = err_set(err, DDP_EINTERNAL, "cannot remove the node: %s", e.msg);
        goto out;
    }
    json_t *o = json_pack("{s:o}", "node", coord_node_json(c, ni, now));
    *out = jsonx_dumps(o);
    json_decref(o);
    coord_node_removed(c, ni, now);
    log_info("node removed name=%s (its credential opens nothing; its jobs lose it)", name);
    coord_tick_locked(c, now);
out:
    pthread_mutex_unlock(&c->mu);
    return rc;
}

int coord_beat(struct coord *c, const char *name, const json_t *body, int64_t now, char **out,
               struct ddp_err *err)
{
    struct beat b;
    int rc = validate_beat(body, &b, err);
    if (rc)
        return rc;
    pthread_mutex_lock(&c->mu);
    int ni = coord_node_index(c, name);
    if (ni < 0) {
        rc = err_set(err, DDP_ENOTFOUND, "node %s not registered", name);
        goto out;
    }
    struct node *n = c->nodes[ni];
    if (strcmp(n->incarnation, b.incarnation) != 0) {
        rc = err_set(err, DDP_EABORTED,
                     "node %s: incarnation differs from the registered one; register again", name);
        goto out;
    }
    int64_t wall = coord_wall(c, now);
    int changed = 0, back = 0;
    if (!nodestate_is_up(n->state)) {
        /* Its row is written by the next tick, with every other node back since, in one
         * transaction, and the tick's scheduling pass places work on it: after a restart
         * or a leader change a thousand nodes come back within a second, and a commit
         * and a full pass for each, one after the other under c->mu, took 28 s (bench/ha). */
        coord_node_set(n, NODE_READY);
        n->row_stale = 1;
        c->nodes_stale = 1;
        back = 1;
        log_info("node %s READY again", n->name);
    }
    if (n->state == NODE_SUSPECT && now >= n->suspect_since) {
        coord_node_set(n, NODE_READY);
        log_info("node %s beat %lld ms after it was suspected (%s): READY, nothing changes",
                 n->name, (long long)(now - n->suspect_since), n->suspect_by);
    }
    n->last_seen = now;
    n->last_beat_wall = wall;
    /* The data goes first, so that an exit's reason can quote the rank's last lines; but
     * the worker states do not depend on it: a job whose ranks exit ends even while its
     * logs cannot be stored. A failed data part fails the beat below, after them. */
    int data_rc = coord_beat_data(c, ni, &b, now, err);
    if (strcmp(n->incarnation, b.incarnation) != 0) { /* re-registered meanwhile */
        rc = err_set(err, DDP_EABORTED,
                     "node %s: incarnation differs from the registered one; register again", name);
        goto out;
    }
    changed |= coord_beat_workers(c, ni, &b, now);
    changed |= coord_beat_drains(c, ni, &b);
    if (changed) {
        for (size_t i = 0; i < b.nworkers; i++) {
            struct job *j = coord_job(c, b.workers[i].job);
            if (j)
                coord_check_ranks(c, j, now);
        }
        for (size_t i = 0; i < b.nprogress; i++) {
            struct job *j = coord_job(c, b.progress[i].job);
            if (j && j->st.state == JOB_RUNNING) {
                coord_check_hang(c, j, now);
                coord_check_ranks(c, j, now);
            }
        }
        coord_beat_drains(c, ni, &b); /* generations this beat just ended */
        for (size_t i = 0; i < c->nlive; i++)
            coord_progress(c, c->live[i], now);
        coord_schedule(c, now);
    }
    if (data_rc) { /* err is filled; the agent keeps the data and sends it again */
        rc = data_rc;
        goto out;
    }
    if (!changed && !back && b.wait_ms > 0 && (uint64_t)b.version == n->version) {
        /* time_mono_ms() reads CLOCK_MONOTONIC, the clock of n->cond (coord_node_new()) */
        int64_t deadline = time_deadline_ms(b.wait_ms);
        struct timespec ts = {.tv_sec = deadline / 1000,
                              .tv_nsec = (long)(deadline % 1000) * 1000000L};
        while (!c->shutting_down && (uint64_t)b.version == n->version)
            if (pthread_cond_timedwait(&n->cond, &c->mu, &ts) != 0)
                break;
    }
    json_t *o = json_pack("{s:I, s:o, s:o}", "version", (json_int_t)n->version, "assignments",
                          coord_assignments(c, ni), "notices", coord_notices(c, ni));
    *out = jsonx_dumps(o);
    json_decref(o);
out:
    pthread_mutex_unlock(&c->mu);
    validate_beat_release(&b);
    return rc;
}

int coord_list_nodes(struct coord *c, int64_t now, char **out, struct ddp_err *err)
{
    json_t *arr = json_array();
    pthread_mutex_lock(&c->mu);
    for (size_t i = 0; i < c->nnodes; i++)
        if (!c->nodes[i]->removed)
            json_array_append_new(arr, coord_node_json(c, (int)i, now));
    pthread_mutex_unlock(&c->mu);
    json_t *o = json_pack("{s:o}", "nodes", arr);
    *out = jsonx_dumps(o);
    json_decref(o);
    (void)err;
    return 0;
}

static void coord_tick_locked(struct coord *c, int64_t now)
{
    int64_t wall = coord_wall(c, now);
    coord_flush_nodes(c);
    coord_nodes_expire(c, now);
    for (size_t i = 0; i < c->nlive; i++) {
        struct job *j = c->live[i];
        if (j->st.state != JOB_RUNNING)
            continue;
        for (int p = 0; p < j->st.npl; p++) {
            struct node *n = c->nodes[j->st.pl[p].node];
            if (coord_node_gone(c, n, now)) {
                char why[256];
                coord_lost_why(n, now, why, sizeof(why));
                coord_fail(j, CAUSE_NODE, why);
                break;
            }
        }
        coord_check_hang(c, j, now);
        if (!j->fail_reason[0] && j->spec.max_runtime_s > 0 && j->st.started_at &&
            wall - j->st.started_at > j->spec.max_runtime_s * 1000) {
            char reason[128];
            snprintf(reason, sizeof(reason), "max_runtime_s %lld exceeded",
                     (long long)j->spec.max_runtime_s);
            coord_end_generation(c, j, END_FINAL, reason, now, NULL);
            continue;
        }
        coord_check_ranks(c, j, now);
    }
    /* a node of a generation that ended for another reason is gone: likely the cause */
    for (size_t i = 0; i < c->nlive; i++) {
        struct job *j = c->live[i];
        if (j->st.state != JOB_RESTARTING || j->st.end_kind != END_FAILURE)
            continue;
        for (int p = 0; p < j->st.npl; p++) {
            struct node *n = c->nodes[j->st.pl[p].node];
            if (j->st.pl[p].draining && coord_node_gone(c, n, now)) {
                char why[256];
                coord_lost_why(n, now, why, sizeof(why));
                coord_refine(c, j, CAUSE_NODE, why, now);
            }
        }
    }
    for (size_t i = 0; i < c->nlive; i++)
        coord_progress(c, c->live[i], now);
    coord_schedule(c, now);
    coord_live_compact(c);
    coord_retain_sweep(c, now);
}

void coord_tick(struct coord *c, int64_t now)
{
    pthread_mutex_lock(&c->mu);
    coord_tick_locked(c, now);
    pthread_mutex_unlock(&c->mu);
}

void coord_counts(struct coord *c, int64_t jobs[JOB_STATE_COUNT], int64_t *nodes_ready,
                  int64_t *nodes_lost)
{
    pthread_mutex_lock(&c->mu);
    for (int s = 0; s < JOB_STATE_COUNT; s++)
        jobs[s] = 0;
    for (size_t i = 0; i < c->njobs; i++)
        if (c->jobs[i])
            jobs[c->jobs[i]->st.state]++;
    *nodes_ready = *nodes_lost = 0;
    for (size_t i = 0; i < c->nnodes; i++) {
        if (c->nodes[i]->removed)
            continue;
        if (nodestate_is_up(c->nodes[i]->state))
            (*nodes_ready)++;
        else
            (*nodes_lost)++;
    }
    pthread_mutex_unlock(&c->mu);
}

void coord_shutdown(struct coord *c)
{
    if (!c)
        return;
    pthread_mutex_lock(&c->mu);
    c->shutting_down = 1;
    for (size_t i = 0; i < c->nnodes; i++)
        pthread_cond_broadcast(&c->nodes[i]->cond);
    pthread_mutex_unlock(&c->mu);
}

void coord_retire(struct coord *c)
{
    if (!c)
        return;
    coord_shutdown(c);
    pthread_mutex_lock(&c->store_mu);
    c->retired = 1;
    pthread_mutex_unlock(&c->store_mu);
}

int coord_storage_failed(struct coord *c)
{
    pthread_mutex_lock(&c->store_mu);
    int r = c->storage_failed;
    pthread_mutex_unlock(&c->store_mu);
    return r;
}

int coord_retired(struct coord *c)
{
    return atomic_load(&c->retired); /* no lock: a transaction may hold store_mu for long */
}

int coord_open(const char *db_path, const struct coord_opts *opts, int64_t now, struct coord **out,
               struct ddp_err *err)
{
    struct store *st = NULL;
    int rc = store_open(db_path, &st, err);
    if (rc)
        return rc;
    return coord_open_store(st, db_path, db_path, opts, now, out, err);
}

int coord_open_store(struct store *st, const char *db_path, const char *where,
                     const struct coord_opts *opts, int64_t now, struct coord **out,
                     struct ddp_err *err)
{
    struct coord *c = xcalloc(1, sizeof(*c));
    int rc;
    pthread_mutex_init(&c->mu, NULL);
    pthread_mutex_init(&c->store_mu, NULL);
    pthread_mutex_init(&c->health_mu, NULL);
    pthread_cond_init(&c->data_cond, NULL);
    c->opts.node_timeout_ms = 5000;
    c->opts.log_cap = 100000;
    c->opts.metric_cap = 10000;
    c->opts.drain_extra_ms = 10000;
    c->opts.suspect_timeout_ms = 1000;
    c->opts.max_nodes = 4096;
    c->opts.max_jobs_per_user = 10000;
    if (opts) {
        if (opts->node_timeout_ms > 0)
            c->opts.node_timeout_ms = opts->node_timeout_ms;
        if (opts->log_cap > 0)
            c->opts.log_cap = opts->log_cap;
        if (opts->metric_cap > 0)
            c->opts.metric_cap = opts->metric_cap;
        if (opts->drain_extra_ms > 0)
            c->opts.drain_extra_ms = opts->drain_extra_ms;
        if (opts->suspect_timeout_ms != 0)
            c->opts.suspect_timeout_ms =
                opts->suspect_timeout_ms < 0 ? -1 : opts->suspect_timeout_ms;
        if (opts->max_nodes > 0)
            c->opts.max_nodes = opts->max_nodes;
        if (opts->max_jobs_per_user > 0)
            c->opts.max_jobs_per_user = opts->max_jobs_per_user;
        c->opts.max_user_priority = opts->max_user_priority;
        if (opts->job_ttl_ms > 0)
            c->opts.job_ttl_ms = opts->job_ttl_ms;
        c->opts.fence_epoch = opts->fence_epoch;
    }
    if (c->opts.suspect_timeout_ms > c->opts.node_timeout_ms)
        c->opts.suspect_timeout_ms = c->opts.node_timeout_ms;
    c->wall_offset = time_wall_ms() - now;
    c->version_base = (uint64_t)time_wall_ms();
    c->db_path = db_path ? xstrdup(db_path) : NULL;
    c->store = st;
    rc = coord_load(c, now, err);
    if (!rc)
        rc = coord_users_load(c, err);
    if (rc)
        goto out;
    log_info("state loaded db=%s jobs=%zu nodes=%zu users=%zu", where, c->njobs, c->nnodes,
             c->nusers);
    *out = c;
    c = NULL;
out:
    coord_close(c);
    return rc;
}

void coord_close(struct coord *c)
{
    if (!c)
        return;
    for (size_t i = 0; i < c->njobs; i++)
        coord_job_free(c->jobs[i]);
    free(c->jobs);
    free(c->live);
    free(c->nhash);
    for (size_t i = 0; i < c->nnodes; i++)
        coord_node_free(c->nodes[i]);
    free(c->nodes);
    free(c->users);
    free(c->groups);
    store_close(c->store);
    free(c->db_path);
    if (c->open) { /* none without a beat waiting for it: only when a caller broke the rule */
        coord_batch_release(c->open);
        free(c->open);
    }
    pthread_cond_destroy(&c->data_cond);
    pthread_mutex_destroy(&c->health_mu);
    pthread_mutex_destroy(&c->store_mu);
    pthread_mutex_destroy(&c->mu);
    free(c);
}
