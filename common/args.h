/*
 * args.h - strict parsing of command-line and environment values. No atoi: every parser
 * rejects empty strings, trailing junk and out-of-range values, and on failure fills err
 * with a message naming `what` (e.g. "--slots") and leaves *out untouched.
 */
#ifndef DDP_COMMON_ARGS_H
#define DDP_COMMON_ARGS_H

#include <stdint.h>

#include "common/err.h"

int args_parse_long(const char *what, const char *s, long min, long max, long *out,
                    struct ddp_err *err);
int args_parse_double(const char *what, const char *s, double min, double max, double *out,
                      struct ddp_err *err);
/* "A-B" with min <= A <= B <= max. */
int args_parse_range(const char *what, const char *s, long min, long max, long *lo, long *hi,
                     struct ddp_err *err);
/* "HOST:PORT" (HOST may be empty for "all addresses"); host is written to host (size
 * hostsize) and the port to *port. */
int args_parse_hostport(const char *what, const char *s, char *host, int hostsize, int *port,
                        struct ddp_err *err);

#endif
