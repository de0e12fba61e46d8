/*
 * comm.h - the collective communication interface, with one ops table per backend
 * (comm_cpu.c: TCP ring on a comm thread; comm_nccl.c: NCCL on a comm stream): all-reduce,
 * reduce-scatter and all-gather (the sharded paths), broadcast, barrier.
 *
 * A struct comm is created once per generation after the rendezvous. Collectives are issued
 * from one thread (the training thread) in the same order on every rank. Async all-reduces
 * run in issue order on the backend's own thread/stream, so the caller can keep computing
 * (the reducer overlaps them with the backward pass).
 *
 * The cpu backend picks its transport from the rank layout (every rank publishes a host
 * identity): shared memory when all ranks share a host, the TCP ring when every rank is on
 * its own host or opts.force_tcp, else hierarchical (shared-memory reduce to one leader per
 * host, TCP ring of the leaders, shared-memory broadcast).
 *
 * Failure: a peer that dies or stays silent longer than opts.timeout_ms turns every pending
 * and later call into DDP_EPEER (message names the peer: "peer rank 2 (10.0.0.2:41233) lost:
 * connection reset") or DDP_ETIMEOUT; never a hang. The timeout bounds silence, not the
 * length of a collective: it restarts whenever the peer waited on moves data (or, for the
 * ranks of a host waiting on their leader, whenever the leader moves data on its links), so
 * a large collective on a slow but live network is not cut off, and a peer that trickles a
 * byte within every timeout_ms keeps it going. Ranks that issue different collectives (kind,
 * count, order) get DDP_EINTERNAL "collective mismatch" on every rank, never mixed data.
 * After an error the comm is unusable except for comm_free().
 */
#ifndef DDP_COMM_H
#define DDP_COMM_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/rdzv.h"

enum comm_dtype { COMM_F32 = 0, COMM_F64 = 1 };

struct comm_opts {
    int64_t timeout_ms;     /* silence a peer may keep (above); 60000 by default */
    size_t chunk_bytes;     /* pipelining chunk of the ring; 0 = backend default */
    const char *local_addr; /* address peers reach this rank at, and its ports listen on ("" =
                             * MASTER_ADDR's route) */
    int force_tcp;          /* 1: do not use shared memory between same-host ranks; also set
                             * by DDP_COMM_TRANSPORT=tcp in the environment */
    size_t small_bytes;     /* cpu: all-reduces of at most this many bytes take the
                             * latency-bound algorithm (shared memory: one round where every
                             * rank sums all slots; TCP: recursive doubling); 0 = measured
                             * defaults (16 KiB shm, 64 KiB TCP), 1 = never */
    int device;             /* GPU ordinal for nccl (LOCAL_RANK); ignored by cpu */
    uint32_t group_tag;     /* cpu: 0 for a comm of the store's whole world; for a comm of a
                             * sub-group of it (ddp_sub_comm: hybrid sharding), a tag that
                             * every member passes and no other sub-group of the same
                             * creation does, so that their keys and shared memory differ */
};

/* Fills *opts with the defaults above. */
void comm_opts_default(struct comm_opts *opts);

struct comm;
struct comm_work; /* one pending async collective */

struct comm_ops {
    const char *name;
    int (*init)(struct comm *c, struct rdzv *r, struct ddp_err *err);
    int (*allreduce_async)(struct comm *c, void *buf, size_t count, enum comm_dtype dt,
                           struct comm_work **out, struct ddp_err *err);
    int (*wait)(struct comm *c, struct comm_work *w, struct ddp_err *err);
    int (*broadcast)(struct comm *c, void *buf, size_t bytes, int root, struct ddp_err *err);
    int (*barrier)(struct comm *c, struct ddp_err *err);
    void (*destroy)(struct comm *c);
    /* Optional blocking all-reduce (NULL: comm_allreduce() uses allreduce_async + wait). */
    int (*allreduce)(struct comm *c, void *buf, size_t count, enum comm_dtype dt,
                     struct ddp_err *err);
    /* Optional registered buffers: alloc returns 1 with *out set, 0 for "use plain memory",
     * < 0 on error; free returns 1 when p was one of its buffers. */
    int (*alloc_buffer)(struct comm *c, size_t bytes, void **out, struct ddp_err *err);
    int (*free_buffer)(struct comm *c, void *p);
    /* Reduce-scatter and all-gather (comm.c has checked the arguments: count elements per
     * rank, in place or not overlapping). The blocking ones are optional (NULL: async +
     * wait). */
    int (*reduce_scatter_async)(struct comm *c, const void *in, void *out, size_t count,
                                enum comm_dtype dt, struct comm_work **out_work,
                                struct ddp_err *err);
    int (*allgather_async)(struct comm *c, const void *in, void *out, size_t count,
                           enum comm_dtype dt, struct comm_work **out_work, struct ddp_err *err);
    int (*reduce_scatter)(struct comm *c, const void *in, void *out, size_t count,
                          enum comm_dtype dt, struct ddp_err *err);
    int (*allgather)(struct comm *c, const void *in, void *out, size_t count, enum comm_dtype dt,
                     struct ddp_err *err);
};

/*
 * Creates the comm for `backend` ("cpu" or "nccl"; "auto" = nccl where built with CUDA and a
 * GPU is visible, else cpu), exchanging addresses through r (borrowed; must stay open until
 * comm_new returns). Caller frees with comm_free().
 */
int comm_new(const char *backend, struct rdzv *r, int rank, int world_size,
             const struct comm_opts *opts, struct comm **out, struct ddp_err *err);
/* Stops the backend (a collective in flight is cut short) and frees every work not yet
 * waited for. Accepts NULL. */
void comm_free(struct comm *c);

const char *comm_backend_name(const struct comm *c);
int comm_rank(const struct comm *c);
int comm_world_size(const struct comm *c);

/*
 * Starts a sum all-reduce of count elements of buf in place. buf is borrowed until
 * comm_wait() returns for the work. *out is freed by comm_wait().
 */
int comm_allreduce_async(struct comm *c, void *buf, size_t count, enum comm_dtype dt,
                         struct comm_work **out, struct ddp_err *err);
/* Waits for w (bounded by the timeout) and frees it, whatever the result. */
int comm_wait(struct comm *c, struct comm_work *w, struct ddp_err *err);
/* Blocking sum all-reduce (async + wait). */
int comm_allreduce(struct comm *c, void *buf, size_t count, enum comm_dtype dt,
                   struct ddp_err *err);
/*
 * Memory for buffers this comm all-reduces, allocated on every rank at once (a collective:
 * same bytes, same order, no collective in flight). Where same-host ranks share memory the
 * block lies in a segment they all map, and an all-reduce of a range of it (the same range
 * on every rank) skips copying the data into the shared slots: the reducer's gradient block
 * comes from here. Elsewhere (TCP ring, NCCL, world size 1, no room in /dev/shm) it is plain
 * memory. Zero-filled, 64-byte aligned. *out is owned by the caller and freed with
 * comm_free_buffer() before comm_free(). c may be NULL (plain memory).
 */
int comm_alloc_buffer(struct comm *c, size_t bytes, void **out, struct ddp_err *err);
/* Frees what comm_alloc_buffer returned. Accepts NULL p. */
void comm_free_buffer(struct comm *c, void *p);

/*
 * Reduce-scatter and all-gather: the two halves of an all-reduce, for sharded training
 * (ddp/shard.h says how a buffer of N elements becomes W shards of `count` elements, padded).
 * `count` is the number of elements of ONE rank's shard; W = comm_world_size(c); the shard of
 * rank r is elements [r * count, (r + 1) * count) of the full buffer of count * W elements.
 * Issued like the all-reduce (same order on every rank, the same count and dtype) and run in
 * issue order with it on the backend's thread/stream; same timeout and failure semantics
 * (DDP_EPEER naming the lost peer, DDP_ETIMEOUT the silent one; sticky).
 *
 * Reduce-scatter (sum): in holds count * W elements on every rank; rank r's out (count
 * elements) receives the sum over all ranks of their in's shard r. In place when
 * out == in + r * count (the result lands in the own shard of in); otherwise out must not
 * overlap in. in is never written except, in place, its own shard.
 *
 * All-gather: in holds count elements (this rank's shard); every rank's out (count * W
 * elements) receives every rank's in, rank q's at out + q * count. In place when
 * in == out + r * count; otherwise in must not overlap out.
 *
 * in and out are borrowed until comm_wait() returns for the work (the async forms) or the
 * call returns; *out_work is freed by comm_wait(). A NULL buffer is allowed only with count 0.
 * nccl: both buffers in device memory (on the comm stream, after the compute stream's work,
 * like the all-reduce), or both in host memory (staged, finished before the call returns).
 * Overlap other than the in-place form, or count * W overflowing, is DDP_EINVAL.
 */
int comm_reduce_scatter_async(struct comm *c, const void *in, void *out, size_t count,
                              enum comm_dtype dt, struct comm_work **out_work, struct ddp_err *err);
int comm_reduce_scatter(struct comm *c, const void *in, void *out, size_t count, enum comm_dtype dt,
                        struct ddp_err *err);
int comm_allgather_async(struct comm *c, const void *in, void *out, size_t count,
                         enum comm_dtype dt, struct comm_work **out_work, struct ddp_err *err);
int comm_allgather(struct comm *c, const void *in, void *out, size_t count, enum comm_dtype dt,
                   struct ddp_err *err);

/* Copies root's bytes of buf to every rank. */
int comm_broadcast(struct comm *c, void *buf, size_t bytes, int root, struct ddp_err *err);
int comm_barrier(struct comm *c, struct ddp_err *err);

#endif
