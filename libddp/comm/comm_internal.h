/*
 * comm_internal.h - what comm.c shares with the backends (comm_cpu.c, later comm_nccl.c and a
 * shared-memory transport): the struct comm every backend embeds, and the backends' tables.
 * Not part of libddp's public API.
 *
 * A backend's init() fills c->impl; destroy() frees it (and may be called on a half-built
 * comm after init failed). comm.c owns struct comm itself.
 *
 * Shared memory between same-host ranks (issue 7) is a transport of the cpu backend, not a
 * backend: comm_cpu.c's init reads every rank's host identity from the store
 * ("comm/<id>/host/<rank>", topo.c) and uses comm_shm.c for the ranks of a host (the
 * backend's files are listed in comm_cpu_internal.h); the TCP ring keeps its key layout
 * "comm/<id>/<ring rank>" = "host:port nonce", where the ring is over all ranks or,
 * hierarchically, over one leader per host (ring rank = host index).
 */
#ifndef DDP_LIBDDP_COMM_INTERNAL_H
#define DDP_LIBDDP_COMM_INTERNAL_H

#include "ddp/comm.h"

#define COMM_DEFAULT_TIMEOUT_MS  60000
#define COMM_DEFAULT_CHUNK_BYTES (256 * 1024)
#define COMM_SLICE_US            100 /* the comm thread's scheduler time slice (comm_cpu.c) */
#define COMM_LOCAL_ADDR_MAX      256

struct comm {
    const struct comm_ops *ops;
    int rank;
    int world_size;
    struct comm_opts opts;                /* opts.local_addr points at local_addr below */
    char local_addr[COMM_LOCAL_ADDR_MAX]; /* "" = use the rendezvous connection's address */
    void *impl;                           /* the backend's state */
};

extern const struct comm_ops comm_cpu_ops;
/* The transport the cpu backend chose: "tcp", "shm", "hier" ("none" at world size 1). */
const char *comm_cpu_transport(const struct comm *c);
/* Its shared-memory segment's name, or NULL when it has none. */
const char *comm_cpu_shm_name(const struct comm *c);

#ifdef DDP_HAVE_CUDA
/* The NCCL backend lives in libddpgpu.so (libddp/gpu/), loaded on first use by
 * libddp/gpu/gpu_load.c so that CPU jobs never map the CUDA libraries. comm_nccl_ops_get()
 * returns its ops, or NULL with *why (may be NULL) saying why the library cannot be loaded;
 * comm_nccl_available() says whether a GPU is visible (0 when the library cannot load). */
const struct comm_ops *comm_nccl_ops_get(const char **why);
int comm_nccl_available(void);
#endif

#endif
