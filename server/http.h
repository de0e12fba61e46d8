/*
 * http.h - ddpd's HTTP front: libmicrohttpd daemon, static route table, body cap, auth,
 * gRPC-style error bodies. Handlers (api_*.c) see only struct api_req.
 */
#ifndef DDP_SERVER_HTTP_H
#define DDP_SERVER_HTTP_H

#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "common/err.h"
#include "server/auth.h"

#define HTTP_BODY_MAX (1024 * 1024)

struct coord;
struct gate;
struct replica;

struct ddpd_server;

/* One query argument of a request (borrowed from the request). */
struct api_arg {
    const char *key, *value;
};

/* The most query arguments a request may carry; more is a 400. */
#define HTTP_QUERY_MAX 16

struct api_req {
    struct coord *coord;     /* NULL only on a replica that does not lead (local routes) */
    struct replica *replica; /* cluster mode: this replica (server/replica.h), else NULL */
    int role;                /* enum gate_role of this replica when the request came */
    const char *leader;      /* the leader's base URL when known, else "" (borrowed) */
    const char *location;    /* the Location header of the answer, or NULL (borrowed) */
    const char *method;
    const char *path;
    const struct api_arg *args; /* the query arguments in request order (borrowed) */
    size_t nargs;
    int args_over;     /* more than HTTP_QUERY_MAX arguments were sent */
    int encoded_nul;   /* the request line held %00 (libmicrohttpd cuts the path there) */
    const char *param; /* the {id} / {name} / {file} part of the path, or "" */
    const char *body;  /* NUL-terminated; body_len bytes */
    size_t body_len;
    size_t body_total;           /* bytes the client sent (more than body_len when over the cap) */
    int64_t now;                 /* monotonic ms at dispatch */
    struct principal who;        /* the caller, resolved from its bearer token */
    const char *idempotency_key; /* the Idempotency-Key header, or NULL (borrowed) */
    /* the answer, set by the api_reply_* helpers */
    int status;
    char *out;                       /* owned, freed by http.c */
    const unsigned char *static_out; /* borrowed (embedded file) */
    size_t out_len;
    const char *content_type;
    char allow[64]; /* the Allow header of a 405, else "" */
    /* A streamed answer instead of out (api_reply_stream), owned: http.c calls
     * stream_read(stream_ctx, buf, size) for each piece (> 0 bytes written, 0 the end, < 0 an
     * error that cuts the connection) and stream_free(stream_ctx) once, when the answer is
     * done or dropped. */
    long (*stream_read)(void *ctx, char *buf, size_t size);
    void (*stream_free)(void *ctx);
    void *stream_ctx;
    char disposition[128]; /* the Content-Disposition header, or "" */
};

/* Query argument key of the request, or NULL. A key sent twice, a key the route does not take
 * and %00 are refused with a 400 naming them before any handler runs (http_dispatch). */
const char *api_query(struct api_req *r, const char *key);

/* Sets a JSON answer; takes ownership of text (malloc'd). */
void api_reply_json(struct api_req *r, int status, char *text);
/* Sets the error answer {"error": {...}} for err->code / err->msg. */
void api_reply_err(struct api_req *r, const struct ddp_err *err);
/* Same with a code and a message. */
void api_reply_errf(struct api_req *r, int code, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
/* The answer of a coord_* call: the error of e when rc is non-zero, else status with out
 * (taking it). */
void api_reply_result(struct api_req *r, int rc, int status, char *out, const struct ddp_err *e);
/* Sets a borrowed (static) answer. */
void api_reply_static(struct api_req *r, int status, const char *content_type,
                      const unsigned char *data, size_t len);

/* Sets a streamed answer of unknown length (sent chunked); takes ownership of ctx (freed
 * with free_fn, also when the answer is never sent). */
void api_reply_stream(struct api_req *r, int status, const char *content_type,
                      long (*read_fn)(void *ctx, char *buf, size_t size),
                      void (*free_fn)(void *ctx), void *ctx);
/* Frees what a dispatched request's answer still owns (out, a stream) without sending it:
 * for callers of http_dispatch() that send nothing (tests). */
void api_req_release(struct api_req *r);

/* Parses the body as a JSON object; on failure the 400 answer is already set and -1 is
 * returned. The caller owns *out (json_decref). */
int api_parse_body(struct api_req *r, json_t **out);

/* Reads an optional integer query argument in [min, max] (default def); on failure the 400
 * answer is set and -1 returned. */
int api_query_int(struct api_req *r, const char *key, int64_t min, int64_t max, int64_t def,
                  int64_t *out);

/* Handlers (api_jobs.c, api_nodes.c, api_misc.c). */
void api_jobs_submit(struct api_req *r);
void api_jobs_list(struct api_req *r);
void api_jobs_get(struct api_req *r);
void api_jobs_cancel(struct api_req *r);
void api_jobs_update(struct api_req *r);
void api_jobs_events(struct api_req *r);
void api_jobs_metrics(struct api_req *r);
void api_jobs_logs(struct api_req *r);
void api_jobs_logs_download(struct api_req *r);
void api_jobs_delete(struct api_req *r);
void api_nodes_register(struct api_req *r);
void api_nodes_heartbeat(struct api_req *r);
void api_nodes_list(struct api_req *r);
void api_nodes_remove(struct api_req *r);
void api_nodes_cordon(struct api_req *r);
void api_nodes_drain(struct api_req *r);
void api_nodes_uncordon(struct api_req *r);
void api_users_update(struct api_req *r);
void api_groups_list(struct api_req *r);
void api_groups_get(struct api_req *r);
void api_groups_put(struct api_req *r);
void api_users_me(struct api_req *r);
void api_users_list(struct api_req *r);
void api_users_add(struct api_req *r);
void api_users_remove(struct api_req *r);
void api_users_rotate(struct api_req *r);
void api_cluster_get(struct api_req *r);
void api_cluster_add(struct api_req *r);
void api_cluster_remove(struct api_req *r);
void api_misc_healthz(struct api_req *r);
void api_misc_readyz(struct api_req *r);
void api_misc_metrics(struct api_req *r);
void api_misc_openapi(struct api_req *r);
void api_misc_index(struct api_req *r);
void api_misc_ui(struct api_req *r);

struct http_opts {
    const char *host; /* "" = every address */
    int port;
    const char *bootstrap_token; /* the agents' registration token; borrowed for the call */
    const char *tls_cert_pem;    /* NULL: plain HTTP */
    const char *tls_key_pem;
    unsigned max_connections; /* at once, in all (0: 16384) */
    unsigned per_ip;          /* at once from one address (0: 512) */
    unsigned idle_timeout_s;  /* a connection silent this long is closed: a request head or
                               * body that stalls, or keep-alive between requests (0: 10) */
};

/* Starts the daemon; requests enter the coordinator through gate g (server/gate.h; borrowed,
 * must outlive the daemon); rep is this replica in cluster mode, else NULL. *out is stopped
 * with http_stop(). */
int http_start(const struct http_opts *o, struct gate *g, struct replica *rep,
               struct ddpd_server **out, struct ddp_err *err);
/* The port actually bound (useful with port 0). */
int http_port(struct ddpd_server *s);
void http_stop(struct ddpd_server *s);

/* Dispatch without a network (tests, fuzzing): routes method + path with the given
 * Authorization header value (or NULL), query arguments and body; fills r's answer. r->coord
 * must be set; user tokens and node credentials are the coordinator's, bootstrap is the
 * registration token. Order of the checks: %00 (400), route (404), method (405), auth
 * (401/403), body size (413), query arguments (400), then the handler. */
void http_dispatch(struct api_req *r, const char *authorization, const char *bootstrap,
                   int *route_out);

#endif
