/*
 * peer.h - how two ranks of the CPU backend find and trust each other over TCP: the one
 * helper the ring (ring.c) and recursive doubling (rdouble.c) both connect with. Private to
 * libddp/comm/.
 *
 * A rank listens on an ephemeral port at the address it publishes, "host:port nonce", under
 * a store key (host = opts.local_addr, else the local address of its store connection: the
 * address MASTER_ADDR's route leaves this host by); only where opts.local_addr is not this
 * host's (NAT) or does not resolve does it listen on every address, with a warning. A rank that connects fetches that value, connects (retrying refusals with
 * backoff until the deadline) and says hello: magic, its own index, the comm id and the
 * listener's nonce. The listener accepts, checks the hello, and drops (and logs) every
 * connection whose hello is wrong, going on until the deadline.
 */
#ifndef DDP_LIBDDP_COMM_PEER_H
#define DDP_LIBDDP_COMM_PEER_H

#include <stdint.h>

#include "common/err.h"
#include "ddp/rdzv.h"
#include "libddp/comm/comm_cpu_internal.h"
#include "libddp/net.h"

#define PEER_NONCE_HEX 32

/* A listening socket and the nonce a peer must echo. Owned by the caller: release with
 * peer_listener_close(). */
/* Connections accepted whose hello is not complete yet, served all at once (a silent one
 * never holds up the others), at most this many; a newcomer evicts the oldest. */
#define PEER_PENDING_MAX 16

struct peer_pending {
    int fd;
    size_t got;            /* hello bytes received */
    unsigned char buf[64]; /* the hello so far (sizeof(struct hello_msg) bytes, peer.c) */
    int64_t deadline;      /* dropped when its hello is not complete by then */
};

struct peer_listener {
    int fd;
    char nonce[PEER_NONCE_HEX + 1];
    struct peer_pending pend[PEER_PENDING_MAX]; /* kept across peer_accept calls */
    int npend;
};

/* What a peer published. */
struct peer_addr {
    char host[NET_ADDR_MAX];
    int port;
    char nonce[PEER_NONCE_HEX + 1];
    char name[PEER_NAME_MAX]; /* "host:port" or "[v6]:port", for messages */
};

/* Listens (backlog connections) and publishes this rank's address under key. `what`
 * ("ring", "recursive doubling") prefixes the errors. A local address longer than an
 * address can be is refused (DDP_EINVAL), not cut short. On error nothing is left open. */
int peer_listen(struct comm *c, struct rdzv *r, const char *key, int backlog, const char *what,
                struct peer_listener *pl, struct ddp_err *err);
/* Closes the listener and its pending connections (a listener with fd -1 is fine). */
void peer_listener_close(struct peer_listener *pl);

/* Fetches and parses the address published under key by global rank `rank`, waiting
 * until deadline_ms. */
int peer_fetch(struct comm *c, struct rdzv *r, const char *key, int rank, int64_t deadline_ms,
               struct peer_addr *out, struct ddp_err *err);

/* Connects to pa (global rank `rank`, for the errors) and says hello as index `self` of
 * comm `id`. On success *fd_out is the connected socket (the caller closes it); on error
 * nothing is left open. */
int peer_connect(const struct peer_addr *pa, int rank, uint32_t self, uint64_t id,
                 int64_t deadline_ms, const char *what, int *fd_out, struct ddp_err *err);

/* Accepts on pl until a connection says a right hello for comm id from an index that
 * want(ctx, index) accepts. On success *fd_out is that socket (the caller closes it) and
 * *index_out the index it said. The error is net_accept's (deadline passed), in err
 * without a prefix, for the caller to word. */
int peer_accept(struct comm *c, struct peer_listener *pl, uint64_t id, int64_t deadline_ms,
                int (*want)(void *ctx, uint32_t index), void *ctx, const char *what,
                uint32_t *index_out, int *fd_out, struct ddp_err *err);

#endif
