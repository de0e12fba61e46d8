/*
 * xalloc.h - allocation that never returns NULL: on out-of-memory the process logs and
 * aborts (the failure policy of docs/style.md, "Errors"). Callers free with free().
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

/* Makes room for at least need elements of elem bytes in the array *p of capacity *cap
 * (elements): when need > *cap the capacity doubles (starting at init, or at need when that is
 * larger) and the array is reallocated; new elements are not initialised. Aborts on overflow
 * or out-of-memory, like the rest of this file. Use through XGROW. */
void xgrow(void **p, size_t *cap, size_t need, size_t elem, size_t init);
/* XGROW(arr, need, cap, init): arr (any pointer lvalue) holds at least need elements. */
#define XGROW(arr, need, cap, init)                                                        \
    do {                                                                                   \
        if ((size_t)(need) > (cap)) {                                                      \
            void *xgrow_p_ = (arr);                                                        \
            size_t xgrow_cap_ = (cap);                                                     \
            xgrow(&xgrow_p_, &xgrow_cap_, (size_t)(need), sizeof(*(arr)), (size_t)(init)); \
            (arr) = xgrow_p_;                                                              \
            (cap) = xgrow_cap_;                                                            \
        }                                                                                  \
    } while (0)

#endif
