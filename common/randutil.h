/*
 * randutil.h - secrets from the kernel's random source.
 */
#ifndef DDP_COMMON_RANDUTIL_H
#define DDP_COMMON_RANDUTIL_H

#include <stddef.h>

/* Fills buf with len random bytes (getrandom); returns 0 or DDP_EIO. */
int rand_bytes(void *buf, size_t len);

/* Writes 2*nbytes hex characters of randomness plus a NUL into out (size >= 2*nbytes+1). */
int rand_hex(char *out, size_t nbytes);

/* Compares two NUL-terminated secrets in time that depends only on their lengths.
 * Returns 1 when equal. */
int secret_equal(const char *a, const char *b);

#endif
