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
 * This file is the segment and its synchronisation: naming, creating and attaching,
 * posting and waiting on the counters, liveness and abort. The collectives over the slots
 * are in comm_shm_coll.c, the registered buffers in comm_shm_region.c; comm_shm_internal.h
 * is what the three share.
 *
 * Waiting: a spin of 2 us (none when the members outnumber this process's cores: the
 * spinner would hold the core the awaited rank needs), yields up to 10 us, then FUTEX_WAIT on
 * the counter with a 10 ms timeout; between sleeps it checks the abort word, the awaited
 * rank's gone flag, and every 50 ms its pid (proc_state: gone or zombie = dead). A poster wakes the
 * futex only when the rank's waiter count is non-zero (both sides seq_cst, so no lost
 * wake-up). A wait ends after timeout_ms without the awaited rank's counter or heartbeat
 * moving, with DDP_ETIMEOUT naming it.
 */
#include "libddp/comm/comm_shm.h"

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
#include "common/procstat.h"
#include "common/randutil.h"
#include "common/timeutil.h"
#include "common/xalloc.h"
#include "libddp/comm/comm_shm_internal.h"

char *shm_slot(struct shm_group *g, int k, int buf)
{
    return g->slots + ((size_t)k * SHM_NBUF + (size_t)buf) * g->piece;
}

static long sys_futex(_Atomic uint32_t *addr, int op, uint32_t val, const struct timespec *ts)
{
    return syscall(SYS_futex, (uint32_t *)addr, op, val, ts, NULL, 0);
}

void shm_post(struct shm_group *g, int which, uint32_t round)
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

/* 1 when pid is gone or a zombie; 0 also when its state cannot be read. */
static int pid_dead(int32_t pid)
{
    if (pid <= 0)
        return 0;
    char st = proc_state((pid_t)pid);
    return st == 0 || st == 'Z' || st == 'X';
}

static int abort_error(struct shm_group *g, struct ddp_err *err)
{
    uint32_t a = atomic_load(&g->hdr->abort);
    char msg[SHM_ABORT_MSG_MAX];
    memcpy(msg, g->hdr->abort_msg, sizeof(msg));
    msg[sizeof(msg) - 1] = '\0';
    int by = (int)a - 1;
    /* A timeout or a collective mismatch stays what it was; anything else lost the rank. */
    int code = g->hdr->abort_code;
    if (code != DDP_ETIMEOUT && code != DDP_EINTERNAL)
        code = DDP_EPEER;
    g->fault = g->hdr->abort_rank;
    g->fault_code = code;
    return err_set(err, code, "%s (reported by rank %d over shared memory)", msg,
                   by >= 0 && by < g->L ? g->members[by] : -1);
}

void shm_heartbeat(struct shm_group *g)
{
    if (g)
        atomic_fetch_add_explicit(&g->ctl[g->lr].beat, 1, memory_order_relaxed);
}

int shm_fault(const struct shm_group *g, int *code)
{
    if (!g)
        return -1;
    *code = g->fault_code;
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
        g->fault_code = DDP_EPEER;
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
        g->fault_code = DDP_EPEER;
        return err_set(err, DDP_EPEER,
                       "peer rank %d (same host, pid %d) lost during %s: process gone",
                       g->members[waited], (int)pid, what);
    }
    return 0;
}

/* Waits until member k's counter `which` reached round. */
int shm_wait_one(struct shm_group *g, int k, int which, uint32_t round, const char *what,
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
    int64_t deadline = time_deadline_ms(g->timeout_ms);
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
        if (ret < 0) {
            /* k may have posted the round and then left (closed its comm or exited: the
             * final barrier of a run) between the load above and the check; its post came
             * first (its gone flag and its exit follow it), so the wait succeeded. */
            if (reached(atomic_load_explicit(&c->ctr[which], memory_order_acquire), round)) {
                g->fault = -1;
                return 0;
            }
            return ret;
        }
        uint32_t nb = atomic_load_explicit(&c->beat, memory_order_relaxed);
        if (nb != beat) {
            beat = nb;
            deadline = time_deadline_ms(g->timeout_ms);
        }
        if (time_mono_ms() >= deadline) {
            g->fault = g->members[k];
            g->fault_code = DDP_ETIMEOUT;
            return err_set(err, DDP_ETIMEOUT,
                           "peer rank %d (same host) silent for %" PRId64 " ms during %s",
                           g->members[k], g->timeout_ms, what);
        }
    }
}

int shm_wait_all(struct shm_group *g, int which, uint32_t round, const char *what,
                 struct ddp_err *err)
{
    for (int k = 0; k < g->L; k++) {
        if (k == g->lr)
            continue;
        int ret = shm_wait_one(g, k, which, round, what, err);
        if (ret < 0)
            return ret;
    }
    return 0;
}

int shm_check_desc(struct shm_group *g, int k, int half, const struct shm_desc *mine,
                   struct ddp_err *err)
{
    const struct shm_desc *d = &g->ctl[k].desc[half];
    if (d->seq == mine->seq && d->kind == mine->kind && d->bytes == mine->bytes &&
        d->roff == mine->roff)
        return 0;
    /* The notice names this rank as the finder (fault.h: FAULT_MISMATCH). */
    g->fault = g->members[g->lr];
    g->fault_code = DDP_EINTERNAL;
    if (d->seq == mine->seq && d->kind == mine->kind && d->bytes == mine->bytes)
        return err_set(err, DDP_EINTERNAL,
                       "collective mismatch with rank %d (same host): in %s seq %" PRIu64
                       " it reduces %s, this rank %s",
                       g->members[k], shm_kind_name(mine->kind), mine->seq,
                       d->roff == UINT64_MAX ? "a private buffer" : "a registered range",
                       mine->roff == UINT64_MAX ? "a private buffer"
                       : d->roff == UINT64_MAX  ? "a registered range"
                                                : "a registered range at another offset");
    return err_set(err, DDP_EINTERNAL,
                   "collective mismatch with rank %d (same host): it issued kind %u seq %" PRIu64
                   " of %" PRIu64 " bytes, this rank kind %u seq %" PRIu64 " of %" PRIu64 " bytes",
                   g->members[k], d->kind, d->seq, d->bytes, mine->kind, mine->seq, mine->bytes);
}

static uint64_t fnv_str(uint64_t h, const char *s)
{
    for (; s && *s; s++)
        h = (h ^ (unsigned char)*s) * 0x100000001b3ull;
    return (h ^ 0xff) * 0x100000001b3ull;
}

static void name_for(const char *generation, const char *master_host, int master_port,
                     int world_size, uint64_t comm_id, int host, const int *members, int nmembers,
                     char *out, size_t size)
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

void shm_segment_name(const char *master_host, int master_port, int world_size, uint64_t comm_id,
                      int host, const int *members, int nmembers, char *out, size_t size)
{
    name_for(getenv("DDP_GENERATION"), master_host, master_port, world_size, comm_id, host, members,
             nmembers, out, size);
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
        name_for(gtxt, rdzv_master_host(s->r), rdzv_master_port(s->r), s->world_size, s->comm_id,
                 s->host, s->members, s->nmembers, name, sizeof(name));
        if (shm_unlink(name) == 0)
            log_warn("comm: removed a shared-memory segment %s left by generation %ld", name, g);
    }
}

const char *shm_group_name(const struct shm_group *g)
{
    return g->name;
}

/* Maps bytes of the shared-memory file fd (named name, for the error) read-write, shared. */
int shm_map_shared(const char *name, int fd, size_t bytes, void **out, struct ddp_err *err)
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
int shm_wait_attached(struct shm_group *g, _Atomic uint32_t *attached, const char *name,
                      struct ddp_err *err)
{
    int64_t deadline = time_deadline_ms(g->timeout_ms);
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
    int ret = shm_map_shared(g->name, fd, g->map_bytes, &m, err);
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
    g->srcs = xcalloc((size_t)g->L, sizeof(*g->srcs));
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
    int64_t deadline = time_deadline_ms(g->timeout_ms);
    char key[96];
    snprintf(key, sizeof(key), "comm/%" PRIu64 "/shm/%d", s->comm_id, s->host);
    if (g->leader) {
        if (shm_unlink(g->name) == 0)
            log_warn("comm: removed a stale shared-memory segment %s", g->name);
        unlink_older_generations(s);
        fd = shm_open(g->name, O_RDWR | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
        if (fd < 0) {
            ret = err_set(err, DDP_EIO, "shared memory %s: create: %s", g->name, strerror(errno));
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
        if ((ret = shm_wait_attached(g, &g->hdr->attached, g->name, err)) < 0)
            goto out;
        shm_unlink(g->name);
        g->unlinked = 1;
    } else {
        size_t len = 0;
        if ((ret = rdzv_get(s->r, key, time_left_ms(deadline), &tok, &len, err)) < 0)
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
            ret = err_set(err, DDP_EIO, "shared memory %s: attach: %s", g->name, strerror(errno));
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
    free(g->srcs);
    free(g);
}
