/*
 * rdzv_server.h - rank 0's rendezvous store server (private to libddp; the client in rdzv.c
 * starts and stops it). One thread serves the key-value table over TCP in the wire format of
 * rdzv_wire.h; its invariants are at the top of rdzv_server.c.
 */
#ifndef DDP_LIBDDP_RDZV_SERVER_H
#define DDP_LIBDDP_RDZV_SERVER_H

#include <stdint.h>

#include "common/err.h"

struct rdzv_server;

/*
 * Listens on port at host's address (MASTER_ADDR, borrowed for the call) and starts the
 * serving thread for a job of world ranks that say secret (copied; shorter than
 * RDZV_SECRET_MAX bytes) in their hello. Where host is not an address of this machine (NAT,
 * a service address) or does not resolve yet, it listens on every address and logs a
 * warning saying so (net_listen_at). On success *out is the server (stop it with
 * rdzv_server_stop()); on failure *out is untouched. Errors: DDP_EEXIST when the port is
 * taken ("MASTER_PORT 29500: 127.0.0.1:29500 is already in use"), the listen error (naming
 * MASTER_ADDR and the address) otherwise, DDP_EIO/DDP_EINTERNAL when the wake pipe or the
 * thread cannot be made.
 */
int rdzv_server_start(const char *host, int port, int world, const char *secret,
                      struct rdzv_server **out, struct ddp_err *err);

/*
 * Waits (until deadline_ms, a time_mono_ms() value) until no other rank is connected, then
 * stops the thread and frees the server and everything it holds. Accepts NULL.
 */
void rdzv_server_stop(struct rdzv_server *s, int64_t deadline_ms);

#endif
