/*
 * store.c - ddpd's persistence: the SQL of every read and write, the migrations, and the
 * mapping between rows and structs, run through a backend (store_internal.h): the SQLite
 * file (store_sqlite.c, the default) or a dqlite cluster (store_dqlite.c).
 *
 * Invariants:
 *   1. The schema is exactly the embedded migrations schema/NNN_*.sql with NNN <=
 *      PRAGMA user_version; each migration and its user_version bump commit together.
 *   2. Durability is the backend's: SQLite in WAL with synchronous=FULL, dqlite a Raft
 *      commit on a majority; either way a COMMIT that returned survives kill -9.
 *   3. Statements are prepared once at open and reset after each use; no SQL outside
 *      store_sql[] and the migrations.
 */
#include "server/store.h"

#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "common/xalloc.h"
#include "server/embed.h"
#include "server/store_internal.h"

static const char *const store_sql[ST_COUNT] = {
    [ST_BEGIN] = "BEGIN IMMEDIATE",
    [ST_COMMIT] = "COMMIT",
    [ST_ROLLBACK] = "ROLLBACK",
    /* An existing row keeps its log_seq, metric_seq and last_metrics: after the insert they
     * belong to the heartbeat data (ST_JOB_DATA), committed in batches of their own. */
    [ST_JOB_PUT] = "INSERT INTO jobs (id, name, spec, state, generation, restarts, "
                   "world_size, master_addr, master_port, nodes, last_metrics, reason, "
                   "created_at, started_at, finished_at, job_token, log_seq, metric_seq, "
                   "event_seq, end_kind, end_reason, owner, request_id) VALUES "
                   "(?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13,?14,?15,?16,?17,?18,?19,?20,?21,"
                   "?22,?23) "
                   "ON CONFLICT (id) DO UPDATE SET name = excluded.name, spec = excluded.spec, "
                   "state = excluded.state, generation = excluded.generation, "
                   "restarts = excluded.restarts, world_size = excluded.world_size, "
                   "master_addr = excluded.master_addr, master_port = excluded.master_port, "
                   "nodes = excluded.nodes, reason = excluded.reason, "
                   "created_at = excluded.created_at, started_at = excluded.started_at, "
                   "finished_at = excluded.finished_at, job_token = excluded.job_token, "
                   "event_seq = excluded.event_seq, end_kind = excluded.end_kind, "
                   "end_reason = excluded.end_reason, owner = excluded.owner, "
                   "request_id = excluded.request_id",
    [ST_EVENT_ADD] = "INSERT INTO events (job_id, seq, time, generation, state, reason) "
                     "VALUES (?1,?2,?3,?4,?5,?6)",
    /* The heartbeat data (metrics, logs, marks) is written only while its job's row exists:
     * a batch built before a job was deleted and committed after it leaves nothing behind. */
    [ST_METRIC_ADD] = "INSERT OR REPLACE INTO metrics (job_id, seq, time, generation, metric) "
                      "SELECT ?1,?2,?3,?4,?5 WHERE EXISTS (SELECT 1 FROM jobs WHERE id = ?1)",
    [ST_METRIC_TRIM] = "DELETE FROM metrics WHERE job_id = ?1 AND seq <= ?2",
    [ST_LOG_ADD] = "INSERT OR REPLACE INTO logs (job_id, seq, generation, rank, text) "
                   "SELECT ?1,?2,?3,?4,?5 WHERE EXISTS (SELECT 1 FROM jobs WHERE id = ?1)",
    [ST_LOG_TRIM] = "DELETE FROM logs WHERE job_id = ?1 AND seq <= ?2",
    [ST_MARK_PUT] = "INSERT OR REPLACE INTO marks (job_id, generation, rank, last_seq) "
                    "SELECT ?1,?2,?3,?4 WHERE EXISTS (SELECT 1 FROM jobs WHERE id = ?1)",
    [ST_MARK_DROP] = "DELETE FROM marks WHERE job_id = ?1 AND generation < ?2",
    [ST_NODE_PUT] = "INSERT OR REPLACE INTO nodes (name, address, slots, port_lo, port_hi, "
                    "incarnation, state, registered_at, last_heartbeat, credential_hash, "
                    "admin_state, admin_reason, labels) "
                    "VALUES (?1,?2,?3,?4,?5,?6,?7,?8,?9,?10,?11,?12,?13)",
    [ST_NODE_DELETE] = "DELETE FROM nodes WHERE name = ?1",
    [ST_USER_PUT] = "INSERT OR REPLACE INTO users (name, role, token_hash, created_at, max_slots, "
                    "group_name) VALUES (?1,?2,?3,?4,?5,?6)",
    [ST_USER_DELETE] = "DELETE FROM users WHERE name = ?1",
    [ST_GROUP_PUT] = "INSERT OR REPLACE INTO groups (name, max_slots) VALUES (?1,?2)",
    [ST_JOB_DATA] = "UPDATE jobs SET log_seq = MAX(log_seq, ?2), metric_seq = MAX(metric_seq, ?3), "
                    "last_metrics = COALESCE(?4, last_metrics) WHERE id = ?1",
    [ST_EVENTS] = "SELECT seq, time, generation, state, reason FROM events "
                  "WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
    [ST_METRICS] = "SELECT seq, time, generation, metric FROM metrics "
                   "WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
    [ST_LOGS_ALL] = "SELECT seq, rank, generation, text FROM logs "
                    "WHERE job_id = ?1 AND seq > ?2 ORDER BY seq LIMIT ?3",
    /* One rank: along logs_by_rank (job_id, rank, seq), named because the planner, without
     * statistics, walks the primary key instead and filters on rank, which reads every line
     * of the other ranks too (the whole log, for a rank that wrote little). */
    [ST_LOGS_RANK] = "SELECT seq, rank, generation, text FROM logs INDEXED BY logs_by_rank "
                     "WHERE job_id = ?1 AND rank = ?4 AND seq > ?2 ORDER BY seq LIMIT ?3",
    /* The tail: newest first, walking the primary key (job_id, seq) or logs_by_rank
     * backwards from the end, so it reads only the rows it returns. */
    [ST_LOGS_TAIL_ALL] = "SELECT seq, rank, generation, text FROM logs "
                         "WHERE job_id = ?1 AND seq > ?2 ORDER BY seq DESC LIMIT ?3",
    [ST_LOGS_TAIL_RANK] = "SELECT seq, rank, generation, text FROM logs INDEXED BY logs_by_rank "
                          "WHERE job_id = ?1 AND rank = ?4 AND seq > ?2 ORDER BY seq DESC "
                          "LIMIT ?3",
    [ST_LAST_LINES] = "SELECT text FROM logs WHERE job_id = ?1 AND generation = ?2 AND "
                      "rank = ?3 ORDER BY seq DESC LIMIT ?4",
    [ST_DEL_LOGS] = "DELETE FROM logs WHERE job_id = ?1",
    [ST_DEL_METRICS] = "DELETE FROM metrics WHERE job_id = ?1",
    [ST_DEL_EVENTS] = "DELETE FROM events WHERE job_id = ?1",
    [ST_DEL_MARKS] = "DELETE FROM marks WHERE job_id = ?1",
    [ST_DEL_JOB] = "DELETE FROM jobs WHERE id = ?1",
    [ST_DELETED_MAX] = "UPDATE job_ids SET deleted_max = MAX(deleted_max, ?1) WHERE one = 1",
    [ST_LAST_JOB_ID] = "SELECT MAX((SELECT COALESCE(MAX(id), 0) FROM jobs), "
                       "(SELECT COALESCE(MAX(deleted_max), 0) FROM job_ids))",
    [ST_LOAD_JOBS] = "SELECT id, name, spec, state, generation, restarts, world_size, "
                     "master_addr, master_port, nodes, last_metrics, reason, created_at, "
                     "started_at, finished_at, job_token, log_seq, metric_seq, event_seq, "
                     "end_kind, end_reason, owner, request_id FROM jobs WHERE id > ?1 "
                     "ORDER BY id LIMIT ?2",
    [ST_LOAD_NODES] = "SELECT name, address, slots, port_lo, port_hi, incarnation, state, "
                      "registered_at, last_heartbeat, credential_hash, admin_state, admin_reason, "
                      "labels "
                      "FROM nodes ORDER BY name",
    [ST_LOAD_MARKS] = "SELECT job_id, generation, rank, last_seq FROM marks "
                      "ORDER BY job_id, generation, rank",
    [ST_LOAD_USERS] = "SELECT name, role, token_hash, created_at, max_slots, group_name "
                      "FROM users ORDER BY name",
    [ST_LOAD_GROUPS] = "SELECT name, max_slots FROM groups ORDER BY name",
    [ST_EPOCH] = "SELECT epoch FROM ddp_epoch WHERE id = 1",
};

static void q_int(struct store *st, int w, int i, int64_t v)
{
    st->ops->bind_int(st->be, w, i, v);
}

/* Text, or SQL NULL for NULL. */
static void q_text(struct store *st, int w, int i, const char *v)
{
    if (v)
        st->ops->bind_text(st->be, w, i, v);
    else
        st->ops->bind_null(st->be, w, i);
}

/* A time in ms, or SQL NULL for 0. */
static void q_time(struct store *st, int w, int i, int64_t v)
{
    if (v)
        st->ops->bind_int(st->be, w, i, v);
    else
        st->ops->bind_null(st->be, w, i);
}

/* 1: a row; 0: done; < 0: error (err filled). */
static int q_step(struct store *st, int w, struct ddp_err *err)
{
    return st->ops->step(st->be, w, err);
}

static int64_t q_col_int(struct store *st, int w, int i)
{
    return st->ops->col_int(st->be, w, i);
}

static const char *q_col_text(struct store *st, int w, int i)
{
    return st->ops->col_text(st->be, w, i);
}

static void q_reset(struct store *st, int w)
{
    st->ops->reset(st->be, w);
}

/* Runs a prepared statement that returns no rows, then resets it. */
static int store_step_done(struct store *st, int which, struct ddp_err *err)
{
    int r = q_step(st, which, err);
    int rc = r;
    if (r > 0)
        rc = err_set(err, DDP_EINTERNAL, "store statement %d returned rows", which);
    q_reset(st, which);
    return rc;
}

static int store_exec(struct store *st, const char *sql, struct ddp_err *err)
{
    return st->ops->exec(st->be, sql, err);
}

int store_schema_version(struct store *st)
{
    return st->ops->user_version(st->be);
}

/* Migration number of "schema/NNN_name.sql", or -1 if the name is not a migration. */
static int store_migration_number(const char *name)
{
    if (strncmp(name, "schema/", 7) != 0)
        return -1;
    const char *p = name + 7;
    int v = 0, digits = 0;
    while (*p >= '0' && *p <= '9' && digits < 6) {
        v = v * 10 + (*p - '0');
        p++;
        digits++;
    }
    size_t n = strlen(name);
    if (digits == 0 || *p != '_' || n < 4 || strcmp(name + n - 4, ".sql") != 0)
        return -1;
    return v;
}

static int store_migrate(struct store *st, struct ddp_err *err)
{
    int have = store_schema_version(st);
    if (have < 0)
        return err_set(err, DDP_EIO, "%s: cannot read user_version", st->ops->name);
    /* embed_files is sorted by name, so migrations come in number order */
    for (size_t i = 0; i < embed_nfiles; i++) {
        int num = store_migration_number(embed_files[i].name);
        if (num <= have)
            continue;
        int rc = store_exec(st, "BEGIN IMMEDIATE", err);
        if (rc)
            return rc;
        rc = store_exec(st, (const char *)embed_files[i].data, err);
        if (!rc) {
            char sql[64];
            snprintf(sql, sizeof(sql), "PRAGMA user_version = %d", num);
            rc = store_exec(st, sql, err);
        }
        if (!rc)
            rc = store_exec(st, "COMMIT", err);
        if (rc) {
            store_exec(st, "ROLLBACK", NULL);
            return rc;
        }
        log_info("schema migration applied name=%s version=%d", embed_files[i].name, num);
        have = num;
    }
    return 0;
}

/* Migrates the backend's database and prepares every statement: the store, or NULL (the
 * backend closed). */
static int store_start(const struct store_ops *ops, void *be, struct store **out,
                       struct ddp_err *err)
{
    struct store *st = xcalloc(1, sizeof(*st));
    st->ops = ops;
    st->be = be;
    int rc = store_migrate(st, err);
    for (int i = 0; !rc && i < ST_COUNT; i++)
        rc = ops->prepare(be, i, store_sql[i], err);
    if (rc) {
        store_close(st);
        return rc;
    }
    *out = st;
    return 0;
}

int store_open(const char *path, struct store **out, struct ddp_err *err)
{
    void *be = NULL;
    int rc = store_sqlite_open(path, &be, err);
    if (rc)
        return rc;
    return store_start(&store_sqlite_ops, be, out, err);
}

int store_open_dqlite(const char *const *addrs, size_t naddrs, const char *db,
                      const struct dqclient_opts *opts, struct store **out, struct ddp_err *err)
{
    void *be = NULL;
    int rc = store_dqlite_open(addrs, naddrs, db, opts, &be, err);
    if (rc)
        return rc;
    return store_start(&store_dqlite_ops, be, out, err);
}

void store_close(struct store *st)
{
    if (!st)
        return;
    st->ops->close(st->be);
    free(st);
}

int store_begin(struct store *st, struct ddp_err *err)
{
    int rc = store_step_done(st, ST_BEGIN, err);
    if (!rc)
        st->in_tx = 1;
    return rc;
}

int store_commit(struct store *st, struct ddp_err *err)
{
    int rc = store_step_done(st, ST_COMMIT, err);
    if (!rc)
        st->in_tx = 0;
    return rc;
}

int store_storage_failed(const struct store *st)
{
    return st->ops->storage_failed(st->be);
}

void store_rollback(struct store *st)
{
    if (st->ops->in_tx(st->be))
        store_step_done(st, ST_ROLLBACK, NULL);
    st->in_tx = 0;
}

int store_job_put(struct store *st, const struct store_job *j, struct ddp_err *err)
{
    int s = ST_JOB_PUT;
    q_int(st, s, 1, j->id);
    q_text(st, s, 2, j->name);
    q_text(st, s, 3, j->spec);
    q_text(st, s, 4, j->state);
    q_int(st, s, 5, j->generation);
    q_int(st, s, 6, j->restarts);
    q_int(st, s, 7, j->world_size);
    q_text(st, s, 8, j->master_addr ? j->master_addr : "");
    q_int(st, s, 9, j->master_port);
    q_text(st, s, 10, j->nodes ? j->nodes : "[]");
    q_text(st, s, 11, j->last_metrics);
    q_text(st, s, 12, j->reason ? j->reason : "");
    q_int(st, s, 13, j->created_at);
    q_time(st, s, 14, j->started_at);
    q_time(st, s, 15, j->finished_at);
    q_text(st, s, 16, j->job_token);
    q_int(st, s, 17, j->log_seq);
    q_int(st, s, 18, j->metric_seq);
    q_int(st, s, 19, j->event_seq);
    q_int(st, s, 20, j->end_kind);
    q_text(st, s, 21, j->end_reason ? j->end_reason : "");
    q_text(st, s, 22, j->owner ? j->owner : "admin");
    q_text(st, s, 23, j->request_id);
    return store_step_done(st, ST_JOB_PUT, err);
}

int store_event_add(struct store *st, int64_t job, int64_t seq, int64_t time, int64_t gen,
                    const char *state, const char *reason, struct ddp_err *err)
{
    int s = ST_EVENT_ADD;
    q_int(st, s, 1, job);
    q_int(st, s, 2, seq);
    q_int(st, s, 3, time);
    q_int(st, s, 4, gen);
    q_text(st, s, 5, state);
    q_text(st, s, 6, reason);
    return store_step_done(st, ST_EVENT_ADD, err);
}

int store_metric_add(struct store *st, int64_t job, int64_t seq, int64_t time, int64_t gen,
                     const char *metric, struct ddp_err *err)
{
    int s = ST_METRIC_ADD;
    q_int(st, s, 1, job);
    q_int(st, s, 2, seq);
    q_int(st, s, 3, time);
    q_int(st, s, 4, gen);
    q_text(st, s, 5, metric);
    return store_step_done(st, ST_METRIC_ADD, err);
}

int store_metric_trim(struct store *st, int64_t job, int64_t upto, struct ddp_err *err)
{
    int s = ST_METRIC_TRIM;
    q_int(st, s, 1, job);
    q_int(st, s, 2, upto);
    return store_step_done(st, ST_METRIC_TRIM, err);
}

int store_log_add(struct store *st, int64_t job, int64_t seq, int64_t gen, int64_t rank,
                  const char *text, struct ddp_err *err)
{
    int s = ST_LOG_ADD;
    q_int(st, s, 1, job);
    q_int(st, s, 2, seq);
    q_int(st, s, 3, gen);
    q_int(st, s, 4, rank);
    q_text(st, s, 5, text);
    return store_step_done(st, ST_LOG_ADD, err);
}

int store_log_trim(struct store *st, int64_t job, int64_t upto, struct ddp_err *err)
{
    int s = ST_LOG_TRIM;
    q_int(st, s, 1, job);
    q_int(st, s, 2, upto);
    return store_step_done(st, ST_LOG_TRIM, err);
}

int store_mark_put(struct store *st, int64_t job, int64_t gen, int64_t rank, int64_t last_seq,
                   struct ddp_err *err)
{
    int s = ST_MARK_PUT;
    q_int(st, s, 1, job);
    q_int(st, s, 2, gen);
    q_int(st, s, 3, rank);
    q_int(st, s, 4, last_seq);
    return store_step_done(st, ST_MARK_PUT, err);
}

int store_marks_drop(struct store *st, int64_t job, int64_t below_gen, struct ddp_err *err)
{
    int s = ST_MARK_DROP;
    q_int(st, s, 1, job);
    q_int(st, s, 2, below_gen);
    return store_step_done(st, ST_MARK_DROP, err);
}

int store_job_data(struct store *st, int64_t job, int64_t log_seq, int64_t metric_seq,
                   const char *last_metrics, struct ddp_err *err)
{
    int s = ST_JOB_DATA;
    q_int(st, s, 1, job);
    q_int(st, s, 2, log_seq);
    q_int(st, s, 3, metric_seq);
    q_text(st, s, 4, last_metrics);
    return store_step_done(st, ST_JOB_DATA, err);
}

int store_job_delete(struct store *st, int64_t job, struct ddp_err *err)
{
    static const int steps[] = {ST_DEL_LOGS,  ST_DEL_METRICS, ST_DEL_EVENTS,
                                ST_DEL_MARKS, ST_DEL_JOB,     ST_DELETED_MAX};
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof(steps) / sizeof(steps[0]); i++) {
        q_int(st, steps[i], 1, job);
        rc = store_step_done(st, steps[i], err);
    }
    return rc;
}

int store_epoch(struct store *st, int64_t *out, struct ddp_err *err)
{
    int s = ST_EPOCH;
    int r = q_step(st, s, err);
    *out = r == 1 ? q_col_int(st, s, 0) : 0;
    q_reset(st, s);
    return r < 0 ? r : 0;
}

int store_last_job_id(struct store *st, int64_t *out, struct ddp_err *err)
{
    int s = ST_LAST_JOB_ID;
    int rc = 0;
    int r = q_step(st, s, err);
    if (r == 1)
        *out = q_col_int(st, s, 0);
    else
        rc = r < 0 ? r : err_set(err, DDP_EIO, "last job id: no row");
    q_reset(st, s);
    return rc;
}

int store_node_put(struct store *st, const struct store_node *n, struct ddp_err *err)
{
    int s = ST_NODE_PUT;
    q_text(st, s, 1, n->name);
    q_text(st, s, 2, n->address);
    q_int(st, s, 3, n->slots);
    q_int(st, s, 4, n->port_lo);
    q_int(st, s, 5, n->port_hi);
    q_text(st, s, 6, n->incarnation);
    q_text(st, s, 7, n->state);
    q_int(st, s, 8, n->registered_at);
    q_time(st, s, 9, n->last_heartbeat);
    q_text(st, s, 10, n->credential_hash ? n->credential_hash : "");
    q_text(st, s, 11, n->admin_state ? n->admin_state : "");
    q_text(st, s, 12, n->admin_reason ? n->admin_reason : "");
    q_text(st, s, 13, n->labels ? n->labels : "{}");
    return store_step_done(st, ST_NODE_PUT, err);
}

int store_node_delete(struct store *st, const char *name, struct ddp_err *err)
{
    q_text(st, ST_NODE_DELETE, 1, name);
    return store_step_done(st, ST_NODE_DELETE, err);
}

int store_user_put(struct store *st, const struct store_user *u, struct ddp_err *err)
{
    int s = ST_USER_PUT;
    q_text(st, s, 1, u->name);
    q_text(st, s, 2, u->role);
    q_text(st, s, 3, u->token_hash);
    q_int(st, s, 4, u->created_at);
    q_int(st, s, 5, u->max_slots);
    q_text(st, s, 6, u->group ? u->group : "");
    return store_step_done(st, ST_USER_PUT, err);
}

int store_group_put(struct store *st, const char *name, int64_t max_slots, struct ddp_err *err)
{
    q_text(st, ST_GROUP_PUT, 1, name);
    q_int(st, ST_GROUP_PUT, 2, max_slots);
    return store_step_done(st, ST_GROUP_PUT, err);
}

int store_user_delete(struct store *st, const char *name, struct ddp_err *err)
{
    q_text(st, ST_USER_DELETE, 1, name);
    return store_step_done(st, ST_USER_DELETE, err);
}

/* One page of store_load_jobs(): every row to fn; *after the last id, *rows the count, *r the
 * last step's result. */
static int store_load_jobs_page(struct store *st, store_job_fn fn, void *ctx, int64_t *after,
                                int64_t *rows, int *r, struct ddp_err *err)
{
    int s = ST_LOAD_JOBS;
    int rc = 0;
    while ((*r = q_step(st, s, err)) == 1) {
        struct store_job j = {
            .id = q_col_int(st, s, 0),
            .name = q_col_text(st, s, 1),
            .spec = q_col_text(st, s, 2),
            .state = q_col_text(st, s, 3),
            .generation = q_col_int(st, s, 4),
            .restarts = q_col_int(st, s, 5),
            .world_size = q_col_int(st, s, 6),
            .master_addr = q_col_text(st, s, 7),
            .master_port = q_col_int(st, s, 8),
            .nodes = q_col_text(st, s, 9),
            .last_metrics = q_col_text(st, s, 10),
            .reason = q_col_text(st, s, 11),
            .created_at = q_col_int(st, s, 12),
            .started_at = q_col_int(st, s, 13),
            .finished_at = q_col_int(st, s, 14),
            .job_token = q_col_text(st, s, 15),
            .log_seq = q_col_int(st, s, 16),
            .metric_seq = q_col_int(st, s, 17),
            .event_seq = q_col_int(st, s, 18),
            .end_kind = q_col_int(st, s, 19),
            .end_reason = q_col_text(st, s, 20),
            .owner = q_col_text(st, s, 21),
            .request_id = q_col_text(st, s, 22),
        };
        *after = j.id;
        (*rows)++;
        rc = fn(ctx, &j);
        if (rc)
            break;
    }
    q_reset(st, s);
    return rc;
}

/* Jobs a page of the load: a replicated store answers a query in one result of at most
 * DQCLIENT_MAX_RESULT (64 MiB), and a spec may be up to HTTP_BODY_MAX (1 MiB), so a page of
 * 32 rows always fits however many jobs the store keeps. */
#define STORE_LOAD_PAGE 32

int store_load_jobs(struct store *st, store_job_fn fn, void *ctx, struct ddp_err *err)
{
    int s = ST_LOAD_JOBS;
    int rc = 0, r = 0;
    int64_t after = 0, rows = STORE_LOAD_PAGE;
    while (!rc && r >= 0 && rows == STORE_LOAD_PAGE) {
        rows = 0;
        q_int(st, s, 1, after);
        q_int(st, s, 2, STORE_LOAD_PAGE);
        rc = store_load_jobs_page(st, fn, ctx, &after, &rows, &r, err);
    }
    if (!rc && r < 0)
        rc = r;
    return rc;
}

int store_load_nodes(struct store *st, store_node_fn fn, void *ctx, struct ddp_err *err)
{
    int s = ST_LOAD_NODES;
    int rc = 0, r;
    while ((r = q_step(st, s, err)) == 1) {
        struct store_node n = {
            .name = q_col_text(st, s, 0),
            .address = q_col_text(st, s, 1),
            .slots = q_col_int(st, s, 2),
            .port_lo = q_col_int(st, s, 3),
            .port_hi = q_col_int(st, s, 4),
            .incarnation = q_col_text(st, s, 5),
            .state = q_col_text(st, s, 6),
            .registered_at = q_col_int(st, s, 7),
            .last_heartbeat = q_col_int(st, s, 8),
            .credential_hash = q_col_text(st, s, 9),
            .admin_state = q_col_text(st, s, 10),
            .admin_reason = q_col_text(st, s, 11),
            .labels = q_col_text(st, s, 12),
        };
        rc = fn(ctx, &n);
        if (rc)
            break;
    }
    if (!rc && r < 0)
        rc = r;
    q_reset(st, s);
    return rc;
}

int store_load_marks(struct store *st, store_mark_fn fn, void *ctx, struct ddp_err *err)
{
    int s = ST_LOAD_MARKS;
    int rc = 0, r;
    while ((r = q_step(st, s, err)) == 1) {
        rc = fn(ctx, q_col_int(st, s, 0), q_col_int(st, s, 1), q_col_int(st, s, 2),
                q_col_int(st, s, 3));
        if (rc)
            break;
    }
    if (!rc && r < 0)
        rc = r;
    q_reset(st, s);
    return rc;
}

int store_load_users(struct store *st, store_user_fn fn, void *ctx, struct ddp_err *err)
{
    int s = ST_LOAD_USERS;
    int rc = 0, r;
    while ((r = q_step(st, s, err)) == 1) {
        struct store_user u = {
            .name = q_col_text(st, s, 0),
            .role = q_col_text(st, s, 1),
            .token_hash = q_col_text(st, s, 2),
            .created_at = q_col_int(st, s, 3),
            .max_slots = q_col_int(st, s, 4),
            .group = q_col_text(st, s, 5),
        };
        rc = fn(ctx, &u);
        if (rc)
            break;
    }
    if (!rc && r < 0)
        rc = r;
    q_reset(st, s);
    return rc;
}

int store_load_groups(struct store *st, store_group_fn fn, void *ctx, struct ddp_err *err)
{
    int s = ST_LOAD_GROUPS;
    int rc = 0, r;
    while ((r = q_step(st, s, err)) == 1) {
        rc = fn(ctx, q_col_text(st, s, 0), q_col_int(st, s, 1));
        if (rc)
            break;
    }
    if (!rc && r < 0)
        rc = r;
    q_reset(st, s);
    return rc;
}

static json_t *store_time_json(int64_t ms)
{
    char buf[40];
    time_format_rfc3339(ms, buf, sizeof(buf));
    return json_string(buf);
}

/* Runs a SELECT prepared with (job, after, limit[, rank]) and turns each row into an
 * object with row_fn. */
static int store_query(struct store *st, int which, int64_t job, int64_t after, int limit, int rank,
                       json_t *(*row_fn)(struct store *, int), json_t **out, struct ddp_err *err)
{
    int s = which;
    json_t *arr = json_array();
    int r, rc = 0;
    q_int(st, s, 1, job);
    q_int(st, s, 2, after);
    q_int(st, s, 3, limit);
    if (which == ST_LOGS_RANK || which == ST_LOGS_TAIL_RANK)
        q_int(st, s, 4, rank);
    while ((r = q_step(st, s, err)) == 1)
        json_array_append_new(arr, row_fn(st, s));
    if (r < 0)
        rc = r;
    q_reset(st, s);
    if (rc) {
        json_decref(arr);
        return rc;
    }
    *out = arr;
    return 0;
}

static json_t *store_event_row(struct store *st, int s)
{
    /* a reason stored before reasons were kept well-formed (coord_commit) may end inside a
     * character: repaired here, or jansson would refuse the row and the event would vanish */
    const char *why = q_col_text(st, s, 4);
    char *reason = xstrdup(why ? why : "");
    utf8_repair(reason);
    const char *state = q_col_text(st, s, 3);
    json_t *o =
        json_pack("{s:I, s:o, s:I, s:s, s:s}", "seq", (json_int_t)q_col_int(st, s, 0), "time",
                  store_time_json(q_col_int(st, s, 1)), "generation",
                  (json_int_t)q_col_int(st, s, 2), "state", state ? state : "", "reason", reason);
    free(reason);
    return o;
}

static json_t *store_metric_row(struct store *st, int s)
{
    const char *text = q_col_text(st, s, 3);
    json_t *m = json_loads(text ? text : "{}", 0, NULL);
    if (!m)
        m = json_object();
    return json_pack("{s:I, s:o, s:I, s:o}", "seq", (json_int_t)q_col_int(st, s, 0), "time",
                     store_time_json(q_col_int(st, s, 1)), "generation",
                     (json_int_t)q_col_int(st, s, 2), "metric", m);
}

static json_t *store_log_row(struct store *st, int s)
{
    const char *text = q_col_text(st, s, 3);
    return json_pack("{s:I, s:I, s:I, s:s}", "seq", (json_int_t)q_col_int(st, s, 0), "rank",
                     (json_int_t)q_col_int(st, s, 1), "generation", (json_int_t)q_col_int(st, s, 2),
                     "text", text ? text : "");
}

int store_events_json(struct store *st, int64_t job, int64_t after, int limit, json_t **out,
                      struct ddp_err *err)
{
    return store_query(st, ST_EVENTS, job, after, limit, 0, store_event_row, out, err);
}

int store_metrics_json(struct store *st, int64_t job, int64_t after, int limit, json_t **out,
                       struct ddp_err *err)
{
    return store_query(st, ST_METRICS, job, after, limit, 0, store_metric_row, out, err);
}

int store_logs_json(struct store *st, int64_t job, int rank, int64_t after, int limit, json_t **out,
                    struct ddp_err *err)
{
    if (limit >= 0)
        return store_query(st, rank < 0 ? ST_LOGS_ALL : ST_LOGS_RANK, job, after, limit, rank,
                           store_log_row, out, err);
    /* The last -limit lines: read newest first, then put back in seq order. */
    json_t *desc = NULL;
    int rc = store_query(st, rank < 0 ? ST_LOGS_TAIL_ALL : ST_LOGS_TAIL_RANK, job, after,
                         limit == INT_MIN ? INT_MAX : -limit, rank, store_log_row, &desc, err);
    if (rc)
        return rc;
    json_t *arr = json_array();
    for (size_t i = json_array_size(desc); i > 0; i--)
        json_array_append(arr, json_array_get(desc, i - 1));
    json_decref(desc);
    *out = arr;
    return 0;
}

int store_logs_text(struct store *st, int64_t job, int64_t after, int64_t upto, int limit,
                    struct buf *out, int64_t *last, int *nrows, struct ddp_err *err)
{
    int s = ST_LOGS_ALL;
    int r, rc = 0, n = 0;
    int64_t seq = after;
    q_int(st, s, 1, job);
    q_int(st, s, 2, after);
    q_int(st, s, 3, limit);
    while ((r = q_step(st, s, err)) == 1) {
        int64_t q = q_col_int(st, s, 0);
        if (q > upto)
            break;
        const char *t = q_col_text(st, s, 3);
        if (buf_addstr(out, t ? t : "") != 0 || buf_add(out, "\n", 1) != 0) {
            rc = err_set(err, DDP_ETOOBIG, "log text over the buffer's limit");
            break;
        }
        seq = q;
        n++;
    }
    if (!rc && r < 0)
        rc = r;
    q_reset(st, s);
    if (rc)
        return rc;
    *last = seq;
    *nrows = n;
    return 0;
}

int store_last_lines(struct store *st, int64_t job, int64_t gen, int64_t rank, int n, json_t **out,
                     struct ddp_err *err)
{
    int s = ST_LAST_LINES;
    json_t *arr = json_array();
    int r, rc = 0;
    q_int(st, s, 1, job);
    q_int(st, s, 2, gen);
    q_int(st, s, 3, rank);
    q_int(st, s, 4, n);
    while ((r = q_step(st, s, err)) == 1) {
        const char *t = q_col_text(st, s, 0);
        json_array_insert_new(arr, 0, json_string(t ? t : ""));
    }
    if (r < 0)
        rc = r;
    q_reset(st, s);
    if (rc) {
        json_decref(arr);
        return rc;
    }
    *out = arr;
    return 0;
}
