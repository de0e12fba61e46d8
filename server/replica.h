/*
 * replica.h - ddpd as one replica of a cluster (ddpd --cluster, docs/ha.md): the dqlite node it
 * embeds (Raft-replicated SQLite, libdqlite), its joining of the cluster, who leads, and the
 * replicated table of the replicas' API addresses through which followers name the leader.
 *
 * The node holds the data; the replica whose node is the Raft leader runs the coordinator on a
 * store pinned to its own node (replica_open_store), so a replica that lost the leadership
 * cannot write through the new one: its writes fail with "not leader".
 *
 * Ownership: replica_start() makes *out, replica_stop() stops the node and frees.
 * Thread safety: the main thread polls and opens stores; replica_describe() and
 * replica_members() may run in HTTP threads (a mutex guards the side connection).
 * Built without libdqlite, replica_start() refuses, naming the packages.
 */
#ifndef DDP_SERVER_REPLICA_H
#define DDP_SERVER_REPLICA_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct replica;
struct store;

struct replica_opts {
    uint64_t node_id;         /* 1 founds the cluster on its first start; others join */
    const char *raft_address; /* numeric HOST:PORT the node listens on for replicas */
    const char *const *join;  /* raft addresses of members (needed by a new node other than 1) */
    size_t njoin;
    const char *data_dir;  /* the node's data, created 0700 */
    const char *advertise; /* this replica's API base URL, as clients reach it */
    int latency_ms;        /* the network's round trip for Raft's timers; 0: dqlite's default */
};

/* 0 when addr is a raft address dqlite 1.11 can use: numeric IPv4 and a port ("10.0.0.1:8471";
 * it parses addresses with uv_ip4_addr alone: no names, no IPv6), else DDP_EINVAL naming
 * what (the flag or field). */
int replica_check_address(const char *what, const char *addr, struct ddp_err *err);
/* Creates the data folder, starts the node and, given join addresses, makes it a voter of
 * the cluster (ADD then ASSIGN through the leader; nothing when it is one already), within
 * 30 s. */
int replica_start(const struct replica_opts *o, struct replica **out, struct ddp_err *err);
/* dqlite's recovery after a lost quorum (docs/ha.md), on a stopped node's data: rewrites
 * the Raft configuration in data_dir to exactly the n voters ids[i] at addrs[i] (this node
 * among them), then returns; nothing is started. Run on the survivor with the newest log, copy
 * its data folder to the other survivors, start them all. */
int replica_recover(uint64_t node_id, const char *raft_address, const char *data_dir,
                    const uint64_t *ids, const char *const *addrs, size_t n, struct ddp_err *err);
/* Hands the leadership to another voter when this node holds it and is not the only voter
 * (a graceful stop, so the others need not wait an election timeout; a failed transfer is a
 * warning, the node stops anyway), then stops the node and frees; accepts NULL. */
void replica_stop(struct replica *r);

/* Asks this node who leads: *self 1 when this replica does, else 0 with leader (size bytes)
 * the leading replica's API URL, "" when no leader is known or its URL is not read yet.
 * Fails only when the node does not answer. */
int replica_poll(struct replica *r, int *self, char *leader, size_t size, struct ddp_err *err);
/* The store on this node only (server/store.h, pinned), for the coordinator of the leader;
 * also records this replica's API URL in the replicated table (so followers redirect here).
 * DDP_EUNAVAIL when this node does not lead. */
int replica_open_store(struct replica *r, struct store **out, struct ddp_err *err);
/* While this replica leads: 0 when another replica won after this one's last
 * replica_open_store() (ddp_epoch moved: the coordinator loaded then is stale), else 1
 * (also when it cannot tell now). Main thread only. */
int replica_still_ours(struct replica *r);
/* The epoch the last replica_open_store() wrote (coord_opts.fence_epoch). */
int64_t replica_epoch(const struct replica *r);
/* Hands the leadership to another voter when this node holds it (TRANSFER, on a connection
 * pinned to this node, waiting up to two election timeouts and a second). 0 when it moved
 * or this node does not lead (any more); REPLICA_HAND_OVER_STAY when it could not and the
 * other voters that answer are no majority without this node (one replica, or another one
 * down: stopping would take the quorum away, so it stays and tries again); else the failure's code (negative), the
 * others able to elect once this node stops. Each outcome is logged. */
#define REPLICA_HAND_OVER_STAY 1
int replica_hand_over(struct replica *r);
/* replica_stop() then stops the node without trying a hand-over (one just failed: ddpd gives
 * up leading, and a second transfer would only delay the election that the stop starts). */
void replica_forgo_hand_over(struct replica *r);

/* Adds node_id, raft_address and advertise to o (the /healthz answer). */
void replica_describe(struct replica *r, json_t *o);
/* The cluster as the leader sees it: {"members": [{"id", "raft_address", "role", "url"}...]}
 * (*out new, caller decrefs). */
int replica_members(struct replica *r, json_t **out, struct ddp_err *err);
/* Adds node id at raft address as a voter (admin; the node must be running, started with
 * --cluster and no --join); removes member id (not this replica) from the cluster (admin). */
int replica_add(struct replica *r, uint64_t id, const char *address, struct ddp_err *err);
int replica_remove(struct replica *r, uint64_t id, struct ddp_err *err);

#endif
