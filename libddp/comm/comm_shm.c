/*
 * comm_shm.c - the shared-memory transport between the ranks of one host (see comm_shm.h).
 *
 * Segment: one per comm (job generation and comm id) and host, named
 * "/ddp-<uid>-<hash>" where hash covers DDP_JOB_ID, DDP_GENERATION, the store's
 * MASTER_ADDR:PORT, the world size, the comm id and this host's member ranks, so two jobs
 * (or two hosts of one job in different network namespaces) never meet; mode 0600. The
 * leader (local rank 0) unlinks a stale segment of that name (and of the 8 generations
 * before) left by a crash, creates it,
 * writes a random token in the header and publishes it in the store; members attach and
 * check the token; the leader unlinks the name once all L have attached (the mapping lives
 * on until the last rank unmaps).
 *
 * Layout: header (magic, token, L, piece size, attach count, abort word and message), one
 * control block per member (its counters arrive/reduced/done, a waiter count, pid, gone
 * flag, and the description of its current collective per buffer), then one slot per member
 * of SHM_NBUF buffers of `piece` bytes each.
 *
 * Rounds: a message is cut into pieces; round number R (a per-group counter that is the
 * same on every member) uses buffer R % SHM_NBUF of every slot. Before writing it a rank
 * waits until every member's `done` reached R - SHM_NBUF (the buffer is free), so a rank
 * can run up to SHM_NBUF rounds ahead of the slowest (measured: 4 beats 2 when ranks share
 * cores). Large pieces: copy in (all but
 * the own 1/L slice, 64-byte aligned), post arrive=R, wait all arrive>=R, sum the own slice
 * of the own buffer and the L-1 other slots into the own slot, post reduced=R, wait all
 * reduced>=R, copy every slice out, post done=R - each byte is streamed once in the reduce,
 * the piece stays in cache. Small messages (<= small)
 * take one round where every rank sums all slots itself in rank order (one sync point,
 * results bit-identical on all ranks). Counters only grow, so a rank that does not post a
 * counter in some round (broadcast receivers' arrive) never blocks a later wait.
 *
 * Waiting: a spin of 2 us (none when the members outnumber this process's cores: the
 * spinner would hold the core the awaited rank needs), yields up to 10 us, then FUTEX_WAIT on
 * the counter with a 10 ms timeout; between sleeps it checks the abort word, the awaited rank's gone flag, and every
 * 50 ms every member's pid (/proc/<pid>/stat: gone or zombie = dead). A poster wakes the
 * futex only when the rank's waiter count is non-zero (both sides seq_cst, so no lost
 * wake-up). A wait ends after timeout_ms without the awaited rank's counter or heartbeat
 * moving, with DDP_ETIMEOUT naming it.
 */
#include "libddp/comm/comm_shm.h"
#include "libddp/comm/vecadd.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <linux/futex.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include "common/log.h"
#include "common/randutil.h"
#include "common/timeutil.h"
#include "common/xalloc.h"

#define SHM_MAGIC 0x444450534d454d31ull /* "DDPSMEM1" */
#define SHM_ABORT_MSG_MAX 256
#define SHM_SPIN_NS 2000   /* spin with pause this long ... */
#define SHM_YIELD_NS 10000 /* ... then yield until this long, then sleep on the futex */
#define SHM_SLEEP_NS (10 * 1000 * 1000)
#define SHM_LIVENESS_MS 50
/* Pieces in flight per slot: a rank may run this many rounds ahead of the slowest. */
#define SHM_NBUF 4

struct shm_desc {
    uint64_t seq;
    uint32_t kind;
    uint32_t pad;
    uint64_t bytes;
    uint64_t roff; /* registered all-reduce: the offset in every rank's region; else ~0 */
};

struct shm_ctl {
    _Atomic uint32_t ctr[3]; /* arrive, reduced, done */
    _Atomic uint32_t waiters;
    _Atomic int32_t pid;
    _Atomic uint32_t gone;
    _Atomic uint32_t beat; /* bumped while the rank makes progress elsewhere (the ring) */
    uint32_t pad0;
    struct shm_desc desc[SHM_NBUF];
    char pad[64 - (8 * 4 + SHM_NBUF * sizeof(struct shm_desc)) % 64];
};

enum { C_ARRIVE = 0, C_REDUCED = 1, C_DONE = 2 };

struct shm_hdr {
    uint64_t magic;
    uint64_t token;
    uint32_t nmembers;
    uint32_t pad;
    uint64_t piece;
    _Atomic uint32_t attached;
    _Atomic uint32_t abort; /* 0, or 1 + the local rank that recorded abort_msg */
    int32_t abort_code;     /* the DDP_E* of the first failure */
    int32_t abort_rank;     /* the global rank at fault, -1 unknown */
    char abort_msg[SHM_ABORT_MSG_MAX];
    char pad2[64 - (8 + 8 + 8 + 8 + 8 + 8 + SHM_ABORT_MSG_MAX) % 64];
};

/* A registered buffer segment (shm_region_alloc): a header page, then one part of
 * `stride` bytes per member; member k's part starts at base + SHM_REGION_HDR + k * stride. */
#define SHM_MAX_REGIONS 8
#define SHM_REGION_HDR 4096
#define SHM_REG_PIECE_FACTOR 16 /* registered all-reduces: pieces of 16 slot pieces */
#define SHM_REGION_MAGIC 0x444450534d524731ull /* "DDPSMRG1" */
#define SHM_KIND_REGION 0x52454731u            /* the broadcast that announces a region */

struct shm_region_hdr {
    uint64_t magic;
    uint64_t token;
    uint64_t stride;
    uint32_t nmembers;
    _Atomic uint32_t attached;
};

struct shm_region {
    char *base;
    size_t map_bytes, stride, bytes;
};

struct shm_group {
    char name[64];
    int leader, lr, L;
    int *members;
    int64_t timeout_ms;
    size_t piece, small;
    void *base;
    size_t map_bytes;
    struct shm_hdr *hdr;
    struct shm_ctl *ctl;
    char *slots;
    uint32_t round;
    int fault, fault_silent; /* the rank the last error of this rank blamed, -1 none */
    int unlinked;
    int64_t last_liveness;
    int64_t spin_ns; /* wait: spin this long before yielding (0 when oversubscribed) */
    struct shm_region regions[SHM_MAX_REGIONS];
    int nregions;
    uint32_t nalloc; /* regions allocated so far (names the next one) */
};

static char *slot(struct shm_group *g, int k, int buf)
{
    return g->slots + ((size_t)k * SHM_NBUF + (size_t)buf) * g->piece;
}

static long sys_futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

static void post(struct shm_group *g, int which, uint32_t round)
{
    struct shm_ctl *me = &g->ctl[g->lr];
    atomic_store(&me->ctr[which], round);
    if (atomic_load(&me->waiters) > 0)
        sys_futex(&me->ctr[which], FUTEX_WAKE, INT_MAX, NULL);
}

static int reached(uint32_t v, uint32_t round)
{
    return (int32_t)(v - round) >= 0;
}

/* 1 when pid is gone or a zombie. */
static int pid_dead(int32_t pid)
{
    if (pid <= 0)
        return 0;
    char path[64], buf[256];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return errno == ENOENT;
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (n <= 0)
        return 0;
    buf[n] = '\0';
    const char *rp = strrchr(buf, ')');
    return rp && rp[1] == ' ' && (rp[2] == 'Z' || rp[2] == 'X');
}

static int abort_error(struct shm_group *g, struct ddp_err *err)
{
    uint32_t a = atomic_load(&g->hdr->abort);
    char msg[SHM_ABORT_MSG_MAX];
    memcpy(msg, g->hdr->abort_msg, sizeof(msg));
    msg[sizeof(msg) - 1] = '\0';
    int by = (int)a - 1;
    int code = g->hdr->abort_code == DDP_ETIMEOUT ? DDP_ETIMEOUT : DDP_EPEER;
    g->fault = g->hdr->abort_rank;
    g->fault_silent = code == DDP_ETIMEOUT;
    return err_set(err, code, "%s (reported by rank %d over shared memory)", msg,
                   by >= 0 && by < g->L ? g->members[by] : -1);
}

void shm_heartbeat(struct shm_group *g)
{
    if (g)
        atomic_fetch_add_explicit(&g->ctl[g->lr].beat, 1, memory_order_relaxed);
}

int shm_fault(const struct shm_group *g, int *silent)
{
    if (!g)
        return -1;
    *silent = g->fault_silent;
    return g->fault;
}

void shm_abort(struct shm_group *g, const struct ddp_err *e, int fault)
{
    if (!g)
        return;
    uint32_t zero = 0;
    /* Claim the abort word with a marker, write the message, then publish who wrote it. */
    if (!atomic_compare_exchange_strong(&g->hdr->abort, &zero, UINT32_MAX))
        return;
    size_t ml = strnlen(e->msg, sizeof(g->hdr->abort_msg) - 1);
    memcpy(g->hdr->abort_msg, e->msg, ml);
    g->hdr->abort_msg[ml] = '\0';
    g->hdr->abort_code = e->code;
    g->hdr->abort_rank = fault;
    atomic_store(&g->hdr->abort, (uint32_t)g->lr + 1);
    for (int k = 0; k < g->L; k++)
        for (int w = 0; w < 3; w++)
            sys_futex(&g->ctl[k].ctr[w], FUTEX_WAKE, INT_MAX, NULL);
}

/* Checks the abort word and whether member `waited` closed its comm or died (its pid
 * gone or a zombie, read every SHM_LIVENESS_MS); returns 0 or the error naming it. Other
 * members are not checked: one that finished and left is no error, and one that died is
 * found by whoever waits on it, which then aborts the group. */
static int check_peers(struct shm_group *g, int waited, const char *what, struct ddp_err *err)
{
    uint32_t a = atomic_load(&g->hdr->abort);
    if (a != 0 && a != UINT32_MAX)
        return abort_error(g, err);
    if (atomic_load(&g->ctl[waited].gone)) {
        g->fault = g->members[waited];
        g->fault_silent = 0;
        return err_set(err, DDP_EPEER,
                       "peer rank %d (same host) lost during %s: it closed its comm",
                       g->members[waited], what);
    }
    int64_t now = time_mono_ms();
    if (now - g->last_liveness < SHM_LIVENESS_MS)
        return 0;
    g->last_liveness = now;
    int32_t pid = atomic_load(&g->ctl[waited].pid);
    if (pid_dead(pid)) {
        g->fault = g->members[waited];
        g->fault_silent = 0;
        return err_set(err, DDP_EPEER,
                       "peer rank %d (same host, pid %d) lost during %s: process gone",
                       g->members[waited], (int)pid, what);
    }
    return 0;
}

/* Waits until member k's counter `which` reached round. */
static int wait_one(struct shm_group *g, int k, int which, uint32_t round, const char *what,
                    struct ddp_err *err)
{
    struct shm_ctl *c = &g->ctl[k];
    int64_t t0 = time_mono_ns();
    for (int i = 0;; i++) {
        if (reached(atomic_load_explicit(&c->ctr[which], memory_order_acquire), round))
            return 0;
#if defined(__x86_64__) || defined(__i386__)
        __builtin_ia32_pause();
#endif
        if ((i & 15) == 15 && time_mono_ns() - t0 >= g->spin_ns)
            break;
    }
    for (;;) {
        sched_yield();
        if (reached(atomic_load_explicit(&c->ctr[which], memory_order_acquire), round))
            return 0;
        if (time_mono_ns() - t0 >= SHM_YIELD_NS)
            break;
    }
    /* Inactivity, not total time: the awaited rank's beat moving (a leader busy in the
     * leaders' ring) restarts the clock. */
    int64_t deadline = time_mono_ms() + g->timeout_ms;
    uint32_t beat = atomic_load_explicit(&c->beat, memory_order_relaxed);
    for (;;) {
        atomic_fetch_add(&c->waiters, 1);
        uint32_t v = atomic_load(&c->ctr[which]);
        if (!reached(v, round)) {
            struct timespec ts = {0, SHM_SLEEP_NS};
            sys_futex(&c->ctr[which], FUTEX_WAIT, v, &ts);
        }
        atomic_fetch_sub(&c->waiters, 1);
        if (reached(atomic_load_explicit(&c->ctr[which], memory_order_acquire), round))
            return 0;
        int ret = check_peers(g, k, what, err);
        if (ret < 0)
            return ret;
        uint32_t nb = atomic_load_explicit(&c->beat, memory_order_relaxed);
        if (nb != beat) {
            beat = nb;
            deadline = time_mono_ms() + g->timeout_ms;
        }
        if (time_mono_ms() >= deadline) {
            g->fault = g->members[k];
            g->fault_silent = 1;
            return err_set(err, DDP_ETIMEOUT,
                           "peer rank %d (same host) silent for %" PRId64 " ms during %s",
                           g->members[k], g->timeout_ms, what);
        }
    }
}

static int wait_all(struct shm_group *g, int which, uint32_t round, const char *what,
                    struct ddp_err *err)
{
    for (int k = 0; k < g->L; k++) {
        if (k == g->lr)
            continue;
        int ret = wait_one(g, k, which, round, what, err);
        if (ret < 0)
            return ret;
    }
    return 0;
}

static int check_desc(struct shm_group *g, int k, int half, const struct shm_desc *mine,
                      struct ddp_err *err)
{
    const struct shm_desc *d = &g->ctl[k].desc[half];
    if (d->seq == mine->seq && d->kind == mine->kind && d->bytes == mine->bytes &&
        d->roff == mine->roff)
        return 0;
    if (d->seq == mine->seq && d->kind == mine->kind && d->bytes == mine->bytes)
        return err_set(err, DDP_EINTERNAL,
                       "collective mismatch with rank %d (same host): in all-reduce seq %" PRIu64
                       " it reduces %s, this rank %s",
                       g->members[k], mine->seq,
                       d->roff == UINT64_MAX ? "a private buffer" : "a registered range",
                       mine->roff == UINT64_MAX ? "a private buffer"
                       : d->roff == UINT64_MAX  ? "a registered range"
                                                : "a registered range at another offset");
    return err_set(err, DDP_EINTERNAL,
                   "collective mismatch with rank %d (same host): it issued kind %u seq %" PRIu64
                   " of %" PRIu64 " bytes, this rank kind %u seq %" PRIu64 " of %" PRIu64
                   " bytes",
                   g->members[k], d->kind, d->seq, d->bytes, mine->kind, mine->seq,
                   mine->bytes);
}

/* Member k's slice [*off, *off + *len) of an n-byte piece: 64-byte aligned boundaries. */
static void slice(size_t n, int L, int k, size_t *off, size_t *len)
{
    size_t lines = (n + 63) / 64;
    size_t base = lines / (size_t)L, rem = lines % (size_t)L, uk = (size_t)k;
    size_t a = (uk * base + (uk < rem ? uk : rem)) * 64;
    size_t b = a + (base + (uk < rem ? 1 : 0)) * 64;
    if (a > n)
        a = n;
    if (b > n)
        b = n;
    *off = a;
    *len = b - a;
}

/* Starts round R: waits until this rank's buffer is free, then records the description. */
static int round_begin(struct shm_group *g, uint32_t *round, int *half,
                       const struct shm_desc *d, const char *what, struct ddp_err *err)
{
    uint32_t r = ++g->round;
    int h = (int)(r % SHM_NBUF);
    if (r > SHM_NBUF) {
        int ret = wait_all(g, C_DONE, r - SHM_NBUF, what, err);
        if (ret < 0)
            return ret;
    }
    g->ctl[g->lr].desc[h] = *d;
    *round = r;
    *half = h;
    return 0;
}

/* Member k's data of the piece at off: its slot h, or its part of region rg at roff. */
static char *piece_of(struct shm_group *g, const struct shm_region *rg, size_t roff, int k,
                      int h, size_t off)
{
    return rg ? rg->base + SHM_REGION_HDR + (size_t)k * rg->stride + roff + off : slot(g, k, h);
}

/* Where buf..buf+bytes lies inside this rank's part of a region: that region, with *roff
 * the offset in the part; else NULL. */
static const struct shm_region *region_of(const struct shm_group *g, const void *buf,
                                          size_t bytes, size_t *roff)
{
    const char *b = buf;
    for (int i = 0; i < g->nregions; i++) {
        const struct shm_region *rg = &g->regions[i];
        const char *mine = rg->base + SHM_REGION_HDR + (size_t)g->lr * rg->stride;
        if (b >= mine && b < mine + rg->bytes && bytes <= rg->bytes - (size_t)(b - mine)) {
            *roff = (size_t)(b - mine);
            return rg;
        }
    }
    return NULL;
}

int shm_allreduce(struct shm_group *g, void *buf, size_t count, enum comm_dtype dt,
                  int to_leader_only, uint64_t seq, int kind, struct ddp_err *err)
{
    const char *what = kind == 3 ? "barrier" : "all-reduce";
    const struct vecadd_type *t = vecadd_type(dt);
    size_t bytes = count * t->size;
    if (g->L == 1 || bytes == 0)
        return 0;
    g->fault = -1;
    int gets = !to_leader_only || g->lr == 0;
    int oneshot = bytes <= g->small;
    /* A registered buffer: the others read this rank's data where it lies (no copy in),
     * the own slice is reduced in place and read from there (no copy out of it). */
    size_t roff = 0;
    const struct shm_region *rg = oneshot ? NULL : region_of(g, buf, bytes, &roff);
    struct shm_desc d = {.seq = seq, .kind = (uint32_t)kind, .bytes = bytes,
                         .roff = rg ? roff : UINT64_MAX};
    char *p = buf;
    /* Registered data needs no staging slot, so its pieces are larger: fewer sync points
     * (measured: 4 MiB pieces 1.3-2.5x faster than 256 KiB ones from 1 to 64 MiB). */
    size_t piece = rg ? g->piece * SHM_REG_PIECE_FACTOR : g->piece;
    for (size_t off = 0; off < bytes;) {
        size_t n = bytes - off < piece ? bytes - off : piece;
        uint32_t r;
        int h, ret;
        if ((ret = round_begin(g, &r, &h, &d, what, err)) < 0)
            return ret;
        size_t so = 0, sl = 0;
        if (oneshot) {
            memcpy(slot(g, g->lr, h), p + off, n);
        } else if (!rg) {
            /* The others read every slice of this slot but this rank's own, which it
             * reduces straight from its buffer. */
            slice(n, g->L, g->lr, &so, &sl);
            memcpy(slot(g, g->lr, h), p + off, so);
            memcpy(slot(g, g->lr, h) + so + sl, p + off + so + sl, n - so - sl);
        } else {
            slice(n, g->L, g->lr, &so, &sl);
        }
        post(g, C_ARRIVE, r);
        for (int k = 0; k < g->L; k++) {
            if (k == g->lr)
                continue;
            if ((ret = wait_one(g, k, C_ARRIVE, r, what, err)) < 0 ||
                (ret = check_desc(g, k, h, &d, err)) < 0)
                return ret;
        }
        if (oneshot) {
            if (gets) {
                memcpy(p + off, slot(g, 0, h), n);
                for (int k = 1; k < g->L; k++)
                    t->add(p + off, slot(g, k, h), n / t->size);
            }
        } else {
            char *mine = rg ? p + off + so : slot(g, g->lr, h) + so;
            int first = 1;
            for (int k = 0; k < g->L && sl; k++) {
                if (k == g->lr)
                    continue;
                if (rg)
                    t->add(mine, piece_of(g, rg, roff, k, h, off) + so, sl / t->size);
                else if (first)
                    t->add2(mine, p + off + so, piece_of(g, rg, roff, k, h, off) + so,
                            sl / t->size);
                else
                    t->add(mine, piece_of(g, rg, roff, k, h, off) + so, sl / t->size);
                first = 0;
            }
            post(g, C_REDUCED, r);
            if (gets) {
                if (sl && !rg)
                    memcpy(p + off + so, mine, sl);
                for (int k = 0; k < g->L; k++) {
                    if (k == g->lr)
                        continue;
                    if ((ret = wait_one(g, k, C_REDUCED, r, what, err)) < 0)
                        return ret;
                    slice(n, g->L, k, &so, &sl);
                    if (sl)
                        memcpy(p + off + so, piece_of(g, rg, roff, k, h, off) + so, sl);
                }
            }
        }
        post(g, C_DONE, r);
        off += n;
    }
    /* The others read this rank's part until their last piece is done: only then may the
     * caller write it again. */
    if (rg)
        return wait_all(g, C_DONE, g->round, what, err);
    return 0;
}

int shm_broadcast(struct shm_group *g, void *buf, size_t bytes, int root_local, uint64_t seq,
                  int kind, struct ddp_err *err)
{
    if (g->L == 1 || bytes == 0)
        return 0;
    g->fault = -1;
    struct shm_desc d = {.seq = seq, .kind = (uint32_t)kind, .bytes = bytes, .roff = UINT64_MAX};
    char *p = buf;
    for (size_t off = 0; off < bytes;) {
        size_t n = bytes - off < g->piece ? bytes - off : g->piece;
        uint32_t r;
        int h, ret;
        if ((ret = round_begin(g, &r, &h, &d, "broadcast", err)) < 0)
            return ret;
        if (g->lr == root_local) {
            memcpy(slot(g, g->lr, h), p + off, n);
            post(g, C_ARRIVE, r);
        } else {
            if ((ret = wait_one(g, root_local, C_ARRIVE, r, "broadcast", err)) < 0 ||
                (ret = check_desc(g, root_local, h, &d, err)) < 0)
                return ret;
            memcpy(p + off, slot(g, root_local, h), n);
        }
        post(g, C_DONE, r);
        off += n;
    }
    return 0;
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull;
}

static void name_for(const char *generation, const char *master_host, int master_port,
                     int world_size, uint64_t comm_id, int host, const int *members,
                     int nmembers, char *out, size_t size)
{
    char tmp[64];
    uint64_t h = 0xcbf29ce484222325ull;
    h = fnv_str(h, getenv("DDP_JOB_ID"));
    h = fnv_str(h, generation);
    h = fnv_str(h, master_host);
    snprintf(tmp, sizeof(tmp), "%d/%d/%" PRIu64 "/%d", master_port, world_size, comm_id, host);
    h = fnv_str(h, tmp);
    for (int i = 0; i < nmembers; i++) {
        snprintf(tmp, sizeof(tmp), "%d", members[i]);
        h = fnv_str(h, tmp);
    }
    snprintf(out, size, "/ddp-%u-%016" PRIx64, (unsigned)getuid(), h);
}

void shm_segment_name(const char *master_host, int master_port, int world_size,
                      uint64_t comm_id, int host, const int *members, int nmembers, char *out,
                      size_t size)
{
    name_for(getenv("DDP_GENERATION"), master_host, master_port, world_size, comm_id, host,
             members, nmembers, out, size);
}

/* Unlinks what a crash of this job's last few generations (same store and layout) may have
 * left: the name is gone as soon as all ranks attach, so only a crash during set-up leaves
 * one. Their ranks are gone by the time a later generation starts. */
static void unlink_older_generations(const struct shm_setup *s)
{
    const char *gs = getenv("DDP_GENERATION");
    char *end = NULL;
    if (!gs || !*gs)
        return;
    errno = 0;
    long gen = strtol(gs, &end, 10);
    if (errno || !end || *end || gen <= 0)
        return;
    for (long g = gen - 1; g >= 0 && g >= gen - 8; g--) {
        char gtxt[24], name[64];
        snprintf(gtxt, sizeof(gtxt), "%ld", g);
        name_for(gtxt, rdzv_master_host(s->r), rdzv_master_port(s->r), s->world_size,
                 s->comm_id, s->host, s->members, s->nmembers, name, sizeof(name));
        if (shm_unlink(name) == 0)
            log_warn("comm: removed a shared-memory segment %s left by generation %ld", name,
                     g);
    }
}

const char *shm_group_name(const struct shm_group *g)
{
    return g->name;
}

/* Maps bytes of the shared-memory file fd (named name, for the error) read-write, shared. */
static int map_shared(const char *name, int fd, size_t bytes, void **out, struct ddp_err *err)
{
    void *m = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (m == MAP_FAILED)
        return err_set(err, DDP_EIO, "shared memory %s: mmap of %zu bytes: %s", name, bytes,
                       strerror(errno));
    *out = m;
    return 0;
}

/* Leader: waits until L ranks counted themselves in *attached (bounded by the timeout, ended
 * early by an abort), so the name can be taken away. */
static int wait_attached(struct shm_group *g, _Atomic uint32_t *attached, const char *name,
                         struct ddp_err *err)
{
    int64_t deadline = time_mono_ms() + g->timeout_ms;
    while ((int)atomic_load(attached) < g->L) {
        uint32_t a = g->hdr ? atomic_load(&g->hdr->abort) : 0;
        if (a != 0 && a != UINT32_MAX)
            return abort_error(g, err);
        if (time_mono_ms() >= deadline)
            return err_set(err, DDP_ETIMEOUT,
                           "shared memory %s: only %u of %d same-host ranks attached within "
                           "%" PRId64 " ms",
                           name, atomic_load(attached), g->L, g->timeout_ms);
        time_sleep_ms(1);
    }
    return 0;
}

static int map_segment(struct shm_group *g, int fd, struct ddp_err *err)
{
    void *m = NULL;
    int ret = map_shared(g->name, fd, g->map_bytes, &m, err);
    if (ret < 0)
        return ret;
    g->base = m;
    g->hdr = m;
    g->ctl = (struct shm_ctl *)((char *)m + sizeof(struct shm_hdr));
    g->slots = (char *)(g->ctl + g->L);
    return 0;
}

int shm_group_open(const struct shm_setup *s, struct shm_group **out, struct ddp_err *err)
{
    int ret = 0, fd = -1;
    void *tok = NULL;
    struct shm_group *g = xcalloc(1, sizeof(*g));
    g->L = s->nmembers;
    g->lr = s->local_rank;
    g->leader = s->local_rank == 0;
    g->members = xcalloc((size_t)g->L, sizeof(int));
    memcpy(g->members, s->members, (size_t)g->L * sizeof(int));
    g->timeout_ms = s->timeout_ms > 0 ? s->timeout_ms : 60000;
    size_t piece = s->piece_bytes ? s->piece_bytes : SHM_DEFAULT_PIECE_BYTES;
    piece = (piece + 63) & ~(size_t)63;
    if (piece > (size_t)16 << 20)
        piece = (size_t)16 << 20;
    g->piece = piece;
    g->small = s->small_bytes ? s->small_bytes : SHM_DEFAULT_SMALL_BYTES;
    /* Spinning only pays when every member has a core of its own: otherwise the spinner
     * holds the core the awaited rank needs. */
    cpu_set_t cpus;
    int ncpu = sched_getaffinity(0, sizeof(cpus), &cpus) == 0 ? CPU_COUNT(&cpus) : 1;
    g->spin_ns = ncpu >= g->L ? SHM_SPIN_NS : 0;
    g->map_bytes = sizeof(struct shm_hdr) + (size_t)g->L * sizeof(struct shm_ctl) +
                   (size_t)g->L * SHM_NBUF * piece;
    shm_segment_name(rdzv_master_host(s->r), rdzv_master_port(s->r), s->world_size, s->comm_id,
                     s->host, s->members, s->nmembers, g->name, sizeof(g->name));
    int64_t deadline = time_mono_ms() + g->timeout_ms;
    char key[96];
    snprintf(key, sizeof(key), "comm/%" PRIu64 "/shm/%d", s->comm_id, s->host);
    if (g->leader) {
        if (shm_unlink(g->name) == 0)
            log_warn("comm: removed a stale shared-memory segment %s", g->name);
        unlink_older_generations(s);
        fd = shm_open(g->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            ret = err_set(err, DDP_EIO, "shared memory %s: create: %s", g->name,
                          strerror(errno));
            goto out;
        }
        int fe = 0;
        if (ftruncate(fd, (off_t)g->map_bytes) < 0 ||
            (fe = posix_fallocate(fd, 0, (off_t)g->map_bytes)) != 0) {
            /* Reserved now, or a full /dev/shm would kill a rank with SIGBUS mid-run. */
            ret = err_set(err, DDP_EIO,
                          "shared memory %s: cannot reserve %zu bytes in /dev/shm: %s (make "
                          "/dev/shm larger, or set DDP_COMM_TRANSPORT=tcp)",
                          g->name, g->map_bytes, strerror(fe ? fe : errno));
            goto out;
        }
        if ((ret = map_segment(g, fd, err)) < 0)
            goto out;
        uint64_t token = 0;
        if ((ret = rand_bytes(&token, sizeof(token))) < 0) {
            err_set(err, ret, "cannot read random bytes for the shared-memory token");
            goto out;
        }
        g->hdr->token = token;
        g->hdr->nmembers = (uint32_t)g->L;
        g->hdr->piece = piece;
        atomic_store(&g->ctl[0].pid, (int32_t)getpid());
        atomic_store(&g->hdr->attached, 1);
        atomic_thread_fence(memory_order_seq_cst);
        g->hdr->magic = SHM_MAGIC;
        char val[32];
        int vl = snprintf(val, sizeof(val), "%016" PRIx64, token);
        if ((ret = rdzv_set(s->r, key, val, (size_t)vl, err)) < 0)
            goto out;
        /* Wait for every member to attach, then take the name away. */
        if ((ret = wait_attached(g, &g->hdr->attached, g->name, err)) < 0)
            goto out;
        shm_unlink(g->name);
        g->unlinked = 1;
    } else {
        size_t len = 0;
        int64_t left = deadline - time_mono_ms();
        if ((ret = rdzv_get(s->r, key, left > 0 ? left : 0, &tok, &len, err)) < 0)
            goto out;
        char hex[32];
        uint64_t token = 0;
        if (len >= sizeof(hex)) {
            ret = err_set(err, DDP_EINVAL, "shared memory: malformed token in the store");
            goto out;
        }
        memcpy(hex, tok, len);
        hex[len] = '\0';
        char *end = NULL;
        errno = 0;
        token = strtoull(hex, &end, 16);
        if (errno || !end || *end || len != 16) {
            ret = err_set(err, DDP_EINVAL, "shared memory: malformed token in the store");
            goto out;
        }
        fd = shm_open(g->name, O_RDWR | O_CLOEXEC, 0600);
        if (fd < 0) {
            ret = err_set(err, DDP_EIO, "shared memory %s: attach: %s", g->name,
                          strerror(errno));
            goto out;
        }
        struct stat st;
        if (fstat(fd, &st) < 0 || (size_t)st.st_size != g->map_bytes) {
            ret = err_set(err, DDP_EINVAL, "shared memory %s: unexpected size", g->name);
            goto out;
        }
        if ((ret = map_segment(g, fd, err)) < 0)
            goto out;
        if (g->hdr->magic != SHM_MAGIC || g->hdr->token != token ||
            g->hdr->nmembers != (uint32_t)g->L || g->hdr->piece != piece) {
            ret = err_set(err, DDP_EINVAL,
                          "shared memory %s: not this job's segment (token or layout differ)",
                          g->name);
            goto out;
        }
        atomic_store(&g->ctl[g->lr].pid, (int32_t)getpid());
        atomic_fetch_add(&g->hdr->attached, 1);
    }
    g->last_liveness = time_mono_ms();
    g->fault = -1;
    *out = g;
    g = NULL;
out:
    free(tok);
    if (fd >= 0)
        close(fd);
    shm_group_close(g);
    return ret;
}

/* What the leader tells the members about a new region (through shm_broadcast). */
struct region_msg {
    uint64_t token;    /* 0: no region (the members fall back too) */
    uint64_t stride;
    uint64_t map_bytes;
};

int shm_region_alloc(struct shm_group *g, size_t bytes, void **out, struct ddp_err *err)
{
    *out = NULL;
    if (g->L == 1 || bytes == 0)
        return 0;
    if (g->nregions == SHM_MAX_REGIONS)
        return 0;
    char name[80];
    snprintf(name, sizeof(name), "%s-r%u", g->name, g->nalloc);
    uint64_t seq = UINT64_MAX - g->nalloc;
    g->nalloc++;
    /* Parts 320 bytes apart modulo 4 KiB: at the same offset in two parts, loads of one and
     * stores to the other would otherwise alias (same address bits 0-11) on every line. */
    size_t stride = ((bytes + 4095) & ~(size_t)4095) + 320;
    struct region_msg msg = {0};
    char *base = NULL;
    int fd = -1, ret = 0;
    if (g->leader) {
        size_t map_bytes = SHM_REGION_HDR + (size_t)g->L * stride;
        shm_unlink(name);
        fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            log_info("comm: shared memory %s: create: %s: buffers stay private", name,
                     strerror(errno));
        } else if (ftruncate(fd, (off_t)map_bytes) < 0 ||
                   (errno = posix_fallocate(fd, 0, (off_t)map_bytes)) != 0) {
            /* posix_fallocate reserves the pages: without it a full /dev/shm (64 MiB in
             * many containers) would kill the process with SIGBUS on first touch. */
            log_info("comm: no room for %zu MiB in shared memory (%s): gradient buffers stay "
                     "private, all-reduces copy through the shared slots",
                     map_bytes >> 20, strerror(errno));
            close(fd);
            fd = -1;
            shm_unlink(name);
        } else if ((ret = map_shared(name, fd, map_bytes, (void **)&base, err)) < 0) {
            close(fd);
            shm_unlink(name);
            return ret;
        } else {
            struct shm_region_hdr *rh = (struct shm_region_hdr *)base;
            if ((ret = rand_bytes(&rh->token, sizeof(rh->token))) < 0) {
                err_set(err, ret, "cannot read random bytes for the shared-memory token");
                goto fail;
            }
            rh->token |= 1; /* never 0, which means "no region" */
            rh->stride = stride;
            rh->nmembers = (uint32_t)g->L;
            atomic_store(&rh->attached, 1);
            atomic_thread_fence(memory_order_seq_cst);
            rh->magic = SHM_REGION_MAGIC;
            msg.token = rh->token;
            msg.stride = stride;
            msg.map_bytes = map_bytes;
        }
    }
    if ((ret = shm_broadcast(g, &msg, sizeof(msg), 0, seq, SHM_KIND_REGION, err)) < 0)
        goto fail;
    if (msg.token == 0)
        return 0; /* the leader could not make one: everyone falls back */
    if (!g->leader) {
        fd = shm_open(name, O_RDWR | O_CLOEXEC, 0600);
        struct stat st;
        if (fd < 0) {
            ret = err_set(err, DDP_EIO, "shared memory %s: attach: %s", name, strerror(errno));
            goto fail;
        }
        if (fstat(fd, &st) < 0 || (size_t)st.st_size != msg.map_bytes ||
            msg.stride != stride) {
            ret = err_set(err, DDP_EINVAL, "shared memory %s: unexpected size", name);
            goto fail;
        }
        if ((ret = map_shared(name, fd, msg.map_bytes, (void **)&base, err)) < 0)
            goto fail;
        struct shm_region_hdr *rh = (struct shm_region_hdr *)base;
        if (rh->magic != SHM_REGION_MAGIC || rh->token != msg.token ||
            rh->nmembers != (uint32_t)g->L || rh->stride != stride) {
            ret = err_set(err, DDP_EINVAL,
                          "shared memory %s: not this job's region (token or layout differ)",
                          name);
            goto fail;
        }
        atomic_fetch_add(&rh->attached, 1);
    } else {
        /* Take the name away once everyone has mapped it. */
        struct shm_region_hdr *rh = (struct shm_region_hdr *)base;
        if ((ret = wait_attached(g, &rh->attached, name, err)) < 0)
            goto fail;
        shm_unlink(name);
    }
    close(fd);
    struct shm_region *rg = &g->regions[g->nregions++];
    rg->base = base;
    rg->map_bytes = msg.map_bytes;
    rg->stride = stride;
    rg->bytes = bytes;
    *out = base + SHM_REGION_HDR + (size_t)g->lr * stride;
    return 1;
fail:
    if (base)
        munmap(base, msg.map_bytes ? msg.map_bytes : SHM_REGION_HDR + (size_t)g->L * stride);
    if (fd >= 0)
        close(fd);
    if (g->leader)
        shm_unlink(name);
    return ret;
}

int shm_region_free(struct shm_group *g, void *p)
{
    if (!g || !p)
        return 0;
    for (int i = 0; i < g->nregions; i++) {
        struct shm_region *rg = &g->regions[i];
        if ((char *)p != rg->base + SHM_REGION_HDR + (size_t)g->lr * rg->stride)
            continue;
        munmap(rg->base, rg->map_bytes);
        g->regions[i] = g->regions[--g->nregions];
        return 1;
    }
    return 0;
}

void shm_group_close(struct shm_group *g)
{
    if (!g)
        return;
    if (g->hdr) {
        atomic_store(&g->ctl[g->lr].gone, 1);
        for (int w = 0; w < 3; w++)
            sys_futex(&g->ctl[g->lr].ctr[w], FUTEX_WAKE, INT_MAX, NULL);
    }
    if (g->leader && !g->unlinked)
        shm_unlink(g->name);
    for (int i = 0; i < g->nregions; i++)
        munmap(g->regions[i].base, g->regions[i].map_bytes);
    if (g->base)
        munmap(g->base, g->map_bytes);
    free(g->members);
    free(g);
}
