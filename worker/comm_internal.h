/*
 * comm_internal.h - what comm.c shares with the backends (comm_cpu.c, later comm_nccl.c and a
 * shared-memory transport): the struct comm every backend embeds, and the backends' tables.
 * Not part of libddp's public API.
 *
 * A backend's init() fills c->impl; destroy() frees it (and may be called on a half-built
 * comm after init failed). comm.c owns struct comm itself.
 *
 * Adding a transport (issue 7's shared memory between same-host ranks): give it its own ops
 * table (comm_shm.c) and pick it in comm.c's pick_backend() for "cpu" when !opts.force_tcp
 * and every rank published the same host id in the store (init can decide and fall back to
 * comm_cpu_ops' functions, since the ops take struct comm). The TCP ring keeps its store key
 * layout "comm/<id>/<rank>" = "host:port nonce"; a hierarchical mode can run the ring over
 * one leader per host by creating it on a sub-world (rank/world of the leaders).
 */
#ifndef DDP_WORKER_COMM_INTERNAL_H
#define DDP_WORKER_COMM_INTERNAL_H

#include "worker/comm.h"

#define COMM_DEFAULT_TIMEOUT_MS 60000
#define COMM_DEFAULT_CHUNK_BYTES (256 * 1024)
#define COMM_LOCAL_ADDR_MAX 256

struct comm {
    const struct comm_ops *ops;
    int rank;
    int world_size;
    struct comm_opts opts;                  /* opts.local_addr points at local_addr below */
    char local_addr[COMM_LOCAL_ADDR_MAX];   /* "" = use the rendezvous connection's address */
    void *impl;                             /* the backend's state */
};

extern const struct comm_ops comm_cpu_ops;

#ifdef DDP_HAVE_CUDA
/* Provided by the NCCL backend (worker/gpu/): its ops and whether a GPU is visible. */
extern const struct comm_ops comm_nccl_ops;
int comm_nccl_available(void);
#endif

#endif
