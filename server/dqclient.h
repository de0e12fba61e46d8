/*
 * dqclient.h - a client of a dqlite cluster over its wire protocol (server/dqwire.h): find
 * the leader, open a database, run SQL with parameters, read rows, manage the cluster's
 * membership. It is the transport of ddpd's replicated store (--cluster); it needs no
 * libdqlite, only a socket to a dqlite node.
 *
 * Never a hang: every connect, read and write waits at most opts.timeout_ms (poll), and the
 * search for the leader at most opts.leader_timeout_ms in all.
 *
 * Connection states:
 *
 *     dqclient_open() ──▶ CONNECTED (to the leader, database open) ──I/O error, timeout,──▶ BROKEN
 *                            ▲                                       bad response          │
 *                            └─────────────── dqclient_reconnect() ◀──────────────────────┘
 *
 * A request that fails with an I/O error, a timeout or a malformed answer leaves the client
 * BROKEN: every later call answers DDP_EUNAVAIL until dqclient_reconnect() finds the leader
 * again. The client never resends a request by itself: after a lost connection a write may
 * or may not have been applied, and a transaction open on the old connection is gone, so
 * only the caller (who knows where its transaction began) can retry. A dqlite "not leader"
 * or "leadership lost" failure is DDP_EUNAVAIL too, but leaves the connection CONNECTED.
 *
 * Errors: 0, or a negative code of common/err.h with a message that names the node, the
 * request and the SQL (cut to 80 characters) and dqlite's own message and code:
 *   DDP_EUNAVAIL  no leader found, connection lost, not leader (dqlite's code kept)
 *   DDP_ETIMEOUT  a connect, read or write ran past opts.timeout_ms (client now BROKEN)
 *   DDP_EPEER     the node answered something malformed or unexpected (client now BROKEN)
 *   DDP_EABORTED  SQLITE_BUSY / SQLITE_LOCKED: try the transaction again
 *   DDP_EINVAL    bad arguments (too many parameters, a NUL in text)
 *   DDP_ETOOBIG   an answer past DQCLIENT_MAX_BODY or a result past DQCLIENT_MAX_RESULT
 *   DDP_EIO       any other dqlite failure (SQL errors, constraints)
 * dqclient_failure_code() gives the last failure's dqlite/SQLite code (2067: UNIQUE ...).
 *
 * Not thread safe: one thread uses a client at a time.
 */
#ifndef DDP_SERVER_DQCLIENT_H
#define DDP_SERVER_DQCLIENT_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "server/dqwire.h"

#define DQCLIENT_MAX_BODY   (16u << 20) /* one answer's body */
#define DQCLIENT_MAX_RESULT (64u << 20) /* all ROWS bodies of one query */
#define DQCLIENT_MAX_NODES  64
#define DQCLIENT_ADDR_MAX   128

struct dqclient;
struct dqclient_stmt;

struct dqclient_opts {
    int64_t timeout_ms;        /* each connect, read, write; 0: 5000 */
    int64_t leader_timeout_ms; /* finding the leader, all tries; 0: 10000 */
    uint64_t client_id;        /* sent in CLIENT; 0: the process id */
    /* 1: only the addresses given, each only while it is the leader itself: no member is
     * learned and a node naming another leader is not followed (the search goes on until
     * one of the given nodes leads or the deadline). ddpd's coordinator talks to its own
     * node this way, so that a replica that lost the leadership cannot write through the
     * new leader. */
    int pinned;
};

/* The outcome of a write. */
struct dqclient_result {
    int64_t last_insert_id;
    int64_t rows_affected;
};

/* A query's rows. vals holds nrows * ncols values, row-major; names and text/blob values
 * live in the rows' own storage until dqclient_rows_free(). */
struct dqclient_rows {
    size_t ncols;
    const char **cols;
    size_t nrows;
    struct dqwire_value *vals;
    char **bodies; /* private: the ROWS bodies the values point into */
    size_t nbodies;
};

/* A member of the cluster. */
struct dqclient_server {
    uint64_t id;
    char address[DQCLIENT_ADDR_MAX];
    uint64_t role; /* enum dqwire_role */
};

/* Connects to the leader among addrs ("HOST:PORT" or "[V6]:PORT", numeric addresses only,
 * copied), registers as a client and opens database db (created if new). opts may be NULL.
 * Each connection also asks the leader for the cluster's members and adds those addrs lacks
 * (at most DQCLIENT_MAX_NODES in all) to the addresses a later reconnect tries.
 * On success *out is the client (caller frees with dqclient_close()); on error nothing is
 * left open. */
int dqclient_open(const char *const *addrs, size_t naddrs, const char *db,
                  const struct dqclient_opts *opts, struct dqclient **out, struct ddp_err *err);
/* Asks the one node at addr whom it knows as leader, on a connection of its own: *id and
 * leader (its address; id 0 and "" while the node knows none, during an election or when it
 * is not a voter). Bounded by opts->timeout_ms (opts may be NULL: 5000). */
int dqclient_leader_of(const char *addr, const struct dqclient_opts *opts, uint64_t *id,
                       char *leader, size_t size, struct ddp_err *err);
/* Closes the connection and frees; accepts NULL. */
void dqclient_close(struct dqclient *c);

/* Connects a TCP socket to addr ("HOST:PORT", numeric IPv4 or IPv6) within timeout_ms, with
 * TCP_NODELAY set (a dqlite message is one small write answered by one small read: Nagle's
 * algorithm against the peer's delayed ACK costs 40 ms). *out is the caller's, non-blocking
 * and close-on-exec. A refused connection is DDP_EUNAVAIL, a timeout DDP_ETIMEOUT. */
int dqclient_tcp_connect(const char *addr, int64_t timeout_ms, int *out, struct ddp_err *err);
/* Drops the connection (if any) and finds the leader again, as dqclient_open() did; prepared
 * statements of the old connection are dead (their calls answer DDP_EUNAVAIL). */
int dqclient_reconnect(struct dqclient *c, struct ddp_err *err);
/* The number of addresses a reconnect tries (those given and those learned). */
size_t dqclient_naddrs(const struct dqclient *c);
/* The address of the node connected to (the leader when it was found), "" when BROKEN. */
const char *dqclient_node(const struct dqclient *c);
/* 1 when CONNECTED. */
int dqclient_connected(const struct dqclient *c);
/* The code of the last FAILURE answer (0 when the last call got none). */
uint64_t dqclient_failure_code(const struct dqclient *c);

/* Runs sql (which may hold several statements; the parameters bind to the first) with n
 * parameters. res (may be NULL) receives the last statement's outcome. BEGIN, COMMIT and
 * ROLLBACK go through here: a transaction lives on this connection. */
int dqclient_exec(struct dqclient *c, const char *sql, const struct dqwire_value *params, size_t n,
                  struct dqclient_result *res, struct ddp_err *err);
/* Runs one query and reads all its rows (every ROWS part) into *out (caller frees with
 * dqclient_rows_free()). */
int dqclient_query(struct dqclient *c, const char *sql, const struct dqwire_value *params, size_t n,
                   struct dqclient_rows **out, struct ddp_err *err);
void dqclient_rows_free(struct dqclient_rows *r);

/* Prepares one statement on the leader; *out (caller frees with dqclient_stmt_free(), which
 * finalizes it on the node) belongs to this connection. */
int dqclient_prepare(struct dqclient *c, const char *sql, struct dqclient_stmt **out,
                     struct ddp_err *err);
/* The number of parameters the statement takes. */
size_t dqclient_stmt_nparams(const struct dqclient_stmt *s);
int dqclient_stmt_exec(struct dqclient_stmt *s, const struct dqwire_value *params, size_t n,
                       struct dqclient_result *res, struct ddp_err *err);
int dqclient_stmt_query(struct dqclient_stmt *s, const struct dqwire_value *params, size_t n,
                        struct dqclient_rows **out, struct ddp_err *err);
/* Sends FINALIZE when the statement's connection is still the client's, and frees; accepts
 * NULL. A failed FINALIZE leaves the client BROKEN (the next call says so). */
void dqclient_stmt_free(struct dqclient_stmt *s);

/* The cluster as the leader sees it: up to max members into s, *n the count. */
int dqclient_cluster(struct dqclient *c, struct dqclient_server *s, size_t max, size_t *n,
                     struct ddp_err *err);
/* Adds node id at address (as a spare), gives node id a role, removes node id, hands the
 * leadership to node id (0: to any). All through the leader. */
int dqclient_add(struct dqclient *c, uint64_t id, const char *address, struct ddp_err *err);
int dqclient_assign(struct dqclient *c, uint64_t id, enum dqwire_role role, struct ddp_err *err);
int dqclient_remove(struct dqclient *c, uint64_t id, struct ddp_err *err);
int dqclient_transfer(struct dqclient *c, uint64_t id, struct ddp_err *err);

/* Value constructors for parameter lists (text and blob borrowed). */
struct dqwire_value dqclient_int(int64_t v);
struct dqwire_value dqclient_float(double v);
struct dqwire_value dqclient_text(const char *s);
struct dqwire_value dqclient_blob(const void *p, size_t len);
struct dqwire_value dqclient_null(void);

#endif
