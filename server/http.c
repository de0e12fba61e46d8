/*
 * http.c - the HTTP front of ddpd over libmicrohttpd.
 *
 * One thread per connection (MHD_USE_THREAD_PER_CONNECTION with an internal polling
 * thread), so a held heartbeat simply blocks its own thread in coord_beat().
 * Invariants:
 *   1. A body is never kept past HTTP_BODY_MAX bytes; the rest is read and dropped and the
 *      request is answered 413 RESOURCE_EXHAUSTED (with Content-Length or chunked).
 *   2. The checks, in order: 400 for %00 in the request line, 404 unknown route, 405 (+Allow)
 *      wrong method, 401/403 auth (the bearer token resolved to a principal, server/auth.h,
 *      and held against the route's need) - these answered as soon as the headers are in,
 *      before any body is read -, then (with the whole body read) 413 body size, 400 for a query
 *      argument the route does not take or one sent twice, then the handler.
 *   3. Every error body is {"error": {"code", "status", "message"}} from common/err.h.
 *   4. Connections are polled with poll(), not select(): the connection limit is ours, not
 *      FD_SETSIZE's 1,024 descriptors. Limits: max_connections at once, per_ip from one
 *      address, and idle_timeout_s of silence closes a connection (a stalled request head
 *      or body, or keep-alive), so idle connections cannot lock clients out.
 */
#include "server/http.h"

#include <arpa/inet.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>

#include "common/buf.h"
#include "common/jsonx.h"
#include "common/log.h"
#include "common/randutil.h"
#include "common/timeutil.h"
#include "common/utf8.h"
#include "common/xalloc.h"
#include "server/coord.h"
#include "server/gate.h"
#include "server/metrics.h"

/* Who may call a route (server/auth.h has the roles): nobody needs a token (NONE), a user of
 * at least that role (VIEWER < USER < ADMIN), the bootstrap token (REGISTER), or the
 * credential of the node the path names (NODE). Owner checks are the handlers'. */
enum route_auth { AUTH_NONE, AUTH_VIEWER, AUTH_USER, AUTH_ADMIN, AUTH_REGISTER, AUTH_NODE };

struct route {
    const char *method;
    const char *pattern; /* "{}" matches [^/:]+, "{*}" the non-empty rest of the path */
    enum route_auth auth;
    const char *query; /* the query parameters it takes, space-separated; "" none */
    void (*fn)(struct api_req *r);
};

static const struct route http_routes[] = {
    {"GET", "/healthz", AUTH_NONE, "", api_misc_healthz},
    {"GET", "/readyz", AUTH_NONE, "", api_misc_readyz},
    {"GET", "/metrics", AUTH_NONE, "", api_misc_metrics},
    {"GET", "/", AUTH_NONE, "", api_misc_index},
    {"GET", "/ui/{*}", AUTH_NONE, "", api_misc_ui},
    {"GET", "/v1/openapi.json", AUTH_VIEWER, "", api_misc_openapi},
    {"POST", "/v1/jobs", AUTH_USER, "", api_jobs_submit},
    {"GET", "/v1/jobs", AUTH_VIEWER, "state page_size page_token all", api_jobs_list},
    {"GET", "/v1/jobs/{}", AUTH_VIEWER, "", api_jobs_get},
    {"POST", "/v1/jobs/{}:cancel", AUTH_VIEWER, "", api_jobs_cancel},
    {"PATCH", "/v1/jobs/{}", AUTH_ADMIN, "", api_jobs_update},
    {"DELETE", "/v1/jobs/{}", AUTH_VIEWER, "", api_jobs_delete},
    {"GET", "/v1/jobs/{}/events", AUTH_VIEWER, "after", api_jobs_events},
    {"GET", "/v1/jobs/{}/metrics", AUTH_VIEWER, "after", api_jobs_metrics},
    {"GET", "/v1/jobs/{}/logs", AUTH_VIEWER, "after limit rank tail", api_jobs_logs},
    {"GET", "/v1/jobs/{}/logs:download", AUTH_VIEWER, "", api_jobs_logs_download},
    {"GET", "/v1/nodes", AUTH_VIEWER, "", api_nodes_list},
    {"POST", "/v1/nodes:register", AUTH_REGISTER, "", api_nodes_register},
    {"POST", "/v1/nodes/{}:heartbeat", AUTH_NODE, "", api_nodes_heartbeat},
    {"DELETE", "/v1/nodes/{}", AUTH_ADMIN, "", api_nodes_remove},
    {"POST", "/v1/nodes/{}:cordon", AUTH_ADMIN, "", api_nodes_cordon},
    {"POST", "/v1/nodes/{}:drain", AUTH_ADMIN, "", api_nodes_drain},
    {"POST", "/v1/nodes/{}:uncordon", AUTH_ADMIN, "", api_nodes_uncordon},
    {"GET", "/v1/me", AUTH_VIEWER, "", api_users_me},
    {"GET", "/v1/users", AUTH_ADMIN, "", api_users_list},
    {"POST", "/v1/users", AUTH_ADMIN, "", api_users_add},
    {"DELETE", "/v1/users/{}", AUTH_ADMIN, "", api_users_remove},
    {"PATCH", "/v1/users/{}", AUTH_ADMIN, "", api_users_update},
    {"POST", "/v1/users/{}:rotate-token", AUTH_VIEWER, "", api_users_rotate},
    {"GET", "/v1/groups", AUTH_ADMIN, "", api_groups_list},
    {"GET", "/v1/groups/{}", AUTH_ADMIN, "", api_groups_get},
    {"PUT", "/v1/groups/{}", AUTH_ADMIN, "", api_groups_put},
    {"GET", "/v1/cluster", AUTH_VIEWER, "", api_cluster_get},
    {"POST", "/v1/cluster/members", AUTH_ADMIN, "", api_cluster_add},
    {"DELETE", "/v1/cluster/members/{}", AUTH_ADMIN, "", api_cluster_remove},
};
#define HTTP_NROUTES ((int)(sizeof(http_routes) / sizeof(http_routes[0])))

/* Route names for metrics: the patterns, with {} shown as {id}. The heartbeat's is the one
 * long poll (a beat is held up to its wait_ms while nothing changes, coord_beat()): its
 * durations have their own histogram (http_send()). */
static const char *const http_route_names[HTTP_NROUTES] = {
    "/healthz",
    "/readyz",
    "/metrics",
    "/",
    "/ui/{file}",
    "/v1/openapi.json",
    "/v1/jobs",
    "/v1/jobs",
    "/v1/jobs/{id}",
    "/v1/jobs/{id}:cancel",
    "/v1/jobs/{id}",
    "/v1/jobs/{id}",
    "/v1/jobs/{id}/events",
    "/v1/jobs/{id}/metrics",
    "/v1/jobs/{id}/logs",
    "/v1/jobs/{id}/logs:download",
    "/v1/nodes",
    "/v1/nodes:register",
    "/v1/nodes/{name}:heartbeat",
    "/v1/nodes/{name}",
    "/v1/nodes/{name}:cordon",
    "/v1/nodes/{name}:drain",
    "/v1/nodes/{name}:uncordon",
    "/v1/me",
    "/v1/users",
    "/v1/users",
    "/v1/users/{name}",
    "/v1/users/{name}",
    "/v1/users/{name}:rotate-token",
    "/v1/groups",
    "/v1/groups/{name}",
    "/v1/groups/{name}",
    "/v1/cluster",
    "/v1/cluster/members",
    "/v1/cluster/members/{id}",
};

struct ddpd_server {
    struct MHD_Daemon *d;
    struct gate *gate;
    struct replica *replica;
    char *bootstrap_token;
    int port;
};

/* Per-request state (MHD's con_cls). */
struct http_conn {
    int64_t start_ns;
    int started;     /* the handler has seen the request's headers */
    int encoded_nul; /* the request line held %00, which libmicrohttpd's unescaping cuts at */
    struct buf body; /* at most HTTP_BODY_MAX bytes; released once too_big */
    size_t total;    /* bytes of body received, kept or not */
    int too_big;
    /* The coordinator this request entered the gate with (NULL: this replica does not
     * lead), held until http_completed(), and what the gate said then. */
    struct coord *coord;
    struct ddpd_server *server;
    enum gate_role role;
    char leader[512];
    char *target; /* the request target as sent (path and query), for a redirect */
};

/* Matches path against pattern; on success copies the captured part to param. */
static int http_match(const char *pattern, const char *path, char *param, size_t psize)
{
    const char *p = pattern, *s = path;
    param[0] = '\0';
    while (*p) {
        if (strncmp(p, "{*}", 3) == 0) {
            size_t n = strlen(s);
            if (n == 0 || n >= psize)
                return 0;
            memcpy(param, s, n + 1);
            return 1;
        }
        if (strncmp(p, "{}", 2) == 0) {
            size_t n = strcspn(s, "/:");
            if (n == 0 || n >= psize)
                return 0;
            memcpy(param, s, n);
            param[n] = '\0';
            s += n;
            p += 2;
            continue;
        }
        if (*p != *s)
            return 0;
        p++;
        s++;
    }
    return *s == '\0';
}

void api_reply_result(struct api_req *r, int rc, int status, char *out, const struct ddp_err *e)
{
    if (rc)
        api_reply_err(r, e);
    else
        api_reply_json(r, status, out);
}

const char *api_query(struct api_req *r, const char *key)
{
    for (size_t i = 0; i < r->nargs; i++)
        if (strcmp(r->args[i].key, key) == 0)
            return r->args[i].value;
    return NULL;
}

/* 1 when word is one of the space-separated words of list. */
static int http_word_in(const char *list, const char *word)
{
    size_t n = strlen(word);
    for (const char *p = list; *p;) {
        size_t m = strcspn(p, " ");
        if (m == n && strncmp(p, word, n) == 0)
            return 1;
        p += m;
        p += strspn(p, " ");
    }
    return 0;
}

/* Refuses query arguments route `allowed` does not take, and any sent twice (the first would
 * win silently otherwise). 0, or -1 with the 400 answer set. */
static int http_check_query(struct api_req *r, const char *allowed)
{
    if (r->args_over) {
        api_reply_errf(r, DDP_EINVAL, "more than %d query parameters", HTTP_QUERY_MAX);
        return -1;
    }
    for (size_t i = 0; i < r->nargs; i++) {
        const char *k = r->args[i].key;
        if (!http_word_in(allowed, k)) {
            if (*allowed)
                api_reply_errf(r, DDP_EINVAL,
                               "unknown query parameter '%.64s' (this call takes: %s)", k, allowed);
            else
                api_reply_errf(r, DDP_EINVAL,
                               "unknown query parameter '%.64s' (this call takes none)", k);
            return -1;
        }
        for (size_t j = 0; j < i; j++)
            if (strcmp(r->args[j].key, k) == 0) {
                api_reply_errf(r, DDP_EINVAL, "query parameter '%.64s' given more than once", k);
                return -1;
            }
    }
    return 0;
}

/* Drops a stream r's answer holds (a later reply replaces it). */
static void http_drop_stream(struct api_req *r)
{
    if (r->stream_free && r->stream_ctx)
        r->stream_free(r->stream_ctx);
    r->stream_read = NULL;
    r->stream_free = NULL;
    r->stream_ctx = NULL;
}

void api_reply_json(struct api_req *r, int status, char *text)
{
    http_drop_stream(r);
    free(r->out);
    r->status = status;
    r->out = text;
    r->out_len = strlen(text);
    r->static_out = NULL;
    r->content_type = "application/json";
}

/* in with every byte that does not belong to a well-formed UTF-8 character written as \xNN
 * (a message cut inside a character, a name the client sent in another encoding), into out
 * (size bytes, NUL-terminated). */
static void utf8_safe(const char *in, char *out, size_t size)
{
    size_t o = 0;
    const unsigned char *end = (const unsigned char *)in + strlen(in);
    for (const unsigned char *p = (const unsigned char *)in; *p && o + 5 < size;) {
        size_t n = utf8_char_len(p, (size_t)(end - p));
        if (n) {
            if (o + n >= size)
                break;
            memcpy(out + o, p, n);
            o += n;
            p += n;
        } else {
            o += (size_t)snprintf(out + o, size - o, "\\x%02x", *p);
            p++;
        }
    }
    out[o] = '\0';
}

void api_reply_err(struct api_req *r, const struct ddp_err *err)
{
    json_t *o = json_pack("{s:{s:i, s:s, s:s}}", "error", "code", err_http_status(err->code),
                          "status", err_status_name(err->code), "message", err->msg);
    if (!o) { /* a message that is not UTF-8: the bytes that are not shown as \xNN */
        char safe[4 * sizeof(err->msg)];
        utf8_safe(err->msg, safe, sizeof(safe));
        o = json_pack("{s:{s:i, s:s, s:s}}", "error", "code", err_http_status(err->code), "status",
                      err_status_name(err->code), "message", safe);
    }
    if (!o)
        o = json_pack("{s:{s:i, s:s, s:s}}", "error", "code", err_http_status(err->code), "status",
                      err_status_name(err->code), "message", err_str(err->code));
    api_reply_json(r, err_http_status(err->code), jsonx_dumps(o));
    json_decref(o);
}

void api_reply_errf(struct api_req *r, int code, const char *fmt, ...)
{
    struct ddp_err e;
    va_list ap;
    e.code = code;
    va_start(ap, fmt);
    vsnprintf(e.msg, sizeof(e.msg), fmt, ap);
    va_end(ap);
    api_reply_err(r, &e);
}

void api_reply_static(struct api_req *r, int status, const char *content_type,
                      const unsigned char *data, size_t len)
{
    http_drop_stream(r);
    free(r->out);
    r->out = NULL;
    r->status = status;
    r->static_out = data;
    r->out_len = len;
    r->content_type = content_type;
}

void api_reply_stream(struct api_req *r, int status, const char *content_type,
                      long (*read_fn)(void *ctx, char *buf, size_t size),
                      void (*free_fn)(void *ctx), void *ctx)
{
    http_drop_stream(r);
    free(r->out);
    r->out = NULL;
    r->static_out = NULL;
    r->out_len = 0;
    r->status = status;
    r->content_type = content_type;
    r->stream_read = read_fn;
    r->stream_free = free_fn;
    r->stream_ctx = ctx;
}

void api_req_release(struct api_req *r)
{
    http_drop_stream(r);
    free(r->out);
    r->out = NULL;
}

int api_parse_body(struct api_req *r, json_t **out)
{
    struct ddp_err e;
    if (jsonx_parse_object(r->body ? r->body : "", r->body_len, out, &e) != 0) {
        api_reply_err(r, &e);
        return -1;
    }
    return 0;
}

int api_query_int(struct api_req *r, const char *key, int64_t min, int64_t max, int64_t def,
                  int64_t *out)
{
    const char *v = api_query(r, key);
    if (!v) {
        *out = def;
        return 0;
    }
    int64_t x = 0;
    size_t n = strlen(v);
    int ok = n > 0 && n <= 18;
    for (size_t i = 0; ok && i < n; i++) {
        if (v[i] < '0' || v[i] > '9')
            ok = 0;
        else
            x = x * 10 + (v[i] - '0');
    }
    if (!ok || x < min || x > max) {
        api_reply_errf(r, DDP_EINVAL, "field '%s': expected an integer in [%lld, %lld]", key,
                       (long long)min, (long long)max);
        return -1;
    }
    *out = x;
    return 0;
}

static const char *http_auth_need(enum route_auth need)
{
    switch (need) {
    case AUTH_VIEWER:
        return "a user token";
    case AUTH_USER:
        return "a user token of role user or admin";
    case AUTH_ADMIN:
        return "a user token of role admin";
    case AUTH_REGISTER:
        return "the bootstrap (agent) token";
    default:
        return "the node's own credential";
    }
}

/* Resolves the bearer token of authorization to *who and checks it against need (param: the
 * route's {} part, the node of a heartbeat). 0, or the error code with err set. */
static int http_auth(struct coord *c, enum route_auth need, const char *param,
                     const char *authorization, const char *bootstrap, struct principal *who,
                     struct ddp_err *err)
{
    memset(who, 0, sizeof(*who));
    if (need == AUTH_NONE)
        return 0;
    const char *tok = NULL;
    if (authorization && strncmp(authorization, "Bearer ", 7) == 0)
        tok = authorization + 7;
    if (!tok || !*tok)
        return err_set(err, DDP_EUNAUTH, "missing bearer token (Authorization: Bearer <token>)");
    if (bootstrap && secret_equal(tok, bootstrap))
        who->kind = PRINCIPAL_BOOTSTRAP;
    else if (coord_authenticate(c, tok, need == AUTH_NODE ? param : NULL, who) != 0)
        return err_set(err, DDP_EUNAUTH, "wrong bearer token");
    int ok = 0;
    switch (need) {
    case AUTH_VIEWER:
    case AUTH_USER:
    case AUTH_ADMIN:
        ok = who->kind == PRINCIPAL_USER && (int)who->role >= (need == AUTH_VIEWER ? ROLE_VIEWER
                                                               : need == AUTH_USER ? ROLE_USER
                                                                                   : ROLE_ADMIN);
        break;
    case AUTH_REGISTER:
        ok = who->kind == PRINCIPAL_BOOTSTRAP;
        break;
    default:
        ok = who->kind == PRINCIPAL_NODE && strcmp(who->name, param) == 0;
        break;
    }
    if (ok)
        return 0;
    if (who->kind == PRINCIPAL_USER)
        return err_set(err, DDP_EPERM, "this call needs %s; you are %s (role %s)",
                       http_auth_need(need), who->name, auth_role_name(who->role));
    if (who->kind == PRINCIPAL_NODE)
        return err_set(err, DDP_EPERM, "this call needs %s; this is the credential of node %s",
                       http_auth_need(need), who->name);
    return err_set(err, DDP_EPERM, "this call needs %s, not the bootstrap token",
                   http_auth_need(need));
}

/* Finds r's route and checks its credentials: the index of the route, or -1 with the answer
 * set (400 %00, 404, 405 with Allow, 401/403). *route_out is the route for metrics (-1 none);
 * param receives the route's {} part. Needs only the request line and headers, so the
 * handler runs it as soon as they are in, before any body is read. */
static int http_resolve(struct api_req *r, const char *authorization, const char *bootstrap,
                        int *route_out, char *param, size_t psize)
{
    char allow[64] = "";
    int found = -1, path_known = 0;
    struct ddp_err e;
    *route_out = -1;
    if (r->encoded_nul) {
        api_reply_errf(r, DDP_EINVAL, "the request line holds an encoded NUL (%%00)");
        return -1;
    }
    for (int i = 0; i < HTTP_NROUTES; i++) {
        if (!http_match(http_routes[i].pattern, r->path, param, psize))
            continue;
        path_known = 1;
        if (strcmp(http_routes[i].method, r->method) == 0) {
            found = i;
            break;
        }
        if (!strstr(allow, http_routes[i].method)) {
            size_t n = strlen(allow);
            snprintf(allow + n, sizeof(allow) - n, "%s%s", n ? ", " : "", http_routes[i].method);
        }
    }
    if (found < 0 && !path_known) {
        api_reply_errf(r, DDP_ENOTFOUND, "no route for %.200s", r->path);
        return -1;
    }
    if (found < 0) {
        /* remember the route for metrics by its first pattern match */
        for (int i = 0; i < HTTP_NROUTES; i++)
            if (http_match(http_routes[i].pattern, r->path, param, psize)) {
                *route_out = i;
                break;
            }
        api_reply_errf(r, DDP_EMETHOD, "method %.16s not allowed on %.200s (allowed: %s)",
                       r->method, r->path, allow);
        snprintf(r->allow, sizeof(r->allow), "%s", allow);
        return -1;
    }
    *route_out = found;
    /* re-match to capture the parameter of the chosen route */
    http_match(http_routes[found].pattern, r->path, param, psize);
    if (http_auth(r->coord, http_routes[found].auth, param, authorization, bootstrap, &r->who,
                  &e) != 0) {
        api_reply_err(r, &e);
        return -1;
    }
    return found;
}

/* The credentials are checked again here, though the headers' check passed: a body may
 * take long to come (the idle timeout restarts with each byte), and a token rotated, a
 * user removed or demoted meanwhile opens nothing from then on (docs/security.md). */
void http_dispatch(struct api_req *r, const char *authorization, const char *bootstrap,
                   int *route_out)
{
    char param[1024];
    int found = http_resolve(r, authorization, bootstrap, route_out, param, sizeof(param));
    if (found < 0)
        return;
    if (r->body_total > HTTP_BODY_MAX) {
        api_reply_errf(r, DDP_ETOOBIG, "body of %zu bytes is over the limit of %d bytes",
                       r->body_total, HTTP_BODY_MAX);
        return;
    }
    if (http_check_query(r, http_routes[found].query) != 0)
        return;
    r->param = param;
    http_routes[found].fn(r);
    r->param = NULL;
}

static void http_completed(void *cls, struct MHD_Connection *conn, void **con_cls,
                           enum MHD_RequestTerminationCode toe)
{
    struct ddpd_server *s = cls;
    struct http_conn *hc = *con_cls;
    if (hc) {
        gate_leave(s->gate, hc->coord);
        free(hc->target);
        buf_release(&hc->body);
        free(hc);
        *con_cls = NULL;
    }
}

/* libmicrohttpd's URI callback: sees the request line's target before it is unescaped (where a
 * %00 would silently cut the path or a value), and makes the connection's state. */
static void *http_uri_seen(void *cls, const char *uri, struct MHD_Connection *conn)
{
    struct http_conn *hc = xcalloc(1, sizeof(*hc));
    hc->start_ns = time_mono_ns();
    buf_init_max(&hc->body, HTTP_BODY_MAX);
    hc->encoded_nul = uri && strstr(uri, "%00") != NULL;
    hc->target = uri ? xstrdup(uri) : NULL;
    return hc;
}

struct http_args {
    struct api_arg a[HTTP_QUERY_MAX];
    size_t n;
    int over;
};

static enum MHD_Result http_collect_arg(void *cls, enum MHD_ValueKind kind, const char *key,
                                        const char *value)
{
    struct http_args *qa = cls;
    if (qa->n == HTTP_QUERY_MAX) {
        qa->over = 1;
        return MHD_NO;
    }
    qa->a[qa->n].key = key ? key : "";
    qa->a[qa->n].value = value ? value : "";
    qa->n++;
    return MHD_YES;
}

/* A streamed answer as libmicrohttpd's content reader sees it. */
struct http_stream {
    long (*read)(void *ctx, char *buf, size_t size);
    void (*free)(void *ctx);
    void *ctx;
};

static ssize_t http_stream_read(void *cls, uint64_t pos, char *buf, size_t max)
{
    struct http_stream *s = cls;
    (void)pos;
    long n = s->read(s->ctx, buf, max);
    if (n > 0)
        return (ssize_t)n;
    return n == 0 ? MHD_CONTENT_READER_END_OF_STREAM : MHD_CONTENT_READER_END_WITH_ERROR;
}

static void http_stream_free(void *cls)
{
    struct http_stream *s = cls;
    if (s->free)
        s->free(s->ctx);
    free(s);
}

/* Queues r's answer on conn (taking r->out and a stream) and counts it. */
static enum MHD_Result http_send(struct MHD_Connection *conn, struct api_req *r, int route,
                                 const struct http_conn *hc)
{
    struct MHD_Response *resp;
    struct http_stream *s = NULL;
    if (r->stream_read) {
        s = xcalloc(1, sizeof(*s));
        s->read = r->stream_read;
        s->free = r->stream_free;
        s->ctx = r->stream_ctx;
        r->stream_read = NULL;
        r->stream_free = NULL;
        r->stream_ctx = NULL;
        /* once made, the answer frees s (and the stream) with http_stream_free */
        resp = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 64 * 1024, http_stream_read, s,
                                                 http_stream_free);
    } else if (r->static_out)
        resp = MHD_create_response_from_buffer(r->out_len, (void *)r->static_out,
                                               MHD_RESPMEM_PERSISTENT);
    else
        resp = MHD_create_response_from_buffer(r->out_len, r->out ? r->out : (char *)"",
                                               r->out ? MHD_RESPMEM_MUST_FREE
                                                      : MHD_RESPMEM_PERSISTENT);
    if (!resp) {
        free(r->out);
        if (s)
            http_stream_free(s);
        return MHD_NO;
    }
    MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_TYPE,
                            r->content_type ? r->content_type : "application/json");
    if (r->allow[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_ALLOW, r->allow);
    if (r->disposition[0])
        MHD_add_response_header(resp, MHD_HTTP_HEADER_CONTENT_DISPOSITION, r->disposition);
    if (r->status == 401)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_WWW_AUTHENTICATE, "Bearer");
    if (r->location)
        MHD_add_response_header(resp, MHD_HTTP_HEADER_LOCATION, r->location);
    enum MHD_Result ret = MHD_queue_response(conn, (unsigned)r->status, resp);
    MHD_destroy_response(resp);
    metrics_http(route, r->method, r->status, time_mono_ns() - hc->start_ns,
                 route >= 0 && http_routes[route].fn == api_nodes_heartbeat);
    log_debug("%s %s -> %d", r->method, r->path, r->status);
    return ret;
}

/* The routes a replica that does not lead answers itself: liveness and readiness (503
 * there). Every other call goes to the leader, the dashboard's page too: a browser that
 * loaded it from a follower would send its API calls there, and a cross-origin redirect of a
 * call that carries a token is one it does not follow. */
static int http_local_route(const char *method, const char *path)
{
    if (strcmp(method, "GET") != 0)
        return 0;
    return strcmp(path, "/healthz") == 0 || strcmp(path, "/readyz") == 0;
}

/* A replica that does not lead: 307 to the same call on the leader, or 503 not_leader
 * (docs/api.md, "Several addresses"). */
static void http_not_leader(struct api_req *r, struct http_conn *hc, char **location)
{
    if (hc->leader[0]) {
        /* the target as sent (with its query) when it is a path, else the path alone */
        const char *t = hc->target && hc->target[0] == '/' ? hc->target : r->path;
        *location = xasprintf("%s%s", hc->leader, t);
        r->location = *location;
        char *msg = xasprintf("this replica does not lead: the leader is %s", hc->leader);
        json_t *o = json_pack("{s:{s:s, s:s, s:s, s:n}}", "error", "code", "not_leader", "status",
                              "UNAVAILABLE", "message", msg, "leader");
        free(msg);
        api_reply_json(r, 307, jsonx_dumps(o));
        json_decref(o);
        return;
    }
    api_reply_json(r, 503,
                   xstrdup("{\"error\":{\"code\":\"not_leader\",\"status\":\"UNAVAILABLE\","
                           "\"message\":\"no leader known (an election is under way, or no "
                           "quorum of the replicas is up)\",\"leader\":null}}"));
}

static enum MHD_Result http_handler(void *cls, struct MHD_Connection *conn, const char *url,
                                    const char *method, const char *version,
                                    const char *upload_data, size_t *upload_data_size,
                                    void **con_cls)
{
    struct ddpd_server *s = cls;
    struct http_conn *hc = *con_cls;
    if (!hc) { /* http_uri_seen makes it: never absent */
        hc = http_uri_seen(NULL, NULL, conn);
        *con_cls = hc;
    }
    if (!hc->started) {
        /* The request line and headers are in, no body byte is read yet: a request that no
         * route takes or whose credentials fail is answered now, so nobody without a token
         * makes ddpd buffer a body (libmicrohttpd then reads no more of it and closes). */
        hc->started = 1;
        hc->coord = gate_enter(s->gate, &hc->role, hc->leader, sizeof(hc->leader));
        struct api_req pre = {
            .coord = hc->coord,
            .replica = s->replica,
            .role = hc->role,
            .leader = hc->leader,
            .method = method,
            .path = url,
            .encoded_nul = hc->encoded_nul,
            .body = "",
            .now = time_mono_ms(),
        };
        char param[1024];
        int route = -1;
        if (!hc->coord && !http_local_route(method, url)) {
            char *location = NULL;
            http_not_leader(&pre, hc, &location);
            enum MHD_Result ret = http_send(conn, &pre, -1, hc);
            free(location);
            return ret;
        }
        const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
        if (http_resolve(&pre, auth, s->bootstrap_token, &route, param, sizeof(param)) < 0)
            return http_send(conn, &pre, route, hc);
        return MHD_YES;
    }
    if (*upload_data_size) {
        size_t n = *upload_data_size;
        hc->total += n;
        if (!hc->too_big && buf_add(&hc->body, upload_data, n) != 0) {
            hc->too_big = 1; /* read on and drop, answer 413 at the end */
            buf_release(&hc->body);
        }
        *upload_data_size = 0;
        return MHD_YES;
    }
    struct http_args qa = {.n = 0};
    MHD_get_connection_values(conn, MHD_GET_ARGUMENT_KIND, http_collect_arg, &qa);
    struct api_req r = {
        .coord = hc->coord,
        .replica = s->replica,
        .role = hc->role,
        .leader = hc->leader,
        .method = method,
        .path = url,
        .args = qa.a,
        .nargs = qa.n,
        .args_over = qa.over,
        .encoded_nul = hc->encoded_nul,
        .body = hc->too_big || !hc->body.data ? "" : hc->body.data,
        .body_len = hc->too_big ? 0 : hc->body.len,
        .body_total = hc->total,
        .now = time_mono_ms(),
        .idempotency_key = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Idempotency-Key"),
    };
    int route = -1;
    const char *auth = MHD_lookup_connection_value(conn, MHD_HEADER_KIND, "Authorization");
    (void)coord_take_refusal();
    http_dispatch(&r, auth, s->bootstrap_token, &route);
    if (hc->coord && r.status >= 500 && coord_take_refusal()) {
        /* The leadership was lost during the call, whose write the retired coordinator
         * refused before it began (nothing was done): not_leader, so that the client tries
         * the leader. A write that failed otherwise (a commit lost with the leadership, which
         * Raft may still apply) keeps its 5xx: only the client can know whether to resend. */
        char *location = NULL;
        api_req_release(&r);
        r.static_out = NULL;
        r.content_type = NULL;
        /* Until the main thread replaces the retired coordinator, the gate still names this
         * replica: no leader is known then (a 307 to itself would loop). */
        if (gate_role(s->gate, hc->leader, sizeof(hc->leader)) == GATE_LEADER)
            hc->leader[0] = '\0';
        http_not_leader(&r, hc, &location);
        enum MHD_Result ret = http_send(conn, &r, route, hc);
        free(location);
        return ret;
    }
    return http_send(conn, &r, route, hc);
}

static void http_mhd_log(void *cls, const char *fmt, va_list ap)
{
    char buf[512];
    vsnprintf(buf, sizeof(buf), fmt, ap);
    size_t n = strlen(buf);
    while (n > 0 && (buf[n - 1] == '\n' || buf[n - 1] == '\r'))
        buf[--n] = '\0';
    log_warn_limited(1000, "http: %s", buf); /* a flood of refused connections: one a second */
}

int http_start(const struct http_opts *o, struct gate *g, struct replica *rep,
               struct ddpd_server **out, struct ddp_err *err)
{
    struct ddpd_server *s = xcalloc(1, sizeof(*s));
    struct addrinfo hints = {0}, *ai = NULL;
    int rc = 0;
    char portstr[16];
    snprintf(portstr, sizeof(portstr), "%d", o->port);
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    int gai = getaddrinfo(o->host && *o->host ? o->host : NULL, portstr, &hints, &ai);
    if (gai != 0) {
        rc = err_set(err, DDP_EINVAL, "--listen: cannot resolve '%s': %s", o->host,
                     gai_strerror(gai));
        goto out;
    }
    s->gate = g;
    s->replica = rep;
    s->bootstrap_token = xstrdup(o->bootstrap_token);
    metrics_set_routes(http_route_names, HTTP_NROUTES);
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD |
                     MHD_USE_POLL | MHD_USE_ERROR_LOG;
    if (ai->ai_family == AF_INET6)
        flags |= MHD_USE_IPv6;
    if (o->tls_cert_pem) {
        if (MHD_is_feature_supported(MHD_FEATURE_TLS) != MHD_YES) {
            rc = err_set(err, DDP_EINVAL, "--tls-cert: this libmicrohttpd has no TLS support");
            goto out;
        }
        flags |= MHD_USE_TLS;
    }
    unsigned max_conn = o->max_connections ? o->max_connections : 16384;
    unsigned per_ip = o->per_ip ? o->per_ip : 512;
    unsigned idle = o->idle_timeout_s ? o->idle_timeout_s : 10;
    /* One thread per connection: a stack is reserved, not committed, so 10,000 idle
     * connections cost their touched pages only. */
    if (o->tls_cert_pem)
        s->d = MHD_start_daemon(
            flags, 0, NULL, NULL, http_handler, s, MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log, s,
            MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT, max_conn,
            MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_CONNECTION_TIMEOUT, idle,
            MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1024 * 1024), MHD_OPTION_LISTEN_BACKLOG_SIZE,
            (unsigned)4096, MHD_OPTION_NOTIFY_COMPLETED, http_completed, s,
            MHD_OPTION_URI_LOG_CALLBACK, http_uri_seen, s, MHD_OPTION_HTTPS_MEM_CERT,
            o->tls_cert_pem, MHD_OPTION_HTTPS_MEM_KEY, o->tls_key_pem, MHD_OPTION_END);
    else
        s->d = MHD_start_daemon(
            flags, 0, NULL, NULL, http_handler, s, MHD_OPTION_EXTERNAL_LOGGER, http_mhd_log, s,
            MHD_OPTION_SOCK_ADDR, ai->ai_addr, MHD_OPTION_CONNECTION_LIMIT, max_conn,
            MHD_OPTION_PER_IP_CONNECTION_LIMIT, per_ip, MHD_OPTION_CONNECTION_TIMEOUT, idle,
            MHD_OPTION_THREAD_STACK_SIZE, (size_t)(1024 * 1024), MHD_OPTION_LISTEN_BACKLOG_SIZE,
            (unsigned)4096, MHD_OPTION_NOTIFY_COMPLETED, http_completed, s,
            MHD_OPTION_URI_LOG_CALLBACK, http_uri_seen, s, MHD_OPTION_END);
    if (!s->d) {
        rc = err_set(err, DDP_EUNAVAIL, "cannot listen on %s:%d (in use or not allowed)", o->host,
                     o->port);
        goto out;
    }
    const union MHD_DaemonInfo *info = MHD_get_daemon_info(s->d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = info ? info->port : o->port;
    *out = s;
    s = NULL;
out:
    if (ai)
        freeaddrinfo(ai);
    http_stop(s);
    return rc;
}

int http_port(struct ddpd_server *s)
{
    return s->port;
}

void http_stop(struct ddpd_server *s)
{
    if (!s)
        return;
    if (s->d)
        MHD_stop_daemon(s->d);
    free(s->bootstrap_token);
    free(s);
}
