/*
 * comm_shm.h - the shared-memory transport between ranks of one host (issue 7), used by the
 * CPU backend (comm_cpu.c): for a job on one host it is the whole all-reduce, for a job on
 * several hosts the intra-host reduce and broadcast around the leaders' TCP ring; also the
 * reduce-scatter and all-gather of a job on one host.
 *
 * A struct shm_group is one mapped segment shared by the L ranks of a host; it is used by
 * one thread at a time (the comm thread, or a caller running a blocking collective inline),
 * and every rank of the group calls the same operations in the same order. Every wait is
 * bounded by the timeout; a local peer that died (its pid gone or a zombie), closed its
 * comm, or aborted turns the call into DDP_EPEER naming it, a silent one into DDP_ETIMEOUT,
 * and a collective mismatch (a member issued another collective) into DDP_EINTERNAL on every
 * member. Not part of libddp's public API. Implemented by comm_shm.c (the segment), comm_shm_coll.c
 * (the collectives) and comm_shm_region.c (registered buffers).
 */
#ifndef DDP_LIBDDP_COMM_SHM_H
#define DDP_LIBDDP_COMM_SHM_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/comm.h"
#include "ddp/rdzv.h"

/* The piece of a message each rank stages per round (SHM_NBUF = 4 rounds in flight). */
#define SHM_DEFAULT_PIECE_BYTES (256 * 1024)
/* At or below this many bytes one round where every rank sums all slots (one sync point);
 * above, reduce-scatter + all-gather through the slots. Measured, see bench/allreduce. */
#define SHM_DEFAULT_SMALL_BYTES (16 * 1024)

struct shm_group;

struct shm_setup {
    struct rdzv *r;     /* the store (borrowed during shm_group_open only) */
    uint64_t comm_id;   /* rdzv_next_id() of the comm: same on every rank */
    int host;           /* index of this host among the job's hosts */
    const int *members; /* global ranks of this host's ranks, ascending; [0] = leader */
    int nmembers;       /* L */
    int local_rank;     /* this rank's index in members */
    int world_size;     /* of the whole job (for the segment name) */
    int64_t timeout_ms; /* every wait */
    size_t piece_bytes; /* 0 = SHM_DEFAULT_PIECE_BYTES */
    size_t small_bytes; /* 0 = SHM_DEFAULT_SMALL_BYTES; SIZE_MAX = always one round */
};

/* Creates (leader: after unlinking a stale one) or attaches the host's segment. The leader
 * unlinks the name as soon as every member has attached, so nothing is left in /dev/shm
 * even when a rank is killed later. */
int shm_group_open(const struct shm_setup *s, struct shm_group **out, struct ddp_err *err);
/* Marks this rank gone (peers still waiting on it fail at once), unmaps; the leader unlinks
 * the name if it is still there. Accepts NULL. */
void shm_group_close(struct shm_group *g);

/* Sum all-reduce of count elements in place. to_leader_only: only local rank 0's buffer
 * receives the sum (the others' buffers are left as they were, or hold a partial sum when
 * registered): the hierarchical first half.
 * seq = the comm's collective number, kind = the work kind (both checked across ranks). */
int shm_allreduce(struct shm_group *g, void *buf, size_t count, enum comm_dtype dt,
                  int to_leader_only, uint64_t seq, int kind, struct ddp_err *err);
/*
 * Registered buffers. Collective over the members (same bytes, same order, no collective in
 * flight): the leader creates a segment with one part of `bytes` per member (pages reserved
 * up front, so a full /dev/shm is found here and not by SIGBUS later) and announces it with
 * a broadcast; each member maps it and gets its own part in *out (zero-filled, page
 * aligned). An all-reduce of a range inside the part (same offset on every member) reads
 * the others' data where it lies instead of copying it through the slots, and returns only
 * once no member reads this rank's part any more. Returns 1 with *out set, 0 when there is
 * no region (one member, /dev/shm full, too many regions: *out NULL, the caller uses
 * private memory - every member gets the same answer), or < 0 on error. The part stays
 * mapped until shm_region_free() or shm_group_close().
 */
int shm_region_alloc(struct shm_group *g, size_t bytes, void **out, struct ddp_err *err);
/* Unmaps the part p from shm_region_alloc; returns 1, or 0 when p is not one (untouched).
 * Accepts NULL g or p. */
int shm_region_free(struct shm_group *g, void *p);

/* Reduce-scatter (sum) over the members, member k's shard = elements [k * count, (k + 1) *
 * count) of in: every member copies the others' shards into its slot, piece by piece, and
 * sums its own shard from all slots into out (in place when out is in's own shard; in is
 * only read otherwise). */
int shm_reduce_scatter(struct shm_group *g, const void *in, void *out, size_t count,
                       enum comm_dtype dt, uint64_t seq, int kind, struct ddp_err *err);
/* All-gather: member k's in (count elements) lands at out + k * count on every member (in
 * place when in is out's own shard): a copy into the own slot and one out of each.
 * Both: where the full buffer (reduce-scatter: in; all-gather: out) lies in this rank's part
 * of a registered region (shm_region_alloc), at the same offset on every member, the others'
 * shards are read where they lie instead (no slot), and the call returns once no member reads
 * this rank's part any more. */
int shm_allgather(struct shm_group *g, const void *in, void *out, size_t count, enum comm_dtype dt,
                  uint64_t seq, int kind, struct ddp_err *err);

/* Copies root_local's bytes to every member. */
int shm_broadcast(struct shm_group *g, void *buf, size_t bytes, int root_local, uint64_t seq,
                  int kind, struct ddp_err *err);
/* Records the first failure (e->msg, e->code, the global rank at fault or -1) in the
 * segment and wakes every waiter, so the other members fail with it at once instead of at
 * their timeout. Accepts NULL. */
void shm_abort(struct shm_group *g, const struct ddp_err *e, int fault);

/* Tells the members that this rank is alive and busy (a leader in the leaders' ring), so
 * their waits on it do not time out while it makes progress. Cheap; accepts NULL. */
void shm_heartbeat(struct shm_group *g);

/* The global rank the last failed call blamed (-1: none, unknown, or the call succeeded),
 * with *code its kind of failure: DDP_EPEER (died), DDP_ETIMEOUT (silent) or DDP_EINTERNAL
 * (the rank named found a collective mismatch). The CPU backend passes it on to the ring as
 * its failure notice. */
int shm_fault(const struct shm_group *g, int *code);

/* The shm_open name of the segment for this layout (what shm_group_open uses; tests create
 * a stale one with it). Reads DDP_JOB_ID and DDP_GENERATION from the environment. */
void shm_segment_name(const char *master_host, int master_port, int world_size, uint64_t comm_id,
                      int host, const int *members, int nmembers, char *out, size_t size);
/* The segment's shm_open name ("/ddp-..."), for tests and logs. */
const char *shm_group_name(const struct shm_group *g);

#endif
