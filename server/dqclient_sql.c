/*
 * dqclient_sql.c - the dqlite client's statements (server/dqclient.h): EXEC and QUERY with
 * parameters, prepared statements, and ROWS answers read part by part into one result, on
 * the connection of dqclient.c.
 *
 * Invariant (4 of dqclient.c): a statement is valid only while its gen is the client's.
 */
#include "server/dqclient.h"
#include "server/dqclient_internal.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/xalloc.h"

/* --- SQL ----------------------------------------------------------------------------- */

static int put_params(struct dqclient *c, const char *what, const char *sql,
                      const struct dqwire_value *params, size_t n, struct ddp_err *err)
{
    struct ddp_err e;
    if (c->out_rc != 0)
        return 0; /* dqc_roundtrip() reports it */
    if (dqwire_put_params(&c->out, params, n, &e) != 0) {
        char q[SQL_SHOWN + 8];
        dqc_shown_sql(sql, q, sizeof q);
        buf_reset(&c->out);
        c->out_rc = 0;
        return err_set(err, e.code, "dqlite: %s \"%s\": %s", what, q, e.msg);
    }
    return 0;
}

static int read_result(struct dqclient *c, const char *what, struct dqclient_result *res,
                       struct ddp_err *err)
{
    uint64_t id, n;
    if (dqwire_decode_result(c->in.data, c->in.len, &id, &n) != 0)
        return dqc_bad_answer(c, what, err);
    if (res != NULL) {
        res->last_insert_id = (int64_t)id;
        res->rows_affected = (int64_t)n;
    }
    return 0;
}

int dqclient_exec(struct dqclient *c, const char *sql, const struct dqwire_value *params, size_t n,
                  struct dqclient_result *res, struct ddp_err *err)
{
    size_t start;
    int type;
    dqc_out_begin(c, DQWIRE_REQ_EXEC_SQL, &start);
    dqc_out_u64(c, c->db_id);
    dqc_out_text(c, sql);
    int rc = put_params(c, "exec", sql, params, n, err);
    if (rc != 0)
        return rc;
    dqc_out_end(c, start);
    rc = dqc_roundtrip(c, "exec", sql, DQWIRE_RESP_RESULT, &type, err);
    if (rc != 0)
        return rc;
    return read_result(c, "exec", res, err);
}

void dqclient_rows_free(struct dqclient_rows *r)
{
    if (r == NULL)
        return;
    for (size_t i = 0; i < r->nbodies; i++)
        free(r->bodies[i]);
    free(r->bodies);
    free(r->cols);
    free(r->vals);
    free(r);
}

/* Reads the ROWS answer already in c->in and every part after it into a new rows. */
static int read_rows(struct dqclient *c, const char *sql, struct dqclient_rows **out,
                     struct ddp_err *err)
{
    struct dqclient_rows *r = xcalloc(1, sizeof *r);
    size_t cap = 0, bcap = 0, total = 0;
    int rc = 0, type;
    for (;;) {
        struct dqwire_rows part;
        struct ddp_err e;
        total += c->in.len;
        if (total > DQCLIENT_MAX_RESULT) {
            dqc_drop(c);
            rc = err_set(err, DDP_ETOOBIG, "dqlite: query: result over %u bytes",
                         DQCLIENT_MAX_RESULT);
            goto out;
        }
        XGROW(r->bodies, r->nbodies + 1, bcap, 4);
        size_t len;
        char *body = buf_detach(&c->in, &len);
        r->bodies[r->nbodies++] = body;
        if (dqwire_decode_rows(body, len, &part, &e) != 0) {
            rc = err_set(err, DDP_EPEER, "dqlite %s: query: %s", c->node, e.msg);
            dqc_drop(c);
            goto out;
        }
        if (r->cols == NULL) {
            r->ncols = part.ncols;
            r->cols = part.cols;
            part.cols = NULL;
        } else if (part.ncols != r->ncols) {
            dqwire_rows_release(&part);
            rc = dqc_bad_answer(c, "query", err);
            goto out;
        }
        XGROW(r->vals, (r->nrows + part.nrows) * r->ncols, cap, 16);
        if (part.nrows > 0)
            memcpy(r->vals + r->nrows * r->ncols, part.vals,
                   part.nrows * r->ncols * sizeof *part.vals);
        r->nrows += part.nrows;
        int more = part.more;
        dqwire_rows_release(&part);
        if (!more)
            break;
        /* The node sends the next part by itself: read it, no request. */
        rc = dqc_roundtrip(c, "query", sql, DQWIRE_RESP_ROWS, &type, err);
        if (rc != 0) {
            /* A FAILURE mid-result leaves the statement's stream in an unknown state. */
            dqc_drop(c);
            goto out;
        }
    }
out:
    if (rc != 0) {
        dqclient_rows_free(r);
        return rc;
    }
    *out = r;
    return 0;
}

int dqclient_query(struct dqclient *c, const char *sql, const struct dqwire_value *params, size_t n,
                   struct dqclient_rows **out, struct ddp_err *err)
{
    size_t start;
    int type;
    dqc_out_begin(c, DQWIRE_REQ_QUERY_SQL, &start);
    dqc_out_u64(c, c->db_id);
    dqc_out_text(c, sql);
    int rc = put_params(c, "query", sql, params, n, err);
    if (rc != 0)
        return rc;
    dqc_out_end(c, start);
    rc = dqc_roundtrip(c, "query", sql, DQWIRE_RESP_ROWS, &type, err);
    if (rc != 0)
        return rc;
    return read_rows(c, sql, out, err);
}

int dqclient_prepare(struct dqclient *c, const char *sql, struct dqclient_stmt **out,
                     struct ddp_err *err)
{
    size_t start;
    int type;
    uint32_t db, id;
    uint64_t np;
    dqc_out_begin(c, DQWIRE_REQ_PREPARE, &start);
    dqc_out_u64(c, c->db_id);
    dqc_out_text(c, sql);
    dqc_out_end(c, start);
    int rc = dqc_roundtrip(c, "prepare", sql, DQWIRE_RESP_STMT, &type, err);
    if (rc != 0)
        return rc;
    if (dqwire_decode_stmt(c->in.data, c->in.len, &db, &id, &np) != 0)
        return dqc_bad_answer(c, "prepare", err);
    struct dqclient_stmt *s = xcalloc(1, sizeof *s);
    s->c = c;
    s->gen = c->gen;
    s->db_id = db;
    s->id = id;
    s->nparams = np;
    s->sql = xstrdup(sql);
    *out = s;
    return 0;
}

size_t dqclient_stmt_nparams(const struct dqclient_stmt *s)
{
    return (size_t)s->nparams;
}

/* The statement's connection is gone: say so without touching the new one. */
static int stmt_check(struct dqclient_stmt *s, const char *what, struct ddp_err *err)
{
    if (s->gen == s->c->gen && s->c->fd >= 0)
        return 0;
    char q[SQL_SHOWN + 8];
    dqc_shown_sql(s->sql, q, sizeof q);
    return err_set(err, DDP_EUNAVAIL, "dqlite: %s \"%s\": prepared on a lost connection", what, q);
}

static int stmt_send(struct dqclient_stmt *s, uint8_t req, const char *what,
                     const struct dqwire_value *params, size_t n, int want, struct ddp_err *err)
{
    struct dqclient *c = s->c;
    size_t start;
    int type;
    int rc = stmt_check(s, what, err);
    if (rc != 0)
        return rc;
    dqc_out_begin(c, req, &start);
    dqc_out_u32x2(c, s->db_id, s->id);
    rc = put_params(c, what, s->sql, params, n, err);
    if (rc != 0)
        return rc;
    dqc_out_end(c, start);
    return dqc_roundtrip(c, what, s->sql, want, &type, err);
}

int dqclient_stmt_exec(struct dqclient_stmt *s, const struct dqwire_value *params, size_t n,
                       struct dqclient_result *res, struct ddp_err *err)
{
    int rc = stmt_send(s, DQWIRE_REQ_EXEC, "exec", params, n, DQWIRE_RESP_RESULT, err);
    if (rc != 0)
        return rc;
    return read_result(s->c, "exec", res, err);
}

int dqclient_stmt_query(struct dqclient_stmt *s, const struct dqwire_value *params, size_t n,
                        struct dqclient_rows **out, struct ddp_err *err)
{
    int rc = stmt_send(s, DQWIRE_REQ_QUERY, "query", params, n, DQWIRE_RESP_ROWS, err);
    if (rc != 0)
        return rc;
    return read_rows(s->c, s->sql, out, err);
}

void dqclient_stmt_free(struct dqclient_stmt *s)
{
    if (s == NULL)
        return;
    struct dqclient *c = s->c;
    if (stmt_check(s, "finalize", NULL) == 0) {
        size_t start;
        int type;
        dqc_out_begin(c, DQWIRE_REQ_FINALIZE, &start);
        dqc_out_u32x2(c, s->db_id, s->id);
        dqc_out_end(c, start);
        /* A FAILURE here leaves nothing to undo; an I/O error has dropped the connection,
         * which the next call reports. */
        if (dqc_roundtrip(c, "finalize", s->sql, DQWIRE_RESP_EMPTY, &type, NULL) != 0 &&
            c->fd >= 0 && c->failure_code == 0)
            dqc_drop(c);
    }
    free(s->sql);
    free(s);
}
