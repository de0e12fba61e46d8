/*
 * randutil.c - random bytes and constant-time comparison.
 */
#include "common/randutil.h"

#include <errno.h>
#include <string.h>
#include <sys/random.h>

#include "common/err.h"

int rand_bytes(void *buf, size_t len)
{
    unsigned char *p = buf;
    while (len > 0) {
        ssize_t r = getrandom(p, len, 0);
        if (r < 0) {
            if (errno == EINTR)
                continue;
            return DDP_EIO;
        }
        p += r;
        len -= (size_t)r;
    }
    return 0;
}

int rand_hex(char *out, size_t nbytes)
{
    static const char hex[] = "0123456789abcdef";
    unsigned char raw[256];
    if (nbytes > sizeof(raw))
        return DDP_EINVAL;
    if (rand_bytes(raw, nbytes) != 0)
        return DDP_EIO;
    for (size_t i = 0; i < nbytes; i++) {
        out[2 * i] = hex[raw[i] >> 4];
        out[2 * i + 1] = hex[raw[i] & 15];
    }
    out[2 * nbytes] = '\0';
    return 0;
}

int secret_equal(const char *a, const char *b)
{
    size_t la = strlen(a), lb = strlen(b);
    /* Walk the longer length so timing does not reveal a matching prefix. */
    size_t n = la > lb ? la : lb;
    unsigned char diff = (unsigned char)(la != lb);
    for (size_t i = 0; i < n; i++) {
        unsigned char ca = i < la ? (unsigned char)a[i] : 0;
        unsigned char cb = i < lb ? (unsigned char)b[i] : 0;
        diff |= ca ^ cb;
    }
    return diff == 0;
}
