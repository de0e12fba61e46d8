/*
 * ring.c - the CPU backend's TCP ring: its set-up and the engine that runs one all-reduce
 * or broadcast over it.
 *
 * Set-up (ring_connect): each ring rank publishes its address under "comm/<id>/<ring
 * index>" (peer.c), connects to its right neighbour (index + 1) and says hello, accepts from
 * its left neighbour (index - 1) only, then answers with one ack byte and waits for the
 * right one's. Data flows one way on each socket: out to the right on send_fd, in from the
 * left on recv_fd.
 *
 * Every collective starts with a 24-byte header (magic, kind, dtype or root, sequence
 * number, byte count) that the receiver compares with its own, so ranks that issue
 * different collectives fail loudly instead of mixing data.
 *
 * All-reduce = reduce-scatter then all-gather over W segments of nearly equal size
 * (count/W elements, the first count%W one more): 2(W-1) steps; in step t a rank sends one
 * segment and receives another. Received reduce-scatter data lands in a chunk-sized staging
 * buffer and is summed into the user's buffer chunk by chunk; all-gather data is received in
 * place. Pipelining: the segment sent in step t is the one received in step t-1, and each
 * byte of it goes out as soon as its chunk has been received and summed, so sending,
 * receiving and summing overlap across the whole ring (non-blocking sockets + poll).
 * Broadcast is a pipelined ring from the root (each rank forwards bytes as they arrive).
 *
 * Failure: an inactivity deadline (opts.timeout_ms without any byte moving) gives
 * DDP_ETIMEOUT naming the neighbour waited on; EOF, reset or a hang-up on the send socket
 * give DDP_EPEER naming the neighbour, and a neighbour's notice names the rank it blamed
 * (fault.c).
 *
 * Invariants:
 *  1. Ring indices (rrank, left, right, root) are turned into global ranks
 *     (cpu_global_rank) in every message; they differ in the hierarchical layout.
 *  2. A send step never sends bytes of a segment before they were received and summed:
 *     step t forwards what receive step t-1 completed (step_dep).
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/timeutil.h"
#include "libddp/comm/comm_cpu_internal.h"
#include "libddp/comm/comm_shm.h"
#include "libddp/comm/fault.h"
#include "libddp/comm/peer.h"
#include "libddp/comm/vecadd.h"

/* One collective as the engine sees it. */
struct plan {
    char *buf;
    size_t esize;
    const struct vecadd_type *type; /* all-reduce: the element type */
    int nsteps;
    int has_send, has_recv;
    /* all-reduce */
    int rank, world;
    size_t count;
    /* broadcast */
    int is_bcast;
    size_t bytes;
    const char *what;
};

static void seg_range(const struct plan *p, int i, size_t *off, size_t *len)
{
    size_t base = p->count / (size_t)p->world, rem = p->count % (size_t)p->world;
    size_t ui = (size_t)i;
    *off = (ui * base + (ui < rem ? ui : rem)) * p->esize;
    *len = (base + (ui < rem ? 1 : 0)) * p->esize;
}

static int mod(int a, int w)
{
    int m = a % w;
    return m < 0 ? m + w : m;
}

static void step_send(const struct plan *p, int t, size_t *off, size_t *len)
{
    if (p->is_bcast) {
        *off = 0;
        *len = p->has_send ? p->bytes : 0;
        return;
    }
    int seg = t < p->world - 1 ? mod(p->rank - t, p->world)
                               : mod(p->rank + 1 - (t - (p->world - 1)), p->world);
    seg_range(p, seg, off, len);
}

static void step_recv(const struct plan *p, int t, size_t *off, size_t *len, int *reduce)
{
    if (p->is_bcast) {
        *off = 0;
        *len = p->has_recv ? p->bytes : 0;
        *reduce = 0;
        return;
    }
    int rs = t < p->world - 1;
    int seg = rs ? mod(p->rank - t - 1, p->world) : mod(p->rank - (t - (p->world - 1)), p->world);
    seg_range(p, seg, off, len);
    *reduce = rs;
}

/* The receive step whose data send step t forwards (-1: none). */
static int step_dep(const struct plan *p, int t)
{
    if (p->is_bcast)
        return p->has_recv ? 0 : -1;
    return t - 1;
}

/* Runs one collective over the ring; returns 0 or the error. */
static int ring_run(struct comm *c, const struct plan *p, const struct coll_hdr *mine,
                    struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    const size_t hsz = sizeof(struct coll_hdr);
    struct coll_hdr theirs;
    size_t shdr = 0, rhdr = 0;
    int ss = 0, rs = 0;
    size_t sdone = 0, rready = 0, sfill = 0;
    int64_t last = time_mono_ms();
    int watch_left = 1; /* poll recv_fd for an urgent notice even when not reading */
    cpu->wait_peer = -1;
    for (;;) {
        int progress = 0, want_out = 0, want_in = 0;
        /* Send side: the header, then every step's segment as far as its data is ready. */
        while (p->has_send) {
            const char *src;
            size_t avail;
            if (shdr < hsz) {
                src = (const char *)mine + shdr;
                avail = hsz - shdr;
            } else {
                if (ss >= p->nsteps)
                    break;
                size_t off, len;
                step_send(p, ss, &off, &len);
                if (sdone >= len) {
                    ss++;
                    sdone = 0;
                    continue;
                }
                size_t allowed = len;
                int d = step_dep(p, ss);
                if (d >= 0 && (rhdr < hsz || rs < d))
                    allowed = 0;
                else if (d >= 0 && rs == d)
                    allowed = rready;
                if (allowed <= sdone)
                    break; /* waits for the left neighbour's data */
                src = p->buf + off + sdone;
                avail = allowed - sdone;
            }
            ssize_t n = send(cpu->send_fd, src, avail, MSG_NOSIGNAL | MSG_DONTWAIT);
            if (n > 0) {
                if (shdr < hsz)
                    shdr += (size_t)n;
                else
                    sdone += (size_t)n;
                progress = 1;
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                want_out = 1;
                break;
            }
            return fault_send_failed(c, p->what, n < 0 ? errno : 0, err);
        }
        /* Receive side: the header, then every step's segment (summed chunk by chunk). */
        while (p->has_recv) {
            char *dst;
            size_t room;
            size_t off = 0, len = 0, cend = 0;
            int reduce = 0;
            if (rhdr < hsz) {
                dst = (char *)&theirs + rhdr;
                room = hsz - rhdr;
            } else {
                if (rs >= p->nsteps)
                    break;
                step_recv(p, rs, &off, &len, &reduce);
                if (rready >= len) {
                    rs++;
                    rready = 0;
                    sfill = 0;
                    continue;
                }
                if (reduce) {
                    cend = len - rready < cpu->chunk ? len - rready : cpu->chunk;
                    dst = (char *)cpu->stage + sfill;
                    room = cend - sfill;
                } else {
                    dst = p->buf + off + rready;
                    room = len - rready;
                }
            }
            ssize_t n = recv(cpu->recv_fd, dst, room, MSG_DONTWAIT);
            if (n > 0 && (size_t)n < room) {
                /* A short read: the buffer ran dry, or the read stopped at an urgent mark
                 * (the left neighbour's failure notice), which the next read would skip. */
                int nret = fault_urgent_notice(c, p->what, err);
                if (nret < 0)
                    return nret;
            }
            if (n > 0) {
                progress = 1;
                if (rhdr < hsz) {
                    rhdr += (size_t)n;
                    int bad =
                        rhdr == hsz && (theirs.magic != mine->magic || theirs.kind != mine->kind ||
                                        theirs.aux != mine->aux || theirs.seq != mine->seq ||
                                        theirs.bytes != mine->bytes);
                    if (bad) {
                        cpu->notice = fault_notice(-1, 0);
                        return err_set(err, DDP_EINTERNAL,
                                       "collective mismatch with rank %d (%s): it issued kind %u "
                                       "aux %u seq %" PRIu64 " of %" PRIu64
                                       " bytes, this rank kind %u aux %u seq %" PRIu64
                                       " of %" PRIu64 " bytes",
                                       cpu_global_rank(cpu, cpu->left), cpu->left_name, theirs.kind,
                                       theirs.aux, theirs.seq, theirs.bytes, mine->kind, mine->aux,
                                       mine->seq, mine->bytes);
                    }
                } else if (reduce) {
                    sfill += (size_t)n;
                    if (sfill == cend) {
                        p->type->add(p->buf + off + rready, cpu->stage, cend / p->esize);
                        rready += cend;
                        sfill = 0;
                    }
                } else {
                    rready += (size_t)n;
                }
                continue;
            }
            if (n < 0 && errno == EINTR)
                continue;
            if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
                want_in = 1;
                break;
            }
            return fault_recv_failed(c, p->what, n < 0 ? errno : 0, err);
        }
        int send_done = !p->has_send || (shdr == hsz && ss >= p->nsteps);
        int recv_done = !p->has_recv || (rhdr == hsz && rs >= p->nsteps);
        if (send_done && recv_done)
            return 0;
        int64_t now = time_mono_ms();
        if (progress) {
            if (now != last)
                shm_heartbeat(cpu->shm); /* this host's members wait on the leader */
            last = now;
            continue;
        }
        cpu->wait_peer = !recv_done ? cpu->left : cpu->right;
        int64_t left_ms = last + c->opts.timeout_ms - now;
        if (left_ms <= 0) {
            int peer = !recv_done ? cpu->left : cpu->right;
            const char *name = !recv_done ? cpu->left_name : cpu->right_name;
            cpu->notice = fault_notice(cpu_global_rank(cpu, peer), 1);
            return err_set(err, DDP_ETIMEOUT,
                           "peer rank %d (%s) silent for %" PRId64 " ms during %s",
                           cpu_global_rank(cpu, peer), name, c->opts.timeout_ms, p->what);
        }
        /* While this rank still has bytes for the right neighbour, any readable event on the
         * send socket (it never carries data towards us) means that neighbour went away. */
        struct pollfd pfd[2];
        pfd[0].fd = send_done ? -1 : cpu->send_fd;
        pfd[0].events = (short)(POLLIN | POLLRDHUP | (want_out ? POLLOUT : 0));
        pfd[0].revents = 0;
        pfd[1].fd = want_in || watch_left ? cpu->recv_fd : -1;
        pfd[1].events = (short)(POLLPRI | (want_in ? POLLIN : 0));
        pfd[1].revents = 0;
        int pn = poll(pfd, 2, left_ms > 0x7fffffff ? 0x7fffffff : (int)left_ms);
        if (pn < 0 && errno != EINTR) {
            cpu->notice = fault_notice(-1, 0);
            return err_set(err, DDP_EIO, "poll: %s", strerror(errno));
        }
        if (pn > 0 && (pfd[0].revents & (POLLIN | POLLRDHUP | POLLHUP | POLLERR))) {
            int soerr = 0;
            socklen_t sl = sizeof(soerr);
            if (getsockopt(cpu->send_fd, SOL_SOCKET, SO_ERROR, &soerr, &sl) < 0)
                soerr = errno;
            return fault_send_failed(c, p->what, soerr, err);
        }
        if (pn > 0 && (pfd[1].revents & POLLPRI)) {
            int nret = fault_urgent_notice(c, p->what, err);
            if (nret < 0)
                return nret;
        }
        /* A left neighbour that finished and left is no news while we only send. */
        if (pn > 0 && !want_in && (pfd[1].revents & (POLLHUP | POLLERR)))
            watch_left = 0;
    }
}

int ring_allreduce(struct comm *c, void *buf, size_t count, enum comm_dtype dt, uint64_t seq,
                   int kind, const char *what, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    const struct vecadd_type *t = vecadd_type(dt);
    struct plan p;
    memset(&p, 0, sizeof(p));
    p.rank = cpu->rrank;
    p.world = cpu->rworld;
    p.buf = buf;
    p.count = count;
    p.type = t;
    p.what = what;
    p.esize = t->size;
    p.nsteps = 2 * (cpu->rworld - 1);
    p.has_send = p.has_recv = 1;
    struct coll_hdr h = {.magic = COLL_MAGIC,
                         .kind = (uint16_t)kind,
                         .aux = (uint16_t)dt,
                         .seq = seq,
                         .bytes = count * p.esize};
    return ring_run(c, &p, &h, err);
}

int ring_broadcast(struct comm *c, void *buf, size_t bytes, int root, uint64_t seq,
                   struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    struct plan p;
    memset(&p, 0, sizeof(p));
    p.rank = cpu->rrank;
    p.world = cpu->rworld;
    p.buf = buf;
    p.esize = 1;
    p.is_bcast = 1;
    p.bytes = bytes;
    p.nsteps = 1;
    p.has_recv = cpu->rrank != root;
    p.has_send = cpu->right != root;
    p.what = "broadcast";
    struct coll_hdr h = {.magic = COLL_MAGIC,
                         .kind = WORK_BROADCAST,
                         .aux = (uint16_t)root,
                         .seq = seq,
                         .bytes = bytes};
    return ring_run(c, &p, &h, err);
}

/* Accepts only the left neighbour. */
static int is_left(void *ctx, uint32_t index)
{
    const struct cpu *cpu = ctx;
    return index == (uint32_t)cpu->left;
}

int ring_connect(struct comm *c, struct rdzv *r, uint64_t id, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    struct peer_listener pl = {.fd = -1, .npend = 0};
    struct peer_addr ra, la;
    struct ddp_err e;
    char key[64];
    int ret = 0, fd = -1;
    int right = cpu_global_rank(cpu, cpu->right), left = cpu_global_rank(cpu, cpu->left);
    int64_t deadline = time_deadline_ms(c->opts.timeout_ms);
    snprintf(key, sizeof(key), "comm/%" PRIu64 "/%d", id, cpu->rrank);
    if ((ret = peer_listen(c, r, key, 16, "ring", &pl, err)) < 0)
        return ret;
    snprintf(key, sizeof(key), "comm/%" PRIu64 "/%d", id, cpu->right);
    if ((ret = peer_fetch(c, r, key, right, deadline, &ra, err)) < 0)
        goto out;
    snprintf(key, sizeof(key), "comm/%" PRIu64 "/%d", id, cpu->left);
    if ((ret = peer_fetch(c, r, key, left, deadline, &la, err)) < 0)
        goto out;
    snprintf(cpu->right_name, sizeof(cpu->right_name), "%s", ra.name);
    snprintf(cpu->left_name, sizeof(cpu->left_name), "%s", la.name);

    /* Connect to the right neighbour and say hello; accept from the left one. */
    if ((ret = peer_connect(&ra, right, (uint32_t)cpu->rrank, id, deadline, "ring", &cpu->send_fd,
                            err)) < 0)
        goto out;
    uint32_t index = 0;
    if ((ret = peer_accept(c, &pl, id, deadline, is_left, cpu, "ring", &index, &fd, &e)) < 0) {
        err_set(err, ret, "ring: peer rank %d (%s) did not connect: %s", left, cpu->left_name,
                e.msg);
        goto out;
    }
    uint8_t ack = 1;
    if ((ret = net_send_all(fd, &ack, 1, deadline, &e)) < 0) {
        err_set(err, ret, "ring: ack to peer rank %d (%s): %s", left, cpu->left_name, e.msg);
        goto out;
    }
    cpu->recv_fd = fd;
    fd = -1;
    ret = net_recv_all(cpu->send_fd, &ack, 1, deadline, &e);
    if (ret == 0 && ack != 1)
        ret = err_set(&e, DDP_EPEER, "bad ack");
    if (ret < 0) {
        err_set(err, ret, "ring: peer rank %d (%s) did not accept this rank: %s", right,
                cpu->right_name, e.msg);
        goto out;
    }
out:
    if (fd >= 0)
        close(fd);
    peer_listener_close(&pl);
    return ret;
}
