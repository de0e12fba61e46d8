/*
 * args.c - strict number, range and address parsing.
 */
#include "common/args.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>

int args_parse_long(const char *what, const char *s, long min, long max, long *out,
                    struct ddp_err *err)
{
    if (!s || !*s)
        return err_set(err, DDP_EINVAL, "%s: empty value, expected an integer", what);
    if (isspace((unsigned char)*s)) /* strtol would skip it */
        return err_set(err, DDP_EINVAL, "%s: '%s' is not an integer", what, s);
    char *end = NULL;
    errno = 0;
    long v = strtol(s, &end, 10);
    if (errno || *end != '\0')
        return err_set(err, DDP_EINVAL, "%s: '%s' is not an integer", what, s);
    if (v < min || v > max)
        return err_set(err, DDP_EINVAL, "%s: %ld is out of range [%ld, %ld]", what, v, min, max);
    *out = v;
    return 0;
}

int args_parse_double(const char *what, const char *s, double min, double max, double *out,
                      struct ddp_err *err)
{
    if (!s || !*s)
        return err_set(err, DDP_EINVAL, "%s: empty value, expected a number", what);
    char *end = NULL;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || *end != '\0' || !isfinite(v))
        return err_set(err, DDP_EINVAL, "%s: '%s' is not a number", what, s);
    if (v < min || v > max)
        return err_set(err, DDP_EINVAL, "%s: %g is out of range [%g, %g]", what, v, min, max);
    *out = v;
    return 0;
}

int args_parse_range(const char *what, const char *s, long min, long max, long *lo, long *hi,
                     struct ddp_err *err)
{
    if (!s || !*s)
        return err_set(err, DDP_EINVAL, "%s: empty value, expected A-B", what);
    const char *dash = strchr(s, '-');
    if (!dash || dash == s)
        return err_set(err, DDP_EINVAL, "%s: '%s' is not a range A-B", what, s);
    char a[32];
    size_t alen = (size_t)(dash - s);
    if (alen >= sizeof(a))
        return err_set(err, DDP_EINVAL, "%s: '%s' is not a range A-B", what, s);
    memcpy(a, s, alen);
    a[alen] = '\0';
    long va, vb;
    if (args_parse_long(what, a, min, max, &va, err) < 0 ||
        args_parse_long(what, dash + 1, min, max, &vb, err) < 0)
        return DDP_EINVAL;
    if (va > vb)
        return err_set(err, DDP_EINVAL, "%s: range start %ld > end %ld", what, va, vb);
    *lo = va;
    *hi = vb;
    return 0;
}

int args_parse_hostport(const char *what, const char *s, char *host, int hostsize, int *port,
                        struct ddp_err *err)
{
    if (!s)
        return err_set(err, DDP_EINVAL, "%s: empty value, expected HOST:PORT", what);
    const char *colon = strrchr(s, ':');
    if (!colon)
        return err_set(err, DDP_EINVAL, "%s: '%s' is not HOST:PORT", what, s);
    size_t hlen = (size_t)(colon - s);
    if (hlen + 1 > (size_t)hostsize)
        return err_set(err, DDP_EINVAL, "%s: host in '%s' is too long", what, s);
    long p;
    if (args_parse_long(what, colon + 1, 0, 65535, &p, err) < 0)
        return DDP_EINVAL;
    memcpy(host, s, hlen);
    host[hlen] = '\0';
    *port = (int)p;
    return 0;
}
