/*
 * xalloc.c - aborting allocator wrappers.
 */
#include "common/xalloc.h"

#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static void xalloc_die(size_t size)
{
    fprintf(stderr, "fatal: out of memory allocating %zu bytes\n", size);
    abort();
}

void *xmalloc(size_t size)
{
    void *p = malloc(size ? size : 1);
    if (!p)
        xalloc_die(size);
    return p;
}

void *xcalloc(size_t n, size_t size)
{
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p)
        xalloc_die(n * size);
    return p;
}

void *xrealloc(void *p, size_t size)
{
    void *q = realloc(p, size ? size : 1);
    if (!q)
        xalloc_die(size);
    return q;
}

char *xstrdup(const char *s)
{
    return xstrndup(s, strlen(s));
}

char *xstrndup(const char *s, size_t n)
{
    size_t len = strnlen(s, n);
    char *p = xmalloc(len + 1);
    memcpy(p, s, len);
    p[len] = '\0';
    return p;
}

char *xasprintf(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(NULL, 0, fmt, ap);
    va_end(ap);
    if (n < 0)
        xalloc_die(0);
    char *p = xmalloc((size_t)n + 1);
    va_start(ap, fmt);
    vsnprintf(p, (size_t)n + 1, fmt, ap);
    va_end(ap);
    return p;
}

void xgrow(void **p, size_t *cap, size_t need, size_t elem, size_t init)
{
    if (need <= *cap)
        return;
    size_t ncap = *cap ? *cap : (init ? init : 1);
    while (ncap < need) {
        if (ncap > SIZE_MAX / 2)
            xalloc_die(SIZE_MAX);
        ncap *= 2;
    }
    if (elem && ncap > SIZE_MAX / elem)
        xalloc_die(SIZE_MAX);
    *p = xrealloc(*p, ncap * elem);
    *cap = ncap;
}
