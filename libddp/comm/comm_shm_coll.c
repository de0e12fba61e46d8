/*
 * comm_shm_coll.c - all-reduce and broadcast through the shared-memory slots (and, for a
 * registered buffer, straight from the members' parts of a region), on the primitives of
 * comm_shm.c; and the reduce-scatter and all-gather of a job on one host.
 *
 * Rounds: a message is cut into pieces; round number R (a per-group counter that is the
 * same on every member) uses buffer R % SHM_NBUF of every slot. Before writing it a rank
 * waits until every member's `done` reached R - SHM_NBUF (the buffer is free), so a rank
 * can run up to SHM_NBUF rounds ahead of the slowest (measured: 4 beats 2 when ranks share
 * cores). Large pieces: copy in (all but the own 1/L slice, 64-byte aligned), post
 * arrive=R, wait all arrive>=R, sum the own slice of the own buffer and the L-1 other slots
 * into the own slot, post reduced=R, wait all reduced>=R, copy every slice out, post
 * done=R - each byte is streamed once in the reduce, the piece stays in cache. Small
 * messages (<= small) take one round where every rank sums all slots itself in rank order
 * (one sync point, results bit-identical on all ranks). Counters only grow, so a rank that
 * does not post a counter in some round (broadcast receivers' arrive) never blocks a later
 * wait.
 *
 * A registered all-reduce (the buffer lies in this rank's part of a region, at the same
 * offset on every member) needs no staging: the others read this rank's data where it lies
 * and the own slice is reduced in place, in pieces SHM_REG_PIECE_FACTOR times larger; it
 * returns only once no member reads this rank's part any more.
 *
 * Reduce-scatter and all-gather (every rank's shard = count elements, member k's at k *
 * count): a reduce-scatter round copies a piece of every other member's shard into the own
 * slot (piece / L bytes each), then each member sums its own shard's piece from its own data
 * and the L - 1 other slots straight into its output: one copy in per byte, the sum reads
 * each byte once, no copy out. An all-gather round copies a piece of the own shard into the
 * own slot and every member copies all the others' out: the shared segment makes it a copy.
 * Neither has a "reduced" phase: arrive, then done. Where the full buffer (the
 * reduce-scatter's input, the all-gather's output) is registered, at the same offset on every
 * member, there is no slot at all: one round reads the others' shards where they lie
 * (registered_sharded), so an all-gather copies each byte once, as Open MPI's single-copy
 * transport does.
 *
 * Every sum adds the members' values in rank order, whichever member computes it
 * (sum_in_rank_order): an element gets the same bits from every algorithm here, whatever
 * piece, slice, shard or bucket it falls in, so a run sharded by units (reduce-scatters of
 * each unit) is bit-identical on one host to the same run all-reducing buckets.
 *
 * Invariants:
 *  1. Every member runs the same rounds in the same order (g->round is the same on all).
 *  2. A slot buffer is written only after every member's done counter passed the round
 *     that last used it (round_begin).
 */
#include <inttypes.h>
#include <stdint.h>
#include <string.h>

#include "libddp/comm/comm_shm_internal.h"
#include "libddp/comm/vecadd.h"

#define SUM_TMP_BYTES 4096

/*
 * dst = src[0] + src[1] + ... + src[L-1] element by element, always added in rank order,
 * whichever member owns the sum: so the same element gets the same bits from the one-round
 * all-reduce, the sliced one and the reduce-scatter, whatever the piece, slice, shard or
 * bucket it falls in (a sharded run is bit-identical to an unsharded one on one host).
 * dst may be one of the sources (in place): then through a small temporary.
 */
static void sum_in_rank_order(const struct vecadd_type *t, char *dst, const char *const *src, int L,
                              size_t bytes)
{
    size_t n = bytes / t->size;
    int alias = -1;
    for (int k = 0; k < L; k++)
        if (src[k] == dst)
            alias = k;
    if (alias <= 0) {
        if (alias == 0)
            t->add(dst, src[1], n);
        else
            t->add2(dst, src[0], src[1], n);
        for (int k = 2; k < L; k++)
            t->add(dst, src[k], n);
        return;
    }
    _Alignas(64) char tmp[SUM_TMP_BYTES];
    for (size_t off = 0; off < bytes; off += SUM_TMP_BYTES) {
        size_t c = bytes - off < SUM_TMP_BYTES ? bytes - off : SUM_TMP_BYTES;
        t->add2(tmp, src[0] + off, src[1] + off, c / t->size);
        for (int k = 2; k < L; k++)
            t->add(tmp, src[k] + off, c / t->size);
        memcpy(dst + off, tmp, c);
    }
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

/*
 * Starts round R: waits until this rank's buffer is free, then records the description.
 * The count of rounds is 64 bits (the first SHM_NBUF rounds wait for nothing: that test must
 * not wrap with the 32-bit counters, which go round in about 2^32 rounds, weeks of a long
 * training run); the counters posted compare modulo 2^32 (comm_shm.c).
 */
static int round_begin(struct shm_group *g, uint32_t *round, int *half, const struct shm_desc *d,
                       const char *what, struct ddp_err *err)
{
    uint64_t r64 = ++g->round;
    uint32_t r = (uint32_t)r64;
    int h = (int)(r64 % SHM_NBUF);
    if (r64 > SHM_NBUF) {
        int ret = shm_wait_all(g, C_DONE, (uint32_t)(r64 - SHM_NBUF), what, err);
        if (ret < 0)
            return ret;
    }
    g->ctl[g->lr].desc[h] = *d;
    *round = r;
    *half = h;
    return 0;
}

/*
 * Ends round r: posts done, and brings the arrive and reduced counters that this round did
 * not post (a broadcast receiver's arrive, every round's reduced but a sliced all-reduce's)
 * up to r. Counters compare modulo 2^32, so one left behind for 2^31 rounds would read as
 * ahead of the round a later wait asks for; no wait in this round reads them (every member
 * runs the same kind of round), and a later one asks for a later round.
 */
static void round_end(struct shm_group *g, uint32_t r)
{
    struct shm_ctl *me = &g->ctl[g->lr];
    for (int which = C_ARRIVE; which <= C_REDUCED; which++)
        if (atomic_load_explicit(&me->ctr[which], memory_order_relaxed) != r)
            atomic_store_explicit(&me->ctr[which], r, memory_order_release);
    shm_post(g, C_DONE, r);
}

/* Member k's data of the piece at off: its slot h, or its part of region rg at roff. */
static char *piece_of(struct shm_group *g, const struct shm_region *rg, size_t roff, int k, int h,
                      size_t off)
{
    return rg ? rg->base + SHM_REGION_HDR + (size_t)k * rg->stride + roff + off : shm_slot(g, k, h);
}

/* Where buf..buf+bytes lies inside this rank's part of a region: that region, with *roff
 * the offset in the part; else NULL. */
static const struct shm_region *region_of(const struct shm_group *g, const void *buf, size_t bytes,
                                          size_t *roff)
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
    const char *what = shm_kind_name((uint32_t)kind);
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
    struct shm_desc d = {
        .seq = seq, .kind = (uint32_t)kind, .bytes = bytes, .roff = rg ? roff : UINT64_MAX};
    char *p = buf;
    /* Registered data needs no staging slot, so its pieces are larger: fewer sync points
     * (measured: 4 MiB pieces 1.3-2.5x faster than 256 KiB ones from 1 to 64 MiB). */
    size_t piece = rg ? g->piece * SHM_REG_PIECE_FACTOR : g->piece;
    const char **srcs = g->srcs;
    for (size_t off = 0; off < bytes;) {
        size_t n = bytes - off < piece ? bytes - off : piece;
        uint32_t r;
        int h, ret;
        if ((ret = round_begin(g, &r, &h, &d, what, err)) < 0)
            return ret;
        size_t so = 0, sl = 0;
        if (oneshot) {
            memcpy(shm_slot(g, g->lr, h), p + off, n);
        } else if (!rg) {
            /* The others read every slice of this slot but this rank's own, which it
             * reduces straight from its buffer. */
            slice(n, g->L, g->lr, &so, &sl);
            memcpy(shm_slot(g, g->lr, h), p + off, so);
            memcpy(shm_slot(g, g->lr, h) + so + sl, p + off + so + sl, n - so - sl);
        } else {
            slice(n, g->L, g->lr, &so, &sl);
        }
        shm_post(g, C_ARRIVE, r);
        for (int k = 0; k < g->L; k++) {
            if (k == g->lr)
                continue;
            if ((ret = shm_wait_one(g, k, C_ARRIVE, r, what, err)) < 0 ||
                (ret = shm_check_desc(g, k, h, &d, err)) < 0)
                return ret;
        }
        if (oneshot) {
            if (gets) {
                for (int k = 0; k < g->L; k++)
                    srcs[k] = shm_slot(g, k, h);
                sum_in_rank_order(t, p + off, srcs, g->L, n);
            }
        } else {
            char *mine = rg ? p + off + so : shm_slot(g, g->lr, h) + so;
            if (sl) {
                for (int k = 0; k < g->L; k++)
                    srcs[k] = k == g->lr ? p + off + so : piece_of(g, rg, roff, k, h, off) + so;
                sum_in_rank_order(t, mine, srcs, g->L, sl);
            }
            shm_post(g, C_REDUCED, r);
            if (gets) {
                if (sl && !rg)
                    memcpy(p + off + so, mine, sl);
                for (int k = 0; k < g->L; k++) {
                    if (k == g->lr)
                        continue;
                    if ((ret = shm_wait_one(g, k, C_REDUCED, r, what, err)) < 0)
                        return ret;
                    slice(n, g->L, k, &so, &sl);
                    if (sl)
                        memcpy(p + off + so, piece_of(g, rg, roff, k, h, off) + so, sl);
                }
            }
        }
        round_end(g, r);
        off += n;
    }
    /* The others read this rank's part until their last piece is done: only then may the
     * caller write it again. */
    if (rg)
        return shm_wait_all(g, C_DONE, (uint32_t)g->round, what, err);
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
            memcpy(shm_slot(g, g->lr, h), p + off, n);
            shm_post(g, C_ARRIVE, r);
        } else {
            if ((ret = shm_wait_one(g, root_local, C_ARRIVE, r, "broadcast", err)) < 0 ||
                (ret = shm_check_desc(g, root_local, h, &d, err)) < 0)
                return ret;
            memcpy(p + off, shm_slot(g, root_local, h), n);
        }
        round_end(g, r);
        off += n;
    }
    return 0;
}

/*
 * Reduce-scatter (reduce = 1) or all-gather of a registered buffer: the full buffer lies in
 * this rank's part of region rg at roff, at the same offset on every member (checked with
 * the description), so no slot is needed: one round in which every member reads the others'
 * parts where they lie - its own shard of each to sum (reduce-scatter: src is the full
 * buffer, dst the output), or each member's own shard to copy (all-gather: src is the own
 * shard, already in place, dst the full buffer) - then waits until no member reads its
 * part any more, so that the caller may write it again.
 */
static int registered_sharded(struct shm_group *g, const struct shm_region *rg, size_t roff,
                              int reduce, const char *src, char *dst, size_t sb,
                              const struct vecadd_type *t, uint64_t seq, int kind,
                              struct ddp_err *err)
{
    const char *what = reduce ? "reduce-scatter" : "all-gather";
    struct shm_desc d = {.seq = seq, .kind = (uint32_t)kind, .bytes = sb, .roff = roff};
    uint32_t r;
    int h, ret;
    if ((ret = round_begin(g, &r, &h, &d, what, err)) < 0)
        return ret;
    shm_post(g, C_ARRIVE, r);
    const char *own = reduce ? src + (size_t)g->lr * sb : src; /* reduce: the own input shard */
    for (int k = 0; k < g->L; k++) {
        if (k == g->lr) {
            g->srcs[k] = own;
            continue;
        }
        if ((ret = shm_wait_one(g, k, C_ARRIVE, r, what, err)) < 0 ||
            (ret = shm_check_desc(g, k, h, &d, err)) < 0)
            return ret;
        const char *part = rg->base + SHM_REGION_HDR + (size_t)k * rg->stride + roff;
        if (!reduce)
            memcpy(dst + (size_t)k * sb, part + (size_t)k * sb, sb);
        else
            g->srcs[k] = part + (size_t)g->lr * sb;
    }
    if (reduce)
        sum_in_rank_order(t, dst, g->srcs, g->L, sb);
    round_end(g, r);
    return shm_wait_all(g, C_DONE, r, what, err);
}

/* The part of a slot each member's shard gets in one reduce-scatter round: piece / L,
 * whole elements, cache lines where there is room; 0 when not even one element fits. */
static size_t rs_sub(const struct shm_group *g, size_t esize)
{
    size_t sub = g->piece / (size_t)g->L;
    if (sub >= 64)
        return sub & ~(size_t)63;
    return sub / esize * esize;
}

int shm_reduce_scatter(struct shm_group *g, const void *in, void *out, size_t count,
                       enum comm_dtype dt, uint64_t seq, int kind, struct ddp_err *err)
{
    const char *what = "reduce-scatter";
    const struct vecadd_type *t = vecadd_type(dt);
    size_t sb = count * t->size;
    const char *src = in;
    char *dst = out;
    if (g->L == 1) {
        if (sb && dst != src)
            memcpy(dst, src, sb);
        return 0;
    }
    if (sb == 0)
        return 0;
    g->fault = -1;
    size_t sub = rs_sub(g, t->size);
    if (sub == 0)
        return err_set(err, DDP_EINVAL,
                       "reduce-scatter: shared-memory pieces of %zu bytes cannot hold an element "
                       "for each of %d ranks (raise chunk_bytes)",
                       g->piece, g->L);
    size_t roff = 0;
    const struct shm_region *rg = region_of(g, src, sb * (size_t)g->L, &roff);
    if (rg)
        return registered_sharded(g, rg, roff, 1, src, dst, sb, t, seq, kind, err);
    struct shm_desc d = {.seq = seq, .kind = (uint32_t)kind, .bytes = sb, .roff = UINT64_MAX};
    const char *own = src + (size_t)g->lr * sb;
    for (size_t off = 0; off < sb;) {
        size_t n = sb - off < sub ? sb - off : sub;
        uint32_t r;
        int h, ret;
        if ((ret = round_begin(g, &r, &h, &d, what, err)) < 0)
            return ret;
        /* Slot layout this round: member k's piece of shard k at k * sub. */
        char *slot = shm_slot(g, g->lr, h);
        for (int k = 0; k < g->L; k++)
            if (k != g->lr)
                memcpy(slot + (size_t)k * sub, src + (size_t)k * sb + off, n);
        shm_post(g, C_ARRIVE, r);
        for (int k = 0; k < g->L; k++) {
            if (k == g->lr) {
                g->srcs[k] = own + off;
                continue;
            }
            if ((ret = shm_wait_one(g, k, C_ARRIVE, r, what, err)) < 0 ||
                (ret = shm_check_desc(g, k, h, &d, err)) < 0)
                return ret;
            g->srcs[k] = shm_slot(g, k, h) + (size_t)g->lr * sub;
        }
        sum_in_rank_order(t, dst + off, g->srcs, g->L, n);
        round_end(g, r);
        off += n;
    }
    return 0;
}

int shm_allgather(struct shm_group *g, const void *in, void *out, size_t count, enum comm_dtype dt,
                  uint64_t seq, int kind, struct ddp_err *err)
{
    const char *what = "all-gather";
    size_t sb = count * vecadd_type(dt)->size;
    const char *src = in;
    char *dst = out;
    if (sb && dst + (size_t)g->lr * sb != src)
        memcpy(dst + (size_t)g->lr * sb, src, sb);
    if (g->L == 1 || sb == 0)
        return 0;
    g->fault = -1;
    size_t roff = 0;
    const struct shm_region *rg = region_of(g, dst, sb * (size_t)g->L, &roff);
    if (rg)
        return registered_sharded(g, rg, roff, 0, dst + (size_t)g->lr * sb, dst, sb,
                                  vecadd_type(dt), seq, kind, err);
    struct shm_desc d = {.seq = seq, .kind = (uint32_t)kind, .bytes = sb, .roff = UINT64_MAX};
    for (size_t off = 0; off < sb;) {
        size_t n = sb - off < g->piece ? sb - off : g->piece;
        uint32_t r;
        int h, ret;
        if ((ret = round_begin(g, &r, &h, &d, what, err)) < 0)
            return ret;
        memcpy(shm_slot(g, g->lr, h), src + off, n);
        shm_post(g, C_ARRIVE, r);
        for (int k = 0; k < g->L; k++) {
            if (k == g->lr)
                continue;
            if ((ret = shm_wait_one(g, k, C_ARRIVE, r, what, err)) < 0 ||
                (ret = shm_check_desc(g, k, h, &d, err)) < 0)
                return ret;
            memcpy(dst + (size_t)k * sb + off, shm_slot(g, k, h), n);
        }
        round_end(g, r);
        off += n;
    }
    return 0;
}
