/*
 * store.c - SQLite persistence of ddpd.
 *
 * Invariants:
 *   1. The schema is exactly the embedded migrations schema/NNN_*.sql with NNN <=
 *      PRAGMA user_version; each migration and its user_version bump commit together.
 *   2. journal_mode=WAL, synchronous=FULL: a COMMIT that returned is on disk.
 *   3. Prepared statements are made once at open and reset after each use.
 */
#include "server/store.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sqlite3.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "common/buf.h"
#include "common/log.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "server/embed.h"

enum {
    ST_BEGIN,
    ST_COMMIT,
    ST_ROLLBACK,
    ST_JOB_PUT,
    ST_EVENT_ADD,
    ST_METRIC_ADD,
    ST_METRIC_TRIM,
    ST_LOG_ADD,
    ST_LOG_TRIM,
    ST_MARK_PUT,
    ST_MARK_DROP,
    ST_NODE_PUT,
    ST_NODE_DELETE,
    ST_USER_PUT,
    ST_USER_DELETE,
    ST_JOB_DATA,
    ST_EVENTS,
    ST_METRICS,
    ST_LOGS_ALL,
    ST_LOGS_RANK,
    ST_LOGS_TAIL_ALL,
    ST_LOGS_TAIL_RANK,
    ST_LAST_LINES,
    ST_DEL_LOGS,
    ST_DEL_METRICS,
    ST_DEL_EVENTS,
    ST_DEL_MARKS,
    ST_DEL_JOB,
    ST_DELETED_MAX,
    ST_LAST_JOB_ID,
    ST_COUNT
};

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
    [ST_USER_PUT] = "INSERT OR REPLACE INTO users (name, role, token_hash, created_at, max_slots) "
                    "VALUES (?1,?2,?3,?4,?5)",
    [ST_USER_DELETE] = "DELETE FROM users WHERE name = ?1",
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
};

struct store {
    sqlite3 *db;
    sqlite3_stmt *st[ST_COUNT];
    int in_tx;
};

static int store_fail(struct store *st, struct ddp_err *err, const char *what)
{
    return err_set(err, DDP_EIO, "sqlite %s: %s", what, sqlite3_errmsg(st->db));
}

/* Runs a prepared statement that returns no rows, then resets it. */
static int store_step_done(struct store *st, int which, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[which];
    int r = sqlite3_step(s);
    int rc = 0;
    if (r != SQLITE_DONE)
        rc = store_fail(st, err, "step");
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    return rc;
}

static void store_bind_text(sqlite3_stmt *s, int i, const char *v)
{
    if (v)
        sqlite3_bind_text(s, i, v, -1, SQLITE_TRANSIENT);
    else
        sqlite3_bind_null(s, i);
}

static void store_bind_time(sqlite3_stmt *s, int i, int64_t v)
{
    if (v)
        sqlite3_bind_int64(s, i, v);
    else
        sqlite3_bind_null(s, i);
}

static int store_exec(struct store *st, const char *sql, struct ddp_err *err)
{
    char *msg = NULL;
    if (sqlite3_exec(st->db, sql, NULL, NULL, &msg) != SQLITE_OK) {
        int rc = err_set(err, DDP_EIO, "sqlite: %s", msg ? msg : "error");
        sqlite3_free(msg);
        return rc;
    }
    return 0;
}

int store_schema_version(struct store *st)
{
    sqlite3_stmt *s = NULL;
    int v = -1;
    if (sqlite3_prepare_v2(st->db, "PRAGMA user_version", -1, &s, NULL) == SQLITE_OK &&
        sqlite3_step(s) == SQLITE_ROW)
        v = sqlite3_column_int(s, 0);
    sqlite3_finalize(s);
    return v;
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
        return store_fail(st, err, "user_version");
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
            sqlite3_exec(st->db, "ROLLBACK", NULL, NULL, NULL);
            return rc;
        }
        log_info("schema migration applied name=%s version=%d", embed_files[i].name, num);
        have = num;
    }
    return 0;
}

int store_open(const char *path, struct store **out, struct ddp_err *err)
{
    struct store *st = xcalloc(1, sizeof(*st));
    int rc;
    /* The database holds every job's token, env and logs: owner only. SQLite creates its
     * -wal and -shm files with the mode of the database file. A file another tool made
     * wider is narrowed, saying so. */
    int fd = open(path, O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0600);
    if (fd < 0) {
        rc = err_set(err, DDP_EIO, "cannot open database %s: %s", path, strerror(errno));
        goto out;
    }
    struct stat fst;
    if (fstat(fd, &fst) == 0 && (fst.st_mode & 077)) {
        if (fchmod(fd, 0600) == 0)
            log_warn("database %s was mode %04o: now 0600 (it holds job tokens and env)", path,
                     (unsigned)(fst.st_mode & 07777));
        else
            log_warn("database %s is mode %04o and cannot be narrowed: %s", path,
                     (unsigned)(fst.st_mode & 07777), strerror(errno));
    }
    close(fd);
    if (sqlite3_open_v2(path, &st->db,
                        SQLITE_OPEN_READWRITE | SQLITE_OPEN_CREATE | SQLITE_OPEN_NOMUTEX,
                        NULL) != SQLITE_OK) {
        rc = err_set(err, DDP_EIO, "cannot open database %s: %s", path,
                     st->db ? sqlite3_errmsg(st->db) : "out of memory");
        goto out;
    }
    sqlite3_busy_timeout(st->db, 5000);
    rc = store_exec(st, "PRAGMA journal_mode=WAL", err);
    if (!rc)
        rc = store_exec(st, "PRAGMA synchronous=FULL", err);
    if (!rc)
        rc = store_exec(st, "PRAGMA foreign_keys=ON", err);
    if (!rc)
        rc = store_migrate(st, err);
    if (rc)
        goto out;
    for (int i = 0; i < ST_COUNT; i++)
        if (sqlite3_prepare_v3(st->db, store_sql[i], -1, SQLITE_PREPARE_PERSISTENT, &st->st[i],
                               NULL) != SQLITE_OK) {
            rc = store_fail(st, err, "prepare");
            goto out;
        }
    *out = st;
    st = NULL;
out:
    store_close(st);
    return rc;
}

void store_close(struct store *st)
{
    if (!st)
        return;
    for (int i = 0; i < ST_COUNT; i++)
        sqlite3_finalize(st->st[i]);
    sqlite3_close(st->db);
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

void store_rollback(struct store *st)
{
    if (!sqlite3_get_autocommit(st->db))
        store_step_done(st, ST_ROLLBACK, NULL);
    st->in_tx = 0;
}

int store_job_put(struct store *st, const struct store_job *j, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_JOB_PUT];
    sqlite3_bind_int64(s, 1, j->id);
    store_bind_text(s, 2, j->name);
    store_bind_text(s, 3, j->spec);
    store_bind_text(s, 4, j->state);
    sqlite3_bind_int64(s, 5, j->generation);
    sqlite3_bind_int64(s, 6, j->restarts);
    sqlite3_bind_int64(s, 7, j->world_size);
    store_bind_text(s, 8, j->master_addr ? j->master_addr : "");
    sqlite3_bind_int64(s, 9, j->master_port);
    store_bind_text(s, 10, j->nodes ? j->nodes : "[]");
    store_bind_text(s, 11, j->last_metrics);
    store_bind_text(s, 12, j->reason ? j->reason : "");
    sqlite3_bind_int64(s, 13, j->created_at);
    store_bind_time(s, 14, j->started_at);
    store_bind_time(s, 15, j->finished_at);
    store_bind_text(s, 16, j->job_token);
    sqlite3_bind_int64(s, 17, j->log_seq);
    sqlite3_bind_int64(s, 18, j->metric_seq);
    sqlite3_bind_int64(s, 19, j->event_seq);
    sqlite3_bind_int64(s, 20, j->end_kind);
    store_bind_text(s, 21, j->end_reason ? j->end_reason : "");
    store_bind_text(s, 22, j->owner ? j->owner : "admin");
    store_bind_text(s, 23, j->request_id);
    return store_step_done(st, ST_JOB_PUT, err);
}

int store_event_add(struct store *st, int64_t job, int64_t seq, int64_t time, int64_t gen,
                    const char *state, const char *reason, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_EVENT_ADD];
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, seq);
    sqlite3_bind_int64(s, 3, time);
    sqlite3_bind_int64(s, 4, gen);
    store_bind_text(s, 5, state);
    store_bind_text(s, 6, reason);
    return store_step_done(st, ST_EVENT_ADD, err);
}

int store_metric_add(struct store *st, int64_t job, int64_t seq, int64_t time, int64_t gen,
                     const char *metric, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_METRIC_ADD];
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, seq);
    sqlite3_bind_int64(s, 3, time);
    sqlite3_bind_int64(s, 4, gen);
    store_bind_text(s, 5, metric);
    return store_step_done(st, ST_METRIC_ADD, err);
}

int store_metric_trim(struct store *st, int64_t job, int64_t upto, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_METRIC_TRIM];
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, upto);
    return store_step_done(st, ST_METRIC_TRIM, err);
}

int store_log_add(struct store *st, int64_t job, int64_t seq, int64_t gen, int64_t rank,
                  const char *text, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_LOG_ADD];
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, seq);
    sqlite3_bind_int64(s, 3, gen);
    sqlite3_bind_int64(s, 4, rank);
    store_bind_text(s, 5, text);
    return store_step_done(st, ST_LOG_ADD, err);
}

int store_log_trim(struct store *st, int64_t job, int64_t upto, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_LOG_TRIM];
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, upto);
    return store_step_done(st, ST_LOG_TRIM, err);
}

int store_mark_put(struct store *st, int64_t job, int64_t gen, int64_t rank, int64_t last_seq,
                   struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_MARK_PUT];
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, gen);
    sqlite3_bind_int64(s, 3, rank);
    sqlite3_bind_int64(s, 4, last_seq);
    return store_step_done(st, ST_MARK_PUT, err);
}

int store_marks_drop(struct store *st, int64_t job, int64_t below_gen, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_MARK_DROP];
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, below_gen);
    return store_step_done(st, ST_MARK_DROP, err);
}

int store_job_data(struct store *st, int64_t job, int64_t log_seq, int64_t metric_seq,
                   const char *last_metrics, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_JOB_DATA];
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, log_seq);
    sqlite3_bind_int64(s, 3, metric_seq);
    store_bind_text(s, 4, last_metrics);
    return store_step_done(st, ST_JOB_DATA, err);
}

int store_job_delete(struct store *st, int64_t job, struct ddp_err *err)
{
    static const int steps[] = {ST_DEL_LOGS,  ST_DEL_METRICS, ST_DEL_EVENTS,
                                ST_DEL_MARKS, ST_DEL_JOB,     ST_DELETED_MAX};
    int rc = 0;
    for (size_t i = 0; !rc && i < sizeof(steps) / sizeof(steps[0]); i++) {
        sqlite3_bind_int64(st->st[steps[i]], 1, job);
        rc = store_step_done(st, steps[i], err);
    }
    return rc;
}

int store_last_job_id(struct store *st, int64_t *out, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_LAST_JOB_ID];
    int rc = 0;
    if (sqlite3_step(s) == SQLITE_ROW)
        *out = sqlite3_column_int64(s, 0);
    else
        rc = store_fail(st, err, "last job id");
    sqlite3_reset(s);
    return rc;
}

int store_node_put(struct store *st, const struct store_node *n, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_NODE_PUT];
    store_bind_text(s, 1, n->name);
    store_bind_text(s, 2, n->address);
    sqlite3_bind_int64(s, 3, n->slots);
    sqlite3_bind_int64(s, 4, n->port_lo);
    sqlite3_bind_int64(s, 5, n->port_hi);
    store_bind_text(s, 6, n->incarnation);
    store_bind_text(s, 7, n->state);
    sqlite3_bind_int64(s, 8, n->registered_at);
    store_bind_time(s, 9, n->last_heartbeat);
    store_bind_text(s, 10, n->credential_hash ? n->credential_hash : "");
    store_bind_text(s, 11, n->admin_state ? n->admin_state : "");
    store_bind_text(s, 12, n->admin_reason ? n->admin_reason : "");
    store_bind_text(s, 13, n->labels ? n->labels : "{}");
    return store_step_done(st, ST_NODE_PUT, err);
}

int store_node_delete(struct store *st, const char *name, struct ddp_err *err)
{
    store_bind_text(st->st[ST_NODE_DELETE], 1, name);
    return store_step_done(st, ST_NODE_DELETE, err);
}

int store_user_put(struct store *st, const struct store_user *u, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_USER_PUT];
    store_bind_text(s, 1, u->name);
    store_bind_text(s, 2, u->role);
    store_bind_text(s, 3, u->token_hash);
    sqlite3_bind_int64(s, 4, u->created_at);
    sqlite3_bind_int64(s, 5, u->max_slots);
    return store_step_done(st, ST_USER_PUT, err);
}

int store_user_delete(struct store *st, const char *name, struct ddp_err *err)
{
    store_bind_text(st->st[ST_USER_DELETE], 1, name);
    return store_step_done(st, ST_USER_DELETE, err);
}

static const char *store_col_text(sqlite3_stmt *s, int i)
{
    const unsigned char *t = sqlite3_column_text(s, i);
    return t ? (const char *)t : NULL;
}

int store_load_jobs(struct store *st, store_job_fn fn, void *ctx, struct ddp_err *err)
{
    sqlite3_stmt *s = NULL;
    int rc = 0, r;
    if (sqlite3_prepare_v2(st->db,
                           "SELECT id, name, spec, state, generation, restarts, world_size, "
                           "master_addr, master_port, nodes, last_metrics, reason, created_at, "
                           "started_at, finished_at, job_token, log_seq, metric_seq, event_seq, "
                           "end_kind, end_reason, owner, request_id FROM jobs ORDER BY id",
                           -1, &s, NULL) != SQLITE_OK)
        return store_fail(st, err, "prepare");
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        struct store_job j = {
            .id = sqlite3_column_int64(s, 0),
            .name = store_col_text(s, 1),
            .spec = store_col_text(s, 2),
            .state = store_col_text(s, 3),
            .generation = sqlite3_column_int64(s, 4),
            .restarts = sqlite3_column_int64(s, 5),
            .world_size = sqlite3_column_int64(s, 6),
            .master_addr = store_col_text(s, 7),
            .master_port = sqlite3_column_int64(s, 8),
            .nodes = store_col_text(s, 9),
            .last_metrics = store_col_text(s, 10),
            .reason = store_col_text(s, 11),
            .created_at = sqlite3_column_int64(s, 12),
            .started_at = sqlite3_column_int64(s, 13),
            .finished_at = sqlite3_column_int64(s, 14),
            .job_token = store_col_text(s, 15),
            .log_seq = sqlite3_column_int64(s, 16),
            .metric_seq = sqlite3_column_int64(s, 17),
            .event_seq = sqlite3_column_int64(s, 18),
            .end_kind = sqlite3_column_int64(s, 19),
            .end_reason = store_col_text(s, 20),
            .owner = store_col_text(s, 21),
            .request_id = store_col_text(s, 22),
        };
        rc = fn(ctx, &j);
        if (rc)
            break;
    }
    if (!rc && r != SQLITE_DONE)
        rc = store_fail(st, err, "load jobs");
    sqlite3_finalize(s);
    return rc;
}

int store_load_nodes(struct store *st, store_node_fn fn, void *ctx, struct ddp_err *err)
{
    sqlite3_stmt *s = NULL;
    int rc = 0, r;
    if (sqlite3_prepare_v2(
            st->db,
            "SELECT name, address, slots, port_lo, port_hi, incarnation, state, "
            "registered_at, last_heartbeat, credential_hash, admin_state, admin_reason "
            "FROM nodes ORDER BY name",
            -1, &s, NULL) != SQLITE_OK)
        return store_fail(st, err, "prepare");
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        struct store_node n = {
            .name = store_col_text(s, 0),
            .address = store_col_text(s, 1),
            .slots = sqlite3_column_int64(s, 2),
            .port_lo = sqlite3_column_int64(s, 3),
            .port_hi = sqlite3_column_int64(s, 4),
            .incarnation = store_col_text(s, 5),
            .state = store_col_text(s, 6),
            .registered_at = sqlite3_column_int64(s, 7),
            .last_heartbeat = sqlite3_column_int64(s, 8),
            .credential_hash = store_col_text(s, 9),
            .admin_state = store_col_text(s, 10),
            .admin_reason = store_col_text(s, 11),
            .labels = store_col_text(s, 12),
        };
        rc = fn(ctx, &n);
        if (rc)
            break;
    }
    if (!rc && r != SQLITE_DONE)
        rc = store_fail(st, err, "load nodes");
    sqlite3_finalize(s);
    return rc;
}

int store_load_marks(struct store *st, store_mark_fn fn, void *ctx, struct ddp_err *err)
{
    sqlite3_stmt *s = NULL;
    int rc = 0, r;
    if (sqlite3_prepare_v2(st->db,
                           "SELECT job_id, generation, rank, last_seq FROM marks "
                           "ORDER BY job_id, generation, rank",
                           -1, &s, NULL) != SQLITE_OK)
        return store_fail(st, err, "prepare");
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        rc = fn(ctx, sqlite3_column_int64(s, 0), sqlite3_column_int64(s, 1),
                sqlite3_column_int64(s, 2), sqlite3_column_int64(s, 3));
        if (rc)
            break;
    }
    if (!rc && r != SQLITE_DONE)
        rc = store_fail(st, err, "load marks");
    sqlite3_finalize(s);
    return rc;
}

int store_load_users(struct store *st, store_user_fn fn, void *ctx, struct ddp_err *err)
{
    sqlite3_stmt *s = NULL;
    int rc = 0, r;
    if (sqlite3_prepare_v2(st->db,
                           "SELECT name, role, token_hash, created_at, max_slots FROM users "
                           "ORDER BY name",
                           -1, &s, NULL) != SQLITE_OK)
        return store_fail(st, err, "prepare");
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        struct store_user u = {
            .name = store_col_text(s, 0),
            .role = store_col_text(s, 1),
            .token_hash = store_col_text(s, 2),
            .created_at = sqlite3_column_int64(s, 3),
            .max_slots = sqlite3_column_int64(s, 4),
        };
        rc = fn(ctx, &u);
        if (rc)
            break;
    }
    if (!rc && r != SQLITE_DONE)
        rc = store_fail(st, err, "load users");
    sqlite3_finalize(s);
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
                       json_t *(*row_fn)(sqlite3_stmt *), json_t **out, struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[which];
    json_t *arr = json_array();
    int r, rc = 0;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, after);
    sqlite3_bind_int(s, 3, limit);
    if (which == ST_LOGS_RANK || which == ST_LOGS_TAIL_RANK)
        sqlite3_bind_int(s, 4, rank);
    while ((r = sqlite3_step(s)) == SQLITE_ROW)
        json_array_append_new(arr, row_fn(s));
    if (r != SQLITE_DONE)
        rc = store_fail(st, err, "query");
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (rc) {
        json_decref(arr);
        return rc;
    }
    *out = arr;
    return 0;
}

static json_t *store_event_row(sqlite3_stmt *s)
{
    return json_pack("{s:I, s:o, s:I, s:s, s:s}", "seq", (json_int_t)sqlite3_column_int64(s, 0),
                     "time", store_time_json(sqlite3_column_int64(s, 1)), "generation",
                     (json_int_t)sqlite3_column_int64(s, 2), "state", store_col_text(s, 3),
                     "reason", store_col_text(s, 4));
}

static json_t *store_metric_row(sqlite3_stmt *s)
{
    const char *text = store_col_text(s, 3);
    json_t *m = json_loads(text ? text : "{}", 0, NULL);
    if (!m)
        m = json_object();
    return json_pack("{s:I, s:o, s:I, s:o}", "seq", (json_int_t)sqlite3_column_int64(s, 0), "time",
                     store_time_json(sqlite3_column_int64(s, 1)), "generation",
                     (json_int_t)sqlite3_column_int64(s, 2), "metric", m);
}

static json_t *store_log_row(sqlite3_stmt *s)
{
    const char *text = store_col_text(s, 3);
    return json_pack("{s:I, s:I, s:I, s:s}", "seq", (json_int_t)sqlite3_column_int64(s, 0), "rank",
                     (json_int_t)sqlite3_column_int64(s, 1), "generation",
                     (json_int_t)sqlite3_column_int64(s, 2), "text", text ? text : "");
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
    sqlite3_stmt *s = st->st[ST_LOGS_ALL];
    int r, rc = 0, n = 0;
    int64_t seq = after;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, after);
    sqlite3_bind_int(s, 3, limit);
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        int64_t q = sqlite3_column_int64(s, 0);
        if (q > upto)
            break;
        const char *t = store_col_text(s, 3);
        if (buf_addstr(out, t ? t : "") != 0 || buf_add(out, "\n", 1) != 0) {
            rc = err_set(err, DDP_ETOOBIG, "log text over the buffer's limit");
            break;
        }
        seq = q;
        n++;
    }
    if (!rc && r != SQLITE_DONE && r != SQLITE_ROW)
        rc = store_fail(st, err, "query");
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (rc)
        return rc;
    *last = seq;
    *nrows = n;
    return 0;
}

int store_last_lines(struct store *st, int64_t job, int64_t gen, int64_t rank, int n, json_t **out,
                     struct ddp_err *err)
{
    sqlite3_stmt *s = st->st[ST_LAST_LINES];
    json_t *arr = json_array();
    int r, rc = 0;
    sqlite3_bind_int64(s, 1, job);
    sqlite3_bind_int64(s, 2, gen);
    sqlite3_bind_int64(s, 3, rank);
    sqlite3_bind_int(s, 4, n);
    while ((r = sqlite3_step(s)) == SQLITE_ROW) {
        const char *t = store_col_text(s, 0);
        json_array_insert_new(arr, 0, json_string(t ? t : ""));
    }
    if (r != SQLITE_DONE)
        rc = store_fail(st, err, "query");
    sqlite3_reset(s);
    sqlite3_clear_bindings(s);
    if (rc) {
        json_decref(arr);
        return rc;
    }
    *out = arr;
    return 0;
}
