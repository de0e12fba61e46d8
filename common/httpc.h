/*
 * httpc.h - a small HTTP/JSON client over libcurl, used by ddp-agent and ddpctl to talk to
 * ddpd. One struct httpc keeps one connection alive between calls; it is not thread safe
 * (use one per thread).
 *
 * Errors a person can act on: a transport failure becomes DDP_EUNAVAIL with
 * "cannot reach ddpd at http://127.0.0.1:8470: connection refused"; an error answer of
 * ddpd's gRPC-style shape becomes the matching DDP_E* code with ddpd's message.
 */
#ifndef DDP_COMMON_HTTPC_H
#define DDP_COMMON_HTTPC_H

#include <jansson.h>
#include <stdio.h>

#include "common/err.h"

struct httpc;

/* Copies base_url ("http://127.0.0.1:8470", no trailing slash needed) and token (may be
 * NULL: no Authorization header). Caller frees with httpc_free(). */
struct httpc *httpc_new(const char *base_url, const char *token);
void httpc_free(struct httpc *c);

/* Replaces the bearer token of later calls (copied; NULL or "": no Authorization header). */
void httpc_set_token(struct httpc *c, const char *token);

/* Sends one more header line ("Name: value", copied) with the later calls; NULL: none. */
void httpc_set_header(struct httpc *c, const char *line);

/* Trust this CA file for https URLs (copied). */
void httpc_set_ca_file(struct httpc *c, const char *path);

const char *httpc_base_url(const struct httpc *c);

/* Maximum answer body kept; larger answers fail with DDP_ETOOBIG. */
#define HTTPC_MAX_BODY (64u << 20)

/*
 * Sends METHOD base_url+path with body (borrowed, may be NULL) as JSON.
 * On any HTTP answer returns 0 and sets *status; *answer (may be NULL to ignore) receives
 * the parsed JSON body (caller decrefs) or NULL when the body was empty or not JSON, and
 * *text (may be NULL) the raw body (caller frees).
 * On transport failure returns DDP_EUNAVAIL (or DDP_ETIMEOUT) and fills err.
 */
int httpc_request(struct httpc *c, const char *method, const char *path, const json_t *body,
                  long timeout_ms, long *status, json_t **answer, char **text, struct ddp_err *err);

/*
 * Like httpc_request, but any non-2xx answer is turned into an error: returns the DDP_E*
 * code of the answer's error.status and copies its error.message into err. On success
 * *answer (may be NULL) receives the JSON body; the caller decrefs it.
 */
int httpc_call(struct httpc *c, const char *method, const char *path, const json_t *body,
               long timeout_ms, json_t **answer, struct ddp_err *err);

/*
 * GETs base_url+path and writes a 2xx answer's body to out as it arrives, byte for byte
 * (binary-safe: a gzip file), at most max bytes (more fails with DDP_ETOOBIG). *written
 * (may be NULL) receives the count. A non-2xx answer is an error as in httpc_call, and
 * nothing of its body goes to out. On failure out may hold part of the body: the caller
 * removes the file.
 */
int httpc_download(struct httpc *c, const char *path, long timeout_ms, FILE *out,
                   unsigned long long max, unsigned long long *written, struct ddp_err *err);

#endif
