/*
 * metrics.h - ddpd's own Prometheus counters (HTTP requests by route, method and code, request
 * latency histograms by route and method, long polls apart, heartbeats received) and the
 * /metrics text, which also carries the coordinator's live jobs and nodes (coord_stats()), the
 * store's health (coord_health()), the build and the process. Lock-free: counters are C11
 * atomics, safe from any thread.
 */
#ifndef DDP_SERVER_METRICS_H
#define DDP_SERVER_METRICS_H

#include <stdint.h>

struct coord;

/* Routes are numbered by the caller (http.c's table); names are borrowed for the life of
 * the process. At most METRICS_MAX_ROUTES routes. */
#define METRICS_MAX_ROUTES 32
void metrics_set_routes(const char *const *names, int n);

/* Counts one request on route (-1: no route matched) with method (the request's; one
 * outside the known list counts as "other") answered with HTTP status code,
 * which took ns nanoseconds. long_poll: the request may be held by design (a heartbeat's
 * long poll): its duration goes to ddp_http_long_poll_duration_seconds, not to
 * ddp_http_request_duration_seconds. */
void metrics_http(int route, const char *method, int code, int64_t ns, int long_poll);
void metrics_beat(void);
/* One heartbeat item for a rank its node does not hold (dropped). */
void metrics_beat_refused(void);

/* The Prometheus text exposition (version 0.0.4) at monotonic ms now; caller frees. */
char *metrics_render(struct coord *c, int64_t now);

#endif
