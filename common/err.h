/*
 * err.h - the one table of error codes shared by every part of ddp.
 *
 * Functions return 0 on success or a negative DDP_E* code. Where a caller wants to know
 * why, it passes a struct ddp_err, which the failing function fills with the code and a
 * message written like "field 'nnodes': min 3 > max 2" (lower case, no full stop).
 * Every code maps to one gRPC canonical status and one HTTP status, used by ddpd's error
 * bodies and by clients to turn an answer back into a code.
 */
#ifndef DDP_COMMON_ERR_H
#define DDP_COMMON_ERR_H

#include <stddef.h>

enum ddp_errcode {
    DDP_OK = 0,
    DDP_EINVAL = -1,      /* INVALID_ARGUMENT, 400 */
    DDP_EUNAUTH = -2,     /* UNAUTHENTICATED, 401 */
    DDP_EPERM = -3,       /* PERMISSION_DENIED, 403 */
    DDP_ENOTFOUND = -4,   /* NOT_FOUND, 404 */
    DDP_EEXIST = -5,      /* ALREADY_EXISTS, 409 */
    DDP_EABORTED = -6,    /* ABORTED, 409 */
    DDP_EPRECOND = -7,    /* FAILED_PRECONDITION, 400 */
    DDP_ETOOBIG = -8,     /* RESOURCE_EXHAUSTED, 413 */
    DDP_EINTERNAL = -9,   /* INTERNAL, 500 */
    DDP_EUNAVAIL = -10,   /* UNAVAILABLE, 503 */
    DDP_ETIMEOUT = -11,   /* DEADLINE_EXCEEDED, 504 */
    DDP_EMETHOD = -12,    /* method not allowed: INVALID_ARGUMENT with HTTP 405 */
    DDP_EIO = -13,        /* INTERNAL, 500: a read, write or fsync failed */
    DDP_EPEER = -14,      /* UNAVAILABLE, 503: a peer closed or broke the connection */
    DDP_ECANCELLED = -15, /* CANCELLED, 499 */
    DDP_ELIMIT = -16,     /* RESOURCE_EXHAUSTED, 429: a cap on nodes, users or jobs */
};
#define DDP_ERR_COUNT 17

/* Room for one message; longer messages are cut. */
#define DDP_ERR_MSG_MAX 512

struct ddp_err {
    int code;
    char msg[DDP_ERR_MSG_MAX];
};

/* Fills err (which may be NULL) with code and a printf-style message; returns code. */
int err_set(struct ddp_err *err, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Clears err (which may be NULL) to DDP_OK and an empty message. */
void err_clear(struct ddp_err *err);

/* The gRPC canonical status name of code ("INVALID_ARGUMENT"); "UNKNOWN" if not ours. */
const char *err_status_name(int code);

/* The HTTP status for code (400, 401, ...); 500 for codes not in the table. */
int err_http_status(int code);

/* A short description of code ("invalid argument"). */
const char *err_str(int code);

/* The code for a gRPC status name, DDP_EINTERNAL if unknown. */
int err_from_status_name(const char *status);

#endif
