/*
 * store_dqlite.c - the store's dqlite backend (`ddpd --cluster`): the ops of
 * store_internal.h over one dqclient connection to the cluster's leader, each of store.c's
 * statements prepared on it.
 *
 * Invariants:
 *   1. Between steps a statement holds its bound values (text copied) in params; its first
 *      step sends them, all nparams of them (unbound ones as NULL, since dqlite keeps a
 *      statement's old bindings), as EXEC or, for a SELECT or PRAGMA, as QUERY whose rows
 *      are read whole; later steps walk those rows. reset frees both.
 *   2. in_tx is 1 from a BEGIN that succeeded to the COMMIT or ROLLBACK after it, or to a lost
 *      connection. A lost connection is found again (reconnect, every statement prepared
 *      anew) only at a step with no transaction open, so a statement never runs on a new
 *      leader outside the transaction its caller began on the old one.
 *   3. A statement runs only on the connection it was prepared on: where a PREPARE fails
 *      (a "not leader" during a flap leaves the connection up), unprepared stays set and the
 *      next call prepares every statement again, so none runs with a NULL handle or one of
 *      the old connection.
 */
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "common/xalloc.h"
#include "server/dqclient.h"
#include "server/store_internal.h"

struct dq_stmt {
    const char *sql; /* store.c's, static */
    struct dqclient_stmt *st;
    int query; /* SELECT or PRAGMA: run as QUERY */
    struct dqwire_value params[STORE_MAX_PARAMS];
    char *texts[STORE_MAX_PARAMS];
    struct dqclient_rows *rows;
    size_t row;  /* the current row + 1 (0: before the first) */
    int started; /* the first step was sent */
};

struct dqlite_be {
    struct dqclient *c;
    struct dq_stmt s[ST_COUNT];
    int in_tx;
    int unprepared; /* invariant 3: some statement failed to prepare on this connection */
};

static void dq_reset(void *be, int w)
{
    struct dqlite_be *b = be;
    struct dq_stmt *s = &b->s[w];
    for (int i = 0; i < STORE_MAX_PARAMS; i++) {
        free(s->texts[i]);
        s->texts[i] = NULL;
        s->params[i] = dqclient_null();
    }
    dqclient_rows_free(s->rows);
    s->rows = NULL;
    s->row = 0;
    s->started = 0;
}

static int dq_prepare_one(struct dqlite_be *b, int w, struct ddp_err *err)
{
    struct dq_stmt *s = &b->s[w];
    dqclient_stmt_free(s->st);
    s->st = NULL;
    int rc = dqclient_prepare(b->c, s->sql, &s->st, err);
    if (rc == 0 && dqclient_stmt_nparams(s->st) > STORE_MAX_PARAMS)
        rc = err_set(err, DDP_EINTERNAL, "store statement %d: %zu parameters over %d", w,
                     dqclient_stmt_nparams(s->st), STORE_MAX_PARAMS);
    return rc;
}

/* A connection is there, or found again when no transaction is open (invariant 2), with
 * every statement prepared on it (invariant 3). */
static int dq_ensure(struct dqlite_be *b, struct ddp_err *err)
{
    if (dqclient_connected(b->c) && !b->unprepared)
        return 0;
    if (!dqclient_connected(b->c)) {
        if (b->in_tx)
            return err_set(err, DDP_EUNAVAIL,
                           "dqlite: connection lost inside a transaction: roll back and retry");
        int rc = dqclient_reconnect(b->c, err);
        if (rc)
            return rc;
        b->unprepared = 1;
    }
    for (int w = 0; w < ST_COUNT; w++) {
        int rc = b->s[w].sql != NULL ? dq_prepare_one(b, w, err) : 0;
        if (rc)
            return rc; /* still unprepared: the next call prepares again */
    }
    b->unprepared = 0;
    return 0;
}

/* Keeps in_tx (invariant 2) after a run of sql: a BEGIN that succeeded opens, a COMMIT that
 * succeeded or any ROLLBACK closes; a lost connection leaves it as it was. */
static void dq_track_tx(struct dqlite_be *b, const char *sql, int rc)
{
    if (rc == 0 && strncasecmp(sql, "BEGIN", 5) == 0)
        b->in_tx = 1;
    else if ((rc == 0 && strcasecmp(sql, "COMMIT") == 0) || strcasecmp(sql, "ROLLBACK") == 0)
        b->in_tx = 0;
}

static int dq_exec(void *be, const char *sql, struct ddp_err *err)
{
    struct dqlite_be *b = be;
    int rc = dq_ensure(b, err);
    if (rc == 0)
        rc = dqclient_exec(b->c, sql, NULL, 0, NULL, err);
    dq_track_tx(b, sql, rc);
    return rc;
}

static int dq_user_version(void *be)
{
    struct dqlite_be *b = be;
    struct dqclient_rows *r = NULL;
    int v = -1;
    if (dq_ensure(b, NULL) == 0 &&
        dqclient_query(b->c, "PRAGMA user_version", NULL, 0, &r, NULL) == 0 && r->nrows == 1 &&
        r->vals[0].type == DQWIRE_INTEGER)
        v = (int)r->vals[0].i;
    dqclient_rows_free(r);
    return v;
}

static int dq_prepare(void *be, int w, const char *sql, struct ddp_err *err)
{
    struct dqlite_be *b = be;
    b->s[w].sql = sql;
    b->s[w].query = strncasecmp(sql, "SELECT", 6) == 0 || strncasecmp(sql, "PRAGMA", 6) == 0;
    dq_reset(b, w);
    int rc = dq_prepare_one(b, w, err);
    if (rc)
        b->unprepared = 1;
    return rc;
}

static void dq_bind(struct dqlite_be *b, int w, int i, struct dqwire_value v)
{
    if (i < 1 || i > STORE_MAX_PARAMS)
        return;
    free(b->s[w].texts[i - 1]);
    b->s[w].texts[i - 1] = NULL;
    b->s[w].params[i - 1] = v;
}

static void dq_bind_int(void *be, int w, int i, int64_t v)
{
    dq_bind(be, w, i, dqclient_int(v));
}

static void dq_bind_text(void *be, int w, int i, const char *v)
{
    struct dqlite_be *b = be;
    char *copy = xstrdup(v);
    dq_bind(b, w, i, dqclient_text(copy));
    if (i >= 1 && i <= STORE_MAX_PARAMS)
        b->s[w].texts[i - 1] = copy;
    else
        free(copy);
}

static void dq_bind_null(void *be, int w, int i)
{
    dq_bind(be, w, i, dqclient_null());
}

static int dq_step(void *be, int w, struct ddp_err *err)
{
    struct dqlite_be *b = be;
    struct dq_stmt *s = &b->s[w];
    if (!s->started) {
        int rc = dq_ensure(b, err);
        if (rc == 0) {
            size_t n = dqclient_stmt_nparams(s->st);
            if (s->query)
                rc = dqclient_stmt_query(s->st, s->params, n, &s->rows, err);
            else
                rc = dqclient_stmt_exec(s->st, s->params, n, NULL, err);
        }
        dq_track_tx(b, s->sql, rc);
        if (rc != 0)
            return rc;
        s->started = 1;
    }
    if (s->rows == NULL || s->row >= s->rows->nrows)
        return 0;
    s->row++;
    return 1;
}

static const struct dqwire_value *dq_col(struct dqlite_be *b, int w, int i)
{
    struct dq_stmt *s = &b->s[w];
    if (s->rows == NULL || s->row == 0 || i < 0 || (size_t)i >= s->rows->ncols)
        return NULL;
    return &s->rows->vals[(s->row - 1) * s->rows->ncols + (size_t)i];
}

static int64_t dq_col_int(void *be, int w, int i)
{
    const struct dqwire_value *v = dq_col(be, w, i);
    if (v == NULL)
        return 0;
    if (v->type == DQWIRE_INTEGER || v->type == DQWIRE_UNIXTIME || v->type == DQWIRE_BOOLEAN)
        return v->i;
    if (v->type == DQWIRE_FLOAT)
        return (int64_t)v->f;
    return 0;
}

static const char *dq_col_text(void *be, int w, int i)
{
    const struct dqwire_value *v = dq_col(be, w, i);
    if (v == NULL || (v->type != DQWIRE_TEXT && v->type != DQWIRE_ISO8601))
        return NULL;
    return v->p;
}

static int dq_in_tx(void *be)
{
    struct dqlite_be *b = be;
    return b->in_tx;
}

static void dq_close(void *be)
{
    struct dqlite_be *b = be;
    if (!b)
        return;
    for (int w = 0; w < ST_COUNT; w++) {
        dq_reset(b, w);
        dqclient_stmt_free(b->s[w].st);
    }
    dqclient_close(b->c);
    free(b);
}

int store_dqlite_open(const char *const *addrs, size_t naddrs, const char *db,
                      const struct dqclient_opts *opts, void **be, struct ddp_err *err)
{
    struct dqlite_be *b = xcalloc(1, sizeof(*b));
    int rc = dqclient_open(addrs, naddrs, db, opts, &b->c, err);
    if (rc) {
        free(b);
        return rc;
    }
    *be = b;
    return 0;
}

static int dq_storage_failed(void *be)
{
    struct dqlite_be *b = be;
    uint64_t code = dqclient_failure_code(b->c);
    uint64_t primary = code & 0xff; /* the extended code's primary */
    /* dqlite answers a raft append that found no space IOERR_WRITE and any other failed
     * append plain IOERR; IOERR_NOMEM is memory, IOERR_NOT_LEADER and IOERR_LEADERSHIP_LOST
     * (dqlite's own, 40 and 41) are the leadership, not the disk */
    if (code == (10 | (12 << 8)) || code == (10 | (40 << 8)) || code == (10 | (41 << 8)))
        return 0;
    return primary == 10 /* SQLITE_IOERR */ || primary == 13 /* SQLITE_FULL */;
}

const struct store_ops store_dqlite_ops = {
    .name = "dqlite",
    .exec = dq_exec,
    .user_version = dq_user_version,
    .prepare = dq_prepare,
    .bind_int = dq_bind_int,
    .bind_text = dq_bind_text,
    .bind_null = dq_bind_null,
    .step = dq_step,
    .col_int = dq_col_int,
    .col_text = dq_col_text,
    .reset = dq_reset,
    .in_tx = dq_in_tx,
    .storage_failed = dq_storage_failed,
    .close = dq_close,
};
