/*
 * rdzv_server.c - rank 0's rendezvous store server (see rdzv_server.h): one thread that
 * accepts the ranks' connections, checks their hello, and serves SET/GET/WAIT/ADD on an
 * in-memory key-value table. The bytes on the wire are rdzv_wire.c's; the client is rdzv.c.
 *
 * Invariants:
 *  1. A client has at most one request outstanding; the server answers every request exactly
 *     once: at once, or (GET/WAIT on missing keys) when the keys appear or the request's own
 *     deadline passes, whichever is first. So a client never waits longer than its timeout
 *     plus one round trip, and its stream never goes out of step; a client that gives up
 *     mid-request marks its connection broken and fails every later call (rdzv.c).
 *  2. Every size is bounded: keys RDZV_KEY_MAX, values RDZV_VALUE_MAX, frames
 *     RDZV_FRAME_MAX (rdzv_wire.h), world + RDZV_STRANGERS_MAX connections (every rank
 *     holds one for the generation's life, and RDZV_STRANGERS_MAX more may be on their
 *     way to a hello), RDZV_KEYS_MAX keys,
 *     RDZV_BYTES_MAX bytes held. A peer that breaks a bound, sends garbage or a wrong secret
 *     is answered (where it can be) and dropped; one that says nothing is dropped after
 *     RDZV_HELLO_WAIT_MS. Before its hello a connection may send at most
 *     RDZV_HELLO_FRAME_MAX bytes; when all those are open, a newcomer evicts the oldest
 *     connection that has not said hello (so silent connections cannot lock ranks out).
 *     A connection's replies are bounded too: no further request of it is decoded while a
 *     reply is still unsent (a peer that sends and never reads stops being read).
 *  5. One connection per rank: a hello for a rank already connected is refused.
 *  3. Only the server thread touches the key-value table and the connections; the mutex
 *     guards just `stop` and the departure bookkeeping that rank 0's rdzv_close() waits on.
 *  4. Counters (ADD) are stored as decimal text, like torch's TCPStore, so GET reads them.
 *
 * A connection's life: accepted (hello due within RDZV_HELLO_WAIT_MS) -> authenticated by a
 * good hello (its rank is marked connected) -> dropped when it closes, breaks a rule, or
 * (closing) once the refusal it was sent has been flushed; a dropped rank is marked gone.
 */
#include "libddp/rdzv_server.h"

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

#include "common/buf.h"
#include "common/log.h"
#include "common/randutil.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "libddp/net.h"
#include "libddp/rdzv_wire.h"

#define RDZV_STRANGERS_MAX 1024
#define RDZV_KEYS_MAX      65536
#define RDZV_BYTES_MAX     ((size_t)256 << 20) /* keys + values held, all together */
#define RDZV_HELLO_WAIT_MS 10000               /* a connection must say hello within this */
#define RDZV_IN_MAX        (4 + (size_t)RDZV_FRAME_MAX) /* a connection's input buffer: one frame */

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
    /* Received bytes not yet handled, at most RDZV_IN_MAX. Not a struct buf: recv() writes
     * into the room after in_len, which buf.h has no call for. */
    uint8_t *in;
    size_t in_len, in_cap;
    struct buf out; /* replies; out.data[out_off..] not sent yet */
    size_t out_off;
    uint8_t *pend; /* a GET/WAIT body waiting for keys, or NULL */
    size_t pend_len;
    int64_t pend_deadline;
    int resume; /* frames wait behind an answered pending request (conn_process not re-entered) */
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
    int conn_max; /* world + RDZV_STRANGERS_MAX */
    struct kv *kvs;
    size_t nkv, kv_cap;
    size_t kv_bytes; /* keys + values held */
};

/* ---- the key-value table ---- */

static struct kv *kv_find(struct rdzv_server *s, const uint8_t *key, size_t klen)
{
    for (size_t i = 0; i < s->nkv; i++)
        if (s->kvs[i].klen == klen && memcmp(s->kvs[i].key, key, klen) == 0)
            return &s->kvs[i];
    return NULL;
}

/* Sets key to a copy of val; returns 0, or -1 when the table is full (unchanged then). */
static int kv_set(struct rdzv_server *s, const uint8_t *key, size_t klen, const uint8_t *val,
                  size_t len)
{
    struct kv *e = kv_find(s, key, klen);
    size_t held = s->kv_bytes - (e ? e->klen + e->len : 0);
    if (held + klen + len > RDZV_BYTES_MAX)
        return -1;
    if (!e) {
        if (s->nkv >= RDZV_KEYS_MAX)
            return -1;
        XGROW(s->kvs, s->nkv + 1, s->kv_cap, 64);
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

/* ---- a connection's output ---- */

static void conn_reply(struct sconn *c, int status, const void *payload, size_t len)
{
    /* Every payload is a stored value or a short text, so the frame always fits. */
    if (rdzv_wire_reply(&c->out, status, payload, len) < 0)
        c->dead = 1;
}

static void conn_reply_text(struct sconn *c, int status, const char *text)
{
    conn_reply(c, status, text, strlen(text));
}

static void conn_flush(struct sconn *c)
{
    while (c->out_off < c->out.len) {
        ssize_t n = send(c->fd, c->out.data + c->out_off, c->out.len - c->out_off,
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
    c->out_off = 0;
    buf_reset(&c->out);
    if (c->closing)
        c->dead = 1;
}

/* ---- requests ---- */

/* Serves a decoded GET or WAIT. Returns 1 when answered, 0 when the keys are not all there
 * yet (the caller keeps it pending). */
static int serve_lookup(struct rdzv_server *s, struct sconn *c, const struct rdzv_req *q)
{
    if (q->op == RDZV_OP_GET) {
        struct kv *e = kv_find(s, q->key, q->klen);
        if (!e)
            return 0;
        conn_reply(c, RDZV_ST_OK, e->val, e->len);
        return 1;
    }
    size_t pos = 0, klen = 0;
    for (const uint8_t *key = rdzv_wire_next_key(q, &pos, &klen); key;
         key = rdzv_wire_next_key(q, &pos, &klen))
        if (!kv_find(s, key, klen))
            return 0;
    conn_reply(c, RDZV_ST_OK, NULL, 0);
    return 1;
}

/* Answers the pending requests whose keys are now all there. */
static void serve_pending(struct rdzv_server *s)
{
    for (int i = 0; i < s->nconns; i++) {
        struct sconn *c = &s->conns[i];
        if (!c->pend || c->dead)
            continue;
        struct rdzv_req q;
        int done = 1;
        /* A pending body was decoded once already, so it decodes again; the refusal only
         * keeps invariant 1 should it not. */
        if (rdzv_wire_decode(c->pend, c->pend_len, &q) == RDZV_DEC_OK)
            done = serve_lookup(s, c, &q);
        else
            conn_reply_text(c, RDZV_ST_INVAL, "malformed request");
        if (done) {
            free(c->pend);
            c->pend = NULL;
            conn_flush(c);
            c->resume = 1; /* the frames buffered behind it: the server loop handles them */
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

static void handle_hello(struct rdzv_server *s, struct sconn *c, const struct rdzv_req *q)
{
    char secret[RDZV_SECRET_MAX];
    memcpy(secret, q->secret, q->secret_len);
    secret[q->secret_len] = '\0';
    /* Compare in constant time; an embedded NUL makes the lengths differ, so it fails. */
    int ok = secret_equal(secret, s->secret) && strlen(secret) == q->secret_len;
    if (!ok) {
        conn_reply_text(c, RDZV_ST_PERM, "wrong job secret");
        c->closing = 1;
        return;
    }
    if ((int)q->world != s->world || q->rank >= q->world) {
        char msg[128];
        snprintf(msg, sizeof(msg),
                 "rank %u of world size %u does not fit the store's world size %d", q->rank,
                 q->world, s->world);
        conn_reply_text(c, RDZV_ST_INVAL, msg);
        c->closing = 1;
        return;
    }
    pthread_mutex_lock(&s->mu);
    int taken = s->state[q->rank] == 1;
    pthread_mutex_unlock(&s->mu);
    if (taken) {
        char msg[96];
        snprintf(msg, sizeof(msg), "rank %u is already connected to the store", q->rank);
        conn_reply_text(c, RDZV_ST_INVAL, msg);
        c->closing = 1;
        return;
    }
    c->authed = 1;
    c->rank = (int)q->rank;
    mark_rank(s, c->rank, 1);
    conn_reply(c, RDZV_ST_OK, NULL, 0);
}

static void handle_add(struct rdzv_server *s, struct sconn *c, const struct rdzv_req *q)
{
    int64_t cur = 0;
    struct kv *e = kv_find(s, q->key, q->klen);
    if (e) {
        char num[32];
        if (e->len == 0 || e->len >= sizeof(num)) {
            conn_reply_text(c, RDZV_ST_INVAL, "value is not an integer");
            return;
        }
        memcpy(num, e->val, e->len);
        num[e->len] = '\0';
        char *end = NULL;
        errno = 0;
        long long v = strtoll(num, &end, 10);
        if (errno || *end != '\0') {
            conn_reply_text(c, RDZV_ST_INVAL, "value is not an integer");
            return;
        }
        cur = (int64_t)v;
    }
    int64_t nv = (int64_t)((uint64_t)cur + (uint64_t)q->delta);
    char num[32];
    int n = snprintf(num, sizeof(num), "%" PRId64, nv);
    if (kv_set(s, q->key, q->klen, (const uint8_t *)num, (size_t)n) != 0) {
        conn_reply_text(c, RDZV_ST_INVAL, "store is full");
        return;
    }
    if (rdzv_wire_reply_i64(&c->out, nv) < 0)
        c->dead = 1; /* a 9-byte frame: cannot happen */
    serve_pending(s);
}

/* Handles one request body (len >= 1); may queue a reply, make it pending, or mark the conn
 * closing. */
static void handle_request(struct rdzv_server *s, struct sconn *c, const uint8_t *body, size_t len)
{
    struct rdzv_req q;
    int dec = rdzv_wire_decode(body, len, &q);
    if (!c->authed) {
        if (q.op != RDZV_OP_HELLO) {
            conn_reply_text(c, RDZV_ST_PERM, "first message must be hello");
            c->closing = 1;
        } else if (dec != RDZV_DEC_OK) {
            conn_reply_text(c, RDZV_ST_INVAL, "malformed hello");
            c->closing = 1;
        } else {
            handle_hello(s, c, &q);
        }
        return;
    }
    if (dec == RDZV_DEC_UNKNOWN_OP || q.op == RDZV_OP_HELLO) {
        conn_reply_text(c, RDZV_ST_INVAL, "unknown request");
        c->closing = 1;
        return;
    }
    if (dec != RDZV_DEC_OK) {
        char msg[32];
        snprintf(msg, sizeof(msg), "malformed %s", rdzv_wire_op_name(q.op));
        conn_reply_text(c, RDZV_ST_INVAL, msg);
        return;
    }
    switch (q.op) {
    case RDZV_OP_SET:
        if (kv_set(s, q.key, q.klen, q.value, q.len) != 0) {
            conn_reply_text(c, RDZV_ST_INVAL, "store is full");
            return;
        }
        conn_reply(c, RDZV_ST_OK, NULL, 0);
        serve_pending(s);
        return;
    case RDZV_OP_GET:
    case RDZV_OP_WAIT:
        if (serve_lookup(s, c, &q) == 0) {
            c->pend = xmalloc(len);
            memcpy(c->pend, body, len);
            c->pend_len = len;
            c->pend_deadline = time_deadline_ms(q.timeout_ms);
        }
        return;
    case RDZV_OP_ADD:
        handle_add(s, c, &q);
        return;
    }
}

/* ---- a connection's input ---- */

/* How much input c may hold: one hello before it is authenticated, one frame after. */
static size_t conn_in_max(const struct sconn *c)
{
    return c->authed ? RDZV_IN_MAX : RDZV_HELLO_FRAME_MAX;
}

/* Handles the complete frames in c's input buffer, one at a time, each reply flushed before the
 * next frame is decoded: it stops at a pending request and at a reply the peer has not taken
 * yet (the caller resumes once the output drained). */
static void conn_process(struct rdzv_server *s, struct sconn *c)
{
    size_t off = 0;
    while (!c->pend && !c->closing && !c->dead && c->out_off == c->out.len &&
           c->in_len - off >= 4) {
        uint32_t len = 0;
        if (rdzv_wire_frame_len(c->in + off, &len) < 0 ||
            (!c->authed && 4 + (size_t)len > RDZV_HELLO_FRAME_MAX)) {
            c->dead = 1; /* over a bound: before hello, anything longer than a hello */
            break;
        }
        if (c->in_len - off < 4 + (size_t)len)
            break;
        handle_request(s, c, c->in + off + 4, len);
        off += 4 + (size_t)len;
        conn_flush(c);
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
        size_t max = conn_in_max(c);
        if (c->in_len >= max)
            break; /* full: wait until the pending request or the reply is done */
        if (c->in_len == c->in_cap) {
            size_t cap = c->in_cap ? c->in_cap * 2 : 1024;
            if (cap > max)
                cap = max;
            c->in = xrealloc(c->in, cap);
            c->in_cap = cap;
        }
        size_t room = (c->in_cap < max ? c->in_cap : max) - c->in_len;
        ssize_t n = recv(c->fd, c->in + c->in_len, room, MSG_DONTWAIT);
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
    buf_release(&c->out);
    free(c->pend);
}

/* ---- the thread ---- */

/* The poll timeout (ms, -1 none) that wakes the thread at the earlier of timeout and the
 * deadline. */
static int poll_until(int timeout, int64_t deadline_ms)
{
    int64_t left = time_left_ms(deadline_ms);
    if (left > 0x7fffffff)
        left = 0x7fffffff;
    return timeout < 0 || left < timeout ? (int)left : timeout;
}

/* Releases the dead connections, keeping the order of the rest. */
static void drop_dead(struct rdzv_server *s)
{
    int w = 0;
    for (int i = 0; i < s->nconns; i++) {
        if (s->conns[i].dead)
            conn_release(s, &s->conns[i]);
        else
            s->conns[w++] = s->conns[i];
    }
    s->nconns = w;
}

/* Makes room for one connection by dropping the oldest one that has not said hello (the
 * earliest hello deadline). 0, or -1 when every connection is authenticated. */
static int evict_oldest_stranger(struct rdzv_server *s)
{
    int oldest = -1;
    for (int i = 0; i < s->nconns; i++) {
        const struct sconn *c = &s->conns[i];
        if (!c->authed && (oldest < 0 || c->hello_deadline < s->conns[oldest].hello_deadline))
            oldest = i;
    }
    if (oldest < 0)
        return -1;
    s->conns[oldest].dead = 1;
    drop_dead(s);
    return 0;
}

static void accept_all(struct rdzv_server *s)
{
    for (;;) {
        int fd = accept4(s->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            if (errno == EINTR || errno == ECONNABORTED)
                continue;
            break;
        }
        if (s->nconns >= s->conn_max && evict_oldest_stranger(s) != 0) {
            close(fd); /* every connection is a rank's: a newcomer has no place */
            continue;
        }
        (void)net_set_nodelay(fd);
        struct sconn *c = &s->conns[s->nconns++];
        memset(c, 0, sizeof(*c));
        c->fd = fd;
        c->rank = -1;
        buf_init(&c->out);
        c->hello_deadline = time_deadline_ms(RDZV_HELLO_WAIT_MS);
    }
}

static void *server_main(void *arg)
{
    struct rdzv_server *s = arg;
    struct pollfd *pfd = xcalloc((size_t)s->conn_max + 2, sizeof(*pfd));
    for (;;) {
        pthread_mutex_lock(&s->mu);
        int stop = s->stop;
        pthread_mutex_unlock(&s->mu);
        if (stop)
            break;
        int timeout = -1;
        pfd[0] = (struct pollfd){.fd = s->wake[0], .events = POLLIN};
        pfd[1] = (struct pollfd){.fd = s->lfd, .events = POLLIN};
        for (int i = 0; i < s->nconns; i++) {
            struct sconn *c = &s->conns[i];
            short ev = 0;
            if (c->in_len < conn_in_max(c))
                ev |= POLLIN;
            if (c->out_off < c->out.len)
                ev |= POLLOUT;
            pfd[2 + i] = (struct pollfd){.fd = c->fd, .events = ev};
            if (!c->authed)
                timeout = poll_until(timeout, c->hello_deadline);
            if (c->pend)
                timeout = poll_until(timeout, c->pend_deadline);
            if (c->resume)
                timeout = 0;
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
            short rev = pfd[2 + i].revents;
            if (rev & POLLOUT) {
                conn_flush(c);
                if (!c->dead && c->out_off == c->out.len && c->in_len)
                    conn_process(s, c); /* the frames held back behind the reply */
            }
            if (!c->dead && (rev & (POLLIN | POLLHUP | POLLERR)))
                conn_read(s, c);
            /* A peer that hung up while its input is full (nothing more can be read, so the
             * read above cannot see the end): nobody is left to answer. */
            if (!c->dead && (rev & (POLLHUP | POLLERR)) && c->in_len >= conn_in_max(c))
                c->dead = 1;
        }
        for (int i = 0; i < s->nconns; i++) {
            struct sconn *c = &s->conns[i];
            if (c->resume && !c->dead) {
                c->resume = 0;
                conn_process(s, c);
            }
        }
        int64_t now = time_mono_ms();
        for (int i = 0; i < s->nconns; i++) {
            struct sconn *c = &s->conns[i];
            if (!c->authed && !c->closing && now >= c->hello_deadline)
                c->dead = 1;
            if (c->pend && !c->dead && now >= c->pend_deadline) {
                free(c->pend);
                c->pend = NULL;
                conn_reply_text(c, RDZV_ST_TIMEOUT, "keys not set in time");
                conn_process(s, c);
            }
        }
        drop_dead(s);
        if (n > 0 && (pfd[1].revents & POLLIN))
            accept_all(s);
    }
    free(pfd);
    return NULL;
}

/* ---- start and stop ---- */

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

int rdzv_server_start(const char *host, int port, int world, const char *secret,
                      struct rdzv_server **out, struct ddp_err *err)
{
    int ret = 0;
    struct rdzv_server *s = xcalloc(1, sizeof(*s));
    s->lfd = s->wake[0] = s->wake[1] = -1;
    s->world = world;
    memcpy(s->secret, secret, strlen(secret) + 1);
    s->state = xcalloc((size_t)world, 1);
    s->conn_max = world + RDZV_STRANGERS_MAX;
    s->conns = xcalloc((size_t)s->conn_max, sizeof(*s->conns));
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    if (pipe2(s->wake, O_NONBLOCK | O_CLOEXEC) < 0) {
        ret = err_set(err, DDP_EIO, "pipe: %s", strerror(errno));
        goto out;
    }
    struct ddp_err e;
    const char *every = NULL;
    ret = net_listen_at(host, port, 128, &s->lfd, NULL, &every, &e);
    if (ret == DDP_EEXIST) {
        err_set(err, DDP_EEXIST, "MASTER_PORT %d: %s", port, e.msg);
        goto out;
    }
    if (ret < 0) {
        err_set(err, ret, "rendezvous store cannot listen on MASTER_ADDR %s, MASTER_PORT %d: %s",
                host, port, e.msg);
        goto out;
    }
    if (every)
        log_warn("rendezvous store: MASTER_ADDR '%s' %s: listening on every address of this host "
                 "at MASTER_PORT %d",
                 host, every, port);
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
 * A rank that never connected is not waited for: in a run that got as far as closing, every
 * rank has connected (the comm set-up needs them all), and on a failure path a rank that
 * comes later finds no store and fails by its own deadline.
 */
void rdzv_server_stop(struct rdzv_server *s, int64_t deadline_ms)
{
    if (!s)
        return;
    pthread_mutex_lock(&s->mu);
    while (s->live > 0) {
        int64_t left = time_left_ms(deadline_ms);
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
