/*
 * rdouble.c - recursive doubling, the CPU backend's algorithm for small all-reduces over
 * TCP (at most cpu->tcp_small bytes): log2(P) (+2) latencies instead of the ring's 2(W-1).
 *
 * Set-up (rd_connect): every ring rank publishes its address under "comm/<id>/rd/<ring
 * index>" (peer.c); of each pair of partners the higher index connects to the lower one,
 * which accepts only partners it expects. Each partner gets a socket of its own (rd_fd).
 *
 * Every message is a header (magic, kind, sequence number, byte count) that must match the
 * receiver's, then the data; a header with magic ABORT_MAGIC carries a failure notice
 * instead (fault.c), so a partner blocked on this rank fails at once with the right name.
 *
 * Invariants:
 *  1. P = rd_pow is the largest power of two <= W (ring world); indices >= P fold into
 *     index - P first and get the result back last, so only indices < P swap in steps.
 *  2. Both partners of a step add the same two buffers (IEEE addition commutes), so every
 *     rank ends with identical bits.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/log.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "libddp/comm/comm_cpu_internal.h"
#include "libddp/comm/comm_shm.h"
#include "libddp/comm/fault.h"
#include "libddp/comm/peer.h"
#include "libddp/comm/vecadd.h"

/* Sends sbuf to ring index `to` and receives rlen bytes from `from` (either may be -1) at
 * once, each preceded by a header that must match ours. Inactivity bounded by the timeout. */
static int rd_xchg(struct comm *c, int to, const void *sbuf, int from, void *rbuf, size_t len,
                   const struct rd_hdr *mine, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    const size_t hsz = sizeof(struct rd_hdr);
    struct rd_hdr theirs;
    size_t sdone = to >= 0 ? 0 : hsz + len, rdone = from >= 0 ? 0 : hsz + len;
    int sfd = to >= 0 ? cpu->rd_fd[to] : -1, rfd = from >= 0 ? cpu->rd_fd[from] : -1;
    int64_t last = time_mono_ms(), beat = -1;
    while (sdone < hsz + len || rdone < hsz + len) {
        int progress = 0;
        if (sdone < hsz + len) {
            const char *src =
                sdone < hsz ? (const char *)mine + sdone : (const char *)sbuf + (sdone - hsz);
            size_t n = sdone < hsz ? hsz - sdone : hsz + len - sdone;
            ssize_t k = send(sfd, src, n, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (k > 0) {
                sdone += (size_t)k;
                progress = 1;
            } else if (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return fault_peer_lost(c, to, "recursive doubling", "all-reduce", errno, err);
            }
        }
        if (rdone < hsz + len) {
            char *dst = rdone < hsz ? (char *)&theirs + rdone : (char *)rbuf + (rdone - hsz);
            size_t n = rdone < hsz ? hsz - rdone : hsz + len - rdone;
            ssize_t k = recv(rfd, dst, n, MSG_DONTWAIT);
            if (k > 0) {
                rdone += (size_t)k;
                progress = 1;
                if (rdone == hsz && theirs.magic == ABORT_MAGIC)
                    return fault_from_notice(c, theirs.kind, from, "recursive doubling",
                                             "all-reduce", err);
                if (rdone == hsz && memcmp(&theirs, mine, hsz) != 0) {
                    cpu->notice = fault_notice(c->rank, FAULT_MISMATCH);
                    return err_set(err, DDP_EINTERNAL,
                                   "collective mismatch with rank %d: it issued kind %u seq "
                                   "%" PRIu64 " of %" PRIu64 " bytes, this rank kind %u seq "
                                   "%" PRIu64 " of %" PRIu64 " bytes",
                                   cpu_global_rank(cpu, from), theirs.kind, theirs.seq,
                                   theirs.bytes, mine->kind, mine->seq, mine->bytes);
                }
            } else if (k == 0) {
                return fault_peer_lost(c, from, "recursive doubling", "all-reduce", 0, err);
            } else if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
                return fault_peer_lost(c, from, "recursive doubling", "all-reduce", errno, err);
            }
        }
        int64_t now = time_mono_ms();
        if (progress) {
            /* this host's members wait on the leader (hierarchical layout), as in ring.c */
            if (now != beat)
                shm_heartbeat(cpu->shm);
            beat = now;
            last = now;
            continue;
        }
        int64_t left_ms = last + c->opts.timeout_ms - now;
        int waited = rdone < hsz + len ? from : to;
        cpu->wait_peer = waited;
        if (left_ms <= 0) {
            cpu->notice = fault_notice(cpu_global_rank(cpu, waited), FAULT_SILENT);
            return err_set(err, DDP_ETIMEOUT,
                           "peer rank %d silent for %" PRId64
                           " ms during all-reduce (recursive doubling)",
                           cpu_global_rank(cpu, waited), c->opts.timeout_ms);
        }
        struct pollfd pfd[2] = {
            {.fd = sdone < hsz + len ? sfd : -1, .events = POLLOUT},
            {.fd = rdone < hsz + len ? rfd : -1, .events = POLLIN},
        };
        if (poll(pfd, 2, left_ms > 0x7fffffff ? 0x7fffffff : (int)left_ms) < 0 && errno != EINTR) {
            cpu->notice = fault_notice(-1, FAULT_LOST);
            return err_set(err, DDP_EIO, "poll: %s", strerror(errno));
        }
    }
    return 0;
}

/*
 * Recursive doubling over P = rd_pow ranks: ranks P.. first fold into rank - P and get the
 * result back at the end; in step k rank r swaps its whole buffer with r ^ 2^k and adds
 * (IEEE addition commutes, so both partners, and in the end all ranks, hold identical bits).
 * log2(P) (+2) latencies instead of the ring's 2(W-1).
 */
int rd_allreduce(struct comm *c, void *buf, size_t count, enum comm_dtype dt, uint64_t seq,
                 int kind, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    const struct vecadd_type *t = vecadd_type(dt);
    size_t len = count * t->size;
    int r = cpu->rrank, P = cpu->rd_pow, W = cpu->rworld, ret = 0;
    struct rd_hdr h = {.magic = COLL_MAGIC, .kind = (uint32_t)kind, .seq = seq, .bytes = len};
    cpu->wait_peer = -1;
    if (r >= P) {
        if ((ret = rd_xchg(c, r - P, buf, -1, NULL, len, &h, err)) < 0)
            return ret;
        return rd_xchg(c, -1, NULL, r - P, buf, len, &h, err);
    }
    if (r + P < W) {
        if ((ret = rd_xchg(c, -1, NULL, r + P, cpu->rd_tmp, len, &h, err)) < 0)
            return ret;
        t->add(buf, cpu->rd_tmp, count);
    }
    for (int bit = 1; bit < P; bit <<= 1) {
        int q = r ^ bit;
        if ((ret = rd_xchg(c, q, buf, q, cpu->rd_tmp, len, &h, err)) < 0)
            return ret;
        t->add(buf, cpu->rd_tmp, count);
    }
    if (r + P < W)
        return rd_xchg(c, r + P, buf, -1, NULL, len, &h, err);
    return 0;
}

/* Whether ring indices a and b exchange data in recursive doubling over p of w. */
static int rd_partners(int a, int b, int p, int w)
{
    if (a == b || a >= w || b >= w)
        return 0;
    if (a >= p || b >= p)
        return a == b + p || b == a + p;
    int x = a ^ b;
    return (x & (x - 1)) == 0;
}

struct rd_want {
    int me, P, W;
    const int *fd;
};

/* Accepts a higher partner that has not connected yet. */
static int wants_partner(void *ctx, uint32_t index)
{
    const struct rd_want *w = ctx;
    int q = (int)index;
    return index < (uint32_t)w->W && q > w->me && rd_partners(w->me, q, w->P, w->W) && w->fd[q] < 0;
}

int rd_connect(struct comm *c, struct rdzv *r, uint64_t id, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    int ret = 0, fd = -1, W = cpu->rworld, me = cpu->rrank;
    int64_t deadline = time_deadline_ms(c->opts.timeout_ms);
    struct peer_listener pl = {.fd = -1, .npend = 0};
    struct ddp_err e;
    char key[64];
    int P = 1;
    while (P * 2 <= W)
        P *= 2;
    cpu->rd_pow = P;
    cpu->rd_fd = xmalloc((size_t)W * sizeof(int));
    for (int i = 0; i < W; i++)
        cpu->rd_fd[i] = -1;
    snprintf(key, sizeof(key), "comm/%" PRIu64 "/rd/%d", id, me);
    if ((ret = peer_listen(c, r, key, 64, "recursive doubling", &pl, err)) < 0)
        return ret;
    /* Connect to the lower partners, then accept the higher ones. */
    int expect = 0;
    for (int q = 0; q < W; q++) {
        if (!rd_partners(me, q, P, W))
            continue;
        if (q > me) {
            expect++;
            continue;
        }
        struct peer_addr pa;
        snprintf(key, sizeof(key), "comm/%" PRIu64 "/rd/%d", id, q);
        if ((ret = peer_fetch(c, r, key, cpu_global_rank(cpu, q), deadline, &pa, err)) < 0 ||
            (ret = peer_connect(&pa, cpu_global_rank(cpu, q), (uint32_t)me, id, deadline,
                                "recursive doubling", &cpu->rd_fd[q], err)) < 0)
            goto out;
    }
    struct rd_want want = {.me = me, .P = P, .W = W, .fd = cpu->rd_fd};
    for (; expect > 0; expect--) {
        uint32_t q = 0;
        if ((ret = peer_accept(c, &pl, id, deadline, wants_partner, &want, "recursive doubling", &q,
                               &fd, &e)) < 0) {
            err_set(err, ret, "recursive doubling: %d partner(s) did not connect: %s", expect,
                    e.msg);
            goto out;
        }
        net_set_nodelay(fd);
        cpu->rd_fd[q] = fd;
    }
    cpu->tcp_small = c->opts.small_bytes ? c->opts.small_bytes : COMM_TCP_SMALL_BYTES;
    if (cpu->tcp_small > (size_t)16 << 20)
        cpu->tcp_small = (size_t)16 << 20;
    cpu->rd_tmp = xmalloc(cpu->tcp_small ? cpu->tcp_small : 1);
out:
    peer_listener_close(&pl);
    return ret;
}
