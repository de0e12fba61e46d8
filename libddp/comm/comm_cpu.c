/*
 * comm_cpu.c - the CPU backend: its ops table, the choice of transport, and the comm thread
 * that runs collectives in issue order. The transports and algorithms are files of their
 * own (comm_cpu_internal.h lists them): the TCP ring (ring.c) and recursive doubling for
 * small all-reduces (rdouble.c), both connected through peer.c; shared memory between the
 * ranks of a host (comm_shm.c), found by topo.c; failure notices in fault.c.
 *
 * Transport (init, the same choice on every rank): every rank on its own host, or
 * opts.force_tcp: the TCP ring over all ranks; every rank on one host: shared memory only;
 * else hierarchical: a shared-memory reduce to each host's leader, the ring of the leaders
 * (ring index = host index), a shared-memory broadcast.
 *
 * Reduce-scatter and all-gather (the sharded paths) are works like the all-reduce: the TCP
 * ring runs its two halves on their own (ring.c), shared memory has its own (comm_shm_coll.c),
 * and the hierarchical layout runs them as hierarchical all-reduces (do_reduce_scatter).
 *
 * Collectives run in issue order (FIFO) on the comm thread. Barrier is an all-reduce of W
 * ones: nobody finishes before everybody has contributed. The first error is sticky: the
 * thread tells the neighbours (fault_abort_ring), fails every queued work with the error,
 * and every later call returns it.
 *
 * Scheduling: the comm thread asks the kernel for a short time slice (sched_setattr with a
 * 100 us sched_runtime, SCHED_OTHER; honoured by Linux's EEVDF scheduler since 6.12, ignored
 * before). On a core also busy with the backward, a thread with a shorter slice preempts the
 * running one when it wakes, so the all-reduce moves as soon as a peer's data arrives instead
 * of waiting out the training thread's slice (NCCL puts its kernels on high-priority streams
 * for the same reason). DDP_COMM_SLICE_US sets it (0: leave the default).
 *
 * Blocking collectives (comm_allreduce, broadcast, barrier) issued while the queue is empty
 * and the thread idle run on the caller's thread instead, which saves two thread wake-ups
 * per call; otherwise they queue behind the async works like any other.
 *
 * Invariants:
 *  1. After init, only the thread running a work touches the sockets, the staging buffer and
 *     `seq`, `notice`: the comm thread, or a caller of a blocking collective that found the
 *     queue empty and the thread idle and set `busy` (collectives come from one thread, so
 *     nothing is queued meanwhile).
 *  2. cpu->mu guards the queue, the work states, `stop`, `failed` and `fail`.
 *  3. Every work is on the `all` list from issue until comm_wait() (or destroy) frees it.
 */
#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "common/log.h"
#include "common/xalloc.h"
#include "libddp/comm/comm_cpu_internal.h"
#include "libddp/comm/comm_shm.h"
#include "libddp/comm/fault.h"
#include "libddp/comm/vecadd.h"

struct comm_work {
    enum work_kind kind;
    void *buf;    /* all-reduce, broadcast: the buffer; reduce-scatter, all-gather: in */
    void *out;    /* reduce-scatter, all-gather */
    size_t count; /* all-reduce elements; reduce-scatter, all-gather: elements per shard */
    enum comm_dtype dt;
    size_t bytes; /* broadcast bytes */
    int root;
    int done;
    int status;
    struct ddp_err err;
    struct comm_work *next;                /* the queue */
    struct comm_work *all_prev, *all_next; /* every live work */
};

/* ---- the collectives over the chosen transport ---- */

int cpu_global_rank(const struct cpu *cpu, int i)
{
    return i >= 0 && i < cpu->rworld && cpu->ring_global ? cpu->ring_global[i] : i;
}

/* An all-reduce over the TCP ring of the comm (all ranks, or the leaders): recursive
 * doubling when it is small, else the ring. */
static int tcp_allreduce(struct comm *c, void *buf, size_t count, enum comm_dtype dt, uint64_t seq,
                         int kind, const char *what, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    if (cpu->rd_fd && count * vecadd_type(dt)->size <= cpu->tcp_small)
        return rd_allreduce(c, buf, count, dt, seq, kind, err);
    return ring_allreduce(c, buf, count, dt, seq, kind, what, err);
}

/* A sum all-reduce over the comm's transport (see enum comm_mode). */
static int do_allreduce(struct comm *c, void *buf, size_t count, enum comm_dtype dt, uint64_t seq,
                        int kind, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    const char *what = kind == WORK_BARRIER          ? "barrier"
                       : kind == WORK_REDUCE_SCATTER ? "reduce-scatter"
                       : kind == WORK_ALLGATHER      ? "all-gather"
                                                     : "all-reduce";
    int ret = 0;
    switch (cpu->mode) {
    case MODE_TCP:
        return tcp_allreduce(c, buf, count, dt, seq, kind, what, err);
    case MODE_SHM:
        return shm_allreduce(cpu->shm, buf, count, dt, 0, seq, kind, err);
    case MODE_HIER:
        if ((ret = shm_allreduce(cpu->shm, buf, count, dt, 1, seq, kind, err)) < 0)
            return ret;
        if (cpu->has_ring && (ret = tcp_allreduce(c, buf, count, dt, seq, kind, what, err)) < 0)
            return ret;
        return shm_broadcast(cpu->shm, buf, count * vecadd_type(dt)->size, 0, seq, kind, err);
    }
    return err_set(err, DDP_EINTERNAL, "comm: unknown transport mode %d", (int)cpu->mode);
}

static int do_broadcast(struct comm *c, void *buf, size_t bytes, int root, uint64_t seq,
                        struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    int ret = 0;
    switch (cpu->mode) {
    case MODE_TCP:
        return ring_broadcast(c, buf, bytes, root, seq, err);
    case MODE_SHM:
        return shm_broadcast(cpu->shm, buf, bytes, cpu->local_of[root], seq, WORK_BROADCAST, err);
    case MODE_HIER: {
        int rhost = cpu->host_of[root], mine = cpu->host_of[c->rank];
        /* Root to its host's leader, leaders' ring from that host, then each other host. */
        if (mine == rhost && (ret = shm_broadcast(cpu->shm, buf, bytes, cpu->local_of[root], seq,
                                                  WORK_BROADCAST, err)) < 0)
            return ret;
        if (cpu->has_ring && (ret = ring_broadcast(c, buf, bytes, rhost, seq, err)) < 0)
            return ret;
        if (mine != rhost)
            return shm_broadcast(cpu->shm, buf, bytes, 0, seq, WORK_BROADCAST, err);
        return 0;
    }
    }
    return err_set(err, DDP_EINTERNAL, "comm: unknown transport mode %d", (int)cpu->mode);
}

/* cpu->scratch of at least bytes (comm thread or inline caller only: invariant 1). */
static void *scratch_reserve(struct cpu *cpu, size_t bytes)
{
    if (cpu->scratch_bytes < bytes) {
        free(cpu->scratch);
        cpu->scratch = xmalloc(bytes);
        cpu->scratch_bytes = bytes;
    }
    return cpu->scratch;
}

/*
 * Reduce-scatter over the comm's transport. Shared memory and the TCP ring have their own;
 * hierarchically (shards of one host need not be contiguous) it is the hierarchical
 * all-reduce of a copy of in, of which this rank keeps its shard: correct, at the cost of
 * the all-gather half it did not need.
 */
static int do_reduce_scatter(struct comm *c, const void *in, void *out, size_t count,
                             enum comm_dtype dt, uint64_t seq, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    size_t sb = count * vecadd_type(dt)->size;
    switch (cpu->mode) {
    case MODE_TCP:
        return ring_reduce_scatter(c, in, out, count, dt, seq, err);
    case MODE_SHM:
        return shm_reduce_scatter(cpu->shm, in, out, count, dt, seq, WORK_REDUCE_SCATTER, err);
    case MODE_HIER: {
        size_t full = sb * (size_t)c->world_size;
        char *tmp = scratch_reserve(cpu, full ? full : 1);
        if (full)
            memcpy(tmp, in, full);
        int ret =
            do_allreduce(c, tmp, count * (size_t)c->world_size, dt, seq, WORK_REDUCE_SCATTER, err);
        if (ret == 0 && sb)
            memmove(out, tmp + (size_t)c->rank * sb, sb);
        return ret;
    }
    }
    return err_set(err, DDP_EINTERNAL, "comm: unknown transport mode %d", (int)cpu->mode);
}

/*
 * All-gather over the comm's transport. Hierarchically it is a hierarchical all-reduce of out
 * with every other shard zeroed: x + 0 is exactly x (a -0.0 comes back as +0.0), at the cost
 * of summing zeros.
 */
static int do_allgather(struct comm *c, const void *in, void *out, size_t count, enum comm_dtype dt,
                        uint64_t seq, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    size_t sb = count * vecadd_type(dt)->size;
    switch (cpu->mode) {
    case MODE_TCP:
        return ring_allgather(c, in, out, count, dt, seq, err);
    case MODE_SHM:
        return shm_allgather(cpu->shm, in, out, count, dt, seq, WORK_ALLGATHER, err);
    case MODE_HIER: {
        if (sb) {
            char *o = out, *own = o + (size_t)c->rank * sb;
            if (own != (const char *)in)
                memcpy(own, in, sb);
            memset(o, 0, (size_t)c->rank * sb);
            memset(own + sb, 0, (size_t)(c->world_size - 1 - c->rank) * sb);
        }
        return do_allreduce(c, out, count * (size_t)c->world_size, dt, seq, WORK_ALLGATHER, err);
    }
    }
    return err_set(err, DDP_EINTERNAL, "comm: unknown transport mode %d", (int)cpu->mode);
}

static int run_work(struct comm *c, struct comm_work *w, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    uint64_t seq = cpu->seq++;
    if (w->kind == WORK_REDUCE_SCATTER)
        return do_reduce_scatter(c, w->buf, w->out, w->count, w->dt, seq, err);
    if (w->kind == WORK_ALLGATHER)
        return do_allgather(c, w->buf, w->out, w->count, w->dt, seq, err);
    if (w->kind == WORK_BROADCAST)
        return do_broadcast(c, w->buf, w->bytes, w->root, seq, err);
    if (w->kind == WORK_ALLREDUCE)
        return do_allreduce(c, w->buf, w->count, w->dt, seq, WORK_ALLREDUCE, err);
    /* Barrier: an all-reduce of W ones; nobody finishes before everybody contributed. */
    float *ones = xmalloc((size_t)c->world_size * sizeof(float));
    for (int i = 0; i < c->world_size; i++)
        ones[i] = 1.0f;
    int ret = do_allreduce(c, ones, (size_t)c->world_size, COMM_F32, seq, WORK_BARRIER, err);
    if (ret == 0) {
        for (int i = 0; i < c->world_size; i++) {
            if (ones[i] != (float)c->world_size) {
                ret = err_set(err, DDP_EINTERNAL, "barrier: sum %g != world size %d",
                              (double)ones[i], c->world_size);
                break;
            }
        }
    }
    free(ones);
    return ret;
}

/* ---- the comm thread and its queue ---- */

static void work_finish_locked(struct cpu *cpu, struct comm_work *w, int status,
                               const struct ddp_err *e)
{
    w->done = 1;
    w->status = status;
    if (status < 0 && e)
        w->err = *e;
    (void)cpu;
}

/* The comm thread's time slice: see "Scheduling" above. Failure only costs latency. */
static void comm_thread_short_slice(void)
{
#ifdef SYS_sched_setattr
    int64_t us = COMM_SLICE_US;
    const char *e = getenv("DDP_COMM_SLICE_US");
    if (e && *e) {
        char *end = NULL;
        long long v = strtoll(e, &end, 10);
        if (*end || v < 0 || v > 100000) {
            log_warn("comm: DDP_COMM_SLICE_US=%s is not 0..100000: using %" PRId64, e, us);
        } else {
            us = v;
        }
    }
    if (us == 0)
        return;
    struct { /* the kernel's struct sched_attr (glibc has no wrapper) */
        uint32_t size, policy;
        uint64_t flags;
        int32_t nice;
        uint32_t priority;
        uint64_t runtime, deadline, period;
    } a;
    memset(&a, 0, sizeof(a));
    a.size = sizeof(a);
    a.runtime = (uint64_t)us * 1000;
    if (syscall(SYS_sched_setattr, 0, &a, 0) != 0)
        log_debug("comm: short time slice not set: %s", strerror(errno));
#endif
}

static void *comm_thread(void *arg)
{
    struct comm *c = arg;
    struct cpu *cpu = c->impl;
    comm_thread_short_slice();
    pthread_mutex_lock(&cpu->mu);
    for (;;) {
        while (!cpu->stop && !cpu->head)
            pthread_cond_wait(&cpu->cv_work, &cpu->mu);
        if (cpu->stop)
            break;
        struct comm_work *w = cpu->head;
        cpu->head = w->next;
        if (!cpu->head)
            cpu->tail = NULL;
        cpu->busy = 1;
        pthread_mutex_unlock(&cpu->mu);

        struct ddp_err e;
        err_clear(&e);
        int ret = run_work(c, w, &e);
        if (ret < 0)
            fault_abort_ring(c, &e);

        pthread_mutex_lock(&cpu->mu);
        cpu->busy = 0;
        work_finish_locked(cpu, w, ret, &e);
        if (ret < 0) {
            cpu->failed = 1;
            cpu->fail = e;
            for (struct comm_work *q = cpu->head; q; q = q->next)
                work_finish_locked(cpu, q, ret, &e);
            cpu->head = cpu->tail = NULL;
        }
        pthread_cond_broadcast(&cpu->cv_done);
    }
    /* Stopping: what is still queued will never run. */
    struct ddp_err e;
    err_set(&e, DDP_ECANCELLED, "comm destroyed before the collective ran");
    for (struct comm_work *q = cpu->head; q; q = q->next)
        work_finish_locked(cpu, q, DDP_ECANCELLED, &e);
    cpu->head = cpu->tail = NULL;
    pthread_cond_broadcast(&cpu->cv_done);
    pthread_mutex_unlock(&cpu->mu);
    return NULL;
}

/* What w does at world size 1: nothing to exchange, but a reduce-scatter or all-gather out
 * of place still copies its one shard. */
static void world_one(struct comm_work *w)
{
    int sharded = w->kind == WORK_REDUCE_SCATTER || w->kind == WORK_ALLGATHER;
    if (sharded && w->count && w->buf != w->out)
        memmove(w->out, w->buf, w->count * vecadd_type(w->dt)->size);
}

/* Queues w (or finishes it at once for world size 1); returns the sticky error if any. */
static int enqueue(struct comm *c, struct comm_work *w, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    int ret = 0;
    pthread_mutex_lock(&cpu->mu);
    if (cpu->failed) {
        ret = err_set(err, cpu->fail.code, "%s", cpu->fail.msg);
        pthread_mutex_unlock(&cpu->mu);
        free(w);
        return ret;
    }
    w->all_next = cpu->all;
    if (cpu->all)
        cpu->all->all_prev = w;
    cpu->all = w;
    if (c->world_size == 1) {
        world_one(w);
        w->done = 1;
    } else {
        if (cpu->tail)
            cpu->tail->next = w;
        else
            cpu->head = w;
        cpu->tail = w;
        pthread_cond_signal(&cpu->cv_work);
    }
    pthread_mutex_unlock(&cpu->mu);
    return 0;
}

static int cpu_wait(struct comm *c, struct comm_work *w, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    if (!w)
        return err_set(err, DDP_EINVAL, "comm_wait: NULL work");
    pthread_mutex_lock(&cpu->mu);
    while (!w->done)
        pthread_cond_wait(&cpu->cv_done, &cpu->mu);
    int ret = w->status;
    if (ret < 0)
        err_set(err, ret, "%s", w->err.msg);
    if (w->all_prev)
        w->all_prev->all_next = w->all_next;
    else
        cpu->all = w->all_next;
    if (w->all_next)
        w->all_next->all_prev = w->all_prev;
    pthread_mutex_unlock(&cpu->mu);
    free(w);
    return ret;
}

static int cpu_allreduce_async(struct comm *c, void *buf, size_t count, enum comm_dtype dt,
                               struct comm_work **out, struct ddp_err *err)
{
    struct comm_work *w = xcalloc(1, sizeof(*w));
    w->kind = WORK_ALLREDUCE;
    w->buf = buf;
    w->count = count;
    w->dt = dt;
    int ret = enqueue(c, w, err);
    if (ret == 0)
        *out = w;
    return ret;
}

/* Ends what a caller ran on its own thread after setting `busy`: a failure (ret < 0, e)
 * aborts the ring and becomes the comm's sticky error. */
static void end_inline(struct comm *c, int ret, const struct ddp_err *e)
{
    struct cpu *cpu = c->impl;
    if (ret < 0)
        fault_abort_ring(c, e);
    pthread_mutex_lock(&cpu->mu);
    cpu->busy = 0;
    if (ret < 0) {
        cpu->failed = 1;
        cpu->fail = *e;
    }
    pthread_mutex_unlock(&cpu->mu);
}

/* Runs w to completion: on this thread when the comm thread is idle with nothing queued,
 * else through the queue. Frees w. */
static int run_blocking(struct comm *c, struct comm_work *w, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    if (c->world_size == 1) {
        world_one(w);
        free(w);
        return 0;
    }
    pthread_mutex_lock(&cpu->mu);
    int inline_ok = !cpu->failed && !cpu->stop && !cpu->busy && !cpu->head;
    if (inline_ok)
        cpu->busy = 1;
    pthread_mutex_unlock(&cpu->mu);
    if (!inline_ok) {
        int ret = enqueue(c, w, err);
        if (ret < 0)
            return ret;
        return cpu_wait(c, w, err);
    }
    struct ddp_err e;
    err_clear(&e);
    int ret = run_work(c, w, &e);
    end_inline(c, ret, &e);
    free(w);
    if (ret < 0)
        err_set(err, ret, "%s", e.msg);
    return ret;
}

static int cpu_allreduce(struct comm *c, void *buf, size_t count, enum comm_dtype dt,
                         struct ddp_err *err)
{
    struct comm_work *w = xcalloc(1, sizeof(*w));
    w->kind = WORK_ALLREDUCE;
    w->buf = buf;
    w->count = count;
    w->dt = dt;
    return run_blocking(c, w, err);
}

static struct comm_work *sharded_work(enum work_kind kind, const void *in, void *out, size_t count,
                                      enum comm_dtype dt)
{
    struct comm_work *w = xcalloc(1, sizeof(*w));
    w->kind = kind;
    w->buf = (void *)in; /* only read (comm.h) */
    w->out = out;
    w->count = count;
    w->dt = dt;
    return w;
}

static int cpu_reduce_scatter_async(struct comm *c, const void *in, void *out, size_t count,
                                    enum comm_dtype dt, struct comm_work **out_work,
                                    struct ddp_err *err)
{
    struct comm_work *w = sharded_work(WORK_REDUCE_SCATTER, in, out, count, dt);
    int ret = enqueue(c, w, err);
    if (ret == 0)
        *out_work = w;
    return ret;
}

static int cpu_allgather_async(struct comm *c, const void *in, void *out, size_t count,
                               enum comm_dtype dt, struct comm_work **out_work, struct ddp_err *err)
{
    struct comm_work *w = sharded_work(WORK_ALLGATHER, in, out, count, dt);
    int ret = enqueue(c, w, err);
    if (ret == 0)
        *out_work = w;
    return ret;
}

static int cpu_reduce_scatter(struct comm *c, const void *in, void *out, size_t count,
                              enum comm_dtype dt, struct ddp_err *err)
{
    return run_blocking(c, sharded_work(WORK_REDUCE_SCATTER, in, out, count, dt), err);
}

static int cpu_allgather(struct comm *c, const void *in, void *out, size_t count,
                         enum comm_dtype dt, struct ddp_err *err)
{
    return run_blocking(c, sharded_work(WORK_ALLGATHER, in, out, count, dt), err);
}

static int cpu_broadcast(struct comm *c, void *buf, size_t bytes, int root, struct ddp_err *err)
{
    struct comm_work *w = xcalloc(1, sizeof(*w));
    w->kind = WORK_BROADCAST;
    w->buf = buf;
    w->bytes = bytes;
    w->root = root;
    return run_blocking(c, w, err);
}

static int cpu_barrier(struct comm *c, struct ddp_err *err)
{
    struct comm_work *w = xcalloc(1, sizeof(*w));
    w->kind = WORK_BARRIER;
    return run_blocking(c, w, err);
}

static void cpu_destroy(struct comm *c)
{
    struct cpu *cpu = c->impl;
    if (!cpu)
        return;
    if (cpu->thread_started) {
        pthread_mutex_lock(&cpu->mu);
        cpu->stop = 1;
        /* A collective in flight would only end at its timeout: cut it short. */
        if (cpu->busy || cpu->head) {
            if (cpu->has_ring) {
                shutdown(cpu->send_fd, SHUT_RDWR);
                shutdown(cpu->recv_fd, SHUT_RDWR);
                for (int i = 0; cpu->rd_fd && i < cpu->rworld; i++)
                    if (cpu->rd_fd[i] >= 0)
                        shutdown(cpu->rd_fd[i], SHUT_RDWR);
            }
            struct ddp_err e;
            err_set(&e, DDP_EPEER, "peer rank %d closed its comm during a collective", c->rank);
            shm_abort(cpu->shm, &e, c->rank);
        }
        pthread_cond_signal(&cpu->cv_work);
        pthread_mutex_unlock(&cpu->mu);
        pthread_join(cpu->thread, NULL);
    }
    while (cpu->all) {
        struct comm_work *w = cpu->all;
        cpu->all = w->all_next;
        free(w);
    }
    if (cpu->send_fd >= 0)
        close(cpu->send_fd);
    if (cpu->recv_fd >= 0)
        close(cpu->recv_fd);
    free(cpu->stage);
    free(cpu->scratch);
    for (int i = 0; cpu->rd_fd && i < cpu->rworld; i++)
        if (cpu->rd_fd[i] >= 0)
            close(cpu->rd_fd[i]);
    free(cpu->rd_fd);
    free(cpu->rd_tmp);
    shm_group_close(cpu->shm);
    free(cpu->ring_global);
    free(cpu->host_of);
    free(cpu->local_of);
    pthread_cond_destroy(&cpu->cv_work);
    pthread_cond_destroy(&cpu->cv_done);
    pthread_mutex_destroy(&cpu->mu);
    free(cpu);
    c->impl = NULL;
}

/* Chooses the transport from the layout and sets up the shared memory and the ring. */
static int setup_transport(struct comm *c, struct rdzv *r, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    int W = c->world_size, ret = 0, nhosts = W;
    int *members = NULL;
    /* Sub-groups made by one creation on every rank share the store's id: the tag keeps their
     * keys and segments apart. */
    uint64_t id = rdzv_next_id(r) | (uint64_t)c->opts.group_tag << 32;
    cpu->rrank = c->rank;
    cpu->rworld = W;
    cpu->mode = MODE_TCP;
    if (!c->opts.force_tcp) {
        if ((ret = topo_map_hosts(c, r, id, &cpu->host_of, &cpu->local_of, &nhosts, err)) < 0)
            goto out;
        cpu->mode = nhosts == W ? MODE_TCP : nhosts == 1 ? MODE_SHM : MODE_HIER;
    }
    if (cpu->mode != MODE_TCP) {
        int me = cpu->host_of[c->rank], L = 0;
        members = xcalloc((size_t)W, sizeof(int));
        for (int q = 0; q < W; q++)
            if (cpu->host_of[q] == me)
                members[L++] = q;
        struct shm_setup su = {.r = r,
                               .comm_id = id,
                               .host = me,
                               .members = members,
                               .nmembers = L,
                               .local_rank = cpu->local_of[c->rank],
                               .world_size = W,
                               .timeout_ms = c->opts.timeout_ms,
                               .piece_bytes = c->opts.chunk_bytes,
                               .small_bytes = c->opts.small_bytes};
        if ((ret = shm_group_open(&su, &cpu->shm, err)) < 0)
            goto out;
    }
    if (cpu->mode == MODE_HIER) {
        cpu->ring_global = xcalloc((size_t)nhosts, sizeof(int));
        for (int q = W - 1; q >= 0; q--)
            cpu->ring_global[cpu->host_of[q]] = q;
        cpu->rworld = nhosts;
        cpu->rrank = cpu->host_of[c->rank];
        cpu->has_ring = cpu->local_of[c->rank] == 0;
    } else {
        cpu->has_ring = cpu->mode == MODE_TCP;
    }
    log_debug("comm: rank %d: %s transport, %d host(s)", c->rank,
              cpu->mode == MODE_TCP   ? "tcp ring"
              : cpu->mode == MODE_SHM ? "shared-memory"
                                      : "hierarchical",
              nhosts);
    if (cpu->has_ring) {
        cpu->right = (cpu->rrank + 1) % cpu->rworld;
        cpu->left = (cpu->rrank + cpu->rworld - 1) % cpu->rworld;
        if ((ret = ring_connect(c, r, id, err)) < 0)
            goto out;
        if (c->opts.small_bytes != 1 && (ret = rd_connect(c, r, id, err)) < 0)
            goto out;
    }
out:
    free(members);
    return ret;
}

static int cpu_init(struct comm *c, struct rdzv *r, struct ddp_err *err)
{
    int ret = 0;
    struct cpu *cpu = xcalloc(1, sizeof(*cpu));
    cpu->send_fd = cpu->recv_fd = -1;
    cpu->notice = fault_notice(-1, FAULT_LOST);
    cpu->wait_peer = -1;
    pthread_mutex_init(&cpu->mu, NULL);
    pthread_cond_init(&cpu->cv_work, NULL);
    pthread_cond_init(&cpu->cv_done, NULL);
    c->impl = cpu;
    if (c->world_size == 1) {
        if (r)
            (void)rdzv_next_id(r); /* the other sub-groups of this creation count one */
        return 0;
    }
    if (c->world_size > 65535) {
        ret = err_set(err, DDP_EINVAL, "cpu backend: world size %d is over 65535", c->world_size);
        goto out;
    }
    size_t chunk = c->opts.chunk_bytes ? c->opts.chunk_bytes : COMM_DEFAULT_CHUNK_BYTES;
    chunk &= ~(size_t)7;
    if (chunk < 8)
        chunk = 8;
    if (chunk > (size_t)64 << 20)
        chunk = (size_t)64 << 20;
    cpu->chunk = chunk;
    cpu->stage = xmalloc(chunk);
    if ((ret = setup_transport(c, r, err)) < 0)
        goto out;
    if (pthread_create(&cpu->thread, NULL, comm_thread, c) != 0) {
        ret = err_set(err, DDP_EINTERNAL, "cannot start the comm thread");
        goto out;
    }
    cpu->thread_started = 1;
out:
    return ret;
}

/* Which transport init chose: "tcp", "shm" or "hier" (tests, logs). */
const char *comm_cpu_transport(const struct comm *c)
{
    const struct cpu *cpu = c->impl;
    if (!cpu || c->world_size == 1)
        return "none";
    return cpu->mode == MODE_TCP ? "tcp" : cpu->mode == MODE_SHM ? "shm" : "hier";
}

/* The shared-memory segment's name, or NULL when this comm has none (tests). */
const char *comm_cpu_shm_name(const struct comm *c)
{
    const struct cpu *cpu = c->impl;
    return cpu && cpu->shm ? shm_group_name(cpu->shm) : NULL;
}

/* A registered buffer in this host's shared segment (shm_region_alloc), where the ranks
 * share one: run on the caller's thread like an inline blocking collective (it broadcasts
 * through the segment), so it needs the comm idle. */
static int cpu_alloc_buffer(struct comm *c, size_t bytes, void **out, struct ddp_err *err)
{
    struct cpu *cpu = c->impl;
    if (c->world_size == 1 || !cpu->shm)
        return 0;
    pthread_mutex_lock(&cpu->mu);
    int idle = !cpu->busy && !cpu->head;
    int failed = cpu->failed;
    struct ddp_err fe = cpu->fail;
    if (idle && !failed)
        cpu->busy = 1;
    pthread_mutex_unlock(&cpu->mu);
    if (failed) {
        *err = fe;
        return fe.code < 0 ? fe.code : DDP_EINTERNAL;
    }
    if (!idle)
        return err_set(err, DDP_EINTERNAL,
                       "comm: buffer allocation while a collective is in flight");
    struct ddp_err e;
    err_clear(&e);
    int ret = shm_region_alloc(cpu->shm, bytes, out, &e);
    end_inline(c, ret, &e);
    if (ret < 0)
        *err = e;
    return ret;
}

static int cpu_free_buffer(struct comm *c, void *p)
{
    struct cpu *cpu = c->impl;
    return cpu ? shm_region_free(cpu->shm, p) : 0;
}

const struct comm_ops comm_cpu_ops = {
    .name = "cpu",
    .init = cpu_init,
    .allreduce_async = cpu_allreduce_async,
    .allreduce = cpu_allreduce,
    .wait = cpu_wait,
    .broadcast = cpu_broadcast,
    .barrier = cpu_barrier,
    .destroy = cpu_destroy,
    .alloc_buffer = cpu_alloc_buffer,
    .free_buffer = cpu_free_buffer,
    .reduce_scatter_async = cpu_reduce_scatter_async,
    .allgather_async = cpu_allgather_async,
    .reduce_scatter = cpu_reduce_scatter,
    .allgather = cpu_allgather,
};
