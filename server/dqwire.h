/*
 * dqwire.h - dqlite's client wire protocol (version 1) as pure functions on buffers: no
 * sockets, no clock. server/dqclient.c puts these bytes on a connection.
 *
 * The protocol, as dqlite 1.11 speaks it:
 *   - The client opens with one 8-byte word, the protocol version (1), little-endian.
 *   - Then every request and every response is a message: an 8-byte header (4-byte count of
 *     8-byte words in the body, 1-byte type, 1-byte revision, 2 bytes reserved) and a body
 *     of that many words. Every integer is little-endian.
 *   - Body fields: uint64 / int64 / double take one word; two uint32 share one word; text is
 *     NUL-terminated and zero-padded to a multiple of 8 bytes (so 8 characters take 16);
 *     a blob is a uint64 length and the bytes, zero-padded to 8.
 *   - Parameters (EXEC, QUERY, EXEC_SQL, QUERY_SQL) follow the fixed fields as a tuple: one
 *     byte with the count (at most 255), one type byte per value, zero-padded so that count
 *     and types fill whole words, then the values.
 *   - A ROWS response is the column count (uint64), the column names (text each), then rows:
 *     each row a header of 4-bit types (column 0 in the low nibble of byte 0), padded to a
 *     word, then the values; then one marker word, DQWIRE_ROWS_DONE when the result is
 *     complete or DQWIRE_ROWS_PART when another ROWS message follows (which repeats the
 *     column count and names).
 *
 * Invariants: every encoder appends whole words to a struct buf between dqwire_msg_begin()
 * and dqwire_msg_end(), which patches the word count; every decoder reads only inside the
 * (pointer, length) it was given, refuses what does not fit with DDP_EINVAL and a message,
 * and writes its out-parameters only on success. Decoded text and blob values point into the
 * caller's body buffer (borrowed): they live as long as that buffer.
 */
#ifndef DDP_SERVER_DQWIRE_H
#define DDP_SERVER_DQWIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/err.h"

struct buf;

#define DQWIRE_PROTOCOL_VERSION 1
#define DQWIRE_HEADER_SIZE      8
#define DQWIRE_MAX_PARAMS       255
#define DQWIRE_ROWS_PART        0xeeeeeeeeeeeeeeeeULL
#define DQWIRE_ROWS_DONE        0xffffffffffffffffULL

/* Request types. */
enum dqwire_request {
    DQWIRE_REQ_LEADER = 0,
    DQWIRE_REQ_CLIENT = 1,
    DQWIRE_REQ_OPEN = 3,
    DQWIRE_REQ_PREPARE = 4,
    DQWIRE_REQ_EXEC = 5,
    DQWIRE_REQ_QUERY = 6,
    DQWIRE_REQ_FINALIZE = 7,
    DQWIRE_REQ_EXEC_SQL = 8,
    DQWIRE_REQ_QUERY_SQL = 9,
    DQWIRE_REQ_INTERRUPT = 10,
    DQWIRE_REQ_ADD = 12,
    DQWIRE_REQ_ASSIGN = 13,
    DQWIRE_REQ_REMOVE = 14,
    DQWIRE_REQ_CLUSTER = 16,
    DQWIRE_REQ_TRANSFER = 17,
};

/* Response types. */
enum dqwire_response {
    DQWIRE_RESP_FAILURE = 0,
    DQWIRE_RESP_SERVER = 1,
    DQWIRE_RESP_WELCOME = 2,
    DQWIRE_RESP_SERVERS = 3,
    DQWIRE_RESP_DB = 4,
    DQWIRE_RESP_STMT = 5,
    DQWIRE_RESP_RESULT = 6,
    DQWIRE_RESP_ROWS = 7,
    DQWIRE_RESP_EMPTY = 8,
};

/* Value types, as SQLite numbers them plus dqlite's three. */
enum dqwire_type {
    DQWIRE_INTEGER = 1,
    DQWIRE_FLOAT = 2,
    DQWIRE_TEXT = 3,
    DQWIRE_BLOB = 4,
    DQWIRE_NULL = 5,
    DQWIRE_UNIXTIME = 9,
    DQWIRE_ISO8601 = 10,
    DQWIRE_BOOLEAN = 11,
};

/* Raft roles in ASSIGN and SERVERS. */
enum dqwire_role { DQWIRE_VOTER = 0, DQWIRE_STANDBY = 1, DQWIRE_SPARE = 2 };

/* dqlite's failure codes that say where a request went (SQLite extended IOERR codes). */
#define DQWIRE_CODE_NOT_LEADER      (10 | (40 << 8))
#define DQWIRE_CODE_LEADERSHIP_LOST (10 | (41 << 8))

/* One value. INTEGER, UNIXTIME, BOOLEAN use i; FLOAT uses f; TEXT and ISO8601 use p (a
 * NUL-terminated string) and len (its strlen); BLOB uses p and len; NULL uses nothing. */
struct dqwire_value {
    int type;
    int64_t i;
    double f;
    const void *p;
    size_t len;
};

/* A decoded header. */
struct dqwire_header {
    uint32_t words;
    uint8_t type;
    uint8_t revision;
};

/* Reading position inside a body: p and left bytes remain. */
struct dqwire_cursor {
    const uint8_t *p;
    size_t left;
};

/* --- encoding (appends to b; a buf without a max only aborts on out-of-memory) ---------- */

/* The 8-byte handshake. */
int dqwire_handshake(struct buf *b);
/* Starts a message of type; *start receives the header's offset for dqwire_msg_end(). */
int dqwire_msg_begin(struct buf *b, uint8_t type, size_t *start);
/* Pads the body to a word and writes its word count into the header at start. DDP_ETOOBIG
 * when the body is longer than 2^32-1 words. */
int dqwire_msg_end(struct buf *b, size_t start);
int dqwire_put_u64(struct buf *b, uint64_t v);
/* Two uint32 in one word (db id and statement id). */
int dqwire_put_u32x2(struct buf *b, uint32_t lo, uint32_t hi);
/* s with its NUL, zero-padded to a word. */
int dqwire_put_text(struct buf *b, const char *s);
/* The parameter tuple for n values (n <= DQWIRE_MAX_PARAMS, else DDP_EINVAL). A TEXT value
 * must not contain a NUL (DDP_EINVAL). An unknown type is DDP_EINVAL. On error b may hold
 * a partial tuple: the caller drops the message. */
int dqwire_put_params(struct buf *b, const struct dqwire_value *v, size_t n, struct ddp_err *err);

/* --- decoding ------------------------------------------------------------------------- */

/* The header in h[0..7]. Never fails. */
void dqwire_header_decode(const uint8_t *h, struct dqwire_header *out);

void dqwire_cursor_init(struct dqwire_cursor *c, const void *p, size_t len);
int dqwire_get_u64(struct dqwire_cursor *c, uint64_t *out);
int dqwire_get_u32x2(struct dqwire_cursor *c, uint32_t *lo, uint32_t *hi);
/* *out points into the buffer; *len (may be NULL) gets its strlen. DDP_EINVAL when no NUL
 * lies inside the remaining bytes. */
int dqwire_get_text(struct dqwire_cursor *c, const char **out, size_t *len);
int dqwire_get_blob(struct dqwire_cursor *c, const void **out, size_t *len);
/* One value of type t (as in a row or a parameter tuple). */
int dqwire_get_value(struct dqwire_cursor *c, int t, struct dqwire_value *out);
/* A parameter tuple (the inverse of dqwire_put_params): *n values into v[0..max-1]. */
int dqwire_get_params(struct dqwire_cursor *c, struct dqwire_value *v, size_t max, size_t *n);

/* Response bodies. Each checks nothing about the type byte: the caller chose the decoder. */
int dqwire_decode_failure(const void *body, size_t len, uint64_t *code, const char **msg);
int dqwire_decode_server(const void *body, size_t len, uint64_t *id, const char **addr);
int dqwire_decode_welcome(const void *body, size_t len, uint64_t *heartbeat_ms);
int dqwire_decode_db(const void *body, size_t len, uint32_t *db_id);
int dqwire_decode_stmt(const void *body, size_t len, uint32_t *db_id, uint32_t *stmt_id,
                       uint64_t *nparams);
int dqwire_decode_result(const void *body, size_t len, uint64_t *last_insert_id,
                         uint64_t *rows_affected);

/* One server of a SERVERS response (format 1: id, address, role). */
struct dqwire_server {
    uint64_t id;
    const char *address; /* borrowed from the body */
    uint64_t role;
};
/* Up to max servers into s; *n receives the count. DDP_ETOOBIG when there are more. */
int dqwire_decode_servers(const void *body, size_t len, struct dqwire_server *s, size_t max,
                          size_t *n);

/* One ROWS message, decoded. Names and text/blob values borrow from the body; the arrays
 * are the decoder's, freed by dqwire_rows_release(). */
struct dqwire_rows {
    size_t ncols;
    const char **cols; /* ncols names */
    size_t nrows;
    struct dqwire_value *vals; /* nrows * ncols, row-major */
    int more;                  /* 1: DQWIRE_ROWS_PART, another ROWS message follows */
};
/* Decodes a ROWS body into *out (which the caller releases). On error *out is untouched and
 * nothing is allocated. */
int dqwire_decode_rows(const void *body, size_t len, struct dqwire_rows *out, struct ddp_err *err);
/* Frees the arrays; accepts NULL; *r is empty after. */
void dqwire_rows_release(struct dqwire_rows *r);

/* The name of a response type ("ROWS"), "?" when unknown: for error messages. */
const char *dqwire_response_name(int type);

#endif
