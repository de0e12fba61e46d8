/*
 * rdzv.c - the rendezvous store (see rdzv.h): rank 0's server thread and every rank's client.
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
 *  1. A client has at most one request outstanding; the server answers every request exactly
 *     once: at once, or (GET/WAIT on missing keys) when the keys appear or the request's own
 *     deadline passes, whichever is first. So a client never waits longer than its timeout
 *     plus one round trip, and its stream never goes out of step; a client that gives up
 *     mid-request marks its connection broken and fails every later call.
 *  2. Every size is bounded: keys RDZV_KEY_MAX, values RDZV_VALUE_MAX, frames
 *     RDZV_FRAME_MAX, RDZV_CONN_MAX connections, RDZV_KEYS_MAX keys, RDZV_BYTES_MAX bytes
 *     held. A peer that breaks a
 *     bound, sends garbage or a wrong secret is answered (where it can be) and dropped; one
 *     that says nothing is dropped after RDZV_HELLO_WAIT_MS.
 *  3. Only the server thread touches the key-value table and the connections; the mutex
 *     guards just `stop` and the departure bookkeeping that rank 0's rdzv_close() waits on.
 *  4. Counters (ADD) are stored as decimal text, like torch's TCPStore, so GET reads them.
 */
#include "ddp/rdzv.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <poll.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/randutil.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "libddp/net.h"

#define RDZV_FRAME_MAX (RDZV_VALUE_MAX + 1024)
#define RDZV_CONN_MAX 1024
#define RDZV_KEYS_MAX 65536
#define RDZV_BYTES_MAX ((size_t)256 << 20) /* keys + values held, all together */
#define RDZV_SECRET_MAX 1024
#define RDZV_WAIT_KEYS_MAX 1024
#define RDZV_CLOSE_WAIT_MAX_MS 10000
#define RDZV_HELLO_WAIT_MS 10000 /* a connection must say hello within this */

enum rdzv_op { OP_HELLO = 1, OP_SET = 2, OP_GET = 3, OP_WAIT = 4, OP_ADD = 5 };
enum rdzv_status { ST_OK = 0, ST_TIMEOUT = 1, ST_PERM = 2, ST_INVAL = 3 };

/* ---- little-endian encoding ---- */

struct wbuf {
    uint8_t *p;
    size_t n, cap;
};

static void wb_put(struct wbuf *b, const void *src, size_t len)
{
    if (b->n + len > b->cap) {
        size_t cap = b->cap ? b->cap : 64;
        while (cap < b->n + len)
            cap *= 2;
        b->p = xrealloc(b->p, cap);
        b->cap = cap;
    }
    memcpy(b->p + b->n, src, len);
    b->n += len;
}

static void wb_uint(struct wbuf *b, uint64_t v, int bytes)
{
    uint8_t t[8];
    for (int i = 0; i < bytes; i++)
        t[i] = (uint8_t)(v >> (8 * i));
    wb_put(b, t, (size_t)bytes);
}

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

static uint32_t get_u32(const uint8_t *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

/* ---- server ---- */

struct kv {
    uint8_t *key;
    size_t klen;
    uint8_t *val;
    size_t len;
};

struct sconn {
    int fd;
    int authed;
    int rank;
    int closing; /* drop once the out buffer is flushed */
    int dead;
    int64_t hello_deadline; /* dropped if not authenticated by then */
    uint8_t *in;
    size_t in_len, in_cap;
    uint8_t *out;
    size_t out_len, out_off;
    uint8_t *pend; /* a GET/WAIT body waiting for keys, or NULL */
    size_t pend_len;
    int64_t pend_deadline;
};

struct rdzv_server {
    int lfd;
    int wake[2];
    pthread_t thread;
    int world;
    char secret[RDZV_SECRET_MAX];
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int stop;             /* guarded by mu */
    unsigned char *state; /* per rank: 0 unseen, 1 connected, 2 left; guarded by mu */
    int live;             /* ranks 1..W-1 in state 1; guarded by mu */
    struct sconn *conns;
    int nconns;
    struct kv *kvs;
    size_t nkv, kv_cap;
    size_t kv_bytes; /* keys + values held */
};

static struct kv *kv_find(struct rdzv_server *s, const uint8_t *key, size_t klen)
{
    for (size_t i = 0; i < s->nkv; i++)
        if (s->kvs[i].klen == klen && memcmp(s->kvs[i].key, key, klen) == 0)
            return &s->kvs[i];
    return NULL;
}

/* Sets key to a copy of val; returns 0 or ST_INVAL when the table is full. */
static int kv_set(struct rdzv_server *s, const uint8_t *key, size_t klen, const uint8_t *val,
                  size_t len)
{
    struct kv *e = kv_find(s, key, klen);
    size_t held = s->kv_bytes - (e ? e->klen + e->len : 0);
    if (held + klen + len > RDZV_BYTES_MAX)
        return ST_INVAL;
    if (!e) {
        if (s->nkv >= RDZV_KEYS_MAX)
            return ST_INVAL;
        if (s->nkv == s->kv_cap) {
            s->kv_cap = s->kv_cap ? s->kv_cap * 2 : 64;
            s->kvs = xrealloc(s->kvs, s->kv_cap * sizeof(*s->kvs));
        }
        e = &s->kvs[s->nkv++];
        e->key = xmalloc(klen);
        memcpy(e->key, key, klen);
        e->klen = klen;
        e->val = NULL;
        e->len = 0;
    }
    free(e->val);
    e->val = xmalloc(len ? len : 1);
    if (len)
        memcpy(e->val, val, len);
    e->len = len;
    s->kv_bytes = held + klen + len;
    return 0;
}

static void conn_reply(struct sconn *c, int status, const void *payload, size_t len)
{
    size_t need = c->out_len + 5 + len;
    uint8_t *o = xrealloc(c->out, need);
    uint32_t body = (uint32_t)(1 + len);
    for (int i = 0; i < 4; i++)
        o[c->out_len + (size_t)i] = (uint8_t)(body >> (8 * i));
    o[c->out_len + 4] = (uint8_t)status;
    if (len)
        memcpy(o + c->out_len + 5, payload, len);
    c->out = o;
    c->out_len = need;
}

static void conn_reply_text(struct sconn *c, int status, const char *text)
{
    conn_reply(c, status, text, strlen(text));
}

static void conn_flush(struct sconn *c)
{
    while (c->out_off < c->out_len) {
        ssize_t n = send(c->fd, c->out + c->out_off, c->out_len - c->out_off,
                         MSG_NOSIGNAL | MSG_DONTWAIT);
        if (n > 0) {
            c->out_off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        c->dead = 1;
        return;
    }
    c->out_off = c->out_len = 0;
    if (c->closing)
        c->dead = 1;
}

/* Reads one key (u16 klen, key) from r; NULL when malformed or too long. */
static const uint8_t *read_key(struct rbuf *r, size_t *klen)
{
    size_t n = (size_t)rb_uint(r, 2);
    if (r->bad || n == 0 || n > RDZV_KEY_MAX) {
        r->bad = 1;
        return NULL;
    }
    *klen = n;
    return rb_take(r, n);
}

/*
 * Serves a GET or WAIT body (op byte included). Returns 1 when answered, 0 when the keys are
 * not all there yet (the caller keeps it pending), -1 when malformed (answered ST_INVAL).
 */
static int serve_lookup(struct rdzv_server *s, struct sconn *c, const uint8_t *body, size_t len,
                        int64_t *timeout_ms)
{
    struct rbuf r = {.p = body + 1, .n = len - 1};
    *timeout_ms = (int64_t)rb_uint(&r, 4);
    if (body[0] == OP_GET) {
        size_t klen = 0;
        const uint8_t *key = read_key(&r, &klen);
        if (r.bad || r.n != 0) {
            conn_reply_text(c, ST_INVAL, "malformed get");
            return -1;
        }
        struct kv *e = kv_find(s, key, klen);
        if (!e)
            return 0;
        conn_reply(c, ST_OK, e->val, e->len);
        return 1;
    }
    size_t nkeys = (size_t)rb_uint(&r, 2);
    if (r.bad || nkeys > RDZV_WAIT_KEYS_MAX) {
        conn_reply_text(c, ST_INVAL, "malformed wait");
        return -1;
    }
    int all = 1;
    for (size_t i = 0; i < nkeys; i++) {
        size_t klen = 0;
        const uint8_t *key = read_key(&r, &klen);
        if (r.bad) {
            conn_reply_text(c, ST_INVAL, "malformed wait");
            return -1;
        }
        if (all && !kv_find(s, key, klen))
            all = 0;
    }
    if (r.n != 0) {
        conn_reply_text(c, ST_INVAL, "malformed wait");
        return -1;
    }
    if (!all)
        return 0;
    conn_reply(c, ST_OK, NULL, 0);
    return 1;
}

/* Answers the pending requests whose keys are now all there. */
static void serve_pending(struct rdzv_server *s)
{
    for (int i = 0; i < s->nconns; i++) {
        struct sconn *c = &s->conns[i];
        if (!c->pend || c->dead)
            continue;
        int64_t t = 0;
        if (serve_lookup(s, c, c->pend, c->pend_len, &t) != 0) {
            free(c->pend);
            c->pend = NULL;
            conn_flush(c);
        }
    }
}

static void mark_rank(struct rdzv_server *s, int rank, unsigned char st)
{
    pthread_mutex_lock(&s->mu);
    if (rank != 0 && st == 1 && s->state[rank] != 1)
        s->live++;
    if (rank != 0 && st == 2 && s->state[rank] == 1)
        s->live--;
    s->state[rank] = st;
    pthread_cond_broadcast(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static void handle_hello(struct rdzv_server *s, struct sconn *c, struct rbuf *r)
{
    uint32_t rank = (uint32_t)rb_uint(r, 4);
    uint32_t world = (uint32_t)rb_uint(r, 4);
    if (r->bad || r->n >= RDZV_SECRET_MAX) {
        conn_reply_text(c, ST_INVAL, "malformed hello");
        c->closing = 1;
        return;
    }
    char secret[RDZV_SECRET_MAX];
    memcpy(secret, r->p, r->n);
    secret[r->n] = '\0';
    /* Compare in constant time; an embedded NUL makes the lengths differ, so it fails. */
    int ok = secret_equal(secret, s->secret) && strlen(secret) == r->n;
    if (!ok) {
        conn_reply_text(c, ST_PERM, "wrong job secret");
        c->closing = 1;
        return;
    }
    if ((int)world != s->world || rank >= world) {
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "rank %u of world size %u does not fit the store's world size %d", rank, world,
                 s->world);
        conn_reply_text(c, ST_INVAL, msg);
        c->closing = 1;
        return;
    }
    c->authed = 1;
    c->rank = (int)rank;
    mark_rank(s, c->rank, 1);
    conn_reply(c, ST_OK, NULL, 0);
}

static void handle_add(struct rdzv_server *s, struct sconn *c, struct rbuf *r)
{
    int64_t delta = (int64_t)rb_uint(r, 8);
    size_t klen = 0;
    const uint8_t *key = read_key(r, &klen);
    if (r->bad || r->n != 0) {
        conn_reply_text(c, ST_INVAL, "malformed add");
        return;
    }
    int64_t cur = 0;
    struct kv *e = kv_find(s, key, klen);
    if (e) {
        char num[32];
        if (e->len == 0 || e->len >= sizeof(num)) {
            conn_reply_text(c, ST_INVAL, "value is not an integer");
            return;
        }
        memcpy(num, e->val, e->len);
        num[e->len] = '\0';
        char *end = NULL;
        errno = 0;
        long long v = strtoll(num, &end, 10);
        if (errno || *end != '\0') {
            conn_reply_text(c, ST_INVAL, "value is not an integer");
            return;
        }
        cur = (int64_t)v;
    }
    int64_t nv = (int64_t)((uint64_t)cur + (uint64_t)delta);
    char num[32];
    int n = snprintf(num, sizeof(num), "%" PRId64, nv);
    if (kv_set(s, key, klen, (const uint8_t *)num, (size_t)n) != 0) {
        conn_reply_text(c, ST_INVAL, "store is full");
        return;
    }
    uint8_t out[8];
    for (int i = 0; i < 8; i++)
        out[i] = (uint8_t)((uint64_t)nv >> (8 * i));
    conn_reply(c, ST_OK, out, 8);
    serve_pending(s);
}

/* Handles one request body; may queue a reply, make it pending, or mark the conn closing. */
static void handle_request(struct rdzv_server *s, struct sconn *c, const uint8_t *body,
                           size_t len)
{
    struct rbuf r = {.p = body + 1, .n = len - 1};
    uint8_t op = body[0];
    if (!c->authed) {
        if (op != OP_HELLO) {
            conn_reply_text(c, ST_PERM, "first message must be hello");
            c->closing = 1;
            return;
        }
        handle_hello(s, c, &r);
        return;
    }
    switch (op) {
    case OP_SET: {
        size_t klen = 0;
        const uint8_t *key = read_key(&r, &klen);
        if (r.bad || r.n > RDZV_VALUE_MAX) {
            conn_reply_text(c, ST_INVAL, "malformed set");
            return;
        }
        if (kv_set(s, key, klen, r.p, r.n) != 0) {
            conn_reply_text(c, ST_INVAL, "store is full");
            return;
        }
        conn_reply(c, ST_OK, NULL, 0);
        serve_pending(s);
        return;
    }
    case OP_GET:
    case OP_WAIT: {
        int64_t t = 0;
        int done = serve_lookup(s, c, body, len, &t);
        if (done == 0) {
            c->pend = xmalloc(len);
            memcpy(c->pend, body, len);
            c->pend_len = len;
            c->pend_deadline = time_mono_ms() + t;
        }
        return;
    }
    case OP_ADD:
        handle_add(s, c, &r);
        return;
    default:
        conn_reply_text(c, ST_INVAL, "unknown request");
        c->closing = 1;
        return;
    }
}

/* Handles the complete frames in c's input buffer (stops at a pending request). */
static void conn_process(struct rdzv_server *s, struct sconn *c)
{
    size_t off = 0;
    while (!c->pend && !c->closing && !c->dead && c->in_len - off >= 4) {
        uint32_t len = get_u32(c->in + off);
        if (len == 0 || len > RDZV_FRAME_MAX) {
            c->dead = 1;
            break;
        }
        if (c->in_len - off < 4 + (size_t)len)
            break;
        handle_request(s, c, c->in + off + 4, len);
        off += 4 + (size_t)len;
    }
    if (off) {
        memmove(c->in, c->in + off, c->in_len - off);
        c->in_len -= off;
    }
    conn_flush(c);
}

static void conn_read(struct rdzv_server *s, struct sconn *c)
{
    for (;;) {
        if (c->in_len == c->in_cap) {
            if (c->in_cap >= 4 + (size_t)RDZV_FRAME_MAX)
                break; /* full: wait until the pending request is answered */
            size_t cap = c->in_cap ? c->in_cap * 2 : 4096;
            if (cap > 4 + (size_t)RDZV_FRAME_MAX)
                cap = 4 + (size_t)RDZV_FRAME_MAX;
            c->in = xrealloc(c->in, cap);
            c->in_cap = cap;
        }
        ssize_t n = recv(c->fd, c->in + c->in_len, c->in_cap - c->in_len, MSG_DONTWAIT);
        if (n > 0) {
            c->in_len += (size_t)n;
            conn_process(s, c);
            if (c->dead || c->closing)
                return;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return;
        c->dead = 1;
        return;
    }
}

static void conn_release(struct rdzv_server *s, struct sconn *c)
{
    if (c->authed)
        mark_rank(s, c->rank, 2);
    close(c->fd);
    free(c->in);
    free(c->out);
    free(c->pend);
}

static void *server_main(void *arg)
{
    struct rdzv_server *s = arg;
    struct pollfd *pfd = xcalloc(RDZV_CONN_MAX + 2, sizeof(*pfd));
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
        int64_t now = time_mono_ms();
        int timeout = -1;
        pfd[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        for (int i = 0; i < s->nconns; i++) {
            struct sconn *c = &s->conns[i];
            short ev = 0;
            if (c->in_len < c->in_cap || c->in_cap < 4 + (size_t)RDZV_FRAME_MAX)
                ev |= POLLIN;
            if (c->out_off < c->out_len)
                ev |= POLLOUT;
            pfd[2 + i] = (struct pollfd){.fd = c->fd, .events = ev};
            if (!c->authed) {
                int64_t left = c->hello_deadline - now;
                if (left < 0)
                    left = 0;
                if (timeout < 0 || left < timeout)
                    timeout = (int)(left > 0x7fffffff ? 0x7fffffff : left);
            }
            if (c->pend) {
                int64_t left = c->pend_deadline - now;
                if (left < 0)
                    left = 0;
                if (left > 0x7fffffff)
                    left = 0x7fffffff;
                if (timeout < 0 || left < timeout)
                    timeout = (int)left;
            }
        }
        int polled = s->nconns;
        int n = poll(pfd, (nfds_t)(2 + polled), timeout);
        if (n < 0 && errno != EINTR)
            break;
        if (n > 0 && (pfd[0].revents & POLLIN)) {
            char drain[64];
            while (read(s->wake[0], drain, sizeof(drain)) > 0) {
            }
        }
        for (int i = 0; n > 0 && i < polled; i++) {
            struct sconn *c = &s->conns[i];
            if (pfd[2 + i].revents & POLLOUT)
                conn_flush(c);
            if (!c->dead && (pfd[2 + i].revents & (POLLIN | POLLHUP | POLLERR)))
                conn_read(s, c);
        }
        now = time_mono_ms();
        for (int i = 0; i < s->nconns; i++) {
            struct sconn *c = &s->conns[i];
            if (!c->authed && !c->closing && now >= c->hello_deadline)
                c->dead = 1;
            if (c->pend && !c->dead && now >= c->pend_deadline) {
                free(c->pend);
                c->pend = NULL;
                conn_reply_text(c, ST_TIMEOUT, "keys not set in time");
                conn_process(s, c);
            }
        }
        /* Drop dead connections (keep the order of the rest). */
        int w = 0;
        for (int i = 0; i < s->nconns; i++) {
            if (s->conns[i].dead)
                conn_release(s, &s->conns[i]);
            else
                s->conns[w++] = s->conns[i];
        }
        s->nconns = w;
        if (n > 0 && (pfd[1].revents & POLLIN)) {
            for (;;) {
                int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
                if (fd < 0) {
                    if (errno == EINTR || errno == ECONNABORTED)
                        continue;
                    break;
                }
                if (s->nconns >= RDZV_CONN_MAX) {
                    close(fd);
                    continue;
                }
                (void)net_set_nodelay(fd);
                struct sconn *c = &s->conns[s->nconns++];
                memset(c, 0, sizeof(*c));
                c->fd = fd;
                c->rank = -1;
                c->hello_deadline = time_mono_ms() + RDZV_HELLO_WAIT_MS;
            }
        }
    }
    free(pfd);
    return NULL;
}

static void server_free(struct rdzv_server *s)
{
    if (!s)
        return;
    for (int i = 0; i < s->nconns; i++)
        conn_release(s, &s->conns[i]);
    free(s->conns);
    for (size_t i = 0; i < s->nkv; i++) {
        free(s->kvs[i].key);
        free(s->kvs[i].val);
    }
    free(s->kvs);
    free(s->state);
    if (s->lfd >= 0)
        close(s->lfd);
    if (s->wake[0] >= 0)
        close(s->wake[0]);
    if (s->wake[1] >= 0)
        close(s->wake[1]);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

static int server_start(int port, int world, const char *secret, struct rdzv_server **out,
                        struct ddp_err *err)
{
    int ret = 0;
    struct rdzv_server *s = xcalloc(1, sizeof(*s));
    s->lfd = s->wake[0] = s->wake[1] = -1;
    s->world = world;
    memcpy(s->secret, secret, strlen(secret) + 1);
    s->state = xcalloc((size_t)world, 1);
    s->conns = xcalloc(RDZV_CONN_MAX, sizeof(*s->conns));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
        ret = err_set(err, DDP_EIO, "pipe: %s", strerror(errno));
        goto out;
    }
    struct ddp_err e;
    ret = net_listen(NULL, port, 128, &s->lfd, NULL, &e);
    if (ret == DDP_EEXIST) {
        err_set(err, DDP_EEXIST, "MASTER_PORT %d is already in use", port);
        goto out;
    }
    if (ret < 0) {
        err_set(err, ret, "rendezvous store cannot listen on MASTER_PORT %d: %s", port, e.msg);
        goto out;
    }
    if (pthread_create(&s->thread, NULL, server_main, s) != 0) {
        ret = err_set(err, DDP_EINTERNAL, "cannot start the rendezvous server thread");
        goto out;
    }
    *out = s;
    s = NULL;
out:
    server_free(s);
    return ret;
}

/*
 * Waits (until deadline) until no other rank is connected, then stops and frees the server.
 * A rank that never connected is not waited for: in a run that got as far as closing, every
 * rank has connected (the comm set-up needs them all), and on a failure path a rank that
 * comes later finds no store and fails by its own deadline.
 */
static void server_stop(struct rdzv_server *s, int64_t deadline_ms)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    while (s->live > 0) {
        int64_t left = deadline_ms - time_mono_ms();
        if (left <= 0)
            break;
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        int64_t step = left < 100 ? left : 100;
        ts.tv_nsec += (long)(step * 1000000);
        while (ts.tv_nsec >= 1000000000L) {
            ts.tv_sec++;
            ts.tv_nsec -= 1000000000L;
        }
        pthread_cond_timedwait(&s->cv, &s->mu, &ts);
    }
    s->stop = 1;
    pthread_mutex_unlock(&s->mu);
    char one = 1;
    ssize_t w = write(s->wake[1], &one, 1);
    (void)w; /* a full pipe already wakes the thread */
    pthread_join(s->thread, NULL);
    server_free(s);
}

/* ---- client ---- */

struct rdzv {
    int fd;
    int rank, world;
    int64_t timeout_ms;
    int broken;
    char host[256];
    int port;
    uint64_t barrier_seq;
    uint64_t next_id;
    struct rdzv_server *srv;
};

static void mark_broken(struct rdzv *r)
{
    if (r->fd >= 0)
        close(r->fd);
    r->fd = -1;
    r->broken = 1;
}

/*
 * Sends body (op byte first) and reads the reply within wait_ms + the store timeout.
 * On success *status is the reply status and *reply (caller frees; may be NULL with *rlen 0)
 * its payload.
 */
static int request(struct rdzv *r, const struct wbuf *body, int64_t wait_ms, int *status,
                   uint8_t **reply, size_t *rlen, struct ddp_err *err)
{
    int ret = 0;
    uint8_t *payload = NULL;
    struct ddp_err e;
    if (r->broken)
        return err_set(err, DDP_EPEER,
                       "connection to the rendezvous store at %s:%d is broken by an earlier error",
                       r->host, r->port);
    uint8_t hdr[4];
    for (int i = 0; i < 4; i++)
        hdr[i] = (uint8_t)((uint32_t)body->n >> (8 * i));
    int64_t now = time_mono_ms();
    if ((ret = net_send_all(r->fd, hdr, 4, now + r->timeout_ms, &e)) < 0 ||
        (ret = net_send_all(r->fd, body->p, body->n, now + r->timeout_ms, &e)) < 0)
        goto fail;
    int64_t deadline = time_mono_ms() + wait_ms + r->timeout_ms;
    if ((ret = net_recv_all(r->fd, hdr, 4, deadline, &e)) < 0)
        goto fail;
    uint32_t len = get_u32(hdr);
    if (len == 0 || len > RDZV_FRAME_MAX) {
        ret = DDP_EPEER;
        snprintf(e.msg, sizeof(e.msg), "malformed reply of %u bytes", len);
        goto fail;
    }
    payload = xmalloc(len);
    if ((ret = net_recv_all(r->fd, payload, len, deadline, &e)) < 0)
        goto fail;
    *status = payload[0];
    *rlen = len - 1;
    memmove(payload, payload + 1, len - 1);
    *reply = payload;
    return 0;
fail:
    free(payload);
    mark_broken(r);
    return err_set(err, ret, "rendezvous store at %s:%d: %s", r->host, r->port, e.msg);
}

/* Turns a non-OK status into an error; returns 0 for ST_OK. */
static int status_error(struct rdzv *r, int status, const uint8_t *reply, size_t rlen,
                        const char *what, struct ddp_err *err)
{
    if (status == ST_OK)
        return 0;
    int code = status == ST_TIMEOUT ? DDP_ETIMEOUT : status == ST_PERM ? DDP_EPERM : DDP_EINVAL;
    return err_set(err, code, "rendezvous store %s:%d: %s: %.*s", r->host, r->port, what,
                   (int)(rlen > 200 ? 200 : rlen), reply ? (const char *)reply : "");
}

static uint32_t clamp_ms(int64_t ms)
{
    if (ms < 0)
        return 0;
    if (ms > 0x7fffffff)
        return 0x7fffffff;
    return (uint32_t)ms;
}

static int check_key(const char *key, struct ddp_err *err)
{
    size_t n = key ? strlen(key) : 0;
    if (n == 0 || n > RDZV_KEY_MAX)
        return err_set(err, DDP_EINVAL, "rendezvous key must be 1 to %d bytes", RDZV_KEY_MAX);
    return 0;
}

static int hello(struct rdzv *r, const char *secret, int64_t deadline, struct ddp_err *err)
{
    struct wbuf b = {0};
    uint8_t *reply = NULL;
    size_t rlen = 0;
    int status = 0, ret = 0;
    wb_uint(&b, OP_HELLO, 1);
    wb_uint(&b, (uint64_t)r->rank, 4);
    wb_uint(&b, (uint64_t)r->world, 4);
    wb_put(&b, secret, strlen(secret));
    int64_t left = deadline - time_mono_ms();
    int64_t saved = r->timeout_ms;
    r->timeout_ms = left > 1000 ? left : 1000;
    ret = request(r, &b, 0, &status, &reply, &rlen, err);
    r->timeout_ms = saved;
    if (ret == DDP_EPEER) {
        /* The server drops a connection with the wrong secret. */
        ret = err_set(err, DDP_EPERM,
                      "rendezvous store at %s:%d closed the connection after hello "
                      "(wrong DDP_JOB_TOKEN?)",
                      r->host, r->port);
        goto out;
    }
    if (ret < 0)
        goto out;
    if (status == ST_PERM) {
        ret = err_set(err, DDP_EPERM,
                      "rendezvous store at %s:%d refused the job secret (DDP_JOB_TOKEN)",
                      r->host, r->port);
        goto out;
    }
    ret = status_error(r, status, reply, rlen, "hello", err);
out:
    free(reply);
    free(b.p);
    return ret;
}

int rdzv_open(const char *master_addr, int master_port, int rank, int world_size,
              const char *secret, int64_t timeout_ms, struct rdzv **out, struct ddp_err *err)
{
    int ret = 0;
    struct rdzv *r = NULL;
    if (!secret)
        secret = "";
    if (world_size < 1 || rank < 0 || rank >= world_size) {
        ret = err_set(err, DDP_EINVAL, "rank %d of world size %d is out of range", rank,
                      world_size);
        goto out;
    }
    if (!master_addr || !*master_addr || strlen(master_addr) >= sizeof(r->host)) {
        ret = err_set(err, DDP_EINVAL, "MASTER_ADDR: empty or too long");
        goto out;
    }
    if (master_port <= 0 || master_port > 65535) {
        ret = err_set(err, DDP_EINVAL, "MASTER_PORT: %d is out of range [1, 65535]",
                      master_port);
        goto out;
    }
    if (strlen(secret) >= RDZV_SECRET_MAX) {
        ret = err_set(err, DDP_EINVAL, "DDP_JOB_TOKEN: longer than %d bytes",
                      RDZV_SECRET_MAX - 1);
        goto out;
    }
    if (timeout_ms <= 0)
        timeout_ms = 60000;
    int64_t deadline = time_mono_ms() + timeout_ms;
    r = xcalloc(1, sizeof(*r));
    r->fd = -1;
    r->rank = rank;
    r->world = world_size;
    r->timeout_ms = timeout_ms;
    r->port = master_port;
    memcpy(r->host, master_addr, strlen(master_addr) + 1);
    if (rank == 0 && (ret = server_start(master_port, world_size, secret, &r->srv, err)) < 0)
        goto out;

    int64_t backoff = 10;
    struct ddp_err e;
    err_clear(&e);
    for (;;) {
        int64_t now = time_mono_ms();
        if (now >= deadline) {
            ret = err_set(err, DDP_ETIMEOUT,
                          "rendezvous store at %s:%d not reachable within %" PRId64 " ms: %s",
                          master_addr, master_port, timeout_ms, e.msg);
            goto out;
        }
        int64_t attempt = now + 5000 < deadline ? now + 5000 : deadline;
        ret = net_connect(master_addr, master_port, attempt, &r->fd, &e);
        if (ret == 0)
            break;
        if (ret == DDP_EINVAL) {
            err_set(err, ret, "MASTER_ADDR: %s", e.msg);
            goto out;
        }
        int64_t left = deadline - time_mono_ms();
        time_sleep_ms(backoff < left ? backoff : (left > 0 ? left : 0));
        backoff = backoff * 2 > 500 ? 500 : backoff * 2;
    }
    if ((ret = hello(r, secret, deadline, err)) < 0)
        goto out;
    *out = r;
    r = NULL;
out:
    if (r) {
        if (r->fd >= 0)
            close(r->fd);
        server_stop(r->srv, 0);
        free(r);
    }
    return ret;
}

void rdzv_close(struct rdzv *r)
{
    if (!r)
        return;
    if (r->fd >= 0)
        close(r->fd);
    /* Ranks only need the store while they set up, so a short bound is enough for a slow
     * rank to finish with it, and a stopped rank does not hold rank 0's exit for long. */
    int64_t wait =
        r->timeout_ms < RDZV_CLOSE_WAIT_MAX_MS ? r->timeout_ms : RDZV_CLOSE_WAIT_MAX_MS;
    server_stop(r->srv, time_mono_ms() + wait);
    free(r);
}

int rdzv_set(struct rdzv *r, const char *key, const void *value, size_t len,
             struct ddp_err *err)
{
    int ret = check_key(key, err);
    if (ret < 0)
        return ret;
    if (len > RDZV_VALUE_MAX)
        return err_set(err, DDP_ETOOBIG, "rendezvous value for '%s' is %zu bytes, over %d", key,
                       len, RDZV_VALUE_MAX);
    struct wbuf b = {0};
    uint8_t *reply = NULL;
    size_t rlen = 0;
    int status = 0;
    wb_uint(&b, OP_SET, 1);
    wb_uint(&b, strlen(key), 2);
    wb_put(&b, key, strlen(key));
    if (len)
        wb_put(&b, value, len);
    ret = request(r, &b, 0, &status, &reply, &rlen, err);
    if (ret == 0)
        ret = status_error(r, status, reply, rlen, "set", err);
    free(reply);
    free(b.p);
    return ret;
}

int rdzv_get(struct rdzv *r, const char *key, int64_t timeout_ms, void **value, size_t *len,
             struct ddp_err *err)
{
    int ret = check_key(key, err);
    if (ret < 0)
        return ret;
    struct wbuf b = {0};
    uint8_t *reply = NULL;
    size_t rlen = 0;
    int status = 0;
    uint32_t t = clamp_ms(timeout_ms);
    wb_uint(&b, OP_GET, 1);
    wb_uint(&b, t, 4);
    wb_uint(&b, strlen(key), 2);
    wb_put(&b, key, strlen(key));
    ret = request(r, &b, t, &status, &reply, &rlen, err);
    if (ret == 0 && status == ST_TIMEOUT)
        ret = err_set(err, DDP_ETIMEOUT, "rendezvous key '%s' not set within %u ms", key, t);
    else if (ret == 0)
        ret = status_error(r, status, reply, rlen, "get", err);
    if (ret == 0) {
        if (!reply)
            reply = xmalloc(1);
        *value = reply;
        *len = rlen;
        reply = NULL;
    }
    free(reply);
    free(b.p);
    return ret;
}

int rdzv_wait(struct rdzv *r, const char *const *keys, int nkeys, int64_t timeout_ms,
              struct ddp_err *err)
{
    if (nkeys < 0 || nkeys > RDZV_WAIT_KEYS_MAX)
        return err_set(err, DDP_EINVAL, "rendezvous wait: %d keys, at most %d", nkeys,
                       RDZV_WAIT_KEYS_MAX);
    int ret = 0;
    for (int i = 0; i < nkeys; i++)
        if ((ret = check_key(keys[i], err)) < 0)
            return ret;
    struct wbuf b = {0};
    uint8_t *reply = NULL;
    size_t rlen = 0;
    int status = 0;
    uint32_t t = clamp_ms(timeout_ms);
    wb_uint(&b, OP_WAIT, 1);
    wb_uint(&b, t, 4);
    wb_uint(&b, (uint64_t)nkeys, 2);
    for (int i = 0; i < nkeys; i++) {
        wb_uint(&b, strlen(keys[i]), 2);
        wb_put(&b, keys[i], strlen(keys[i]));
    }
    ret = request(r, &b, t, &status, &reply, &rlen, err);
    if (ret == 0 && status == ST_TIMEOUT)
        ret = err_set(err, DDP_ETIMEOUT,
                      "rendezvous keys (%d, first '%s') not all set within %u ms", nkeys,
                      nkeys ? keys[0] : "", t);
    else if (ret == 0)
        ret = status_error(r, status, reply, rlen, "wait", err);
    free(reply);
    free(b.p);
    return ret;
}

int rdzv_add(struct rdzv *r, const char *key, int64_t delta, int64_t *out, struct ddp_err *err)
{
    int ret = check_key(key, err);
    if (ret < 0)
        return ret;
    struct wbuf b = {0};
    uint8_t *reply = NULL;
    size_t rlen = 0;
    int status = 0;
    wb_uint(&b, OP_ADD, 1);
    wb_uint(&b, (uint64_t)delta, 8);
    wb_uint(&b, strlen(key), 2);
    wb_put(&b, key, strlen(key));
    ret = request(r, &b, 0, &status, &reply, &rlen, err);
    if (ret == 0)
        ret = status_error(r, status, reply, rlen, "add", err);
    if (ret == 0 && rlen != 8)
        ret = err_set(err, DDP_EPEER, "rendezvous store %s:%d: malformed add reply", r->host,
                      r->port);
    if (ret == 0 && out) {
        struct rbuf rb = {.p = reply, .n = rlen};
        *out = (int64_t)rb_uint(&rb, 8);
    }
    free(reply);
    free(b.p);
    return ret;
}

int rdzv_barrier(struct rdzv *r, const char *name, int64_t timeout_ms, struct ddp_err *err)
{
    if (!name || strlen(name) > RDZV_KEY_MAX - 48)
        return err_set(err, DDP_EINVAL, "barrier name must be at most %d bytes",
                       RDZV_KEY_MAX - 48);
    char key[RDZV_KEY_MAX + 1], done[RDZV_KEY_MAX + 1];
    uint64_t seq = r->barrier_seq++;
    snprintf(key, sizeof(key), "__barrier/%" PRIu64 "/%s", seq, name);
    snprintf(done, sizeof(done), "__barrier/%" PRIu64 "/%s/done", seq, name);
    int64_t n = 0;
    int ret = rdzv_add(r, key, 1, &n, err);
    if (ret < 0)
        return ret;
    if (n == r->world && (ret = rdzv_set(r, done, "1", 1, err)) < 0)
        return ret;
    const char *keys[1] = {done};
    ret = rdzv_wait(r, keys, 1, timeout_ms, err);
    if (ret == DDP_ETIMEOUT)
        ret = err_set(err, DDP_ETIMEOUT,
                      "barrier '%s': not every rank arrived within %" PRId64 " ms", name,
                      timeout_ms);
    return ret;
}

int rdzv_local_host(const struct rdzv *r, char *buf, size_t size)
{
    if (r->fd < 0)
        return DDP_EIO;
    return net_local_host(r->fd, buf, size);
}

uint64_t rdzv_next_id(struct rdzv *r)
{
    return r->next_id++;
}

const char *rdzv_master_host(const struct rdzv *r)
{
    return r->host;
}

int rdzv_master_port(const struct rdzv *r)
{
    return r->port;
}

int rdzv_rank(const struct rdzv *r)
{
    return r->rank;
}

int rdzv_world_size(const struct rdzv *r)
{
    return r->world;
}
