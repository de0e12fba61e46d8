/*
 * logship.h - worker output on its way to ddpd: splitting a byte stream into lines, making
 * each line a valid JSON string, and a bounded queue of lines numbered by seq that keeps
 * them until a heartbeat carrying them is answered 200.
 */
#ifndef DDP_AGENT_LOGSHIP_H
#define DDP_AGENT_LOGSHIP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

/* Longest line shipped, in bytes, prefix included: ddpd keeps this much of a line
 * (LOG_LINE_MAX in server/validate.h) and cuts the rest, so a longer line goes in pieces. */
#define LOGSHIP_LINE_MAX 4096

/* Splits a byte stream into lines of at most max bytes; holds the unfinished tail.
 * Zero-initialised it cuts at LOGSHIP_LINE_MAX; logship_split_init() sets another limit. */
struct logship_splitter {
    char buf[LOGSHIP_LINE_MAX + 1]; /* a piece, and room for the '\r' of a "\r\n" after it */
    size_t len;
    size_t max; /* longest piece; 0 or above LOGSHIP_LINE_MAX: LOGSHIP_LINE_MAX */
};

/* Called once per line, without its '\n' (line is not NUL-terminated). */
typedef void (*logship_emit_fn)(void *ctx, const char *line, size_t len);

/* An empty splitter whose pieces have at most max bytes (1 .. LOGSHIP_LINE_MAX). */
void logship_split_init(struct logship_splitter *s, size_t max);
/* The piece limit for lines shipped with prefix (may be NULL): LOGSHIP_LINE_MAX less the
 * prefix, so that prefix and piece together still fit what ddpd keeps. */
size_t logship_piece_max(const char *prefix);
/* Feeds n bytes; emits every completed line. A line longer than the limit goes out in pieces
 * of at most max bytes (the last one at its '\n'), cut before an unfinished UTF-8 character
 * and never right after a '\r' (logship_clean() would drop it); a line of exactly max bytes
 * is one line, also when "\r\n" ends it (emitted with its '\r', max + 1 bytes). */
void logship_split(struct logship_splitter *s, const char *data, size_t n, logship_emit_fn emit,
                   void *ctx);
/* Emits the unfinished tail (at end of stream), if any. */
void logship_split_flush(struct logship_splitter *s, logship_emit_fn emit, void *ctx);

/*
 * Returns a new NUL-terminated copy of line (len bytes, prefixed with prefix, which may be
 * NULL) that is valid UTF-8: invalid bytes and NUL become '?', a trailing '\r' is dropped.
 * The caller frees it.
 */
char *logship_clean(const char *prefix, const char *line, size_t len);

/* A FIFO of owned strings numbered by seq from 1; at most max kept (oldest dropped). */
struct logship_queue {
    char **items; /* ring of cap entries */
    size_t head;  /* index of the oldest */
    size_t count;
    size_t cap;
    size_t max;
    uint64_t first_seq; /* seq of the oldest item (next_seq when empty) */
    uint64_t next_seq;  /* seq the next pushed item gets */
    uint64_t dropped;   /* items dropped by the cap so far */
};

void logship_queue_init(struct logship_queue *q, size_t max);
void logship_queue_release(struct logship_queue *q);
/* Appends item (takes ownership); drops the oldest when full. */
void logship_queue_push(struct logship_queue *q, char *item);
/*
 * A new JSON array of copies of the oldest items: at most limit items and, except for the
 * first item, at most *bytes bytes of JSON text (logship_json_size); *bytes is decreased by
 * what was taken and *first receives the seq of the first item. Returns NULL (and leaves
 * *first and *bytes) when the queue is empty, limit is 0 or *bytes is 0.
 */
json_t *logship_queue_take(const struct logship_queue *q, size_t limit, size_t *bytes,
                           uint64_t *first);
/* An upper bound of the size of s as a JSON string (quotes and escapes included). */
size_t logship_json_size(const char *s);
/* The i-th oldest item (borrowed), i < count. */
const char *logship_queue_at(const struct logship_queue *q, size_t i);
/* Drops every item with seq <= upto (an answered beat carried them). */
void logship_queue_ack(struct logship_queue *q, uint64_t upto);

#endif
