/*
 * dqwire.c - dqlite's wire protocol as pure functions on buffers (the format is described
 * in dqwire.h).
 *
 * Invariants:
 *   1. Encoders only append whole 8-byte words, so a message body is always word aligned
 *      and dqwire_msg_end() has at most a partial word of padding to add.
 *   2. Decoders take every length from the bytes in front of them and check it against what
 *      is left before reading: a length word can never move the cursor past the end, and a
 *      count can never make an allocation larger than the body could describe.
 *   3. Out-parameters are written only once everything they depend on decoded.
 */
#include "server/dqwire.h"

#include <stdlib.h>
#include <string.h>

#include "common/buf.h"
#include "common/xalloc.h"

static size_t pad8(size_t n)
{
    return (n + 7) & ~(size_t)7;
}

static void le64_put(uint8_t *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (uint8_t)(v >> (8 * i));
}

static uint64_t le64_get(const uint8_t *p)
{
    uint64_t v = 0;
    for (int i = 0; i < 8; i++)
        v |= (uint64_t)p[i] << (8 * i);
    return v;
}

static int put_zeros(struct buf *b, size_t n)
{
    static const uint8_t zeros[8];
    while (n > 0) {
        size_t k = n < sizeof zeros ? n : sizeof zeros;
        int rc = buf_add(b, zeros, k);
        if (rc != 0)
            return rc;
        n -= k;
    }
    return 0;
}

int dqwire_handshake(struct buf *b)
{
    return dqwire_put_u64(b, DQWIRE_PROTOCOL_VERSION);
}

int dqwire_msg_begin(struct buf *b, uint8_t type, size_t *start)
{
    uint8_t h[DQWIRE_HEADER_SIZE] = {0};
    h[4] = type;
    size_t at = b->len;
    int rc = buf_add(b, h, sizeof h);
    if (rc != 0)
        return rc;
    *start = at;
    return 0;
}

int dqwire_msg_end(struct buf *b, size_t start)
{
    size_t body = b->len - start - DQWIRE_HEADER_SIZE;
    int rc = put_zeros(b, pad8(body) - body);
    if (rc != 0)
        return rc;
    uint64_t words = pad8(body) / 8;
    if (words > UINT32_MAX)
        return DDP_ETOOBIG;
    uint8_t *h = (uint8_t *)b->data + start;
    for (int i = 0; i < 4; i++)
        h[i] = (uint8_t)(words >> (8 * i));
    return 0;
}

int dqwire_put_u64(struct buf *b, uint64_t v)
{
    uint8_t w[8];
    le64_put(w, v);
    return buf_add(b, w, sizeof w);
}

int dqwire_put_u32x2(struct buf *b, uint32_t lo, uint32_t hi)
{
    return dqwire_put_u64(b, (uint64_t)lo | ((uint64_t)hi << 32));
}

static int put_bytes_padded(struct buf *b, const void *p, size_t n)
{
    int rc = buf_add(b, p, n);
    if (rc == 0)
        rc = put_zeros(b, pad8(n) - n);
    return rc;
}

int dqwire_put_text(struct buf *b, const char *s)
{
    /* The NUL is part of the text; the padding adds at least none more. */
    return put_bytes_padded(b, s, strlen(s) + 1);
}

int dqwire_put_params(struct buf *b, const struct dqwire_value *v, size_t n, struct ddp_err *err)
{
    if (n > DQWIRE_MAX_PARAMS)
        return err_set(err, DDP_EINVAL, "%zu parameters: dqlite takes at most %d", n,
                       DQWIRE_MAX_PARAMS);
    for (size_t i = 0; i < n; i++) {
        int t = v[i].type;
        if (t != DQWIRE_INTEGER && t != DQWIRE_FLOAT && t != DQWIRE_TEXT && t != DQWIRE_BLOB &&
            t != DQWIRE_NULL && t != DQWIRE_ISO8601 && t != DQWIRE_BOOLEAN)
            return err_set(err, DDP_EINVAL, "parameter %zu: type %d cannot be bound", i + 1, t);
        if ((t == DQWIRE_TEXT || t == DQWIRE_ISO8601) && memchr(v[i].p, 0, v[i].len) != NULL)
            return err_set(err, DDP_EINVAL, "parameter %zu: text holds a NUL byte", i + 1);
    }
    uint8_t head[1 + DQWIRE_MAX_PARAMS];
    head[0] = (uint8_t)n;
    for (size_t i = 0; i < n; i++)
        head[1 + i] = (uint8_t)v[i].type;
    int rc = put_bytes_padded(b, head, 1 + n);
    for (size_t i = 0; rc == 0 && i < n; i++) {
        switch (v[i].type) {
        case DQWIRE_INTEGER:
        case DQWIRE_BOOLEAN:
            rc = dqwire_put_u64(b, (uint64_t)v[i].i);
            break;
        case DQWIRE_FLOAT: {
            uint64_t bits;
            memcpy(&bits, &v[i].f, sizeof bits);
            rc = dqwire_put_u64(b, bits);
            break;
        }
        case DQWIRE_NULL:
            rc = dqwire_put_u64(b, 0);
            break;
        case DQWIRE_TEXT:
        case DQWIRE_ISO8601:
            rc = buf_add(b, v[i].p, v[i].len);
            if (rc == 0)
                rc = put_zeros(b, pad8(v[i].len + 1) - v[i].len);
            break;
        default: /* DQWIRE_BLOB, checked above */
            rc = dqwire_put_u64(b, v[i].len);
            if (rc == 0)
                rc = put_bytes_padded(b, v[i].p, v[i].len);
            break;
        }
    }
    if (rc != 0)
        return err_set(err, rc, "parameters: %s", err_str(rc));
    return 0;
}

void dqwire_header_decode(const uint8_t *h, struct dqwire_header *out)
{
    out->words = (uint32_t)h[0] | (uint32_t)h[1] << 8 | (uint32_t)h[2] << 16 | (uint32_t)h[3] << 24;
    out->type = h[4];
    out->revision = h[5];
}

void dqwire_cursor_init(struct dqwire_cursor *c, const void *p, size_t len)
{
    c->p = p;
    c->left = len;
}

int dqwire_get_u64(struct dqwire_cursor *c, uint64_t *out)
{
    if (c->left < 8)
        return DDP_EINVAL;
    *out = le64_get(c->p);
    c->p += 8;
    c->left -= 8;
    return 0;
}

int dqwire_get_u32x2(struct dqwire_cursor *c, uint32_t *lo, uint32_t *hi)
{
    uint64_t w;
    int rc = dqwire_get_u64(c, &w);
    if (rc != 0)
        return rc;
    *lo = (uint32_t)w;
    *hi = (uint32_t)(w >> 32);
    return 0;
}

int dqwire_get_text(struct dqwire_cursor *c, const char **out, size_t *len)
{
    const uint8_t *nul = memchr(c->p, 0, c->left);
    if (nul == NULL)
        return DDP_EINVAL;
    size_t n = (size_t)(nul - c->p);
    size_t used = pad8(n + 1);
    if (used > c->left)
        return DDP_EINVAL;
    *out = (const char *)c->p;
    if (len != NULL)
        *len = n;
    c->p += used;
    c->left -= used;
    return 0;
}

int dqwire_get_blob(struct dqwire_cursor *c, const void **out, size_t *len)
{
    struct dqwire_cursor at = *c;
    uint64_t n;
    if (dqwire_get_u64(&at, &n) != 0 || n > at.left || pad8((size_t)n) > at.left)
        return DDP_EINVAL;
    *out = at.p;
    *len = (size_t)n;
    at.p += pad8((size_t)n);
    at.left -= pad8((size_t)n);
    *c = at;
    return 0;
}

int dqwire_get_value(struct dqwire_cursor *c, int t, struct dqwire_value *out)
{
    struct dqwire_value v = {.type = t};
    uint64_t w = 0;
    int rc;
    switch (t) {
    case DQWIRE_INTEGER:
    case DQWIRE_UNIXTIME:
    case DQWIRE_BOOLEAN:
        rc = dqwire_get_u64(c, &w);
        v.i = (int64_t)w;
        break;
    case DQWIRE_FLOAT:
        rc = dqwire_get_u64(c, &w);
        memcpy(&v.f, &w, sizeof v.f);
        break;
    case DQWIRE_NULL:
        rc = dqwire_get_u64(c, &w);
        break;
    case DQWIRE_TEXT:
    case DQWIRE_ISO8601: {
        const char *s = NULL;
        rc = dqwire_get_text(c, &s, &v.len);
        v.p = s;
        break;
    }
    case DQWIRE_BLOB:
        rc = dqwire_get_blob(c, &v.p, &v.len);
        break;
    default:
        rc = DDP_EINVAL;
        break;
    }
    if (rc != 0)
        return rc;
    *out = v;
    return 0;
}

int dqwire_get_params(struct dqwire_cursor *c, struct dqwire_value *v, size_t max, size_t *n)
{
    if (c->left < 1)
        return DDP_EINVAL;
    size_t cnt = c->p[0];
    size_t head = pad8(1 + cnt);
    if (cnt > max || head > c->left)
        return DDP_EINVAL;
    struct dqwire_cursor at = {c->p + head, c->left - head};
    for (size_t i = 0; i < cnt; i++) {
        int rc = dqwire_get_value(&at, c->p[1 + i], &v[i]);
        if (rc != 0)
            return rc;
    }
    *c = at;
    *n = cnt;
    return 0;
}

int dqwire_decode_failure(const void *body, size_t len, uint64_t *code, const char **msg)
{
    struct dqwire_cursor c;
    uint64_t k;
    const char *m;
    dqwire_cursor_init(&c, body, len);
    if (dqwire_get_u64(&c, &k) != 0 || dqwire_get_text(&c, &m, NULL) != 0)
        return DDP_EINVAL;
    *code = k;
    *msg = m;
    return 0;
}

int dqwire_decode_server(const void *body, size_t len, uint64_t *id, const char **addr)
{
    struct dqwire_cursor c;
    uint64_t k;
    const char *a;
    dqwire_cursor_init(&c, body, len);
    if (dqwire_get_u64(&c, &k) != 0 || dqwire_get_text(&c, &a, NULL) != 0)
        return DDP_EINVAL;
    *id = k;
    *addr = a;
    return 0;
}

int dqwire_decode_welcome(const void *body, size_t len, uint64_t *heartbeat_ms)
{
    struct dqwire_cursor c;
    dqwire_cursor_init(&c, body, len);
    return dqwire_get_u64(&c, heartbeat_ms);
}

int dqwire_decode_db(const void *body, size_t len, uint32_t *db_id)
{
    struct dqwire_cursor c;
    uint32_t id, pad;
    dqwire_cursor_init(&c, body, len);
    if (dqwire_get_u32x2(&c, &id, &pad) != 0)
        return DDP_EINVAL;
    *db_id = id;
    return 0;
}

int dqwire_decode_stmt(const void *body, size_t len, uint32_t *db_id, uint32_t *stmt_id,
                       uint64_t *nparams)
{
    struct dqwire_cursor c;
    uint32_t db, st;
    uint64_t np;
    dqwire_cursor_init(&c, body, len);
    if (dqwire_get_u32x2(&c, &db, &st) != 0 || dqwire_get_u64(&c, &np) != 0)
        return DDP_EINVAL;
    *db_id = db;
    *stmt_id = st;
    *nparams = np;
    return 0;
}

int dqwire_decode_result(const void *body, size_t len, uint64_t *last_insert_id,
                         uint64_t *rows_affected)
{
    struct dqwire_cursor c;
    uint64_t id, n;
    dqwire_cursor_init(&c, body, len);
    if (dqwire_get_u64(&c, &id) != 0 || dqwire_get_u64(&c, &n) != 0)
        return DDP_EINVAL;
    *last_insert_id = id;
    *rows_affected = n;
    return 0;
}

int dqwire_decode_servers(const void *body, size_t len, struct dqwire_server *s, size_t max,
                          size_t *n)
{
    struct dqwire_cursor c;
    uint64_t cnt;
    dqwire_cursor_init(&c, body, len);
    if (dqwire_get_u64(&c, &cnt) != 0)
        return DDP_EINVAL;
    if (cnt > max)
        return DDP_ETOOBIG;
    for (size_t i = 0; i < cnt; i++) {
        if (dqwire_get_u64(&c, &s[i].id) != 0 || dqwire_get_text(&c, &s[i].address, NULL) != 0 ||
            dqwire_get_u64(&c, &s[i].role) != 0)
            return DDP_EINVAL;
    }
    *n = (size_t)cnt;
    return 0;
}

static int is_marker(const struct dqwire_cursor *c, uint64_t *marker)
{
    if (c->left < 8)
        return 0;
    uint64_t w = le64_get(c->p);
    if (w != DQWIRE_ROWS_DONE && w != DQWIRE_ROWS_PART)
        return 0;
    *marker = w;
    return 1;
}

int dqwire_decode_rows(const void *body, size_t len, struct dqwire_rows *out, struct ddp_err *err)
{
    struct dqwire_cursor c;
    struct dqwire_rows r = {0};
    size_t cap = 0;
    uint64_t ncols, marker = 0;
    int rc = DDP_EINVAL;

    dqwire_cursor_init(&c, body, len);
    /* Each name takes at least a word, so a count past len/8 cannot be real (invariant 2). */
    if (dqwire_get_u64(&c, &ncols) != 0 || ncols == 0 || ncols > c.left / 8) {
        err_set(err, DDP_EINVAL, "rows: bad column count");
        goto fail;
    }
    r.ncols = (size_t)ncols;
    r.cols = xcalloc(r.ncols, sizeof *r.cols);
    for (size_t i = 0; i < r.ncols; i++) {
        if (dqwire_get_text(&c, &r.cols[i], NULL) != 0) {
            err_set(err, DDP_EINVAL, "rows: column name %zu is not text", i);
            goto fail;
        }
    }
    size_t head = pad8((r.ncols + 1) / 2);
    while (!is_marker(&c, &marker)) {
        if (head > c.left) {
            err_set(err, DDP_EINVAL, "rows: row %zu: header past the end", r.nrows);
            goto fail;
        }
        const uint8_t *types = c.p;
        c.p += head;
        c.left -= head;
        /* Every value takes at least a word: the array grows no faster than the body. */
        XGROW(r.vals, (r.nrows + 1) * r.ncols, cap, 16 * r.ncols);
        struct dqwire_value *row = r.vals + r.nrows * r.ncols;
        for (size_t i = 0; i < r.ncols; i++) {
            int t = (types[i / 2] >> (4 * (i % 2))) & 0x0f;
            if (dqwire_get_value(&c, t, &row[i]) != 0) {
                err_set(err, DDP_EINVAL, "rows: row %zu column %zu: bad value of type %d", r.nrows,
                        i, t);
                goto fail;
            }
        }
        r.nrows++;
    }
    if (c.left != 8) {
        err_set(err, DDP_EINVAL, "rows: %zu bytes after the end marker", c.left - 8);
        goto fail;
    }
    r.more = marker == DQWIRE_ROWS_PART;
    *out = r;
    return 0;
fail:
    dqwire_rows_release(&r);
    return rc;
}

void dqwire_rows_release(struct dqwire_rows *r)
{
    if (r == NULL)
        return;
    free(r->cols);
    free(r->vals);
    memset(r, 0, sizeof *r);
}

const char *dqwire_response_name(int type)
{
    static const char *const names[] = {"FAILURE", "SERVER", "WELCOME", "SERVERS", "DB",
                                        "STMT",    "RESULT", "ROWS",    "EMPTY"};
    if (type < 0 || (size_t)type >= sizeof names / sizeof names[0])
        return "?";
    return names[type];
}
