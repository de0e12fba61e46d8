/*
 * peer.c - publish, connect and accept of the CPU backend's TCP peers (see peer.h).
 *
 * Invariants:
 *  1. A connection is handed to the caller only after a hello with the right magic, comm
 *     id, index and the listener's own nonce (compared in constant time); anything else is
 *     closed, so a stranger on the port can delay the set-up but never join it.
 *  2. Every wait is bounded by the caller's deadline; the wait for one hello by 5 s more
 *     at most, so a silent stranger cannot hold the accept loop.
 */
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "common/backoff.h"
#include "common/log.h"
#include "common/randutil.h"
#include "common/timeutil.h"
#include "libddp/comm/peer.h"

#define HELLO_MAGIC   0x44445048u /* "DDPH" */
#define HELLO_WAIT_MS 5000
/* "host:port nonce" */
#define PEER_VALUE_MAX (NET_ADDR_MAX + PEER_NONCE_HEX + 8)

struct hello_msg {
    uint32_t magic;
    uint32_t rank; /* the sender's index (ring index) */
    uint64_t id;
    char nonce[PEER_NONCE_HEX + 1];
    char pad[7];
};

static void format_name(char *out, size_t size, const char *host, int port)
{
    snprintf(out, size, strchr(host, ':') ? "[%s]:%d" : "%s:%d", host, port);
}

void peer_listener_close(struct peer_listener *pl)
{
    if (pl->fd >= 0)
        close(pl->fd);
    pl->fd = -1;
}

int peer_listen(struct comm *c, struct rdzv *r, const char *key, int backlog, const char *what,
                struct peer_listener *pl, struct ddp_err *err)
{
    char host[NET_ADDR_MAX], name[PEER_NAME_MAX], val[PEER_VALUE_MAX];
    int ret = 0, port = 0;
    struct ddp_err e;
    pl->fd = -1;
    if ((ret = rand_hex(pl->nonce, PEER_NONCE_HEX / 2)) < 0) {
        err_set(err, ret, "cannot read random bytes for the %s nonce", what);
        goto out;
    }
    if ((ret = net_listen(NULL, 0, backlog, &pl->fd, &port, &e)) < 0) {
        err_set(err, ret, "%s: cannot listen: %s", what, e.msg);
        goto out;
    }
    if (c->local_addr[0]) {
        size_t len = strlen(c->local_addr);
        if (len >= sizeof(host)) {
            ret =
                err_set(err, DDP_EINVAL, "local address '%s' is too long (%zu bytes, at most %zu)",
                        c->local_addr, len, sizeof(host) - 1);
            goto out;
        }
        memcpy(host, c->local_addr, len + 1);
    } else if (rdzv_local_host(r, host, sizeof(host)) < 0) {
        ret = err_set(err, DDP_EIO, "%s: cannot read the rendezvous connection's address", what);
        goto out;
    }
    format_name(name, sizeof(name), host, port);
    int vl = snprintf(val, sizeof(val), "%s %s", name, pl->nonce);
    ret = rdzv_set(r, key, val, (size_t)vl, err);
out:
    if (ret < 0)
        peer_listener_close(pl);
    return ret;
}

/* Parses "host:port nonce". */
static int parse_addr(const char *v, size_t len, struct peer_addr *out)
{
    char tmp[PEER_VALUE_MAX];
    if (len >= sizeof(tmp))
        return DDP_EINVAL;
    memcpy(tmp, v, len);
    tmp[len] = '\0';
    char *sp = strchr(tmp, ' ');
    if (!sp || strlen(sp + 1) != PEER_NONCE_HEX)
        return DDP_EINVAL;
    *sp = '\0';
    memcpy(out->nonce, sp + 1, PEER_NONCE_HEX + 1);
    int ret = net_split_hostport(tmp, out->host, sizeof(out->host), &out->port);
    if (ret == 0)
        format_name(out->name, sizeof(out->name), out->host, out->port);
    return ret;
}

int peer_fetch(struct comm *c, struct rdzv *r, const char *key, int rank, int64_t deadline_ms,
               struct peer_addr *out, struct ddp_err *err)
{
    void *v = NULL;
    size_t len = 0;
    int ret = rdzv_get(r, key, time_left_ms(deadline_ms), &v, &len, err);
    if (ret == DDP_ETIMEOUT)
        ret = err_set(err, DDP_ETIMEOUT,
                      "peer rank %d did not publish its ring address within %" PRId64 " ms", rank,
                      c->opts.timeout_ms);
    if (ret < 0)
        return ret;
    if (parse_addr(v, len, out) < 0)
        ret = err_set(err, DDP_EINVAL, "peer rank %d published a malformed ring address", rank);
    free(v);
    return ret;
}

int peer_connect(const struct peer_addr *pa, int rank, uint32_t self, uint64_t id,
                 int64_t deadline_ms, const char *what, int *fd_out, struct ddp_err *err)
{
    struct backoff b;
    struct ddp_err e;
    int fd = -1, ret = 0;
    /* The peer listens before it publishes, but may not be accepting yet. */
    backoff_init(&b, 10, 200);
    for (;;) {
        ret = net_connect(pa->host, pa->port, deadline_ms, &fd, &e);
        if (ret == 0)
            break;
        if (ret != DDP_EUNAVAIL || time_left_ms(deadline_ms) == 0) {
            ret = ret == DDP_EUNAVAIL ? DDP_ETIMEOUT : ret;
            return err_set(err, ret, "%s: cannot connect to peer rank %d (%s): %s", what, rank,
                           pa->name, e.msg);
        }
        backoff_sleep(&b, deadline_ms);
    }
    struct hello_msg hm;
    memset(&hm, 0, sizeof(hm));
    hm.magic = HELLO_MAGIC;
    hm.rank = self;
    hm.id = id;
    memcpy(hm.nonce, pa->nonce, PEER_NONCE_HEX + 1);
    if ((ret = net_send_all(fd, &hm, sizeof(hm), deadline_ms, &e)) < 0) {
        close(fd);
        return err_set(err, ret, "%s: hello to peer rank %d (%s): %s", what, rank, pa->name, e.msg);
    }
    *fd_out = fd;
    return 0;
}

int peer_accept(struct comm *c, struct peer_listener *pl, uint64_t id, int64_t deadline_ms,
                int (*want)(void *ctx, uint32_t index), void *ctx, const char *what,
                uint32_t *index_out, int *fd_out, struct ddp_err *err)
{
    for (;;) {
        int fd = -1;
        int ret = net_accept(pl->fd, deadline_ms, &fd, err);
        if (ret < 0)
            return ret;
        struct hello_msg got;
        struct ddp_err e;
        int64_t hd = time_deadline_min(time_deadline_ms(HELLO_WAIT_MS), deadline_ms);
        if (net_recv_all(fd, &got, sizeof(got), hd, &e) == 0) {
            got.nonce[PEER_NONCE_HEX] = '\0';
            int ok = got.magic == HELLO_MAGIC && got.id == id && want(ctx, got.rank);
            ok = ok && secret_equal(got.nonce, pl->nonce);
            if (ok) {
                *index_out = got.rank;
                *fd_out = fd;
                return 0;
            }
            log_warn("comm: rank %d dropped a %s connection with a wrong hello", c->rank, what);
        }
        close(fd);
    }
}
