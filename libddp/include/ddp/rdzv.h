/*
 * rdzv.h - the rendezvous store: a small TCP key-value store that rank 0 serves at
 * MASTER_ADDR:MASTER_PORT, like torch.distributed's TCPStore. Ranks use it to exchange
 * their ring addresses (and the NCCL unique id), and as a barrier.
 *
 * The first message of every connection carries the job secret (DDP_JOB_TOKEN, may be
 * empty), compared in constant time; the server answers a wrong secret with a refusal and
 * drops the connection (the client gets DDP_EPERM). Every call has a deadline
 * (timeout_ms): nothing here blocks forever.
 *
 * Thread safety: one struct rdzv is used by one thread at a time. Rank 0's serving thread is
 * internal and stops in rdzv_close().
 */
#ifndef DDP_RDZV_H
#define DDP_RDZV_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct rdzv;

/*
 * Opens the store. Rank 0 binds and serves on master_addr's address and master_port (on
 * every address, with a warning, where master_addr is not this host's or does not resolve)
 * and connects to itself; other ranks connect to master_addr:master_port, retrying until
 * timeout_ms. Errors: DDP_EEXIST when rank 0 finds the port already taken ("MASTER_PORT
 * 29500: 127.0.0.1:29500 is already in use"), DDP_ETIMEOUT when the store cannot be reached
 * in time, DDP_EPERM when the secret is refused. Caller frees with rdzv_close().
 */
int rdzv_open(const char *master_addr, int master_port, int rank, int world_size,
              const char *secret, int64_t timeout_ms, struct rdzv **out, struct ddp_err *err);

/* Closes the connection; rank 0 also waits until no other rank is connected (at most the
 * open's timeout_ms, and never more than 10 s), then stops serving. Accepts NULL. */
void rdzv_close(struct rdzv *r);

/* Sets key (at most 256 bytes) to value (at most 1 MiB, copied). */
int rdzv_set(struct rdzv *r, const char *key, const void *value, size_t len, struct ddp_err *err);

/* Waits until key exists (or timeout_ms passes: DDP_ETIMEOUT) and returns a copy of its
 * value in *value (caller frees) and its length in *len. */
int rdzv_get(struct rdzv *r, const char *key, int64_t timeout_ms, void **value, size_t *len,
             struct ddp_err *err);

/* Waits until every key exists (DDP_ETIMEOUT after timeout_ms). */
int rdzv_wait(struct rdzv *r, const char *const *keys, int nkeys, int64_t timeout_ms,
              struct ddp_err *err);

/* Adds delta to the integer at key (missing = 0) and returns the new value in *out. */
int rdzv_add(struct rdzv *r, const char *key, int64_t delta, int64_t *out, struct ddp_err *err);

/* Every rank calls it with the same name; returns when all world_size ranks have. */
int rdzv_barrier(struct rdzv *r, const char *name, int64_t timeout_ms, struct ddp_err *err);

/* Limits of the store, enforced on both ends. */
#define RDZV_KEY_MAX   256
#define RDZV_VALUE_MAX (1024 * 1024)

/* This rank's address on its connection to the store ("10.0.0.2"): the address peers can
 * reach it at, as MASTER_ADDR's route sees it. Returns 0 or DDP_EIO. */
int rdzv_local_host(const struct rdzv *r, char *buf, size_t size);

/* A number that is the same on every rank for the n-th call on that rank (0, 1, 2, ...):
 * users of the store (comm_new) prefix their keys with it so that two uses never meet. */
uint64_t rdzv_next_id(struct rdzv *r);

/* MASTER_ADDR and MASTER_PORT as given to rdzv_open (the shared-memory segment's name
 * hashes them, so two jobs on one host never meet). */
const char *rdzv_master_host(const struct rdzv *r);
int rdzv_master_port(const struct rdzv *r);

int rdzv_rank(const struct rdzv *r);
int rdzv_world_size(const struct rdzv *r);

#endif
