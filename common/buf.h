/*
 * buf.h - a growable byte buffer (git's strbuf, curl's dynbuf): bytes appended at the end,
 * always NUL-terminated after len so that text can be used as a C string.
 *
 * Invariants: data is NULL exactly when cap is 0; otherwise data[len] == '\0' and len < cap.
 * A buffer starts zeroed (struct buf b = BUF_INIT, or buf_init()). Appends grow it by doubling
 * and abort on out-of-memory (common/xalloc.h); a buffer with a max (buf_init_max) refuses an
 * append that would take len past it with DDP_ETOOBIG and stays as it was.
 *
 * Ownership: the buffer owns data until buf_release() frees it or buf_detach() hands it to
 * the caller (who frees it with free()).
 */
#ifndef DDP_COMMON_BUF_H
#define DDP_COMMON_BUF_H

#include <stdarg.h>
#include <stddef.h>

struct buf {
    char *data;
    size_t len, cap;
    size_t max; /* 0: unbounded */
};

#define BUF_INIT      \
    {                 \
        NULL, 0, 0, 0 \
    }

void buf_init(struct buf *b);
/* As buf_init, with at most max bytes of content. */
void buf_init_max(struct buf *b, size_t max);
/* Frees the storage; b is empty again (and keeps its max). Accepts NULL. */
void buf_release(struct buf *b);
/* Empties b, keeping the storage. */
void buf_reset(struct buf *b);
/* Room for at least extra more bytes (plus the NUL). 0, or DDP_ETOOBIG past max. */
int buf_reserve(struct buf *b, size_t extra);
/* Appends n bytes. 0, or DDP_ETOOBIG past max (b unchanged). */
int buf_add(struct buf *b, const void *p, size_t n);
int buf_addstr(struct buf *b, const char *s);
/* Appends printf output. 0, or DDP_ETOOBIG past max (b unchanged). */
int buf_printf(struct buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
/* The same with a va_list (which it does not va_end). */
int buf_vprintf(struct buf *b, const char *fmt, va_list ap) __attribute__((format(printf, 2, 0)));
/* Hands the content to the caller (never NULL: an empty buffer gives ""), *len (may be NULL)
 * receives its length; b is empty again. The caller frees it. */
char *buf_detach(struct buf *b, size_t *len);

#endif
