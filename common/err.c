/*
 * err.c - the error table: code -> gRPC status -> HTTP status -> text.
 */
#include "common/err.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

struct err_row {
    int code;
    const char *status;
    int http;
    const char *text;
};

static const struct err_row err_table[DDP_ERR_COUNT] = {
    {DDP_OK, "OK", 200, "ok"},
    {DDP_EINVAL, "INVALID_ARGUMENT", 400, "invalid argument"},
    {DDP_EUNAUTH, "UNAUTHENTICATED", 401, "unauthenticated"},
    {DDP_EPERM, "PERMISSION_DENIED", 403, "permission denied"},
    {DDP_ENOTFOUND, "NOT_FOUND", 404, "not found"},
    {DDP_EEXIST, "ALREADY_EXISTS", 409, "already exists"},
    {DDP_EABORTED, "ABORTED", 409, "aborted"},
    {DDP_EPRECOND, "FAILED_PRECONDITION", 400, "failed precondition"},
    {DDP_ETOOBIG, "RESOURCE_EXHAUSTED", 413, "resource exhausted"},
    {DDP_EINTERNAL, "INTERNAL", 500, "internal error"},
    {DDP_EUNAVAIL, "UNAVAILABLE", 503, "unavailable"},
    {DDP_ETIMEOUT, "DEADLINE_EXCEEDED", 504, "deadline exceeded"},
    {DDP_EMETHOD, "INVALID_ARGUMENT", 405, "method not allowed"},
    {DDP_EIO, "INTERNAL", 500, "input/output error"},
    {DDP_EPEER, "UNAVAILABLE", 503, "peer lost"},
    {DDP_ECANCELLED, "CANCELLED", 499, "cancelled"},
    {DDP_ELIMIT, "RESOURCE_EXHAUSTED", 429, "limit reached"},
};

static const struct err_row *err_row_of(int code)
{
    for (size_t i = 0; i < DDP_ERR_COUNT; i++)
        if (err_table[i].code == code)
            return &err_table[i];
    return NULL;
}

int err_set(struct ddp_err *err, int code, const char *fmt, ...)
{
    if (err) {
        va_list ap;
        err->code = code;
        va_start(ap, fmt);
        vsnprintf(err->msg, sizeof(err->msg), fmt, ap);
        va_end(ap);
    }
    return code;
}

void err_clear(struct ddp_err *err)
{
    if (err) {
        err->code = DDP_OK;
        err->msg[0] = '\0';
    }
}

const char *err_status_name(int code)
{
    const struct err_row *r = err_row_of(code);
    return r ? r->status : "UNKNOWN";
}

int err_http_status(int code)
{
    const struct err_row *r = err_row_of(code);
    return r ? r->http : 500;
}

const char *err_str(int code)
{
    const struct err_row *r = err_row_of(code);
    return r ? r->text : "unknown error";
}

int err_from_status_name(const char *status)
{
    if (!status)
        return DDP_EINTERNAL;
    for (size_t i = 0; i < DDP_ERR_COUNT; i++)
        if (strcmp(err_table[i].status, status) == 0)
            return err_table[i].code;
    return DDP_EINTERNAL;
}
