/*
 * xalloc.h - allocation that never returns NULL: on out-of-memory the process logs and
 * aborts (the failure policy of STYLE.md). Callers free with free().
 */
#ifndef DDP_COMMON_XALLOC_H
#define DDP_COMMON_XALLOC_H

#include <stddef.h>

void *xmalloc(size_t size);
void *xcalloc(size_t n, size_t size);
void *xrealloc(void *p, size_t size);
char *xstrdup(const char *s);
char *xstrndup(const char *s, size_t n);
/* printf into a new string; the caller frees it. */
char *xasprintf(const char *fmt, ...) __attribute__((format(printf, 1, 2)));

#endif
