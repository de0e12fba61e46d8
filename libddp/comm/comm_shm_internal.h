/*
 * comm_shm_internal.h - what the three files of the shared-memory transport share: the
 * segment's layout, struct shm_group, and the counter primitives. Private to libddp/comm/
 * (the transport's contract is comm_shm.h).
 *
 *   comm_shm.c         the segment: naming, create/attach, counters, waiting, abort
 *   comm_shm_coll.c    all-reduce and broadcast through the slots (and registered parts)
 *   comm_shm_region.c  registered buffers (shm_region_alloc / shm_region_free)
 *
 * Ownership: shm_group_open allocates the group and maps everything in it; shm_group_close
 * unmaps the segment and every region and frees it.
 */
#ifndef DDP_LIBDDP_COMM_SHM_INTERNAL_H
#define DDP_LIBDDP_COMM_SHM_INTERNAL_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "libddp/comm/comm_shm.h"

#define SHM_MAGIC         0x444450534d454d31ull /* "DDPSMEM1" */
#define SHM_ABORT_MSG_MAX 256
#define SHM_SPIN_NS       2000  /* spin with pause this long ... */
#define SHM_YIELD_NS      10000 /* ... then yield until this long, then sleep on the futex */
#define SHM_SLEEP_NS      (10 * 1000 * 1000)
#define SHM_LIVENESS_MS   50
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
#define SHM_MAX_REGIONS      8
#define SHM_REGION_HDR       4096
#define SHM_REG_PIECE_FACTOR 16 /* registered all-reduces: pieces of 16 slot pieces */
#define SHM_REGION_MAGIC     0x444450534d524731ull /* "DDPSMRG1" */
#define SHM_KIND_REGION      0x52454731u           /* the broadcast that announces a region */

/* The name of a collective's kind for messages: the comm's work kinds (comm_cpu_internal.h:
 * 1 all-reduce, 2 broadcast, 3 barrier, 4 reduce-scatter, 5 all-gather) and the region's. */
static inline const char *shm_kind_name(uint32_t kind)
{
    switch (kind) {
    case 2:
        return "broadcast";
    case 3:
        return "barrier";
    case 4:
        return "reduce-scatter";
    case 5:
        return "all-gather";
    case SHM_KIND_REGION:
        return "region broadcast";
    default:
        return "all-reduce";
    }
}

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
    const char **srcs; /* L entries: the sources of one sum (sum_in_rank_order) */
    int64_t timeout_ms;
    size_t piece, small;
    void *base;
    size_t map_bytes;
    struct shm_hdr *hdr;
    struct shm_ctl *ctl;
    char *slots;
    uint64_t round; /* rounds so far; the counters carry its low 32 bits */
    int fault;      /* the rank the last error of this rank blamed (or found a mismatch), -1 none */
    int fault_code; /* its DDP_E* code: DDP_EPEER, DDP_ETIMEOUT, or DDP_EINTERNAL (a mismatch) */
    int unlinked;
    int64_t last_liveness;
    int64_t spin_ns; /* wait: spin this long before yielding (0 when oversubscribed) */
    struct shm_region regions[SHM_MAX_REGIONS];
    int nregions;
    uint32_t nalloc; /* regions allocated so far (names the next one) */
};

/* Member k's buffer `buf` of its slot. */
char *shm_slot(struct shm_group *g, int k, int buf);
/* Posts this rank's counter `which` = round and wakes its waiters. */
void shm_post(struct shm_group *g, int which, uint32_t round);
/* Waits until member k's counter `which` reached round (bounded by the timeout; a dead,
 * gone or aborting peer ends it early); 0 or the error naming the rank. */
int shm_wait_one(struct shm_group *g, int k, int which, uint32_t round, const char *what,
                 struct ddp_err *err);
/* The same for every member but this rank. */
int shm_wait_all(struct shm_group *g, int which, uint32_t round, const char *what,
                 struct ddp_err *err);
/* Compares member k's description of buffer `half` with this rank's; 0 or the mismatch. */
int shm_check_desc(struct shm_group *g, int k, int half, const struct shm_desc *mine,
                   struct ddp_err *err);
/* Maps bytes of the shared-memory file fd (named name, for the error) read-write, shared. */
int shm_map_shared(const char *name, int fd, size_t bytes, void **out, struct ddp_err *err);
/* Leader: waits until L ranks counted themselves in *attached (bounded by the timeout,
 * ended early by an abort), so the name can be taken away. */
int shm_wait_attached(struct shm_group *g, _Atomic uint32_t *attached, const char *name,
                      struct ddp_err *err);

#endif
