/*
 * ddp.h - libddp's public header: what a training program needs to run data-parallel.
 *
 *   struct ddp_group *g;
 *   ddp_group_open("auto", 60000, &g, &exit_code, &err);   // torchrun env, store, comm
 *   reducer_new(g->comm, g->world_size, counts, n, &ropts, NULL, &red, &err);
 *   ... each step: backward calls reducer_mark_ready(t) per tensor; reducer_finish(); step
 *   ddp_group_close(g);
 *
 * Without the torchrun environment the group is rank 0 of 1 with no store and no comm, and
 * every collective here is a no-op, so the same program runs as a plain local process.
 * The pieces are declared in their own headers, included below: env (libddp/include/ddp/env.h), store
 * (libddp/include/ddp/rdzv.h), collectives (libddp/include/ddp/comm.h), reducer, sampler, checkpoint,
 * resume (libddp/include/ddp/resume.h).
 */
#ifndef DDP_DDP_H
#define DDP_DDP_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "common/exitcodes.h"
#include "ddp/ckpt.h"
#include "ddp/comm.h"
#include "ddp/env.h"
#include "ddp/rdzv.h"
#include "ddp/reducer.h"
#include "ddp/resume.h"
#include "ddp/sampler.h"

struct ddp_group {
    struct ddp_env env;
    int rank;
    int world_size;
    int64_t timeout_ms;
    struct rdzv *rdzv; /* NULL when world_size == 1 */
    struct comm *comm; /* NULL when world_size == 1 */
    int gpu;           /* 1: compute and collectives on a GPU (nccl backend) */
    int device;        /* that GPU's ordinal: LOCAL_RANK, or 0 when one GPU is visible */
    /* The sharded checkpoints' copies (ddp/resume_shard.h), made at the first save and
     * owned (ddp_group_close frees them): keeper[k] the rank that keeps rank k's copy (-1
     * on one node), pairs[k] the comm of ranks k and keeper[k] where this rank is one of
     * them, else NULL; world_size entries each, NULL before. */
    int *keeper;
    struct comm **pairs;
    /* The last sharded checkpoint the group knows complete (resumed from, or saved and
     * confirmed): a prune keeps it beside the new one (ddp_shard_checkpoint_done). */
    int shard_done;
    uint32_t shard_done_epoch, shard_done_pos;
};

/*
 * Reads the environment, opens the rendezvous store and creates the comm for backend
 * ("auto", "cpu" or "nccl") with timeout_ms for every connect and collective. "nccl" (or
 * "auto" on a build with CUDA where a GPU is visible) also selects the GPU LOCAL_RANK for
 * this process and sets g->gpu, at every world size. On failure
 * *exit_code is the worker exit code for it (usage 2 for a malformed environment or an
 * unknown backend, rendezvous 4, port in use 5, device 8 when no usable GPU) and err says why. Caller frees with ddp_group_close().
 */
int ddp_group_open(const char *backend, int64_t timeout_ms, struct ddp_group **out, int *exit_code,
                   struct ddp_err *err);
void ddp_group_close(struct ddp_group *g);

/* Sum all-reduce of count doubles in place (no-op at world size 1). */
int ddp_allreduce_f64(struct ddp_group *g, double *buf, size_t count, struct ddp_err *err);
/* Broadcast of bytes from root (no-op at world size 1). */
int ddp_broadcast(struct ddp_group *g, void *buf, size_t bytes, int root, struct ddp_err *err);
/*
 * Collective over g: the comm of a sub-group of g's ranks (hybrid sharding's ranks of one
 * node, or of one local rank across the nodes), on the cpu backend (DDP_EINVAL for a group
 * on nccl) with g's timeout. Every rank
 * of g calls it, in the same order as its other sub-group creations (they number their keys
 * alike); the members of one sub-group pass the same tag (> 0), the sub-groups of one call
 * distinct tags, and each member its own rank in [0, size). Caller frees *out with
 * comm_free(). Errors: the comm's (DDP_ETIMEOUT when a member does not come).
 */
int ddp_sub_comm(struct ddp_group *g, uint32_t tag, int rank, int size, struct comm **out,
                 struct ddp_err *err);

/* Broadcast of a buffer whose length only root knows: root's *len bytes at *buf (kept) onto
 * every rank, the length first. Elsewhere *buf is replaced by a new buffer of the bytes
 * (caller frees; the old one is freed; NULL when the length is 0) and *len set. A length past
 * max is DDP_EINVAL naming root, before anything is allocated for it; one this process
 * cannot allocate is DDP_ETOOBIG (the others' broadcast then ends at the comm's timeout). */
int ddp_broadcast_bytes(struct ddp_group *g, int root, size_t max, uint8_t **buf, size_t *len,
                        struct ddp_err *err);
/* The same over comm c (of at least 2 ranks; root and the rank are c's). */
int ddp_comm_broadcast_bytes(struct comm *c, int root, size_t max, uint8_t **buf, size_t *len,
                             struct ddp_err *err);

/* The exit code for an error code met during training: DDP_EPEER and DDP_ETIMEOUT are
 * "peer lost" (6), anything else 1. */
int ddp_exit_code_for(int err_code);

#endif
