/*
 * dqclient_internal.h - what the two halves of the dqlite client share, and nothing else
 * includes: the connection (dqclient.c: sockets, the leader search, membership) and its
 * statements (dqclient_sql.c: SQL, parameters, rows). The contract is dqclient.h's.
 */
#ifndef DDP_SERVER_DQCLIENT_INTERNAL_H
#define DDP_SERVER_DQCLIENT_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "common/err.h"
#include "server/dqclient.h"

#define SQL_SHOWN 80 /* characters of SQL an error message quotes */

struct dqclient {
    char **addrs;
    size_t naddrs;
    char *db;
    struct dqclient_opts opts;
    int fd;
    char node[DQCLIENT_ADDR_MAX];
    uint32_t db_id;
    uint64_t gen;
    uint64_t failure_code;
    struct buf out; /* the request being sent (at most DQCLIENT_MAX_BODY) */
    int out_rc;     /* the first error appending to out, reported by roundtrip() */
    struct buf in;  /* the body of the last answer */
    int64_t cap;    /* monotonic ms no phase of a roundtrip waits past; 0 none (a search, a
                     * probe: dqclient_leader_of, try_node) */
};

struct dqclient_stmt {
    struct dqclient *c;
    uint64_t gen;
    uint32_t db_id, id;
    uint64_t nparams;
    char *sql;
};

/* Building a request in c->out: the first append error sticks in c->out_rc. */
void dqc_out_begin(struct dqclient *c, uint8_t type, size_t *start);
void dqc_out_end(struct dqclient *c, size_t start);
void dqc_out_u64(struct dqclient *c, uint64_t v);
void dqc_out_u32x2(struct dqclient *c, uint32_t lo, uint32_t hi);
void dqc_out_text(struct dqclient *c, const char *s);
/* The SQL as error messages quote it: cut to SQL_SHOWN characters, on one line. */
void dqc_shown_sql(const char *sql, char *out, size_t size);
/* Closes the connection (BROKEN). */
void dqc_drop(struct dqclient *c);
/* Sends c->out and reads one answer into c->in (*type its type). A FAILURE answer becomes an
 * error naming what (and sql when not NULL); another type than want (-1: any) is DDP_EPEER;
 * I/O errors drop the connection. */
int dqc_roundtrip(struct dqclient *c, const char *what, const char *sql, int want, int *type,
                  struct ddp_err *err);
/* A malformed answer to what: DDP_EPEER, the connection dropped. */
int dqc_bad_answer(struct dqclient *c, const char *what, struct ddp_err *err);

#endif
