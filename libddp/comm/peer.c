/*
 * peer.c - publish, connect and accept of the CPU backend's TCP peers (see peer.h).
 *
 * Invariants:
 *  1. A connection is handed to the caller only after a hello with the right magic, comm
 *     id, index and the listener's own nonce (compared in constant time); anything else is
 *     closed, so a stranger on the port can delay the set-up but never join it.
 *  2. Every wait is bounded by the caller's deadline. Connections whose hello is not complete
 *     are served together, each by its own 5 s bound (and at most PEER_PENDING_MAX of them,
 *     the oldest evicted), so silent strangers cannot hold the accept loop or delay a peer
 *     that says hello at once.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
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

/* Takes pending connection i out of the list; returns its socket (the caller owns it). */
static int pending_take(struct peer_listener *pl, int i)
{
    int fd = pl->pend[i].fd;
    memmove(&pl->pend[i], &pl->pend[i + 1], (size_t)(pl->npend - i - 1) * sizeof(pl->pend[0]));
    pl->npend--;
    return fd;
}

static void pending_drop(struct peer_listener *pl, int i)
{
    close(pending_take(pl, i));
}

void peer_listener_close(struct peer_listener *pl)
{
    while (pl->npend > 0)
        pending_drop(pl, pl->npend - 1);
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
    pl->npend = 0;
    if ((ret = rand_hex(pl->nonce, PEER_NONCE_HEX / 2)) < 0) {
        err_set(err, ret, "cannot read random bytes for the %s nonce", what);
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
    /* Listen where the peers are told to connect, not on every address of the host. */
    const char *every = NULL;
    if ((ret = net_listen_at(host, 0, backlog, &pl->fd, &port, &every, &e)) < 0) {
        err_set(err, ret, "%s: cannot listen on %s: %s", what, host, e.msg);
        goto out;
    }
    if (every)
        log_warn("comm: rank %d: %s address '%s' %s: listening on every address", c->rank, what,
                 host, every);
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

/* Reads what pending connection i has sent of its hello. Returns 1 when the hello is
 * complete, 0 when more is to come, -1 when the peer closed or failed. */
static int pending_read(struct peer_pending *p)
{
    for (;;) {
        ssize_t n = recv(p->fd, p->buf + p->got, sizeof(struct hello_msg) - p->got, MSG_DONTWAIT);
        if (n > 0) {
            p->got += (size_t)n;
            if (p->got == sizeof(struct hello_msg))
                return 1;
            continue;
        }
        if (n < 0 && errno == EINTR)
            continue;
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK))
            return 0;
        return -1;
    }
}

int peer_accept(struct comm *c, struct peer_listener *pl, uint64_t id, int64_t deadline_ms,
                int (*want)(void *ctx, uint32_t index), void *ctx, const char *what,
                uint32_t *index_out, int *fd_out, struct ddp_err *err)
{
    _Static_assert(sizeof(struct hello_msg) <= sizeof(((struct peer_pending *)0)->buf),
                   "a hello fits a pending connection's buffer");
    for (;;) {
        /* A complete and right hello is handed over; a wrong one, or one late, is dropped. */
        int64_t now = time_mono_ms(), wake = deadline_ms;
        for (int i = 0; i < pl->npend;) {
            struct peer_pending *p = &pl->pend[i];
            if (p->got == sizeof(struct hello_msg)) {
                struct hello_msg got;
                memcpy(&got, p->buf, sizeof(got));
                got.nonce[PEER_NONCE_HEX] = '\0';
                int ok = got.magic == HELLO_MAGIC && got.id == id && want(ctx, got.rank);
                ok = ok && secret_equal(got.nonce, pl->nonce);
                if (ok) {
                    *index_out = got.rank;
                    *fd_out = pending_take(pl, i);
                    return 0;
                }
                log_warn_limited(1000, "comm: rank %d dropped a %s connection with a wrong hello",
                                 c->rank, what);
                pending_drop(pl, i);
                continue;
            }
            if (now >= p->deadline) {
                log_warn_limited(
                    1000, "comm: rank %d dropped a %s connection that sent no hello within %d ms",
                    c->rank, what, HELLO_WAIT_MS);
                pending_drop(pl, i);
                continue;
            }
            wake = time_deadline_min(wake, p->deadline);
            i++;
        }
        if (now >= deadline_ms)
            return err_set(err, DDP_ETIMEOUT, "no connection arrived in time");
        struct pollfd pfd[PEER_PENDING_MAX + 1];
        pfd[0] = (struct pollfd){.fd = pl->fd, .events = POLLIN};
        for (int i = 0; i < pl->npend; i++)
            pfd[1 + i] = (struct pollfd){.fd = pl->pend[i].fd, .events = POLLIN};
        int64_t left = time_left_ms(wake);
        int n = poll(pfd, (nfds_t)(1 + pl->npend), left > 1000000 ? 1000000 : (int)left);
        if (n < 0 && errno != EINTR)
            return err_set(err, DDP_EIO, "poll: %s", strerror(errno));
        if (n <= 0)
            continue;
        int npolled = pl->npend;
        for (int i = npolled - 1; i >= 0; i--) {
            if (!(pfd[1 + i].revents & (POLLIN | POLLHUP | POLLERR)))
                continue;
            if (pending_read(&pl->pend[i]) < 0)
                pending_drop(pl, i); /* closed before its hello was complete */
        }
        if (pfd[0].revents & POLLIN) {
            int fd = -1;
            struct ddp_err e;
            int ret = net_accept(pl->fd, time_mono_ms(), &fd, &e);
            if (ret == DDP_EIO)
                return err_set(err, ret, "%s", e.msg);
            if (ret == 0) {
                if (pl->npend == PEER_PENDING_MAX) {
                    log_warn_limited(
                        1000,
                        "comm: rank %d dropped the oldest of %d %s connections without a "
                        "hello",
                        c->rank, PEER_PENDING_MAX, what);
                    pending_drop(pl, 0);
                }
                pl->pend[pl->npend++] = (struct peer_pending){
                    .fd = fd, .got = 0, .deadline = time_deadline_ms(HELLO_WAIT_MS)};
            }
        }
    }
}
