/*
 * comm_cpu_internal.h - what the files of the CPU backend share, and nothing else: the
 * backend's state (struct cpu), the wire headers, and the entry points of its parts. Private
 * to libddp/comm/.
 *
 *   comm_cpu.c  the backend: ops table, transport choice, work queue and comm thread
 *   ring.c      the TCP ring: set-up, the pipelined engine of all-reduce, reduce-scatter,
 *               all-gather and broadcast
 *   rdouble.c   recursive doubling for small all-reduces over TCP
 *   peer.c      publish / connect / accept of TCP peers with a checked hello (both above)
 *   topo.c      host topology: which ranks share a host
 *   fault.c     failure notices to the neighbours and the errors that name the rank at fault
 *   comm_shm.c  the shared-memory transport (its own header, comm_shm.h)
 *
 * Ownership: struct cpu is c->impl, allocated by cpu_init and freed by cpu_destroy
 * (comm_cpu.c); the parts only use it. Invariants 1-3 of comm_cpu.c say which thread may
 * touch which field.
 */
#ifndef DDP_LIBDDP_COMM_CPU_INTERNAL_H
#define DDP_LIBDDP_COMM_CPU_INTERNAL_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "ddp/comm.h"
#include "ddp/rdzv.h"
#include "libddp/comm/comm_internal.h"
#include "libddp/net.h"

#define COLL_MAGIC    0x44445043u /* "DDPC" */
#define ABORT_MAGIC   0x44445041u /* "DDPA": a recursive-doubling header carrying a notice */
#define PEER_NAME_MAX (NET_ADDR_MAX + 16)
/* TCP all-reduces of at most this many bytes take recursive doubling (see bench/allreduce). */
#define COMM_TCP_SMALL_BYTES (64 * 1024)

enum work_kind {
    WORK_ALLREDUCE = 1,
    WORK_BROADCAST = 2,
    WORK_BARRIER = 3,
    WORK_REDUCE_SCATTER = 4,
    WORK_ALLGATHER = 5,
};
/* shm_kind_name (comm_shm_internal.h) names these numbers */
_Static_assert(WORK_ALLREDUCE == 1 && WORK_BROADCAST == 2 && WORK_BARRIER == 3 &&
                   WORK_REDUCE_SCATTER == 4 && WORK_ALLGATHER == 5,
               "shm_kind_name's numbers");

/* How collectives travel (chosen in init from the rank layout, the same on every rank). */
enum comm_mode {
    MODE_TCP = 0,  /* the ring over all ranks (force_tcp, or every rank on its own host) */
    MODE_SHM = 1,  /* every rank on one host: shared memory only */
    MODE_HIER = 2, /* shm reduce to the host leader, ring of leaders, shm broadcast */
};

struct comm_work;

struct cpu {
    enum comm_mode mode;
    /* The TCP ring: over all ranks (MODE_TCP) or over one leader per host (MODE_HIER, where
     * ring index = host index). left/right and notices are ring indices. */
    int has_ring;
    int rrank, rworld;
    int *ring_global; /* ring index -> global rank */
    /* Shared memory (MODE_SHM, MODE_HIER). */
    struct shm_group *shm;
    int *host_of;  /* global rank -> host index */
    int *local_of; /* global rank -> index among its host's ranks */
    int send_fd, recv_fd;
    int left, right;
    /* Recursive doubling for small all-reduces: one socket per partner (ring indices), -1
     * where none; rd_pow = the largest power of two <= rworld. */
    int *rd_fd;
    int rd_pow;
    size_t tcp_small; /* all-reduces of at most this many bytes take recursive doubling */
    void *rd_tmp;     /* tcp_small bytes */
    char left_name[PEER_NAME_MAX], right_name[PEER_NAME_MAX];
    size_t chunk;
    void *stage;
    /* Scratch of the running collective (comm thread, or the inline caller): the ring
     * reduce-scatter's two segments, the hierarchical reduce-scatter's full buffer. */
    void *scratch;
    size_t scratch_bytes;
    uint64_t seq; /* collectives run so far (comm thread only) */
    pthread_t thread;
    int thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv_work, cv_done;
    struct comm_work *head, *tail;
    struct comm_work *all;
    uint32_t notice; /* after a failure: the notice for the neighbours (fault.c) */
    int wait_peer;   /* the neighbour the running collective last waited on, or -1 */
    int busy;        /* the thread is running a work */
    int stop;
    int failed;
    struct ddp_err fail;
};

/* The wire header in front of every ring collective, in host byte order (every rank of a
 * job runs the same build on the same architecture). */
struct coll_hdr {
    uint32_t magic;
    uint16_t kind;
    uint16_t aux; /* dtype for all-reduce and barrier, root for broadcast */
    uint64_t seq;
    uint64_t bytes;
};

/* The header in front of every recursive-doubling message (magic ABORT_MAGIC: kind is a
 * failure notice instead). */
struct rd_hdr {
    uint32_t magic;
    uint32_t kind;
    uint64_t seq;
    uint64_t bytes;
};

/* comm_cpu.c: the global rank of ring index i (other values, such as -1, pass through). */
int cpu_global_rank(const struct cpu *cpu, int i);

/* ring.c. ring_connect: connects cpu->send_fd to the right neighbour and cpu->recv_fd from
 * the left one (store keys "comm/<id>/<ring index>"); on error the fds already opened stay
 * in cpu for cpu_destroy. ring_allreduce / ring_broadcast (root = a ring index) run one
 * collective over the ring; 0 or the error, with cpu->notice set for fault_abort_ring. */
int ring_connect(struct comm *c, struct rdzv *r, uint64_t id, struct ddp_err *err);
int ring_allreduce(struct comm *c, void *buf, size_t count, enum comm_dtype dt, uint64_t seq,
                   int kind, const char *what, struct ddp_err *err);
int ring_broadcast(struct comm *c, void *buf, size_t bytes, int root, uint64_t seq,
                   struct ddp_err *err);
/* The two halves of ring_allreduce on their own, over shards of count elements (segment i
 * = ring index i's shard; comm.h's contract: in place or not overlapping). The
 * reduce-scatter only reads `in` (sums go through cpu->scratch when the ring has more than
 * two ranks); the all-gather copies `in` to its own place in `out` first. */
int ring_reduce_scatter(struct comm *c, const void *in, void *out, size_t count, enum comm_dtype dt,
                        uint64_t seq, struct ddp_err *err);
int ring_allgather(struct comm *c, const void *in, void *out, size_t count, enum comm_dtype dt,
                   uint64_t seq, struct ddp_err *err);

/* rdouble.c. rd_connect: fills cpu->rd_fd, rd_pow, tcp_small, rd_tmp (store keys
 * "comm/<id>/rd/<ring index>"); what it allocated stays in cpu for cpu_destroy, also after
 * an error. rd_allreduce: one all-reduce of at most cpu->tcp_small bytes. */
int rd_connect(struct comm *c, struct rdzv *r, uint64_t id, struct ddp_err *err);
int rd_allreduce(struct comm *c, void *buf, size_t count, enum comm_dtype dt, uint64_t seq,
                 int kind, struct ddp_err *err);

/* topo.c. Publishes this rank's host identity, reads every rank's, and returns (caller
 * frees both) host_of[rank] = host index (hosts numbered in the order of their lowest rank,
 * whose rank is the host's leader) and local_of[rank] = index among its host's ranks;
 * *nhosts = how many hosts. Nothing is written on error. */
int topo_map_hosts(struct comm *c, struct rdzv *r, uint64_t id, int **host_of, int **local_of,
                   int *nhosts, struct ddp_err *err);

#endif
