/*
 * httpc.h - a small HTTP/JSON client over libcurl, used by ddp-agent and ddpctl to talk to
 * ddpd. One struct httpc keeps one connection alive between calls; it is not thread safe
 * (use one per thread).
 *
 * ddpd may have several addresses (replicas of which one, the leader, serves: docs/ha.md).
 * Every call walks them the same way, all within the call's timeout_ms:
 *
 *  1. It goes to the sticky address first: the one that answered the last call.
 *  2. A 307 or 308 answer with a Location is followed with the same method, headers and
 *     body, at most HTTPC_MAX_HOPS - 1 redirects in a row, only to http(s) URLs and never
 *     from https down to http (srvlist_redirect_check). So is a 503 whose error.code is
 *     "not_leader" and whose error.leader names the leader: the same path is sent there.
 *     Authorization goes along only to one of the configured addresses, or to the leader
 *     that a configured address named in its not_leader answer; an unlisted Location gets
 *     the request without it.
 *  3. A connect failure, a timeout, a closed connection, a not_leader answer naming no
 *     leader, a refused redirect or a redirect loop moves on to the next address; after
 *     each round over all of them the walk waits (backoff.h: HTTPC_BACKOFF_MIN_MS, doubling
 *     to HTTPC_BACKOFF_MAX_MS), at most HTTPC_ROUNDS rounds.
 *  4. Resending: GET, HEAD, PUT and DELETE are sent again to the next address after any
 *     failure. POST and PATCH only when the call carries an Idempotency-Key header
 *     (httpc_set_header) or when nothing was sent (connection refused, host not found);
 *     otherwise the call fails at once, naming the address and those tried before, and the
 *     next call starts at the next address. A download that has written bytes is never
 *     sent again.
 *  5. Any other answer (2xx, 4xx, another 5xx) ends the walk: the configured address it
 *     began at, or the configured one that answered after a redirect, becomes sticky.
 *
 * Errors a person can act on: a transport failure becomes DDP_EUNAVAIL with
 * "cannot reach ddpd at http://127.0.0.1:8470: connection refused"; an error answer of
 * ddpd's gRPC-style shape becomes the matching DDP_E* code with ddpd's message.
 */
#ifndef DDP_COMMON_HTTPC_H
#define DDP_COMMON_HTTPC_H

#include <jansson.h>
#include <stddef.h>
#include <stdio.h>

#include "common/err.h"

struct httpc;

/* At most this many redirects and not_leader answers are followed in a row, plus one. */
#define HTTPC_MAX_HOPS 4
/* Rounds over all addresses per call, and the waits between rounds (ms). */
#define HTTPC_ROUNDS         3
#define HTTPC_BACKOFF_MIN_MS 100
#define HTTPC_BACKOFF_MAX_MS 1000

/* Copies servers, one base URL or a comma-separated list of them (srvlist.h; the callers
 * check it with srvlist_parse first: an invalid text is kept as one address whose calls
 * fail), and token (may be NULL: no Authorization header). Caller frees with httpc_free(). */
struct httpc *httpc_new(const char *servers, const char *token);
void httpc_free(struct httpc *c);

/* Replaces the bearer token of later calls (copied; NULL or "": no Authorization header). */
void httpc_set_token(struct httpc *c, const char *token);

/* Sends one more header line ("Name: value", copied) with the later calls; NULL: none. */
void httpc_set_header(struct httpc *c, const char *line);

/* Trust this CA file for https URLs (copied). */
void httpc_set_ca_file(struct httpc *c, const char *path);

/* The sticky address (borrowed, valid until the next call on c). */
const char *httpc_base_url(const struct httpc *c);
/* How many addresses c has. */
size_t httpc_server_count(const struct httpc *c);

/* Maximum answer body kept; larger answers fail with DDP_ETOOBIG. */
#define HTTPC_MAX_BODY (64u << 20)

/*
 * Sends METHOD path with body (borrowed, may be NULL) as JSON to ddpd's addresses as above.
 * On any HTTP answer but those that move on returns 0 and sets *status; *answer (may be NULL to ignore) receives
 * the parsed JSON body (caller decrefs) or NULL when the body was empty or not JSON, and
 * *text (may be NULL) the raw body (caller frees).
 * When no address answered returns DDP_EUNAVAIL (or DDP_ETIMEOUT, when the last try timed
 * out) and fills err.
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
 * GETs path (walking the addresses as above) and writes a 2xx answer's body to out as it arrives, byte for byte
 * (binary-safe: a gzip file), at most max bytes (more fails with DDP_ETOOBIG). *written
 * (may be NULL) receives the count. A non-2xx answer is an error as in httpc_call, and
 * nothing of its body goes to out. On failure out may hold part of the body: the caller
 * removes the file.
 */
int httpc_download(struct httpc *c, const char *path, long timeout_ms, FILE *out,
                   unsigned long long max, unsigned long long *written, struct ddp_err *err);

#endif
