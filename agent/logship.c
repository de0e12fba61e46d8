/*
 * logship.c - line splitting, UTF-8 cleaning and the acknowledged line queue.
 *
 * Invariants of struct logship_queue: items[head .. head+count) (mod cap) are owned strings;
 * the item at offset i has seq first_seq + i; first_seq + count == next_seq; count <= max.
 * Seqs only grow, so a re-sent item always carries the same seq (ddpd deduplicates by it).
 */
#include "agent/logship.h"

#include <stdlib.h>
#include <string.h>

#include "common/utf8.h"
#include "common/xalloc.h"

void logship_split_init(struct logship_splitter *s, size_t max)
{
    memset(s, 0, sizeof(*s));
    s->max = max > 0 && max < LOGSHIP_LINE_MAX ? max : LOGSHIP_LINE_MAX;
}

size_t logship_piece_max(const char *prefix)
{
    size_t plen = prefix ? strlen(prefix) : 0;
    /* A prefix that leaves no room at all is a caller's bug; keep pieces of one byte. */
    return plen + 1 < LOGSHIP_LINE_MAX ? LOGSHIP_LINE_MAX - plen : 1;
}

/* Where to cut a full piece of len bytes: before a UTF-8 character its last bytes leave
 * unfinished, so that neither piece turns it into '?'; len when the piece ends whole (or is
 * not UTF-8 there, which logship_clean() replaces anyway). */
static size_t logship_cut_at(const unsigned char *p, size_t len)
{
    for (size_t k = 1; k <= 3 && k <= len; k++) {
        unsigned char c = p[len - k];
        if ((c & 0xc0) == 0x80)
            continue; /* a continuation byte: look further back for its lead */
        size_t need = c >= 0xf0 ? 4 : c >= 0xe0 ? 3 : c >= 0xc0 ? 2 : 1;
        return need > k && k < len ? len - k : len;
    }
    return len;
}

void logship_split(struct logship_splitter *s, const char *data, size_t n, logship_emit_fn emit,
                   void *ctx)
{
    size_t max = s->max > 0 && s->max < LOGSHIP_LINE_MAX ? s->max : LOGSHIP_LINE_MAX;
    for (size_t i = 0; i < n; i++) {
        if (data[i] == '\n') {
            emit(ctx, s->buf, s->len);
            s->len = 0;
            continue;
        }
        /* A full piece goes out only when the line goes on past it: a line of exactly max
         * bytes is one line at its '\n', not a piece and an empty line; so is one ended by
         * "\r\n" (the buffer has room for that one '\r', which logship_clean() drops). */
        if (s->len == max && data[i] == '\r') {
            s->buf[s->len++] = data[i];
            continue;
        }
        if (s->len >= max) {
            size_t cut = logship_cut_at((const unsigned char *)s->buf, max);
            /* A '\r' at the end of a piece would be taken for its line end and dropped. */
            if (cut > 1 && s->buf[cut - 1] == '\r')
                cut--;
            emit(ctx, s->buf, cut);
            memmove(s->buf, s->buf + cut, s->len - cut);
            s->len -= cut;
        }
        s->buf[s->len++] = data[i];
    }
}

void logship_split_flush(struct logship_splitter *s, logship_emit_fn emit, void *ctx)
{
    if (s->len > 0)
        emit(ctx, s->buf, s->len);
    s->len = 0;
}

char *logship_clean(const char *prefix, const char *line, size_t len)
{
    size_t plen = prefix ? strlen(prefix) : 0;
    if (len > 0 && line[len - 1] == '\r')
        len--;
    char *out = xmalloc(plen + len + 1);
    if (plen)
        memcpy(out, prefix, plen);
    const unsigned char *p = (const unsigned char *)line;
    size_t o = plen;
    for (size_t i = 0; i < len;) {
        size_t k = utf8_char_len(p + i, len - i);
        if (k == 0) {
            out[o++] = '?';
            i++;
            continue;
        }
        memcpy(out + o, p + i, k);
        o += k;
        i += k;
    }
    out[o] = '\0';
    return out;
}

void logship_queue_init(struct logship_queue *q, size_t max)
{
    memset(q, 0, sizeof(*q));
    q->max = max ? max : 1;
    q->first_seq = 1;
    q->next_seq = 1;
}

void logship_queue_release(struct logship_queue *q)
{
    if (!q)
        return;
    for (size_t i = 0; i < q->count; i++)
        free(q->items[(q->head + i) % q->cap]);
    free(q->items);
    q->items = NULL;
    q->count = q->cap = q->head = 0;
    q->first_seq = q->next_seq;
}

static void logship_queue_drop_oldest(struct logship_queue *q)
{
    free(q->items[q->head]);
    q->items[q->head] = NULL;
    q->head = (q->head + 1) % q->cap;
    q->count--;
    q->first_seq++;
}

void logship_queue_push(struct logship_queue *q, char *item)
{
    if (q->count == q->max) {
        logship_queue_drop_oldest(q);
        q->dropped++;
    }
    if (q->count == q->cap) {
        size_t ncap = q->cap ? 2 * q->cap : 64;
        if (ncap > q->max)
            ncap = q->max;
        char **n = xcalloc(ncap, sizeof(char *));
        for (size_t i = 0; i < q->count; i++)
            n[i] = q->items[(q->head + i) % q->cap];
        free(q->items);
        q->items = n;
        q->cap = ncap;
        q->head = 0;
    }
    q->items[(q->head + q->count) % q->cap] = item;
    q->count++;
    q->next_seq++;
}

const char *logship_queue_at(const struct logship_queue *q, size_t i)
{
    return q->items[(q->head + i) % q->cap];
}

size_t logship_json_size(const char *s)
{
    size_t n = 2;
    for (const unsigned char *p = (const unsigned char *)s; *p; p++)
        n += (*p < 0x20 || *p == '"' || *p == '\\') ? 6 : 1;
    return n;
}

json_t *logship_queue_take(const struct logship_queue *q, size_t limit, size_t *bytes,
                           uint64_t *first)
{
    if (q->count == 0 || limit == 0 || *bytes == 0)
        return NULL;
    size_t n = q->count < limit ? q->count : limit;
    size_t used = 0;
    json_t *arr = json_array();
    for (size_t i = 0; i < n; i++) {
        const char *item = logship_queue_at(q, i);
        size_t sz = logship_json_size(item) + 1;
        if (i > 0 && used + sz > *bytes)
            break;
        json_array_append_new(arr, json_string(item));
        used += sz;
    }
    *first = q->first_seq;
    *bytes = used >= *bytes ? 0 : *bytes - used;
    return arr;
}

void logship_queue_ack(struct logship_queue *q, uint64_t upto)
{
    while (q->count > 0 && q->first_seq <= upto)
        logship_queue_drop_oldest(q);
}
