/*
 * rdzv.c - the rendezvous store's client (see rdzv.h): every rank's connect, hello and
 * requests. Rank 0 also starts the server (rdzv_server.c) before it connects to it; the bytes
 * on the wire are rdzv_wire.c's.
 *
 * Invariants:
 *  1. At most one request is outstanding on a connection: each call sends one frame and reads
 *     its one reply before it returns (the server's invariant 1 answers every request once).
 *  2. Every call has a deadline: a reply must come within the request's own wait plus the
 *     store timeout. A call that fails mid-request (timeout, short read, malformed reply)
 *     leaves the stream out of step, so it marks the connection broken and every later call
 *     fails at once with DDP_EPEER.
 *  3. Sizes are checked here before anything is sent (keys, values, key counts, the secret),
 *     with the same bounds the server enforces.
 */
#include "ddp/rdzv.h"

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/backoff.h"
#include "common/buf.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "libddp/net.h"
#include "libddp/rdzv_server.h"
#include "libddp/rdzv_wire.h"

#define RDZV_CLOSE_WAIT_MAX_MS 10000
#define RDZV_CONNECT_TRY_MS    5000 /* one connection attempt */

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
 * Sends one request frame (as the rdzv_wire_* encoders wrote it) and reads the reply within
 * wait_ms + the store timeout. On success *status is the reply status and *reply (caller
 * frees; may be NULL with *rlen 0) its payload. On failure the connection is broken.
 */
static int request(struct rdzv *r, const struct buf *frame, int64_t wait_ms, int *status,
                   uint8_t **reply, size_t *rlen, struct ddp_err *err)
{
    int ret = 0;
    uint8_t *payload = NULL;
    struct ddp_err e;
    if (r->broken)
        return err_set(err, DDP_EPEER,
                       "connection to the rendezvous store at %s:%d is broken by an earlier error",
                       r->host, r->port);
    if ((ret = net_send_all(r->fd, frame->data, frame->len, time_deadline_ms(r->timeout_ms), &e)) <
        0)
        goto fail;
    int64_t deadline = time_deadline_ms(wait_ms + r->timeout_ms);
    uint8_t hdr[4];
    if ((ret = net_recv_all(r->fd, hdr, 4, deadline, &e)) < 0)
        goto fail;
    uint32_t len = 0;
    if (rdzv_wire_frame_len(hdr, &len) < 0) {
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

/* The error for an encoder's refusal; the callers check every size first, so it is a bug. */
static int encode_error(struct rdzv *r, int ret, const char *what, struct ddp_err *err)
{
    return err_set(err, ret, "rendezvous store %s:%d: %s request does not fit a frame", r->host,
                   r->port, what);
}

/* Turns a non-OK status into an error; returns 0 for RDZV_ST_OK. */
static int status_error(struct rdzv *r, int status, const uint8_t *reply, size_t rlen,
                        const char *what, struct ddp_err *err)
{
    if (status == RDZV_ST_OK)
        return 0;
    int code = status == RDZV_ST_TIMEOUT ? DDP_ETIMEOUT
               : status == RDZV_ST_PERM  ? DDP_EPERM
                                         : DDP_EINVAL;
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
    struct buf b = BUF_INIT;
    uint8_t *reply = NULL;
    size_t rlen = 0;
    int status = 0, ret = 0;
    if ((ret = rdzv_wire_hello(&b, (uint32_t)r->rank, (uint32_t)r->world, secret)) < 0) {
        ret = encode_error(r, ret, "hello", err);
        goto out;
    }
    int64_t left = time_left_ms(deadline);
    int64_t saved = r->timeout_ms;
    r->timeout_ms = left > 1000 ? left : 1000;
    ret = request(r, &b, 0, &status, &reply, &rlen, err);
    r->timeout_ms = saved;
    if (ret == DDP_EPEER) {
        /* Closed before any answer: a wrong secret is answered first, so this is a store
         * evicting a connection that had not said hello yet (it was full) or going away.
         * The caller tries again while time is left. */
        ret = err_set(err, DDP_EPEER,
                      "rendezvous store at %s:%d closed the connection before answering hello "
                      "(full of other connections, or restarting)",
                      r->host, r->port);
        goto out;
    }
    if (ret < 0)
        goto out;
    if (status == RDZV_ST_PERM) {
        ret = err_set(err, DDP_EPERM,
                      "rendezvous store at %s:%d refused the job secret (DDP_JOB_TOKEN)", r->host,
                      r->port);
        goto out;
    }
    ret = status_error(r, status, reply, rlen, "hello", err);
out:
    free(reply);
    buf_release(&b);
    return ret;
}

/* Connects r->fd to the store, retrying with backoff until deadline. */
static int connect_store(struct rdzv *r, int64_t timeout_ms, int64_t deadline, struct ddp_err *err)
{
    struct backoff bo;
    backoff_init(&bo, 10, 500);
    struct ddp_err e;
    err_clear(&e);
    for (;;) {
        if (time_left_ms(deadline) == 0)
            return err_set(err, DDP_ETIMEOUT,
                           "rendezvous store at %s:%d not reachable within %" PRId64 " ms: %s",
                           r->host, r->port, timeout_ms, e.msg);
        int64_t attempt = time_deadline_min(time_deadline_ms(RDZV_CONNECT_TRY_MS), deadline);
        int ret = net_connect(r->host, r->port, attempt, &r->fd, &e);
        if (ret == 0)
            return 0;
        if (ret == DDP_EINVAL)
            return err_set(err, ret, "MASTER_ADDR: %s", e.msg);
        backoff_sleep(&bo, deadline);
    }
}

int rdzv_open(const char *master_addr, int master_port, int rank, int world_size,
              const char *secret, int64_t timeout_ms, struct rdzv **out, struct ddp_err *err)
{
    int ret = 0;
    struct rdzv *r = NULL;
    if (!secret)
        secret = "";
    if (world_size < 1 || rank < 0 || rank >= world_size) {
        ret =
            err_set(err, DDP_EINVAL, "rank %d of world size %d is out of range", rank, world_size);
        goto out;
    }
    if (!master_addr || !*master_addr || strlen(master_addr) >= sizeof(r->host)) {
        ret = err_set(err, DDP_EINVAL, "MASTER_ADDR: empty or too long");
        goto out;
    }
    if (master_port <= 0 || master_port > 65535) {
        ret = err_set(err, DDP_EINVAL, "MASTER_PORT: %d is out of range [1, 65535]", master_port);
        goto out;
    }
    if (strlen(secret) >= RDZV_SECRET_MAX) {
        ret = err_set(err, DDP_EINVAL, "DDP_JOB_TOKEN: longer than %d bytes", RDZV_SECRET_MAX - 1);
        goto out;
    }
    if (timeout_ms <= 0)
        timeout_ms = 60000;
    int64_t deadline = time_deadline_ms(timeout_ms);
    r = xcalloc(1, sizeof(*r));
    r->fd = -1;
    r->rank = rank;
    r->world = world_size;
    r->timeout_ms = timeout_ms;
    r->port = master_port;
    memcpy(r->host, master_addr, strlen(master_addr) + 1);
    if (rank == 0 &&
        (ret = rdzv_server_start(r->host, master_port, world_size, secret, &r->srv, err)) < 0)
        goto out;
    struct backoff bo;
    backoff_init(&bo, 10, 500);
    for (;;) {
        if ((ret = connect_store(r, timeout_ms, deadline, err)) < 0)
            goto out;
        r->broken = 0; /* a new connection: the break of the one before is not its own */
        ret = hello(r, secret, deadline, err);
        if (ret != DDP_EPEER || time_left_ms(deadline) == 0)
            break;
        if (r->fd >= 0) /* closed before any answer: connect again */
            close(r->fd);
        r->fd = -1;
        backoff_sleep(&bo, deadline);
    }
    if (ret < 0)
        goto out;
    *out = r;
    r = NULL;
out:
    if (r) {
        if (r->fd >= 0)
            close(r->fd);
        rdzv_server_stop(r->srv, 0);
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
    int64_t wait = r->timeout_ms < RDZV_CLOSE_WAIT_MAX_MS ? r->timeout_ms : RDZV_CLOSE_WAIT_MAX_MS;
    rdzv_server_stop(r->srv, time_deadline_ms(wait));
    free(r);
}

int rdzv_set(struct rdzv *r, const char *key, const void *value, size_t len, struct ddp_err *err)
{
    int ret = check_key(key, err);
    if (ret < 0)
        return ret;
    if (len > RDZV_VALUE_MAX)
        return err_set(err, DDP_ETOOBIG, "rendezvous value for '%s' is %zu bytes, over %d", key,
                       len, RDZV_VALUE_MAX);
    struct buf b = BUF_INIT;
    uint8_t *reply = NULL;
    size_t rlen = 0;
    int status = 0;
    if ((ret = rdzv_wire_set(&b, key, value, len)) < 0)
        ret = encode_error(r, ret, "set", err);
    if (ret == 0)
        ret = request(r, &b, 0, &status, &reply, &rlen, err);
    if (ret == 0)
        ret = status_error(r, status, reply, rlen, "set", err);
    free(reply);
    buf_release(&b);
    return ret;
}

int rdzv_get(struct rdzv *r, const char *key, int64_t timeout_ms, void **value, size_t *len,
             struct ddp_err *err)
{
    int ret = check_key(key, err);
    if (ret < 0)
        return ret;
    struct buf b = BUF_INIT;
    uint8_t *reply = NULL;
    size_t rlen = 0;
    int status = 0;
    uint32_t t = clamp_ms(timeout_ms);
    if ((ret = rdzv_wire_get(&b, t, key)) < 0)
        ret = encode_error(r, ret, "get", err);
    if (ret == 0)
        ret = request(r, &b, t, &status, &reply, &rlen, err);
    if (ret == 0 && status == RDZV_ST_TIMEOUT)
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
    buf_release(&b);
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
    struct buf b = BUF_INIT;
    uint8_t *reply = NULL;
    size_t rlen = 0;
    int status = 0;
    uint32_t t = clamp_ms(timeout_ms);
    if ((ret = rdzv_wire_wait(&b, t, keys, nkeys)) < 0)
        ret = encode_error(r, ret, "wait", err);
    if (ret == 0)
        ret = request(r, &b, t, &status, &reply, &rlen, err);
    if (ret == 0 && status == RDZV_ST_TIMEOUT)
        ret =
            err_set(err, DDP_ETIMEOUT, "rendezvous keys (%d, first '%s') not all set within %u ms",
                    nkeys, nkeys ? keys[0] : "", t);
    else if (ret == 0)
        ret = status_error(r, status, reply, rlen, "wait", err);
    free(reply);
    buf_release(&b);
    return ret;
}

int rdzv_add(struct rdzv *r, const char *key, int64_t delta, int64_t *out, struct ddp_err *err)
{
    int ret = check_key(key, err);
    if (ret < 0)
        return ret;
    struct buf b = BUF_INIT;
    uint8_t *reply = NULL;
    size_t rlen = 0;
    int status = 0;
    int64_t v = 0;
    if ((ret = rdzv_wire_add(&b, delta, key)) < 0)
        ret = encode_error(r, ret, "add", err);
    if (ret == 0)
        ret = request(r, &b, 0, &status, &reply, &rlen, err);
    if (ret == 0)
        ret = status_error(r, status, reply, rlen, "add", err);
    if (ret == 0 && rdzv_wire_i64(reply, rlen, &v) < 0)
        ret = err_set(err, DDP_EPEER, "rendezvous store %s:%d: malformed add reply", r->host,
                      r->port);
    if (ret == 0 && out)
        *out = v;
    free(reply);
    buf_release(&b);
    return ret;
}

int rdzv_barrier(struct rdzv *r, const char *name, int64_t timeout_ms, struct ddp_err *err)
{
    if (!name || strlen(name) > RDZV_KEY_MAX - 48)
        return err_set(err, DDP_EINVAL, "barrier name must be at most %d bytes", RDZV_KEY_MAX - 48);
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
        ret =
            err_set(err, DDP_ETIMEOUT, "barrier '%s': not every rank arrived within %" PRId64 " ms",
                    name, timeout_ms);
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
