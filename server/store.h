/*
 * store.h - ddpd's database, a SQLite file (store_open, the default) or a dqlite cluster
 * (store_open_dqlite): migrations, durable writes, loading at start, and the reads that are
 * not on the hot path (events, metrics, logs).
 *
 * The store is not thread safe: the coordinator calls it under its store mutex. Writes happen
 * inside store_begin()/store_commit() (one transaction per change of state; the coordinator's
 * coord_txn_run() brackets them); a failed statement leaves the transaction for the caller
 * to store_rollback(). Durability: WAL journal with
 * synchronous=FULL, so a committed change survives kill -9 and power loss.
 */
#ifndef DDP_SERVER_STORE_H
#define DDP_SERVER_STORE_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct buf;
struct store;
struct dqclient_opts;

/* A jobs row. Strings are borrowed; NULL last_metrics and 0 times mean SQL NULL. */
struct store_job {
    int64_t id;
    const char *name;
    const char *spec;
    const char *state;
    int64_t generation, restarts, world_size;
    const char *master_addr;
    int64_t master_port;
    const char *nodes;
    const char *last_metrics;
    const char *reason;
    int64_t created_at, started_at, finished_at;
    const char *job_token;
    int64_t log_seq, metric_seq, event_seq;
    int64_t end_kind;
    const char *end_reason;
    const char *owner;      /* the user who submitted it */
    const char *request_id; /* the submit's Idempotency-Key, or NULL */
};

/* A nodes row (strings borrowed; last_heartbeat 0 = NULL). */
struct store_node {
    const char *name;
    const char *address;
    int64_t slots, port_lo, port_hi;
    const char *incarnation;
    const char *state;
    int64_t registered_at, last_heartbeat;
    const char *credential_hash; /* hex SHA-256 of the node credential; "" none */
    const char *admin_state;     /* "", "cordon" or "drain" (NULL: "") */
    const char *admin_reason;
    const char *labels; /* JSON object text (NULL: "{}") */
};

/* A users row (strings borrowed). */
struct store_user {
    const char *name;
    const char *role;
    const char *token_hash;
    int64_t created_at;
    int64_t max_slots; /* 0: no limit */
    const char *group; /* "" or NULL: in no group */
};

/* Opens (creating) the database at path, sets WAL + synchronous=FULL and applies the
 * embedded migrations newer than PRAGMA user_version, each in its own transaction. On
 * success *out is the store (caller closes with store_close()). */
int store_open(const char *path, struct store **out, struct ddp_err *err);
/* The same store on a dqlite cluster: connects to the leader among addrs ("HOST:PORT",
 * server/dqclient.h; opts may be NULL, opts->pinned for one node only), opens database db there and applies the same migrations. A lost
 * connection is found again at the next statement run outside a transaction (the leader may
 * have changed); inside one, statements fail with DDP_EUNAVAIL until the caller rolls back.
 * On success *out is the store (caller closes with store_close()). */
int store_open_dqlite(const char *const *addrs, size_t naddrs, const char *db,
                      const struct dqclient_opts *opts, struct store **out, struct ddp_err *err);
/* Closes; accepts NULL. */
void store_close(struct store *st);
/* The schema version now (PRAGMA user_version), or -1 on error. */
int store_schema_version(struct store *st);

int store_begin(struct store *st, struct ddp_err *err);
int store_commit(struct store *st, struct ddp_err *err);
/* Rolls back the open transaction, if any; never fails from the caller's view. */
void store_rollback(struct store *st);
/* 1 when the statement that failed last failed in the storage under the database (an I/O
 * error or a full disk: this machine's disk, not the SQL). Ask before the next statement
 * (a rollback included). */
int store_storage_failed(const struct store *st);

/* Inserts job j's row, or updates an existing one except for log_seq, metric_seq and
 * last_metrics: those are written once by the insert and then only by store_job_data(). */
int store_job_put(struct store *st, const struct store_job *j, struct ddp_err *err);
int store_event_add(struct store *st, int64_t job, int64_t seq, int64_t time, int64_t gen,
                    const char *state, const char *reason, struct ddp_err *err);
int store_metric_add(struct store *st, int64_t job, int64_t seq, int64_t time, int64_t gen,
                     const char *metric, struct ddp_err *err);
/* Deletes the metrics of job with seq <= upto. */
int store_metric_trim(struct store *st, int64_t job, int64_t upto, struct ddp_err *err);
int store_log_add(struct store *st, int64_t job, int64_t seq, int64_t gen, int64_t rank,
                  const char *text, struct ddp_err *err);
/* Deletes the log lines of job with seq <= upto. */
int store_log_trim(struct store *st, int64_t job, int64_t upto, struct ddp_err *err);
/* Raises the job's log_seq / metric_seq (never lowers them) and sets last_metrics unless it
 * is NULL. */
int store_job_data(struct store *st, int64_t job, int64_t log_seq, int64_t metric_seq,
                   const char *last_metrics, struct ddp_err *err);
int store_mark_put(struct store *st, int64_t job, int64_t gen, int64_t rank, int64_t last_seq,
                   struct ddp_err *err);
/* Deletes the marks of job for generations below below_gen. */
int store_marks_drop(struct store *st, int64_t job, int64_t below_gen, struct ddp_err *err);
/* Deletes job's row, events, metrics, logs and marks, and raises the highest deleted id
 * (store_last_job_id) to job. Inside a transaction, so that all of it goes or none. */
int store_job_delete(struct store *st, int64_t job, struct ddp_err *err);
/* The highest job id ever given out: of the jobs kept and of those deleted (0: none). */
int store_last_job_id(struct store *st, int64_t *out, struct ddp_err *err);
/* The leadership epoch of cluster mode (schema/006_epoch.sql), 0 when none was written. */
int store_epoch(struct store *st, int64_t *out, struct ddp_err *err);
int store_node_put(struct store *st, const struct store_node *n, struct ddp_err *err);
int store_node_delete(struct store *st, const char *name, struct ddp_err *err);
/* Inserts or replaces the user of u->name. */
int store_user_put(struct store *st, const struct store_user *u, struct ddp_err *err);
int store_user_delete(struct store *st, const char *name, struct ddp_err *err);
/* Inserts or replaces the group name with its quota (0: no limit). */
int store_group_put(struct store *st, const char *name, int64_t max_slots, struct ddp_err *err);

/* Loading at start: calls fn once per row (rows borrowed for the call); a non-zero return
 * from fn stops the walk and is returned. */
typedef int (*store_job_fn)(void *ctx, const struct store_job *j);
typedef int (*store_node_fn)(void *ctx, const struct store_node *n);
typedef int (*store_mark_fn)(void *ctx, int64_t job, int64_t gen, int64_t rank, int64_t last_seq);
typedef int (*store_user_fn)(void *ctx, const struct store_user *u);
int store_load_jobs(struct store *st, store_job_fn fn, void *ctx, struct ddp_err *err);
int store_load_nodes(struct store *st, store_node_fn fn, void *ctx, struct ddp_err *err);
int store_load_marks(struct store *st, store_mark_fn fn, void *ctx, struct ddp_err *err);
int store_load_users(struct store *st, store_user_fn fn, void *ctx, struct ddp_err *err);
typedef int (*store_group_fn)(void *ctx, const char *name, int64_t max_slots);
int store_load_groups(struct store *st, store_group_fn fn, void *ctx, struct ddp_err *err);

/* Reads for the GET calls. Each writes a new JSON array to *out (caller decrefs). Times
 * come out as RFC 3339 strings. rank < 0 means every rank. */
int store_events_json(struct store *st, int64_t job, int64_t after, int limit, json_t **out,
                      struct ddp_err *err);
int store_metrics_json(struct store *st, int64_t job, int64_t after, int limit, json_t **out,
                       struct ddp_err *err);
/* Logs: limit > 0, the first `limit` lines with seq > after; limit < 0, the last -limit
 * lines with seq > after (the tail). Either way in seq order. */
int store_logs_json(struct store *st, int64_t job, int rank, int64_t after, int limit, json_t **out,
                    struct ddp_err *err);
/* Appends the text of job's log lines with after < seq <= upto, in seq order, each followed
 * by a newline, to out: at most limit lines. *last receives the seq of the last line appended
 * (after when none) and *nrows their count; fewer than limit means none is left up to upto.
 * DDP_ETOOBIG when out's max is reached (out then holds the lines before). */
int store_logs_text(struct store *st, int64_t job, int64_t after, int64_t upto, int limit,
                    struct buf *out, int64_t *last, int *nrows, struct ddp_err *err);
/* The last n lines (oldest first) of (job, gen, rank) as a new array of strings. */
int store_last_lines(struct store *st, int64_t job, int64_t gen, int64_t rank, int n, json_t **out,
                     struct ddp_err *err);

#endif
