/*
 * buf.c - the growable byte buffer of buf.h.
 */
#include "common/buf.h"

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "common/err.h"
#include "common/xalloc.h"

void buf_init(struct buf *b)
{
    b->data = NULL;
    b->len = b->cap = b->max = 0;
}

void buf_init_max(struct buf *b, size_t max)
{
    buf_init(b);
    b->max = max;
}

void buf_release(struct buf *b)
{
    if (!b)
        return;
    free(b->data);
    b->data = NULL;
    b->len = b->cap = 0;
}

void buf_reset(struct buf *b)
{
    b->len = 0;
    if (b->data)
        b->data[0] = '\0';
}

int buf_reserve(struct buf *b, size_t extra)
{
    if (extra > (size_t)-1 - b->len - 1 || (b->max && b->len + extra > b->max))
        return DDP_ETOOBIG;
    XGROW(b->data, b->len + extra + 1, b->cap, 64);
    b->data[b->len] = '\0';
    return 0;
}

int buf_add(struct buf *b, const void *p, size_t n)
{
    int ret = buf_reserve(b, n);
    if (ret < 0)
        return ret;
    if (n)
        memcpy(b->data + b->len, p, n);
    b->len += n;
    b->data[b->len] = '\0';
    return 0;
}

int buf_addstr(struct buf *b, const char *s)
{
    return buf_add(b, s, strlen(s));
}

int buf_vprintf(struct buf *b, const char *fmt, va_list ap)
{
    va_list ap2;
    va_copy(ap2, ap);
    int n = vsnprintf(NULL, 0, fmt, ap2);
    va_end(ap2);
    if (n < 0)
        return DDP_EINVAL;
    int ret = buf_reserve(b, (size_t)n);
    if (ret < 0)
        return ret;
    vsnprintf(b->data + b->len, (size_t)n + 1, fmt, ap);
    b->len += (size_t)n;
    return 0;
}

int buf_printf(struct buf *b, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int ret = buf_vprintf(b, fmt, ap);
    va_end(ap);
    return ret;
}

char *buf_detach(struct buf *b, size_t *len)
{
    char *p = b->data ? b->data : xstrdup("");
    if (len)
        *len = b->len;
    b->data = NULL;
    b->len = b->cap = 0;
    return p;
}
