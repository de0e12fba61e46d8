/*
 * store_internal.h - what server/store.c shares with its backends, and nothing else includes:
 * the numbered statements and the ops a backend gives (one file each: store_sqlite.c, the
 * SQLite file and the default; store_dqlite.c, the same statements through dqclient).
 *
 * store.c owns the SQL (store_sql[], migrations, the meaning of every column); a backend only
 * prepares those statements, binds values by position, steps through rows and reads columns,
 * as SQLite's own statement API does. Text handed to bind_text is copied before it returns;
 * text from col_text lives until the statement's next reset or step.
 */
#ifndef DDP_SERVER_STORE_INTERNAL_H
#define DDP_SERVER_STORE_INTERNAL_H

#include <stdint.h>

#include "common/err.h"

struct dqclient_opts;

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
    ST_GROUP_PUT,
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
    ST_LOAD_JOBS,
    ST_LOAD_NODES,
    ST_LOAD_MARKS,
    ST_LOAD_USERS,
    ST_LOAD_GROUPS,
    ST_EPOCH,
    ST_COUNT
};

/* The most parameters a statement of store_sql[] takes. */
#define STORE_MAX_PARAMS 32

/* A backend. be is the backend's own state. Every function that can fail fills err and
 * returns a negative code. */
struct store_ops {
    const char *name;
    /* Runs sql (any number of statements, no parameters, no rows wanted). */
    int (*exec)(void *be, const char *sql, struct ddp_err *err);
    /* PRAGMA user_version, or -1. */
    int (*user_version)(void *be);
    /* Prepares statement w from sql, once, after the migrations. */
    int (*prepare)(void *be, int w, const char *sql, struct ddp_err *err);
    /* Binds parameter i (1-based) of w. */
    void (*bind_int)(void *be, int w, int i, int64_t v);
    void (*bind_text)(void *be, int w, int i, const char *v);
    void (*bind_null)(void *be, int w, int i);
    /* 1: a row is there to read; 0: done; < 0: error. */
    int (*step)(void *be, int w, struct ddp_err *err);
    /* Column i (0-based) of the current row: 0 / NULL for SQL NULL or a column not there. */
    int64_t (*col_int)(void *be, int w, int i);
    const char *(*col_text)(void *be, int w, int i);
    /* Ends the statement's run and clears its bindings. */
    void (*reset)(void *be, int w);
    /* 1 when a transaction is open on the connection. */
    int (*in_tx)(void *be);
    /* 1 when the last statement that failed failed in the storage under the database (SQLite's
     * I/O error or disk-full codes: the disk, not the SQL); read before the next statement. */
    int (*storage_failed)(void *be);
    /* Frees; accepts NULL. */
    void (*close)(void *be);
};

struct store {
    const struct store_ops *ops;
    void *be;
    int in_tx;
};

extern const struct store_ops store_sqlite_ops;
extern const struct store_ops store_dqlite_ops;

/* Opens the SQLite file at path (mode 0600, WAL, synchronous=FULL, foreign keys): *be. */
int store_sqlite_open(const char *path, void **be, struct ddp_err *err);
/* Connects to the dqlite leader among addrs and opens database db: *be. */
int store_dqlite_open(const char *const *addrs, size_t naddrs, const char *db,
                      const struct dqclient_opts *opts, void **be, struct ddp_err *err);

#endif
