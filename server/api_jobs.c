/*
 * api_jobs.c - /v1/jobs*: submit, list, get, cancel, delete, events, metrics, logs and the
 * logs' download.
 *
 * Each handler parses and checks its inputs (answering 400/404 itself), checks that the
 * caller may see (404 otherwise) or change (403) the job, calls coord_*, and sets the answer.
 * Nothing here holds state.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/coord.h"
#include "server/http.h"
#include "server/validate.h"

/* Reads the {id} of the path and checks that the caller may read it (act 0) or change it
 * (act 1); answers 404 when it is not a job id or one the caller may not see, 403 when it may
 * see but not change it (coord_job_access). */
static int api_job_id_for(struct api_req *r, int act, int64_t *id)
{
    struct ddp_err e;
    if (validate_job_id(r->param, id) != 0) {
        api_reply_errf(r, DDP_ENOTFOUND, "job %.64s not found", r->param);
        return -1;
    }
    if (coord_job_access(r->coord, *id, &r->who, act, &e) != 0) {
        api_reply_err(r, &e);
        return -1;
    }
    return 0;
}

static int api_job_id(struct api_req *r, int64_t *id)
{
    return api_job_id_for(r, 0, id);
}

/* The Idempotency-Key header: 1..128 printable ASCII characters. */
static int api_idempotency_key(struct api_req *r, const char **out)
{
    const char *k = r->idempotency_key;
    *out = NULL;
    if (!k)
        return 0;
    size_t n = strlen(k);
    int ok = n >= 1 && n <= 128;
    for (size_t i = 0; ok && i < n; i++)
        ok = k[i] > 0x20 && k[i] < 0x7f;
    if (!ok) {
        api_reply_errf(r, DDP_EINVAL,
                       "header 'Idempotency-Key': expected 1..128 printable ASCII characters "
                       "without spaces");
        return -1;
    }
    *out = k;
    return 0;
}

void api_jobs_submit(struct api_req *r)
{
    json_t *body = NULL;
    struct ddp_err e;
    char *out = NULL;
    const char *key;
    int created = 0;
    if (api_idempotency_key(r, &key) != 0 || api_parse_body(r, &body) != 0)
        return;
    int rc = coord_submit(r->coord, body, &r->who, key, r->now, &out, &created, &e);
    json_decref(body);
    api_reply_result(r, rc, created ? 201 : 200, out, &e);
}

void api_jobs_list(struct api_req *r)
{
    struct ddp_err e;
    char *out = NULL;
    int state = -1;
    int64_t page_size, token = 0;
    const char *s = api_query(r, "state");
    if (s) {
        enum job_state st;
        if (jobstate_parse(s, &st) != 0) {
            api_reply_errf(r, DDP_EINVAL,
                           "field 'state': '%.32s' is not one of PENDING, RUNNING, RESTARTING, "
                           "SUCCEEDED, FAILED, CANCELLING, CANCELLED",
                           s);
            return;
        }
        state = (int)st;
    }
    if (api_query_int(r, "page_size", 1, 1000, 100, &page_size) != 0)
        return;
    const char *t = api_query(r, "page_token");
    if (t && *t && api_query_int(r, "page_token", 1, INT64_MAX / 2, 0, &token) != 0)
        return;
    /* own jobs by default (as squeue --me, kubectl's namespace); all=true every user's, for
     * the roles that see them */
    const char *all = api_query(r, "all");
    if (all && strcmp(all, "true") != 0 && strcmp(all, "false") != 0) {
        api_reply_errf(r, DDP_EINVAL, "field 'all': expected true or false");
        return;
    }
    int every = all && strcmp(all, "true") == 0;
    if (every && !auth_sees_all(&r->who)) {
        api_reply_errf(r, DDP_EPERM, "all=true needs role admin or viewer; you are %s (role %s)",
                       r->who.name, auth_role_name(r->who.role));
        return;
    }
    int rc = coord_list_jobs(r->coord, state, every ? NULL : r->who.name, (int)page_size, token,
                             &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

void api_jobs_get(struct api_req *r)
{
    int64_t id;
    struct ddp_err e;
    char *out = NULL;
    if (api_job_id(r, &id) != 0)
        return;
    int rc = coord_get_job(r->coord, id, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

void api_jobs_cancel(struct api_req *r)
{
    int64_t id;
    struct ddp_err e;
    char *out = NULL;
    if (api_job_id_for(r, 1, &id) != 0)
        return;
    /* an empty body or {} is fine; anything else must be a JSON object too */
    if (r->body_len > 0) {
        json_t *body = NULL;
        if (api_parse_body(r, &body) != 0)
            return;
        int keys = (int)json_object_size(body);
        json_decref(body);
        if (keys) {
            api_reply_errf(r, DDP_EINVAL, "cancel takes no fields");
            return;
        }
    }
    int rc = coord_cancel(r->coord, id, r->who.name, r->now, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

/* DELETE /v1/jobs/{id}: a finished job, by its owner or an admin (as cancel). */
void api_jobs_delete(struct api_req *r)
{
    int64_t id;
    struct ddp_err e;
    char *out = NULL;
    if (api_job_id_for(r, 1, &id) != 0)
        return;
    int rc = coord_delete_job(r->coord, id, r->who.name, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

static long api_logs_gz_read(void *ctx, char *buf, size_t size)
{
    return coord_log_gz_read(ctx, buf, size);
}

static void api_logs_gz_free(void *ctx)
{
    coord_log_gz_close(ctx);
}

/* GET /v1/jobs/{id}/logs:download: the whole kept log as a gzip file, streamed. */
void api_jobs_logs_download(struct api_req *r)
{
    int64_t id;
    struct ddp_err e;
    struct coord_log_gz *g = NULL;
    if (api_job_id(r, &id) != 0)
        return;
    if (coord_log_gz_open(r->coord, id, &g, &e) != 0) {
        api_reply_err(r, &e);
        return;
    }
    api_reply_stream(r, 200, "application/gzip", api_logs_gz_read, api_logs_gz_free, g);
    snprintf(r->disposition, sizeof(r->disposition), "attachment; filename=\"j-%lld.log.gz\"",
             (long long)id);
}

void api_jobs_events(struct api_req *r)
{
    int64_t id, after;
    struct ddp_err e;
    char *out = NULL;
    if (api_job_id(r, &id) != 0 || api_query_int(r, "after", 0, INT64_MAX / 2, 0, &after) != 0)
        return;
    int rc = coord_events(r->coord, id, after, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

void api_jobs_metrics(struct api_req *r)
{
    int64_t id, after;
    struct ddp_err e;
    char *out = NULL;
    if (api_job_id(r, &id) != 0 || api_query_int(r, "after", 0, INT64_MAX / 2, 0, &after) != 0)
        return;
    int rc = coord_metrics(r->coord, id, after, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

/* GET /v1/jobs/{id}/logs: from the start (`after`, pages of `limit`) or the end (`tail=N`, the
 * last N lines; `next` then follows on with `after` as usual). The tail travels to the store
 * as a negative limit, which coord_logs hands on unchanged (store_logs_json's contract). */
void api_jobs_logs(struct api_req *r)
{
    int64_t id, after, limit, rank, tail;
    struct ddp_err e;
    char *out = NULL;
    if (api_job_id(r, &id) != 0 || api_query_int(r, "after", 0, INT64_MAX / 2, 0, &after) != 0 ||
        api_query_int(r, "limit", 1, 10000, 1000, &limit) != 0 ||
        api_query_int(r, "rank", 0, 1 << 20, -1, &rank) != 0 ||
        api_query_int(r, "tail", 1, 10000, 0, &tail) != 0)
        return;
    if (tail > 0 && (api_query(r, "after") || api_query(r, "limit"))) {
        api_reply_errf(r, DDP_EINVAL,
                       "field 'tail': cannot be combined with '%s' (tail=N reads the last N "
                       "lines; follow on with after=<next> and no tail)",
                       api_query(r, "after") ? "after" : "limit");
        return;
    }
    int rc =
        coord_logs(r->coord, id, (int)rank, after, tail > 0 ? -(int)tail : (int)limit, &out, &e);
    api_reply_result(r, rc, 200, out, &e);
}

void api_jobs_update(struct api_req *r)
{
    int64_t id;
    json_t *body = NULL;
    struct ddp_err e;
    char *out = NULL;
    if (api_job_id_for(r, 1, &id) != 0 || api_parse_body(r, &body) != 0)
        return;
    int rc = coord_update_job(r->coord, id, body, r->who.name, r->now, &out, &e);
    json_decref(body);
    api_reply_result(r, rc, 200, out, &e);
}
