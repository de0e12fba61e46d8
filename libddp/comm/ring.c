/*
 * ring.c - the CPU backend's TCP ring: its set-up and the engine that runs one all-reduce,
 * reduce-scatter, all-gather or broadcast over it.
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
 * segment and receives another. The two halves are also collectives of their own
 * (ring_reduce_scatter, ring_allgather: W equal shards, rank r's is segment r), run by the
 * same engine from the same step functions: a plan says how many reduce-scatter and
 * all-gather steps it has and where each step's bytes come from and go (struct plan).
 * Received reduce-scatter data lands in a chunk-sized staging buffer and is summed chunk by
 * chunk: into the user's buffer for the all-reduce (in place), into two alternating scratch
 * segments for the reduce-scatter, whose input is only read, and into the output at the last
 * step; all-gather data is received in place. Pipelining: the segment sent in step t is the
 * one received in step t-1, and each byte of it goes out as soon as its chunk has been
 * received and summed, so sending, receiving and summing overlap across the whole ring
 * (non-blocking sockets + poll).
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
 *  3. A receive step never writes a buffer a send step still reads: the reduce-scatter's
 *     scratch segment of step t - 2 is written again in step t only after send step t - 1
 *     has finished (recv_gate); every other buffer is written again only after the ring
 *     carried this rank's bytes of it all the way round.
 */
#include <errno.h>
#include <inttypes.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "common/timeutil.h"
#include "common/xalloc.h"
#include "libddp/comm/comm_cpu_internal.h"
#include "libddp/comm/comm_shm.h"
#include "libddp/comm/fault.h"
#include "libddp/comm/peer.h"
#include "libddp/comm/vecadd.h"

/*
 * One collective as the engine sees it. A ring collective is rs_steps reduce-scatter steps
 * then ag_steps all-gather steps over `world` segments (segment i at seg_range(i)); in
 * reduce-scatter step t a rank sends segment rank-t-1 and receives segment rank-t-2 (mod
 * world), so after world-1 steps it holds the whole sum of its own segment `rank`; in
 * all-gather step u it sends segment rank-u and receives segment rank-u-1. The all-reduce is
 * both phases over one buffer (sums in place); reduce-scatter and all-gather are one each.
 */
struct plan {
    const char *what;
    const struct vecadd_type *type; /* ring collectives: the element type */
    size_t esize;
    int nsteps;
    int has_send, has_recv;
    int rank, world;
    /* segments: even: segment i = elements [i * count, (i + 1) * count); else count elements
     * split nearly evenly (count/world each, the first count%world one more) */
    int even;
    size_t count;
    int rs_steps, ag_steps;
    char *in;           /* reduce-scatter: every rank's contribution, segment i at off(i) */
    char *rs_dst[2];    /* where the non-final steps' sums go, alternately (a segment each);
                       * NULL: in place into `in` (which is then written) */
    char *rs_out;       /* the final sum, of the own segment */
    const char *ag_own; /* all-gather: the own segment's data, sent first */
    char *ag_buf;       /* all-gather: segment i is received at ag_buf + off(i) */
    /* broadcast */
    int is_bcast;
    char *buf;
    size_t bytes;
};

static void seg_range(const struct plan *p, int i, size_t *off, size_t *len)
{
    size_t ui = (size_t)i;
    if (p->even) {
        *off = ui * p->count * p->esize;
        *len = p->count * p->esize;
        return;
    }
    size_t base = p->count / (size_t)p->world, rem = p->count % (size_t)p->world;
    *off = (ui * base + (ui < rem ? ui : rem)) * p->esize;
    *len = (base + (ui < rem ? 1 : 0)) * p->esize;
}

static int mod(int a, int w)
{
    int m = a % w;
    return m < 0 ? m + w : m;
}

/* Where a reduce-scatter step t's received sum goes. */
static char *rs_dst_of(const struct plan *p, int t)
{
    if (t == p->rs_steps - 1)
        return p->rs_out;
    if (p->rs_dst[0])
        return p->rs_dst[t % 2];
    size_t off, len;
    seg_range(p, mod(p->rank - t - 2, p->world), &off, &len);
    return p->in + off;
}

/* The bytes send step t sends. */
static void step_send(const struct plan *p, int t, const char **src, size_t *len)
{
    size_t off;
    if (p->is_bcast) {
        *src = p->buf;
        *len = p->has_send ? p->bytes : 0;
        return;
    }
    if (t < p->rs_steps) {
        seg_range(p, mod(p->rank - t - 1, p->world), &off, len);
        *src = t == 0 ? p->in + off : rs_dst_of(p, t - 1);
        return;
    }
    int u = t - p->rs_steps;
    seg_range(p, mod(p->rank - u, p->world), &off, len);
    *src = u == 0 ? p->ag_own : p->ag_buf + off;
}

/* Where receive step t's bytes go: *dst, and for a reduce step *acc, the data they are
 * summed with (dst[i] = acc[i] + received[i]); *acc is NULL for a plain receive. */
static void step_recv(const struct plan *p, int t, char **dst, const char **acc, size_t *len)
{
    size_t off;
    if (p->is_bcast) {
        *dst = p->buf;
        *acc = NULL;
        *len = p->has_recv ? p->bytes : 0;
        return;
    }
    if (t < p->rs_steps) {
        seg_range(p, mod(p->rank - t - 2, p->world), &off, len);
        *dst = rs_dst_of(p, t);
        *acc = p->in + off;
        return;
    }
    int u = t - p->rs_steps;
    seg_range(p, mod(p->rank - u - 1, p->world), &off, len);
    *dst = p->ag_buf + off;
    *acc = NULL;
}

/* The send step that must have finished before receive step t may write (-1: none): a
 * reduce-scatter step that sums into scratch reuses the buffer of step t - 2, which send
 * step t - 1 forwards. (Everywhere else a segment is written again only after the ring
 * carried this rank's bytes of it round, so its send has long finished.) */
static int recv_gate(const struct plan *p, int t)
{
    if (!p->is_bcast && p->rs_dst[0] && t >= 2 && t < p->rs_steps - 1)
        return t - 1;
    return -1;
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
    int64_t last = time_mono_ms(), beat = -1;
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
                const char *from;
                size_t len;
                step_send(p, ss, &from, &len);
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
                src = from + sdone;
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
            size_t len = 0, cend = 0;
            char *to = NULL;
            const char *acc = NULL;
            if (rhdr < hsz) {
                dst = (char *)&theirs + rhdr;
                room = hsz - rhdr;
            } else {
                if (rs >= p->nsteps)
                    break;
                step_recv(p, rs, &to, &acc, &len);
                if (rready >= len) {
                    rs++;
                    rready = 0;
                    sfill = 0;
                    continue;
                }
                int g = rready == 0 && sfill == 0 ? recv_gate(p, rs) : -1;
                if (g >= 0 && ss <= g)
                    break; /* its buffer is still being sent on: the send side moves first */
                if (acc) {
                    cend = len - rready < cpu->chunk ? len - rready : cpu->chunk;
                    dst = (char *)cpu->stage + sfill;
                    room = cend - sfill;
                } else {
                    dst = to + rready;
                    room = len - rready;
                }
            }
            /* Before every read: a read that starts at an urgent mark (the left neighbour's
             * failure notice, sent after this rank had read all there was, or right where a
             * read ended) reads past it, and the notice would be lost in the data. */
            int nret = fault_urgent_notice(c, p->what, err);
            if (nret < 0)
                return nret;
            ssize_t n = recv(cpu->recv_fd, dst, room, MSG_DONTWAIT);
            if (n > 0) { /* a read stops at a mark: the check above finds it next time */
                progress = 1;
                if (rhdr < hsz) {
                    rhdr += (size_t)n;
                    int bad =
                        rhdr == hsz && (theirs.magic != mine->magic || theirs.kind != mine->kind ||
                                        theirs.aux != mine->aux || theirs.seq != mine->seq ||
                                        theirs.bytes != mine->bytes);
                    if (bad) {
                        cpu->notice = fault_notice(c->rank, FAULT_MISMATCH);
                        return err_set(err, DDP_EINTERNAL,
                                       "collective mismatch with rank %d (%s): it issued kind %u "
                                       "aux %u seq %" PRIu64 " of %" PRIu64
                                       " bytes, this rank kind %u aux %u seq %" PRIu64
                                       " of %" PRIu64 " bytes",
                                       cpu_global_rank(cpu, cpu->left), cpu->left_name, theirs.kind,
                                       theirs.aux, theirs.seq, theirs.bytes, mine->kind, mine->aux,
                                       mine->seq, mine->bytes);
                    }
                } else if (acc) {
                    sfill += (size_t)n;
                    if (sfill == cend) {
                        if (to == acc)
                            p->type->add(to + rready, cpu->stage, cend / p->esize);
                        else
                            p->type->add2(to + rready, acc + rready, cpu->stage, cend / p->esize);
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
            if (now != beat) /* at most once a millisecond, the first progress included */
                shm_heartbeat(cpu->shm); /* this host's members wait on the leader */
            beat = now;
            last = now;
            continue;
        }
        cpu->wait_peer = !recv_done ? cpu->left : cpu->right;
        int64_t left_ms = last + c->opts.timeout_ms - now;
        if (left_ms <= 0) {
            int peer = !recv_done ? cpu->left : cpu->right;
            const char *name = !recv_done ? cpu->left_name : cpu->right_name;
            cpu->notice = fault_notice(cpu_global_rank(cpu, peer), FAULT_SILENT);
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
            cpu->notice = fault_notice(-1, FAULT_LOST);
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

/* The plan of a ring collective over the comm's ring, without its buffers. */
static void ring_plan(struct comm *c, enum comm_dtype dt, const char *what, struct plan *p)
{
    struct cpu *cpu = c->impl;
    memset(p, 0, sizeof(*p));
    p->rank = cpu->rrank;
    p->world = cpu->rworld;
    p->type = vecadd_type(dt);
    p->esize = p->type->size;
    p->what = what;
    p->has_send = p->has_recv = 1;
}

static int ring_go(struct comm *c, struct plan *p, int kind, enum comm_dtype dt, uint64_t seq,
                   uint64_t bytes, struct ddp_err *err)
{
    p->nsteps = p->rs_steps + p->ag_steps;
    struct coll_hdr h = {.magic = COLL_MAGIC,
                         .kind = (uint16_t)kind,
                         .aux = (uint16_t)dt,
                         .seq = seq,
                         .bytes = bytes};
    return ring_run(c, p, &h, err);
}

int ring_allreduce(struct comm *c, void *buf, size_t count, enum comm_dtype dt, uint64_t seq,
                   int kind, const char *what, struct ddp_err *err)
{
    struct plan p;
    ring_plan(c, dt, what, &p);
    size_t off, len;
    p.count = count;
    p.in = p.ag_buf = buf;
    seg_range(&p, p.rank, &off, &len);
    p.rs_out = p.in + off; /* the sums stay in buf: rs_dst NULL */
    p.ag_own = p.in + off;
    p.rs_steps = p.ag_steps = p.world - 1;
    return ring_go(c, &p, kind, dt, seq, count * p.esize, err);
}

int ring_reduce_scatter(struct comm *c, const void *in, void *out, size_t count, enum comm_dtype dt,
                        uint64_t seq, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    struct plan p;
    ring_plan(c, dt, "reduce-scatter", &p);
    size_t sb = count * p.esize;
    p.even = 1;
    p.count = count;
    p.in = (char *)in; /* only read: the sums go to rs_dst and out */
    p.rs_out = out;
    p.rs_steps = p.world - 1;
    if (p.world > 2) {
        /* Two segments of scratch: step t's sum is sent on in step t + 1 while step t + 1's
         * arrives. */
        if (cpu->scratch_bytes < 2 * sb) {
            free(cpu->scratch);
            cpu->scratch = xmalloc(2 * sb);
            cpu->scratch_bytes = 2 * sb;
        }
        p.rs_dst[0] = cpu->scratch;
        p.rs_dst[1] = (char *)cpu->scratch + sb;
    }
    return ring_go(c, &p, WORK_REDUCE_SCATTER, dt, seq, sb * (size_t)p.world, err);
}

int ring_allgather(struct comm *c, const void *in, void *out, size_t count, enum comm_dtype dt,
                   uint64_t seq, struct ddp_err *err)
{
    struct plan p;
    ring_plan(c, dt, "all-gather", &p);
    size_t sb = count * p.esize;
    p.even = 1;
    p.count = count;
    p.ag_own = in;
    p.ag_buf = out;
    p.ag_steps = p.world - 1;
    char *own = (char *)out + (size_t)p.rank * sb;
    if (own != (const char *)in && sb)
        memcpy(own, in, sb);
    return ring_go(c, &p, WORK_ALLGATHER, dt, seq, sb * (size_t)p.world, err);
}

int ring_broadcast(struct comm *c, void *buf, size_t bytes, int root, uint64_t seq,
                   struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    struct plan p;
    memset(&p, 0, sizeof(p));
    p.rank = cpu->rrank;
    p.world = cpu->rworld;
    p.esize = 1;
    p.is_bcast = 1;
    p.buf = buf;
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
