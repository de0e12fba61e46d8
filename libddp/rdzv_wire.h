/*
 * rdzv_wire.h - the rendezvous store's wire format (private to libddp: the server in
 * rdzv_server.c and the client in rdzv.c share it). The format and its invariants are
 * described at the top of rdzv_wire.c.
 *
 * Encoders append one whole frame (length prefix included) to a struct buf that the caller
 * owns and releases; a frame that would break RDZV_FRAME_MAX is refused with DDP_ETOOBIG and
 * leaves the buffer as it was. Decoders never allocate: what they return points into the
 * bytes they were given (borrowed, valid as long as those are).
 */
#ifndef DDP_LIBDDP_RDZV_WIRE_H
#define DDP_LIBDDP_RDZV_WIRE_H

#include <stddef.h>
#include <stdint.h>

#include "common/buf.h"
#include "ddp/rdzv.h"

/* Bounds of the wire format (RDZV_KEY_MAX and RDZV_VALUE_MAX are public, in rdzv.h). */
#define RDZV_FRAME_MAX  (RDZV_VALUE_MAX + 1024) /* body bytes of one frame */
#define RDZV_SECRET_MAX 1024                    /* the secret's bytes + 1 */
/* The largest hello frame, length prefix included: all a connection may send before it is
 * authenticated. */
#define RDZV_HELLO_FRAME_MAX (4 + 1 + 4 + 4 + (RDZV_SECRET_MAX - 1))
#define RDZV_WAIT_KEYS_MAX   1024 /* keys of one WAIT */

/* A request's first byte. */
enum rdzv_op {
    RDZV_OP_HELLO = 1,
    RDZV_OP_SET = 2,
    RDZV_OP_GET = 3,
    RDZV_OP_WAIT = 4,
    RDZV_OP_ADD = 5,
};

/* A reply's first byte. */
enum rdzv_status { RDZV_ST_OK = 0, RDZV_ST_TIMEOUT = 1, RDZV_ST_PERM = 2, RDZV_ST_INVAL = 3 };

/* "hello", "set", "get", "wait", "add"; "unknown" for any other byte. */
const char *rdzv_wire_op_name(int op);

/* ---- framing ---- */

/* The body length of the frame whose 4-byte header is hdr, in *len: 0, or -1 when it is out
 * of [1, RDZV_FRAME_MAX] (a broken peer; *len holds the length read, for the message). */
int rdzv_wire_frame_len(const uint8_t hdr[4], uint32_t *len);

/* ---- requests ---- */

/* Each appends one request frame to b: 0, or DDP_ETOOBIG (b unchanged). The caller has
 * checked keys (1..RDZV_KEY_MAX bytes), the value and the key count. */
int rdzv_wire_hello(struct buf *b, uint32_t rank, uint32_t world, const char *secret);
int rdzv_wire_set(struct buf *b, const char *key, const void *value, size_t len);
int rdzv_wire_get(struct buf *b, uint32_t timeout_ms, const char *key);
int rdzv_wire_wait(struct buf *b, uint32_t timeout_ms, const char *const *keys, int nkeys);
int rdzv_wire_add(struct buf *b, int64_t delta, const char *key);

/* A decoded request; the fields its op does not use are zero. */
struct rdzv_req {
    uint8_t op;
    uint32_t rank, world;  /* HELLO */
    const uint8_t *secret; /* HELLO: secret_len bytes, not NUL-terminated */
    size_t secret_len;     /* HELLO: < RDZV_SECRET_MAX */
    uint32_t timeout_ms;   /* GET, WAIT */
    int64_t delta;         /* ADD */
    const uint8_t *key;    /* SET, GET, ADD: klen bytes */
    size_t klen;           /* 1..RDZV_KEY_MAX */
    const uint8_t *value;  /* SET: len bytes */
    size_t len;            /* SET: <= RDZV_VALUE_MAX */
    const uint8_t *keys;   /* WAIT: nkeys entries (u16 klen, key), checked; walk them
                                * with rdzv_wire_next_key() */
    size_t nkeys;          /* WAIT: <= RDZV_WAIT_KEYS_MAX */
    size_t keys_len;       /* WAIT: bytes at keys */
};

/* What rdzv_wire_decode() found wrong. */
enum rdzv_decode { RDZV_DEC_OK = 0, RDZV_DEC_MALFORMED = -1, RDZV_DEC_UNKNOWN_OP = -2 };

/*
 * Decodes one request body (len >= 1 bytes, the op byte first) into *q: RDZV_DEC_OK, or
 * RDZV_DEC_UNKNOWN_OP (q->op is set), or RDZV_DEC_MALFORMED (q->op is set; a field is
 * short, a key is empty or too long, a bound is broken or bytes are left over).
 */
int rdzv_wire_decode(const uint8_t *body, size_t len, struct rdzv_req *q);

/* Walks the keys of a decoded WAIT: *pos starts at 0; each call returns the next key and its
 * length in *klen, NULL after the last. */
const uint8_t *rdzv_wire_next_key(const struct rdzv_req *q, size_t *pos, size_t *klen);

/* ---- replies ---- */

/* Appends one reply frame (status, payload) to b: 0, or DDP_ETOOBIG (b unchanged). */
int rdzv_wire_reply(struct buf *b, int status, const void *payload, size_t len);
/* The same, payload the NUL-terminated text. */
int rdzv_wire_reply_text(struct buf *b, int status, const char *text);
/* The same for ADD's answer: RDZV_ST_OK and the new value as an i64. */
int rdzv_wire_reply_i64(struct buf *b, int64_t v);
/* Reads ADD's answer payload (exactly 8 bytes) into *v: 0, or -1 when malformed. */
int rdzv_wire_i64(const uint8_t *payload, size_t len, int64_t *v);

#endif
