/*
 * rdzv_wire.c - the rendezvous store's wire format (see rdzv_wire.h): framing, and the
 * encoding and decoding of requests and replies. No sockets and no state here: the server
 * (rdzv_server.c) and the client (rdzv.c) move the bytes.
 *
 * Wire format (both directions), little endian:
 *   frame    = u32 body_len, body                    (1 <= body_len <= RDZV_FRAME_MAX)
 *   request  = u8 op, payload
 *     HELLO  u32 rank, u32 world_size, secret bytes  (must be the first request)
 *     SET    u16 klen, key, value bytes
 *     GET    u32 timeout_ms, u16 klen, key           -> value
 *     WAIT   u32 timeout_ms, u16 nkeys, (u16 klen, key)*
 *     ADD    i64 delta, u16 klen, key                -> i64 new value
 *   reply    = u8 status, payload (the value, the i64, or an error text)
 *
 * Invariants:
 *  1. Bounds, checked by the encoders and by the decoder alike: a frame body is 1 to
 *     RDZV_FRAME_MAX bytes, a key 1 to RDZV_KEY_MAX, a SET value at most RDZV_VALUE_MAX, a
 *     secret under RDZV_SECRET_MAX, a WAIT at most RDZV_WAIT_KEYS_MAX keys. The largest
 *     request (a SET of RDZV_VALUE_MAX bytes under the longest key) fits a frame.
 *  2. A request decodes only when it is exact: every field present, every bound kept, no
 *     byte left over (HELLO's secret and SET's value are the rest of the body, so they have
 *     no length field). A decoded request points into the body it came from.
 *  3. The decoder reads only the len bytes it is given and never allocates, so any input,
 *     however broken, costs no more than one pass over it (the fuzz target fuzz_rdzv drives
 *     it through the server).
 */
#include "libddp/rdzv_wire.h"

#include <string.h>

#include "common/err.h"

_Static_assert(1 + 2 + RDZV_KEY_MAX + RDZV_VALUE_MAX <= RDZV_FRAME_MAX,
               "the largest SET fits a frame");
_Static_assert(1 + 4 + 2 + RDZV_WAIT_KEYS_MAX * (2 + RDZV_KEY_MAX) <= RDZV_FRAME_MAX,
               "the largest WAIT fits a frame");

const char *rdzv_wire_op_name(int op)
{
    switch (op) {
    case RDZV_OP_HELLO:
        return "hello";
    case RDZV_OP_SET:
        return "set";
    case RDZV_OP_GET:
        return "get";
    case RDZV_OP_WAIT:
        return "wait";
    case RDZV_OP_ADD:
        return "add";
    default:
        return "unknown";
    }
}

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

int rdzv_wire_frame_len(const uint8_t hdr[4], uint32_t *len)
{
    *len = get_u32(hdr);
    return *len == 0 || *len > RDZV_FRAME_MAX ? -1 : 0;
}

/* ---- encoding ---- */

/* An encoder over one frame: the header is written first, then each field; the first error
 * sticks. */
struct enc {
    struct buf *b;
    int ret;
};

static void enc_bytes(struct enc *e, const void *p, size_t n)
{
    if (e->ret == 0 && n)
        e->ret = buf_add(e->b, p, n);
}

static void enc_uint(struct enc *e, uint64_t v, int bytes)
{
    uint8_t t[8];
    for (int i = 0; i < bytes; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    enc_bytes(e, t, (size_t)bytes);
}

static void enc_key(struct enc *e, const char *key)
{
    size_t n = strlen(key);
    enc_uint(e, n, 2);
    enc_bytes(e, key, n);
}

/* Starts a frame of body bytes: checks the bound and reserves the whole frame, so that the
 * fields after it cannot fail and a refused frame leaves b as it was. */
static struct enc enc_begin(struct buf *b, size_t body)
{
    struct enc e = {.b = b, .ret = 0};
    if (body == 0 || body > RDZV_FRAME_MAX) {
        e.ret = DDP_ETOOBIG;
        return e;
    }
    e.ret = buf_reserve(b, 4 + body);
    enc_uint(&e, body, 4);
    return e;
}

int rdzv_wire_hello(struct buf *b, uint32_t rank, uint32_t world, const char *secret)
{
    size_t n = strlen(secret);
    if (n >= RDZV_SECRET_MAX)
        return DDP_ETOOBIG;
    struct enc e = enc_begin(b, 1 + 4 + 4 + n);
    enc_uint(&e, RDZV_OP_HELLO, 1);
    enc_uint(&e, rank, 4);
    enc_uint(&e, world, 4);
    enc_bytes(&e, secret, n);
    return e.ret;
}

int rdzv_wire_set(struct buf *b, const char *key, const void *value, size_t len)
{
    if (len > RDZV_VALUE_MAX)
        return DDP_ETOOBIG;
    struct enc e = enc_begin(b, 1 + 2 + strlen(key) + len);
    enc_uint(&e, RDZV_OP_SET, 1);
    enc_key(&e, key);
    enc_bytes(&e, value, len);
    return e.ret;
}

int rdzv_wire_get(struct buf *b, uint32_t timeout_ms, const char *key)
{
    struct enc e = enc_begin(b, 1 + 4 + 2 + strlen(key));
    enc_uint(&e, RDZV_OP_GET, 1);
    enc_uint(&e, timeout_ms, 4);
    enc_key(&e, key);
    return e.ret;
}

int rdzv_wire_wait(struct buf *b, uint32_t timeout_ms, const char *const *keys, int nkeys)
{
    if (nkeys < 0 || nkeys > RDZV_WAIT_KEYS_MAX)
        return DDP_ETOOBIG;
    size_t body = 1 + 4 + 2;
    for (int i = 0; i < nkeys; i++)
        body += 2 + strlen(keys[i]);
    struct enc e = enc_begin(b, body);
    enc_uint(&e, RDZV_OP_WAIT, 1);
    enc_uint(&e, timeout_ms, 4);
    enc_uint(&e, (uint64_t)nkeys, 2);
    for (int i = 0; i < nkeys; i++)
        enc_key(&e, keys[i]);
    return e.ret;
}

int rdzv_wire_add(struct buf *b, int64_t delta, const char *key)
{
    struct enc e = enc_begin(b, 1 + 8 + 2 + strlen(key));
    enc_uint(&e, RDZV_OP_ADD, 1);
    enc_uint(&e, (uint64_t)delta, 8);
    enc_key(&e, key);
    return e.ret;
}

int rdzv_wire_reply(struct buf *b, int status, const void *payload, size_t len)
{
    struct enc e = enc_begin(b, 1 + len);
    enc_uint(&e, (uint64_t)status, 1);
    enc_bytes(&e, payload, len);
    return e.ret;
}

int rdzv_wire_reply_text(struct buf *b, int status, const char *text)
{
    return rdzv_wire_reply(b, status, text, strlen(text));
}

int rdzv_wire_reply_i64(struct buf *b, int64_t v)
{
    struct enc e = enc_begin(b, 1 + 8);
    enc_uint(&e, RDZV_ST_OK, 1);
    enc_uint(&e, (uint64_t)v, 8);
    return e.ret;
}

/* ---- decoding ---- */

/* A reader over the rest of a body; the first short read sticks in bad. */
struct rbuf {
    const uint8_t *p;
    size_t n;
    int bad;
};

static uint64_t rb_uint(struct rbuf *r, int bytes)
{
    if (r->bad || r->n < (size_t)bytes) {
        r->bad = 1;
        return 0;
    }
    uint64_t v = 0;
    for (int i = 0; i < bytes; i++)
        v |= (uint64_t)r->p[i] << (8 * i);
    r->p += bytes;
    r->n -= (size_t)bytes;
    return v;
}

static const uint8_t *rb_take(struct rbuf *r, size_t len)
{
    if (r->bad || r->n < len) {
        r->bad = 1;
        return NULL;
    }
    const uint8_t *p = r->p;
    r->p += len;
    r->n -= len;
    return p;
}

/* Reads one key (u16 klen, key) from r; NULL (and r->bad) when malformed or too long. */
static const uint8_t *rb_key(struct rbuf *r, size_t *klen)
{
    size_t n = (size_t)rb_uint(r, 2);
    if (r->bad || n == 0 || n > RDZV_KEY_MAX) {
        r->bad = 1;
        return NULL;
    }
    *klen = n;
    return rb_take(r, n);
}

int rdzv_wire_decode(const uint8_t *body, size_t len, struct rdzv_req *q)
{
    memset(q, 0, sizeof(*q));
    if (len == 0)
        return RDZV_DEC_MALFORMED;
    struct rbuf r = {.p = body + 1, .n = len - 1};
    q->op = body[0];
    switch (q->op) {
    case RDZV_OP_HELLO:
        q->rank = (uint32_t)rb_uint(&r, 4);
        q->world = (uint32_t)rb_uint(&r, 4);
        if (r.bad || r.n >= RDZV_SECRET_MAX)
            return RDZV_DEC_MALFORMED;
        q->secret = r.p;
        q->secret_len = r.n;
        return RDZV_DEC_OK;
    case RDZV_OP_SET:
        q->key = rb_key(&r, &q->klen);
        if (r.bad || r.n > RDZV_VALUE_MAX)
            return RDZV_DEC_MALFORMED;
        q->value = r.p;
        q->len = r.n;
        return RDZV_DEC_OK;
    case RDZV_OP_GET:
        q->timeout_ms = (uint32_t)rb_uint(&r, 4);
        q->key = rb_key(&r, &q->klen);
        return r.bad || r.n != 0 ? RDZV_DEC_MALFORMED : RDZV_DEC_OK;
    case RDZV_OP_WAIT:
        q->timeout_ms = (uint32_t)rb_uint(&r, 4);
        q->nkeys = (size_t)rb_uint(&r, 2);
        if (r.bad || q->nkeys > RDZV_WAIT_KEYS_MAX)
            return RDZV_DEC_MALFORMED;
        q->keys = r.p;
        for (size_t i = 0; i < q->nkeys; i++) {
            size_t klen = 0;
            (void)rb_key(&r, &klen);
        }
        if (r.bad || r.n != 0)
            return RDZV_DEC_MALFORMED;
        q->keys_len = (size_t)(r.p - q->keys);
        return RDZV_DEC_OK;
    case RDZV_OP_ADD:
        q->delta = (int64_t)rb_uint(&r, 8);
        q->key = rb_key(&r, &q->klen);
        return r.bad || r.n != 0 ? RDZV_DEC_MALFORMED : RDZV_DEC_OK;
    default:
        return RDZV_DEC_UNKNOWN_OP;
    }
}

const uint8_t *rdzv_wire_next_key(const struct rdzv_req *q, size_t *pos, size_t *klen)
{
    if (*pos >= q->keys_len)
        return NULL;
    /* Checked by rdzv_wire_decode(): each entry is whole and within bounds. */
    struct rbuf r = {.p = q->keys + *pos, .n = q->keys_len - *pos};
    const uint8_t *key = rb_key(&r, klen);
    if (r.bad)
        return NULL;
    *pos = q->keys_len - r.n;
    return key;
}

int rdzv_wire_i64(const uint8_t *payload, size_t len, int64_t *v)
{
    if (len != 8)
        return -1;
    struct rbuf r = {.p = payload, .n = len};
    *v = (int64_t)rb_uint(&r, 8);
    return 0;
}
